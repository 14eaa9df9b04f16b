//! A shard held in PostgreSQL: the holder's one connection, renewing,
//! raising the mark, restoring it, giving the shard back, and reading the
//! granted row, all on [`PgLease`].

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::conn::{number, off_runtime, Conn, Failure};
use super::replication::{self, Setup};
use super::retry::Deadline;
use super::row::{raw_record, Granted};
use super::sql::{self, create_table, Key};
use super::target::Target;

use super::{server_time, EPOCH_MAX, UNDEFINED_TABLE};
use crate::layout::Layout;
use idutil_lease::interface::{Held, Renewed, Trouble};
use idutil_lease::record::{read_record, Record};
use idutil_lease::{LeaseConfig, LeaseError};

/// A shard held in PostgreSQL.
pub(super) struct PgLease {
    pub(super) config: LeaseConfig,
    pub(super) target: Target,
    pub(super) table: String,
    pub(super) shard: u32,
    pub(super) token: String,
    pub(super) epoch: i64,
    pub(super) layout: String,
    /// The holder's one connection, for renewals, raises and the close: a
    /// pooler's pool gives the holder one server connection at a time.
    pub(super) conn: Mutex<Conn>,
    /// Whether the replication setup's risk was warned about (once until
    /// it changes).
    pub(super) warned: AtomicBool,
    /// Whether the replication setup could be read at open (and so is read
    /// again with a renewal, every [`replication::every`]).
    pub(super) probe: bool,
    /// The send time of the last renewal that read the setup and found it
    /// acceptable (`None`: none yet, so the first renewal reads it).
    pub(super) probed: Mutex<Option<Instant>>,
    /// Until the first raise succeeds or the generator's open is over
    /// ([`Held::opened`]): the open's own raise, which is tried again
    /// within an open deadline of its own ([`LeaseConfig::open_timeout`]
    /// from its start).
    pub(super) opening: AtomicBool,
}

impl PgLease {
    fn key(&self) -> Key<'_> {
        Key {
            space: self.config.get_prefix(),
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
            Ok(None) => Trouble::Lost(LeaseError::record_lost(self.shard, self.describe())),
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

    /// Whether the row was given back by this holder: no holder, and still
    /// this holder's fencing epoch (every acquisition raises it).
    fn given_back(&self, conn: &mut Conn, timeout: Duration) -> Result<bool, Failure> {
        let mut answers =
            conn.write(&self.target, timeout, &[sql::row(&self.table, &self.key())])?;
        Ok(
            match answers.pop().and_then(|a| a.rows.into_iter().next()) {
                None => false,
                Some(row) => {
                    number::<i64>(&row[0], "epoch")? == Some(self.epoch) && row[1].is_none()
                }
            },
        )
    }

    /// The granted row's record, read strictly.
    pub(super) fn read(&self, row: Granted, layout: &Layout) -> Result<Record, LeaseError> {
        let Granted {
            high_water,
            last,
            seen,
            layout: recorded,
            ..
        } = row;
        let invalid = |field, reason: &str| {
            LeaseError::invalid_record(self.shard, self.describe(), field, reason)
        };
        if self.epoch == EPOCH_MAX {
            return Err(invalid(
                "epoch",
                "is the largest bigint, which no acquisition can raise, so holders could not \
                 be told apart (set it to 0 while no generator holds the shard)",
            ));
        }
        if recorded != self.layout {
            return Err(LeaseError::layout_mismatch(
                self.shard,
                self.config.get_prefix(),
                recorded,
                &self.layout,
            ));
        }
        let Some(raw) = raw_record(high_water, last, seen, recorded)
            .map_err(|(field, reason)| invalid(field, reason))?
        else {
            return Ok(Record::default());
        };
        let (record, problems) = read_record(&raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(invalid(field, &reason)),
            None => Ok(record),
        }
    }

    /// [`Held::restore`] for this row: a holder that found its row lowered,
    /// deleted or truncated raises it back to the mark it knows, re-creating
    /// it (and the table) if it is gone.
    fn restore_row(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
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
                    create_table(&mut conn, &self.target, timeout).map_err(|f| {
                        Trouble::Again(f.into_error("create the lease table in", &self.config))
                    })?;
                }
                Err(f) => return Err(error(f)),
            }
        }
    }
}

impl Held for PgLease {
    fn renew(&self, _known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
        let start = Instant::now();
        let again = |f: Failure| Trouble::Again(f.into_error("renew the lease in", &self.config));
        let Some(mut conn) = self.conn_by(start + timeout) else {
            return Err(again(Failure::Timeout(timeout)));
        };
        let left = timeout.saturating_sub(start.elapsed());
        // The replication setup, where it could be read at open: in the
        // renewal's round trip, once every `replication::every`, and at
        // every renewal while it is refused.
        let probe = self.probe
            && (*crate::sync::lock(&self.probed))
                .is_none_or(|at| start >= at + replication::every(&self.config));
        let mut statements = vec![sql::renew(&self.table, &self.key(), self.config.get_ttl())];
        if probe {
            statements.insert(0, replication::PROBE.to_string());
        }
        let mut answers = conn.write(&self.target, left, &statements).map_err(again)?;
        let renewed = answers.pop().and_then(|a| a.rows.into_iter().next());
        let setup = probe
            .then(|| answers.pop())
            .flatten()
            .and_then(|a| a.rows.into_iter().next())
            .and_then(|row| Setup::read(&row));
        if let Some(setup) = setup {
            replication::judge(&setup, &self.config, self.target.strict(), &self.warned)
                .map_err(Trouble::Again)?;
            *crate::sync::lock(&self.probed) = Some(start);
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

    /// The open's raise (the first) is tried again within an open deadline
    /// of its own (the state directory's part of the open, between the
    /// acquisition and this raise, may have been slow), each try one round
    /// trip at most so that renewals get the connection between tries; it
    /// may run twice, as every raise may: it never lowers the mark, and one
    /// that went through unseen leaves the row's mark at or above
    /// `known_mark`.
    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let (hw, seen) = (
            i64::try_from(high_water).unwrap_or(i64::MAX),
            i64::try_from(seen).unwrap_or(0),
        );
        let known = i64::try_from(known_mark).unwrap_or(i64::MAX);
        let statement = sql::raise(&self.table, &self.key(), hw, seen, known);
        let action = "record the high-water second of the leased shard in";
        let mut deadline = self.opening.load(Relaxed).then(|| {
            Deadline::open_held(
                &self.config,
                Instant::now() + self.config.get_open_timeout(),
            )
        });
        let mut conn = crate::sync::lock(&self.conn);
        loop {
            let timeout = deadline
                .as_ref()
                .map_or(self.config.op_timeout(), Deadline::timeout);
            match conn.write(&self.target, timeout, std::slice::from_ref(&statement)) {
                Ok(answers) if answers.last().map_or(0, |a| a.count) == 1 => {
                    self.opening.store(false, Relaxed);
                    return Ok(());
                }
                Ok(_) => return Err(self.gone(&mut conn, timeout, known)),
                Err(f) => match deadline.as_mut() {
                    None => return Err(Trouble::Again(f.into_error(action, &self.config))),
                    Some(d) => {
                        // The renewals' turn while this one pauses.
                        drop(conn);
                        d.again(&self.config, action, f).map_err(Trouble::Again)?;
                        conn = crate::sync::lock(&self.conn);
                    }
                },
            }
        }
    }

    fn restore(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
        off_runtime(|| self.restore_row(high_water, seen))
    }

    /// Tried again within the close's deadline (a quarter of the TTL) when it
    /// failed in a way that may pass. A try whose answer was lost may have
    /// gone through: a next try that then finds nothing to change reads the
    /// row, and a row still at this holder's fencing epoch with no holder
    /// was given back by it (an acquisition would have raised the epoch).
    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble> {
        let last_args =
            last.map(|(sec, seq)| (i64::try_from(sec).unwrap_or(i64::MAX), i64::from(seq)));
        let seen_arg = i64::try_from(seen).unwrap_or(0);
        let statement = sql::finish(&self.table, &self.key(), last_args, seen_arg);
        let action = "give back the lease in";
        let run = || -> Result<(), Trouble> {
            let mut deadline = Deadline::close(&self.config);
            let mut unsure = false;
            let mut conn = crate::sync::lock(&self.conn);
            loop {
                let timeout = deadline.timeout();
                let failure =
                    match conn.write(&self.target, timeout, std::slice::from_ref(&statement)) {
                        Ok(answers) if answers.last().map_or(0, |a| a.count) == 1 => return Ok(()),
                        Ok(_) if unsure => match self.given_back(&mut conn, timeout) {
                            Ok(true) => return Ok(()),
                            Ok(false) if last.is_none() => return Ok(()),
                            Ok(false) => {
                                return Err(Trouble::Lost(LeaseError::lost_at_close(self.shard)))
                            }
                            Err(f) => f,
                        },
                        Ok(_) if last.is_none() => return Ok(()),
                        Ok(_) => return Err(Trouble::Lost(LeaseError::lost_at_close(self.shard))),
                        Err(f) => {
                            unsure = true;
                            f
                        }
                    };
                drop(conn);
                deadline
                    .again(&self.config, action, failure)
                    .map_err(Trouble::Again)?;
                conn = crate::sync::lock(&self.conn);
            }
        };
        off_runtime(run)
    }

    fn opened(&self) {
        self.opening.store(false, Relaxed);
    }

    fn describe(&self) -> String {
        format!(
            "{} row (space {:?}, shard {})",
            self.table,
            self.config.get_prefix(),
            self.shard
        )
    }
}
