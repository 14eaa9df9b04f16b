//! The `idutil` command as scripts meet it: help for every sub-command,
//! exact output on success, and for every bad input an exit status of 2
//! (usage) or 1 (runtime) with a one-line reason on stderr, nothing on
//! stdout and never a panic. `next -n` streams: a reader that stops early
//! ends it cleanly, and memory does not grow with N. `decode` reads
//! standard input in a pipe; completions and the man page render.

use idutil_harness as harness;
use idutil_harness::{run, run_input, run_to};

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_idutil");
const TIMEOUT: Duration = Duration::from_secs(120);

/// `idutil` with a clean environment: shard 1 and `state_dir`, unless a
/// test overrides them.
fn idutil(state_dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("IDUTIL_STATE_DIR", state_dir)
        .env("IDUTIL_ID_SPACE", harness::space_for(state_dir))
        .env("IDUTIL_SHARD", "1")
        .env_remove("IDUTIL_REDIS_URL")
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

/// Sets up the state directory for a case; returns what to pass as
/// `--state-dir`, if anything.
type Setup = fn(&Path) -> Option<String>;

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    setup: Option<Setup>,
    /// Standard input, if any (else /dev/null).
    stdin: Option<&'static [u8]>,
    code: i32,
    /// A fragment the one-line reason must contain.
    why: &'static str,
}

const fn case(
    name: &'static str,
    args: &'static [&'static str],
    code: i32,
    why: &'static str,
) -> Case {
    Case {
        name,
        args,
        env: &[],
        setup: None,
        stdin: None,
        code,
        why,
    }
}

const fn with_env(mut c: Case, env: &'static [(&'static str, &'static str)]) -> Case {
    c.env = env;
    c
}

const fn with_setup(mut c: Case, setup: Setup) -> Case {
    c.setup = Some(setup);
    c
}

const fn with_stdin(mut c: Case, stdin: &'static [u8]) -> Case {
    c.stdin = Some(stdin);
    c
}

fn file_as_parent(dir: &Path) -> Option<String> {
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    Some(file.join("state").display().to_string())
}

fn state_file_is_a_directory(dir: &Path) -> Option<String> {
    std::fs::create_dir(dir.join("shard-1.state")).unwrap();
    None
}

fn state_dir_is_a_file(dir: &Path) -> Option<String> {
    let file = dir.join("plain-file");
    std::fs::write(&file, "").unwrap();
    Some(file.display().to_string())
}

fn corrupt_state_file(dir: &Path) -> Option<String> {
    std::fs::write(
        dir.join("shard-1.state"),
        "version = 1\nshard = \u{fffd}junk\n",
    )
    .unwrap();
    None
}

fn future_state_version(dir: &Path) -> Option<String> {
    std::fs::write(dir.join("shard-1.state"), "version = 99\nend\n").unwrap();
    None
}

const CASES: &[Case] = &[
    // IDs that are not IDs.
    case("junk ID", &["decode", "abc"], 2, "not a decimal integer"),
    case("negative ID", &["decode", "-1"], 2, "negative"),
    case(
        "negative ID after --",
        &["decode", "--", "-7"],
        2,
        "negative",
    ),
    case("2^53", &["decode", "9007199254740992"], 2, "above 2^53 - 1"),
    case(
        "far above 2^64",
        &["decode", "99999999999999999999999"],
        2,
        "above 2^53 - 1",
    ),
    case("empty ID", &["decode", ""], 2, "empty"),
    case("fraction", &["decode", "1.5"], 2, "not a decimal integer"),
    case("sign", &["decode", "+5"], 2, "not a decimal integer"),
    case("hex", &["decode", "0x1f"], 2, "not a decimal integer"),
    case("space", &["decode", " 5"], 2, "not a decimal integer"),
    case("newline", &["decode", "1\n2"], 2, "not a decimal integer"),
    case(
        "one bad among good",
        &["decode", "--json", "1452736581206048", "x"],
        2,
        "\"x\"",
    ),
    // IDs on standard input: the first bad line, by number.
    with_stdin(
        case("bad first line", &["decode"], 2, "bad input: line 1: invalid ID \"x\""),
        b"x\n1452736581206048\n",
    ),
    with_stdin(
        case("bad line after blanks", &["decode"], 2, "line 3: invalid ID \"-5\": negative"),
        b"\n  \n-5\n",
    ),
    with_stdin(
        case("bad word, --json", &["decode", "--json"], 2, "line 2: invalid ID \"1;2\""),
        b"\n1;2 3\n",
    ),
    with_stdin(
        case("2^53 on stdin", &["decode"], 2, "line 1: invalid ID \"9007199254740992\": above"),
        b"9007199254740992",
    ),
    with_stdin(
        case("invalid UTF-8 on stdin", &["decode"], 2, "line 2: not valid UTF-8"),
        b"\n\xff\xfe\n",
    ),
    with_stdin(
        case("a word too long", &["decode"], 2, "line 1: a word longer than 64 bytes"),
        &[b'7'; 5000],
    ),
    // Counts.
    case(
        "-n 1000000001",
        &["next", "-n", "1000000001"],
        2,
        "from 0 to 1000000000",
    ),
    case(
        "-n huge",
        &["next", "-n", "99999999999999999999999"],
        2,
        "from 0 to 1000000000",
    ),
    case("-n abc", &["next", "-n", "abc"], 2, "not a whole number"),
    case("-n -5", &["next", "-n", "-5"], 2, "from 0 to 1000000000"),
    case("-n empty", &["next", "-n", ""], 2, "not a whole number"),
    case(
        "-n missing value",
        &["next", "-n"],
        2,
        "a value is required",
    ),
    // Flags and commands.
    case(
        "unknown flag",
        &["next", "--bogus"],
        2,
        "unexpected argument '--bogus'",
    ),
    case(
        "unknown global flag",
        &["--bogus", "next"],
        2,
        "unexpected argument '--bogus'",
    ),
    case(
        "unknown subcommand",
        &["bogus"],
        2,
        "unrecognized subcommand 'bogus'",
    ),
    case(
        "mistyped subcommand",
        &["nxt"],
        2,
        "unrecognized subcommand 'nxt'; tip: a similar subcommand exists: 'next' (see 'idutil --help')",
    ),
    case(
        "unknown shell",
        &["completions", "tcsh"],
        2,
        "invalid value 'tcsh'",
    ),
    case("no shell", &["completions"], 2, "<SHELL>"),
    case("man page of no command", &["man", "nxt"], 2, "no command 'nxt'"),
    case("no subcommand", &[], 2, "a command is required"),
    case(
        "unknown state action",
        &["state", "bogus"],
        2,
        "unrecognized subcommand",
    ),
    case(
        "bad recover time",
        &["state", "recover", "--after", "soon"],
        2,
        "RFC 3339",
    ),
    case(
        "--state-dir without value",
        &["next", "--state-dir"],
        2,
        "a value is required",
    ),
    // Shards.
    case("--shard 32", &["--shard", "32", "next"], 2, "0..=31"),
    case("--shard -1", &["--shard", "-1", "next"], 2, "0..=31"),
    case("--shard abc", &["--shard", "abc", "next"], 2, "--shard"),
    with_env(
        case("IDUTIL_SHARD=abc", &["next"], 2, "IDUTIL_SHARD"),
        &[("IDUTIL_SHARD", "abc")],
    ),
    with_env(
        case("IDUTIL_SHARD=99", &["next"], 2, "shard 99"),
        &[("IDUTIL_SHARD", "99")],
    ),
    with_env(
        case("IDUTIL_SHARD=-3", &["next"], 2, "IDUTIL_SHARD"),
        &[("IDUTIL_SHARD", "-3")],
    ),
    with_env(
        case("IDUTIL_SHARD empty", &["state"], 2, "IDUTIL_SHARD"),
        &[("IDUTIL_SHARD", "")],
    ),
    // State directories and files.
    with_env(
        case("IDUTIL_STATE_DIR empty", &["next"], 2, "IDUTIL_STATE_DIR"),
        &[("IDUTIL_STATE_DIR", "")],
    ),
    case(
        "state dir under /dev/null",
        &["--state-dir", "/dev/null/x", "next"],
        1,
        "/dev/null/x",
    ),
    with_setup(
        case("state dir under a file", &["next"], 1, "a-file/state"),
        file_as_parent,
    ),
    with_setup(
        case("state dir is a file", &["next", "-n", "3"], 1, "plain-file"),
        state_dir_is_a_file,
    ),
    with_setup(
        case("state file is a directory", &["next"], 1, "shard-1.state"),
        state_file_is_a_directory,
    ),
    with_setup(
        case("state of a directory", &["state"], 1, "shard-1.state"),
        state_file_is_a_directory,
    ),
    with_setup(
        case("corrupt state file", &["next"], 1, "idutil state recover"),
        corrupt_state_file,
    ),
    with_setup(
        case(
            "corrupt state, --json",
            &["next", "--json"],
            1,
            "idutil state recover",
        ),
        corrupt_state_file,
    ),
    with_setup(
        case("future state version", &["next"], 1, "idutil state recover"),
        future_state_version,
    ),
];

#[test]
fn bad_input_exits_with_a_one_line_reason() {
    let mut failures = Vec::new();
    for c in CASES {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = idutil(dir.path());
        if let Some(state_dir) = c.setup.and_then(|setup| setup(dir.path())) {
            cmd.arg("--state-dir").arg(state_dir);
        }
        cmd.args(c.args);
        for (k, v) in c.env {
            cmd.env(k, v);
        }
        let out = match c.stdin {
            Some(input) => run_input(&mut cmd, input),
            None => run(&mut cmd),
        };
        let stderr = text(&out.stderr);
        let lines = reason_lines(&stderr);
        let problem = if out.status.code() != Some(c.code) {
            Some(format!("exit {:?}, expected {}", out.status.code(), c.code))
        } else if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
            Some("panicked".to_string())
        } else if !out.stdout.is_empty() {
            Some(format!("stdout is not empty: {:?}", text(&out.stdout)))
        } else if lines.len() != 1 || !lines[0].starts_with("idutil: ") {
            Some("stderr is not one `idutil: ...` line".to_string())
        } else if !lines[0].contains(c.why) {
            Some(format!("the reason lacks {:?}", c.why))
        } else {
            None
        };
        if let Some(problem) = problem {
            failures.push(format!("{}: {problem}\n    stderr: {stderr:?}", c.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_shard_in_use_is_a_runtime_error_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let holder = idutil::Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(1)
        .state_dir(dir.path())
        .open()
        .unwrap();
    let out = run(idutil(dir.path()).args(["next", "-n", "5"]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(reason_lines(&stderr).len(), 1, "{stderr}");
    let pid = std::process::id();
    assert!(
        stderr.contains("in use") && stderr.contains(&format!("pid {pid}")),
        "{stderr}"
    );
    holder.close().unwrap();
    // Released: the command works again.
    let out = run(idutil(dir.path()).args(["next", "-n", "5"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_failed_write_is_an_error_not_success() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("no /dev/full here; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["next", "-n", "10"][..],
        &["next", "--json"],
        &["decode", "--json", "5"],
    ] {
        let out = run_to(
            idutil(dir.path()).args(args),
            full.try_clone().unwrap().into(),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let lines = reason_lines(&stderr);
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(lines[0].contains("cannot write the output"), "{stderr}");
    }
}

#[test]
fn help_for_every_command_has_examples() {
    let dir = tempfile::tempdir().unwrap();
    for command in [
        &[][..],
        &["next"],
        &["decode"],
        &["state"],
        &["state", "recover"],
        &["completions"],
        &["man"],
    ] {
        for help in [vec!["--help"], vec!["-h"]] {
            let out = run(idutil(dir.path()).args(command).args(&help));
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{command:?} {help:?}");
            assert!(out.stderr.is_empty(), "{command:?}: {}", text(&out.stderr));
            assert!(stdout.contains("Usage: idutil"), "{command:?}: {stdout}");
            assert!(stdout.contains("Examples:"), "{command:?}: {stdout}");
            let example = format!("  idutil {}", command.join(" "));
            assert!(stdout.contains(example.trim_end()), "{command:?}: {stdout}");
        }
    }
    let out = run(idutil(dir.path()).args(["help", "decode"]));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("idutil decode 1452736581206048"));
    let out = run(idutil(dir.path()).arg("--version"));
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("idutil "));
}

#[test]
fn next_decode_and_state_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(idutil(dir.path()).args(["next", "-n", "3"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The only thing on stderr: the shard starts with no state file.
    assert_eq!(reason_lines(&text(&out.stderr)), Vec::<&str>::new());
    assert!(text(&out.stderr).contains("has no state file"));
    let ids: Vec<u64> = text(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        ids.iter().all(|&id| id < 1 << 53 && id & 31 == 1),
        "{ids:?}"
    );

    let out = run(idutil(dir.path()).args(["--shard", "4", "next", "--count", "2", "--json"]));
    let json: Vec<u64> = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(json.len(), 2);
    assert!(json.iter().all(|&id| id & 31 == 4));

    let out = run(idutil(dir.path()).args(["decode", "1452736581206048", "9007199254740991"]));
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        "id=1452736581206048 time=2021-12-13T13:53:03Z unix_seconds=1639403583 sequence=1 shard=0 clock=0\n\
         id=9007199254740991 time=2136-02-07T06:28:15Z unix_seconds=5241652095 sequence=65535 shard=31 clock=0\n"
    );
    let out = run(idutil(dir.path()).args(["decode", "--json", "1452736581206048"]));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v[0]["id"], 1452736581206048u64);
    assert_eq!(v[0]["time"], "2021-12-13T13:53:03Z");

    let out = run(idutil(dir.path()).args(["state", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v["shard"], 1);
    assert_eq!(v["state"]["last_issued"]["id"], ids[2], "the exact last ID");
}

/// Runs `idutil next -n N [--json]` and reads its output as it comes:
/// calls `at(pid)` once `at_line` IDs have arrived, and stops reading
/// (closing the pipe) after `stop_after` IDs, if given. Returns the exit
/// code, stderr and the number of IDs read.
fn stream(
    dir: &Path,
    n: u64,
    json: bool,
    stop_after: Option<u64>,
    at_line: u64,
    mut at: impl FnMut(u32),
) -> (Option<i32>, String, u64) {
    let mut cmd = idutil(dir);
    cmd.args(["next", "-n", &n.to_string()]);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A watchdog bounds the whole run.
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(TIMEOUT).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            return false;
        }
        true
    });
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = BufReader::with_capacity(1 << 16, child.stdout.take().unwrap());
    let mut count = 0u64;
    let mut called = false;
    loop {
        let buf = match stdout.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let len = buf.len();
        // One newline or comma ends each ID, in either format.
        count += buf.iter().filter(|&&b| b == b'\n' || b == b',').count() as u64;
        stdout.consume(len);
        if !called && count >= at_line {
            called = true;
            at(pid);
        }
        if stop_after.is_some_and(|s| count >= s) {
            break;
        }
    }
    drop(stdout); // the writer now gets EPIPE
    let status = child.wait().unwrap();
    let _ = done.send(());
    assert!(
        watchdog.join().unwrap(),
        "idutil next -n {n} did not finish within {TIMEOUT:?}"
    );
    (status.code(), stderr.join().unwrap(), count)
}

#[test]
fn a_reader_that_stops_early_ends_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // The shard's first run, which says it starts with no state file.
    assert!(run(idutil(dir.path()).arg("next")).status.success());
    for json in [false, true] {
        let (code, stderr, count) = stream(dir.path(), 1_000_000, json, Some(1), 0, |_| {});
        assert_eq!(code, Some(0), "json={json}: {stderr}");
        assert!(stderr.is_empty(), "json={json}: {stderr:?}");
        assert!(count < 1_000_000, "the whole output was read: {count}");
    }
    // And the shard is free again at once: the generator was closed.
    let out = run(idutil(dir.path()).args(["next"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Peak resident memory of a running process, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn next_streams_large_counts_in_flat_memory() {
    if peak_kib(std::process::id()).is_none() {
        eprintln!("no /proc here; skipping the memory check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let measure = |n: u64| {
        let mut peak = None;
        // Measure half-way, while the process is still writing.
        let (code, stderr, count) = stream(dir.path(), n, false, None, n / 2, |pid| {
            peak = peak_kib(pid)
        });
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(count, n, "every ID arrived");
        peak.expect("the process was still running")
    };
    let small = measure(50_000);
    let large = measure(5_000_000);
    eprintln!("peak memory: {small} KiB for 50,000 IDs, {large} KiB for 5,000,000");
    // Holding 5,000,000 IDs would take 40 MB as integers, far more as text.
    assert!(
        large < small + 8 * 1024,
        "peak memory grew with N: {small} KiB for 50,000 IDs, {large} KiB for 5,000,000"
    );
}

const VECTOR_LINE: &str =
    "id=1452736581206048 time=2021-12-13T13:53:03Z unix_seconds=1639403583 sequence=1 shard=0 clock=0\n";
const MAX_LINE: &str =
    "id=9007199254740991 time=2136-02-07T06:28:15Z unix_seconds=5241652095 sequence=65535 shard=31 clock=0\n";

#[test]
fn next_piped_into_decode() {
    let dir = tempfile::tempdir().unwrap();
    let mut next = idutil(dir.path())
        .args(["next", "-n", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idutil next");
    let pipe = next.stdout.take().unwrap();
    let decode = run(idutil(dir.path()).arg("decode").stdin(pipe));
    let next = next.wait_with_output().unwrap();
    assert!(next.status.success(), "next: {}", text(&next.stderr));
    let stdout = text(&decode.stdout);
    assert!(decode.status.success(), "decode: {}", text(&decode.stderr));
    assert!(decode.stderr.is_empty(), "{}", text(&decode.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| {
            let id = l.strip_prefix("id=").and_then(|r| r.split(' ').next());
            id.and_then(|id| id.parse().ok()).expect(l)
        })
        .collect();
    assert!(ids[0] < ids[1], "{ids:?}");
    for line in &lines {
        assert!(line.contains(" shard=1 clock=0"), "{line}");
    }
}

#[test]
fn decode_reads_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = b"1452736581206048\n\n   \n  9007199254740991 \r\n\t1452736581206048";
    let out = run_input(idutil(dir.path()).arg("decode"), input);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{VECTOR_LINE}{MAX_LINE}{VECTOR_LINE}")
    );

    // Arguments win over standard input.
    let out = run_input(
        idutil(dir.path()).args(["decode", "9007199254740991"]),
        b"junk\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), MAX_LINE);

    // Empty input: nothing to decode, not an error.
    let out = run_input(idutil(dir.path()).arg("decode"), b"");
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    let out = run_input(idutil(dir.path()).args(["decode", "--json"]), b"\n\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[]\n");
}

#[test]
fn a_bad_line_on_standard_input_stops_decoding_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let input = b"1452736581206048\n\nx\n9007199254740991\n";
    let out = run_input(idutil(dir.path()).arg("decode"), input);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "idutil: bad input: line 3: invalid ID \"x\": not a decimal integer\n"
    );
    // The good line before it is out; nothing after it is.
    assert_eq!(text(&out.stdout), VECTOR_LINE);

    // With --json, what came before is an unclosed array: not valid JSON.
    let out = run_input(idutil(dir.path()).args(["decode", "--json"]), input);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("line 3: "),
        "{}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("[{\"id\":1452736581206048,"), "{stdout}");
    assert!(serde_json::from_str::<serde_json::Value>(&stdout).is_err());
}

#[test]
fn decode_json_keys_come_in_a_stable_order_id_first() {
    let dir = tempfile::tempdir().unwrap();
    let want = "[{\"id\":1452736581206048,\"time\":\"2021-12-13T13:53:03Z\",\"unix_seconds\":1639403583,\
                \"sequence\":1,\"shard\":0,\"clock\":0},\
                {\"id\":9007199254740991,\"time\":\"2136-02-07T06:28:15Z\",\"unix_seconds\":5241652095,\
                \"sequence\":65535,\"shard\":31,\"clock\":0}]\n";
    let args = ["decode", "--json", "1452736581206048", "9007199254740991"];
    let out = run(idutil(dir.path()).args(args));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), want);
    let out = run_input(
        idutil(dir.path()).args(["decode", "--json"]),
        b"1452736581206048\n9007199254740991\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), want, "the same from standard input");
}

#[test]
fn decode_from_a_terminal_asks_for_ids_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    // `script` gives the command a terminal for standard input.
    let Ok(out) = Command::new("script")
        .args(["-qec", &format!("{BIN} decode"), "/dev/null"])
        .env("IDUTIL_STATE_DIR", dir.path())
        .stdin(Stdio::null())
        .output()
    else {
        harness::skipped(format_args!(
            "SKIPPED: no `script` command to give idutil a terminal"
        ));
        return;
    };
    let output = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{output}");
    assert!(
        output.contains("usage error: no IDs") && output.contains("'idutil decode --help'"),
        "{output}"
    );
}

#[test]
fn usage_errors_keep_clap_s_tips_and_point_to_the_command_s_help() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needles) in [
        (
            &["nxt"][..],
            &[
                "tip: a similar subcommand exists: 'next'",
                "(see 'idutil --help')",
            ][..],
        ),
        (
            &["state", "recovr"],
            &[
                "tip: a similar subcommand exists: 'recover'",
                "(see 'idutil state --help')",
            ],
        ),
        (
            &["next", "--jsn"],
            &[
                "unexpected argument '--jsn'",
                "tip: a similar argument exists: '--json'",
                "(see 'idutil next --help')",
            ],
        ),
        (
            &["decode", "abc"],
            &["invalid ID \"abc\"", "(see 'idutil decode --help')"],
        ),
        (
            &["--state-dir", "decode", "next", "-n", "-3"],
            &["from 0 to 1000000000", "(see 'idutil next --help')"],
        ),
        (
            &["--shard", "9", "state", "recover", "--after", "soon"],
            &["RFC 3339", "(see 'idutil state recover --help')"],
        ),
        (
            &[],
            &["a command is required: next, decode, state, completions, man"],
        ),
    ] {
        let out = run(idutil(dir.path()).args(args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("idutil: usage error: "), "{stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: {needle:?} missing: {stderr}"
            );
        }
    }
}

#[test]
fn completions_for_every_shell() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(idutil(dir.path()).args(["completions", shell]));
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for word in ["idutil", "decode", "recover", "state-dir"] {
            assert!(script.contains(word), "{shell}: no {word:?} in\n{script}");
        }
    }
    let out = run(idutil(dir.path()).args(["completions", "bash"]));
    assert!(text(&out.stdout).contains("complete -F _idutil"));
}

#[test]
fn the_man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    for (args, title) in [
        (&["man"][..], ".TH idutil 1"),
        (&["man", "decode"], ".TH idutil-decode 1"),
        (&["man", "state", "recover"], ".TH idutil-state-recover 1"),
    ] {
        let out = run(idutil(dir.path()).args(args));
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let page = text(&out.stdout);
        assert!(page.contains(title), "{args:?}:\n{page}");
        assert!(page.contains("\n.SH SYNOPSIS\n"), "{args:?}:\n{page}");
        assert!(page.contains("idutil 0."), "the version: {args:?}:\n{page}");
    }
    let page = text(&run(idutil(dir.path()).arg("man")).stdout);
    for section in ["decode", "completions", "Exit status"] {
        assert!(page.contains(section), "{section}:\n{page}");
    }
}

#[test]
fn completions_and_man_report_a_failed_write() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("no /dev/full here; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for args in [&["completions", "bash"][..], &["man"]] {
        let out = run_to(
            idutil(dir.path()).args(args),
            full.try_clone().unwrap().into(),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write the output"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn next_json_piped_into_decode_and_seconds_are_unix_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let next = run(idutil(dir.path()).args(["next", "-n", "1500", "--json"]));
    assert!(next.status.success(), "{}", text(&next.stderr));
    let ids: Vec<u64> = serde_json::from_str(&text(&next.stdout)).unwrap();
    // One line of about 25 KB: read as words, not as one ID per line.
    let decode = run_input(
        idutil(dir.path()).args(["decode", "--json"]),
        next.stdout.as_bytes(),
    );
    assert!(decode.status.success(), "{}", text(&decode.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&decode.stdout)).unwrap();
    assert_eq!(rows.len(), ids.len());
    for (row, &id) in rows.iter().zip(&ids) {
        assert_eq!(row["id"], id);
        let typed = idutil::Id::from_u64(id).unwrap();
        // One meaning of seconds: the library's `unix_seconds`.
        assert_eq!(row["unix_seconds"], typed.unix_seconds());
        assert!(row.get("seconds").is_none());
    }
    // The string form's array too, and IDs several to a line.
    let quoted = format!("[\"{}\",\n\"{}\"] {}\n", ids[0], ids[1], ids[2]);
    let out = run_input(idutil(dir.path()).arg("decode"), quoted.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    // An unclosed quote is no ID, and says where.
    let out = run_input(idutil(dir.path()).arg("decode"), b"1\n\"5\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("line 2: invalid ID"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn zero_ids_and_recovering_after_now() {
    let dir = tempfile::tempdir().unwrap();
    for (json, expected) in [(false, ""), (true, "[]\n")] {
        let mut args = vec!["next", "-n", "0"];
        if json {
            args.push("--json");
        }
        let out = run(idutil(dir.path()).args(&args));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected);
    }
    // A shard whose state file is gone and that issued nothing ahead of
    // the clock: "the current time" is `--after now`.
    let ids: Vec<u64> = text(&run(idutil(dir.path()).args(["next", "-n", "3"])).stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    std::fs::remove_file(dir.path().join("shard-1.state")).unwrap();
    let out = run(idutil(dir.path()).arg("next"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--after TIME"),
        "{}",
        text(&out.stderr)
    );
    let out = run(idutil(dir.path()).args(["state", "recover", "--after", "now"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(idutil(dir.path()).arg("next"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after: u64 = text(&out.stdout).trim().parse().unwrap();
    assert!(after > *ids.last().unwrap());
}
