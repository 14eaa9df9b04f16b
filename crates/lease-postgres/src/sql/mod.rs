//! The statements' text: the table, an ID space's rows, and every
//! holder's statement, each naming the table with its schema and carrying
//! its values as literals (the simple query protocol, see
//! [`Conn::write`](super::conn::Conn::write)).

pub(super) mod database;
pub(super) mod history;
pub(super) mod release;

use std::time::Duration;

use super::conn::{literal, Conn, Failure};
use super::retry::Stop;
use super::target::{quote, Target, TABLE};
use super::EPOCH_MAX;
use idutil_lease::interface::Ask;
use idutil_lease::LeaseError;

/// The advisory lock taken while the table or an ID space's rows are
/// created ("idut").
pub(super) const LOCK_KEY: i64 = 0x6964_7574;

/// The columns a holder reads back: shard, epoch, high_water,
/// last_second, last_sequence, seen, layout, and the server's clock (the
/// acquisition adds whether it raised the row, see [`acquire`]).
const GRANTED: &str = "t.shard, t.epoch, t.high_water, t.last_second, t.last_sequence, t.seen, \
     t.layout, extract(epoch FROM clock_timestamp())::float8";

/// The column that says which transaction wrote a row: every write of the
/// lease sets it (see [`history`](super::history), *Rows the lease did not
/// write*).
pub(super) const WRITTEN_BY: &str = "written_by";
/// How the token of a database holder starts (then `SCHEMA.NAME_next_id()`:
/// see [`database`]).
pub(super) const HOLDER_PREFIX: &str = "database function ";

/// What every write of the lease stores in [`WRITTEN_BY`]: the writing
/// transaction's ID, with its epoch (64 bits), which is what the row's
/// `xmin` holds in its low 32 bits, as the statement runs in no
/// subtransaction.
pub(super) const WRITER: &str = "txid_current()";

/// The shards of the ID space `space` (a literal) whose rows were written
/// by something other than the lease: no recorded writer (a table of an
/// older idutil, or a row restored from one), a writer that is not the
/// transaction that wrote the row's version (`xmin`, compared modulo
/// 2^32: a restore, or an `UPDATE` by hand), a writer this server has not
/// reached yet (the row comes from another cluster), or a version written
/// by the same transaction as rows of the space that recorded another
/// writer, or none (a restore that ran under the transaction ID one row
/// recorded). A query of one column, `shard`.
pub(super) fn strangers(table: &str, space: &str) -> String {
    format!(
        "SELECT r.shard FROM (SELECT t.shard, t.{WRITTEN_BY} AS w, t.xmin::text::bigint AS x, \
                 min(t.{WRITTEN_BY}) OVER p AS lo, max(t.{WRITTEN_BY}) OVER p AS hi, \
                 count(*) OVER p AS n, count(t.{WRITTEN_BY}) OVER p AS nw \
             FROM {table} AS t WHERE t.space = {space} \
             WINDOW p AS (PARTITION BY t.xmin::text::bigint)) AS r \
         WHERE r.w IS NULL OR r.w % 4294967296 <> r.x \
             OR r.w >= txid_snapshot_xmax(txid_current_snapshot()) \
             OR r.lo <> r.hi OR r.n <> r.nw"
    )
}

/// `SELECT set_config('lock_timeout', ...)` for this transaction.
pub(super) fn lock_timeout(timeout: Duration) -> String {
    format!(
        "SELECT set_config('lock_timeout', '{}ms', true)",
        timeout.as_millis()
    )
}

/// Creates the table and its index, once, under an advisory lock (two
/// `CREATE TABLE IF NOT EXISTS` at once can fail).
pub(super) fn create_table(
    conn: &mut Conn,
    target: &Target,
    timeout: Duration,
) -> std::result::Result<(), Failure> {
    let mut statements = vec![lock_timeout(timeout)];
    statements.extend(table_statements(target));
    conn.write(target, timeout, &statements).map(drop)
}

/// The statements that create the table and its index, once, under an
/// advisory lock (two `CREATE TABLE IF NOT EXISTS` at once can fail).
pub(super) fn table_statements(target: &Target) -> Vec<String> {
    let table = target.table();
    let index = quote(&format!("{TABLE}_free"));
    vec![
        format!("SELECT pg_advisory_xact_lock({LOCK_KEY})"),
        format!(
            "CREATE TABLE IF NOT EXISTS {table} ( \
                 space text NOT NULL, \
                 shard bigint NOT NULL CHECK (shard >= 0), \
                 layout text NOT NULL, \
                 holder text, \
                 epoch bigint NOT NULL DEFAULT 0, \
                 expires_at timestamptz NOT NULL DEFAULT '-infinity', \
                 high_water bigint, \
                 last_second bigint, \
                 last_sequence bigint, \
                 seen bigint, \
                 {WRITTEN_BY} bigint, \
                 PRIMARY KEY (space, shard))"
        ),
        writer_column(target),
        format!("CREATE INDEX IF NOT EXISTS {index} ON {table} (space, expires_at)"),
    ]
}

/// Adds [`WRITTEN_BY`] to a table of an earlier idutil, which lacks it;
/// rows restored later from a dump that lacks it are `NULL` in it, and
/// raised by the history check.
fn writer_column(target: &Target) -> String {
    format!(
        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {WRITTEN_BY} bigint",
        target.table()
    )
}

/// Adds [`WRITTEN_BY`] to a table of an earlier idutil, under the lock
/// the table is created under. Only its owner may.
pub(super) fn add_writer_column(
    conn: &mut Conn,
    target: &Target,
    timeout: Duration,
) -> std::result::Result<(), Failure> {
    // The rows are left without a writer, and the history check raises
    // them: a table upgraded in place cannot be told from an earlier
    // idutil's dump restored into a fresh cluster (the same OIDs and file
    // nodes), whose marks may be below what the holders issued since.
    let statements = [
        lock_timeout(timeout),
        format!("SELECT pg_advisory_xact_lock({LOCK_KEY})"),
        writer_column(target),
    ];
    conn.write(target, timeout, &statements).map(drop)
}

/// Takes the first free shard of the ask's range, and checks it against
/// its history in the same statement: the statement.
///
/// The free row is chosen once, in a materialized CTE. As a subquery in
/// `UPDATE ... FROM`, the planner may run it again for each row of the
/// table it joins (a nested loop, as after `VACUUM FULL` changed the
/// table's size), and each run, blind to the statement's own updates,
/// takes one more row: one holder leased several shards, which stayed
/// taken until they expired, and the others found none free.
///
/// A row with nothing in it (no mark, no exact last ID, no second seen)
/// whose shard the history table knows (the row was deleted and created
/// again) is raised past the server's clock plus the largest reach
/// recorded (at least this holder's) plus twice the skew limit plus one
/// second, as [`history::space`] raises a forgotten ID space; and the
/// shard is recorded in the history with this holder's reach, the reach of
/// the holder the row now names (the holder it named before was taken
/// over, with every mark it raised in the row). A raise counts from the
/// server's clock, so the row is raised only if that clock is within
/// `max_skew` of `host`, this host's clock (Unix seconds) as the statement
/// was sent.
/// Returns [`GRANTED`]'s columns, then whether the row was so raised, and
/// whether it should have been but the clocks were too far apart (the
/// holder then judges the server's clock on the answer, and raises the row
/// itself or refuses the server: [`history::check_shard`](super::history::check_shard)).
///
/// One statement, so an answer lost after its commit leaves nothing half
/// done: the row is taken, raised and recorded, or none of it, and the
/// open's next try finds the row with [`reclaim`].
pub(super) fn acquire(
    ask: &Ask<'_>,
    target: &Target,
    layout: &str,
    (reach, skew): (u64, u64),
    host: f64,
) -> String {
    let (table, history_table) = (target.table(), target.history_table());
    let skip: Vec<String> = ask.skip.iter().map(u32::to_string).collect();
    let mark = history::past(
        "extract(epoch FROM clock_timestamp())",
        &format!("GREATEST(COALESCE(k.cap, 0), {reach})"),
        skew,
    );
    let forgot = "(free.blank AND k.known >= 2)";
    let clock_ok = format!(
        "(abs(extract(epoch FROM clock_timestamp())::float8 - {host}::float8) <= {limit}::float8)",
        limit = ask.config.get_max_skew().as_secs_f64(),
    );
    format!(
        "WITH free AS MATERIALIZED (SELECT shard, high_water IS NULL AND last_second IS NULL \
                   AND last_sequence IS NULL AND seen IS NULL AS blank \
               FROM {table} \
               WHERE space = {space} AND layout = {layout} \
                 AND shard BETWEEN {first} AND {last} \
                 AND shard <> ALL(ARRAY[{skip}]::bigint[]) AND expires_at <= clock_timestamp() \
               ORDER BY expires_at, shard LIMIT 1 FOR UPDATE SKIP LOCKED), \
         taken AS (UPDATE {table} AS t SET holder = {token}, \
             epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int, \
             expires_at = clock_timestamp() + make_interval(secs => {ttl}::float8), \
             high_water = CASE WHEN {forgot} AND {clock_ok} THEN {mark} ELSE t.high_water END, \
             seen = CASE WHEN {forgot} AND {clock_ok} \
                 THEN extract(epoch FROM clock_timestamp())::bigint ELSE t.seen END, \
             {WRITTEN_BY} = {WRITER} \
         FROM free, \
             LATERAL (SELECT count(*) AS known, max(max_lead) AS cap FROM {history_table} \
               WHERE space = {space} AND shard IN (-1, free.shard)) AS k \
         WHERE t.space = {space} AND t.shard = free.shard \
         RETURNING {GRANTED}, {forgot} AND {clock_ok}, {forgot} AND NOT {clock_ok}), \
         recorded AS (INSERT INTO {history_table} (space, shard, max_lead) \
             SELECT {space}, shard, {reach} FROM taken \
             ON CONFLICT (space, shard) DO UPDATE SET max_lead = EXCLUDED.max_lead) \
         SELECT * FROM taken",
        token = literal(ask.token),
        ttl = ask.config.get_ttl().as_secs_f64(),
        space = literal(ask.config.get_prefix()),
        layout = literal(layout),
        first = ask.range.start(),
        last = ask.range.end(),
        skip = skip.join(","),
    )
}

/// The row of the ask's range that this open's token already holds, its
/// lease renewed: the statement. An acquisition whose answer was lost (no
/// answer in time, a connection cut, a commit the standby did not
/// confirm) may have taken a row; the token names this open alone, so a
/// row that still holds it was taken by this open and by no one since
/// (every acquisition writes its own token, and a release clears it). The
/// next try takes that row back, with the fencing epoch that acquisition
/// gave it, instead of a second one; a row taken and never found again
/// would stay leased until its TTL ran out. Returns the columns of
/// [`acquire`]: not raised by this statement, and whether the row still
/// has nothing in it while the history knows its shard. The lost
/// acquisition may have left such a row unraised (the clocks too far
/// apart), or the history may know the shard only because that acquisition
/// recorded it: the holder checks such a row again, which at worst moves a
/// never-used shard's IDs ahead by the history's jump, never back.
pub(super) fn reclaim(ask: &Ask<'_>, target: &Target, layout: &str) -> String {
    let (table, history_table) = (target.table(), target.history_table());
    let skip: Vec<String> = ask.skip.iter().map(u32::to_string).collect();
    format!(
        "UPDATE {table} AS t \
         SET expires_at = clock_timestamp() + make_interval(secs => {ttl}::float8), \
             {WRITTEN_BY} = {WRITER} \
         WHERE t.space = {space} AND t.shard = (SELECT shard FROM {table} \
             WHERE space = {space} AND layout = {layout} AND holder = {token} \
               AND shard BETWEEN {first} AND {last} \
               AND shard <> ALL(ARRAY[{skip}]::bigint[]) \
             ORDER BY shard LIMIT 1) \
           AND t.holder = {token} \
         RETURNING {GRANTED}, false, \
             t.high_water IS NULL AND t.last_second IS NULL AND t.last_sequence IS NULL \
             AND t.seen IS NULL AND (SELECT count(*) FROM {history_table} \
                 WHERE space = {space} AND shard IN (-1, t.shard)) >= 2",
        token = literal(ask.token),
        ttl = ask.config.get_ttl().as_secs_f64(),
        space = literal(ask.config.get_prefix()),
        layout = literal(layout),
        first = ask.range.start(),
        last = ask.range.end(),
        skip = skip.join(","),
    )
}

/// A held shard's key, as every write of its holder conditions on it.
pub(super) struct Key<'a> {
    pub(super) space: &'a str,
    pub(super) shard: u32,
    pub(super) epoch: i64,
    pub(super) token: &'a str,
}

impl Key<'_> {
    /// `space = ... AND shard = ... AND epoch = ... AND holder = ...`.
    fn held(&self) -> String {
        format!(
            "space = {} AND shard = {} AND epoch = {} AND holder = {}",
            literal(self.space),
            self.shard,
            self.epoch,
            literal(self.token)
        )
    }
}

/// Renews the lease: returns high_water, layout and the server's clock.
pub(super) fn renew(table: &str, key: &Key<'_>, ttl: Duration) -> String {
    format!(
        "UPDATE {table} SET {WRITTEN_BY} = {WRITER}, \
             expires_at = clock_timestamp() + make_interval(secs => {}::float8) \
         WHERE {} \
         RETURNING high_water, layout, extract(epoch FROM clock_timestamp())::float8",
        ttl.as_secs_f64(),
        key.held()
    )
}

/// Raises the mark, if the row's is still at least `known`.
pub(super) fn raise(table: &str, key: &Key<'_>, high_water: i64, seen: i64, known: i64) -> String {
    format!(
        "UPDATE {table} SET {WRITTEN_BY} = {WRITER}, \
             high_water = GREATEST(COALESCE(high_water, 0), {high_water}), \
             seen = CASE WHEN {seen} > 0 THEN GREATEST(COALESCE(seen, 0), {seen}) ELSE seen END, \
             last_second = NULL, last_sequence = NULL \
         WHERE {} AND COALESCE(high_water, 0) >= {known}",
        key.held()
    )
}

/// Gives the lease back, with the exact last ID (second, sequence) and
/// the highest second seen, or without.
pub(super) fn finish(table: &str, key: &Key<'_>, last: Option<(i64, i64)>, seen: i64) -> String {
    match last {
        Some((sec, seq)) => format!(
            "UPDATE {table} SET {WRITTEN_BY} = {WRITER}, \
                 high_water = GREATEST(COALESCE(high_water, 0), {sec}), \
                 last_second = {sec}, last_sequence = {seq}, \
                 seen = CASE WHEN {seen} > 0 THEN GREATEST(COALESCE(seen, 0), {seen}) \
                        ELSE seen END, \
                 holder = NULL, expires_at = '-infinity' \
             WHERE {}",
            key.held()
        ),
        None => format!(
            "UPDATE {table} SET {WRITTEN_BY} = {WRITER}, holder = NULL, \
                 expires_at = '-infinity' WHERE {}",
            key.held()
        ),
    }
}

/// A held shard's row as it is now: epoch, holder, high_water.
pub(super) fn row(table: &str, key: &Key<'_>) -> String {
    format!(
        "SELECT epoch, holder, COALESCE(high_water, 0) FROM {table} \
         WHERE space = {} AND shard = {}",
        literal(key.space),
        key.shard
    )
}

/// After an acquisition found nothing: refuses an ID space of another
/// layout, and creates the range's missing rows. `true` if rows were
/// created (so acquiring again may find one).
pub(super) fn prepare_space(
    conn: &mut Conn,
    target: &Target,
    ask: &Ask<'_>,
    layout: &str,
    timeout: Duration,
) -> Result<bool, Stop> {
    let config = ask.config;
    let table = target.table();
    let (first, last) = (ask.range.start(), ask.range.end());
    let (space, layout_text) = (literal(config.get_prefix()), literal(layout));
    let other = format!(
        "SELECT shard, layout FROM {table} WHERE space = {space} AND layout <> {layout_text} \
         ORDER BY shard LIMIT 1"
    );
    let statements = [
        // Creators of one ID space queue here for as long as this call may
        // take, not only the lease's shorter lock timeout.
        lock_timeout(timeout),
        format!("SELECT pg_advisory_xact_lock({}, hashtext({space}))", LOCK_KEY as i32),
        other.clone(),
        format!(
            "INSERT INTO {table} (space, shard, layout, {WRITTEN_BY}) \
             SELECT {space}, s, {layout_text}, {WRITER} FROM generate_series({first}::bigint, {last}::bigint) AS s \
             WHERE NOT EXISTS ({other}) \
             ON CONFLICT DO NOTHING"
        ),
    ];
    let answers = conn
        .write(target, timeout, &statements)
        .map_err(|f| Stop::Step("prepare the lease rows in", f))?;
    if let Some(row) = answers[2].rows.first() {
        let shard = row[0].as_deref().and_then(|s| s.parse().ok());
        return Err(Stop::Refused(LeaseError::layout_mismatch(
            shard.unwrap_or(u32::MAX),
            config.get_prefix(),
            row[1].clone().unwrap_or_default(),
            layout,
        )));
    }
    let added = answers[3].count;
    if added > 0 {
        log::info!(
            "created the rows of shards {first}..={last} of ID space {:?} in {table}",
            config.get_prefix()
        );
    }
    Ok(added > 0)
}

/// Writes a holder's mark back into its shard's row, creating the row if
/// it is gone, never lowering a mark: returns the row's `high_water`, or
/// nothing when the row is another layout's (left alone).
pub(super) fn restore(
    table: &str,
    key: &Key<'_>,
    layout: &str,
    high_water: i64,
    seen: i64,
) -> String {
    format!(
        "INSERT INTO {table} AS t (space, shard, layout, high_water, seen, {WRITTEN_BY}) \
         VALUES ({space}, {shard}, {layout}, {high_water}, \
             COALESCE(NULLIF({seen}, 0), extract(epoch FROM clock_timestamp())::bigint), {WRITER}) \
         ON CONFLICT (space, shard) DO UPDATE SET \
             {WRITTEN_BY} = EXCLUDED.{WRITTEN_BY}, \
             high_water = GREATEST(COALESCE(t.high_water, 0), EXCLUDED.high_water), \
             last_second = CASE WHEN COALESCE(t.high_water, 0) < EXCLUDED.high_water \
                 THEN NULL ELSE t.last_second END, \
             last_sequence = CASE WHEN COALESCE(t.high_water, 0) < EXCLUDED.high_water \
                 THEN NULL ELSE t.last_sequence END, \
             seen = GREATEST(t.seen, EXCLUDED.seen) \
         WHERE t.layout = EXCLUDED.layout \
         RETURNING t.high_water",
        space = literal(key.space),
        shard = key.shard,
        layout = literal(layout),
    )
}
