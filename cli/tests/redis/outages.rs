//! Redis cut off, restarted or hanging under live holders.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator, ManualClock};
use idutil_harness::redis_server::{seed_records, Proxy, RedisServer};
use idutil_harness::{state_dir, wall_now};

use crate::{leased, open_when_free};

/// What a thread calling `next_id_nowait` in a loop saw, and when it made
/// the call: a call made after a moment is certain to have issued after
/// it, however late its answer is read.
enum Event {
    Issued(u64, Instant),
    Failed(String, Failure, Instant),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Fenced,
    Lost,
    Other,
}

/// Calls `next_id_nowait` every millisecond until `stop`, reporting each
/// result.
fn drive(
    generator: Arc<Generator>,
    stop: Arc<AtomicBool>,
    events: mpsc::Sender<Event>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let asked = Instant::now();
            let event = match generator.next_id_nowait() {
                Ok(id) => Event::Issued(id.as_u64(), asked),
                Err(e) => {
                    let kind = match e {
                        Error::Lease(LeaseError::Fenced { .. }) => Failure::Fenced,
                        Error::Lease(LeaseError::Lost { .. }) => Failure::Lost,
                        _ => Failure::Other,
                    };
                    Event::Failed(e.to_string(), kind, asked)
                }
            };
            if events.send(event).is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Waits for an ID (`want` None) or for a failure of kind `want`,
/// collecting the IDs on the way.
fn wait_for(
    events: &mpsc::Receiver<Event>,
    ids: &mut Vec<(u64, Instant)>,
    want: Option<Failure>,
    within: Duration,
) -> (String, Instant) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Event::Issued(id, at)) => {
                ids.push((id, at));
                if want.is_none() {
                    return (String::new(), at);
                }
            }
            Ok(Event::Failed(msg, kind, at)) if Some(kind) == want => return (msg, at),
            Ok(Event::Failed(..)) => {}
            Err(_) => panic!("no {want:?} within {within:?}"),
        }
    }
}

/// A holder cut off from Redis stops issuing before its lease could expire
/// and be taken over; once it can reach Redis again and nobody took the
/// shard, it resumes; once another holder took the shard, it stays stopped
/// with an error that says so.
#[test]
fn holder_cut_off_from_redis_stops_before_takeover() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 6..=6);
    let ttl = Duration::from_secs(3);
    let proxy = Proxy::start(redis.port);
    let config = LeaseConfig::new(proxy.url()).ttl(ttl).shards(6..=6);
    let (host_a, host_b) = (state_dir(), state_dir());
    let a = Arc::new(leased(&host_a, config.clone()).open().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, events) = mpsc::channel();
    let driver = drive(a.clone(), stop.clone(), tx);
    let mut a_ids = Vec::new();

    // Round 1: cut off, fenced, healed before anyone takes the shard.
    wait_for(&events, &mut a_ids, None, Duration::from_secs(5));
    let cut_at = Instant::now();
    proxy.cut();
    let (msg, fenced_at) = wait_for(&events, &mut a_ids, Some(Failure::Fenced), ttl * 2);
    assert!(msg.contains("not known to be held"), "{msg}");
    let healed_at = Instant::now();
    proxy.heal();
    let (_, resumed_at) = wait_for(&events, &mut a_ids, None, ttl * 2);
    assert!(resumed_at > fenced_at);
    // Fenced before the TTL: no call made from one TTL after the cut until
    // the heal issued an ID (measured by when the call was made, so a
    // loaded machine that reads the answers late cannot fail this).
    let expiry = cut_at + ttl;
    let late: Vec<Instant> = a_ids
        .iter()
        .map(|(_, asked)| *asked)
        .filter(|asked| *asked >= expiry && *asked < healed_at)
        .collect();
    assert!(
        late.is_empty(),
        "A issued {} IDs past the TTL while cut off, the first asked for {:?} after the cut",
        late.len(),
        late.first().map(|at| *at - cut_at)
    );

    // Round 2: cut off again; another holder takes the shard as soon as
    // Redis lets it. A must have stopped before that moment.
    proxy.cut();
    let (msg, fenced_at) = wait_for(&events, &mut a_ids, Some(Failure::Fenced), ttl * 2);
    assert!(msg.contains("shard 6"), "{msg}");
    let b_builder = Generator::builder()
        .id_space(harness::space_for(host_b.path()))
        .state_dir(host_b.path())
        .clock(ManualClock::new(wall_now() - 30))
        .lease(LeaseConfig::new(redis.url()).ttl(ttl).shards(6..=6));
    let (b, b_at) = open_when_free(&b_builder, ttl * 3);
    assert!(fenced_at < b_at);
    let last_a_issue = a_ids.iter().map(|(_, at)| *at).max().unwrap();
    assert!(
        last_a_issue < b_at,
        "A issued {:?} after B took the shard",
        last_a_issue - b_at
    );
    let b_ids: Vec<u64> = b.next_ids(1000).unwrap().map(|i| i.as_u64()).collect();

    // A reaches Redis again but the shard is B's: A stays stopped.
    proxy.heal();
    let (msg, _) = wait_for(&events, &mut a_ids, Some(Failure::Lost), ttl * 3);
    assert!(msg.contains("close it and open a new one"), "{msg}");
    stop.store(true, Ordering::SeqCst);
    driver.join().unwrap();
    while let Ok(e) = events.try_recv() {
        if let Event::Issued(id, at) = e {
            a_ids.push((id, at));
        }
    }
    assert!(
        a_ids.iter().all(|(_, at)| *at < b_at),
        "A issued after B took over"
    );
    let max_a = a_ids.iter().map(|(id, _)| *id).max().unwrap();
    assert!(b_ids[0] > max_a, "B starts after everything A reserved");
    let mut seen = Tally::new();
    seen.add(a_ids.iter().map(|(id, _)| *id), "A");
    seen.add(b_ids, "B");
    assert!(matches!(
        a.next_id_nowait(),
        Err(Error::Lease(LeaseError::Lost { .. }))
    ));
}

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

/// Redis is killed (SIGKILL) and restarted mid-run, with its data on an
/// append-only file synced at every write. Holders keep their leases (or
/// take them back), resume issuing, and the next holder of a shard starts
/// after everything issued before the restart.
#[test]
fn redis_restarted_mid_run_keeps_ids_unique() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 0..=1);
    let ttl = Duration::from_secs(3);
    // A small skew limit: the newcomer, after a restart, starts that much
    // (plus the lead cap and a second) past Redis's clock.
    let config = LeaseConfig::new(redis.url())
        .ttl(ttl)
        .shards(0..=1)
        .max_skew(Duration::from_secs(1));
    let hosts = [state_dir(), state_dir()];
    let holders: Vec<Arc<Generator>> = hosts
        .iter()
        .map(|h| Arc::new(leased(h, config.clone()).open().unwrap()))
        .collect();
    let shards: HashSet<u32> = holders.iter().map(|g| g.shard()).collect();
    assert_eq!(shards.len(), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, events) = mpsc::channel();
    let drivers: Vec<_> = holders
        .iter()
        .map(|g| drive(g.clone(), stop.clone(), tx.clone()))
        .collect();
    drop(tx);
    // Keep reserving: the window is 5 s, so push the reservation along.
    let burst = |g: &Generator, when: &str| -> Vec<u64> {
        g.next_ids(300_000)
            .unwrap_or_else(|e| panic!("shard {}, a burst {when}: {e}", g.shard()))
            .map(|i| i.as_u64())
            .collect()
    };
    let mut ids: Vec<u64> = holders
        .iter()
        .flat_map(|g| burst(g, "before the restart"))
        .collect();
    thread::sleep(Duration::from_millis(300));
    redis.restart();
    let restarted_at = Instant::now();
    // Both holders issue again after the restart, without losing their lease
    // (a lost lease is a failure below; the deadline is only against a hang,
    // generous for a loaded machine).
    let mut issued_after: HashSet<u32> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while issued_after.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "holders did not resume after the restart"
        );
        match events.recv_timeout(Duration::from_millis(500)) {
            Ok(Event::Issued(id, at)) => {
                ids.push(id);
                if at > restarted_at {
                    issued_after.insert((id & 31) as u32);
                }
            }
            Ok(Event::Failed(msg, kind, _)) => assert_ne!(kind, Failure::Lost, "{msg}"),
            Err(_) => {}
        }
    }
    // The first raise after the restart goes through at once: the holder's
    // connection that the restart closed is replaced within the call.
    for g in &holders {
        ids.extend(burst(g, "after the restart"));
    }
    stop.store(true, Ordering::SeqCst);
    for d in drivers {
        d.join().unwrap();
    }
    ids.extend(events.try_iter().filter_map(|e| match e {
        Event::Issued(id, _) => Some(id),
        Event::Failed(..) => None,
    }));
    for g in &holders {
        g.close().unwrap();
    }
    // A newcomer on another host, after one more crash of Redis: the
    // records were confirmed before it, so it waits a TTL and starts past
    // the lead cap.
    redis.restart();
    let host_c = state_dir();
    let newcomer = leased(&host_c, config).open().unwrap();
    let shard = u64::from(newcomer.shard());
    let max_before = ids.iter().filter(|id| *id & 31 == shard).max().copied();
    let fresh: Vec<u64> = newcomer
        .next_ids(1000)
        .unwrap()
        .map(|i| i.as_u64())
        .collect();
    assert!(Some(fresh[0]) > max_before);
    let mut seen = Tally::new();
    seen.add(ids, "holders");
    seen.add(fresh, "newcomer");
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
        include_str!("../../../src/lease/redis/scripts/check.lua"),
        include_str!("../../../src/lease/redis/scripts/run.lua"),
        include_str!("../../../src/lease/redis/scripts/finish.lua"),
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
