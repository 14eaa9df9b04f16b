//! A shard without a record: held for one TTL before its record is
//! created.

use std::thread;
use std::time::Instant;

use super::conn::{fail, with_conn};
use super::scripts::{CREATE, HOLD};
use super::{key, millis, RedisLease};
use crate::layout::Layout;
use crate::lease::record::{RawRecord, Record};
use crate::lease::LeaseError;

impl RedisLease {
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
            let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
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
        let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
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
                let raw = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
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
