//! The state directory as a trust boundary: relative paths, deleted or
//! replaced lock files and directories under a live generator, one shard
//! per host across state directories, symbolic links, FIFOs, devices,
//! modes, owners and deleted state files. Real processes of the command
//! and of a long-lived library user (this binary, re-executed).

use idutil_harness as harness;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};
use std::{fs, thread};

use harness::{ID_MARK, READY_MARK};

mod ground;
mod links;
mod modes;
mod usage;

/// Marks the error line a child prints when it stops issuing.
const ERROR_MARK: &str = "@error=";

/// A command that must fail fast: exit status 1 within 5 s; its stderr.
/// The requirement: a refusal (a deleted or replaced state directory, a
/// shard held elsewhere) is decided at open, without waiting on a lock
/// or a member; 5 s is a process's start and one open on a loaded
/// machine, and below the waits a refusal must not make (the generator's
/// `member_wait`, 5 s, plus a start).
fn refused(cmd: &mut Command, what: &str) -> String {
    let start = Instant::now();
    let out = harness::output_within(cmd, Duration::from_secs(10));
    let r = harness::Run::from_output(out).expect_code(1, what);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{what} took {:?}",
        start.elapsed()
    );
    r.stderr
}

fn private_dir() -> tempfile::TempDir {
    let dir = harness::state_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
#[ignore = "a child process entry point, run by the tests above"]
fn child_issue_until_error() {
    if !harness::is_child() {
        return;
    }
    use std::fmt::Write as _;
    let mut out = std::io::stdout().lock();
    let first = idutil::IdUtil::try_next_id().expect("the child opens the shard");
    writeln!(out, "{ID_MARK}{first}\n{READY_MARK}").unwrap();
    out.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut chunk = String::new();
    while Instant::now() < deadline {
        chunk.clear();
        let mut failed = None;
        for _ in 0..256 {
            match idutil::IdUtil::try_next_id() {
                Ok(id) => writeln!(chunk, "{ID_MARK}{id}").unwrap(),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = &failed {
            let line = e.to_string().replace('\n', " ");
            writeln!(chunk, "{ERROR_MARK}{line}").unwrap();
        }
        if out
            .write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
        if failed.is_some() {
            // A long-lived process goes on after a failed call: stay alive
            // (holding whatever the generator holds) until the parent
            // closes our stdin.
            drop(out);
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
#[ignore = "a child process entry point, run by the tests above"]
fn child_hold_shard() {
    if harness::is_child() {
        harness::hold_shard_child();
    }
}
