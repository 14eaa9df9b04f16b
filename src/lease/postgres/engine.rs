//! A shard held in PostgreSQL: renewing, raising the mark, giving it back.

use std::time::Duration;

use super::conn::{off_runtime, Conn, Failure};
use super::{server_time, PgLease};
use crate::lease::{Engine, LeaseError, Renewed, Trouble};

impl PgLease {
    fn key_args(&self) -> (String, i64, i64, String) {
        (
            self.config.prefix.clone(),
            i64::from(self.shard),
            self.epoch,
            self.token.clone(),
        )
    }

    /// A conditional write changed no row: why.
    fn gone(&self, conn: &mut Conn, timeout: Duration, known_mark: i64) -> Trouble {
        let sql = format!(
            "SELECT epoch, holder, COALESCE(high_water, 0) FROM {} \
             WHERE space = $1 AND shard = $2::bigint",
            self.table
        );
        let found = conn.run(&self.target, timeout, async |c| {
            c.query_opt(&sql, &[&self.config.prefix, &i64::from(self.shard)])
                .await
        });
        match found {
            Ok(None) => Trouble::Lost(LeaseError::RecordLost {
                shard: self.shard,
                key: self.describe(),
            }),
            Ok(Some(row))
                if row.get::<_, i64>(0) == self.epoch
                    && row.get::<_, Option<String>>(1).as_deref() == Some(&self.token)
                    && row.get::<_, i64>(2) < known_mark =>
            {
                Trouble::Lost(LeaseError::mark_lowered(self.shard, &self.describe()))
            }
            Ok(Some(row)) => {
                let epoch: i64 = row.get(0);
                let reason = if epoch != self.epoch {
                    format!(
                        "its fencing epoch moved from {} to {epoch}: another generator leased \
                         the shard",
                        self.epoch
                    )
                } else {
                    "the row's holder was rewritten".to_string()
                };
                Trouble::Lost(LeaseError::lost(self.shard, reason))
            }
            Err(f) => Trouble::Again(f.into_error("check the lease in", &self.config)),
        }
    }
}

impl Engine for PgLease {
    fn renew(&self, _known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() + make_interval(secs => $5::float8) \
             WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4 \
             RETURNING high_water, layout, extract(epoch FROM clock_timestamp())::float8",
            self.table
        );
        let (space, shard, epoch, token) = self.key_args();
        let ttl = self.config.ttl.as_secs_f64();
        let mut conn = crate::sync::lock(&self.renew_conn);
        let row = conn
            .run(&self.target, timeout, async |c| {
                c.query_opt(&sql, &[&space, &shard, &epoch, &token, &ttl])
                    .await
            })
            .map_err(|f| Trouble::Again(f.into_error("renew the lease in", &self.config)))?;
        let Some(row) = row else {
            return Err(self.gone(&mut conn, timeout, 0));
        };
        if row.get::<_, String>(1) != self.layout {
            return Err(Trouble::Lost(LeaseError::invalid_record(
                self.shard,
                self.describe(),
                "layout",
                "was changed while this generator held the shard",
            )));
        }
        Ok(Renewed {
            mark: row
                .get::<_, Option<i64>>(0)
                .map(|m| u64::try_from(m).unwrap_or(0)),
            server_time: server_time(row.get(2)),
        })
    }

    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let sql = format!(
            "UPDATE {} SET high_water = GREATEST(COALESCE(high_water, 0), $5::bigint), \
                 seen = CASE WHEN $6::bigint > 0 THEN GREATEST(COALESCE(seen, 0), $6::bigint) ELSE seen END, \
                 last_second = NULL, last_sequence = NULL \
             WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4 \
                 AND COALESCE(high_water, 0) >= $7::bigint",
            self.table
        );
        let (space, shard, epoch, token) = self.key_args();
        let (hw, seen) = (
            i64::try_from(high_water).unwrap_or(i64::MAX),
            i64::try_from(seen).unwrap_or(0),
        );
        let known = i64::try_from(known_mark).unwrap_or(i64::MAX);
        let timeout = self.config.op_timeout();
        let mut conn = crate::sync::lock(&self.conn);
        let changed = conn
            .run(&self.target, timeout, async |c| {
                c.execute(&sql, &[&space, &shard, &epoch, &token, &hw, &seen, &known])
                    .await
            })
            .map_err(|f| {
                Trouble::Again(f.into_error(
                    "record the high-water second of the leased shard in",
                    &self.config,
                ))
            })?;
        if changed == 1 {
            Ok(())
        } else {
            Err(self.gone(&mut conn, timeout, known))
        }
    }

    fn restore(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
        off_runtime(|| self.restore_row(high_water, seen))
    }

    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble> {
        let (space, shard, epoch, token) = self.key_args();
        let timeout = self.config.op_timeout();
        let run = || -> Result<u64, Failure> {
            let mut conn = crate::sync::lock(&self.conn);
            match last {
                Some((sec, seq)) => {
                    let sql = format!(
                        "UPDATE {} SET high_water = GREATEST(COALESCE(high_water, 0), $5::bigint), \
                             last_second = $5::bigint, last_sequence = $6::bigint, \
                             seen = CASE WHEN $7::bigint > 0 THEN GREATEST(COALESCE(seen, 0), $7::bigint) \
                                    ELSE seen END, \
                             holder = NULL, expires_at = '-infinity' \
                         WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4",
                        self.table
                    );
                    let (sec, seq) = (i64::try_from(sec).unwrap_or(i64::MAX), i64::from(seq));
                    let seen = i64::try_from(seen).unwrap_or(0);
                    conn.run(&self.target, timeout, async |c| {
                        c.execute(&sql, &[&space, &shard, &epoch, &token, &sec, &seq, &seen])
                            .await
                    })
                }
                None => {
                    let sql = format!(
                        "UPDATE {} SET holder = NULL, expires_at = '-infinity' \
                         WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4",
                        self.table
                    );
                    conn.run(&self.target, timeout, async |c| {
                        c.execute(&sql, &[&space, &shard, &epoch, &token]).await
                    })
                }
            }
        };
        match off_runtime(run) {
            Ok(1) => Ok(()),
            Ok(_) if last.is_none() => Ok(()),
            Ok(_) => Err(Trouble::Lost(LeaseError::lost_at_close(self.shard))),
            Err(f) => Err(Trouble::Again(
                f.into_error("give back the lease in", &self.config),
            )),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} row (space {:?}, shard {})",
            self.table, self.config.prefix, self.shard
        )
    }
}
