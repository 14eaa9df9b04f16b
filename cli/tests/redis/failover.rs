//! A replica promoted while the old primary lives, or after it died.

use idutil_harness as harness;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil::{Generator, ManualClock};
use idutil_harness::redis_server::{seed_records, Proxy, RedisServer};
use idutil_harness::{state_dir, wall_now};

use crate::{open_when_free, record_unique};

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
    /// The wall-clock second `a` opened in.
    opened: u64,
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
            opened,
        })
    }

    /// Promotes the replica and leases shard 0 from it on a new host whose
    /// clock stands at the second `a` opened in: only the shard's record on
    /// the promoted replica keeps it from going back over `a`'s IDs.
    fn promote_and_lease(&self) -> Generator<ManualClock> {
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .exec(&mut self.replica.conn())
            .unwrap();
        let host = state_dir().keep();
        let builder = Generator::builder()
            .id_space(harness::space_for(&host))
            .state_dir(&host)
            .clock(ManualClock::new(self.opened))
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
    assert!(!a_ids.is_empty(), "the old holder issued before the cut");
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
    assert!(!a_ids.is_empty(), "the old holder issued before the stall");
    let mut seen = HashSet::new();
    record_unique(&mut seen, a_ids, "the old holder");
    record_unique(&mut seen, b_ids, "the holder on the promoted replica");
}
