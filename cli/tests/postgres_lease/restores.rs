//! Lease tables restored from a dump whose marks are below what the
//! holders went on to issue, in the ways the server's identity cannot
//! tell: into a fresh cluster whose tables get the OIDs and file nodes of
//! the old ones (a role that may not read the system identifier, as
//! managed services grant), and reloaded on the same server into the
//! tables emptied with `DELETE`, the history table restored or kept. The
//! restored rows were written by the restore, not by the lease, which is
//! what gives them away. Each restore happens while no holder is alive.

use std::thread;
use std::time::Duration;

use idutil::lease::LeaseConfig;
use idutil::Layout;
use idutil_harness::postgres::Postgres;
use idutil_harness::state_dir;

use crate::{leased, open_when_free, server, Tally, WIDE};

/// The application's role: it owns the lease tables and may not run
/// `pg_control_system()`.
const ROLE: &str = "app";

/// Each holder's lead cap: its burst reaches this far past the clock,
/// past the reservation window of one second, so the mark a holder has
/// recorded when the dump is taken lies inside the burst it issues after.
const LEAD: u64 = 4;

/// Makes the application's role on `pg`, without `pg_control_system()`.
fn app_role(pg: &Postgres) {
    pg.psql(&format!(
        "CREATE ROLE {ROLE} LOGIN; GRANT CREATE ON SCHEMA public TO {ROLE}; \
         REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC"
    ));
    assert_eq!(
        pg.psql(&format!(
            "SELECT has_function_privilege('{ROLE}', 'pg_control_system()', 'EXECUTE')"
        )),
        "f"
    );
}

/// How the dump of both lease tables comes back.
enum Restore<'a> {
    /// Into `pg_restore`'s tables on another, fresh cluster.
    Fresh(&'a Postgres),
    /// Into the same tables emptied with `DELETE`, by `pg_restore
    /// --data-only`: both, or the lease table alone (the history kept).
    Reload { history: bool },
    /// Dumped with `--inserts` (a transaction for each row) and restored
    /// into a fresh cluster, `fresh`, after as many transactions as make
    /// the `INSERT` of one marked row get the transaction ID its
    /// `written_by` recorded (worked out on `probe`, another fresh
    /// cluster, restored first).
    Aligned {
        probe: &'a Postgres,
        fresh: &'a Postgres,
    },
    /// As an earlier idutil's dump (the tables without `written_by`:
    /// restored into `scratch`, the column dropped, dumped again) into
    /// `pg_restore`'s tables on `fresh`, another fresh cluster.
    Earlier {
        scratch: &'a Postgres,
        fresh: &'a Postgres,
    },
}

/// Four holders of shards 0..=3 of `layout` on `pg`, as [`ROLE`], issue a
/// little; both lease tables are dumped; each holder bursts to its lead
/// cap (well past its row's mark in the dump) and closes; the dump is
/// restored as `restore` says; four holders on other hosts burst to their
/// lead cap. Returns how many of their IDs the first four issued.
fn repeats_after_restore(pg: &Postgres, layout: Layout, restore: Restore<'_>) -> usize {
    let per_second = 1u64 << layout.sequence_bits();
    let dumps = tempfile::tempdir().unwrap();
    let dump = dumps.path().join("lease.dump");
    let config = |pg: &Postgres| {
        LeaseConfig::new(format!(
            "postgres://{ROLE}@127.0.0.1:{}/postgres?sslmode=disable",
            pg.port()
        ))
        .ttl(Duration::from_secs(1))
        .max_lead(Duration::from_secs(LEAD))
        .max_skew(Duration::from_secs(1))
        .shards(0..=3)
    };
    let mut all = Tally::new();
    let old_hosts: Vec<_> = (0..4).map(|_| state_dir()).collect();
    let old: Vec<_> = old_hosts
        .iter()
        .map(|h| {
            leased(h, config(pg))
                .layout(layout)
                .window(Duration::from_secs(1))
                .open()
                .unwrap()
        })
        .collect();
    for (i, g) in old.iter().enumerate() {
        all.add(g.next_ids(100).unwrap().map(u64::from), &format!("old {i}"));
    }
    let mut dump_args = vec![
        "-Fc",
        "-t",
        "idutil_lease",
        "-t",
        "idutil_lease_history",
        "-f",
        dump.to_str().unwrap(),
    ];
    if matches!(restore, Restore::Aligned { .. }) {
        dump_args.push("--inserts");
    }
    pg.client("pg_dump", &dump_args);
    // With --inserts: a marked row whose alignment (the transactions to
    // run on a fresh cluster before the restore so that its `INSERT` gets
    // the ID its row recorded) no other row shares, worked out on `probe`.
    // The holders renew one after another, so their rows' last writes can
    // be consecutive transactions in shard order, as the restore's
    // `INSERT`s are: then aligning one aligns every row, which no check of
    // the rows can tell (the lease docs say so), and the dump is taken
    // again a moment later (up to 200 times: the holders open one right
    // after another, so their renewals often come in that order).
    let mut aligned = None;
    if let Restore::Aligned { probe, .. } = &restore {
        for _ in 0..200 {
            probe.psql("DROP TABLE IF EXISTS idutil_lease, idutil_lease_history");
            let start = probe.psql("SELECT txid_snapshot_xmax(txid_current_snapshot())");
            probe.client("pg_restore", &[dump.to_str().unwrap()]);
            // Each row: the ID its row recorded, and how far into the
            // restore its `INSERT` came.
            let found = probe.psql(&format!(
                "SELECT shard, target, pos FROM (SELECT shard, high_water, \
                     written_by % 4294967296 AS target, xmin::text::bigint - {start} AS pos, \
                     count(*) OVER (PARTITION BY \
                         written_by % 4294967296 - xmin::text::bigint) AS same \
                     FROM idutil_lease) AS r \
                 WHERE high_water IS NOT NULL AND same = 1 ORDER BY shard LIMIT 1"
            ));
            let cells: Vec<i64> = found.split('|').filter_map(|c| c.parse().ok()).collect();
            if let [shard, target, pos] = cells[..] {
                aligned = Some((shard, target, pos));
                break;
            }
            thread::sleep(Duration::from_millis(150));
            pg.client("pg_dump", &dump_args);
        }
        assert!(aligned.is_some(), "no dump with a row to align alone");
    }
    let bursts = burst(&old, per_second * LEAD);
    for (i, (g, ids)) in old.into_iter().zip(bursts).enumerate() {
        all.add(ids, &format!("old {i}"));
        g.close().unwrap();
    }
    let dump = dump.to_str().unwrap();
    let into = match restore {
        Restore::Fresh(fresh) => {
            fresh.client("pg_restore", &[dump]);
            fresh
        }
        Restore::Reload { history } => {
            pg.psql("DELETE FROM idutil_lease");
            let mut args = vec!["--data-only"];
            if history {
                pg.psql("DELETE FROM idutil_lease_history");
            } else {
                args.extend(["-t", "idutil_lease"]);
            }
            args.push(dump);
            pg.client("pg_restore", &args);
            pg
        }
        Restore::Aligned { fresh, .. } => {
            let (shard, target, pos) = aligned.expect("worked out at the dump");
            let start: i64 = fresh
                .psql("SELECT txid_snapshot_xmax(txid_current_snapshot())")
                .parse()
                .unwrap();
            let gap = target - pos - start;
            assert!(
                gap >= 0,
                "shard {shard}'s writer is behind the fresh cluster"
            );
            fresh.psql(&format!(
                "DO $$ BEGIN FOR i IN 1..{gap} LOOP PERFORM txid_current(); COMMIT; \
                 END LOOP; END $$"
            ));
            fresh.client("pg_restore", &[dump]);
            assert_eq!(
                fresh.psql(&format!(
                    "SELECT written_by % 4294967296 = xmin::text::bigint \
                     FROM idutil_lease WHERE shard = {shard}"
                )),
                "t",
                "shard {shard}'s INSERT did not get the ID its row recorded"
            );
            fresh
        }
        Restore::Earlier { scratch, fresh } => {
            scratch.client("pg_restore", &[dump]);
            scratch.psql("ALTER TABLE idutil_lease DROP COLUMN written_by");
            let earlier = dumps.path().join("earlier.dump");
            let earlier = earlier.to_str().unwrap();
            scratch.client(
                "pg_dump",
                &[
                    "-Fc",
                    "-t",
                    "idutil_lease",
                    "-t",
                    "idutil_lease_history",
                    "-f",
                    earlier,
                ],
            );
            fresh.client("pg_restore", &[earlier]);
            fresh
        }
    };
    let new_hosts: Vec<_> = (0..4).map(|_| state_dir()).collect();
    let new: Vec<_> = new_hosts
        .iter()
        .map(|h| {
            open_when_free(
                &leased(h, config(into)).layout(layout),
                Duration::from_secs(10),
            )
        })
        .collect();
    let bursts = burst(&new, per_second * LEAD);
    bursts
        .into_iter()
        .enumerate()
        .map(|(i, ids)| all.count_duplicates(ids, &format!("new {i}")))
        .sum()
}

/// 1,024 shards of 2,048 IDs a second.
fn wide() -> Layout {
    WIDE.parse().unwrap()
}

/// Each of `holders` issues `n` IDs at once, all at the same time.
fn burst(holders: &[idutil::Generator], n: u64) -> Vec<Vec<u64>> {
    thread::scope(|s| {
        let each: Vec<_> = holders
            .iter()
            .map(|g| s.spawn(move || g.next_ids(n).unwrap().map(u64::from).collect()))
            .collect();
        each.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A fresh cluster for a restore, with the application's role made as on
/// the first, so the restored tables get the OIDs the first cluster gave.
fn fresh_pair() -> Option<(Postgres, Postgres)> {
    let pg = server()?;
    let fresh = server()?;
    app_role(&pg);
    app_role(&fresh);
    Some((pg, fresh))
}

/// The server's identity and the tables' cannot tell the fresh cluster
/// from the first: the same OID and file node, timeline 1, and no system
/// identifier for the role. (Before the rows recorded their writer, the
/// next holders re-issued 16,784 of the first holders' IDs here.)
#[test]
fn a_dump_restored_into_a_fresh_cluster_issues_nothing_twice() {
    let Some((pg, fresh)) = fresh_pair() else {
        return;
    };
    let repeats = repeats_after_restore(&pg, wide(), Restore::Fresh(&fresh));
    assert_eq!(repeats, 0, "IDs issued twice after the restore");
}

/// The same in the default layout, 32 shards of 65,536 IDs a second.
/// (524,688 re-issued before.)
#[test]
fn a_dump_restored_into_a_fresh_cluster_issues_nothing_twice_in_the_default_layout() {
    let Some((pg, fresh)) = fresh_pair() else {
        return;
    };
    let repeats = repeats_after_restore(&pg, Layout::DEFAULT, Restore::Fresh(&fresh));
    assert_eq!(repeats, 0, "IDs issued twice after the restore");
}

/// A dump taken with `--inserts` gives each row a transaction of its own,
/// so a row whose `INSERT` gets, in a fresh cluster, the transaction ID
/// its `written_by` recorded vouches for itself: its `xmin` is shared by
/// no other row. One row's coincidence is enough (not every row's, as a
/// `COPY` or `--single-transaction` needs): the other rows are raised as
/// written by others, yet that row keeps the dump's mark, and the next
/// holder of its shard re-issues what its holder issued after the dump.
/// Here the coincidence is arranged (transactions run before the
/// restore); in the field it comes by chance, from any row, in fresh
/// clusters whose transaction counters are alike.
#[test]
fn a_dump_of_inserts_with_one_row_at_its_recorded_writer_issues_nothing_twice() {
    let Some((pg, fresh)) = fresh_pair() else {
        return;
    };
    let Some(probe) = server() else { return };
    app_role(&probe);
    // The first cluster's writers well past where a fresh cluster's
    // restore starts.
    pg.psql("DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM txid_current(); COMMIT; END LOOP; END $$");
    let repeats = repeats_after_restore(
        &pg,
        wide(),
        Restore::Aligned {
            probe: &probe,
            fresh: &fresh,
        },
    );
    assert_eq!(repeats, 0, "IDs issued twice after the restore");
}

/// A dump of an earlier idutil's tables (no `written_by`), taken while the
/// marks were low, restored into a fresh cluster after the holders went
/// past them (as a backup from before an upgrade is restored after it):
/// the first holder finds the column missing and records itself as the
/// writer of every row, as for a table upgraded in place, and nothing is
/// raised. The fresh cluster cannot be told from the first by the
/// server's identity or the tables' either, so the next holders re-issue
/// what the first ones issued after the dump.
#[test]
fn a_dump_of_an_earlier_idutil_restored_into_a_fresh_cluster_issues_nothing_twice() {
    let Some((pg, fresh)) = fresh_pair() else {
        return;
    };
    let Some(scratch) = server() else { return };
    app_role(&scratch);
    let repeats = repeats_after_restore(
        &pg,
        wide(),
        Restore::Earlier {
            scratch: &scratch,
            fresh: &fresh,
        },
    );
    assert_eq!(repeats, 0, "IDs issued twice after the restore");
}

/// Both tables emptied with `DELETE` and reloaded from the dump: the same
/// tables, files and server. (16,784 re-issued before.)
#[test]
fn both_tables_reloaded_in_place_issue_nothing_twice() {
    let Some(pg) = server() else { return };
    app_role(&pg);
    let repeats = repeats_after_restore(&pg, wide(), Restore::Reload { history: true });
    assert_eq!(repeats, 0, "IDs issued twice after the reload");
}

/// The lease table alone reloaded in place, its history kept: the history
/// knows each shard had a mark, not how high. (16,784 re-issued before.)
#[test]
fn the_lease_table_reloaded_beside_its_history_issues_nothing_twice() {
    let Some(pg) = server() else { return };
    app_role(&pg);
    let repeats = repeats_after_restore(&pg, wide(), Restore::Reload { history: false });
    assert_eq!(repeats, 0, "IDs issued twice after the reload");
}

/// The marks of shards `shards` of `pg`'s table, in order.
fn marks(pg: &Postgres, shards: &str) -> Vec<i64> {
    pg.psql(&format!(
        "SELECT high_water FROM idutil_lease WHERE shard IN ({shards}) ORDER BY shard"
    ))
    .lines()
    .map(|l| l.parse().unwrap())
    .collect()
}

/// Four holders of shards 0..=3 (10 shard bits) that issue and close.
fn four_closed(pg: &Postgres) -> LeaseConfig {
    let config = LeaseConfig::new(pg.tcp_url())
        .ttl(Duration::from_secs(1))
        .max_skew(Duration::from_secs(1))
        .shards(0..=3);
    let hosts: Vec<_> = (0..4).map(|_| state_dir()).collect();
    let holders: Vec<_> = hosts
        .iter()
        .map(|h| leased(h, config.clone()).layout(wide()).open().unwrap())
        .collect();
    for g in holders {
        g.next_ids(100).unwrap();
        g.close().unwrap();
    }
    config
}

/// Freezing keeps who wrote each row (`VACUUM FREEZE` keeps `xmin`): the
/// next lease raises no row. `VACUUM FULL` and `CLUSTER` under live
/// holders keep it too (their new file node is the history's business):
/// the holders go on, and every row still vouches for itself.
#[test]
fn freezing_and_rewriting_the_table_keep_who_wrote_its_rows() {
    let Some(pg) = server() else { return };
    let config = four_closed(&pg);
    let before = marks(&pg, "1, 2, 3");
    pg.psql("VACUUM (FREEZE) idutil_lease");
    let host = state_dir();
    let g = leased(&host, config.clone().shards(0..=0))
        .layout(wide())
        .open()
        .unwrap();
    assert_eq!(marks(&pg, "1, 2, 3"), before, "a frozen row was raised");
    let others: Vec<_> = (0..3).map(|_| state_dir()).collect();
    let mut holders: Vec<_> = others
        .iter()
        .map(|h| leased(h, config.clone()).layout(wide()).open().unwrap())
        .collect();
    holders.push(g);
    pg.psql("VACUUM FULL idutil_lease");
    pg.psql("CLUSTER idutil_lease USING idutil_lease_pkey");
    pg.psql("VACUUM (FREEZE) idutil_lease");
    // Past a TTL: every holder renewed through it.
    thread::sleep(Duration::from_secs(2));
    let mut all = Tally::new();
    for (i, g) in holders.iter().enumerate() {
        all.add(g.next_ids(100).unwrap().map(u64::from), &format!("{i}"));
    }
    assert_eq!(
        pg.psql(
            "SELECT count(*) FROM idutil_lease \
             WHERE written_by IS NULL OR written_by % 4294967296 <> xmin::text::bigint"
        ),
        "0"
    );
}

/// Rows that look written by the lease and are not: one transaction wrote
/// two rows and recorded itself as the writer of one (as a restore into a
/// fresh cluster does whose transaction has the ID one row recorded), and
/// a row records a writer 2^32 transactions ahead of this server (its
/// `xmin` modulo 2^32, from a cluster that ran more transactions). Each
/// lowered by 100 s, each raised back at the next lease.
#[test]
fn rows_that_only_look_written_by_the_lease_are_raised() {
    let Some(pg) = server() else { return };
    let config = four_closed(&pg);
    let before = marks(&pg, "0, 1, 2");
    pg.psql(
        "UPDATE idutil_lease SET high_water = high_water - 100, last_second = NULL, \
             last_sequence = NULL, \
             written_by = CASE WHEN shard = 0 THEN txid_current() ELSE written_by END \
         WHERE shard IN (0, 1)",
    );
    pg.psql(
        "UPDATE idutil_lease SET high_water = high_water - 100, last_second = NULL, \
             last_sequence = NULL, written_by = txid_current() + 4294967296 \
         WHERE shard = 2",
    );
    let host = state_dir();
    drop(
        leased(&host, config.shards(3..=3))
            .layout(wide())
            .open()
            .unwrap(),
    );
    let after = marks(&pg, "0, 1, 2");
    for (shard, (was, is)) in before.iter().zip(&after).enumerate() {
        assert!(is >= was, "shard {shard}: its mark {is} is below {was}");
    }
}

/// A table of an earlier idutil, without the column of each row's writer:
/// a role that may not add it is refused, told how to add it; the table's
/// owner adds it at its next lease, and the rows, which name no writer,
/// are raised once (a table upgraded in place cannot be told from an
/// earlier idutil's dump restored into a fresh cluster: see
/// `a_dump_of_an_earlier_idutil_restored_into_a_fresh_cluster_issues_nothing_twice`);
/// a row that later comes back without a writer, as from a dump of
/// the earlier table, raises the ID space's rows at the next lease (a
/// restore may have given another row, by chance, the ID it recorded).
#[test]
fn a_table_of_an_earlier_idutil_gets_the_column_and_is_raised_once() {
    let Some(pg) = server() else { return };
    let config = four_closed(&pg);
    pg.psql("ALTER TABLE idutil_lease DROP COLUMN written_by");
    let before = marks(&pg, "0, 1, 2");
    // A role that may write the rows but not add the column is told how.
    pg.psql(
        "CREATE ROLE worker LOGIN; \
         GRANT SELECT, INSERT, UPDATE ON idutil_lease, idutil_lease_history TO worker",
    );
    let worker = LeaseConfig::new(format!(
        "postgres://worker@127.0.0.1:{}/postgres?sslmode=disable",
        pg.port()
    ))
    .shards(3..=3);
    let err = leased(&state_dir(), worker)
        .layout(wide())
        .open()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ALTER TABLE idutil_lease ADD COLUMN written_by bigint"),
        "{err}"
    );
    let lease = |shard: u32| {
        let host = state_dir();
        let g = leased(&host, config.clone().shards(shard..=shard))
            .layout(wide())
            .open()
            .unwrap();
        g.close().unwrap();
    };
    lease(3);
    let upgraded = marks(&pg, "0, 1, 2");
    assert!(
        upgraded.iter().zip(&before).all(|(a, b)| a > b),
        "the upgrade did not raise the rows: {before:?} -> {upgraded:?}"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM idutil_lease WHERE written_by IS NULL"),
        "0",
        "a row was left without a writer"
    );
    let before = upgraded;
    lease(3);
    assert_eq!(marks(&pg, "0, 1, 2"), before, "a later lease raised a row");
    // Shard 1's row as a dump of the earlier table would bring it back.
    // A raise goes to the server's clock (whole seconds) plus the margins:
    // in the second of the upgrade's it would leave the marks as they are.
    thread::sleep(Duration::from_millis(1100));
    pg.psql("UPDATE idutil_lease SET written_by = NULL WHERE shard = 1");
    lease(3);
    let after = marks(&pg, "0, 1, 2");
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "the rows were not raised: {before:?} -> {after:?}"
    );
}
