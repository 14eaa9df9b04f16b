//! Standbys: failover, split brain, commits a standby never got.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil_harness::postgres::Postgres;
use idutil_harness::proxy::Proxy;
use idutil_harness::state_dir;

use crate::{driven, driven_one, leased, open_when_free, server, wait_until, Driver, Tally};

/// The skew limit of these tests' holders. A promotion makes the first
/// holder after it raise by twice this limit among the rest, and wait for
/// it (the lease docs' *Restores and rewound histories*): 4 s here, not
/// the default limit's 10 s.
const SKEW: Duration = Duration::from_secs(2);

/// A primary with a synchronous streaming standby; holders reach them
/// through a two-host URL (`target_session_attrs=read-write`). Each holder
/// bursts about 7 seconds ahead of the clock, so its mark runs ahead of
/// anything a new holder would start at on the real clock; then the
/// primary is killed and the standby promoted. The holders follow to it
/// and keep issuing (their marks are there), and new holders resume after
/// every mark. No duplicate.
#[test]
fn failover_to_a_synchronous_standby_issues_nothing_twice() {
    if let Some(Err(e)) = failover_after_a_burst(true) {
        panic!("{e}");
    }
}

/// The check above, against a standby that deliberately lacks the marks
/// (asynchronous, its replication cut before the burst): it must fail.
#[test]
fn the_failover_check_fails_when_the_standby_lacks_the_marks() {
    match failover_after_a_burst(false) {
        None => {}
        Some(Ok(())) => panic!(
            "the failover check passed although the promoted standby lacked every burst's mark"
        ),
        Some(Err(e)) => println!("caught, as it must be: {e}"),
    }
}

/// The failover of the two tests above. `Err`: what shows that a mark was
/// lost (a holder that stopped on the promoted standby, a new holder that
/// did not resume after its shard's IDs, or a duplicate). `None`: no
/// PostgreSQL to test with.
fn failover_after_a_burst(synchronous: bool) -> Option<Result<(), String>> {
    let mut primary = server()?;
    Some(failover_on(&mut primary, synchronous))
}

fn failover_on(primary: &mut Postgres, synchronous: bool) -> Result<(), String> {
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    if synchronous {
        primary.synchronous(true);
        // A write now waits for the standby.
        primary.psql("CREATE TABLE probe (x int); INSERT INTO probe VALUES (1)");
    }
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?sslmode=disable&target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let ttl = Duration::from_secs(3);
    let stop = Arc::new(AtomicBool::new(false));
    // The promotion's new timeline makes the new holders raise past every
    // reach: their first ID waits 9 s at most, not 15 s.
    let config = LeaseConfig::new(url.clone())
        .ttl(ttl)
        .max_skew(SKEW)
        .shards(0..=3);
    let (_hosts, holders, drivers) = driven(3, &config, &stop);
    wait_until("issuing", Duration::from_secs(10), || {
        drivers.iter().all(|d| d.issued() > 2000)
    });
    if !synchronous {
        // From here on the marks reach the primary alone.
        link.cut();
    }
    let mut all = Tally::new();
    for (i, g) in holders.iter().enumerate() {
        // About 7 seconds of IDs at once: the mark runs ahead of the clock.
        let burst = g.next_ids(450_000).map_err(|e| format!("burst {i}: {e}"))?;
        all.add(burst.map(u64::from), &format!("burst {i}"));
    }
    primary.kill_immediate();
    standby.promote();
    // The holders keep issuing on the promoted standby through two
    // renewals there: a holder whose mark the standby lacks stops.
    let promoted = Instant::now();
    let issued: Vec<usize> = drivers.iter().map(Driver::issued).collect();
    let deadline = promoted + Duration::from_secs(30);
    while promoted.elapsed() < ttl
        || drivers
            .iter()
            .zip(&issued)
            .any(|(d, n)| d.issued() < n + 3000)
    {
        if Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let mut dups = Vec::new();
    let mut stopped = Vec::new();
    for (i, (d, before)) in drivers.into_iter().zip(issued).enumerate() {
        let who = format!("holder {i}");
        let (ids, errors) = d.finish();
        if ids.len() < before + 3000 || errors.iter().any(|e| e.contains("lost")) {
            stopped.push(format!("{who}: {:?}", errors.last()));
        }
        dups.push((all.count_duplicates(ids, &who), who));
    }
    // Holders that crash without a clean close: their marks are on the
    // standby, and new holders resume after them: past every ID their
    // shard issued, whatever the clock says.
    for g in &holders {
        std::mem::forget(g.clone());
    }
    drop(holders);
    thread::sleep(ttl + Duration::from_millis(500));
    let mut behind = Vec::new();
    for i in 0..4 {
        let host = state_dir();
        let g = open_when_free(&leased(&host, config.clone()), Duration::from_secs(10));
        let ids: Vec<u64> = g
            .next_ids(3000)
            .map_err(|e| format!("new holder {i}: {e}"))?
            .map(u64::from)
            .collect();
        let who = format!("new holder {i}");
        let last_before = all.last_of_shard(g.shard());
        if last_before.is_some_and(|last| ids[0] <= last) {
            behind.push(format!(
                "{who} started at {} on shard {}, not after {last_before:?}",
                ids[0],
                g.shard()
            ));
        }
        dups.push((all.count_duplicates(ids, &who), who));
    }
    if !stopped.is_empty() {
        return Err(format!(
            "holders stopped on the promoted standby: {stopped:?}"
        ));
    }
    if !behind.is_empty() {
        return Err(format!(
            "new holders did not resume after their shard's IDs: {behind:?}"
        ));
    }
    match dups.iter().find(|(n, _)| *n > 0) {
        Some((n, who)) => Err(format!("{who} re-issued {n} IDs")),
        None => Ok(()),
    }
}

/// Split brain: the primary is cut off from its synchronous standby, the
/// standby is promoted, and a new holder leases the shard there while the
/// old holder still talks to the old primary. The old primary cannot
/// commit a renewal or a raise, so the old holder fences itself; the new
/// one resumes after every mark the old one used. No duplicate.
#[test]
fn split_brain_with_a_synchronous_standby_issues_nothing_twice() {
    let Some(primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    primary.synchronous(true);
    primary.psql("CREATE TABLE probe (x int); INSERT INTO probe VALUES (1)");
    let ttl = Duration::from_secs(3);
    let stop = Arc::new(AtomicBool::new(false));
    let config = |url: String| LeaseConfig::new(url).ttl(ttl).max_skew(SKEW).shards(2..=2);
    let (_host_a, a, driver_a) = driven_one(&config(primary.tcp_url()), &stop);
    wait_until("A issues", Duration::from_secs(10), || {
        driver_a.issued() > 2000
    });

    link.cut();
    standby.promote();
    let host_b = state_dir();
    let b = Arc::new(open_when_free(
        &leased(&host_b, config(standby.tcp_url())),
        Duration::from_secs(20),
    ));
    let driver_b = Driver::start(b.clone(), stop.clone());
    // The promotion's new timeline raises the shard past what any holder
    // can issue: the lead cap, the fence (3 s) and twice the skew limit
    // (4 s) plus a second past the server's clock, so B's first ID waits
    // 9 s at most for its clock to come within its cap (the lease docs'
    // *Restores and rewound histories*); then it issues.
    wait_until("B issues", Duration::from_secs(9 + 10), || {
        driver_b.issued() > 3000
    });
    // A has stopped: its renewals cannot commit on the old primary.
    driver_a.assert_stopped("the old holder");
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::new();
    let (a_ids, a_errors) = driver_a.finish();
    assert!(
        a_errors.iter().any(|e| e.contains("not known to be held")),
        "{:?}",
        a_errors.first()
    );
    all.add(a_ids, "A (old primary)");
    all.add(driver_b.finish().0, "B (promoted standby)");
    // The old primary cannot even give the lease back; closing A must not
    // hang for long.
    let closing = Instant::now();
    drop(b);
    drop(a);
    assert!(closing.elapsed() < Duration::from_secs(15));
}

/// A role whose sessions have a short `statement_timeout` (200 ms, set as
/// the role's default) and a synchronous standby cut off: nothing is issued
/// past the reservation and nothing is leased. PostgreSQL does not apply
/// `statement_timeout` to a commit's wait for the standby (it is disarmed
/// before the commit), so this shows that such a role changes nothing; a
/// wait that *is* cancelled (`pg_cancel_backend`, a terminated session) is
/// the cancelled-wait tests' subject.
#[test]
fn a_short_statement_timeout_lets_nothing_past_a_cut_off_standby() {
    let Some(primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    primary.synchronous(true);
    primary.psql("CREATE TABLE probe (x int); INSERT INTO probe VALUES (1)");
    primary.psql("ALTER ROLE postgres SET statement_timeout = '200ms'");
    let ttl = Duration::from_secs(3);
    let host_a = state_dir();
    let a = leased(
        &host_a,
        LeaseConfig::new(primary.tcp_url()).ttl(ttl).shards(4..=4),
    )
    .open()
    .unwrap();
    let before = u64::from(a.next_id().unwrap());
    link.cut();
    // A burst 20 seconds past the reservation needs raises, which cannot
    // reach the standby.
    let burst = a.next_ids(1_500_000);
    assert!(
        burst.is_err(),
        "a holder cut off from its synchronous standby borrowed ahead (from {before})"
    );
    // Nor can a new holder lease a shard there: it tries until its open
    // deadline, here a short one.
    let host_b = state_dir();
    let b = leased(
        &host_b,
        LeaseConfig::new(primary.tcp_url())
            .ttl(ttl)
            .shards(5..=5)
            .open_timeout(Duration::from_secs(3)),
    )
    .open();
    assert!(
        b.is_err(),
        "a shard was leased from a primary cut off from its synchronous standby"
    );
    drop(standby);
}

/// The same failover with an asynchronous standby whose replication is cut
/// while a holder bursts about 30 seconds ahead of the clock (its lead
/// cap), then the primary dies: the promoted standby never got those
/// raises. But it runs on a new timeline, which the lease's history tells
/// apart, so a new holder there starts past every ID a holder can have
/// issued: nothing is issued twice.
#[test]
fn failover_to_an_asynchronous_standby_issues_nothing_twice() {
    let Some(mut primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    let ttl = Duration::from_secs(2);
    let stop = Arc::new(AtomicBool::new(false));
    // B's raise (the lead cap, the fence, twice the skew limit and a
    // second: 37 s past the clock) lands past A's burst (30 s); its first
    // ID waits 8 s at most, not 14 s.
    let config = |url: String| LeaseConfig::new(url).ttl(ttl).max_skew(SKEW).shards(1..=1);
    let (_host_a, a, driver_a) = driven_one(&config(primary.tcp_url()), &stop);
    wait_until("A issues", Duration::from_secs(10), || {
        driver_a.issued() > 2000
    });
    link.cut();
    stop.store(true, Ordering::Relaxed);
    let (mut a_ids, _) = driver_a.finish();
    // A burst while the standby hears nothing: A borrows about 30 seconds
    // ahead, raising its mark on the primary alone.
    a_ids.extend(a.next_ids(2_000_000).unwrap().map(u64::from));
    let a_last = *a_ids.iter().max().unwrap();
    primary.kill_immediate();
    standby.promote();
    thread::sleep(ttl);
    let host_b = state_dir();
    let b = open_when_free(
        &leased(&host_b, config(standby.tcp_url())),
        Duration::from_secs(20),
    );
    let mut all = Tally::new();
    all.add(a_ids.iter().copied(), "A");
    let b_ids: Vec<u64> = b.next_ids(100_000).unwrap().map(u64::from).collect();
    assert!(
        b_ids[0] > a_last,
        "B started at {}, not after A's {a_last}",
        b_ids[0]
    );
    all.add(b_ids, "B");
}

/// Mixed lead caps across the promotion of an asynchronous standby: B
/// (a cap of 23 s) takes shard 1 and gives it back, which the standby
/// hears (the ID space's history and the shard's record B's reach); the
/// standby's replication is cut; B2 (the same cap) takes shard 1 on the
/// primary alone and bursts about 22 seconds ahead; the primary dies and
/// the standby is promoted. C, capped at 1 s, finds the new timeline and
/// raises the rows by the reach in force, which counts the reach recorded
/// for shard 1's last holder, B, although the row names no holder: B2, on
/// no record, is covered by it. (Counting only the holders the rows name,
/// C re-issued all 100,000 of B2's IDs: its own reach, 1 s + 2 s, twice
/// the skew limit and a second put its first ID 9 s past the clock,
/// inside B2's burst while C opens within 13 s of it, as with the default
/// cap and skew limit.) C's first ID waits for the difference of the caps
/// (the lease docs' *Restores and rewound histories*): 30 s with these
/// caps, 43 s with the default cap (30 s) and skew limit.
#[test]
fn mixed_caps_across_an_asynchronous_failover_issue_nothing_twice() {
    let Some(mut primary) = server() else { return };
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    let ttl = Duration::from_secs(2);
    let config = |url: String| {
        LeaseConfig::new(url)
            .ttl(ttl)
            .max_skew(SKEW)
            .max_lead(Duration::from_secs(23))
            .shards(1..=1)
    };
    let mut all = Tally::new();
    let host_b = state_dir();
    let b = leased(&host_b, config(primary.tcp_url())).open().unwrap();
    all.add(b.next_ids(1000).unwrap().map(u64::from), "B");
    b.close().unwrap();
    wait_until(
        "the standby hears B's close",
        Duration::from_secs(10),
        || {
            standby.psql("SELECT count(*) FROM idutil_lease WHERE shard = 1 AND holder IS NULL")
                == "1"
        },
    );
    link.cut();
    let host_b2 = state_dir();
    let b2 = leased(&host_b2, config(primary.tcp_url())).open().unwrap();
    all.add(b2.next_ids(1_470_000).unwrap().map(u64::from), "B2");
    primary.kill_immediate();
    standby.promote();
    thread::sleep(ttl);
    let host_c = state_dir();
    let c = open_when_free(
        &leased(&host_c, config(standby.tcp_url())).max_lead(Duration::from_secs(1)),
        Duration::from_secs(30),
    );
    let repeats = all.count_duplicates(c.next_ids(100_000).unwrap().map(u64::from), "C");
    assert_eq!(repeats, 0, "C re-issued B2's IDs");
}
