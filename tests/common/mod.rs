//! Shared fixtures for the integration tests: temporary state directories,
//! the `idutil` binary, child processes that run library code, output
//! parsing and a ledger that checks every ID ever seen for duplicates and
//! for the 53-bit limit.

// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idutil::{Id, Layout};

/// JavaScript's `Number.MAX_SAFE_INTEGER`: no ID may exceed it.
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// Set in the environment of a re-executed test binary: the child entry
/// points do nothing without it.
pub const CHILD_ENV: &str = "IDUTIL_TEST_CHILD";

/// Marks an ID line printed by a child, so libtest's own output is ignored.
pub const ID_MARK: &str = "@id=";

/// Marks the line a child prints once it has done its work and waits.
pub const READY_MARK: &str = "@ready";

/// A fresh, empty state directory, removed when dropped.
pub fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("idutil-test-")
        .tempdir()
        .expect("create a temporary state directory")
}

/// The ID space for generators on `dir`: one per state directory, so that
/// tests running in parallel on the same shard number do not refuse each
/// other through the per-host lock, while two generators on one directory
/// still meet there.
pub fn space_for(dir: impl AsRef<Path>) -> String {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: the same name in every process
    // of this build, children included.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.as_ref().hash(&mut h);
    format!("test-{:016x}", h.finish())
}

/// A generator builder on `dir`, in the ID space [`space_for`] it.
pub fn builder(dir: impl AsRef<Path>) -> idutil::Builder {
    idutil::Generator::builder()
        .id_space(space_for(&dir))
        .state_dir(dir.as_ref())
}

/// IDs from one generator per shard in `shards`, each on a manual clock
/// that runs from `t0` for `seconds` seconds, `per_second` IDs a second:
/// in issuing order, shard by shard.
pub fn ids_from_shards(shards: &[u32], t0: u64, seconds: u64, per_second: u64) -> Vec<Id> {
    let mut ids = Vec::new();
    for &shard in shards {
        let dir = state_dir();
        let clock = idutil::ManualClock::new(t0);
        let generator = builder(dir.path())
            .shard(shard)
            .clock(clock.clone())
            .open()
            .expect("open a generator");
        for second in 0..seconds {
            clock.set(t0 + second);
            ids.extend(generator.next_ids(per_second).expect("a batch"));
        }
    }
    ids
}

/// Says that a test skipped what it could not run, on stderr past libtest's
/// capture (which hides `eprintln!` of a passing test), so a plain
/// `cargo test` shows it.
pub fn skipped(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// The current wall-clock second.
pub fn wall_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Parses one decimal ID and checks the 53-bit limit.
pub fn parse_id(text: &str) -> u64 {
    let v: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("not an ID: {text:?}: {e}"));
    assert!(v <= MAX_SAFE, "ID {v} is above 2^53 - 1");
    v
}

/// Parses `idutil next` output: one ID per line, strictly increasing.
pub fn parse_ids(stdout: &str) -> Vec<u64> {
    let ids: Vec<u64> = stdout.lines().map(parse_id).collect();
    assert_increasing(&ids);
    ids
}

/// Parses the output of an `idutil next` that was killed: the complete
/// (newline-terminated) lines only.
pub fn parse_complete_ids(stdout: &str) -> Vec<u64> {
    match stdout.rfind('\n') {
        Some(i) => parse_ids(&stdout[..=i]),
        None => Vec::new(),
    }
}

/// Asserts strictly increasing (hence duplicate-free) order.
pub fn assert_increasing(ids: &[u64]) {
    if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
        panic!(
            "IDs not strictly increasing at {i}: {} then {}",
            ids[i],
            ids[i + 1]
        );
    }
}

/// Default-layout parts of an ID.
pub fn parts(id: u64) -> idutil::Parts {
    Id::new(id).expect("ID within 53 bits").parts()
}

/// Unix second of an ID under the default layout.
pub fn unix_second(id: u64) -> u64 {
    parts(id).seconds + Layout::DEFAULT.epoch()
}

/// Every ID seen in a test, in the order seen, across runs, processes and
/// crashes. Checks the 53-bit limit on the way in and duplicates at the end
/// (and whenever asked).
#[derive(Default)]
pub struct Ledger {
    ids: Vec<u64>,
    max: Option<u64>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records a run's IDs, in the order one generator issued them: they
    /// must be strictly increasing within the run.
    pub fn record(&mut self, run: &[u64]) {
        for &id in run {
            assert!(id <= MAX_SAFE, "ID {id} is above 2^53 - 1");
        }
        assert_increasing(run);
        self.ids.extend_from_slice(run);
        if let Some(&last) = run.last() {
            self.max = Some(self.max.map_or(last, |m| m.max(last)));
        }
    }

    /// Records a run that must start after every ID recorded so far.
    pub fn record_after_all(&mut self, run: &[u64]) {
        if let (Some(max), Some(&first)) = (self.max, run.first()) {
            assert!(
                first > max,
                "run starts at {first}, not after every earlier ID (highest {max}; \
                 {first} is {} s and sequence {} vs {} s and sequence {})",
                unix_second(first),
                parts(first).sequence,
                unix_second(max),
                parts(max).sequence,
            );
        }
        self.record(run);
    }

    /// The highest ID recorded.
    pub fn max(&self) -> Option<u64> {
        self.max
    }

    /// Every ID recorded, in the order recorded.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// Panics with the first duplicate, if any.
    pub fn assert_unique(&self) {
        let mut sorted = self.ids.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            panic!("duplicate ID {} among {} IDs", w[0], sorted.len());
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.assert_unique();
        }
    }
}

/// Checks a set of IDs issued by unrelated runs (not ordered) for
/// duplicates and the 53-bit limit.
pub fn assert_unique_set(ids: &[u64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    for &id in ids {
        assert!(id <= MAX_SAFE, "ID {id} is above 2^53 - 1");
        assert!(seen.insert(id), "duplicate ID {id}");
    }
}

/// A small deterministic PRNG (xorshift64*), seeded from
/// `IDUTIL_TEST_SEED` or the clock; the seed is printed so a failure can
/// be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env_or_time(test: &str) -> Rng {
        let seed = std::env::var("IDUTIL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: IDUTIL_TEST_SEED={seed}");
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
}

// ---------------------------------------------------------------------------
// The idutil binary.

/// The `idutil` binary built for these tests.
#[cfg(feature = "cli")]
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_idutil")
}

/// `idutil --shard S --state-dir D` with the environment cleared of
/// anything that could pick another shard or directory.
#[cfg(feature = "cli")]
pub fn idutil(shard: u32, dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", space_for(dir))
        .arg("--shard")
        .arg(shard.to_string())
        .arg("--state-dir")
        .arg(dir);
    cmd
}

/// `faketime`, or `None` after a loud skip message; under CI its absence
/// is a failure.
pub fn faketime() -> Option<&'static str> {
    let found = Command::new("faketime")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return Some("faketime");
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("faketime is not on PATH; CI must install it (apt-get install faketime)");
    }
    skipped(format_args!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: faketime is not on PATH, so the clock rollback of the\n\
         !!! real binary is NOT tested. Install it: apt-get install faketime\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}

/// What a finished command printed.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(out: Output) -> Run {
        Run {
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

/// Runs a command to completion within a time limit.
pub fn run(cmd: &mut Command) -> Run {
    Run::from_output(output_within(cmd, Duration::from_secs(60)))
}

/// Runs a command to completion, killing it if it takes longer than
/// `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            // Still running past the limit: SIGKILL by pid.
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            true
        } else {
            false
        }
    });
    let out = child.wait_with_output().expect("wait for the command");
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    assert!(!timed_out, "{cmd:?} ran longer than {limit:?}");
    out
}

/// `idutil next -n N` that must succeed: its IDs, strictly increasing.
#[cfg(feature = "cli")]
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

/// `idutil next -n N` running, its stdout and stderr piped.
#[cfg(feature = "cli")]
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
#[cfg(feature = "cli")]
pub fn state_json(shard: u32, dir: &Path) -> serde_json::Value {
    let r = run(idutil(shard, dir).args(["state", "--json"])).expect_code(0, "idutil state --json");
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

// ---------------------------------------------------------------------------
// Child processes running library code: the test binary re-executes itself
// to run one `#[ignore]`d entry-point test, which acts only when
// `CHILD_ENV` is set.

/// Starts the current test binary running only the test `name`, with
/// `envs` set, stdout piped (and stdin piped, for children that wait on
/// it).
pub fn spawn_child(name: &str, envs: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
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
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
        if *k == "IDUTIL_CHILD_DIR" {
            cmd.env("IDUTIL_ID_SPACE", space_for(v));
        }
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("spawn child {name}: {e}"))
}

/// Whether this process is a child started by [`spawn_child`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// A required child setting.
pub fn child_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// Parses a child's output: IDs from complete `@id=` lines (a line cut
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

/// The state file of a shard.
pub fn state_file(dir: &Path, shard: u32) -> PathBuf {
    idutil::state::state_path(dir, shard)
}

// ---------------------------------------------------------------------------
// Damaged state files.

/// Ways a state file can be damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// A line overwritten with NUL bytes (a torn write); the high-water
    /// number survives.
    Corrupt,
    /// Cut short in the middle of the high-water line: the number is lost.
    Truncated,
    /// A version this crate does not read.
    WrongVersion,
    /// A well-formed file for another layout.
    WrongLayout,
    /// A well-formed file for another shard.
    WrongShard,
    /// Bytes that are not UTF-8; the numbers survive.
    NonUtf8,
    /// Zero bytes: every number is lost.
    Empty,
}

impl Damage {
    pub const ALL: [Damage; 7] = [
        Damage::Corrupt,
        Damage::Truncated,
        Damage::WrongVersion,
        Damage::WrongLayout,
        Damage::WrongShard,
        Damage::NonUtf8,
        Damage::Empty,
    ];

    /// Whether the high-water line survives, legible and certain, so that
    /// recovery needs no time vouched for.
    pub fn keeps_the_mark(self) -> bool {
        match self {
            // A sound file, only for another layout.
            Damage::WrongLayout => true,
            // A changed byte fails the checksum, so no field is certain;
            // cut short, an unknown format, or another shard's marks.
            Damage::Corrupt
            | Damage::NonUtf8
            | Damage::Truncated
            | Damage::WrongVersion
            | Damage::WrongShard
            | Damage::Empty => false,
        }
    }

    /// Damages the state file in place; returns the damaged bytes.
    pub fn apply(self, path: &Path) -> Vec<u8> {
        let good = std::fs::read_to_string(path).expect("read the state file");
        let replace_once = |from: &str, to: &str| {
            assert!(good.contains(from), "{from:?} not in state file:\n{good}");
            good.replacen(from, to, 1).into_bytes()
        };
        let line_of = |key: &str| {
            good.lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key} line in:\n{good}"))
                .to_string()
        };
        let bytes = match self {
            Damage::Corrupt => {
                let line = line_of("seen_max");
                replace_once(&line, &"\0".repeat(line.len()))
            }
            Damage::Truncated => {
                let at = good.find("high_water = ").expect("high_water line") + 17;
                good.as_bytes()[..at].to_vec()
            }
            Damage::WrongVersion => replace_once("version = 2\n", "version = 99\n"),
            // Sound for its own layout (one clock bit taken from the
            // seconds), so only the layout is wrong.
            Damage::WrongLayout => {
                reseal(&replace_once("seconds:32 clock:0", "seconds:31 clock:1"))
            }
            Damage::WrongShard => {
                let line = line_of("shard =");
                let shard: u32 = line["shard =".len()..].trim().parse().expect("shard");
                reseal(&replace_once(
                    &format!("{line}\n"),
                    &format!("shard = {}\n", shard + 1),
                ))
            }
            Damage::NonUtf8 => {
                let mut b = good.into_bytes();
                b.splice(2..2, [0xff, 0xfe, 0x80]);
                b
            }
            Damage::Empty => Vec::new(),
        };
        std::fs::write(path, &bytes).expect("write the damaged state file");
        bytes
    }
}

/// A state file's text with its checksum line made to match again, as a
/// sound file written that way would have it.
pub fn reseal(text: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(text).expect("a state file is text");
    let at = text.find("checksum = ").expect("a checksum line");
    let sum = crc32fast::hash(&text.as_bytes()[..at]);
    format!("{}checksum = {sum:08x}\nend\n", &text[..at]).into_bytes()
}

// ---------------------------------------------------------------------------
// Bodies of the child entry points (each test crate wraps them in an
// `#[ignore]`d test).

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
/// and the last (a batch is consecutive), borrowing seconds fast.
pub fn issue_until_killed_child() {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let batch: Option<u64> = std::env::var("IDUTIL_CHILD_BATCH")
        .ok()
        .map(|k| k.parse().expect("batch size"));
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
    }
}
