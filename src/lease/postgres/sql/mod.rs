//! The statements' text: the table, an ID space's rows, and every
//! holder's statement, each naming the table with its schema and carrying
//! its values as literals (the simple query protocol, see
//! [`Conn::write`](super::conn::Conn::write)).

pub(super) mod history;
pub(super) mod release;

use std::time::Duration;

use super::conn::{literal, Conn};
use super::target::{quote, Target};
use super::EPOCH_MAX;
use crate::lease::interface::Ask;
use crate::lease::LeaseResult as Result;
use crate::lease::{LeaseConfig, LeaseError};

/// The table's name.
pub(super) const TABLE: &str = "idutil_lease";
/// The history table's name (see [`history`](super::history)).
pub(super) const HISTORY: &str = "idutil_lease_history";
/// The advisory lock taken while the table or an ID space's rows are
/// created ("idut").
const LOCK_KEY: i64 = 0x6964_7574;

/// The columns a holder reads back: shard, epoch, high_water,
/// last_second, last_sequence, seen, layout, and the server's clock.
const GRANTED: &str = "t.shard, t.epoch, t.high_water, t.last_second, t.last_sequence, t.seen, \
     t.layout, extract(epoch FROM clock_timestamp())::float8";

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
    config: &LeaseConfig,
    timeout: Duration,
) -> Result<()> {
    let table = target.table();
    let index = quote(&format!("{TABLE}_free"));
    let statements = [
        lock_timeout(timeout),
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
                 PRIMARY KEY (space, shard))"
        ),
        format!("CREATE INDEX IF NOT EXISTS {index} ON {table} (space, expires_at)"),
    ];
    conn.write(target, timeout, &statements)
        .map(drop)
        .map_err(|f| f.into_error("create the lease table in", config))
}

/// Takes the first free shard of the ask's range: the statement.
///
/// The free row is chosen once, in a materialized CTE. As a subquery in
/// `UPDATE ... FROM`, the planner may run it again for each row of the
/// table it joins (a nested loop, as after `VACUUM FULL` changed the
/// table's size), and each run, blind to the statement's own updates,
/// takes one more row: one holder leased several shards, which stayed
/// taken until they expired, and the others found none free.
pub(super) fn acquire(ask: &Ask<'_>, target: &Target, layout: &str) -> String {
    let table = target.table();
    let skip: Vec<String> = ask.skip.iter().map(u32::to_string).collect();
    format!(
        "WITH free AS MATERIALIZED (SELECT shard FROM {table} \
               WHERE space = {space} AND layout = {layout} \
                 AND shard BETWEEN {first} AND {last} \
                 AND shard <> ALL(ARRAY[{skip}]::bigint[]) AND expires_at <= clock_timestamp() \
               ORDER BY expires_at, shard LIMIT 1 FOR UPDATE SKIP LOCKED) \
         UPDATE {table} AS t SET holder = {token}, \
             epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int, \
             expires_at = clock_timestamp() + make_interval(secs => {ttl}::float8) \
         FROM free \
         WHERE t.space = {space} AND t.shard = free.shard \
         RETURNING {GRANTED}",
        token = literal(ask.token),
        ttl = ask.config.ttl.as_secs_f64(),
        space = literal(&ask.config.prefix),
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
        "UPDATE {table} SET expires_at = clock_timestamp() + make_interval(secs => {}::float8) \
         WHERE {} \
         RETURNING high_water, layout, extract(epoch FROM clock_timestamp())::float8",
        ttl.as_secs_f64(),
        key.held()
    )
}

/// Raises the mark, if the row's is still at least `known`.
pub(super) fn raise(table: &str, key: &Key<'_>, high_water: i64, seen: i64, known: i64) -> String {
    format!(
        "UPDATE {table} SET high_water = GREATEST(COALESCE(high_water, 0), {high_water}), \
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
            "UPDATE {table} SET high_water = GREATEST(COALESCE(high_water, 0), {sec}), \
                 last_second = {sec}, last_sequence = {seq}, \
                 seen = CASE WHEN {seen} > 0 THEN GREATEST(COALESCE(seen, 0), {seen}) \
                        ELSE seen END, \
                 holder = NULL, expires_at = '-infinity' \
             WHERE {}",
            key.held()
        ),
        None => format!(
            "UPDATE {table} SET holder = NULL, expires_at = '-infinity' WHERE {}",
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
) -> Result<bool> {
    let config = ask.config;
    let table = target.table();
    let (first, last) = (ask.range.start(), ask.range.end());
    let (space, layout_text) = (literal(&config.prefix), literal(layout));
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
            "INSERT INTO {table} (space, shard, layout) \
             SELECT {space}, s, {layout_text} FROM generate_series({first}::bigint, {last}::bigint) AS s \
             WHERE NOT EXISTS ({other}) \
             ON CONFLICT DO NOTHING"
        ),
    ];
    let answers = conn
        .write(target, timeout, &statements)
        .map_err(|f| f.into_error("prepare the lease rows in", config))?;
    if let Some(row) = answers[2].rows.first() {
        let shard = row[0].as_deref().and_then(|s| s.parse().ok());
        return Err(LeaseError::layout_mismatch(
            shard.unwrap_or(u32::MAX),
            &config.prefix,
            row[1].clone().unwrap_or_default(),
            layout,
        ));
    }
    let added = answers[3].count;
    if added > 0 {
        log::info!(
            "created the rows of shards {first}..={last} of ID space {:?} in {table}",
            config.prefix
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
        "INSERT INTO {table} AS t (space, shard, layout, high_water, seen) \
         VALUES ({space}, {shard}, {layout}, {high_water}, \
             COALESCE(NULLIF({seen}, 0), extract(epoch FROM clock_timestamp())::bigint)) \
         ON CONFLICT (space, shard) DO UPDATE SET \
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
