//! Holders one after another on different hosts, the later one's clock an hour behind.

use idutil_harness::Tally;

use std::time::Duration;

use idutil::lease::LeaseConfig;
use idutil::ManualClock;
use idutil_harness::redis_server::{seed_records, RedisServer};
use idutil_harness::{state_dir, wall_now};

use crate::{is_no_free_shard, leased};

/// Sequential holders of one shard on different hosts (separate state
/// directories): the second one's clock is an hour behind, yet it continues
/// right after the first one's last ID, and the first, coming back with its
/// own (older) state file, resumes after the second: the later of the
/// local file and Redis wins.
#[test]
fn later_holder_with_clock_an_hour_behind_resumes_after_the_previous() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 9..=9);
    // A short TTL and skew limit: the shard's use after the FLUSHALL below
    // waits one TTL, then starts past the lead cap and the skew limit.
    let config = LeaseConfig::new(redis.url())
        .shards(9..=9)
        .ttl(Duration::from_secs(1))
        .max_skew(Duration::from_secs(1));
    let (host_a, host_b) = (state_dir(), state_dir());
    let t = wall_now();
    let mut seen = Tally::new();

    let a = leased(&host_a, config.clone())
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    assert_eq!(a.shard(), 9);
    assert_eq!(*a.shard_source(), idutil::shard::ShardSource::Lease);
    // Borrow a few seconds ahead of the clock.
    let ids_a: Vec<u64> = a.next_ids(200_000).unwrap().map(|i| i.as_u64()).collect();
    assert!(a.lead() >= 2);
    // While it is held, nobody else gets the shard.
    let err = leased(&host_b, config.clone()).open().unwrap_err();
    assert!(is_no_free_shard(&err), "{err}");
    assert!(err.to_string().contains("no free shard"), "{err}");
    a.close().unwrap();
    let last_a = *ids_a.last().unwrap();
    seen.add(ids_a, "A");

    let b = leased(&host_b, config.clone())
        .clock(ManualClock::new(t - 3600))
        .open()
        .unwrap();
    let first_b = b.next_id().unwrap().as_u64();
    assert_eq!(
        first_b,
        last_a + 32,
        "B continues right after A's last ID (next sequence number, same shard)"
    );
    let ids_b: Vec<u64> = b.next_ids(1000).unwrap().map(|i| i.as_u64()).collect();
    let last_b = *ids_b.last().unwrap();
    seen.add([first_b], "B");
    seen.add(ids_b, "B");
    drop(b);

    // A again, on its own host: its state file says less than Redis does.
    let a2 = leased(&host_a, config.clone())
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    let first_a2 = a2.next_id().unwrap().as_u64();
    assert!(first_a2 > last_b);
    seen.add([first_a2], "A again");
    drop(a2);

    // Redis loses its data: the record is taken for one of unknown
    // history, and the shard starts past the lead cap (on this host, the
    // local state file would keep it from going back too). The clock
    // moves, so that the lead falls back under the cap.
    redis::cmd("FLUSHALL").exec(&mut redis.conn()).unwrap();
    let a3 = leased(&host_a, config).open().unwrap();
    let first_a3 = a3.next_id().unwrap().as_u64();
    assert!(first_a3 > first_a2);
    seen.add([first_a3], "A after FLUSHALL");
}
