//! Settings as operators leave them: a role whose transactions default to
//! `serializable` and end after a millisecond idle, and a server whose
//! clock runs an hour ahead when a holder meets a rewritten lease table.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator};
use idutil_harness::state_dir;

use crate::check::{lease_check, line};
use crate::{leased, server, Tally};

/// Opens `n` holders at once, each on a host of its own; every result.
fn open_at_once(
    n: usize,
    config: &LeaseConfig,
) -> Vec<(tempfile::TempDir, Result<Generator, Error>)> {
    let hosts: Vec<_> = (0..n).map(|_| state_dir()).collect();
    let opened: Vec<_> = thread::scope(|s| {
        let opening: Vec<_> = hosts
            .iter()
            .map(|h| s.spawn(|| leased(h, config.clone()).open()))
            .collect();
        opening.into_iter().map(|o| o.join().unwrap()).collect()
    });
    hosts.into_iter().zip(opened).collect()
}

/// A role whose transactions default to `serializable` and are ended by
/// the server after a millisecond idle in a transaction: 20 holders
/// opening at once all open, issue, and give their shards back; `lease
/// check` names both settings and what the lease does about them.
#[test]
fn a_serializable_role_with_a_1ms_idle_timeout_opens_every_holder() {
    let Some(pg) = server() else { return };
    pg.psql("ALTER ROLE postgres SET default_transaction_isolation = 'serializable'");
    pg.psql("ALTER ROLE postgres SET idle_in_transaction_session_timeout = '1ms'");
    let config = LeaseConfig::new(pg.tcp_url()).shards(0..=31);
    let mut all = Tally::new();
    let opened = open_at_once(20, &config);
    for (i, (_, g)) in opened.iter().enumerate() {
        let g = g
            .as_ref()
            .unwrap_or_else(|e| panic!("holder {i} did not open: {e}"));
        all.add(
            g.next_ids(1000).unwrap().map(u64::from),
            &format!("holder {i}"),
        );
    }
    for (_, g) in opened {
        g.unwrap().close().unwrap();
    }
    let held = pg.psql("SELECT count(*) FROM idutil_lease WHERE holder IS NOT NULL");
    assert_eq!(held, "0", "every shard is given back");

    let (_, lines) = lease_check(&pg.tcp_url(), &[]);
    line(
        &lines,
        "ok",
        "session",
        "default_transaction_isolation = serializable",
    );
    line(
        &lines,
        "ok",
        "session",
        "idle_in_transaction_session_timeout = 1ms",
    );
}

/// A role whose statements the server cancels after 50 ms is warned of;
/// one that cannot write (`default_transaction_read_only`) fails the audit
/// at the connection, saying so.
#[test]
fn lease_check_names_a_short_statement_timeout_and_a_read_only_role() {
    let Some(pg) = server() else { return };
    pg.psql("ALTER ROLE postgres SET statement_timeout = '50ms'");
    let (_, lines) = lease_check(&pg.tcp_url(), &[]);
    line(&lines, "warn", "session", "statement_timeout = 50ms");
    pg.psql("ALTER ROLE postgres SET default_transaction_read_only = on");
    let (ok, lines) = lease_check(&pg.tcp_url(), &[]);
    assert!(!ok, "{lines:?}");
    line(&lines, "fail", "connection", "does not allow writes");
}

/// Holders issue and close; the lease table is rewritten (`VACUUM FULL`: a
/// new file node, which the lease history takes for a restore); the
/// server comes back with its clock an hour ahead. A holder opening then
/// is refused, naming the skew, before it raises anything: no mark moves.
/// With the server's clock right again, new holders open and issue at
/// once (the raise counts from the true clock), after every ID issued
/// before.
#[test]
fn a_server_clock_an_hour_ahead_raises_no_mark() {
    let Some(mut pg) = server() else { return };
    // Small margins, so that the raise after the rewrite costs seconds:
    // the lead cap, the fence (1 s) and twice the skew limit past the
    // server's clock, a 4 s wait for the first ID. (An hour's wait, were
    // the raise counted from the skewed clock.)
    let config = LeaseConfig::new(pg.tcp_url())
        .ttl(Duration::from_secs(1))
        .max_lead(Duration::from_secs(1))
        .max_skew(Duration::from_secs(1))
        .shards(0..=2);
    let mut all = Tally::new();
    for (i, (_, g)) in open_at_once(3, &config).into_iter().enumerate() {
        let g = g.unwrap();
        all.add(
            g.next_ids(60_000).unwrap().map(u64::from),
            &format!("old holder {i}"),
        );
        g.close().unwrap();
    }
    let marks = "SELECT max(high_water) FROM idutil_lease";
    let before: u64 = pg.psql(marks).parse().unwrap();
    pg.psql("VACUUM FULL idutil_lease");
    if !pg.restart_with_clock(Some("+1h")) {
        return;
    }
    let host = state_dir();
    match leased(&host, config.clone()).open() {
        Err(Error::Lease(LeaseError::ClockSkew { ahead, .. })) => {
            assert!(ahead < -3000.0, "the host is an hour behind: {ahead}")
        }
        Err(e) => panic!("refused, but not for the skew: {e}"),
        Ok(g) => panic!("a holder opened on shard {}", g.shard()),
    }
    let after: u64 = pg.psql(marks).parse().unwrap();
    assert_eq!(after, before, "a mark moved by the skewed server's clock");

    assert!(pg.restart_with_clock(None));
    let (done, issued) = mpsc::channel();
    for (i, (host, g)) in open_at_once(3, &config).into_iter().enumerate() {
        let g = g.unwrap_or_else(|e| panic!("new holder {i}: {e}"));
        let done = done.clone();
        thread::spawn(move || {
            let ids: Vec<u64> = g.next_ids(1000).unwrap().map(u64::from).collect();
            g.close().unwrap();
            drop(host);
            done.send((i, ids)).unwrap();
        });
    }
    drop(done);
    for _ in 0..3 {
        let (i, ids) = issued
            .recv_timeout(Duration::from_secs(30))
            .expect("every new holder issues within 30 s");
        all.add(ids, &format!("new holder {i}"));
    }
}

/// The lease table rewritten (`VACUUM FULL`), then as many holders as
/// shards opening at once, five rounds: each holder leases one shard, and
/// every one opens. (The planner once ran the choice of a free row again
/// for each row of the rewritten table: one holder took several shards.)
#[test]
fn after_the_table_is_rewritten_each_holder_leases_one_shard() {
    let Some(pg) = server() else { return };
    let config = LeaseConfig::new(pg.tcp_url()).shards(0..=2);
    // The table and the rows, made by a first holder.
    open_at_once(1, &config)
        .remove(0)
        .1
        .unwrap()
        .close()
        .unwrap();
    for round in 0..5 {
        pg.psql("VACUUM FULL idutil_lease");
        let opened = open_at_once(3, &config);
        let holders =
            pg.psql("SELECT count(DISTINCT holder) || ' of ' || count(holder) FROM idutil_lease");
        for (i, (_, g)) in opened.iter().enumerate() {
            if let Err(e) = g {
                panic!("round {round}: holder {i} ({holders} rows held): {e}");
            }
        }
        assert_eq!(holders, "3 of 3", "round {round}");
        for (_, g) in opened {
            g.unwrap().close().unwrap();
        }
    }
}
