//! The history table's statements (see [`history`](super::super::history)):
//! creating it, reading the server's identity, and the checks of an ID
//! space and of a shard, each one statement whose decision is made by the
//! server in the same transaction as the raise it may lead to.

use std::time::Duration;

use super::super::conn::literal;
use super::super::target::Target;
use super::{lock_timeout, strangers, HOLDER_PREFIX, WRITER, WRITTEN_BY};

/// The advisory lock taken while the history table is created, and (as
/// the first key, with the ID space's hash) while an ID space is checked.
pub(in super::super) const LOCK_KEY: i64 = 0x6964_7568;

/// The largest `bigint`: sums of seconds are capped here, not overflowed.
const BIGINT_MAX: &str = "9223372036854775807";

/// Whether the lease table and the history table exist, in that order,
/// the server's clock (seconds since 1970), which must agree with the
/// holder's before anything is raised by it, and whether the lease table
/// has the column of each row's writer (an older idutil's has not).
pub(in super::super) fn tables(target: &Target) -> String {
    let table = literal(&target.table());
    format!(
        "SELECT to_regclass({table}) IS NOT NULL, to_regclass({}) IS NOT NULL, \
         extract(epoch FROM clock_timestamp())::float8, \
         EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass({table}) \
             AND attname = {} AND NOT attisdropped)",
        literal(&target.history_table()),
        literal(WRITTEN_BY)
    )
}

/// Creates the history table, once, under an advisory lock (two `CREATE
/// TABLE IF NOT EXISTS` at once can fail).
pub(in super::super) fn create(target: &Target, timeout: Duration) -> Vec<String> {
    vec![
        lock_timeout(timeout),
        format!("SELECT pg_advisory_xact_lock({LOCK_KEY})"),
        format!(
            "CREATE TABLE IF NOT EXISTS {} ( \
                 space text NOT NULL, \
                 shard bigint NOT NULL, \
                 system_identifier text, \
                 timeline bigint, \
                 table_oid bigint, \
                 table_node bigint, \
                 max_lead bigint, \
                 PRIMARY KEY (space, shard))",
            target.history_table()
        ),
    ]
}

/// The server's system identifier (`NULL` where the role may not run
/// `pg_control_system()`) and timeline. A server that cannot tell its
/// timeline (no `pg_current_wal_lsn()`) fails it.
pub(in super::super) const IDENTITY: &str =
    "SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') \
         THEN (SELECT system_identifier::text FROM pg_control_system()) END, \
     ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint";

/// `text` as a literal, or `NULL`.
fn or_null<T: ToString>(value: Option<T>, quote: bool) -> String {
    match value {
        Some(v) if quote => literal(&v.to_string()),
        Some(v) => v.to_string(),
        None => "NULL".to_string(),
    }
}

/// `now + reach + 2 skew + 1` in whole seconds, capped at the largest
/// `bigint`: past what a holder can issue, whose clock may be `skew` from
/// the server it leased from, itself `skew` from this one.
pub(in super::super) fn past(now: &str, reach: &str, skew: u64) -> String {
    format!(
        "LEAST(floor(GREATEST({now}, 0))::numeric + {reach} + 2 * {skew} + 1, {BIGINT_MAX})::bigint"
    )
}

/// The check of an ID space before a shard is leased, as one transaction:
/// compares the server's identity (`system`, `timeline`, read before) and
/// the lease table's OID and file node with what the space's history
/// recorded; where they differ (or the space has marks but no history),
/// raises every row of the space past the server's clock plus the reach
/// in force (at least `max_lead`, this holder's; see [`space_statement`])
/// plus twice `skew` plus one second, and raises so every row the lease
/// did not write ([`strangers`]); records the identity where it is new,
/// and the largest reach. The last statement returns the recorded
/// identity (system, timeline, OID, node), the current one, whether a
/// history was recorded, whether it was forgotten, the second the rows
/// were raised to, and how many rows the lease did not write.
pub(in super::super) fn space(
    target: &Target,
    space: &str,
    (system, timeline): (Option<&str>, Option<i64>),
    caps: (u64, u64),
    timeout: Duration,
) -> Vec<String> {
    vec![
        // Holders of one ID space queue here for as long as this call may
        // take, not only the lease's shorter lock timeout.
        lock_timeout(timeout),
        format!(
            "SELECT pg_advisory_xact_lock({}, hashtext({}))",
            LOCK_KEY as i32,
            literal(space)
        ),
        space_statement(
            target,
            space,
            (
                &or_null(system, true),
                &or_null(timeline, false),
                "extract(epoch FROM clock_timestamp())",
            ),
            caps,
            WRITER,
        ),
    ]
}

/// The statement of [`space`]'s check, with the server's identity as two
/// SQL expressions (`system`: `text`, `timeline`: `bigint`), literals for a
/// holder, variables for the database's own check (see
/// [`database`](super::super::database)), and the clock a raise counts
/// from (`clock`: Unix seconds; the server's clock, or for the database a
/// rolled-back raise's own); run under [`space_lock`].
///
/// The reach in force: with the lease table's OID and file node as
/// recorded (a promoted standby, a point-in-time recovery: the rows and
/// the history went back together), the largest reach recorded for the
/// holders that last took the rows (each shard's history row keeps the
/// reach of the holder that last took it; every row with a holder or a
/// mark counts, since a store that lost its last writes may have lost a
/// takeover by a holder on no record, and the row's last recorded holder
/// stands for it; the database's own row, or a row with none recorded,
/// counts the largest reach the space recorded). With another table (a dump restored, a
/// rewrite), or with rows the lease did not write ([`strangers`]: a
/// reload keeps the OID and file node), whose rows may be older than the
/// history, the largest reach the space ever recorded.
///
/// Rows the lease did not write raise every row of the space, not only
/// themselves: a restore that wrote each row in a transaction of its own
/// (`pg_dump --inserts`) can give one row, by chance, the transaction ID
/// it recorded, and that row then vouches for itself; the others do not,
/// and give the restore away. (A row the holders refuse anyway is raised
/// only where the history was forgotten.)
///
/// `writer` is what the rows it raises record as their writer
/// ([`WRITER`], or a placeholder the database's check replaces after).
pub(in super::super) fn space_statement(
    target: &Target,
    space: &str,
    (system, timeline, clock): (&str, &str, &str),
    (max_lead, skew): (u64, u64),
    writer: &str,
) -> String {
    let (table, history) = (target.table(), target.history_table());
    let space = literal(space);
    let mark = past("clock", "reach", skew);
    let strangers = strangers(&table, &space);
    // A row the lease did not write is raised unless the holders refuse
    // it anyway (columns that cannot go together): it stays refused, and
    // named, until it is mended, by hand, which makes it one to raise.
    let up = "((f.forgotten AND COALESCE(t.high_water, 0) < f.mark) \
        OR ((t.high_water IS NOT NULL \
                OR (t.last_second IS NULL AND t.last_sequence IS NULL AND t.seen IS NULL)) \
            AND COALESCE(t.high_water, 0) >= 0 \
            AND (t.last_second IS NULL) = (t.last_sequence IS NULL)))";
    format!(
        "WITH now_is AS ( \
                 SELECT {system}::text AS sys, {timeline}::bigint AS timeline, \
                     to_regclass({table_text})::oid::bigint AS rel, \
                     pg_relation_filenode(to_regclass({table_text}))::bigint AS node, \
                     ({clock})::float8 AS clock), \
             strange AS MATERIALIZED ({strangers}), \
             stored AS (SELECT system_identifier, timeline, table_oid, table_node, max_lead \
                 FROM {history} WHERE space = {space} AND shard = -1), \
             read AS (SELECT n.*, s.system_identifier AS was_sys, s.timeline AS was_timeline, \
                     s.table_oid AS was_rel, s.table_node AS was_node, s.max_lead AS was_cap, \
                     EXISTS (SELECT 1 FROM stored) AS recorded, \
                     EXISTS (SELECT 1 FROM {table} \
                         WHERE space = {space} AND high_water IS NOT NULL) AS marked \
                 FROM now_is AS n LEFT JOIN stored AS s ON true), \
             verdict AS (SELECT r.*, \
                     CASE WHEN r.recorded THEN COALESCE(r.was_sys <> r.sys, false) \
                         OR COALESCE(r.was_timeline <> r.timeline, false) \
                         OR COALESCE(r.was_rel <> r.rel, false) \
                         OR COALESCE(r.was_node <> r.node, false) \
                     ELSE r.marked END AS forgotten, \
                     GREATEST(COALESCE(r.was_cap, 0), {max_lead}) AS cap, \
                     GREATEST({max_lead}, CASE \
                         WHEN COALESCE(r.was_rel = r.rel AND r.was_node = r.node, false) \
                             AND NOT EXISTS (SELECT 1 FROM strange) \
                         THEN (SELECT max(CASE WHEN l.holder LIKE {database} THEN r.was_cap \
                                 ELSE COALESCE(h.max_lead, r.was_cap) END) \
                             FROM {table} AS l LEFT JOIN {history} AS h \
                                 ON h.space = l.space AND h.shard = l.shard \
                             WHERE l.space = {space} \
                                 AND (l.holder IS NOT NULL OR l.high_water IS NOT NULL)) \
                         ELSE r.was_cap END) AS reach \
                 FROM read AS r), \
             f AS (SELECT v.*, {mark} AS mark, (SELECT count(*) FROM strange) AS strangers, \
                     v.forgotten OR EXISTS (SELECT 1 FROM strange) AS suspect \
                 FROM verdict AS v), \
             raised AS (UPDATE {table} AS t \
                     SET high_water = CASE WHEN {up} \
                         THEN GREATEST(COALESCE(t.high_water, 0), f.mark) ELSE t.high_water END, \
                     last_second = CASE WHEN {up} THEN NULL ELSE t.last_second END, \
                     last_sequence = CASE WHEN {up} THEN NULL ELSE t.last_sequence END, \
                     seen = CASE WHEN {up} \
                         THEN COALESCE(t.seen, extract(epoch FROM clock_timestamp())::bigint) \
                         ELSE t.seen END, \
                     {WRITTEN_BY} = {writer} \
                 FROM f WHERE t.space = {space} \
                     AND ((f.suspect AND COALESCE(t.high_water, 0) < f.mark) \
                         OR t.shard IN (SELECT shard FROM strange)) \
                 RETURNING 1), \
             kept AS (INSERT INTO {history} AS h \
                     (space, shard, system_identifier, timeline, table_oid, table_node, max_lead) \
                 SELECT {space}, -1, f.sys, f.timeline, f.rel, f.node, f.cap FROM f \
                 WHERE f.forgotten OR NOT f.recorded OR COALESCE(f.was_cap, 0) < {max_lead} \
                 ON CONFLICT (space, shard) DO UPDATE SET \
                     system_identifier = COALESCE(EXCLUDED.system_identifier, \
                         h.system_identifier), \
                     timeline = COALESCE(EXCLUDED.timeline, h.timeline), \
                     table_oid = EXCLUDED.table_oid, \
                     table_node = EXCLUDED.table_node, \
                     max_lead = GREATEST(h.max_lead, EXCLUDED.max_lead) \
                 RETURNING 1) \
             SELECT was_sys, was_timeline, was_rel, was_node, sys, timeline, rel, node, \
                 recorded, forgotten, mark, strangers FROM f",
        table_text = literal(&table),
        database = literal(&format!("{HOLDER_PREFIX}%")),
    )
}

/// The check of a shard just leased, as one statement: records that the
/// shard has a history; when its row had no mark (`had_mark` false) but
/// the history knew the shard (the row was deleted and created again),
/// raises the row past the server's clock plus the largest reach recorded
/// (at least `max_lead`, this holder's) plus twice `skew` plus one second.
/// Returns how
/// many rows were raised and the second they were raised to.
pub(in super::super) fn shard(
    target: &Target,
    space: &str,
    shard: u32,
    had_mark: bool,
    (max_lead, skew): (u64, u64),
) -> String {
    let (table, history) = (target.table(), target.history_table());
    let space = literal(space);
    let mark = past(
        "extract(epoch FROM clock_timestamp())",
        &format!("GREATEST(COALESCE((SELECT max(max_lead) FROM known), 0), {max_lead})"),
        skew,
    );
    format!(
        "WITH known AS (SELECT max_lead FROM {history} \
             WHERE space = {space} AND shard IN (-1, {shard})), \
         added AS (INSERT INTO {history} (space, shard) VALUES ({space}, {shard}) \
             ON CONFLICT DO NOTHING RETURNING 1), \
         f AS (SELECT (SELECT count(*) FROM known) AS known_rows, {mark} AS mark), \
         raised AS (UPDATE {table} AS t \
             SET high_water = GREATEST(COALESCE(t.high_water, 0), f.mark), \
                 last_second = NULL, last_sequence = NULL, \
                 seen = COALESCE(t.seen, extract(epoch FROM clock_timestamp())::bigint), \
                 {WRITTEN_BY} = {WRITER} \
             FROM f WHERE {raise} AND f.known_rows >= 2 \
                 AND t.space = {space} AND t.shard = {shard} \
             RETURNING 1) \
         SELECT (SELECT count(*) FROM raised), mark FROM f",
        raise = !had_mark,
    )
}
