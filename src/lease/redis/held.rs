//! A shard held in Redis: its connections, the first use of a shard
//! without a record, renewing, raising the mark (and waiting for the
//! replicas), restoring it, giving the shard back, all on [`RedisLease`].

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ::redis::{Client, Connection, Value};

use super::conn::{evicting, fail, replicas, replicas_of, with_conn, with_conn_again};
use super::scripts::{record_trouble, CREATE, FINISH, HOLD, RAISE, RELEASE, RENEW, RESTORE};
use super::{key, millis, ENGINE};
use crate::layout::Layout;
use crate::lease::interface::{Held, Renewed, Trouble};
use crate::lease::record::{read_record, RawRecord, Record};
use crate::lease::{LeaseConfig, LeaseError};

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
            return Err(Trouble::Again(LeaseError::NotReplicated {
                shard: self.shard,
                replicas: wanted,
                confirmed,
            }));
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
                &self.config.prefix,
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

    /// A shard without a record: either nobody used it under this prefix,
    /// or Redis lost the record under a holder that may still be issuing.
    /// That holder stops at its next renewal, and at the latest three
    /// quarters of a TTL after its last successful one, which came before
    /// this lease was granted. So the lease is held (renewed) for one whole
    /// TTL from `granted_at` before the record is created, with `now` (the
    /// generator's clock) as its high-water mark; a record that appeared
    /// meanwhile (written back by the holder that lost it) is read instead.
    /// Returns the record and when the lease was last renewed.
    pub(super) fn wait_and_create(
        &self,
        layout: &Layout,
        now: u64,
        granted_at: Instant,
    ) -> Result<(Record, Instant), LeaseError> {
        let config = &self.config;
        let (lease_key, mark_key) = (
            key(config, "lease", self.shard),
            key(config, "mark", self.shard),
        );
        log::warn!(
            "shard {} has no record in Redis ({mark_key}): first use of the shard under this key \
             prefix, or Redis lost its data; waiting one lease TTL ({:?}) before the first ID \
             so that a holder that lost its record has stopped",
            self.shard,
            config.ttl
        );
        let expired = |reason: &str| {
            LeaseError::fenced(
                self.shard,
                format!("{reason} while waiting to create the shard's record"),
            )
        };
        let ready_at = granted_at + config.ttl;
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
                    .arg(millis(config.ttl))
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
        let answer: i64 = with_conn_again(&self.client, &mut slot, config.op_timeout(), |c| {
            CREATE
                .key(&lease_key)
                .key(&mark_key)
                .arg(&self.token)
                .arg(millis(config.ttl))
                .arg(now)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(fail("create the shard's record in", config))?;
        match answer {
            1 => {}
            2 => {
                // Written back by a holder that lost it (`restore.rs`): the
                // shard's record, read strictly.
                let raw = with_conn_again(&self.client, &mut slot, config.op_timeout(), |c| {
                    ::redis::cmd("HMGET")
                        .arg(&mark_key)
                        .arg(&["high_water", "last", "seen", "layout"])
                        .query(c)
                })
                .map_err(fail("read the shard's record in", config))?;
                let (high_water, last, seen, recorded) = raw;
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                return Ok((self.check_record(&raw, layout)?, sent));
            }
            _ => return Err(expired("the lease expired")),
        }
        let record = Record {
            high_water: Some(now),
            last: None,
            seen: Some(now),
        };
        Ok((record, sent))
    }
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
                .arg(millis(self.config.ttl))
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
                    &self.config.url,
                    std::io::Error::other("an answer this crate does not send"),
                )))
            }
        }
        // A policy that may evict the records, switched on since open, stops
        // the holder; a server that will not say (CONFIG renamed) was
        // warned about at open.
        if let Ok(Some(e)) = with_conn(&self.client, &mut slot, timeout, |c| {
            evicting(&self.config, c)
        }) {
            return Err(Trouble::Lost(e));
        }
        let mark = int(1).and_then(|m| u64::try_from(m).ok());
        let server_time = match (int(2), int(3)) {
            (Some(s), Some(us)) => Some(
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(us).unwrap_or(0)),
            ),
            _ => None,
        };
        if let Ok(n) = replicas_of(&self.client, &mut slot, timeout) {
            self.replicas.fetch_max(n, Relaxed);
        }
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
