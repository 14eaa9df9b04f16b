//! The `idutil` command: finding it, running it to completion, reading what it printed.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::child::{read_rest, sigkill};
use crate::ids::{parse_complete_ids, parse_ids, parts};
use crate::skip::Faketime;
use crate::space::space_for;

/// The `idutil` binary built for these tests. Cargo names it in the
/// environment of the tests of the package that builds it, `idutil-cli`.
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("CARGO_BIN_EXE_idutil").unwrap_or_else(|_| {
            panic!(
                "CARGO_BIN_EXE_idutil is not set: tests that run the command \
                 belong to the idutil-cli package (cli/tests)"
            )
        })
    })
}

/// Copies the command to `dest`, mode 0755, for a test that runs it as
/// another user. The copy is made by `cp`, not by this process: a file this
/// process holds open for writing is inherited by every child another
/// test thread forks meanwhile, until that child's exec, and an exec of
/// the copy then fails with ETXTBSY ("Text file busy").
pub fn copy_bin_to(dest: &Path) {
    let copied = Command::new("cp")
        .arg(bin())
        .arg(dest)
        .status()
        .expect("run cp");
    assert!(copied.success(), "cp {} {}", bin(), dest.display());
    let chmod = Command::new("chmod")
        .arg("0755")
        .arg(dest)
        .status()
        .expect("run chmod");
    assert!(chmod.success(), "chmod 0755 {}", dest.display());
}

/// `idutil --shard S --state-dir D` with the environment cleared of
/// anything that could pick another shard or directory, and stdin from
/// `/dev/null`.
pub fn idutil(shard: u32, dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.stdin(Stdio::null())
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", space_for(dir))
        .arg("--shard")
        .arg(shard.to_string())
        .arg("--state-dir")
        .arg(dir);
    cmd
}

/// `idutil next -n 3` on `shard` in `dir` (which need not exist), its wall
/// clock set by libfaketime's `spec` (as [`Faketime::command`] takes it).
pub fn next_under_faketime(faketime: &Faketime, spec: &str, shard: u32, dir: &Path) -> Run {
    let mut cmd = idutil(shard, dir);
    faketime.apply(&mut cmd, spec);
    run(cmd.args(["next", "-n", "3"]))
}

/// How long a command may run before it is killed and its test fails.
pub const LIMIT: Duration = Duration::from_secs(120);

/// What a finished command printed.
pub struct Run {
    pub status: ExitStatus,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(out: Output) -> Run {
        Run {
            status: out.status,
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
        }
    }

    /// Panics (with both streams) unless the exit status is `code`.
    pub fn expect_code(self, code: i32, what: &str) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "{what}: exit status {:?}, expected {code}\nstdout: {}\nstderr: {}",
            self.code,
            truncated(&self.stdout),
            self.stderr
        );
        self
    }
}

fn truncated(s: &str) -> &str {
    &s[..s.len().min(2000)]
}

/// Runs a command to completion within [`LIMIT`], its stdout and stderr
/// piped (its stdin as the command says).
pub fn run(cmd: &mut Command) -> Run {
    Run::from_output(output_with(cmd, Stdio::piped(), None, LIMIT))
}

/// [`run`], with `stdout` as its standard output (which [`Run::stdout`]
/// then leaves empty).
pub fn run_to(cmd: &mut Command, stdout: Stdio) -> Run {
    Run::from_output(output_with(cmd, stdout, None, LIMIT))
}

/// [`run`], with `input` on its standard input.
pub fn run_input(cmd: &mut Command, input: &[u8]) -> Run {
    Run::from_output(output_with(cmd, Stdio::piped(), Some(input), LIMIT))
}

/// Runs a command with stdin from `/dev/null` to completion, killing it if
/// it takes longer than `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    output_with(cmd.stdin(Stdio::null()), Stdio::piped(), None, limit)
}

/// The one runner: starts `cmd` with `stdout` and stderr piped, writes
/// `input` (if any) to its stdin, and waits for it; past `limit` it kills
/// the command with SIGKILL and panics.
fn output_with(cmd: &mut Command, stdout: Stdio, input: Option<&[u8]>, limit: Duration) -> Output {
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let Some(input) = input {
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        // A command that stops reading early closes the pipe: not an error here.
        thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for the command"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
    }
}

/// `idutil next -n N` that must succeed: its IDs, strictly increasing.
pub fn next(shard: u32, dir: &Path, n: u64) -> Vec<u64> {
    let r =
        run(idutil(shard, dir).args(["next", "-n", &n.to_string()])).expect_code(0, "idutil next");
    let ids = parse_ids(&r.stdout);
    assert_eq!(
        ids.len() as u64,
        n,
        "idutil next -n {n} printed {}",
        ids.len()
    );
    for &id in &ids {
        assert_eq!(parts(id).shard, shard, "ID {id} from shard {shard}");
    }
    ids
}

/// The IDs a finished command printed, one per line; panics with its
/// stderr unless it succeeded.
pub fn printed_ids(out: &Output) -> Vec<u64> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// `idutil next -n N` running, its stdout and stderr piped.
pub fn spawn_next(shard: u32, dir: &Path, n: u64) -> Child {
    idutil(shard, dir)
        .args(["next", "-n", &n.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn idutil next")
}

/// Reads `lines` lines of a running `idutil next`, kills it with SIGKILL,
/// and returns every complete line it printed.
pub fn kill_after_lines(child: &mut Child, lines: u64) -> Vec<u64> {
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    for _ in 0..lines {
        reader.read_line(&mut text).expect("read idutil next");
    }
    sigkill(child);
    text.push_str(&read_rest(reader));
    parse_complete_ids(&text)
}

/// `idutil state --json`, parsed.
pub fn state_json(shard: u32, dir: &Path) -> serde_json::Value {
    let r = run(idutil(shard, dir).args(["state", "--json"])).expect_code(0, "idutil state --json");
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}
