//! The `idutil` command as scripts meet it: help for every sub-command,
//! exact output on success, and for every bad input an exit status of 2
//! (usage) or 1 (runtime) with a one-line reason on stderr, nothing on
//! stdout and never a panic. `next -n` streams: a reader that stops early
//! ends it cleanly, and memory does not grow with N. `decode` reads
//! standard input in a pipe; completions and the man page render.

use idutil_harness as harness;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod decode;
mod errors;
mod manual;
mod next;

const BIN: &str = env!("CARGO_BIN_EXE_idutil");
const TIMEOUT: Duration = Duration::from_secs(120);

/// `idutil` with a clean environment: shard 1 and `state_dir`, unless a
/// test overrides them.
fn idutil(state_dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("IDUTIL_STATE_DIR", state_dir)
        .env("IDUTIL_ID_SPACE", harness::space_for(state_dir))
        .env("IDUTIL_SHARD", "1")
        .env_remove("IDUTIL_LEASE_URL")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null());
    cmd
}

fn text(bytes: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(bytes.as_ref()).into_owned()
}

/// stderr without the library's warnings (`idutil: warning: ...`).
fn reason_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| !l.starts_with("idutil: warning: "))
        .collect()
}
