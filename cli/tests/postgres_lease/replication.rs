//! What a commit means with standbys: a cancelled wait for the synchronous
//! standby, and setups where a standby that lacks a raise can be promoted.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::Error;
use idutil_harness as harness;
use idutil_harness::postgres::Postgres;
use idutil_harness::proxy::Proxy;
use idutil_harness::state_dir;

use crate::check::{lease_check, line};
use crate::{leased, open_when_free, server, wait_until, Tally};

/// The synchronous standby stalls (its link cut) while a holder bursts
/// ahead of the clock; an operator cancels every backend stuck waiting for
/// it (`pg_cancel_backend`, over and over, and now and then
/// `pg_terminate_backend`), so each commit comes back with PostgreSQL's
/// warning or a dead connection; then the primary dies and the standby is
/// promoted. The holder counted none of those commits, so it issued
/// nothing past the mark the standby has (checked on the standby itself),
/// and the next holder there issues nothing twice.
#[test]
fn a_cancelled_wait_for_the_synchronous_standby_is_not_a_commit() {
    let Some(mut primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    primary.synchronous(true);
    primary.psql("CREATE TABLE probe (x int); INSERT INTO probe VALUES (1)");
    let ttl = Duration::from_secs(3);
    // The promotion's new timeline makes B raise past every reach: with a
    // skew limit of 2 s its first ID waits 9 s at most (the lease docs'
    // *Restores and rewound histories*), not 15 s.
    let config = |url: String| {
        LeaseConfig::new(url)
            .ttl(ttl)
            .max_skew(Duration::from_secs(2))
            .shards(4..=4)
    };
    let host_a = state_dir();
    let a = leased(&host_a, config(primary.tcp_url())).open().unwrap();
    let mut a_ids: Vec<u64> = a.next_ids(1000).unwrap().map(u64::from).collect();
    link.cut();
    let (stop, cancelled) = (AtomicBool::new(false), AtomicUsize::new(0));
    thread::scope(|s| {
        s.spawn(|| {
            // Cancelled, and every third time terminated: a connection
            // that dies during the commit is no acknowledgment either.
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let how = if round % 3 == 0 {
                    "pg_terminate_backend"
                } else {
                    "pg_cancel_backend"
                };
                if let Ok(n) = primary.try_psql(&format!(
                    "SELECT count(*) FILTER (WHERE {how}(pid)) \
                     FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                )) {
                    cancelled.fetch_add(n.parse().unwrap_or(0), Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(20));
            }
        });
        // A burst 20 seconds past the reservation needs raises; each one
        // is cancelled on its way to the standby. Tried for a while, as
        // an application retries, until one goes through.
        let until = std::time::Instant::now() + ttl * 2;
        while std::time::Instant::now() < until {
            if let Ok(ids) = a.next_ids(1_500_000) {
                a_ids.extend(ids.map(u64::from));
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        cancelled.load(Ordering::Relaxed) > 0,
        "no wait for the standby was cancelled: the test's premise failed"
    );
    primary.kill_immediate();
    standby.promote();
    // What the promoted standby has covers every ID A issued: the promoted
    // standby's new timeline would make B start past A anyway, so this is
    // what shows that no cancelled commit counted.
    let a_last = *a_ids.iter().max().unwrap();
    let a_last_second = idutil::Id::from_u64(a_last).unwrap().unix_seconds();
    let mark: u64 = standby
        .psql("SELECT COALESCE(max(high_water), 0) FROM idutil_lease WHERE shard = 4")
        .parse()
        .unwrap();
    assert!(
        a_last_second <= mark,
        "A issued up to second {a_last_second}, past the standby's mark {mark}: a commit \
         whose wait for the standby was cancelled counted"
    );
    thread::sleep(ttl);
    let host_b = state_dir();
    let b = open_when_free(
        &leased(&host_b, config(standby.tcp_url())),
        Duration::from_secs(20),
    );
    let mut all = Tally::new();
    all.add(a_ids, "A (old primary)");
    // A second and a half of IDs from B's first, which the raise puts past
    // every second A can have reached: more would only wait for the clock
    // under B's lead cap (a million took 15 s more), past any ID of A's.
    all.add(b.next_ids(100_000).unwrap().map(u64::from), "B (promoted)");
    println!(
        "{} waits for the synchronous standby cancelled or terminated; {} IDs from A and B, no duplicate",
        cancelled.load(Ordering::Relaxed),
        all.len()
    );
    drop(a);
}

/// Runs `idutil --lease URL next`: its exit status and standard error.
fn next_through(url: &str) -> (bool, String) {
    let dir = state_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
        .args(["--lease", url, "next"])
        .env("IDUTIL_STATE_DIR", dir.path())
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_LEASE_URL")
        .env_remove("IDUTIL_REDIS_URL")
        .env_remove("IDUTIL_LAYOUT")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sets `synchronous_standby_names` on `primary`.
fn standby_names(primary: &Postgres, names: &str) {
    primary.psql(&format!(
        "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
    ));
    primary.psql("SELECT pg_reload_conf()");
}

/// Two standbys, and settings under which only one of them confirms a
/// commit (`ANY 1`, `*`) or none does: the lease says so, naming the
/// setting and the safe ones, and refuses with `replication=strict` (or
/// `LeaseConfig::strict_replication`). `ANY 2` of both is safe.
#[test]
fn a_standby_that_may_lack_a_raise_is_warned_about_or_refused() {
    let Some(primary) = server() else { return };
    let _s1 = primary.standby(None);
    let _s2 = primary.standby(None);
    wait_until("two standbys streaming", Duration::from_secs(20), || {
        primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "2"
    });
    let url = primary.tcp_url();
    let strict = format!("{url}&replication=strict");
    for (names, says) in [
        ("ANY 1 (standby)", "quorum of 1 of 2"),
        ("*", "'*'"),
        ("", "is empty"),
    ] {
        standby_names(&primary, names);
        let (ok, stderr) = next_through(&url);
        assert!(ok, "{names}: {stderr}");
        assert!(stderr.contains(says), "{names}: {stderr}");
        assert!(stderr.contains("ANY n"), "{names}: {stderr}");
        let (ok, stderr) = next_through(&strict);
        assert!(!ok, "{names}: leased under replication=strict");
        assert!(stderr.contains(says), "{names}: {stderr}");
        let refused = leased(
            &state_dir(),
            LeaseConfig::new(&url).strict_replication(true),
        )
        .open()
        .err();
        assert!(
            matches!(refused, Some(Error::Lease(LeaseError::UnsafeStore { .. }))),
            "{names}: {refused:?}"
        );
    }
    standby_names(&primary, "ANY 2 (standby)");
    let (ok, stderr) = next_through(&strict);
    assert!(ok && stderr.is_empty(), "ANY 2 of 2: {stderr}");
    let (_, lines) = lease_check(&strict, &[]);
    line(&lines, "ok", "replication", "2 standby(s) streaming");
}

/// A holder under `replication=strict` opened while every standby
/// confirmed commits (`ANY 2` of two), and renewing; the setup turns to
/// `ANY 1`: a renewal reads it again within the lease docs' bound (three
/// TTLs: the setup is read every two TTLs, by a renewal sent within a
/// renewal period, answered within a round trip) and refuses it, so the
/// holder stops issuing, naming the setting, and goes on once the setup
/// is safe again.
#[test]
fn a_setup_turned_unsafe_under_a_strict_holder_stops_it_until_it_is_safe() {
    let Some(primary) = server() else { return };
    let _s1 = primary.standby(None);
    let _s2 = primary.standby(None);
    wait_until("two standbys streaming", Duration::from_secs(20), || {
        primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "2"
    });
    standby_names(&primary, "ANY 2 (standby)");
    let ttl = Duration::from_secs(3);
    let strict = LeaseConfig::new(format!("{}&replication=strict", primary.tcp_url())).ttl(ttl);
    let host = state_dir();
    let g = leased(&host, strict).open().unwrap();
    g.next_id().unwrap();
    // Past the first renewal, which reads the setup: the change then
    // waits for the next read, two TTLs later.
    thread::sleep(ttl / 2);
    g.next_id().unwrap();
    standby_names(&primary, "ANY 1 (standby)");
    let turned = std::time::Instant::now();
    let mut last = String::new();
    // The bound, and a second for a busy machine.
    let bound = ttl * 3;
    wait_until(
        "the holder stops",
        bound + Duration::from_secs(1),
        || match g.next_id() {
            Ok(_) => false,
            Err(e) => {
                last = e.to_string();
                true
            }
        },
    );
    assert!(
        last.contains("not known to be held") && last.contains("quorum of 1 of 2"),
        "{last}"
    );
    println!(
        "the setup turned unsafe; the holder stopped {:?} later (bound {bound:?})",
        turned.elapsed()
    );
    standby_names(&primary, "ANY 2 (standby)");
    wait_until("the holder goes on", ttl * 3, || g.next_id().is_ok());
}

/// What the warning is about, measured: `ANY 1` of two standbys, one of
/// them cut off (lagging) while a holder bursts ahead of the clock, every
/// raise confirmed by the other; the primary dies and the lagging standby
/// is promoted, its row lacking the burst's raises. Under
/// `replication=strict` the first holder would never have leased. The
/// promoted standby's new timeline is what saves the new holder there: the
/// lease's history tells it apart, and the holder starts past every ID a
/// holder can have issued, re-issuing none.
#[test]
fn any_1_of_two_with_the_lagging_one_promoted_is_measured() {
    let Some(mut primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let lagging = primary.standby(Some(link.port()));
    let _other = primary.standby(None);
    wait_until("two standbys streaming", Duration::from_secs(20), || {
        primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "2"
    });
    standby_names(&primary, "ANY 1 (standby)");
    let ttl = Duration::from_secs(2);
    let config = |url: String| LeaseConfig::new(url).ttl(ttl).shards(6..=6);
    let refused = leased(
        &state_dir(),
        config(format!("{}&replication=strict", primary.tcp_url())),
    )
    .open();
    assert!(refused.is_err(), "leased under replication=strict");
    let host_a = state_dir();
    let a = leased(&host_a, config(primary.tcp_url())).open().unwrap();
    let mut a_ids: Vec<u64> = a.next_ids(1000).unwrap().map(u64::from).collect();
    link.cut();
    a_ids.extend(a.next_ids(2_000_000).unwrap().map(u64::from));
    let a_last = *a_ids.iter().max().unwrap();
    primary.kill_immediate();
    lagging.promote();
    let mark: u64 = lagging
        .psql("SELECT COALESCE(max(high_water), 0) FROM idutil_lease WHERE shard = 6")
        .parse()
        .unwrap();
    let a_last_second = idutil::Id::from_u64(a_last).unwrap().unix_seconds();
    assert!(
        mark < a_last_second,
        "the lagging standby has the mark {mark} of A's last second {a_last_second}: it lost \
         no raise, so the measurement's premise failed"
    );
    thread::sleep(ttl);
    let host_b = state_dir();
    let b = open_when_free(
        &leased(&host_b, config(lagging.tcp_url())),
        Duration::from_secs(20),
    );
    let mut all = Tally::new();
    all.add(a_ids, "A");
    let b_ids: Vec<u64> = b.next_ids(100_000).unwrap().map(u64::from).collect();
    let b_first = b_ids[0];
    let dups = all.count_duplicates(b_ids, "B");
    println!(
        "ANY 1 of two standbys, the lagging one promoted after a burst of 2,000,000 (its mark \
         {} s behind A's last ID): {dups} of B's 100,000 IDs re-issued",
        a_last_second - mark
    );
    assert_eq!(dups, 0, "B re-issued A's IDs");
    assert!(
        b_first > a_last,
        "B started at {b_first}, not after A's {a_last}"
    );
    drop(a);
}
