//! Restoring a shard's row: a holder that found its row lowered, deleted
//! or truncated raises it back to the mark it knows, re-creating it (and
//! the table) if it is gone ([the rule](crate::lease)).

use tokio_postgres::types::Type;

use super::conn::Failure;
use super::sql::create_table;
use super::{PgLease, UNDEFINED_TABLE};
use crate::lease::{Engine, LeaseError, Trouble};

impl PgLease {
    /// [`Engine::restore`](crate::lease::Engine::restore) for this row.
    pub(super) fn restore_row(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
        let sql = format!(
            "INSERT INTO {table} AS t (space, shard, layout, high_water, seen) \
             VALUES ($1, $2, $3, $4, \
                 COALESCE(NULLIF($5, 0), extract(epoch FROM clock_timestamp())::bigint)) \
             ON CONFLICT (space, shard) DO UPDATE SET \
                 high_water = GREATEST(COALESCE(t.high_water, 0), EXCLUDED.high_water), \
                 last_second = CASE WHEN COALESCE(t.high_water, 0) < EXCLUDED.high_water \
                     THEN NULL ELSE t.last_second END, \
                 last_sequence = CASE WHEN COALESCE(t.high_water, 0) < EXCLUDED.high_water \
                     THEN NULL ELSE t.last_sequence END, \
                 seen = GREATEST(t.seen, EXCLUDED.seen) \
             WHERE t.layout = EXCLUDED.layout \
             RETURNING t.high_water",
            table = self.table
        );
        let hw = i64::try_from(high_water).unwrap_or(i64::MAX);
        let seen = i64::try_from(seen).unwrap_or(0);
        let shard = i64::from(self.shard);
        let timeout = self.config.op_timeout();
        let mut conn = crate::sync::lock(&self.conn);
        let mut created = false;
        loop {
            let done = conn.run(&self.target, timeout, async |c| {
                c.query_typed(
                    &sql,
                    &[
                        (&self.config.prefix, Type::TEXT),
                        (&shard, Type::INT8),
                        (&self.layout, Type::TEXT),
                        (&hw, Type::INT8),
                        (&seen, Type::INT8),
                    ],
                )
                .await
            });
            let error = |f: Failure| {
                Trouble::Again(f.into_error("restore the high-water second in", &self.config))
            };
            match done {
                Ok(rows) if rows.is_empty() => {
                    return Err(Trouble::Lost(LeaseError::invalid_record(
                        self.shard,
                        self.describe(),
                        "layout",
                        "is another layout's: the row is left alone",
                    )))
                }
                Ok(_) => return Ok(()),
                // The table itself was dropped.
                Err(f) if f.code() == Some(UNDEFINED_TABLE) && !created => {
                    created = true;
                    create_table(&mut conn, &self.target, &self.config, &self.table, timeout)
                        .map_err(|e| match e {
                            crate::Error::Lease(e) => Trouble::Again(e),
                            other => Trouble::Again(LeaseError::invalid_config(other.to_string())),
                        })?;
                }
                Err(f) => return Err(error(f)),
            }
        }
    }
}
