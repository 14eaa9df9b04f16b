//! Where the shard comes from, through the real binary: `--shard` >
//! `IDUTIL_SHARD` > the number that ends the host name, where it numbers
//! the host (the crate docs' "The shard" has the rule and its table). Host
//! names are set for real in a private UTS namespace (`unshare --uts`).

use idutil_harness as harness;

use std::path::Path;
use std::process::Command;

use harness::Run;

const BIN: &str = env!("CARGO_BIN_EXE_idutil");

fn idutil(dir: &Path, env_shard: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("IDUTIL_STATE_DIR", dir)
        .env("IDUTIL_ID_SPACE", harness::space_for(dir))
        .env_remove("IDUTIL_SHARD");
    if let Some(s) = env_shard {
        cmd.env("IDUTIL_SHARD", s);
    }
    harness::run(&mut cmd)
}

fn shard_of(out: &Run) -> u32 {
    assert!(out.status.success(), "{}", out.stderr);
    let id: idutil::Id = out.stdout.trim().parse().unwrap();
    id.shard()
}

fn stderr(out: &Run) -> String {
    out.stderr.clone()
}

#[test]
fn explicit_beats_environment() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(shard_of(&idutil(dir.path(), Some("7"), &["next"])), 7);
    assert_eq!(
        shard_of(&idutil(dir.path(), Some("7"), &["--shard", "12", "next"])),
        12
    );
    // An explicit shard wins even over a malformed variable.
    assert_eq!(
        shard_of(&idutil(dir.path(), Some("junk"), &["--shard", "3", "next"])),
        3
    );
}

#[test]
fn a_malformed_or_out_of_range_variable_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    for (value, needle) in [
        ("abc", "IDUTIL_SHARD"),
        ("", "IDUTIL_SHARD"),
        ("-1", "IDUTIL_SHARD"),
        ("3.5", "IDUTIL_SHARD"),
        ("32", "out of range"),
        ("99999999999999999999999", "out of range"),
    ] {
        let out = idutil(dir.path(), Some(value), &["next"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "a bad setting is a usage error: IDUTIL_SHARD={value:?}"
        );
        let err = stderr(&out);
        assert!(err.contains(needle), "IDUTIL_SHARD={value:?}: {err}");
        assert!(out.stdout.is_empty());
        assert!(!err.contains("panicked"));
    }
}

/// Runs `idutil next` with the given host name, or `None` where private
/// UTS namespaces are unavailable.
fn next_on_host(dir: &Path, host: &str) -> Option<Run> {
    let probe = Command::new("unshare").args(["--uts", "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let msg = "unshare --uts is not available (needs root or user namespaces)";
        harness::skipped(format_args!("SKIPPED host-name shard tests: {msg}"));
        return None;
    }
    let script = format!("hostname {host} && exec {BIN} next");
    let out = harness::run(
        Command::new("unshare")
            .args(["--uts", "sh", "-c", &script])
            .env("IDUTIL_STATE_DIR", dir)
            .env("IDUTIL_ID_SPACE", harness::space_for(dir))
            .env_remove("IDUTIL_SHARD"),
    );
    Some(out)
}

#[test]
fn host_name_digits_choose_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    for (host, want) in [
        ("web-7", 7),
        ("node-007", 7),
        ("api31.example.com", 31),
        ("db-0", 0),
        ("db3", 3),
        ("api-2.prod", 2),
    ] {
        let Some(out) = next_on_host(dir.path(), host) else {
            return;
        };
        assert_eq!(shard_of(&out), want, "{host}");
        // No warning but the note that the shard has no state file yet.
        assert!(
            stderr(&out)
                .lines()
                .all(|l| !l.contains("warning") || l.contains("has no state file")),
            "{host}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_host_name_without_digits_gets_shard_0_and_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = next_on_host(dir.path(), "db") else {
        return;
    };
    assert_eq!(shard_of(&out), 0);
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("shard 0") && err.contains("duplicate"),
        "{err}"
    );
}

/// Asserts that `host` is refused: exit 2, no ID, one line on stderr
/// naming the host and containing each of `needles`.
fn assert_refused(dir: &Path, host: &str, needles: &[&str]) -> bool {
    let Some(out) = next_on_host(dir, host) else {
        return false;
    };
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{host}: a shard setting that cannot work: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{host}: no ID on shard 0 or anywhere else"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("{host:?}")), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "{host}: {needle:?} missing: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    true
}

#[test]
fn host_name_digits_out_of_range_are_an_error_not_shard_0() {
    let dir = tempfile::tempdir().unwrap();
    for (host, number) in [
        ("web-45", "45"),
        ("web-32", "32"),
        ("web-99999999999999999999999", "99999999999999999999999"),
    ] {
        let number = format!("number {number} is out of range 0..=31");
        if !assert_refused(dir.path(), host, &[&number, "IDUTIL_SHARD"]) {
            return;
        }
    }
    let Some(out) = next_on_host(dir.path(), "web-99999999999999999999999") else {
        return;
    };
    assert!(
        !stderr(&out).contains(&u64::MAX.to_string()),
        "{}",
        stderr(&out)
    );
}

#[test]
fn random_looking_host_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let advice = ["IDUTIL_SHARD", "StatefulSet ordinal (web-0, web-1", "Redis"];
    for (host, why) in [
        ("a1b2c3d4e5f6", "container id"),
        ("web-5f7c9-abc1", "Kubernetes Deployment pod"),
        ("api-6c8d9-xyz1", "Kubernetes Deployment pod"),
        ("web-7a", "mixes digits and letters"),
        ("ip-10-0-3-17", "IP address"),
    ] {
        let mut needles = vec![why];
        needles.extend(advice);
        if !assert_refused(dir.path(), host, &needles) {
            return;
        }
    }
}

#[test]
fn the_warning_names_the_short_name_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = next_on_host(dir.path(), "web.42") else {
        return;
    };
    assert_eq!(shard_of(&out), 0);
    let err = stderr(&out);
    assert!(
        err.contains("\"web.42\" does not end in a number") && err.contains("short name \"web\""),
        "{err}"
    );
}
