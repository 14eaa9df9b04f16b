//! Where the shard comes from, through the real binary: `--shard` >
//! `IDUTIL_SHARD` > the trailing digits of the host name. Host names are
//! set for real in a private UTS namespace (`unshare --uts`).

mod common;

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_idutil");

fn idutil(dir: &Path, env_shard: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("IDUTIL_STATE_DIR", dir)
        .env("IDUTIL_ID_SPACE", common::space_for(dir))
        .env_remove("IDUTIL_SHARD");
    if let Some(s) = env_shard {
        cmd.env("IDUTIL_SHARD", s);
    }
    cmd.output().expect("run idutil")
}

fn shard_of(out: &Output) -> u32 {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: idutil::Id = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    id.shard()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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
fn next_on_host(dir: &Path, host: &str) -> Option<Output> {
    let probe = Command::new("unshare").args(["--uts", "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let msg = "unshare --uts is not available (needs root or user namespaces)";
        assert!(std::env::var("CI").is_err(), "{msg}");
        eprintln!("SKIPPED host-name shard tests: {msg}");
        return None;
    }
    let script = format!("hostname {host} && exec {BIN} next");
    let out = Command::new("unshare")
        .args(["--uts", "sh", "-c", &script])
        .env("IDUTIL_STATE_DIR", dir)
        .env("IDUTIL_ID_SPACE", common::space_for(dir))
        .env_remove("IDUTIL_SHARD")
        .output()
        .expect("run unshare");
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
    ] {
        let Some(out) = next_on_host(dir.path(), host) else {
            return;
        };
        assert_eq!(shard_of(&out), want, "{host}");
        assert!(
            !stderr(&out).contains("warning"),
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

#[test]
fn host_name_digits_out_of_range_are_an_error_not_shard_0() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = next_on_host(dir.path(), "web-45") else {
        return;
    };
    assert_eq!(
        out.status.code(),
        Some(2),
        "a shard setting that cannot work"
    );
    assert!(out.stdout.is_empty(), "no ID on shard 0 or anywhere else");
    let err = stderr(&out);
    assert!(
        err.contains("web-45") && err.contains("out of range"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
