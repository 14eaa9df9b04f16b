//! Unit tests of the shard rule: host names, the documented table, the
//! environment variable, and what refusals say.

use super::*;

/// What a host name gets under the default layout.
#[derive(Debug, PartialEq)]
enum Outcome {
    Shard(u32),
    Warning,
    OutOfRange,
    Refused,
}

fn outcome(host: &str) -> Outcome {
    match shard_from_hostname(host, &Layout::DEFAULT) {
        Ok(Some(shard)) => Outcome::Shard(shard),
        Ok(None) => Outcome::Warning,
        Err(Error::UnusableHostname {
            problem: HostnameProblem::OutOfRange { .. },
            ..
        }) => Outcome::OutOfRange,
        Err(Error::UnusableHostname { .. }) => Outcome::Refused,
        Err(e) => panic!("{host}: unexpected error {e}"),
    }
}

/// Every row of the table in this module's docs holds.
#[test]
fn the_documented_table_holds() {
    let docs = include_str!("mod.rs");
    let mut rows = 0;
    for line in docs.lines().filter(|l| l.starts_with("//! | `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let host = cells[1].trim_matches('`');
        let want = match cells[2] {
            "0, with a warning" => Outcome::Warning,
            "refused: out of range" => Outcome::OutOfRange,
            "refused" => Outcome::Refused,
            n => Outcome::Shard(n.parse().unwrap_or_else(|_| panic!("row {line}"))),
        };
        assert_eq!(outcome(host), want, "{host}");
        rows += 1;
    }
    assert!(rows >= 19, "the table in shard/mod.rs has {rows} rows");
}

#[test]
fn host_names() {
    use Outcome::*;
    let cases = [
        ("web-7", Shard(7)),
        ("node-007", Shard(7)),
        ("node-007.prod.example.com", Shard(7)),
        ("web-31", Shard(31)),
        ("web-0", Shard(0)),
        ("db3", Shard(3)),
        ("api31", Shard(31)),
        ("WEB-7", Shard(7)),
        ("api-2.prod", Shard(2)),
        ("web_12", Shard(12)),
        ("7", Shard(7)),
        ("rack2-node-7", Shard(7)),
        ("k8s-node-3", Shard(3)),
        ("us-east-db3", Shard(3)),
        ("web-000000000000000000000000007", Shard(7)),
        ("db", Warning),
        ("", Warning),
        ("host", Warning),
        ("web-", Warning),
        ("web.42", Warning),
        ("db.us-east-2", Warning),
        ("win10-desktop", Warning),
        ("DESKTOP-ABCDEFG", Warning),
        ("web-32", OutOfRange),
        ("web-45", OutOfRange),
        ("web-99999999999999999999999", OutOfRange),
        ("x99999999999999999999999999", OutOfRange),
        ("a1b2c3d4e5f6", Refused),
        ("A1B2C3D4E5F6", Refused),
        ("deadbeefcafe", Refused),
        ("123456789012", Refused),
        (
            "4f9c2a7b1e3d5f6a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a",
            Refused,
        ),
        ("web-5f7c9-abc1", Refused),
        ("api-6c8d9-xyz1", Refused),
        ("coredns-558bd4d5db-7ksqm", Refused),
        ("web-bcdfg-24567", Refused),
        ("web-bcdf2-hjkl9", Refused),
        ("my-app-66b6c48dd5-4jw2p.cluster.local", Refused),
        ("web-7a", Refused),
        ("desktop-7h3k2lq", Refused),
        ("DESKTOP-7H3K2LQ", Refused),
        ("a1b2", Refused),
        ("ip-10-0-3-17", Refused),
        ("ip-10-0-3-17.ec2.internal", Refused),
    ];
    for (host, want) in cases {
        assert_eq!(outcome(host), want, "{host}");
    }
}

#[test]
fn refusals_say_why_and_what_to_do() {
    let l = Layout::DEFAULT;
    for (host, why) in [
        ("a1b2c3d4e5f6", "container id"),
        ("web-5f7c9-abc1", "Kubernetes Deployment pod"),
        ("web-7a", "\"7a\""),
        ("ip-10-0-3-17", "IP address"),
    ] {
        let err = shard_from_hostname(host, &l).unwrap_err().to_string();
        for needle in [host, why, "IDUTIL_SHARD", "StatefulSet", "Redis"] {
            assert!(err.contains(needle), "{host}: {needle:?} missing: {err}");
        }
    }
}

#[test]
fn out_of_range_reports_the_digits_as_written() {
    let l = Layout::DEFAULT;
    let err = shard_from_hostname("web-99999999999999999999999", &l).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("web-99999999999999999999999")
            && text.contains("number 99999999999999999999999 is out of range 0..=31"),
        "{text}"
    );
    assert!(!text.contains(&u64::MAX.to_string()), "{text}");
    assert_eq!(err.shard(), None, "no u64 holds it");

    let err = shard_from_hostname("node-045", &l).unwrap_err();
    assert!(
        err.to_string().contains("number 045 is out of range"),
        "{err}"
    );
    assert_eq!(err.shard(), Some(45));

    let wide = Layout::new(30, 0, 13, 10, 0).unwrap();
    assert_eq!(shard_from_hostname("web-45", &wide).unwrap(), Some(45));
}

#[test]
fn sources_tell_the_truth() {
    for (source, text) in [
        (ShardSource::Explicit, "set explicitly"),
        (ShardSource::Env, "from IDUTIL_SHARD"),
        (
            ShardSource::Hostname("web-7".into()),
            "from the number at the end of host name \"web-7\"",
        ),
        (
            ShardSource::Hostname("api-2.prod".into()),
            "from the number at the end of host name \"api-2.prod\" (short name \"api-2\")",
        ),
        (
            ShardSource::UnnumberedHostname("vm".into()),
            "the default: host name \"vm\" does not end in a number",
        ),
        (
            ShardSource::UnnumberedHostname("web.42".into()),
            "the default: host name \"web.42\" does not end in a number \
             (its short name \"web\", before the first '.', does not)",
        ),
        (ShardSource::Lease, "leased"),
    ] {
        assert_eq!(source.to_string(), text);
    }
}

#[test]
fn env_values() {
    assert_eq!(parse_env(" 12 ".into()).unwrap(), 12);
    for bad in ["", "x", "-1", "7a", "3.0", "99999999999999999999999"] {
        let err = parse_env(bad.into()).unwrap_err();
        assert!(err.to_string().contains(env::SHARD), "{err}");
        assert!(!err.to_string().contains(&u64::MAX.to_string()), "{err}");
    }
}

#[test]
fn explicit_shard_is_checked() {
    let l = Layout::DEFAULT;
    assert_eq!(resolve_shard(Some(31), &l).unwrap().0, 31);
    assert!(resolve_shard(Some(32), &l).is_err());
}
