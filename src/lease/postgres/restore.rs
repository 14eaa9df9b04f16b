//! Restoring a shard's row: a holder that found its row lowered, deleted
//! or truncated raises it back to the mark it knows, re-creating it (and
//! the table) if it is gone ([the rule](crate::lease)).

use super::conn::Failure;
use super::sql::{self, create_table};
use super::{PgLease, UNDEFINED_TABLE};
use crate::lease::{Engine, LeaseError, Trouble};

impl PgLease {
    /// [`Engine::restore`](crate::lease::Engine::restore) for this row.
    pub(super) fn restore_row(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
        let statement = sql::restore(
            &self.table,
            &self.key(),
            &self.layout,
            i64::try_from(high_water).unwrap_or(i64::MAX),
            i64::try_from(seen).unwrap_or(0),
        );
        let timeout = self.config.op_timeout();
        let mut conn = crate::sync::lock(&self.conn);
        let mut created = false;
        loop {
            let error = |f: Failure| {
                Trouble::Again(f.into_error("restore the high-water second in", &self.config))
            };
            match conn.write(&self.target, timeout, std::slice::from_ref(&statement)) {
                Ok(answers) if answers.last().is_none_or(|a| a.rows.is_empty()) => {
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
                    create_table(&mut conn, &self.target, &self.config, timeout).map_err(|e| {
                        match e {
                            crate::Error::Lease(e) => Trouble::Again(e),
                            other => Trouble::Again(LeaseError::invalid_config(other.to_string())),
                        }
                    })?;
                }
                Err(f) => return Err(error(f)),
            }
        }
    }
}
