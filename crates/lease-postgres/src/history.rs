//! Restored tables and rewound histories: what the lease table's rows can
//! no longer vouch for, and the jump past it.
//!
//! A second table, `idutil_lease_history` beside `idutil_lease`, keeps for
//! each ID space (a row with `shard` -1) what the rows were written under:
//! the server's system identifier (`pg_control_system()`, where the role
//! may read it), its timeline, and the lease table's OID and file node;
//! and, for each shard that ever had a mark, a row of its own. None of it
//! can be restored into agreement: a table re-created from a dump has a new
//! OID, a truncated or reloaded one a new file node, another cluster
//! another system identifier, a point-in-time recovery or a promoted
//! standby a new timeline, and a shard whose row lost its mark still has
//! its history row. Any of these is a history the rows may have forgotten:
//! the holder that finds it raises every row of the ID space (or the one
//! row) to the store's clock plus the reach in force (a holder's reach is
//! its lead cap plus its fence), plus twice the skew limit (the holders'
//! clocks against the old server's, the old server's against this one's),
//! plus one second, past every ID any holder can have issued or can still
//! issue before it learns of the change, and records the new identity.
//!
//! The reach in force is the largest of the leasing holder's and those of
//! the holders that last took the rows. Each acquisition records its
//! holder's reach in the shard's history row, in the statement that takes
//! the row, so a shard's history row names the reach of its last holder
//! as far as the store remembers. Every row with a holder or a mark
//! counts, the rows given back too: a store that lost its last writes (an
//! asynchronous standby promoted, a point-in-time recovery) may have lost
//! a takeover, and a holder that leased the shard after the point the
//! store went back to is on no record; the shard's last recorded holder
//! stands for it, and so does the leasing holder's own reach. That holds
//! where the rows and the history went back together (the lease table's
//! OID and file node as recorded). Where the table is another one (a dump
//! restored, a rewrite) its rows may be older than the history, and the
//! largest reach the space ever recorded counts, as it does for the
//! database's own row and for a row with no reach recorded. What no rule
//! of the history can see: a holder on no record whose cap is larger than
//! that of the shard's last recorded holder and the leasing holder's
//! (give the holders of an ID space one cap in force).
//!
//! # Rows the lease did not write
//!
//! None of the above changes when the tables are reloaded in place (their
//! rows deleted, then `pg_restore --data-only`, the history table with
//! them or kept), nor when a dump goes into a fresh cluster whose tables
//! get the old OIDs and file nodes (the same order of creation after
//! `initdb`), on timeline 1, for a role that may not run
//! `pg_control_system()` (as managed services grant). So every write of
//! the lease also records in the row the ID of the transaction that wrote
//! it (`written_by`, `txid_current()`, 64 bits with its epoch), and the
//! check of the ID space raises, as above, every row of the space when
//! one of them does not vouch for itself ([`sql::strangers`]; one row
//! restored by a transaction of its own may happen to vouch for itself,
//! the others give the restore away):
//!
//! - no recorded writer: a row restored from a dump of an earlier
//!   idutil's table, or a table of an earlier idutil, whose column the
//!   first holder that finds it missing adds: the upgrade costs one raise
//!   of the space, since a table upgraded in place cannot be told from
//!   an earlier idutil's dump restored into a fresh cluster (the same
//!   OIDs and file nodes) after the holders went past its marks;
//! - a recorded writer that is not the row's `xmin` (compared modulo
//!   2^32): the row was written by another transaction, a `COPY` or
//!   `INSERT` of a restore, or an `UPDATE` by hand;
//! - a recorded writer this server has not reached yet (at or past its
//!   snapshot's `xmax`): the row comes from a cluster that had run more
//!   transactions;
//! - a row whose `xmin` is shared by rows of the space that recorded
//!   another writer (or none): one transaction wrote them all, and the
//!   lease's writes record the same writer for every row they write. This
//!   catches a restore into a fresh cluster whose transaction happens to
//!   have the ID one row recorded.
//!
//! The rows that vouch for themselves do so through what keeps `xmin`:
//! `VACUUM FREEZE` (since PostgreSQL 9.4 freezing marks the row and keeps
//! its `xmin`), `VACUUM FULL` and `CLUSTER` (they copy rows with their
//! `xmin`; the new file node is the history's business), `pg_upgrade`
//! (it keeps the transaction counter and its epoch) and a promoted
//! physical standby (the same rows, byte for byte). A row frozen by a
//! PostgreSQL before 9.4 shows `xmin` 2: raised once. The database's
//! functions write in subtransactions (a block with `EXCEPTION`, a
//! caller's savepoint) whose IDs are not `txid_current()`'s: they record
//! the row's own `xmin` after writing it.
//!
//! A row the holders refuse anyway (columns that cannot go together) is
//! not raised: it stays refused, and named, until it is mended by hand,
//! which makes it a row to raise. A raise records the new writer, so a
//! hand edit costs one raise of the space's rows, never a refusal.
//!
//! What is not told apart: a restore whose transaction has, modulo 2^32,
//! the ID that every restored row of the space recorded, which needs all
//! of them last written by one transaction (their creation, or a raise of
//! the whole space) and the restore run in another cluster at that very
//! ID (in the same cluster the restore's ID is newer, and equal modulo
//! 2^32 only some four billion transactions later), or a restore that
//! writes each row in a transaction of its own (`pg_dump --inserts`) in
//! another cluster where every row's transaction has the ID the row
//! recorded (the rows' last writes one after another, in the dump's
//! order, and the restore started at the first of them); a restore of a
//! physical backup, which keeps `xmin` as it keeps the system identifier,
//! the timeline and the OIDs; an edit that writes `written_by` itself; and
//! a restore under a live holder, whose renewals do not look at the writer
//! (the rows are raised at the next lease of the space, not before). While
//! holders of an earlier idutil write the table beside newer ones, each
//! newer holder's lease after they wrote raises every row of the space
//! (a new holder then waits for its lead cap before its first ID): finish
//! the upgrade before leasing many new holders.
//!
//! Nothing is raised by a server whose clock is further from the holder's
//! than the skew limit: the check refuses first ([`LeaseError::ClockSkew`]).
//!
//! The check of the ID space, once the tables are found (or created) and
//! the server's identity read, is one transaction in one round trip of the
//! holder's connection, like every write of the lease: the server compares
//! and raises in one statement, under the ID space's advisory lock (the
//! statements are in [`sql::history`](super::sql::history)). The check of
//! the shard is part of the statement that takes it
//! ([`sql::acquire`](super::sql::acquire)).
//!
//! Both may run twice (an open tries a step again when its answer was
//! lost): a raise never lowers a mark, and a history already recorded is
//! not forgotten. A second run after a first that committed unseen finds
//! the history it recorded, so it only misses the warning.

use std::time::Duration;

use super::conn::{number, Answer, Conn, Failure};
use super::retry::Stop;
use super::sql::{self, create_table};
use super::target::Target;
use super::{server_time, UNDEFINED_TABLE};
use idutil_lease::skew::{check_skew, host_time};
use idutil_lease::LeaseConfig;

/// A history the rows may have forgotten: why, and the second every row
/// concerned was raised to.
pub(super) struct Forgotten {
    pub(super) why: String,
    /// Which marks were raised, as the warning words it: every shard's,
    /// the rows the lease did not write (a garbled one is left as it is),
    /// or the one row's.
    pub(super) raised: &'static str,
    pub(super) floor: i64,
}

/// How far past its store's clock a holder of this configuration can
/// issue, its *reach* (the lead cap plus the fence: a holder that has not
/// yet learned of a restore goes on issuing, its clock and so its cap
/// moving, until its fence), and the skew limit, in whole seconds rounded
/// up, as the statements add them. The history records, in its
/// `max_lead` column, the largest reach of the space's holders in the
/// space's row (an older idutil filled it with the lead cap alone: reading
/// a reach there errs on the safe side), and the reach of the holder that
/// last took a shard in the shard's row. The lead cap is the one in force:
/// the generator's own where it is lower (`durable::open`).
pub(super) fn caps(config: &LeaseConfig) -> (u64, u64) {
    let reach =
        whole_seconds(config.get_max_lead()).saturating_add(whole_seconds(config.fence_after()));
    (
        reach.min(i64::MAX as u64),
        whole_seconds(config.get_max_skew()),
    )
}

/// A duration in whole seconds, rounded up, at most the largest `bigint`:
/// how every margin goes into the statements.
pub(super) fn whole_seconds(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).min(i64::MAX as u128) as u64
}

/// The first row of the last statement's answer.
fn last_row(answers: Vec<Answer>) -> std::result::Result<Vec<Option<String>>, Failure> {
    answers
        .into_iter()
        .last()
        .and_then(|a| a.rows.into_iter().next())
        .ok_or_else(|| Failure::Answer("the history check returned no row".to_string()))
}

/// Column `i` of a row (`None` for NULL, or past a short row).
fn cell(row: &[Option<String>], i: usize) -> Option<String> {
    row.get(i).cloned().flatten()
}

/// A boolean column (`t` or `f`).
fn flag(cell: &Option<String>) -> bool {
    cell.as_deref() == Some("t")
}

/// Before a shard is leased: compares the server and the table with what
/// the ID space's history recorded, and on any difference raises every row
/// of the space past what a holder can have issued. Creates the tables on
/// first use. `Some`: a forgotten history was found (and the rows raised).
pub(super) fn check_space(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    timeout: Duration,
) -> Result<Option<Forgotten>, Stop> {
    let fail = |f: Failure| Stop::Step("check the lease history in", f);
    let before = host_time();
    let exists = conn
        .write(target, timeout, &[sql::history::tables(target)])
        .and_then(last_row)
        .map_err(fail)?;
    let after = host_time();
    // A raise counts from the server's clock: one far ahead would move
    // every mark of the space out of reach of the holders on true clocks.
    // Judged against the host's clock at whichever end of the round trip
    // is nearer, before anything is raised.
    if let Some(server) = server_time(number::<f64>(&cell(&exists, 2), "clock").map_err(fail)?) {
        if let Some(e) = check_skew(config, None, server.clamp(before, after), server) {
            return Err(Stop::Refused(e));
        }
    }
    if !flag(&cell(&exists, 0)) {
        create_table(conn, target, timeout)
            .map_err(|f| Stop::Step("create the lease table in", f))?;
    } else if !flag(&cell(&exists, 3)) {
        // A table of an earlier idutil.
        sql::add_writer_column(conn, target, timeout).map_err(|f| {
            Stop::Step(
                "add the column written_by to the lease table (as its owner: ALTER TABLE \
                 idutil_lease ADD COLUMN written_by bigint) in",
                f,
            )
        })?;
    }
    if !flag(&cell(&exists, 1)) {
        create_history(conn, target, timeout)?;
    }
    // The server's identity on its own: a server that will not tell it
    // (Aurora has no `pg_current_wal_lsn()`, say) is compared without it.
    // One that did not answer in time is asked again.
    let server = conn
        .write(target, timeout, &[sql::history::IDENTITY.to_string()])
        .and_then(last_row)
        .and_then(|row| Ok((cell(&row, 0), number::<i64>(&cell(&row, 1), "timeline")?)));
    let (system, timeline) = match server {
        Ok(identity) => identity,
        Err(f) if f.may_pass() => return Err(Stop::Step("read the identity of", f)),
        Err(f) => {
            log::debug!(
                "the server's identity is not compared: {}",
                f.into_error("read the identity of", config)
            );
            (None, None)
        }
    };
    let statements = sql::history::space(
        target,
        config.get_prefix(),
        (system.as_deref(), timeline),
        caps(config),
        timeout,
    );
    let row = conn
        .write(target, timeout, &statements)
        .and_then(last_row)
        .map_err(fail)?;
    let read = |i: usize, what: &str| number::<i64>(&cell(&row, i), what).map_err(fail);
    let recorded = Identity {
        system: cell(&row, 0),
        timeline: read(1, "timeline")?,
        oid: read(2, "table_oid")?,
        node: read(3, "table_node")?,
    };
    let current = Identity {
        system: cell(&row, 4),
        timeline: read(5, "timeline")?,
        oid: read(6, "table_oid")?,
        node: read(7, "table_node")?,
    };
    let floor = read(10, "the raised mark")?.unwrap_or(0);
    let strangers = read(11, "rows not written by the lease")?.unwrap_or(0);
    if !flag(&cell(&row, 9)) {
        return Ok((strangers > 0).then(|| Forgotten {
            why: format!(
                "{strangers} of its rows were not written by the lease (restored from a dump, \
                 changed by hand, or written before idutil recorded each row's writer)"
            ),
            raised: "every shard's mark (a garbled row's excepted) is",
            floor,
        }));
    }
    let why = if flag(&cell(&row, 8)) {
        recorded
            .differs(&current)
            .unwrap_or_else(|| "the recorded history differs".to_string())
    } else {
        "the ID space has marks but no recorded history (kept since this version of idutil; \
         or its history was dropped)"
            .to_string()
    };
    Ok(Some(Forgotten {
        why,
        raised: "every shard's mark is",
        floor,
    }))
}

/// After a shard is leased whose row had no mark although its history
/// knew it (the row was deleted and created again), when the acquisition
/// could not raise it itself (see [`sql::acquire`]): records that the
/// shard has a history and raises the row past what a holder can have
/// issued. `had_mark` false raises; `Some`: the row was raised. Run again
/// after an answer that was lost, it raises once more, a few seconds
/// further at most: a raise never lowers a mark.
pub(super) fn check_shard(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    shard: u32,
    had_mark: bool,
    timeout: Duration,
) -> Result<Option<Forgotten>, Stop> {
    let statement = sql::history::shard(target, config.get_prefix(), shard, had_mark, caps(config));
    let outcome = conn
        .write(target, timeout, &[statement])
        .and_then(last_row)
        .and_then(|row| {
            let raised = number::<i64>(&cell(&row, 0), "rows raised")?.unwrap_or(0);
            let floor = number::<i64>(&cell(&row, 1), "the raised mark")?.unwrap_or(0);
            Ok((raised > 0).then(|| Forgotten {
                why: "its row had a mark once and has none now (deleted and created again)"
                    .to_string(),
                raised: "its mark is",
                floor,
            }))
        });
    match outcome {
        // Dropped since `check_space`: the next acquisition finds it out.
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => Ok(None),
        other => other.map_err(|f| Stop::Step("check the lease history in", f)),
    }
}

/// Creates the history table, once.
pub(super) fn create_history(
    conn: &mut Conn,
    target: &Target,
    timeout: Duration,
) -> Result<(), Stop> {
    conn.write(target, timeout, &sql::history::create(target, timeout))
        .map(drop)
        .map_err(|f| Stop::Step("create the lease history table in", f))
}

/// What the rows were written under.
struct Identity {
    system: Option<String>,
    timeline: Option<i64>,
    oid: Option<i64>,
    node: Option<i64>,
}

impl Identity {
    /// Why `now` is not the history `self` recorded, if it is not. A part
    /// either side cannot read is not compared.
    fn differs(&self, now: &Identity) -> Option<String> {
        if let (Some(was), Some(is)) = (&self.system, &now.system) {
            if was != is {
                return Some(format!(
                    "the server's system identifier is {is}, not {was}: another cluster, or \
                     one restored from a backup"
                ));
            }
        }
        if let (Some(was), Some(is)) = (self.timeline, now.timeline) {
            if was != is {
                return Some(format!(
                    "the server's timeline is {is}, not {was}: a standby was promoted, or the \
                     server recovered to an earlier point in time"
                ));
            }
        }
        if let (Some(was), Some(is)) = (self.oid, now.oid) {
            if was != is {
                return Some(
                    "the lease table was created again (restored from a dump?)".to_string(),
                );
            }
        }
        if let (Some(was), Some(is)) = (self.node, now.node) {
            if was != is {
                return Some(
                    "the lease table was rewritten (TRUNCATE, a reload, VACUUM FULL)".to_string(),
                );
            }
        }
        None
    }
}
