//! A held lease: acquiring a shard, raising its high-water second, and
//! finishing with the exact last ID.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use redis::{Client, Connection};

use super::record::{read_record, RawRecord, Record};
use super::renewal::{RenewState, Renewer, Shared};
use super::scripts::{record_trouble, ACQUIRE, CREATE, FINISH, HOLD, RAISE, RELEASE};
use super::{millis, new_token, with_conn, LeaseConfig, LeaseError};
use crate::clock::Clock;
use crate::durable::FenceHook;
use crate::error::Result;
use crate::layout::Layout;

/// A held lease: the shard, the renewal thread and the connection for
/// writing the high-water second.
pub(crate) struct Lease {
    config: LeaseConfig,
    client: Client,
    shard: u32,
    token: String,
    record: Record,
    layout: String,
    /// The layout's first and last Unix seconds.
    epoch: u64,
    last_second: u64,
    /// For the reservation thread and the close; the renewal thread has its
    /// own, so a slow write never delays a renewal.
    conn: Mutex<Option<Connection>>,
    shared: Arc<Shared>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    finished: std::sync::atomic::AtomicBool,
}

impl Lease {
    /// Leases the first free shard of the allowed range (`only` narrows it
    /// to one shard; `skip` leaves some out), checks or creates its record
    /// and starts renewing it. A shard without a record is held for one TTL
    /// before its record is created, with `clock`'s second as its
    /// high-water mark (see [`Lease::wait_and_create`]).
    pub(crate) fn acquire(
        config: &LeaseConfig,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        time: &dyn Clock,
    ) -> Result<Lease> {
        let range = config.range(layout, only)?;
        let client = config.client()?;
        let token = new_token();
        let mut conn = None;
        type Granted = (
            u32,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let granted: Option<Granted> = with_conn(&client, &mut conn, config.op_timeout(), |c| {
            let mut call = ACQUIRE.prepare_invoke();
            call.arg(&config.prefix)
                .arg(range.start())
                .arg(range.end())
                .arg(&token)
                .arg(millis(config.ttl));
            for s in skip {
                call.arg(s);
            }
            call.invoke(c)
        })
        .map_err(|e| LeaseError::redis("lease a shard from", &config.url, e))?;
        // After the reply, not before the request: a holder that lost the
        // record renewed for the last time before the script ran.
        let granted_at = Instant::now();
        let Some((shard, kind, high_water, last, seen, recorded)) = granted else {
            return Err(LeaseError::NoFreeShard {
                first: *range.start(),
                last: *range.end(),
                prefix: config.prefix.clone(),
            }
            .into());
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(RenewState {
                stop: false,
                fenced: None,
                lost: false,
                last_error: None,
            }),
            changed: Condvar::new(),
            hook: Mutex::new(None),
            known_hw: AtomicU64::new(0),
        });
        let mut lease = Lease {
            config: config.clone(),
            client: client.clone(),
            shard,
            token: token.clone(),
            record: Record::default(),
            layout: layout.fingerprint().to_string(),
            epoch: layout.epoch(),
            last_second: layout.last_unix_second(),
            conn: Mutex::new(conn),
            shared: Arc::clone(&shared),
            renewer: Mutex::new(None),
            finished: false.into(),
        };
        // From here on, dropping `lease` releases the shard: a record that
        // cannot be trusted refuses it, and opening fails rather than move
        // on to another shard.
        let key = config.mark_key(shard);
        let invalid = |field, reason| LeaseError::InvalidRecord {
            shard,
            key: key.clone(),
            field,
            reason,
        };
        let last_ok = match kind.as_str() {
            "none" => lease.wait_and_create(layout, time, granted_at)?,
            "hash" => {
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                if let Some(recorded) = raw.layout.as_ref().filter(|r| **r != lease.layout) {
                    return Err(LeaseError::LayoutMismatch {
                        shard,
                        prefix: config.prefix.clone(),
                        recorded: recorded.clone(),
                        ours: lease.layout.clone(),
                    }
                    .into());
                }
                let (record, problems) = read_record(&raw, layout);
                if let Some((field, reason)) = problems.into_iter().next() {
                    return Err(invalid(field, reason).into());
                }
                lease.record = record;
                granted_at
            }
            other => {
                return Err(invalid(
                    "high_water",
                    format!("cannot be read: the key holds a {other}, not a hash"),
                )
                .into())
            }
        };
        shared
            .known_hw
            .store(lease.record.high_water.unwrap_or(0), Relaxed);
        let renewer = Renewer {
            config: config.clone(),
            client,
            shard,
            token,
            layout: lease.layout.clone(),
            shared,
            last_ok,
        };
        let handle = thread::Builder::new()
            .name(format!("idutil-lease-{shard}"))
            .spawn(move || renewer.run())
            .map_err(|e| LeaseError::InvalidConfig {
                reason: format!("cannot start the renewal thread: {e}"),
            })?;
        *crate::sync::lock(&lease.renewer) = Some(handle);
        Ok(lease)
    }

    /// A shard without a record: either nobody used it under this prefix,
    /// or Redis lost the record (a flush, a restart without persistence)
    /// under a holder that may still be issuing. That holder stops at its
    /// next renewal, and at the latest three quarters of a TTL after its
    /// last successful one, which came before this lease was granted. So
    /// the lease is held (renewed) for one whole TTL from `granted_at`
    /// before the record is created, with the clock's second as its
    /// high-water mark: the first ID is then in a later second than any the
    /// old holder issued by the same clock. Returns when the lease was last
    /// renewed.
    fn wait_and_create(
        &mut self,
        layout: &Layout,
        time: &dyn Clock,
        granted_at: Instant,
    ) -> Result<Instant> {
        let config = &self.config;
        log::warn!(
            "shard {} has no record in Redis ({}): first use of the shard under this key \
             prefix, or Redis lost its data; waiting one lease TTL ({:?}) before the first ID \
             so that a holder that lost its record has stopped",
            self.shard,
            config.mark_key(self.shard),
            config.ttl
        );
        let lost = |reason: &str| LeaseError::Fenced {
            shard: self.shard,
            reason: format!("{reason} while waiting to create the shard's record"),
        };
        let appeared = || LeaseError::InvalidRecord {
            shard: self.shard,
            key: config.mark_key(self.shard),
            field: "high_water",
            reason: "appeared while this generator held the lease and waited to create it: \
                     something else writes these keys"
                .to_string(),
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
                HOLD.key(config.lease_key(self.shard))
                    .key(config.mark_key(self.shard))
                    .arg(&self.token)
                    .arg(millis(config.ttl))
                    .invoke(c)
            })
            .map_err(|e| LeaseError::redis("hold the leased shard in", &config.url, e))?;
            match answer {
                1 => held_at = sent,
                2 => return Err(appeared().into()),
                _ => return Err(lost("the lease expired").into()),
            }
        }
        // Clamped into the layout's range, so the record is always valid; a
        // clock outside the range issues nothing anyway.
        let now = time.now().clamp(layout.epoch(), layout.last_unix_second());
        let sent = Instant::now();
        let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
            CREATE
                .key(config.lease_key(self.shard))
                .key(config.mark_key(self.shard))
                .arg(&self.token)
                .arg(millis(config.ttl))
                .arg(now)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| LeaseError::redis("create the shard's record in", &config.url, e))?;
        match answer {
            1 => {}
            2 => return Err(appeared().into()),
            _ => return Err(lost("the lease expired").into()),
        }
        drop(slot);
        self.record = Record {
            high_water: Some(now),
            last: None,
            seen: Some(now),
        };
        Ok(sent)
    }

    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// The shard's record as found when the lease was granted, or created.
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// Installs the generator's fence and applies the current state.
    pub(crate) fn set_hook(&self, hook: FenceHook) {
        let state = self.shared.lock();
        let fenced = state.fenced.is_some();
        *crate::sync::lock(&self.shared.hook) = Some(hook);
        if fenced {
            self.shared.set_fence(true);
        }
    }

    /// Why the generator is fenced (for its error).
    pub(crate) fn fence_error(&self) -> LeaseError {
        self.shared
            .lock()
            .fenced
            .clone()
            .unwrap_or_else(|| LeaseError::Fenced {
                shard: self.shard,
                reason: "the lease is being renewed".to_string(),
            })
    }

    /// Records in Redis that IDs up to `high_water` (Unix seconds) may be
    /// issued, if the lease is still held. Must succeed before any such ID
    /// is issued. A record found gone or garbled stops the generator for
    /// good; it is never re-created or overwritten.
    pub(crate) fn raise(&self, high_water: u64, seen: u64) -> Result<()> {
        let mut slot = crate::sync::lock(&self.conn);
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
            RAISE
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(high_water)
                .arg(self.seen_arg(seen))
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| {
            LeaseError::redis(
                "record the high-water second of the leased shard in",
                &self.config.url,
                e,
            )
        })?;
        match done {
            1 => {
                self.shared.known_hw.fetch_max(high_water, Relaxed);
                Ok(())
            }
            0 => Err(LeaseError::Fenced {
                shard: self.shard,
                reason: "the lease expired in Redis before the reservation was recorded"
                    .to_string(),
            }
            .into()),
            trouble => {
                let e = record_trouble(&self.config, self.shard, trouble);
                self.shared.fence_for_good(self.shard, e.clone());
                Err(e.into())
            }
        }
    }

    /// `seen` for a script: a second outside the layout's range (a clock
    /// past its end) is not recorded, so the record stays valid.
    fn seen_arg(&self, seen: u64) -> u64 {
        let in_range = seen >= self.epoch && seen <= self.last_second;
        if in_range {
            seen
        } else {
            0
        }
    }

    /// Clean close: records the exact last ID (Unix second, sequence), if
    /// any, releases the lease and stops renewing. Redis errors are logged:
    /// the lease then expires by itself and the recorded high-water second
    /// still covers every ID issued.
    pub(crate) fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        self.finished.store(true, Relaxed);
        self.stop_renewing();
        let mut slot = crate::sync::lock(&self.conn);
        let result: redis::RedisResult<i64> = with_conn(
            &self.client,
            &mut slot,
            self.config.op_timeout(),
            |c| match last {
                Some((sec, seq)) => FINISH
                    .key(self.config.lease_key(self.shard))
                    .key(self.config.mark_key(self.shard))
                    .arg(&self.token)
                    .arg(sec)
                    .arg(seq)
                    .arg(self.seen_arg(seen))
                    .arg(&self.layout)
                    .invoke(c),
                None => RELEASE
                    .key(self.config.lease_key(self.shard))
                    .arg(&self.token)
                    .invoke(c),
            },
        );
        match result {
            Ok(1) => {}
            Ok(0) => log::warn!(
                "the Redis lease on shard {} was no longer held at close, so the exact last \
                 ID was not recorded in Redis",
                self.shard
            ),
            Ok(trouble) => log::warn!(
                "shard {}: {}; the lease was released and the record left as it is",
                self.shard,
                record_trouble(&self.config, self.shard, trouble)
            ),
            Err(e) => log::warn!(
                "cannot release the Redis lease on shard {} at {}: {e}; it expires within {:?}",
                self.shard,
                self.config.url_redacted(),
                self.config.ttl
            ),
        }
    }

    fn stop_renewing(&self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        let handle = crate::sync::lock(&self.renewer).take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A lease that was never used for a generator (its open failed):
        // nothing was issued under it, so just give it back.
        if !self.finished.load(Relaxed) {
            self.finish(None, 0);
        }
    }
}
