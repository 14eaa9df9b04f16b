//! Redis started again: restored from an older copy of its data under
//! live holders; emptied; restarted again and again; or
//! without an append-only file at all. A shard whose record was not
//! confirmed since Redis last started is held one TTL, then starts past
//! what a holder can have issued (see the `redis` module's *Restarts,
//! restores and failovers*).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator};
use idutil_harness::redis_server::{seed_records, RedisServer};
use idutil_harness::{state_dir, Ledger};

use crate::leased;

/// Short waits: a TTL of 1 s, a lead cap of 8 s, a skew limit of 1 s, so a
/// shard whose history is unknown costs 1 s of holding and 3 s of waiting
/// for its lead to fall under the cap.
fn config(redis: &RedisServer, shards: std::ops::RangeInclusive<u32>) -> LeaseConfig {
    LeaseConfig::new(redis.url())
        .shards(shards)
        .ttl(Duration::from_secs(1))
        .max_lead(Duration::from_secs(8))
        .max_skew(Duration::from_secs(1))
}

fn ids(batch: idutil::Result<impl Iterator<Item = idutil::Id>>) -> Vec<u64> {
    batch.unwrap().map(u64::from).collect()
}

/// What a holder issued, batch by batch, and the errors it got, until
/// `stop`: bursts far past the clock, up to the lead cap.
type Issued = (Vec<Vec<u64>>, Vec<Error>);

fn drive(g: Arc<Generator>, stop: Arc<AtomicBool>) -> thread::JoinHandle<Issued> {
    thread::spawn(move || {
        let (mut batches, mut errors) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match g.next_ids_nowait(20_000) {
                Ok(batch) => batches.push(batch.map(u64::from).collect()),
                Err(e) => errors.push(e),
            }
            thread::sleep(Duration::from_millis(5));
        }
        (batches, errors)
    })
}

/// Two holders issue far ahead of the clock while Redis is killed and
/// restarted from a copy of its data taken a few seconds before, and two
/// holders on other hosts ask for the same shards meanwhile. The old
/// holders find their records lowered (or their leases gone) at their next
/// renewal and stop for good; the new ones, finding records written before
/// Redis started, hold the lease one TTL and start past the lead cap. No ID
/// is issued twice, and nobody hangs.
#[test]
fn restarted_from_an_older_copy_under_live_holders_issues_nothing_twice() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=1);
    let stop = Arc::new(AtomicBool::new(false));
    let hosts: Vec<_> = (0..4).map(|_| state_dir()).collect();
    let old: Vec<Arc<Generator>> = hosts[..2]
        .iter()
        .map(|host| {
            // A short reservation window: the new holders resume after the
            // marks the old ones write back, which it runs ahead of their
            // IDs.
            let builder = leased(host, config(&redis, 0..=1)).window(Duration::from_secs(1));
            Arc::new(builder.open().unwrap())
        })
        .collect();
    let drivers: Vec<_> = old.iter().map(|g| drive(g.clone(), stop.clone())).collect();
    thread::sleep(Duration::from_millis(500));
    let copy = redis.snapshot();
    // Long enough for raises past the copy's marks.
    thread::sleep(Duration::from_secs(2));
    redis.restore(&copy);
    let restored = Instant::now();
    let new: Vec<(Generator, Vec<u64>)> = thread::scope(|scope| {
        let opening: Vec<_> = hosts[2..]
            .iter()
            .map(|host| {
                let builder = leased(host, config(&redis, 0..=1)).window(Duration::from_secs(1));
                scope.spawn(move || {
                    let (g, _) = crate::open_when_free(&builder, Duration::from_secs(20));
                    let first = ids(g.next_ids(1000));
                    (g, first)
                })
            })
            .collect();
        opening.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        restored.elapsed() < Duration::from_secs(30),
        "the new holders took {:?}",
        restored.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    let mut ledger = Ledger::new();
    for (g, driver) in old.iter().zip(drivers) {
        let (batches, errors) = driver.join().unwrap();
        assert!(!batches.is_empty(), "shard {} issued", g.shard());
        for batch in &batches {
            ledger.record(batch);
        }
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, Error::Lease(LeaseError::Lost { .. }))),
            "shard {}: the old holder stopped for good, saying why: {:?}",
            g.shard(),
            errors.last().map(ToString::to_string)
        );
        assert!(matches!(
            g.next_id_nowait(),
            Err(Error::Lease(LeaseError::Lost { .. }))
        ));
    }
    for (g, first) in &new {
        ledger.record(first);
        ledger.record(&ids(g.next_ids(1000)));
    }
}

/// `appendonly no` is refused at open, naming the setting. A server that
/// does keep an append-only file but comes back empty between runs (its
/// files lost) is taken for one whose history is unknown: the next holder
/// waits one TTL and starts past the lead cap, after every ID the last
/// holder borrowed ahead of the clock.
#[test]
fn appendonly_no_is_refused_and_a_server_emptied_between_runs_issues_nothing_twice() {
    let Some(bare) = RedisServer::start_with(&["--appendonly", "no"]) else {
        return;
    };
    seed_records(&bare, 3..=3);
    let err = leased(&state_dir(), config(&bare, 3..=3))
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("appendonly is no"), "{err}");
    drop(bare);

    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 3..=3);
    let mut ledger = Ledger::new();
    let (host_a, host_b) = (state_dir(), state_dir());
    let a = leased(&host_a, config(&redis, 3..=3)).open().unwrap();
    ledger.record(&ids(a.next_ids(450_000)));
    assert!(a.lead() >= 5, "lead {}", a.lead());
    a.close().unwrap();
    redis.restart_empty();
    let b = leased(&host_b, config(&redis, 3..=3)).open().unwrap();
    ledger.record_after_all(&ids(b.next_ids(1000)));
}

/// Redis killed and started again ten times in a row (from its intact
/// append-only file) under two holders issuing far ahead of the clock: the
/// holders keep their leases and go on (each renewal confirms its record
/// under the new run), and a newcomer after the last restart starts after
/// everything they issued.
#[test]
fn ten_restarts_in_a_row_under_holders_issue_nothing_twice() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=1);
    // A TTL long enough that every restart ends well within it.
    let config = config(&redis, 0..=1).ttl(Duration::from_secs(3));
    let stop = Arc::new(AtomicBool::new(false));
    let hosts: Vec<_> = (0..3).map(|_| state_dir()).collect();
    let holders: Vec<Arc<Generator>> = hosts[..2]
        .iter()
        .map(|host| Arc::new(leased(host, config.clone()).open().unwrap()))
        .collect();
    let drivers: Vec<_> = holders
        .iter()
        .map(|g| drive(g.clone(), stop.clone()))
        .collect();
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(300));
        redis.restart();
    }
    // Both issue after the last restart.
    let after = holders
        .iter()
        .map(|g| {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match g.next_ids(10) {
                    Ok(batch) => break batch.map(u64::from).collect::<Vec<_>>(),
                    Err(e @ Error::Lease(LeaseError::Lost { .. })) => {
                        panic!("shard {}: {e}", g.shard())
                    }
                    Err(e) => {
                        assert!(Instant::now() < deadline, "shard {}: {e}", g.shard());
                        thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        })
        .collect::<Vec<_>>();
    stop.store(true, Ordering::Relaxed);
    let mut ledger = Ledger::new();
    for (driver, last) in drivers.into_iter().zip(after) {
        let (batches, errors) = driver.join().unwrap();
        assert!(
            !errors
                .iter()
                .any(|e| matches!(e, Error::Lease(LeaseError::Lost { .. }))),
            "a holder lost its lease: {errors:?}"
        );
        for batch in &batches {
            ledger.record(batch);
        }
        ledger.record(&last);
    }
    for g in &holders {
        g.close().unwrap();
    }
    redis.restart();
    // Its wait is its own TTL's: the holders are gone.
    let newcomer = leased(&hosts[2], config.ttl(Duration::from_secs(1)))
        .open()
        .unwrap();
    ledger.record_after_all(&ids(newcomer.next_ids(1000)));
}
