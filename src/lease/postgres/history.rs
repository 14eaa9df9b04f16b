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
//! row) to the store's clock plus the largest lead cap a holder of the
//! space recorded, plus the skew limit, plus one second, past every ID any
//! holder can have issued, and records the new identity.

use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::Transaction;

use super::conn::Conn;
use super::sql::{create_table, quote};
use super::target::Target;
use super::UNDEFINED_TABLE;
use crate::error::Result;
use crate::lease::{LeaseConfig, LeaseError};

/// The history table's name.
const HISTORY: &str = "idutil_lease_history";
/// The advisory lock taken while the history table is created.
const LOCK_KEY: i64 = 0x6964_7568;

/// The history table, qualified as the lease table is.
fn history_table(config: &LeaseConfig) -> String {
    match &config.schema {
        Some(schema) => format!("{}.{HISTORY}", quote(schema)),
        None => HISTORY.to_string(),
    }
}

/// A history the rows may have forgotten: why, and the second every row
/// concerned was raised to.
pub(super) struct Forgotten {
    pub(super) why: String,
    pub(super) floor: i64,
}

/// The second past every ID a holder can have issued: the store's clock
/// plus the lead cap and the skew limit, plus one.
fn floor(server_now: f64, max_lead: i64, config: &LeaseConfig) -> i64 {
    let skew = i64::try_from(config.max_skew.as_secs()).unwrap_or(i64::MAX);
    (server_now.max(0.0) as i64)
        .saturating_add(max_lead)
        .saturating_add(skew)
        .saturating_add(1)
}

/// Before a shard is leased: compares the server and the table with what
/// the ID space's history recorded, and on any difference raises every row
/// of the space past what a holder can have issued. Creates the tables on
/// first use. `Some`: a forgotten history was found (and the rows raised).
pub(super) fn check_space(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    table: &str,
    timeout: Duration,
) -> Result<Option<Forgotten>> {
    let history = history_table(config);
    let found = conn.run(target, timeout, async |c| {
        let exists: Option<i64> = c
            .query_typed_one(
                "SELECT to_regclass($1)::oid::bigint",
                &[(&table, Type::TEXT)],
            )
            .await?
            .get(0);
        Ok(exists.is_some())
    });
    let exists = found.map_err(|f| f.into_error("lease a shard from", config))?;
    if !exists {
        create_table(conn, target, config, table, timeout)?;
    }
    // The server's identity on its own: a server that will not tell it
    // (Aurora has no `pg_current_wal_lsn()`, say) is compared without it.
    let server = conn.run(target, timeout, async |c| {
        let row = c
            .query_typed_one(
                "SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') \
                     THEN (SELECT system_identifier::text FROM pg_control_system()) END, \
                     ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint",
                &[],
            )
            .await?;
        Ok((
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<i64>>(1),
        ))
    });
    let (system, timeline) = server.unwrap_or_else(|f| {
        log::debug!(
            "the server's identity is not compared: {}",
            f.into_error("read the identity of", config)
        );
        (None, None)
    });
    let max_lead = i64::try_from(config.max_lead.as_secs()).unwrap_or(i64::MAX);
    let outcome = conn.run(target, timeout, async |c| {
        let tx = c.transaction().await?;
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{}ms'",
            timeout.as_millis()
        ))
        .await?;
        create_history(&tx, &history).await?;
        tx.query_typed(
            "SELECT pg_advisory_xact_lock($1::int4, hashtext($2))",
            &[(&(LOCK_KEY as i32), Type::INT4), (&config.prefix, Type::TEXT)],
        )
        .await?;
        let now = tx
            .query_typed_one(
                "SELECT to_regclass($1)::oid::bigint, \
                     pg_relation_filenode(to_regclass($1))::bigint, \
                     extract(epoch FROM clock_timestamp())::float8",
                &[(&table, Type::TEXT)],
            )
            .await?;
        let current = Identity {
            system: system.clone(),
            timeline,
            oid: now.get(0),
            node: now.get(1),
        };
        let server_now: f64 = now.get(2);
        let stored = tx
            .query_typed_opt(
                &format!(
                    "SELECT system_identifier, timeline, table_oid, table_node, max_lead \
                     FROM {history} WHERE space = $1 AND shard = -1"
                ),
                &[(&config.prefix, Type::TEXT)],
            )
            .await?;
        let (why, lead) = match &stored {
            Some(row) => {
                let recorded = Identity {
                    system: row.get(0),
                    timeline: row.get(1),
                    oid: row.get(2),
                    node: row.get(3),
                };
                let lead: Option<i64> = row.get(4);
                (recorded.differs(&current), lead.unwrap_or(0).max(max_lead))
            }
            None => {
                let marked: bool = tx
                    .query_typed_one(
                        &format!(
                            "SELECT EXISTS (SELECT 1 FROM {table} \
                             WHERE space = $1 AND high_water IS NOT NULL)"
                        ),
                        &[(&config.prefix, Type::TEXT)],
                    )
                    .await?
                    .get(0);
                let why = marked.then(|| {
                    "the ID space has marks but no recorded history (kept since this version \
                     of idutil; or its history was dropped)"
                        .to_string()
                });
                (why, max_lead)
            }
        };
        let floor = floor(server_now, lead, config);
        if why.is_some() {
            tx.query_typed(
                &format!(
                    "UPDATE {table} SET high_water = $2, last_second = NULL, \
                         last_sequence = NULL, \
                         seen = COALESCE(seen, extract(epoch FROM clock_timestamp())::bigint) \
                     WHERE space = $1 AND COALESCE(high_water, 0) < $2"
                ),
                &[(&config.prefix, Type::TEXT), (&floor, Type::INT8)],
            )
            .await?;
        }
        let unchanged = stored.as_ref().is_some_and(|row| {
            why.is_none() && row.get::<_, Option<i64>>(4).unwrap_or(0) >= max_lead
        });
        if !unchanged {
            tx.query_typed(
                &format!(
                    "INSERT INTO {history} AS h \
                         (space, shard, system_identifier, timeline, table_oid, table_node, max_lead) \
                     VALUES ($1, -1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (space, shard) DO UPDATE SET \
                         system_identifier = COALESCE(EXCLUDED.system_identifier, \
                             h.system_identifier), \
                         timeline = COALESCE(EXCLUDED.timeline, h.timeline), \
                         table_oid = EXCLUDED.table_oid, \
                         table_node = EXCLUDED.table_node, \
                         max_lead = GREATEST(h.max_lead, EXCLUDED.max_lead)"
                ),
                &[
                    (&config.prefix, Type::TEXT),
                    (&current.system, Type::TEXT),
                    (&current.timeline, Type::INT8),
                    (&current.oid, Type::INT8),
                    (&current.node, Type::INT8),
                    (&lead, Type::INT8),
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(why.map(|why| Forgotten { why, floor }))
    });
    outcome.map_err(|f| f.into_error("lease a shard from", config).into())
}

/// After a shard is leased: records that it has a mark, or, if its row has
/// none (`had_mark` false) although its history says it had one (the row
/// was deleted and created again), raises the row past what a holder can
/// have issued. `Some`: the row was raised.
pub(super) fn check_shard(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    table: &str,
    shard: u32,
    had_mark: bool,
    timeout: Duration,
) -> std::result::Result<Option<Forgotten>, LeaseError> {
    let history = history_table(config);
    let shard = i64::from(shard);
    let outcome = conn.run(target, timeout, async |c| {
        let tx = c.transaction().await?;
        let known = tx
            .query_typed_one(
                &format!(
                    "WITH known AS (SELECT max_lead FROM {history} \
                         WHERE space = $1 AND shard IN (-1, $2)), \
                     added AS (INSERT INTO {history} (space, shard) VALUES ($1, $2) \
                         ON CONFLICT DO NOTHING RETURNING 1) \
                     SELECT (SELECT count(*) FROM known)::bigint, \
                         (SELECT max(max_lead) FROM known)::bigint, \
                         extract(epoch FROM clock_timestamp())::float8"
                ),
                &[(&config.prefix, Type::TEXT), (&shard, Type::INT8)],
            )
            .await?;
        // The space's row, and the shard's own: a row that once had a mark.
        let rows: i64 = known.get(0);
        if had_mark || rows < 2 {
            tx.commit().await?;
            return Ok(None);
        }
        let lead = known
            .get::<_, Option<i64>>(1)
            .unwrap_or(0)
            .max(i64::try_from(config.max_lead.as_secs()).unwrap_or(i64::MAX));
        let floor = floor(known.get(2), lead, config);
        tx.query_typed(
            &format!(
                "UPDATE {table} SET high_water = GREATEST(COALESCE(high_water, 0), $3), \
                     last_second = NULL, last_sequence = NULL, \
                     seen = COALESCE(seen, extract(epoch FROM clock_timestamp())::bigint) \
                 WHERE space = $1 AND shard = $2"
            ),
            &[
                (&config.prefix, Type::TEXT),
                (&shard, Type::INT8),
                (&floor, Type::INT8),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(Some(Forgotten {
            why: "its row had a mark once and has none now (deleted and created again)".to_string(),
            floor,
        }))
    });
    match outcome {
        // Dropped since `check_space`: the next acquisition finds it out.
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => Ok(None),
        other => other.map_err(|f| f.into_error("check the lease history in", config)),
    }
}

/// Creates the history table if it is missing, under an advisory lock (two
/// `CREATE TABLE IF NOT EXISTS` at once can fail).
async fn create_history(
    tx: &Transaction<'_>,
    history: &str,
) -> std::result::Result<(), tokio_postgres::Error> {
    let exists: Option<i64> = tx
        .query_typed_one(
            "SELECT to_regclass($1)::oid::bigint",
            &[(&history, Type::TEXT)],
        )
        .await?
        .get(0);
    if exists.is_some() {
        return Ok(());
    }
    tx.query_typed(
        "SELECT pg_advisory_xact_lock($1)",
        &[(&LOCK_KEY, Type::INT8)],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {history} ( \
             space text NOT NULL, \
             shard bigint NOT NULL, \
             system_identifier text, \
             timeline bigint, \
             table_oid bigint, \
             table_node bigint, \
             max_lead bigint, \
             PRIMARY KEY (space, shard))"
    ))
    .await
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
