//! The server's own failures: kills, restarts, cut connections, dead hosts, locked rows, hangs.

use idutil_harness as harness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil_harness::proxy::{Blackhole, Proxy};
use idutil_harness::state_dir;

use crate::{
    driven, driven_one, leased, open_when_free, server, wait_for_each_to_issue, wait_until, Driver,
    Tally,
};

/// The server is killed (`pg_ctl stop -m immediate`) under live holders
/// and started again: they stop issuing past their marks while it is down
/// and go on after it is back; the lease connections are then killed
/// (`pg_terminate_backend`) and the holders reconnect. A new holder
/// resumes after them. No duplicate.
#[test]
fn server_killed_restarted_and_connections_terminated_under_live_holders() {
    let Some(mut pg) = server() else { return };
    let url = pg.tcp_url();
    let ttl = Duration::from_secs(3);
    let stop = Arc::new(AtomicBool::new(false));
    let config = LeaseConfig::new(url.clone()).ttl(ttl).shards(0..=1);
    let (_hosts, holders, drivers) = driven(2, &config, &stop);
    wait_until("issuing", Duration::from_secs(10), || {
        drivers.iter().all(|d| d.issued() > 1000)
    });

    pg.kill_immediate();
    // Down for longer than the TTL: both fence themselves.
    wait_until("both fenced", Duration::from_secs(10), || {
        drivers.iter().all(|d| {
            d.errors
                .lock()
                .unwrap()
                .iter()
                .any(|e| e.contains("not known to be held"))
        })
    });
    pg.restart();
    wait_for_each_to_issue(
        &drivers,
        1000,
        "issuing again after the restart",
        Duration::from_secs(20),
    );

    let killed = pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'idutil-lease'",
    );
    assert!(killed.parse::<u32>().unwrap() >= 2, "{killed}");
    wait_for_each_to_issue(
        &drivers,
        3000,
        "issuing after the connections were killed",
        Duration::from_secs(20),
    );
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::new();
    for (i, d) in drivers.into_iter().enumerate() {
        let (ids, _) = d.finish();
        all.add(ids, &format!("holder {i}"));
    }
    drop(holders);
    let later = state_dir();
    let g = leased(&later, LeaseConfig::new(url).ttl(ttl).shards(0..=1))
        .open()
        .unwrap();
    all.add(
        g.next_ids(5000).unwrap().map(u64::from),
        "the holder after them",
    );
}

/// A holder cut off from the server by a proxy: for less than the fence,
/// it goes on; for longer than the TTL, it stops, another holder leases the
/// shard and issues, and the first, once the cut heals, finds the fencing
/// epoch moved and stops for good. No duplicate.
#[test]
fn holder_cut_off_shorter_and_longer_than_the_ttl() {
    let Some(pg) = server() else { return };
    let proxy = Proxy::start(pg.port());
    let via = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    let ttl = Duration::from_secs(2);
    let stop = Arc::new(AtomicBool::new(false));
    let config = LeaseConfig::new(via).ttl(ttl).shards(5..=5);
    let (_host_a, _a, driver_a) = driven_one(&config, &stop);
    wait_until("A issues", Duration::from_secs(5), || {
        driver_a.issued() > 500
    });

    // Shorter than the fence (3/4 of the TTL from the last renewal): no
    // stop. The cut lasts until a renewal finds the server gone (the
    // holder's connection closed, its next one held unanswered), at most
    // the time between two renewals.
    proxy.cut();
    wait_until("A tries the server while cut off", ttl, || proxy.held() > 0);
    proxy.heal();
    let before = driver_a.issued();
    wait_until("A goes on", Duration::from_secs(5), || {
        driver_a.issued() > before + 500
    });

    // Longer than the TTL: A fences, B leases the shard.
    proxy.cut();
    let cut_at = Instant::now();
    wait_until("A fenced", Duration::from_secs(5), || {
        driver_a
            .errors
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains("not known to be held"))
    });
    // No call made from one TTL after the cut issued (judged by when each
    // call was made, so a loaded machine that reads the answers late
    // cannot fail this).
    let last_issue = driver_a.last_issue.lock().unwrap().unwrap();
    assert!(
        last_issue < cut_at + ttl,
        "A stops before its lease can expire: it issued {:?} after the cut",
        last_issue - cut_at
    );
    let host_b = state_dir();
    let b = Arc::new(open_when_free(
        &leased(
            &host_b,
            LeaseConfig::new(pg.tcp_url()).ttl(ttl).shards(5..=5),
        ),
        Duration::from_secs(10),
    ));
    let driver_b = Driver::start(b.clone(), stop.clone());
    wait_until("B issues", Duration::from_secs(5), || {
        driver_b.issued() > 500
    });
    proxy.heal();
    wait_until("A finds the shard taken", Duration::from_secs(10), || {
        driver_a
            .errors
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains("fencing epoch moved"))
    });
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    assert_eq!(
        *driver_a.last_issue.lock().unwrap(),
        Some(last_issue),
        "A issued again after B took the shard"
    );
    let mut all = Tally::new();
    all.add(driver_a.finish().0, "A");
    all.add(driver_b.finish().0, "B");
}

/// A multi-host URL whose first host is cut off (packets dropped, or a
/// server that accepts and never answers): every connection goes on to the
/// second host within the round trip's deadline, as libpq's per-host
/// `connect_timeout` does, so a fleet follows a failover whatever became
/// of the old primary.
#[test]
fn a_dead_first_host_does_not_keep_holders_from_the_next() {
    let Some(pg) = server() else { return };
    let blackhole = Blackhole::start();
    let silent = Proxy::start(pg.port());
    silent.cut();
    for (how, port) in [
        ("dropping packets", blackhole.port()),
        ("silent", silent.port()),
    ] {
        let url = format!(
            "postgres://postgres@127.0.0.1:{port},127.0.0.1:{}/postgres?sslmode=disable&target_session_attrs=read-write",
            pg.port()
        );
        let host = state_dir();
        let config = LeaseConfig::new(url)
            .ttl(Duration::from_secs(2))
            .shards(7..=7);
        let g = leased(&host, config)
            .open()
            .unwrap_or_else(|e| panic!("first host {how}: {e}"));
        // A burst past the reservation: raises go through the second host.
        g.next_ids(300_000)
            .unwrap_or_else(|e| panic!("first host {how}: {e}"));
        // Renewals, on a connection of their own, go there too: no fence.
        thread::sleep(Duration::from_secs(3));
        g.next_ids(300_000)
            .unwrap_or_else(|e| panic!("first host {how}, after the TTL: {e}"));
        let closing = Instant::now();
        g.close().unwrap();
        assert!(closing.elapsed() < Duration::from_secs(3), "{how}");
        let holder = pg.psql("SELECT coalesce(holder, 'none') FROM idutil_lease WHERE shard = 7");
        assert_eq!(
            holder, "none",
            "first host {how}: the lease was not given back"
        );
    }
}

/// A multi-host URL that does not say `target_session_attrs=read-write`,
/// whose first host is a standby (an old primary that came back as one
/// after a failover): the lease only ever writes, so every connection goes
/// to the host that accepts writes, as if the URL had said so.
#[test]
fn a_read_only_first_host_is_passed_over() {
    let Some(primary) = server() else { return };
    let standby = primary.standby(None);
    let host = state_dir();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?sslmode=disable",
        standby.port(),
        primary.port()
    );
    let g = leased(
        &host,
        LeaseConfig::new(url)
            .ttl(Duration::from_secs(2))
            .shards(3..=3),
    )
    .open()
    .unwrap_or_else(|e| panic!("{e}"));
    g.next_ids(300_000).unwrap();
    thread::sleep(Duration::from_secs(3));
    g.next_ids(1000).unwrap();
}

/// The lease's row locked by someone else's long transaction: each
/// renewal gives up at its deadline and retries on a new connection, and
/// the server gives up the abandoned statement too (`lock_timeout`), so
/// the holder does not pile up sessions waiting on the lock, which would
/// use up the application's own database connections.
#[test]
fn a_locked_row_does_not_pile_up_sessions() {
    let Some(pg) = server() else { return };
    let host = state_dir();
    let g = leased(
        &host,
        LeaseConfig::new(pg.tcp_url())
            .ttl(Duration::from_secs(2))
            .shards(2..=2),
    )
    .open()
    .unwrap();
    g.next_ids(100).unwrap();
    let most = thread::scope(|s| {
        let locker = s.spawn(|| {
            pg.try_psql(
                "BEGIN; SELECT shard FROM idutil_lease WHERE shard = 2 FOR UPDATE; \
                 SELECT pg_sleep(6); COMMIT",
            )
        });
        let mut most = 0;
        while !locker.is_finished() {
            let n: u32 = pg
                .psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = \
                     'idutil-lease' AND wait_event_type = 'Lock'",
                )
                .parse()
                .unwrap();
            most = most.max(n);
            thread::sleep(Duration::from_millis(200));
        }
        locker.join().unwrap().unwrap();
        most
    });
    assert!(
        most <= 3,
        "{most} lease sessions waited on the lock at once"
    );
    // The lock gone, the holder renews and issues again.
    wait_until("issuing again", Duration::from_secs(5), || {
        g.next_id().is_ok()
    });
}

/// A store that stops answering under a holder with the default TTL (a
/// minute): closing (explicitly, or by dropping) returns within a few
/// round-trip deadlines, even in the middle of a burst that waits on a
/// raise, and the lease expires by itself. A round trip waits a fifth of
/// the TTL and a close a quarter, but at most 2 s and 2.5 s.
#[test]
fn closing_while_the_store_hangs_is_quick() {
    let Some(pg) = server() else { return };
    let proxy = Proxy::start(pg.port());
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    harness::lease::assert_closing_while_the_store_hangs_is_quick(
        &[(0, true), (1, false), (2, true)],
        Duration::from_secs(8),
        // A shard each round: a holder dropped without giving its lease
        // back holds its shard for the TTL, a minute. (A hand edit of the
        // row to free it would make the next open raise the ID space past
        // it, and the burst then wait for its lead cap first.)
        |round, host| {
            leased(
                host,
                LeaseConfig::new(url.clone()).shards(8 + round..=8 + round),
            )
            .open()
            .unwrap()
        },
        || proxy.cut(),
        || proxy.heal(),
    );
}
