//! `idutil lease check`: each setup the lease meets, audited line by line.

use std::process::Command;

use idutil::lease::LeaseConfig;
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::state_dir;

use crate::leased;

/// `idutil lease check URL ARGS...`: whether it succeeded, and its lines.
pub(crate) fn lease_check(url: &str, args: &[&str]) -> (bool, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["lease", "check", url])
        .args(args)
        .env_remove("IDUTIL_LEASE_URL")
        .env_remove("IDUTIL_REDIS_URL")
        .env_remove("IDUTIL_LAYOUT")
        .env_remove("IDUTIL_SHARD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(
            stderr.contains("lease check found"),
            "failed without saying why: {stderr}"
        );
    }
    (
        out.status.success(),
        stdout.lines().map(str::to_string).collect(),
    )
}

/// The line of `lines` that starts with `verdict` and `topic` and contains
/// `says`; panics naming them all if there is none.
pub(crate) fn line<'a>(lines: &'a [String], verdict: &str, topic: &str, says: &str) -> &'a str {
    let start = format!("{verdict:<4} {topic}: ");
    lines
        .iter()
        .find(|l| l.starts_with(&start) && l.contains(says))
        .unwrap_or_else(|| panic!("no `{start}...{says}...` line in:\n{}", lines.join("\n")))
}

/// A server with `fsync` on (the tests' default is off).
fn durable_server() -> Option<Postgres> {
    Postgres::start_tcp(&Options {
        max_connections: Some(50),
        settings: vec!["fsync=on".to_string()],
    })
}

/// A sound server passes (exit 0, every line ok); then a row that never
/// expires, a role without privileges, a missing schema, the tests'
/// `fsync = off`, and a host clock far off each give their `fail` line and
/// exit status 1. `--json` says the same.
#[test]
fn the_audit_names_what_is_safe_and_what_is_not() {
    let Some(pg) = durable_server() else { return };
    let url = pg.tcp_url();
    let (ok, lines) = lease_check(&url, &[]);
    assert!(ok, "{}", lines.join("\n"));
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{lines:?}");
    line(&lines, "ok", "durability", "fsync = on");
    line(&lines, "ok", "replication", "0 standby(s)");
    line(&lines, "ok", "pooler", "no pooler found");
    line(&lines, "ok", "schema", "does not exist yet");
    line(&lines, "ok", "privileges", "CREATE on the schema");
    line(&lines, "ok", "clock", "from the server's");

    leased(&state_dir(), LeaseConfig::new(&url).shards(0..=3))
        .open()
        .unwrap()
        .close()
        .unwrap();
    let (ok, lines) = lease_check(&url, &[]);
    assert!(ok, "{}", lines.join("\n"));
    line(&lines, "ok", "schema", "\"public\".\"idutil_lease\"");
    line(&lines, "ok", "privileges", "SELECT, INSERT, UPDATE");
    line(&lines, "ok", "shards", "32 of 32 shards");

    pg.psql("UPDATE idutil_lease SET expires_at = 'infinity', holder = 'gone' WHERE shard = 2");
    let (ok, lines) = lease_check(&url, &[]);
    assert!(!ok);
    line(&lines, "fail", "rows", "shard(s) 2 of ID space \"idutil\"");
    line(&lines, "ok", "shards", "31 of 32 shards");
    let (ok, lines) = lease_check(&url, &["--shard", "2"]);
    assert!(!ok);
    line(&lines, "fail", "shards", "0 of 1 shards");

    pg.psql("CREATE ROLE reader LOGIN");
    let reader = url.replace("postgres@", "reader@");
    let (ok, lines) = lease_check(&reader, &[]);
    assert!(!ok);
    line(&lines, "fail", "privileges", "lacks SELECT, INSERT, UPDATE");
    // The history table needs them too.
    pg.psql("GRANT SELECT, INSERT, UPDATE ON idutil_lease TO reader");
    let (ok, lines) = lease_check(&reader, &[]);
    assert!(!ok);
    let lacks = line(&lines, "fail", "privileges", "lacks SELECT, INSERT, UPDATE");
    assert!(
        lacks.contains("idutil_lease_history") && !lacks.contains("\"idutil_lease\")"),
        "{lacks}"
    );
    let (ok, lines) = lease_check(&format!("{url}&schema=nowhere"), &[]);
    assert!(!ok);
    line(&lines, "fail", "schema", "\"nowhere\" does not exist");

    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["lease", "check", &url, "--json"])
        .env_remove("IDUTIL_LEASE_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = doc.as_array().unwrap();
    assert!(found
        .iter()
        .any(|f| f["verdict"] == "fail" && f["topic"] == "rows"));
    assert!(found
        .iter()
        .all(|f| f["text"].as_str().is_some_and(|t| !t.is_empty())));

    // No URL at all: a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["lease", "check"])
        .env_remove("IDUTIL_LEASE_URL")
        .env_remove("IDUTIL_REDIS_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // The tests' usual server: fsync off.
    let Some(fast) = crate::server() else { return };
    let (ok, lines) = lease_check(&fast.tcp_url(), &[]);
    assert!(!ok);
    line(&lines, "fail", "durability", "fsync = off");
}

/// A check that finds a problem (here: no server to reach) fails with
/// status 1 and says the check failed, not that the output could not be
/// written.
#[test]
fn a_failed_check_is_not_reported_as_an_output_error() {
    let port = idutil_harness::proxy::free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args([
            "lease",
            "check",
            &format!("postgres://u:pw@127.0.0.1:{port}/db"),
        ])
        .env_remove("IDUTIL_LEASE_URL")
        .env_remove("IDUTIL_LAYOUT")
        .env_remove("IDUTIL_SHARD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lease check found 1 problem"), "{stderr}");
    assert!(
        !stderr.contains("cannot write the output"),
        "a failed check reported as a write error: {stderr}"
    );
}
