//! Bad input, refusals and failed writes: one-line reasons and exit statuses.

use idutil_harness as harness;

use std::path::Path;

use idutil_harness::{run, run_input, run_to};

use crate::{idutil, reason_lines, text};

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
        2,
        "/dev/null/x cannot be used: /dev/null above it is not a directory",
    ),
    with_setup(
        case(
            "state dir under a file",
            &["next"],
            2,
            "a-file/state cannot be used: ",
        ),
        file_as_parent,
    ),
    with_setup(
        case(
            "state dir is a file",
            &["next", "-n", "3"],
            2,
            "plain-file cannot be used: it is not a directory",
        ),
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
fn a_shard_in_use_from_another_state_directory_is_a_runtime_error_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let holder = idutil::Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(1)
        .state_dir(dir.path())
        .open()
        .unwrap();
    // The same state directory shares the shard with the holder.
    let out = run(idutil(dir.path()).args(["next", "-n", "5"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Another one, in the same ID space, is refused.
    let other = tempfile::tempdir().unwrap();
    let out = run(idutil(dir.path())
        .env("IDUTIL_STATE_DIR", other.path())
        .args(["next", "-n", "5"]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(reason_lines(&stderr).len(), 1, "{stderr}");
    let pid = std::process::id();
    assert!(
        stderr.contains("in use") && stderr.contains(&format!("pid {pid}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&dir.path().display().to_string())
            && stderr.contains(&other.path().display().to_string()),
        "{stderr}"
    );
    holder.close().unwrap();
    // Released: the command works there too.
    let out = run(idutil(dir.path())
        .env("IDUTIL_STATE_DIR", other.path())
        .args(["next", "-n", "5"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_failed_write_is_an_error_not_success() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        harness::skipped(format_args!(
            "SKIPPED a_failed_write_is_an_error_not_success: no /dev/full, so a failed \
             write of the command's output is NOT tested"
        ));
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
            &[if cfg!(lease) {
                "a command is required: next, decode, state, lease, completions, man"
            } else {
                "a command is required: next, decode, state, completions, man"
            }],
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

/// A build without a lease engine refuses `--lease` with what to build,
/// not as an unknown argument, in the words it refuses `IDUTIL_LEASE_URL`
/// with; both are usage errors (exit status 2) and issue nothing.
#[cfg(not(lease))]
#[test]
fn a_lease_asked_of_a_build_without_an_engine_names_the_features() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://app:secret@db/app";
    let reason = |args: &[&str], env: Option<&str>, setting: &str| {
        let mut cmd = idutil(dir.path());
        if let Some(url) = env {
            cmd.env("IDUTIL_LEASE_URL", url);
        }
        let out = run(cmd.args(args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("idutil: usage error: ")
                && stderr.contains("cargo features `postgres-lease`, `redis`")
                && stderr.contains("--features postgres-lease,redis")
                && !stderr.contains("secret"),
            "{args:?}: {stderr}"
        );
        stderr.replace(setting, "SETTING")
    };
    let by_flag = reason(&["--lease", url, "next"], None, "--lease");
    assert_eq!(
        reason(&["decode", "5", "--lease", url], None, "--lease"),
        by_flag
    );
    for args in [&["next"][..], &["state"]] {
        assert_eq!(reason(args, Some(url), "IDUTIL_LEASE_URL"), by_flag);
    }
    assert!(
        !harness::state_file(dir.path(), 1).exists(),
        "nothing issued"
    );
    // A command no lease changes ignores the variable, as a build with an
    // engine does.
    let out = run(idutil(dir.path())
        .env("IDUTIL_LEASE_URL", url)
        .args(["decode", "5"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}
