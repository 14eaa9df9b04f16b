//! Child processes running library code: the test binary re-executed to run one entry point.
//!
//! The protocol: [`spawn_child`] (or [`ChildProc::spawn`]) starts the test
//! binary running only one `#[ignore]`d test with [`CHILD_ENV`] set, which
//! is the entry point: without [`CHILD_ENV`] it returns at once. Its
//! settings come in `IDUTIL_CHILD_*` variables. It reports on stdout in
//! lines that start with [`MARK`] (`@id N`, `@ready`, `@leased N`, ...), so
//! libtest's own output is ignored; a line cut short by a kill is ignored
//! too. Entry points sit at the root of their test crate, where a test's
//! name is the function's own (in a module it would be `module::name`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::ids::parse_id;
use crate::space::space_for;

/// Set in the environment of a re-executed test binary: the child entry
/// points do nothing without it.
pub const CHILD_ENV: &str = "IDUTIL_TEST_CHILD";

/// Starts every line a child reports, so libtest's own output is ignored.
pub const MARK: &str = "@";

/// Marks an ID line printed by a child.
pub const ID_MARK: &str = "@id ";

/// Marks the line a child prints once it has done its work and waits.
pub const READY_MARK: &str = "@ready";

/// The current test binary set to run only the test `name`, with `envs`
/// set (after the shard, state directory and Redis URL of the parent's
/// environment are removed), stdin and stdout piped and stderr inherited.
pub fn child_command(name: &str, envs: &[(&str, String)]) -> Command {
    set_up(Command::new(test_binary()), name, envs)
}

/// [`child_command`] run through `wrapper`, a program that runs the
/// command given as its last arguments (`setpriv` as another user, ...).
pub fn child_command_through(mut wrapper: Command, name: &str, envs: &[(&str, String)]) -> Command {
    wrapper.arg(test_binary());
    set_up(wrapper, name, envs)
}

fn test_binary() -> PathBuf {
    std::env::current_exe().expect("the test binary's path")
}

/// Adds the arguments and the environment that run only the entry point
/// `name` to `cmd`, which runs the test binary.
fn set_up(mut cmd: Command, name: &str, envs: &[(&str, String)]) -> Command {
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_ENV, "1")
    .env_remove("IDUTIL_SHARD")
    .env_remove("IDUTIL_STATE_DIR")
    .env_remove("IDUTIL_LEASE_URL")
    .env_remove("IDUTIL_LAYOUT")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
        if *k == "IDUTIL_CHILD_DIR" {
            cmd.env("IDUTIL_ID_SPACE", space_for(v));
        }
    }
    cmd
}

/// Starts [`child_command`].
pub fn spawn_child(name: &str, envs: &[(&str, String)]) -> Child {
    child_command(name, envs)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn child {name}: {e}"))
}

/// A running child whose marked lines are read one at a time, killed when
/// dropped.
pub struct ChildProc {
    /// The process.
    pub child: Child,
    out: Option<BufReader<ChildStdout>>,
}

impl ChildProc {
    /// Starts [`child_command`] with stderr discarded.
    pub fn spawn(name: &str, envs: &[(&str, String)]) -> ChildProc {
        ChildProc::start(child_command(name, envs))
    }

    /// Starts `cmd` (made by [`child_command`], then changed) with stderr
    /// discarded.
    pub fn start(mut cmd: Command) -> ChildProc {
        let mut child = cmd
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn child {cmd:?}: {e}"));
        let out = Some(BufReader::new(child.stdout.take().unwrap()));
        ChildProc { child, out }
    }

    /// Hands the rest of the output to a thread that sends each marked line
    /// (without the mark) with the time it arrived.
    pub fn follow(&mut self) -> mpsc::Receiver<(String, Instant)> {
        let mut out = self.out.take().expect("output followed once");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            while let Some(text) = next_marked(&mut out) {
                if tx.send((text, Instant::now())).is_err() {
                    return;
                }
            }
        });
        rx
    }

    /// Writes a line to the child's stdin (the signal to go on).
    pub fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Reads IDs up to `@done` (or the end of the output).
    pub fn ids_until_done(&mut self) -> (Vec<u64>, bool) {
        let mut ids = Vec::new();
        for line in self.by_ref() {
            if line == "done" {
                return (ids, true);
            }
            if let Some(id) = line.strip_prefix("id ") {
                ids.push(id.parse().unwrap());
            }
        }
        (ids, false)
    }
}

/// The child's marked lines, without the mark.
impl Iterator for ChildProc {
    type Item = String;

    /// The next complete marked line; `None` at the end of the output (a
    /// killed child's last line may be cut short: it is left out).
    fn next(&mut self) -> Option<String> {
        next_marked(self.out.as_mut().expect("output not followed"))
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next complete line of `out` that holds [`MARK`], from after the
/// mark; `None` at the end (or at a last line cut short).
fn next_marked(out: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        match out.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) if !line.ends_with('\n') => return None,
            Ok(_) => {}
        }
        if let Some(i) = line.find(MARK) {
            return Some(line[i + MARK.len()..].trim_end().to_string());
        }
    }
}

/// Whether this process is a child started by [`spawn_child`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// A required child setting.
pub fn child_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// Parses a child's output: IDs from complete `@id` lines (a line cut
/// short by a kill is ignored); whether it printed the ready mark.
pub fn child_ids(text: &str) -> (Vec<u64>, bool) {
    let mut ids = Vec::new();
    let mut ready = false;
    // Only newline-terminated lines are complete.
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    for line in complete.lines() {
        if let Some(i) = line.find(ID_MARK) {
            ids.push(parse_id(&line[i + ID_MARK.len()..]));
        }
        if line.contains(READY_MARK) {
            ready = true;
        }
    }
    (ids, ready)
}

/// Reads a child's stdout until the ready mark, returning the IDs before
/// it; panics if the child ends first. (The children fail fast and stop on
/// their own, so this cannot block for long.)
pub fn read_until_ready(out: ChildStdout) -> (Vec<u64>, BufReader<ChildStdout>) {
    let mut reader = BufReader::new(out);
    let mut ids = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read child output");
        assert!(n > 0, "the child ended before it was ready");
        let (mut got, ready) = child_ids(&line);
        ids.append(&mut got);
        if ready {
            return (ids, reader);
        }
    }
}

/// Reads a child's stdout past the ready mark up to its first ID line, so
/// that the child is known to be issuing (on a loaded machine it may take a
/// while to get there); returns every ID read (at least one) and the rest
/// of the stream. Panics if the child ends first.
pub fn read_until_issuing(out: ChildStdout) -> (Vec<u64>, BufReader<ChildStdout>) {
    let (mut ids, mut reader) = read_until_ready(out);
    let mut line = String::new();
    while ids.is_empty() {
        line.clear();
        let n = reader.read_line(&mut line).expect("read child output");
        assert!(n > 0, "the child ended before it issued an ID");
        ids.extend(child_ids(&line).0);
    }
    (ids, reader)
}

/// Reads everything left on a stream.
pub fn read_rest(mut r: impl Read) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).expect("read output");
    s
}

/// Kills a child with SIGKILL and reaps it.
pub fn sigkill(child: &mut Child) {
    // `Child::kill` sends SIGKILL on Unix.
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "the child was killed, not finished");
}

/// Sends `signal` (a name such as `TERM`) to a child.
pub fn send(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -s {signal}");
}

/// Waits for a child for at most `limit`; panics (after a SIGKILL) if it
/// does not end: a hang is a failure.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if Instant::now() > deadline {
            sigkill(child);
            panic!("the child did not stop within {limit:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Holds `IDUTIL_CHILD_N` shared `flock`s, each on a descriptor of its
/// own (so each is a line of `/proc/locks`), on files it makes in the
/// directory `IDUTIL_CHILD_LOCK_DIR`, a hundred locks a file (the kernel
/// walks a file's locks at each new one); prints the ready mark, and holds
/// them until stdin is closed: a host whose `/proc/locks` is large. Raises
/// its limit on open files as far as it may.
pub fn hold_flocks_child() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let n: usize = child_var("IDUTIL_CHILD_N").parse().expect("n");
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_LOCK_DIR"));
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .expect("raise the limit on open files");
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let path = dir.join(format!("lock-{}-{}", std::process::id(), i / 100));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .expect("open a file to lock");
        file.lock_shared().expect("flock the file");
        held.push(file);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY_MARK}")
        .and_then(|()| out.flush())
        .expect("write");
    drop(out);
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
}

fn child_builder() -> idutil::Builder {
    let shard: u32 = child_var("IDUTIL_CHILD_SHARD").parse().expect("shard");
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let mut b = idutil::Generator::builder().shard(shard).state_dir(dir);
    if let Ok(w) = std::env::var("IDUTIL_CHILD_WINDOW") {
        b = b.window(Duration::from_secs(w.parse().expect("window")));
    }
    b
}

/// Opens the shard, issues `IDUTIL_CHILD_N` IDs one by one (on a manual
/// clock at `IDUTIL_CHILD_TIME` if set), prints them and the ready mark,
/// then holds the shard until stdin is closed, and closes cleanly.
pub fn hold_shard_child() {
    let n: u64 = child_var("IDUTIL_CHILD_N").parse().expect("n");
    let b = child_builder();
    match std::env::var("IDUTIL_CHILD_TIME") {
        Ok(t) => hold(
            b.clock(idutil::ManualClock::new(t.parse().expect("time"))),
            n,
        ),
        Err(_) => hold(b, n),
    }
}

fn hold<C: idutil::Clock>(b: idutil::Builder<C>, n: u64) {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let g = b.open().expect("the child opens the shard");
    let mut text = String::new();
    for _ in 0..n {
        let id = g.next_id().expect("the child issues an ID");
        writeln!(text, "{ID_MARK}{id}").unwrap();
    }
    writeln!(text, "{READY_MARK} pid={}", std::process::id()).unwrap();
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .expect("write");
    drop(out);
    // Hold the shard until the parent closes our stdin (or dies).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    g.close().expect("the child closes the generator");
}

/// Opens the shard (window `IDUTIL_CHILD_WINDOW`), prints the ready mark,
/// then issues IDs and prints them in small flushed chunks until killed (or
/// stdout closes, or a minute passes): one at a time, or, with
/// `IDUTIL_CHILD_BATCH=k`, in batches of `k` of which it prints the first
/// and the last (a batch is consecutive), borrowing seconds fast. With
/// `IDUTIL_CHILD_PAUSE_MS=p` it sleeps `p` milliseconds after each chunk
/// (64 IDs, or 32 batches), issuing at a pace rather than flat out.
pub fn issue_until_killed_child() {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let batch: Option<u64> = std::env::var("IDUTIL_CHILD_BATCH")
        .ok()
        .map(|k| k.parse().expect("batch size"));
    let pause = std::env::var("IDUTIL_CHILD_PAUSE_MS")
        .ok()
        .map(|p| Duration::from_millis(p.parse().expect("pause")));
    let g = child_builder().open().expect("the child opens the shard");
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY_MARK}")
        .and_then(|()| out.flush())
        .expect("write");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut chunk = String::with_capacity(4096);
    while Instant::now() < deadline {
        chunk.clear();
        for _ in 0..32 {
            match batch {
                None => {
                    for _ in 0..2 {
                        let id = g.next_id().expect("the child issues an ID");
                        writeln!(chunk, "{ID_MARK}{id}").unwrap();
                    }
                }
                Some(k) => {
                    let mut ids = g.next_ids(k).expect("the child issues a batch");
                    let first = ids.next().expect("a batch of at least one");
                    let last = ids.last().unwrap_or(first);
                    writeln!(chunk, "{ID_MARK}{first}").unwrap();
                    if last != first {
                        writeln!(chunk, "{ID_MARK}{last}").unwrap();
                    }
                }
            }
        }
        if out
            .write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
        if let Some(pause) = pause {
            thread::sleep(pause);
        }
    }
}

/// Opens the shard and issues `IDUTIL_CHILD_RATE` IDs a second, one call
/// at a time, for `IDUTIL_CHILD_FOR_MS` milliseconds, printing each ID and
/// then the ready mark, and closes cleanly (killed earlier, it prints what
/// it issued up to then, in flushed lines). A member that keeps pace with
/// the clock, far below the shard's 65,536 IDs a second.
pub fn issue_at_rate_child() {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let rate: u64 = child_var("IDUTIL_CHILD_RATE").parse().expect("rate");
    let run_for = Duration::from_millis(child_var("IDUTIL_CHILD_FOR_MS").parse().expect("ms"));
    let g = child_builder().open().expect("the child opens the shard");
    let mut out = std::io::stdout().lock();
    let start = Instant::now();
    let mut issued = 0u64;
    let mut chunk = String::new();
    while start.elapsed() < run_for {
        // Catch up with the pace every 10 ms.
        let due = rate * u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX) / 1000;
        chunk.clear();
        while issued < due {
            let id = g.next_id().expect("the child issues an ID");
            writeln!(chunk, "{ID_MARK}{id}").unwrap();
            issued += 1;
        }
        out.write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .expect("write");
        thread::sleep(Duration::from_millis(10));
    }
    g.close().expect("the child closes the generator");
    writeln!(out, "{READY_MARK}")
        .and_then(|()| out.flush())
        .expect("write");
}

/// Issues `IDUTIL_CHILD_N` IDs through the process-wide
/// [`IdUtil::next_id`](idutil::IdUtil::next_id), which takes its shard and
/// state directory from the environment as an application's test does,
/// prints them and exits (the exit closes the generator).
pub fn issue_through_idutil_child() {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let n: u64 = child_var("IDUTIL_CHILD_N").parse().expect("n");
    let mut text = String::new();
    for _ in 0..n {
        writeln!(text, "{ID_MARK}{}", idutil::IdUtil::next_id()).unwrap();
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .expect("write");
}
