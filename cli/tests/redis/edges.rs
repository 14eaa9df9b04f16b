//! Servers and clocks at the edges: eviction, the end of the shard range, the year 2136.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator, Layout};
use idutil_harness::redis_server::{record_of, seed_records, RedisServer};
use idutil_harness::state_dir;

use crate::leased;

/// A Redis that evicts keys under memory pressure (`allkeys-lru` with a
/// `maxmemory`, as when it doubles as a cache) is refused at open, saying
/// what to set; `noeviction` with the same limit is fine.
/// Issues from `g` into `seen` until a call fails (the holder's renewal
/// found the store unsafe); that error. Within 5 s: fifteen renewals at
/// these tests' 1 s TTL.
fn issue_until_stopped<C: idutil::Clock>(g: &Generator<C>, seen: &mut Tally) -> Error {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match g.next_id() {
            Ok(id) => seen.add([u64::from(id)], "after"),
            Err(e) => return e,
        }
        assert!(Instant::now() < deadline, "the holder still issues");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn evicting_redis_is_refused_at_open() {
    let Some(redis) =
        RedisServer::start_with(&["--maxmemory", "5mb", "--maxmemory-policy", "allkeys-lru"])
    else {
        return;
    };
    seed_records(&redis, 0..=0);
    let host = state_dir();
    let err = leased(&host, LeaseConfig::new(redis.url()).shards(0..=0))
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("allkeys-lru") && text.contains("noeviction"),
        "{text}"
    );
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .exec(&mut redis.conn())
        .unwrap();
    leased(&host, LeaseConfig::new(redis.url()).shards(0..=0))
        .open()
        .unwrap();
}

/// Eviction switched on after open (`CONFIG SET` of `maxmemory` and an
/// evicting policy): the next renewal stops the holder for good with an
/// error naming the setting, and a new holder is refused at open. Nothing
/// is issued twice.
#[test]
fn eviction_switched_on_while_held_stops_the_holder() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=0);
    let host = state_dir();
    let config = LeaseConfig::new(redis.url())
        .shards(0..=0)
        .ttl(Duration::from_secs(1));
    let g = leased(&host, config.clone()).open().unwrap();
    let mut seen = Tally::new();
    seen.add(g.next_ids(1000).unwrap().map(u64::from), "before");
    let mut conn = redis.conn();
    for (name, value) in [("maxmemory", "100mb"), ("maxmemory-policy", "allkeys-lru")] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let err = issue_until_stopped(&g, &mut seen);
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("maxmemory-policy is allkeys-lru"), "{text}");
    thread::sleep(Duration::from_secs(1));
    assert!(g.next_id().is_err(), "stopped for good");
    drop(g);
    let again = leased(&state_dir(), config).open().unwrap_err();
    assert!(
        matches!(again, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{again}"
    );
}
/// `appendonly` switched off after open (`CONFIG SET appendonly no`): the
/// next renewal stops the holder for good with an error naming the
/// setting, and a new holder is refused at open until it is on again.
/// Nothing is issued twice.
#[test]
fn appendonly_switched_off_while_held_stops_the_holder() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=0);
    let config = LeaseConfig::new(redis.url())
        .shards(0..=0)
        .ttl(Duration::from_secs(1));
    let (host, again_host) = (state_dir(), state_dir());
    let g = leased(&host, config.clone()).open().unwrap();
    let mut seen = Tally::new();
    seen.add(g.next_ids(1000).unwrap().map(u64::from), "before");
    let set = |value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg(value)
            .query::<()>(&mut redis.conn())
            .unwrap()
    };
    set("no");
    let err = issue_until_stopped(&g, &mut seen);
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("appendonly is no"), "{err}");
    assert!(g.next_id().is_err(), "stopped for good");
    drop(g);
    let again = leased(&state_dir(), config.clone()).open().unwrap_err();
    assert!(
        matches!(again, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{again}"
    );
    set("yes");
    let g = leased(&again_host, config).open().unwrap();
    seen.add(g.next_ids(1000).unwrap().map(u64::from), "again");
}

/// A record whose mark is the layout's last second (one host with a clock
/// in 2136) is skipped, naming its key, so the rest of the fleet goes on;
/// `rediss://` is refused with what to do instead.
#[test]
fn a_shard_at_the_end_of_the_range_is_skipped_and_named() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=1);
    redis::cmd("HSET")
        .arg("idutil:mark:0")
        .arg("high_water")
        .arg(Layout::DEFAULT.last_unix_second())
        .exec(&mut redis.conn())
        .unwrap();
    let host = state_dir();
    let g = leased(&host, LeaseConfig::new(redis.url()).shards(0..=1))
        .open()
        .unwrap();
    assert_eq!(g.shard(), 1, "shard 0 is skipped");
    drop(g);
    let err = leased(&host, LeaseConfig::new(redis.url()).shards(0..=0))
        .open()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no free shard")
            && text.contains("idutil:mark:0")
            && text.contains("last second"),
        "{text}"
    );
    let err = leased(&host, LeaseConfig::new("rediss://127.0.0.1:1/"))
        .open()
        .unwrap_err();
    assert!(
        err.to_string().contains("rediss://") && err.to_string().contains("tunnel"),
        "{err}"
    );
}

/// A host clock that reads the end of the layout's range (2136) for a
/// moment right after a holder opened (before its first renewal has told
/// it Redis's clock), ten times over on one shard: the mark never moves
/// there, and the next holder opens on the shard.
#[test]
fn clock_at_2136_right_after_open_neither_ends_nor_shifts_the_shard() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 12..=12);
    // Each round's clock stands still while each holder's reservation
    // pushes the mark on: no lead cap in the way.
    let config = LeaseConfig::new(redis.url())
        .shards(12..=12)
        .max_lead(Duration::from_secs(3600));
    let mut seen = Tally::new();
    harness::lease::assert_a_moment_at_2136_neither_ends_nor_shifts_the_shard(
        100,
        |host| leased(host, config.clone()),
        |ids, who| seen.add(ids, who),
        || {
            record_of(&mut redis.conn(), "idutil:mark:12")["high_water"]
                .parse()
                .unwrap()
        },
    );
}
