//! The Redis shard lease against a real `redis-server` on a free loopback
//! port, started and stopped by each test.
//!
//! Without `redis-server` on `PATH` these tests print a loud `SKIPPED` line
//! and pass, except under `CI=true`, where its absence fails them.
#![cfg(feature = "redis")]

use idutil_harness as harness;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator, Layout, ManualClock};
use idutil_harness::child::{self, ChildProc, MARK};
use idutil_harness::redis_server::{exists, record_of, seed_records, Proxy, RedisServer};
use idutil_harness::{state_dir, wall_now};

/// A generator on `host` (its own state directory and ID space) that
/// leases its shard with `config`.
fn leased(host: &tempfile::TempDir, config: LeaseConfig) -> idutil::Builder {
    Generator::builder()
        .id_space(harness::space_for(host.path()))
        .state_dir(host.path())
        .redis_lease(config)
}

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// Inserts every ID into `seen`, failing on the first duplicate.
fn record_unique(seen: &mut HashSet<u64>, ids: impl IntoIterator<Item = u64>, who: &str) {
    for id in ids {
        assert!(id < 1 << 53, "{who}: ID {id} above 2^53 - 1");
        assert!(seen.insert(id), "{who}: duplicate ID {id}");
    }
}

fn is_no_free_shard(e: &Error) -> bool {
    matches!(e, Error::Lease(LeaseError::NoFreeShard { .. }))
}

/// Opens a generator on a leased shard, retrying while every allowed shard
/// is leased, until `within` has passed.
fn open_when_free<C: idutil::Clock + Clone>(
    builder: &idutil::Builder<C>,
    within: Duration,
) -> (Generator<C>, Instant) {
    let deadline = Instant::now() + within;
    loop {
        match builder.clone().open() {
            Ok(g) => return (g, Instant::now()),
            Err(e) if is_no_free_shard(&e) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("could not lease a shard within {within:?}: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Child processes: this test binary re-executed (see `harness::child`)
// ---------------------------------------------------------------------------

/// The child's side. `IDUTIL_CHILD_LEASE` holds `URL TTL_MS FIRST LAST
/// MODE`. It leases a shard (printing `@leased N` or `@failed REASON`),
/// waits for a line on stdin, then issues IDs (`@id N`): a fixed number in
/// mode `batch` (then `@done` and a clean close), or forever in mode
/// `stream`. Mode `paced` issues 20 IDs a millisecond at most, so it never
/// borrows seconds ahead of the clock, and reports each failed call as
/// `@error REASON` instead of stopping.
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn child_process() {
    if !child::is_child() {
        return;
    }
    let setting = child::child_var("IDUTIL_CHILD_LEASE");
    let f: Vec<&str> = setting.split_whitespace().collect();
    let config = LeaseConfig::new(f[0])
        .ttl(Duration::from_millis(f[1].parse().unwrap()))
        .shards(f[2].parse().unwrap()..=f[3].parse().unwrap());
    let mode = f[4];
    let mut out = std::io::stdout().lock();
    let generator = match Generator::builder().redis_lease(config).open() {
        Ok(g) => g,
        Err(e) => {
            writeln!(out, "{MARK}failed {e}").unwrap();
            return;
        }
    };
    writeln!(out, "{MARK}leased {}", generator.shard()).unwrap();
    out.flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    if mode == "paced" {
        loop {
            match generator.next_ids(20) {
                Ok(batch) => {
                    for id in batch {
                        writeln!(out, "{MARK}id {id}").unwrap();
                    }
                }
                Err(e) => writeln!(out, "{MARK}error {e}").unwrap(),
            }
            out.flush().unwrap();
            thread::sleep(Duration::from_millis(1));
        }
    }
    loop {
        for id in generator.next_ids(500).unwrap() {
            writeln!(out, "{MARK}id {id}").unwrap();
        }
        for _ in 0..20 {
            writeln!(out, "{MARK}id {}", generator.next_id().unwrap()).unwrap();
        }
        out.flush().unwrap();
        if mode == "batch" {
            break;
        }
    }
    generator.close().unwrap();
    writeln!(out, "{MARK}done").unwrap();
}

/// The other child: reports what `LeaseConfig::from_env` and opening a
/// generator make of the environment (`@from_env ...`, `@open ...`).
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn env_child_process() {
    if !child::is_child() {
        return;
    }
    let dir = harness::state_dir();
    let from_env = match LeaseConfig::from_env() {
        Ok(c) => format!("ok {}", c.is_some()),
        Err(e) => format!("err {}", matches!(e, Error::InvalidEnv { .. })),
    };
    let open = match Generator::builder().shard(1).state_dir(dir.path()).open() {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("err {}: {e}", matches!(e, Error::InvalidEnv { .. })),
    };
    println!("{MARK}from_env {from_env}");
    println!("{MARK}open {open}");
}

/// Starts [`child_process`] leasing a shard of `shards` from `url`, in
/// `mode`, with its state in `dir`.
fn lease_child(url: &str, ttl_ms: u64, shards: (u32, u32), mode: &str, dir: &Path) -> ChildProc {
    ChildProc::spawn(
        "child_process",
        &[
            (
                "IDUTIL_CHILD_LEASE",
                format!("{url} {ttl_ms} {} {} {mode}", shards.0, shards.1),
            ),
            ("IDUTIL_STATE_DIR", dir.display().to_string()),
            ("IDUTIL_ID_SPACE", harness::space_for(dir)),
        ],
    )
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// 40 processes compete for 32 shards: exactly 32 get one, each a different
/// shard, while all are held; the other 8 fail with the clear error rather
/// than share. Once the 32 close, 8 newcomers take shards and resume after
/// them. No ID appears twice.
#[test]
fn many_processes_compete_for_32_shards() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
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

    let mut seen = HashSet::new();
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
        record_unique(&mut seen, ids, &format!("child {i}"));
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
        record_unique(&mut seen, ids, &format!("late child {i}"));
    }
}

/// Sequential holders of one shard on different hosts (separate state
/// directories): the second one's clock is an hour behind, yet it continues
/// right after the first one's last ID, and the first, coming back with its
/// own (older) state file, resumes after the second: the later of the
/// local file and Redis wins.
#[test]
fn later_holder_with_clock_an_hour_behind_resumes_after_the_previous() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    // A short TTL: the shard's first use, and its use after the FLUSHALL
    // below, wait one TTL for the record to be created.
    let config = LeaseConfig::new(redis.url())
        .shards(9..=9)
        .ttl(Duration::from_secs(1));
    let (host_a, host_b) = (state_dir(), state_dir());
    let t = wall_now();
    let mut seen = HashSet::new();

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
    record_unique(&mut seen, ids_a, "A");

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
    record_unique(&mut seen, [first_b], "B");
    record_unique(&mut seen, ids_b, "B");
    drop(b);

    // A again, on its own host: its state file says less than Redis does.
    let a2 = leased(&host_a, config.clone())
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    let first_a2 = a2.next_id().unwrap().as_u64();
    assert!(first_a2 > last_b);
    record_unique(&mut seen, [first_a2], "A again");
    drop(a2);

    // Redis loses its data: the local state file still keeps A's host from
    // going back.
    redis::cmd("FLUSHALL").exec(&mut redis.conn()).unwrap();
    let a3 = leased(&host_a, config)
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    let first_a3 = a3.next_id().unwrap().as_u64();
    assert!(first_a3 > first_a2);
    record_unique(&mut seen, [first_a3], "A after FLUSHALL");
}

/// A holder killed with SIGKILL keeps its shard until its lease expires;
/// the next holder (another host) gets it only then, and issues nothing
/// the killed one issued.
#[test]
fn holder_killed_with_sigkill_is_not_reused() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
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
        .redis_lease(config);
    let err = builder.clone().open().unwrap_err();
    assert!(
        is_no_free_shard(&err),
        "the lease outlives its holder: {err}"
    );
    // Once it expires, the shard is taken without delay. (A generous bound:
    // on a loaded machine this thread and Redis may be slow to get on.)
    let (next, got_at) = open_when_free(&builder, ttl + Duration::from_secs(30));
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
    let mut seen = HashSet::new();
    record_unique(&mut seen, ids, "killed holder");
    record_unique(&mut seen, mine, "next holder");
}

/// What a thread calling `next_id_nowait` in a loop saw.
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
            let event = match generator.next_id_nowait() {
                Ok(id) => Event::Issued(id.as_u64(), Instant::now()),
                Err(e) => {
                    let kind = match e {
                        Error::Lease(LeaseError::Fenced { .. }) => Failure::Fenced,
                        Error::Lease(LeaseError::Lost { .. }) => Failure::Lost,
                        _ => Failure::Other,
                    };
                    Event::Failed(e.to_string(), kind, Instant::now())
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
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
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
    assert!(
        fenced_at - cut_at < ttl,
        "fenced {:?} after the cut, before the TTL",
        fenced_at - cut_at
    );
    proxy.heal();
    let (_, resumed_at) = wait_for(&events, &mut a_ids, None, ttl * 2);
    assert!(resumed_at > fenced_at);

    // Round 2: cut off again; another holder takes the shard as soon as
    // Redis lets it. A must have stopped before that moment.
    proxy.cut();
    let (msg, fenced_at) = wait_for(&events, &mut a_ids, Some(Failure::Fenced), ttl * 2);
    assert!(msg.contains("shard 6"), "{msg}");
    let b_builder = Generator::builder()
        .id_space(harness::space_for(host_b.path()))
        .state_dir(host_b.path())
        .clock(ManualClock::new(wall_now() - 30))
        .redis_lease(LeaseConfig::new(redis.url()).ttl(ttl).shards(6..=6));
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
    let mut seen = HashSet::new();
    record_unique(&mut seen, a_ids.iter().map(|(id, _)| *id), "A");
    record_unique(&mut seen, b_ids, "B");
    assert!(matches!(
        a.next_id_nowait(),
        Err(Error::Lease(LeaseError::Lost { .. }))
    ));
}

/// Redis is killed (SIGKILL) and restarted mid-run, with its data on an
/// append-only file synced at every write. Holders keep their leases (or
/// take them back), resume issuing, and the next holder of a shard starts
/// after everything issued before the restart.
#[test]
fn redis_restarted_mid_run_keeps_ids_unique() {
    let Some(mut redis) = RedisServer::start(true) else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let config = LeaseConfig::new(redis.url()).ttl(ttl).shards(0..=1);
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
    let burst = |g: &Generator| -> Vec<u64> {
        g.next_ids(300_000)
            .map(|b| b.map(|i| i.as_u64()).collect())
            .unwrap_or_default()
    };
    let mut ids: Vec<u64> = holders.iter().flat_map(|g| burst(g)).collect();
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
    for g in &holders {
        ids.extend(burst(g));
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
    // A newcomer on another host, after one more crash of Redis.
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
    let mut seen = HashSet::new();
    record_unique(&mut seen, ids, "holders");
    record_unique(&mut seen, fresh, "newcomer");
}

/// The command: `--redis URL` and `IDUTIL_REDIS_URL` lease the shard,
/// `idutil state` shows the leases, and with every shard leased `idutil
/// next` fails with the clear error and status 1.
#[test]
fn command_leases_and_shows_the_lease() {
    let Some(redis) = RedisServer::start(false) else {
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
            .env_remove("IDUTIL_REDIS_URL");
        if env_url {
            cmd.env("IDUTIL_REDIS_URL", redis.url());
        }
        cmd.output().unwrap()
    };
    let ids = |out: &std::process::Output| -> Vec<u64> {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    let url = redis.url();
    let first = ids(&run(&["--redis", &url, "next", "-n", "3"], false));
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
    let out = run(&["--redis", &url, "state", "--json"], false);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["leases"][holder.shard() as usize];
    assert!(row["holder"]
        .as_str()
        .unwrap()
        .contains(&std::process::id().to_string()));
    assert!(row["expires_in_ms"].as_u64().unwrap() > 0);
    let text = String::from_utf8(run(&["--redis", &url, "state"], false).stdout).unwrap();
    assert!(text.contains("1 of 32 shards leased"), "{text}");

    // Every shard leased: a clear error, status 1.
    let others: Vec<Generator> = (0..31)
        .map(|_| {
            leased(&elsewhere, LeaseConfig::new(url.clone()))
                .open()
                .unwrap()
        })
        .collect();
    let out = run(&["--redis", &url, "next"], false);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no free shard: all 32 shards"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(others);
}

// ---------------------------------------------------------------------------
// The record held to the same standard as the state file
// ---------------------------------------------------------------------------

/// A garbled field of the shard's record (a `high_water` too big for any
/// layout, or written as a float, a `last` past `high_water`, a `seen` that
/// is not a number) refuses the shard when it is asked for by number,
/// naming the key and the field; among other shards it is skipped, so one
/// bad record does not stop the fleet. Either way the lease is given back
/// and the record is left exactly as it was; `inspect` and `idutil state`
/// show the field as invalid.
#[test]
fn garbled_record_is_skipped_or_refused_and_stays_as_it_is() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    let mut conn = redis.conn();
    let key = "idutil:mark:3";
    let later = (wall_now() + 10).to_string();
    let garbles = [
        ("high_water", "99999999999999999999".to_string()),
        ("high_water", "1795999999.0".to_string()),
        ("last", format!("{later} 0")),
        ("seen", "soon".to_string()),
    ];
    for (field, value) in &garbles {
        seed_records(&redis, 3..=4);
        redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .exec(&mut conn)
            .unwrap();
        let before = record_of(&mut conn, key);
        let host = state_dir();
        let open = |config: LeaseConfig, only: Option<u32>| {
            let mut b = Generator::builder()
                .id_space(harness::space_for(host.path()))
                .state_dir(host.path())
                .redis_lease(config.ttl(Duration::from_secs(1)));
            if let Some(shard) = only {
                b = b.shard(shard);
            }
            b.open()
        };
        // Asked for by number: refused, naming the key and the field.
        let err = open(LeaseConfig::new(redis.url()).shards(3..=4), Some(3))
            .map(|g| g.shard())
            .expect_err("a garbled record must refuse the shard");
        match &err {
            Error::Lease(LeaseError::InvalidRecord {
                shard: 3,
                key: k,
                field: f,
                ..
            }) => {
                assert_eq!((k.as_str(), f), (key, field), "{err}");
            }
            other => panic!("{field} = {value}: {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains(field) && text.contains(value.as_str()),
            "{text}"
        );
        assert!(
            !exists(&mut conn, "idutil:lease:3"),
            "the lease is given back"
        );
        assert!(
            !exists(&mut conn, "idutil:lease:4"),
            "no silent move to another shard when one was asked for"
        );
        // Among others: skipped, and the next shard leased; the fleet goes on.
        let g = open(LeaseConfig::new(redis.url()).shards(3..=4), None)
            .expect("the unusable shard is skipped");
        assert_eq!(g.shard(), 4);
        assert!(!exists(&mut conn, "idutil:lease:3"));
        drop(g);
        // The only shard of the range: no free shard, and the message says
        // which was skipped and why.
        let err = open(LeaseConfig::new(redis.url()).shards(3..=3), None)
            .map(|g| g.shard())
            .expect_err("no usable shard");
        assert!(
            matches!(&err, Error::Lease(LeaseError::NoFreeShard { skipped, .. }) if skipped.len() == 1),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("shard 3") && text.contains(key), "{text}");
        assert_eq!(record_of(&mut conn, key), before, "the record is untouched");

        let rows =
            idutil::lease::inspect(&LeaseConfig::new(redis.url()), &Layout::DEFAULT).unwrap();
        assert_eq!(rows[3].invalid.len(), 1, "{:?}", rows[3]);
        assert!(rows[3].invalid[0].starts_with(field), "{:?}", rows[3]);
        assert!(rows[4].invalid.is_empty(), "{:?}", rows[4]);
        if *field == "high_water" {
            assert_eq!(rows[3].high_water, None);
        }

        {
            let bin = env!("CARGO_BIN_EXE_idutil");
            let run = |args: &[&str]| {
                Command::new(bin)
                    .args(["--redis", &redis.url()])
                    .args(args)
                    .env("IDUTIL_STATE_DIR", host.path())
                    .env("IDUTIL_ID_SPACE", harness::space_for(host.path()))
                    .env_remove("IDUTIL_SHARD")
                    .env_remove("IDUTIL_REDIS_URL")
                    .output()
                    .unwrap()
            };
            let out = run(&["--shard", "3", "next"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains(key) && err.contains(field), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            let out = run(&["state"]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success());
            let row = text.lines().find(|l| l.starts_with("shard  3:")).unwrap();
            assert!(
                row.contains("record INVALID") && row.contains(field),
                "{row}"
            );
            assert_eq!(record_of(&mut conn, key), before, "the record is untouched");
        }
    }
}

/// A clean close records the exact last ID but leaves `high_water` where
/// the reservation put it: a mark is never lowered. The next holder still
/// continues right after the last ID.
#[test]
fn clean_close_never_lowers_the_high_water_mark() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    seed_records(&redis, 2..=2);
    let mut conn = redis.conn();
    let key = "idutil:mark:2";
    let config = LeaseConfig::new(redis.url()).shards(2..=2);
    let (host_a, host_b) = (state_dir(), state_dir());
    let t = wall_now();
    let a = leased(&host_a, config.clone())
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    let ids: Vec<u64> = a.next_ids(100).unwrap().map(|i| i.as_u64()).collect();
    let reserved: u64 = redis::cmd("HGET")
        .arg(key)
        .arg("high_water")
        .query::<String>(&mut conn)
        .unwrap()
        .parse()
        .unwrap();
    let last = *ids.last().unwrap();
    let last_second = Layout::DEFAULT.epoch() + (last >> 21);
    assert!(
        reserved > last_second,
        "the reservation runs ahead of the last ID"
    );
    a.close().unwrap();
    let after = record_of(&mut conn, key);
    assert_eq!(
        after["high_water"],
        reserved.to_string(),
        "high_water after a clean close: {after:?}"
    );
    let (sec, seq) = after["last"].split_once(' ').unwrap();
    assert_eq!(sec.parse::<u64>().unwrap(), last_second);
    assert_eq!(seq.parse::<u64>().unwrap(), (last >> 5) & 0xffff);

    let b = leased(&host_b, config)
        .clock(ManualClock::new(t - 3600))
        .open()
        .unwrap();
    assert_eq!(b.next_id().unwrap().as_u64(), last + 32);
    b.close().unwrap();
    let high_water: u64 = record_of(&mut conn, key)["high_water"].parse().unwrap();
    assert!(
        high_water >= reserved,
        "never lowered: {high_water} < {reserved}"
    );
}

/// What a holder does when Redis loses the shard's record under it, by
/// `FLUSHALL` or by `DEL` of the record alone: it stops issuing for good at
/// its next renewal, with an error that says the record vanished, and
/// neither re-creates the record nor takes the lease back, however long it
/// keeps running.
#[test]
fn holder_whose_record_vanishes_stops_for_good_and_recreates_nothing() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    let mut conn = redis.conn();
    let ttl = Duration::from_secs(1);
    for how in ["FLUSHALL", "DEL"] {
        seed_records(&redis, 8..=8);
        let (mark, lease) = ("idutil:mark:8", "idutil:lease:8");
        let host = state_dir();
        let g = leased(&host, LeaseConfig::new(redis.url()).shards(8..=8).ttl(ttl))
            .open()
            .unwrap();
        g.next_ids(1000).unwrap();
        match how {
            "FLUSHALL" => redis::cmd("FLUSHALL").exec(&mut conn).unwrap(),
            _ => redis::cmd("DEL").arg(mark).exec(&mut conn).unwrap(),
        }
        // Issuing stops at the next renewal. A renewal that comes late on a
        // loaded machine may first fence it for a while (it issues nothing
        // then either); the error that stays is the lost record.
        let deadline = Instant::now() + ttl * 2;
        let give_up = Instant::now() + Duration::from_secs(30);
        let err = loop {
            let asked = Instant::now();
            match g.next_id_nowait() {
                Ok(_) => assert!(asked < deadline, "{how}: still issuing"),
                Err(Error::Lease(LeaseError::Fenced { .. })) if asked < give_up => {}
                Err(e) => break e,
            }
            thread::sleep(Duration::from_millis(2));
        };
        assert!(
            matches!(err, Error::Lease(LeaseError::RecordLost { shard: 8, .. })),
            "{how}: {err}"
        );
        let text = err.to_string();
        assert!(text.contains("lost the record of shard 8"), "{text}");
        assert!(text.contains(mark), "{text}");
        // Three more renewal periods: a holder that re-created the record
        // or took the lease back would have done so by now.
        thread::sleep(ttl);
        assert!(!exists(&mut conn, mark), "{how}: the record was re-created");
        let holder: Option<String> = redis::cmd("GET").arg(lease).query(&mut conn).unwrap();
        assert_eq!(holder, None, "{how}: the lease was taken back");
        for _ in 0..3 {
            assert!(matches!(
                g.next_id_nowait(),
                Err(Error::Lease(LeaseError::RecordLost { .. }))
            ));
            assert!(g.next_ids(10).is_err());
        }
        let _ = g.close();
        assert!(!exists(&mut conn, mark), "{how}: the close re-created it");
        redis::cmd("FLUSHALL").exec(&mut conn).unwrap();
    }
}

/// The first generator on a shard without a record holds the lease for one
/// TTL (renewing it, the record still absent), then creates the record with
/// its clock's second and starts after it.
#[test]
fn shard_without_record_is_held_one_ttl_then_created() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let t = wall_now() - 100;
    let host = state_dir();
    let url = redis.url();
    let started = Instant::now();
    let opener = thread::spawn(move || {
        let g = leased(&host, LeaseConfig::new(url).shards(12..=12).ttl(ttl))
            .clock(ManualClock::new(t))
            .open()
            .unwrap();
        (g, Instant::now(), host)
    });
    let mut conn = redis.conn();
    // Past the TTL of the lease as first taken: it is being renewed.
    while started.elapsed() < ttl * 9 / 10 {
        thread::sleep(Duration::from_millis(50));
    }
    let holder: Option<String> = redis::cmd("GET")
        .arg("idutil:lease:12")
        .query(&mut conn)
        .unwrap();
    let waiting = started.elapsed() < ttl;
    let record_absent = !exists(&mut conn, "idutil:mark:12");
    let (g, opened_at, _host) = opener.join().unwrap();
    if waiting {
        assert!(record_absent, "the record is created only after one TTL");
        assert!(holder.is_some(), "the lease is held while waiting");
    }
    assert!(
        opened_at - started >= ttl,
        "opened after {:?}",
        opened_at - started
    );
    // Created with the clock's second; since raised by the first
    // reservation, which starts after it.
    let record = record_of(&mut conn, "idutil:mark:12");
    assert_eq!(record["seen"], t.to_string());
    assert!(record["high_water"].parse::<u64>().unwrap() > t);
    assert_eq!(record["layout"], Layout::DEFAULT.fingerprint());
    let id = g.next_id().unwrap();
    assert_eq!(Layout::DEFAULT.epoch() + (id.as_u64() >> 21), t + 1);
}

/// `FLUSHALL` while one holder (a child process) issues IDs continuously,
/// and a second holder (another process, another host's state directory)
/// asks for the shard right after: the second gets the lease at once but
/// waits one TTL before its first ID; the first stops for good at its next
/// renewal with the error that says the record vanished, and re-creates
/// nothing. No ID is issued twice.
#[test]
fn flushall_under_a_live_holder_issues_nothing_twice() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    seed_records(&redis, 5..=5);
    let mut conn = redis.conn();
    let ttl = Duration::from_secs(3);
    let ttl_ms = ttl.as_millis() as u64;
    let (host_a, host_b) = (state_dir(), state_dir());
    let mut a = lease_child(&redis.url(), ttl_ms, (5, 5), "paced", host_a.path());
    assert_eq!(a.next().as_deref(), Some("leased 5"));
    let a_pid = a.child.id().to_string();
    a.go();
    let a_lines = a.follow();
    let mut a_ids = Vec::new();
    while a_ids.len() < 2000 {
        let (line, _) = a_lines.recv_timeout(ttl).expect("A issues");
        a_ids.push(line.strip_prefix("id ").unwrap().parse::<u64>().unwrap());
    }

    redis::cmd("FLUSHALL").exec(&mut conn).unwrap();
    let flushed_at = Instant::now();
    let b_spawned = Instant::now();
    let mut b = lease_child(&redis.url(), ttl_ms, (5, 5), "paced", host_b.path());

    // A stops at its next renewal, a third of the TTL after the last.
    let (a_error, a_error_at) = loop {
        let (line, at) = a_lines.recv_timeout(ttl).expect("A reports");
        match line.strip_prefix("id ") {
            Some(id) => a_ids.push(id.parse().unwrap()),
            None => break (line, at),
        }
    };
    assert!(
        a_error.starts_with("error the lease's store lost the record of shard 5"),
        "{a_error}"
    );
    assert!(
        a_error_at - flushed_at < ttl / 2,
        "{:?}",
        a_error_at - flushed_at
    );
    // Just before B may create the record (one TTL after it got the lease,
    // which was after the flush): at least one more renewal period of A has
    // passed, and A re-created nothing.
    thread::sleep(
        (flushed_at + ttl - Duration::from_millis(200)).saturating_duration_since(Instant::now()),
    );
    assert!(
        !exists(&mut conn, "idutil:mark:5"),
        "A re-created the record"
    );
    let lease: Option<String> = redis::cmd("GET")
        .arg("idutil:lease:5")
        .query(&mut conn)
        .unwrap();
    assert!(
        !lease.unwrap_or_default().contains(&format!(":{a_pid}:")),
        "A took the lease back"
    );

    assert_eq!(b.next().as_deref(), Some("leased 5"));
    b.go();
    let b_lines = b.follow();
    let mut b_ids = Vec::new();
    let mut b_first_at = None;
    while b_ids.len() < 2000 {
        let (line, at) = b_lines.recv_timeout(ttl * 2).expect("B issues");
        let id = line
            .strip_prefix("id ")
            .unwrap_or_else(|| panic!("B: {line}"));
        b_ids.push(id.parse::<u64>().unwrap());
        b_first_at.get_or_insert(at);
    }
    let waited = b_first_at.unwrap() - b_spawned;
    assert!(
        waited >= ttl,
        "B's first ID came {waited:?} after it started"
    );

    // A stays stopped, with the same error, while B issues.
    while let Ok((line, _)) = a_lines.try_recv() {
        assert!(
            line.starts_with("error the lease's store lost the record of shard 5"),
            "A after its error: {line}"
        );
    }
    drop(a);
    drop(b);
    let mut seen = HashSet::new();
    record_unique(&mut seen, a_ids, "A");
    record_unique(&mut seen, b_ids, "B");
}

/// An empty or blank Redis URL is a usage error, never a lease silently
/// turned off (the shard would then come from the host name): `--redis ''`
/// and a blank `IDUTIL_REDIS_URL` exit 2 with one line; the library's
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
                .env_remove("IDUTIL_REDIS_URL");
            if let Some(v) = env {
                cmd.env("IDUTIL_REDIS_URL", v);
            }
            cmd.output().unwrap()
        };
        for (args, env) in [
            (&["--redis", "", "next"][..], None),
            (&["--redis", "  ", "next"][..], None),
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
    }
    let child = |value: &str| {
        let out = child::child_command(
            "env_child_process",
            &[
                ("IDUTIL_REDIS_URL", value.to_string()),
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
        assert!(open.contains("IDUTIL_REDIS_URL"), "{open}");
    }
}

// ---------------------------------------------------------------------------
// Redis as it is really deployed: replicas, failover, eviction
// ---------------------------------------------------------------------------

/// A primary with one replica that reaches it through a proxy, and a
/// holder `a` on the primary issuing at the clock's pace.
struct Replicated {
    primary: RedisServer,
    replica: RedisServer,
    link: Proxy,
    a: Arc<Generator>,
    a_driver: Option<thread::JoinHandle<(Vec<u64>, Vec<String>)>>,
    stop: Arc<AtomicBool>,
    ttl: Duration,
}

impl Replicated {
    fn start() -> Option<Replicated> {
        let primary = RedisServer::start(true)?;
        let link = Proxy::start(primary.port);
        let link_port = link.port().to_string();
        let replica = RedisServer::start_with(true, &["--replicaof", "127.0.0.1", &link_port])?;
        let mut conn = replica.conn();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .unwrap();
            if info.contains("master_link_status:up") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica never synced: {info}"
            );
            thread::sleep(Duration::from_millis(50));
        }
        seed_records(&primary, 0..=0);
        let ttl = Duration::from_secs(2);
        let host = state_dir().keep();
        let a = Arc::new(
            Generator::builder()
                .id_space(harness::space_for(&host))
                .state_dir(&host)
                .lease(LeaseConfig::new(primary.url()).ttl(ttl).shards(0..=0))
                .open()
                .unwrap(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (a.clone(), stop.clone());
        let a_driver = thread::spawn(move || {
            let (mut ids, mut errors) = (Vec::new(), Vec::new());
            while !s.load(Ordering::Relaxed) {
                match g.next_ids(20) {
                    Ok(batch) => ids.extend(batch.map(u64::from)),
                    Err(e) => errors.push(e.to_string()),
                }
                thread::sleep(Duration::from_millis(1));
            }
            (ids, errors)
        });
        Some(Replicated {
            primary,
            replica,
            link,
            a,
            a_driver: Some(a_driver),
            stop,
            ttl,
        })
    }

    /// Promotes the replica and leases shard 0 from it on a new host.
    fn promote_and_lease(&self) -> Generator {
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .exec(&mut self.replica.conn())
            .unwrap();
        let host = state_dir().keep();
        let builder = Generator::builder()
            .id_space(harness::space_for(&host))
            .state_dir(&host)
            .lease(
                LeaseConfig::new(self.replica.url())
                    .ttl(self.ttl)
                    .shards(0..=0),
            );
        open_when_free(&builder, Duration::from_secs(20)).0
    }
}

/// The replica is cut off from the primary and promoted while the old
/// primary lives on with its holder, which keeps renewing there; a new
/// holder leases shard 0 from the promoted replica. Every raise the old
/// holder used was confirmed by the replica (`WAIT`), so the new holder
/// resumes after it, and the old holder cannot raise further: it stops at
/// its mark, saying why. No duplicate.
#[test]
fn replica_promoted_while_the_old_primary_lives_issues_nothing_twice() {
    let Some(mut r) = Replicated::start() else {
        return;
    };
    thread::sleep(Duration::from_secs(3));
    r.link.cut();
    let b = r.promote_and_lease();
    let b_ids: Vec<u64> = (0..200)
        .flat_map(|_| {
            thread::sleep(Duration::from_millis(20));
            b.next_ids(50).unwrap().map(u64::from).collect::<Vec<_>>()
        })
        .collect();
    // The old holder has run past its replicated mark by now.
    thread::sleep(Duration::from_secs(6));
    r.stop.store(true, Ordering::Relaxed);
    let (a_ids, a_errors) = r.a_driver.take().unwrap().join().unwrap();
    assert!(
        a_errors
            .iter()
            .any(|e| e.contains("replicas in time") || e.contains("wait for the replicas")),
        "the old holder says why it stopped: {:?}",
        a_errors.first()
    );
    let mut seen = HashSet::new();
    record_unique(&mut seen, a_ids, "the old holder");
    record_unique(&mut seen, b_ids, "the holder on the promoted replica");
    drop(r.a);
    drop(r.primary);
}

/// The replication link stalls, then the primary and its holder die
/// together and the replica is promoted: raises made during the stall were
/// never used (their `WAIT` failed), so a new holder on the promoted
/// replica resumes after everything the old one issued.
#[test]
fn stalled_replica_promoted_after_the_primary_dies_issues_nothing_twice() {
    let Some(mut r) = Replicated::start() else {
        return;
    };
    thread::sleep(Duration::from_secs(1));
    r.link.cut();
    thread::sleep(Duration::from_secs(8));
    r.stop.store(true, Ordering::Relaxed);
    let (a_ids, _) = r.a_driver.take().unwrap().join().unwrap();
    std::mem::forget(r.a.clone());
    r.primary.kill();
    let b = r.promote_and_lease();
    let b_ids: Vec<u64> = b.next_ids(100_000).unwrap().map(u64::from).collect();
    let mut seen = HashSet::new();
    record_unique(&mut seen, a_ids, "the old holder");
    record_unique(&mut seen, b_ids, "the holder on the promoted replica");
}

/// A Redis that evicts keys under memory pressure (`allkeys-lru` with a
/// `maxmemory`, as when it doubles as a cache) is refused at open, saying
/// what to set; `noeviction` with the same limit is fine.
#[test]
fn evicting_redis_is_refused_at_open() {
    let Some(redis) = RedisServer::start_with(
        false,
        &["--maxmemory", "5mb", "--maxmemory-policy", "allkeys-lru"],
    ) else {
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

/// A record whose mark is the layout's last second (one host with a clock
/// in 2136) is skipped, naming its key, so the rest of the fleet goes on;
/// `rediss://` is refused with what to do instead.
#[test]
fn a_shard_at_the_end_of_the_range_is_skipped_and_named() {
    let Some(redis) = RedisServer::start(false) else {
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

/// A Redis that stops answering under a holder: closing (explicitly, or by
/// dropping) returns within a few round-trip deadlines (a fifth of the TTL
/// each), even in the middle of a burst that waits on a raise.
#[test]
fn closing_while_redis_hangs_is_quick() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    let proxy = Proxy::start(redis.port);
    for (round, explicit) in [(0, true), (1, false)] {
        let host = state_dir();
        let config = LeaseConfig::new(proxy.url())
            .ttl(Duration::from_secs(3))
            .shards(10 + round..=10 + round);
        let g = Arc::new(leased(&host, config).open().unwrap());
        g.next_ids(1000).unwrap();
        proxy.cut();
        let burst = {
            let g = g.clone();
            thread::spawn(move || g.next_ids(3_000_000).map(|b| b.count()))
        };
        thread::sleep(Duration::from_millis(300));
        let closing = Instant::now();
        if explicit {
            g.close().ok();
        }
        let result = burst.join().unwrap();
        drop(Arc::try_unwrap(g).ok().unwrap());
        let took = closing.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "round {round}: closing took {took:?} ({result:?})"
        );
        proxy.heal();
    }
}

/// A host clock that reads the end of the layout's range (2136) for a
/// moment right after a holder opened (before its first renewal has told
/// it Redis's clock), ten times over on one shard: the mark never moves
/// there, and the next holder opens on the shard.
#[test]
fn clock_at_2136_right_after_open_neither_ends_nor_shifts_the_shard() {
    let Some(redis) = RedisServer::start(false) else {
        return;
    };
    seed_records(&redis, 12..=12);
    let config = LeaseConfig::new(redis.url()).shards(12..=12);
    let mut seen = HashSet::new();
    for round in 0..10 {
        let host = state_dir();
        let clock = ManualClock::new(wall_now());
        let g = leased(&host, config.clone())
            .clock(clock.clone())
            // The lease's own defence, with the generator's (the end margin,
            // the forward-step limit) out of the way.
            .end_margin(Duration::ZERO)
            .max_clock_step(None)
            .open()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let who = format!("holder {round}");
        record_unique(&mut seen, g.next_ids(100).unwrap().map(u64::from), &who);
        clock.set(Layout::DEFAULT.last_unix_second() - 1);
        let during = g.next_ids(10);
        clock.set(wall_now());
        for result in [during, g.next_ids(10)] {
            match result {
                Err(Error::Lease(LeaseError::ClockSkew { .. })) => {}
                Err(e) => panic!("round {round}: unclear refusal: {e}"),
                Ok(ids) => record_unique(&mut seen, ids.map(u64::from), &who),
            }
        }
        g.close().ok();
        drop(g);
        let mark: u64 = record_of(&mut redis.conn(), "idutil:mark:12")["high_water"]
            .parse()
            .unwrap();
        assert!(
            mark < wall_now() + 3600,
            "round {round}: the shard's mark moved to {mark}"
        );
    }
}
