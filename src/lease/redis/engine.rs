//! A shard held in Redis: renewing, raising the mark, giving it back.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use ::redis::{Connection, Value};

use super::conn::{evicting, fail, replicas, replicas_of, with_conn};
use super::scripts::{record_trouble, FINISH, RAISE, RELEASE, RENEW, RESTORE};
use super::{key, millis, RedisLease, ENGINE};
use crate::lease::{Engine, LeaseError, Renewed, Trouble};

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
}

impl Engine for RedisLease {
    fn renew(&self, known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
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
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
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
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
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
            with_conn(
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
