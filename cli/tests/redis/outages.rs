//! Redis restarted, hanging or dropping a reply under live holders: the
//! first raise after a restart, a quick close, a close whose reply is lost.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::time::Duration;

use idutil::lease::LeaseConfig;
use idutil_harness::redis_server::{seed_records, Proxy, RedisServer};
use idutil_harness::state_dir;

use crate::leased;

/// The first raise after Redis restarts goes through: the holder's
/// connection, which the restart closed, is replaced within the call, so a
/// routine restart costs no caller an error. Nothing else uses the
/// connection in between (the renewal thread has one of its own), so the
/// burst after the restart is the first to meet the closed one.
#[test]
fn a_raise_right_after_a_restart_goes_through() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=31);
    let host = state_dir();
    let config = LeaseConfig::new(redis.url()).ttl(Duration::from_secs(6));
    let g = leased(&host, config).open().unwrap();
    let mut seen = Tally::new();
    let before = g.next_ids(600_000).expect("a burst before the restart");
    seen.add(before.map(|i| i.as_u64()), "before the restart");
    redis.restart();
    let after = g
        .next_ids(600_000)
        .unwrap_or_else(|e| panic!("the first burst after the restart: {e}"));
    seen.add(after.map(|i| i.as_u64()), "after the restart");
    g.close().unwrap();
}

/// A Redis that stops answering under a holder: closing (explicitly, or by
/// dropping) returns within a few round-trip deadlines (a fifth of the TTL
/// each), even in the middle of a burst that waits on a raise.
#[test]
fn closing_while_redis_hangs_is_quick() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 10..=11);
    let proxy = Proxy::start(redis.port);
    harness::lease::assert_closing_while_the_store_hangs_is_quick(
        &[(0, true), (1, false)],
        Duration::from_secs(3),
        |round, host| {
            let config = LeaseConfig::new(proxy.url())
                .ttl(Duration::from_secs(3))
                .shards(10 + round..=10 + round);
            leased(host, config).open().unwrap()
        },
        || proxy.cut(),
        || proxy.heal(),
    );
}

/// The close's write (the exact last ID, the lease given back) runs in
/// Redis but its reply is lost with the connection: the call runs once
/// more on a new connection, and the command says nothing false about it
/// (the record holds the last ID, the lease is free).
#[test]
fn a_close_whose_reply_is_lost_reports_nothing_false() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    harness::redis_server::seed_records(&redis, 0..=31);
    let finish = [
        include_str!("../../../crates/lease-redis/src/scripts/check.lua"),
        include_str!("../../../crates/lease-redis/src/scripts/run.lua"),
        include_str!("../../../crates/lease-redis/src/scripts/finish.lua"),
    ]
    .concat();
    let mut conn = redis.conn();
    let sha: String = ::redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(&finish)
        .query(&mut conn)
        .unwrap();
    let port = harness::proxy::reply_dropping_proxy(redis.port, sha.into_bytes());
    let url = format!("redis://127.0.0.1:{port}/");
    let dir = state_dir();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["--lease", &url, "next", "-n", "3"])
        .env("IDUTIL_STATE_DIR", dir.path())
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_LEASE_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let ids = harness::printed_ids(&out);
    assert_eq!(ids.len(), 3, "{stderr}");
    let shard = (ids[2] & 31) as u32;
    let record = harness::redis_server::record_of(&mut conn, &format!("idutil:mark:{shard}"));
    assert!(!harness::redis_server::exists(
        &mut conn,
        &format!("idutil:lease:{shard}")
    ));
    assert!(
        record.contains_key("last"),
        "the last ID is recorded: {record:?}"
    );
    assert!(
        !stderr.contains("not given back cleanly"),
        "the lease was given back and the last ID recorded, yet:\n{stderr}"
    );
}
