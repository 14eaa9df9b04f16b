//! A replica promoted while the old primary lives, or after it died; a
//! replica of a replica.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator};
use idutil_harness::redis_server::{seed_records, Proxy, RedisServer};
use idutil_harness::{state_dir, wall_now, Ledger};

use crate::{leased, open_when_free};

/// A primary with one replica that reaches it through a proxy, and a
/// holder `a` on the primary issuing at the clock's pace.
struct Replicated {
    primary: RedisServer,
    replica: RedisServer,
    link: Proxy,
    a: Arc<Generator>,
    a_driver: Option<thread::JoinHandle<(Vec<u64>, Vec<String>)>>,
    /// How many IDs `a` has issued, and its errors, as they happen.
    a_issued: Arc<AtomicUsize>,
    a_errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    ttl: Duration,
    /// The wall-clock second `a` opened in.
    opened: u64,
}
/// Waits until `server`'s `INFO replication` passes `done`.
fn wait_for_info(server: &RedisServer, what: &str, done: impl Fn(&str) -> bool) {
    let mut conn = server.conn();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .unwrap();
        if done(&info) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {info}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `server`'s `INFO replication` says `what`.
fn wait_for(server: &RedisServer, what: &str) {
    wait_for_info(server, what, |info| info.contains(what));
}

/// Waits until every replica of `primary` has acknowledged all of its
/// replication stream (each `slaveN` line's `offset` is the
/// `master_repl_offset`).
fn wait_caught_up(primary: &RedisServer) {
    wait_for_info(primary, "the replicas caught up", |info| {
        let offset = info
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .map(str::trim);
        let mut replicas = info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains(":ip="))
            .map(|l| l.split(',').find_map(|kv| kv.strip_prefix("offset=")))
            .peekable();
        replicas.peek().is_some() && replicas.all(|o| o == offset)
    });
}

/// Makes `replica` a replica of `primary` (`None`: a primary itself).
fn replica_of(replica: &RedisServer, primary: Option<&RedisServer>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match primary {
        Some(p) => cmd.arg("127.0.0.1").arg(p.port),
        None => cmd.arg("NO").arg("ONE"),
    };
    cmd.exec(&mut replica.conn()).unwrap();
}

impl Replicated {
    fn start() -> Option<Replicated> {
        let primary = RedisServer::start()?;
        let link = Proxy::start(primary.port);
        let link_port = link.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link_port])?;
        wait_for(&replica, "master_link_status:up");
        seed_records(&primary, 0..=0);
        let ttl = Duration::from_secs(2);
        let host = state_dir().keep();
        let opened = wall_now();
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
        let a_issued = Arc::new(AtomicUsize::new(0));
        let a_errors = Arc::new(Mutex::new(Vec::new()));
        let (issued, errors) = (a_issued.clone(), a_errors.clone());
        let a_driver = thread::spawn(move || {
            let mut ids = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match g.next_ids(20) {
                    Ok(batch) => {
                        ids.extend(batch.map(u64::from));
                        issued.store(ids.len(), Ordering::Relaxed);
                    }
                    Err(e) => errors.lock().unwrap().push(e.to_string()),
                }
                thread::sleep(Duration::from_millis(1));
            }
            let errors = errors.lock().unwrap().clone();
            (ids, errors)
        });
        Some(Replicated {
            primary,
            replica,
            link,
            a,
            a_driver: Some(a_driver),
            a_issued,
            a_errors,
            stop,
            ttl,
            opened,
        })
    }

    /// Waits until `a` has issued more than `n` IDs.
    fn wait_until_a_issued(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.a_issued.load(Ordering::Relaxed) <= n {
            assert!(Instant::now() < deadline, "the holder never issued {n} IDs");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `a` has stopped at its mark for want of the replica:
    /// a raise it needed was not confirmed (`WAIT`).
    fn wait_until_a_stops_for_the_replica(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let stopped = self
                .a_errors
                .lock()
                .unwrap()
                .iter()
                .any(|e| e.contains("replicas in time") || e.contains("wait for the replicas"));
            if stopped {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the holder never stopped for the replica: {:?}",
                self.a_errors.lock().unwrap().first()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes the replica and leases shard 0 from it on a new host. The
    /// promoted replica is another server (another run ID) than the one
    /// that confirmed the record, so the new holder waits a TTL and starts
    /// past what a holder can have issued (a small skew limit keeps that
    /// short); the record it had from `a` is never gone back over either.
    /// Returns it with its first ID.
    fn promote_and_lease(&self) -> (Generator, u64) {
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
                    .shards(0..=0)
                    .max_skew(Duration::from_secs(1)),
            );
        let b = open_when_free(&builder, Duration::from_secs(20)).0;
        let first = b.next_id().unwrap();
        assert!(
            first.unix_seconds() > self.opened + 30,
            "the new holder starts past the lead cap"
        );
        (b, first.as_u64())
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
    // A few raises confirmed by the replica first.
    r.wait_until_a_issued(20_000);
    r.link.cut();
    let (b, b_first) = r.promote_and_lease();
    let mut b_ids = vec![b_first];
    b_ids.extend((0..200).flat_map(|_| {
        thread::sleep(Duration::from_millis(20));
        b.next_ids(50).unwrap().map(u64::from).collect::<Vec<_>>()
    }));
    // The old holder runs up to its replicated mark, and stops there.
    r.wait_until_a_stops_for_the_replica();
    r.stop.store(true, Ordering::Relaxed);
    let (a_ids, a_errors) = r.a_driver.take().unwrap().join().unwrap();
    assert!(
        a_errors
            .iter()
            .any(|e| e.contains("replicas in time") || e.contains("wait for the replicas")),
        "the old holder says why it stopped: {:?}",
        a_errors.first()
    );
    assert!(!a_ids.is_empty(), "the old holder issued before the cut");
    let mut seen = Tally::new();
    seen.add(a_ids, "the old holder");
    seen.add(b_ids, "the holder on the promoted replica");
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
    r.wait_until_a_issued(5_000);
    r.link.cut();
    // The stall: raises made now are never confirmed, and the holder
    // stops at its replicated mark.
    r.wait_until_a_stops_for_the_replica();
    r.stop.store(true, Ordering::Relaxed);
    let (a_ids, _) = r.a_driver.take().unwrap().join().unwrap();
    std::mem::forget(r.a.clone());
    r.primary.kill();
    let (b, b_first) = r.promote_and_lease();
    let mut b_ids = vec![b_first];
    b_ids.extend(b.next_ids(100_000).unwrap().map(u64::from));
    assert!(!a_ids.is_empty(), "the old holder issued before the stall");
    let mut seen = Tally::new();
    seen.add(a_ids, "the old holder");
    seen.add(b_ids, "the holder on the promoted replica");
}

/// A chain, primary <- R1 <- R2: a raise waits (`WAIT`) only for the
/// primary's own replicas, so R2 may lack it and be promoted. The chain is
/// refused at open, naming R1, and `idutil lease check` names it. With R2
/// detached a holder opens; when R2 is attached to R1 again, the holder
/// stops for good at its next renewal, naming the chain. R2 promoted then,
/// a holder leasing from it starts after everything the first one issued.
#[test]
fn a_chained_replica_is_refused_and_one_chained_later_stops_the_holder() {
    let Some(primary) = RedisServer::start() else {
        return;
    };
    let Some(r1) =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()])
    else {
        return;
    };
    wait_for(&r1, "master_link_status:up");
    let Some(r2) = RedisServer::start_with(&["--replicaof", "127.0.0.1", &r1.port.to_string()])
    else {
        return;
    };
    wait_for(&r2, "master_link_status:up");
    seed_records(&primary, 0..=0);
    let config = |url: String| {
        LeaseConfig::new(url)
            .shards(0..=0)
            .ttl(Duration::from_secs(2))
            .max_skew(Duration::from_secs(1))
    };
    let chain = format!("replica 127.0.0.1:{} has 1 replica(s) of its own", r1.port);
    let err = leased(&state_dir(), config(primary.url()))
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    assert!(err.to_string().contains(&chain), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["lease", "check", &primary.url()])
        .env_remove("IDUTIL_LEASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("fail replication: ") && l.contains(&chain)),
        "{text}"
    );

    replica_of(&r2, None);
    wait_for(&r1, "connected_slaves:0");
    // R1 acknowledges the primary's stream again (a raise waits for it
    // for a fraction of the TTL only).
    wait_caught_up(&primary);
    let mut ledger = Ledger::new();
    let (host_a, host_b) = (state_dir(), state_dir());
    let a = leased(&host_a, config(primary.url()))
        .open()
        .unwrap_or_else(|e| panic!("with the chain undone: {e}"));
    ledger.record(&a.next_ids(1000).unwrap().map(u64::from).collect::<Vec<_>>());
    replica_of(&r2, Some(&r1));
    wait_for(&r2, "master_link_status:up");
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match a.next_id() {
            Ok(id) => ledger.record(&[u64::from(id)]),
            Err(e) => break e,
        }
        assert!(Instant::now() < deadline, "the holder still issues");
        thread::sleep(Duration::from_millis(5));
    };
    assert!(
        matches!(err, Error::Lease(LeaseError::UnsafeStore { .. })),
        "{err}"
    );
    assert!(err.to_string().contains(&chain), "{err}");
    assert!(a.next_id().is_err(), "stopped for good");

    replica_of(&r2, None);
    let builder = leased(&host_b, config(r2.url()));
    let (b, _) = open_when_free(&builder, Duration::from_secs(20));
    ledger.record_after_all(&b.next_ids(1000).unwrap().map(u64::from).collect::<Vec<_>>());
    drop(a);
}
