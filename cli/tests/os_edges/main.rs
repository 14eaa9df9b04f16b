//! The command at the edges of the operating system: a read of the lock
//! file that fails, a state file restored from an older copy, a clock far
//! in the future for a moment, another local user on the per-host lock,
//! and output that cannot be written. Faults are real: `strace` injects
//! the failing system call, `setpriv` runs the other user, libfaketime
//! moves the clock.

use idutil_harness as harness;

use std::fs;
use std::process::Command;

mod clocks;
mod faults;
mod other_user;

/// `setpriv` to run a command as `nobody`, or `None` after a loud skip
/// (without `setpriv` or without root; under `CI=true`, a failure).
fn as_nobody() -> Option<Command> {
    let setpriv = harness::tool("setpriv", "util-linux", "another local user")?;
    if !rustix::process::geteuid().is_root() {
        // As the other tests that need root: a loud skip (CI runs as root).
        harness::skipped(format_args!(
            "SKIPPED: not root, so another local user is NOT tested"
        ));
        return None;
    }
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    Some(cmd)
}

/// Child entry point (run as another user): connects again and again to
/// the per-host socket names of shards 0 to 31 of `IDUTIL_FLOOD_SPACE`
/// (what earlier releases listened on), keeping hundreds of connections
/// open, and opens and probes `IDUTIL_FLOOD_FILE`, until killed.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_flood() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixStream};
    if !harness::is_child() {
        return;
    }
    let space = std::env::var("IDUTIL_FLOOD_SPACE").unwrap();
    let file = std::env::var("IDUTIL_FLOOD_FILE").unwrap();
    std::thread::spawn(move || loop {
        for _ in 0..1000 {
            let _ = fs::File::open(&file);
        }
        let _ = Command::new("flock")
            .args(["-s", "-n", &file, "true"])
            .status();
    });
    let mut open = Vec::new();
    loop {
        for shard in 0..32 {
            let name = format!("idutil/{space}/shard-{shard}");
            if let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) {
                if let Ok(s) = UnixStream::connect_addr(&addr) {
                    open.push(s);
                }
            }
        }
        if open.len() > 500 {
            open.clear();
        }
    }
}
