//! A shard held in PostgreSQL: renewing, raising the mark, giving it back.

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::conn::{number, off_runtime, Conn, Failure};
use super::replication::{self, Setup};
use super::sql::{self, Key};
use super::{server_time, PgLease};
use crate::lease::{Engine, LeaseError, Renewed, Trouble};

impl PgLease {
    pub(super) fn key(&self) -> Key<'_> {
        Key {
            space: &self.config.prefix,
            shard: self.shard,
            epoch: self.epoch,
            token: &self.token,
        }
    }

    /// The holder's connection, waited for until `deadline` at most: a
    /// raise may be using it, and a renewal must not outlast the fence.
    fn conn_by(&self, deadline: Instant) -> Option<MutexGuard<'_, Conn>> {
        loop {
            match self.conn.try_lock() {
                Ok(conn) => return Some(conn),
                Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
    }

    /// A conditional write changed no row: why.
    fn gone(&self, conn: &mut Conn, timeout: Duration, known_mark: i64) -> Trouble {
        let found = conn
            .write(&self.target, timeout, &[sql::row(&self.table, &self.key())])
            .and_then(
                |mut answers| match answers.pop().and_then(|a| a.rows.into_iter().next()) {
                    None => Ok(None),
                    Some(row) => {
                        let epoch = number::<i64>(&row[0], "epoch")?.unwrap_or(0);
                        let mark = number::<i64>(&row[2], "high_water")?.unwrap_or(0);
                        Ok(Some((epoch, row[1].clone(), mark)))
                    }
                },
            );
        match found {
            Ok(None) => Trouble::Lost(LeaseError::RecordLost {
                shard: self.shard,
                key: self.describe(),
            }),
            Ok(Some((epoch, holder, mark)))
                if epoch == self.epoch
                    && holder.as_deref() == Some(&self.token)
                    && mark < known_mark =>
            {
                Trouble::Lost(LeaseError::mark_lowered(self.shard, &self.describe()))
            }
            Ok(Some((epoch, _, _))) => {
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
        let start = Instant::now();
        let again = |f: Failure| Trouble::Again(f.into_error("renew the lease in", &self.config));
        let Some(mut conn) = self.conn_by(start + timeout) else {
            return Err(again(Failure::Timeout(timeout)));
        };
        let left = timeout.saturating_sub(start.elapsed());
        // The replication setup, read in the same round trip where it
        // could be read at open.
        let mut statements = vec![sql::renew(&self.table, &self.key(), self.config.ttl)];
        if self.probe {
            statements.insert(0, replication::PROBE.to_string());
        }
        let mut answers = conn.write(&self.target, left, &statements).map_err(again)?;
        let renewed = answers.pop().and_then(|a| a.rows.into_iter().next());
        let setup = answers
            .pop()
            .and_then(|a| a.rows.into_iter().next())
            .and_then(|row| Setup::read(&row));
        if let Some(setup) = setup {
            replication::judge(&setup, &self.config, self.target.strict(), &self.warned)
                .map_err(Trouble::Again)?;
        }
        let Some(row) = renewed else {
            return Err(self.gone(&mut conn, left, 0));
        };
        if row[1].as_deref() != Some(self.layout.as_str()) {
            return Err(Trouble::Lost(LeaseError::invalid_record(
                self.shard,
                self.describe(),
                "layout",
                "was changed while this generator held the shard",
            )));
        }
        let mark = number::<i64>(&row[0], "high_water").map_err(again)?;
        let server = number::<f64>(&row[2], "the server's clock").map_err(again)?;
        Ok(Renewed {
            mark: mark.map(|m| u64::try_from(m).unwrap_or(0)),
            server_time: server_time(server),
        })
    }

    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let (hw, seen) = (
            i64::try_from(high_water).unwrap_or(i64::MAX),
            i64::try_from(seen).unwrap_or(0),
        );
        let known = i64::try_from(known_mark).unwrap_or(i64::MAX);
        let statement = sql::raise(&self.table, &self.key(), hw, seen, known);
        let timeout = self.config.op_timeout();
        let mut conn = crate::sync::lock(&self.conn);
        let changed = conn
            .write(&self.target, timeout, &[statement])
            .map_err(|f| {
                Trouble::Again(f.into_error(
                    "record the high-water second of the leased shard in",
                    &self.config,
                ))
            })?
            .pop()
            .map_or(0, |a| a.count);
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
        let timeout = self.config.op_timeout();
        let last_args =
            last.map(|(sec, seq)| (i64::try_from(sec).unwrap_or(i64::MAX), i64::from(seq)));
        let seen_arg = i64::try_from(seen).unwrap_or(0);
        let statement = sql::finish(&self.table, &self.key(), last_args, seen_arg);
        let run = || -> Result<u64, Failure> {
            let mut conn = crate::sync::lock(&self.conn);
            let answers = conn.write(&self.target, timeout, &[statement])?;
            Ok(answers.last().map_or(0, |a| a.count))
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
