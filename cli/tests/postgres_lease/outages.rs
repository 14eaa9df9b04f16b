//! The server's own failures: dead and read-only hosts, locked rows, hangs.

use idutil_harness as harness;

use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil_harness::proxy::{Blackhole, Proxy};
use idutil_harness::state_dir;

use crate::{leased, server, wait_until};

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
