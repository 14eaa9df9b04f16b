//! The script that makes the database a holder of a shard
//! (`database.sql`, filled in here), and the one that gives the shard back.
//! What they do is on [`DatabaseHolder`](super::super::DatabaseHolder).

use super::super::conn::literal;
use super::super::target::{quote, Target};
use super::super::EPOCH_MAX;
use super::{history, strangers, HOLDER_PREFIX, WRITTEN_BY};
use crate::layout::Layout;

/// What the database's writes of the lease table record as the row's
/// writer at first, replaced by [`stamp`] before the transaction ends.
const PENDING: &str = "-1";

/// Records the writer of the rows of the ID space `space` (a literal) the
/// statements before wrote with [`PENDING`]. PL/pgSQL may run them in a
/// subtransaction (a block with `EXCEPTION`, a caller's savepoint), whose
/// ID, the rows' `xmin`, is not `txid_current()`'s: the statement reads the
/// `xmin` of the version written, which its own write keeps (the same
/// subtransaction). Its 32 bits, with the top-level transaction's epoch.
fn stamp(table: &str, space: &str) -> String {
    format!(
        "UPDATE {table} AS t SET {WRITTEN_BY} = \
             ((pg_catalog.txid_current() >> 32) << 32) | t.xmin::text::bigint \
         WHERE t.space = {space} AND t.{WRITTEN_BY} = {PENDING}"
    )
}

/// The install script, with `@NAME@` holes.
const INSTALL: &str = include_str!("database.sql");

/// The first key of the counter's advisory lock ("iddb"); the second is
/// [`Names::key`].
const LOCK_KEY: i32 = 0x6964_6462;

/// The counter lock's two keys as `pg_locks` shows them (`classid`,
/// `objid`), for the install named `name` in `schema`.
pub(in super::super) fn lock_keys(schema: &str, name: &str) -> (u32, u32) {
    (LOCK_KEY as u32, key(schema, name))
}

/// The second key of an install's lock, and its session setting's name.
fn key(schema: &str, name: &str) -> u32 {
    crc32fast::hash(format!("{schema}\0{name}").as_bytes())
}

/// The names of one install: its objects, its holder's token, its lock.
pub(in super::super) struct Names {
    /// `"schema".name`: each object's name is this plus a suffix.
    pub(in super::super) prefix: String,
    /// The token in the lease row's `holder` column. It has spaces, which
    /// no holder's token (`host:pid:nanos:n`) has.
    pub(in super::super) holder: String,
    /// The second key of the counter's lock and the session setting's
    /// name: the install's schema and name, hashed.
    key: u32,
}

impl Names {
    pub(in super::super) fn new(target: &Target, name: &str) -> Names {
        let prefix = format!("{}.{name}", quote(target.schema()));
        let holder = format!("{HOLDER_PREFIX}{}.{name}_next_id()", target.schema());
        let key = key(target.schema(), name);
        Names {
            prefix,
            holder,
            key,
        }
    }

    /// An object's name as a string literal, for `'...'::regclass`.
    fn object(&self, suffix: &str) -> String {
        literal(&format!("{}_{suffix}", self.prefix))
    }

    /// `pg_advisory_lock`'s two keys.
    fn lock(&self) -> String {
        format!("{LOCK_KEY}, {}", self.key as i32)
    }
}

/// The numbers the script needs from the lease's settings, in seconds.
pub(in super::super) struct Limits {
    /// How far the counter's second may be ahead of the server's clock.
    pub(in super::super) max_lead: u64,
    /// The skew limit of the ID space's holders (the history check's raise).
    pub(in super::super) max_skew: u64,
}

/// The install script.
pub(in super::super) fn install(
    target: &Target,
    space: &str,
    layout: &Layout,
    shard: u32,
    names: &Names,
    limits: &Limits,
) -> String {
    let (sequence_bits, shard_bits) = (layout.sequence_bits(), layout.shard_bits());
    let seconds_shift = layout.clock_bits() + sequence_bits + shard_bits;
    let seconds_end = layout.max_seconds() + 1;
    let fingerprint = layout.fingerprint();
    let mut tables = super::table_statements(target);
    tables.extend(
        history::create(target, std::time::Duration::ZERO)
            .into_iter()
            .skip(1),
    );
    // The advisory locks as statements that print nothing in psql.
    let tables: String = tables
        .iter()
        .map(|s| match s.strip_prefix("SELECT pg_advisory_xact_lock(") {
            Some(keys) => {
                format!("DO $idutil$ BEGIN PERFORM pg_advisory_xact_lock({keys}; END $idutil$;\n")
            }
            None => format!("{s};\n"),
        })
        .collect();
    // The database's reach is its lead cap: it learns of a restore at its
    // next session's first call, before it issues.
    let reach = limits.max_lead;
    let max_wait = 2 * (reach + 2 * limits.max_skew + 1);
    let counter_oid = format!(
        "{}::pg_catalog.regclass::pg_catalog.oid::pg_catalog.text",
        names.object("counter")
    );
    let backends = "(pg_catalog.current_setting('max_connections')::bigint \
        + pg_catalog.current_setting('max_worker_processes')::bigint \
        + pg_catalog.current_setting('autovacuum_max_workers')::bigint \
        + pg_catalog.current_setting('max_wal_senders')::bigint + 1)";
    // The last counter value within the lead cap of the clock's second.
    let lead_span = ((limits.max_lead + 1) << sequence_bits) - 1;
    let holes: [(&str, String); 44] = [
        ("@LOCK_CLASS@", LOCK_KEY.to_string()),
        ("@LOCK_OBJ@", names.key.to_string()),
        ("@STARTED_LIT@", names.object("started")),
        ("@RAISED_FOR_LIT@", names.object("raised_for")),
        ("@RAISED_AT_LIT@", names.object("raised_at")),
        ("@LEAD_SPAN@", lead_span.to_string()),
        ("@TABLES@", tables),
        (
            "@SPACE_CHECK@",
            history::space_statement(
                target,
                space,
                ("v_sys", "v_tl", "v_clock"),
                (reach, limits.max_skew),
                PENDING,
            ),
        ),
        ("@STRANGERS@", strangers(&target.table(), &literal(space))),
        ("@STAMP@", stamp(&target.table(), &literal(space))),
        ("@PENDING@", PENDING.to_string()),
        ("@SPACE_SHOWN@", format!("{space:?}")),
        ("@LAYOUT_SHOWN@", format!("{fingerprint:?}")),
        ("@SCHEMA_SHOWN@", format!("{:?}", target.schema())),
        ("@TABLE_TEXT@", literal(&target.table())),
        ("@TABLE@", target.table()),
        ("@HISTORY_LOCK@", history::LOCK_KEY.to_string()),
        ("@HISTORY@", target.history_table()),
        ("@ROWS_LOCK@", (super::LOCK_KEY as i32).to_string()),
        ("@SPACE@", literal(space)),
        ("@LAYOUT@", literal(&fingerprint)),
        ("@SHARD_BITS@", shard_bits.to_string()),
        ("@SHARD@", shard.to_string()),
        ("@HOLDER@", literal(&names.holder)),
        ("@EPOCH_MAX@", EPOCH_MAX.to_string()),
        ("@COUNTER_LIT@", names.object("counter")),
        ("@FENCE_LIT@", names.object("fence")),
        ("@SEEN_LIT@", names.object("seen")),
        ("@COUNTER_OID@", counter_oid),
        ("@COUNTER_END@", (seconds_end << sequence_bits).to_string()),
        ("@GUC@", format!("idutil.db_{:08x}", names.key)),
        ("@LOCK@", names.lock()),
        ("@EPOCH@", layout.epoch().to_string()),
        ("@SEQ_BITS@", sequence_bits.to_string()),
        ("@SEQ_MASK@", ((1u64 << sequence_bits) - 1).to_string()),
        ("@SECONDS_SHIFT@", seconds_shift.to_string()),
        ("@SECONDS_END@", seconds_end.to_string()),
        ("@PER_SECOND@", (1u64 << sequence_bits).to_string()),
        ("@TOTAL_BITS@", layout.total_bits().to_string()),
        ("@REACH@", reach.to_string()),
        ("@MAX_LEAD@", limits.max_lead.to_string()),
        ("@MAX_WAIT@", max_wait.to_string()),
        ("@BACKENDS@", backends.to_string()),
        ("@FN@", names.prefix.clone()),
    ];
    let mut script = INSTALL.to_string();
    for (hole, value) in &holes {
        script = script.replace(hole, value);
    }
    debug_assert!(!script.contains("@FN@") && !script.contains("@SHARD@"));
    script
}

/// The script that gives the shard back, one statement (so nothing is
/// half done, in a transaction or not): the counter's exact last value
/// recorded in the row (the next holder resumes after it), the row freed,
/// the functions and the sequences dropped. Refused as a whole while a
/// column's default still calls the function. Harmless when nothing is
/// installed.
pub(in super::super) fn uninstall(
    target: &Target,
    space: &str,
    layout: &Layout,
    names: &Names,
) -> String {
    let table = target.table();
    let fn_ = &names.prefix;
    let epoch = layout.epoch();
    let sequence_bits = layout.sequence_bits();
    let mask = (1u64 << sequence_bits) - 1;
    let (space, holder) = (literal(space), literal(&names.holder));
    let counter = names.object("counter");
    format!(
        "-- idutil: gives back the shard the database function {shown} holds.\n\
         DO $idutil$\n\
         DECLARE\n    c record;\n    v_seen bigint;\n\
         BEGIN\n\
         \x20   PERFORM pg_catalog.pg_advisory_xact_lock({lock});\n\
         \x20   IF pg_catalog.to_regclass({counter}) IS NOT NULL THEN\n\
         \x20       -- Waits for the transactions that drew from the counter, and\n\
         \x20       -- holds off new ones until this one ends.\n\
         \x20       ALTER SEQUENCE {fn_}_counter OWNED BY NONE;\n\
         \x20       SELECT s.last_value, s.is_called INTO c FROM {fn_}_counter AS s;\n\
         \x20       SELECT s.last_value INTO v_seen FROM {fn_}_seen AS s;\n\
         \x20       UPDATE {table} AS t SET\n\
         \x20           high_water = CASE WHEN c.is_called THEN GREATEST(COALESCE(t.high_water, 0),\n\
         \x20               {epoch} + (c.last_value >> {sequence_bits})) ELSE t.high_water END,\n\
         \x20           last_second = CASE WHEN c.is_called\n\
         \x20               THEN {epoch} + (c.last_value >> {sequence_bits}) ELSE t.last_second END,\n\
         \x20           last_sequence = CASE WHEN c.is_called\n\
         \x20               THEN c.last_value & {mask} ELSE t.last_sequence END,\n\
         \x20           seen = CASE WHEN v_seen > 0 THEN GREATEST(COALESCE(t.seen, 0), {epoch} + v_seen)\n\
         \x20               ELSE t.seen END,\n\
         \x20           {WRITTEN_BY} = {PENDING}\n\
         \x20       WHERE t.space = {space} AND t.holder = {holder};\n\
         \x20   END IF;\n\
         \x20   UPDATE {table} AS t SET holder = NULL, expires_at = '-infinity',\n\
         \x20           epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int, {WRITTEN_BY} = {PENDING}\n\
         \x20       WHERE t.space = {space} AND t.holder = {holder};\n\
         \x20   {stamp};\n\
         \x20   DROP FUNCTION IF EXISTS {fn_}_next_id(), {fn_}_catch_up(), {fn_}_advance(boolean),\n\
         \x20       {fn_}_check_space(), {fn_}_id_of(bigint), {fn_}_time(bigint),\n\
         \x20       {fn_}_min_at(timestamptz), {fn_}_max_at(timestamptz);\n\
         \x20   DROP SEQUENCE IF EXISTS {fn_}_counter, {fn_}_fence, {fn_}_seen, {fn_}_started,\n\
         \x20       {fn_}_raised_for, {fn_}_raised_at;\n\
         END\n\
         $idutil$;\n",
        shown = names.holder.trim_start_matches(HOLDER_PREFIX),
        lock = names.lock(),
        stamp = stamp(&table, &space),
    )
}
