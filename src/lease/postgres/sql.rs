//! The lease table: its name, creating it, and creating an ID space's
//! rows.

use std::time::Duration;

use super::conn::Conn;
use super::target::Target;
use crate::error::Result;
use crate::lease::{Ask, LeaseConfig, LeaseError};

/// The table's name.
const TABLE: &str = "idutil_lease";
/// The advisory lock taken while the table or an ID space's rows are
/// created ("idut").
const LOCK_KEY: i64 = 0x6964_7574;

/// The table, qualified with the schema when one is set.
pub(super) fn table(config: &LeaseConfig) -> String {
    match &config.schema {
        Some(schema) => format!("{}.{TABLE}", quote(schema)),
        None => TABLE.to_string(),
    }
}

/// An identifier, quoted.
pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Creates the table and its index, once, under an advisory lock (two
/// `CREATE TABLE IF NOT EXISTS` at once can fail).
pub(super) fn create_table(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    table: &str,
    timeout: Duration,
) -> Result<()> {
    let index = quote(&format!("{TABLE}_free"));
    let sql = format!(
        "BEGIN; SET LOCAL lock_timeout = '{}ms'; SELECT pg_advisory_xact_lock({LOCK_KEY}); \
         CREATE TABLE IF NOT EXISTS {table} ( \
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
             PRIMARY KEY (space, shard)); \
         CREATE INDEX IF NOT EXISTS {index} ON {table} (space, expires_at); \
         COMMIT;",
        timeout.as_millis()
    );
    conn.run(target, timeout, async |c| c.batch_execute(&sql).await)
        .map_err(|f| f.into_error("create the lease table in", config).into())
}

/// After an acquisition found nothing: refuses an ID space of another
/// layout, and creates the range's missing rows. `true` if rows were
/// created (so acquiring again may find one).
pub(super) fn prepare_space(
    conn: &mut Conn,
    target: &Target,
    ask: &Ask<'_>,
    table: &str,
    layout: &str,
    timeout: Duration,
) -> Result<bool> {
    let config = ask.config;
    let (first, last) = (i64::from(*ask.range.start()), i64::from(*ask.range.end()));
    let other = format!(
        "SELECT shard, layout FROM {table} WHERE space = $1 AND layout <> $2 \
         ORDER BY shard LIMIT 1"
    );
    let insert = format!(
        "INSERT INTO {table} (space, shard, layout) \
         SELECT $1, s, $2 FROM generate_series($3::bigint, $4::bigint) AS s \
         ON CONFLICT DO NOTHING"
    );
    let outcome = conn.run(target, timeout, async |c| {
        let tx = c.transaction().await?;
        // Creators of one ID space queue here for as long as this call may
        // take, not only the lease's shorter lock timeout.
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{}ms'",
            timeout.as_millis()
        ))
        .await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))",
            &[&(LOCK_KEY as i32), &config.prefix],
        )
        .await?;
        if let Some(row) = tx.query_opt(&other, &[&config.prefix, &layout]).await? {
            return Ok(Err((row.get::<_, i64>(0), row.get::<_, String>(1))));
        }
        let added = tx
            .execute(&insert, &[&config.prefix, &layout, &first, &last])
            .await?;
        tx.commit().await?;
        Ok(Ok(added))
    });
    match outcome {
        Ok(Ok(added)) => {
            if added > 0 {
                log::info!(
                    "created the rows of shards {first}..={last} of ID space {:?} in {table}",
                    config.prefix
                );
            }
            Ok(added > 0)
        }
        Ok(Err((shard, recorded))) => Err(LeaseError::layout_mismatch(
            u32::try_from(shard).unwrap_or(u32::MAX),
            &config.prefix,
            recorded,
            layout,
        )
        .into()),
        Err(f) => Err(f.into_error("prepare the lease rows in", config).into()),
    }
}
