//! A shard held in Redis: its connections, the wait of a shard whose
//! history is unknown, renewing, raising the mark (and waiting for the
//! replicas), restoring it, giving the shard back, all on [`RedisLease`].

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ::redis::{Client, Connection, Value};

use super::conn::{fail, replicas, with_conn, with_conn_again};
use super::scripts::{record_trouble, FINISH, HOLD, RAISE, RELEASE, RENEW, RESTORE, SETTLE};
use super::setup::Setup;
use super::{key, millis, ENGINE};
use crate::layout::Layout;
use idutil_lease::interface::{Held, Renewed, Trouble};
use idutil_lease::record::{read_record, RawRecord, Record};
use idutil_lease::{LeaseConfig, LeaseError};

/// A shard held in Redis.
pub(super) struct RedisLease {
    pub(super) config: LeaseConfig,
    pub(super) client: Client,
    pub(super) shard: u32,
    pub(super) token: String,
    pub(super) layout: String,
    /// For raises and the close.
    pub(super) conn: Mutex<Option<Connection>>,
    /// The renewal thread's own, so a slow write never delays a renewal.
    pub(super) renew_conn: Mutex<Option<Connection>>,
    /// The most replicas the server has had since the shard was leased:
    /// every raise waits for that many.
    pub(super) replicas: AtomicI64,
}

impl RedisLease {
    /// After a raise: waits for every replica the server has had, if any.
    fn wait_replicas(&self, conn: &mut Connection) -> Result<(), Trouble> {
        let seen = replicas(conn).unwrap_or(0);
        let wanted = self.replicas.fetch_max(seen, Relaxed).max(seen);
        if wanted == 0 {
            return Ok(());
        }
        let confirmed: i64 = ::redis::cmd("WAIT")
            .arg(wanted)
            .arg(millis(self.config.op_timeout()))
            .query(conn)
            .map_err(|e| Trouble::Again(fail("wait for the replicas of", &self.config)(e)))?;
        if confirmed < wanted {
            return Err(Trouble::Again(LeaseError::not_replicated(
                self.shard, wanted, confirmed,
            )));
        }
        Ok(())
    }

    pub(super) fn check_record(
        &self,
        raw: &RawRecord,
        layout: &Layout,
    ) -> Result<Record, LeaseError> {
        let shard = self.shard;
        if let Some(recorded) = raw.layout.as_ref().filter(|r| **r != self.layout) {
            return Err(LeaseError::layout_mismatch(
                shard,
                self.config.get_prefix(),
                recorded,
                &self.layout,
            ));
        }
        let (record, problems) = read_record(raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(LeaseError::invalid_record(
                shard,
                key(&self.config, "mark", shard),
                field,
                reason,
            )),
            None => Ok(record),
        }
    }

    /// A shard whose history is unknown: no record (nobody used it under
    /// this prefix, or Redis lost it: a flush, a server emptied), or one
    /// not confirmed since Redis last started (restarted from an older copy,
    /// a replica promoted, or nothing lost: it cannot tell). A holder that
    /// issued under the old history may still be issuing: it stops at its
    /// next renewal, and at the latest three quarters of a TTL after its
    /// last successful one, which came before this lease was granted. So
    /// the lease is held (renewed) for one whole TTL from `granted_at`; then
    /// the record's `high_water` is raised (or the record created) to at
    /// least Redis's clock plus the lead cap (this holder's, or the largest
    /// the record kept) plus the skew limit plus one second, past every ID
    /// any holder can have issued (each stays within its lead cap of a
    /// clock within the skew limit of Redis's), and at least `now` (the
    /// generator's clock); the exact last ID is dropped and the record
    /// stamped with the server's run ID. Returns the record and
    /// when the lease was last renewed.
    pub(super) fn wait_and_settle(
        &self,
        layout: &Layout,
        now: u64,
        granted_at: Instant,
        unknown: Unknown,
    ) -> Result<(Record, Instant), LeaseError> {
        let config = &self.config;
        let (lease_key, mark_key) = (
            key(config, "lease", self.shard),
            key(config, "mark", self.shard),
        );
        let why = match unknown {
            Unknown::NoRecord => format!(
                "has no record in Redis ({mark_key}): first use of the shard under this key \
                 prefix, or Redis lost its data"
            ),
            Unknown::Restarted => format!(
                "has a record ({mark_key}) written before Redis last started (a restart, a \
                 restore from an older copy, a promoted replica), which may be older than what \
                 its holders issued"
            ),
        };
        let cap = config.get_max_lead().as_secs();
        let margin = ceil_secs(config.get_max_skew()).saturating_add(1);
        log::warn!(
            "shard {} {why}: holding the lease one TTL ({:?}) so that any holder still issuing \
             under the old record stops, then starting at least {} s past Redis's clock (the \
             lead cap, the skew limit and a second), past every ID a holder can have issued",
            self.shard,
            config.get_ttl(),
            cap.saturating_add(margin)
        );
        let expired = |reason: &str| {
            LeaseError::fenced(
                self.shard,
                format!("{reason} while waiting to settle the shard's record"),
            )
        };
        let ready_at = granted_at + config.get_ttl();
        let mut slot = crate::sync::lock(&self.conn);
        let mut held_at = granted_at;
        loop {
            let now = Instant::now();
            if now >= ready_at {
                break;
            }
            thread::sleep(
                (held_at + config.renew_every())
                    .min(ready_at)
                    .saturating_duration_since(now),
            );
            if Instant::now() >= ready_at {
                break;
            }
            let sent = Instant::now();
            let answer: i64 = with_conn_again(&self.client, &mut slot, config.op_timeout(), |c| {
                HOLD.key(&lease_key)
                    .key(&mark_key)
                    .arg(&self.token)
                    .arg(millis(config.get_ttl()))
                    .invoke(c)
            })
            .map_err(fail("hold the leased shard in", config))?;
            match answer {
                // 2: a record appeared meanwhile (a holder that lost it
                // wrote its mark back); the wait goes on all the same.
                1 | 2 => held_at = sent,
                _ => return Err(expired("the lease expired")),
            }
        }
        // Clamped into the layout's range, so the record is always valid; a
        // clock outside the range issues nothing anyway.
        let now = now.clamp(layout.epoch(), layout.last_unix_second());
        let sent = Instant::now();
        // The record comes back from the same step, so a restart of Redis
        // right after it cannot hand over an older one.
        let (answer, high_water, seen, recorded): (
            i64,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = with_conn_again(&self.client, &mut slot, config.op_timeout(), |c| {
            SETTLE
                .key(&lease_key)
                .key(&mark_key)
                .arg(&self.token)
                .arg(millis(config.get_ttl()))
                .arg(now)
                .arg(&self.layout)
                .arg(cap)
                .arg(layout.last_unix_second())
                .arg(margin)
                .invoke(c)
        })
        .map_err(fail("settle the shard's record in", config))?;
        match answer {
            1 | 2 => {}
            0 => return Err(expired("the lease expired")),
            trouble => return Err(record_trouble(config, self.shard, trouble)),
        }
        let raw = RawRecord {
            high_water,
            last: None,
            seen,
            layout: recorded,
        };
        let record = self.check_record(&raw, layout)?;
        log::warn!(
            "shard {}: its record's high-water second is now {}; the shard resumes after it",
            self.shard,
            record.high_water.unwrap_or_default()
        );
        Ok((record, sent))
    }
}

/// Why a shard's history is unknown, for [`RedisLease::wait_and_settle`].
pub(super) enum Unknown {
    /// The shard has no record.
    NoRecord,
    /// Its record was not confirmed since Redis last started.
    Restarted,
}

/// Whole seconds, rounded up.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Held for RedisLease {
    fn renew(&self, known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
        // Not run again on a closed connection: the renewal thread retries
        // on its own schedule, and the fence covers the meantime.
        let mut slot = crate::sync::lock(&self.renew_conn);
        let answer: Vec<Value> = with_conn(&self.client, &mut slot, timeout, |c| {
            RENEW
                .key(key(&self.config, "lease", self.shard))
                .key(key(&self.config, "mark", self.shard))
                .arg(&self.token)
                .arg(millis(self.config.get_ttl()))
                .arg(known_mark)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| Trouble::Again(fail("renew the lease in", &self.config)(e)))?;
        let int = |i: usize| match answer.get(i) {
            Some(Value::Int(n)) => Some(*n),
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        };
        match int(0) {
            Some(1 | 2) => {}
            Some(0) => {
                return Err(Trouble::Lost(LeaseError::lost(
                    self.shard,
                    "it expired in Redis and another generator took the shard, or reserved on it",
                )))
            }
            Some(trouble) => {
                return Err(Trouble::Lost(record_trouble(
                    &self.config,
                    self.shard,
                    trouble,
                )))
            }
            None => {
                return Err(Trouble::Again(LeaseError::store(
                    ENGINE,
                    "renew the lease in",
                    self.config.get_url(),
                    std::io::Error::other("an answer this crate does not send"),
                )))
            }
        }
        // A setting refused at open (eviction, `appendonly no`, a chained
        // replica), switched on since, stops the holder; what cannot be
        // read now (CONFIG renamed, a replica down) was warned about at
        // open, and a replica that does not answer fails its `WAIT`.
        // The lease is renewed by now: these reads get a round trip's time
        // of their own, not what the fence left the renewal.
        let timeout = self.config.op_timeout();
        if let Ok(mut setup) = with_conn(&self.client, &mut slot, timeout, Setup::read) {
            setup.ask_replicas(self.client.get_connection_info(), timeout);
            if let Some(e) = setup.refusal(&self.config) {
                return Err(Trouble::Lost(e));
            }
            let n = i64::try_from(setup.replicas.len()).unwrap_or(i64::MAX);
            self.replicas.fetch_max(n, Relaxed);
        }
        let mark = int(1).and_then(|m| u64::try_from(m).ok());
        let server_time = match (int(2), int(3)) {
            (Some(s), Some(us)) => Some(
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(us).unwrap_or(0)),
            ),
            _ => None,
        };
        Ok(Renewed { mark, server_time })
    }

    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let mut slot = crate::sync::lock(&self.conn);
        let done: i64 = with_conn_again(&self.client, &mut slot, self.config.op_timeout(), |c| {
            RAISE
                .key(key(&self.config, "lease", self.shard))
                .key(key(&self.config, "mark", self.shard))
                .arg(&self.token)
                .arg(high_water)
                .arg(seen)
                .arg(&self.layout)
                .arg(known_mark)
                .arg(self.config.get_max_lead().as_secs())
                .invoke(c)
        })
        .map_err(|e| {
            Trouble::Again(fail(
                "record the high-water second of the leased shard in",
                &self.config,
            )(e))
        })?;
        match done {
            1 => {}
            0 => {
                return Err(Trouble::Again(LeaseError::fenced(
                    self.shard,
                    "the lease expired in Redis before the reservation was recorded",
                )))
            }
            trouble => {
                return Err(Trouble::Lost(record_trouble(
                    &self.config,
                    self.shard,
                    trouble,
                )))
            }
        }
        let conn = slot.as_mut().expect("the connection the raise used");
        let waited = self.wait_replicas(conn);
        if waited.is_err() {
            *slot = None;
        }
        waited
    }

    fn restore(&self, high_water: u64, seen: u64) -> Result<(), Trouble> {
        let mut slot = crate::sync::lock(&self.conn);
        // A re-created record needs a `seen` in the layout's range.
        let seen = if seen == 0 { high_water } else { seen };
        let done: i64 = with_conn_again(&self.client, &mut slot, self.config.op_timeout(), |c| {
            RESTORE
                .key(key(&self.config, "mark", self.shard))
                .arg(high_water)
                .arg(seen)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| Trouble::Again(fail("restore the high-water second in", &self.config)(e)))?;
        match done {
            1 => Ok(()),
            _ => Err(Trouble::Lost(LeaseError::invalid_record(
                self.shard,
                self.describe(),
                "layout",
                "is not this ID space's: the record is left alone",
            ))),
        }
    }

    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble> {
        let mut slot = crate::sync::lock(&self.conn);
        let (lease_key, mark_key) = (
            key(&self.config, "lease", self.shard),
            key(&self.config, "mark", self.shard),
        );
        let answer: i64 =
            with_conn_again(
                &self.client,
                &mut slot,
                self.config.op_timeout(),
                |c| match last {
                    Some((sec, seq)) => FINISH
                        .key(&lease_key)
                        .key(&mark_key)
                        .arg(&self.token)
                        .arg(sec)
                        .arg(seq)
                        .arg(seen)
                        .arg(&self.layout)
                        .invoke(c),
                    None => RELEASE.key(&lease_key).arg(&self.token).invoke(c),
                },
            )
            .map_err(|e| Trouble::Again(fail("give back the lease in", &self.config)(e)))?;
        match answer {
            1 => Ok(()),
            0 if last.is_none() => Ok(()),
            0 => Err(Trouble::Lost(LeaseError::lost_at_close(self.shard))),
            trouble => Err(Trouble::Lost(record_trouble(
                &self.config,
                self.shard,
                trouble,
            ))),
        }
    }

    fn describe(&self) -> String {
        key(&self.config, "mark", self.shard)
    }
}
