//! The `idutil` command with a Redis lease.

use idutil_harness as harness;

use std::process::Command;

use idutil::lease::LeaseConfig;
use idutil::Generator;
use idutil_harness::child::{self, MARK};
use idutil_harness::redis_server::{seed_records, RedisServer};
use idutil_harness::state_dir;

use crate::leased;

/// The command: `--lease URL` and `IDUTIL_LEASE_URL` lease the shard,
/// `idutil state` shows the leases, and with every shard leased `idutil
/// next` fails with the clear error and status 1.
#[test]
fn command_leases_and_shows_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // The command uses the default 10 s TTL: records left by earlier
    // holders spare each shard's first use that wait.
    seed_records(&redis, 0..=31);
    let bin = env!("CARGO_BIN_EXE_idutil");
    let dir = state_dir();
    let run = |args: &[&str], env_url: bool| {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("IDUTIL_STATE_DIR", dir.path())
            .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_LEASE_URL");
        if env_url {
            cmd.env("IDUTIL_LEASE_URL", redis.url());
        }
        cmd.output().unwrap()
    };
    let ids = harness::printed_ids;
    let url = redis.url();
    let first = ids(&run(&["--lease", &url, "next", "-n", "3"], false));
    let second = ids(&run(&["next", "-n", "3"], true));
    assert!(first.windows(2).all(|w| w[0] < w[1]));
    assert!(
        second[0] > first[2],
        "the second run resumes after the first"
    );

    // A live holder shows up in `idutil state`.
    let elsewhere = state_dir();
    let holder = leased(&elsewhere, LeaseConfig::new(url.clone()))
        .open()
        .unwrap();
    let out = run(&["--lease", &url, "state", "--json"], false);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["leases"][holder.shard() as usize];
    assert!(row["holder"]
        .as_str()
        .unwrap()
        .contains(&std::process::id().to_string()));
    assert!(row["expires_in_ms"].as_u64().unwrap() > 0);
    let text = String::from_utf8(run(&["--lease", &url, "state"], false).stdout).unwrap();
    assert!(text.contains("1 of 32 shards leased"), "{text}");

    // Every shard leased: a clear error, status 1.
    let others: Vec<Generator> = (0..31)
        .map(|_| {
            leased(&elsewhere, LeaseConfig::new(url.clone()))
                .open()
                .unwrap()
        })
        .collect();
    let out = run(&["--lease", &url, "next"], false);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no free shard: all 32 shards"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(others);
}

/// An empty or blank Redis URL is a usage error, never a lease silently
/// turned off (the shard would then come from the host name): `--lease ''`
/// and a blank `IDUTIL_LEASE_URL` exit 2 with one line; the library's
/// `LeaseConfig::from_env` and `Builder::open` return `InvalidEnv`.
#[test]
fn blank_redis_url_is_a_usage_error() {
    let dir = state_dir();
    {
        let bin = env!("CARGO_BIN_EXE_idutil");
        let run = |args: &[&str], env: Option<&str>| {
            let mut cmd = Command::new(bin);
            cmd.args(args)
                .env("IDUTIL_STATE_DIR", dir.path())
                .env("IDUTIL_SHARD", "1")
                .env_remove("IDUTIL_LEASE_URL");
            if let Some(v) = env {
                cmd.env("IDUTIL_LEASE_URL", v);
            }
            cmd.output().unwrap()
        };
        for (args, env) in [
            (&["--lease", "", "next"][..], None),
            (&["--lease", "  ", "next"][..], None),
            (&["next"][..], Some(" ")),
            (&["next"][..], Some("")),
            (&["state"][..], Some("\t")),
        ] {
            let out = run(args, env);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?} {env:?}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("lease URL is empty or blank"), "{err}");
        }
        // `--redis`, a name from before the first release, is gone.
        let out = run(&["--redis", "redis://127.0.0.1:1", "next"], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("unexpected argument '--redis'"), "{err}");
    }
    let child = |value: &str| {
        let out = child::child_command(
            "env_child_process",
            &[
                ("IDUTIL_LEASE_URL", value.to_string()),
                ("IDUTIL_STATE_DIR", dir.path().display().to_string()),
            ],
        )
        .output()
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = |name: &str| {
            text.lines()
                .find_map(|l| {
                    l.split_once(&format!("{MARK}{name} "))
                        .map(|p| p.1.to_string())
                })
                .unwrap_or_else(|| panic!("no {name} line in {text}"))
        };
        (line("from_env"), line("open"))
    };
    for blank in ["", " ", " \t "] {
        let (from_env, open) = child(blank);
        assert_eq!(from_env, "err true", "{blank:?}");
        assert!(open.starts_with("err true: "), "{blank:?}: {open}");
        assert!(open.contains("IDUTIL_LEASE_URL"), "{open}");
    }
}

/// `idutil lease check URL` names each setting the Redis lease refuses
/// (`appendonly no`, an evicting `maxmemory-policy`: `fail`, exit status
/// one) and each it warns about (`appendfsync` other than `always`,
/// `DEBUG` allowed), and passes a server set up as the lease asks. A
/// chained replica is named too (`failover`).
#[test]
fn lease_check_names_each_unsafe_setting() {
    let check = |redis: &RedisServer| {
        let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
            .args(["lease", "check", &redis.url()])
            .env_remove("IDUTIL_LEASE_URL")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let fails = text.lines().filter(|l| l.starts_with("fail")).count();
        (out.status.code().unwrap(), text, fails)
    };
    let Some(unsafe_one) = RedisServer::start_with(&[
        "--appendonly",
        "no",
        "--maxmemory",
        "5mb",
        "--maxmemory-policy",
        "allkeys-lru",
        "--enable-debug-command",
        "yes",
    ]) else {
        return;
    };
    let (code, text, fails) = check(&unsafe_one);
    assert_eq!((code, fails), (1, 2), "{text}");
    for (verdict, topic, what) in [
        ("fail", "durability", "appendonly no"),
        ("fail", "eviction", "maxmemory-policy allkeys-lru"),
        ("warn", "debugging", "enable-debug-command yes"),
        ("ok", "connection", "Redis "),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{verdict:<4} {topic}: ")) && l.contains(what)),
            "no {verdict} {topic} line naming {what}:\n{text}"
        );
    }
    let Some(everysec) = RedisServer::start_with(&["--appendfsync", "everysec"]) else {
        return;
    };
    let (code, text, _) = check(&everysec);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("warn durability: appendfsync everysec")),
        "{text}"
    );
    let Some(good) = RedisServer::start() else {
        return;
    };
    seed_records(&good, 0..=0);
    let (code, text, _) = check(&good);
    assert_eq!(code, 0, "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("warn") || l.starts_with("fail")),
        "{text}"
    );
    assert!(
        text.contains("ok   durability: appendfsync always"),
        "{text}"
    );
    assert!(
        text.contains("ok   records: 1 shard record(s) confirmed"),
        "{text}"
    );
}
