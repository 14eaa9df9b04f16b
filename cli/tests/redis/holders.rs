//! Holders in many processes: competing for shards, clocks behind, SIGKILL.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil::{Generator, ManualClock};
use idutil_harness::child::ChildProc;
use idutil_harness::redis_server::{seed_records, RedisServer};
use idutil_harness::{state_dir, wall_now};

use crate::{is_no_free_shard, lease_child, leased, open_when_free};

/// 40 processes compete for 32 shards: exactly 32 get one, each a different
/// shard, while all are held; the other 8 fail with the clear error rather
/// than share. Once the 32 close, 8 newcomers take shards and resume after
/// them. No ID appears twice.
#[test]
fn many_processes_compete_for_32_shards() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // Records left by earlier holders: no shard's first use to wait for.
    seed_records(&redis, 0..=31);
    let url = redis.url();
    let root = state_dir();
    let mut children: Vec<ChildProc> = (0..40)
        .map(|i| {
            lease_child(
                &url,
                5000,
                (0, 31),
                "batch",
                &root.path().join(format!("{i}")),
            )
        })
        .collect();
    let mut holders = Vec::new();
    let mut refused = 0;
    for (i, child) in children.iter_mut().enumerate() {
        let line = child.next().expect("child reports its lease");
        if let Some(shard) = line.strip_prefix("leased ") {
            holders.push((i, shard.parse::<u32>().unwrap()));
        } else {
            assert!(
                line.starts_with("failed no free shard: all 32 shards"),
                "child {i}: {line}"
            );
            refused += 1;
        }
    }
    let shards: HashSet<u32> = holders.iter().map(|h| h.1).collect();
    assert_eq!(holders.len(), 32, "exactly 32 of 40 hold a shard");
    assert_eq!(shards.len(), 32, "no shard is leased twice");
    assert_eq!(refused, 8);

    let mut seen = Tally::new();
    let mut max_per_shard = BTreeMap::new();
    for &(i, _) in &holders {
        children[i].go();
    }
    for &(i, shard) in &holders {
        let (ids, done) = children[i].ids_until_done();
        assert!(done, "child {i} finished");
        assert_eq!(ids.len(), 520);
        assert!(ids.iter().all(|id| id & 31 == u64::from(shard)));
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        max_per_shard.insert(shard, *ids.last().unwrap());
        seen.add(ids, &format!("child {i}"));
    }
    drop(children);

    // Every lease was released at close: newcomers get shards at once and
    // resume after the previous holders' IDs on them.
    let mut late: Vec<ChildProc> = (0..8)
        .map(|i| {
            lease_child(
                &url,
                5000,
                (0, 31),
                "batch",
                &root.path().join(format!("late-{i}")),
            )
        })
        .collect();
    for (i, child) in late.iter_mut().enumerate() {
        let line = child.next().expect("child reports its lease");
        let shard: u32 = line
            .strip_prefix("leased ")
            .unwrap_or_else(|| panic!("late child {i}: {line}"))
            .parse()
            .unwrap();
        child.go();
        let (ids, done) = child.ids_until_done();
        assert!(done);
        assert!(
            ids[0] > max_per_shard[&shard],
            "shard {shard} resumed after its previous holder"
        );
        seen.add(ids, &format!("late child {i}"));
    }
}

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

/// A holder killed with SIGKILL keeps its shard until its lease expires;
/// the next holder (another host) gets it only then, and issues nothing
/// the killed one issued.
#[test]
fn holder_killed_with_sigkill_is_not_reused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 4..=4);
    let ttl = Duration::from_secs(2);
    let config = LeaseConfig::new(redis.url()).ttl(ttl).shards(4..=4);
    let (host_a, host_b) = (state_dir(), state_dir());
    let mut victim = lease_child(
        &redis.url(),
        ttl.as_millis() as u64,
        (4, 4),
        "stream",
        host_a.path(),
    );
    assert_eq!(victim.next().as_deref(), Some("leased 4"));
    victim.go();
    let mut ids = Vec::new();
    while ids.len() < 30_000 {
        let line = victim.next().expect("the victim streams IDs");
        ids.push(line.strip_prefix("id ").unwrap().parse::<u64>().unwrap());
    }
    victim.child.kill().unwrap();
    let killed_at = Instant::now();
    victim.child.wait().unwrap();
    // The lease outlives its holder, by at most one TTL from the kill
    // (measured by Redis, so however long this machine takes to get on).
    let asked = Instant::now();
    let left: i64 = redis::cmd("PTTL")
        .arg("idutil:lease:4")
        .query(&mut redis.conn())
        .unwrap();
    assert!(
        0 < left && left <= ttl.as_millis() as i64,
        "the lease has {left} ms left at the kill, TTL {ttl:?}"
    );
    let (rest, done) = victim.ids_until_done();
    assert!(!done, "the victim was killed, not closed");
    ids.extend(rest);
    let max_victim = *ids.iter().max().unwrap();

    // The next holder's clock is behind: only Redis's record keeps it
    // from going back over the killed holder's IDs.
    let builder = Generator::builder()
        .id_space(harness::space_for(host_b.path()))
        .state_dir(host_b.path())
        .clock(ManualClock::new(wall_now() - 30))
        .lease(config);
    // Refused (no free shard) until the lease expires, which Redis said is
    // `left` after it was asked: the shard is never taken earlier, however
    // long this machine took to get here.
    let (next, got_at) = open_when_free(&builder, ttl + Duration::from_secs(30));
    let expiry = asked + Duration::from_millis(left.unsigned_abs());
    assert!(
        got_at >= expiry,
        "the shard was taken {:?} before the killed holder's lease expired",
        expiry - got_at
    );
    // Once it expires, the shard is taken without delay. (A generous bound:
    // on a loaded machine this thread and Redis may be slow to get on.)
    assert!(
        got_at - killed_at <= ttl + Duration::from_secs(10),
        "the shard was taken {:?} after the kill, TTL {ttl:?}",
        got_at - killed_at
    );
    let mine: Vec<u64> = next.next_ids(10_000).unwrap().map(|i| i.as_u64()).collect();
    assert!(
        mine[0] > max_victim,
        "the new holder starts after everything the killed one issued"
    );
    let mut seen = Tally::new();
    seen.add(ids, "killed holder");
    seen.add(mine, "next holder");
}
