//! The renewal thread: keeps the lease alive, and fences the generator
//! when it cannot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{Client, Connection};

use super::scripts::{record_trouble, RENEW};
use super::{millis, with_conn, LeaseConfig, LeaseError};
use crate::durable::FenceHook;

pub(super) struct Shared {
    pub(super) state: Mutex<RenewState>,
    pub(super) changed: Condvar,
    pub(super) hook: Mutex<Option<FenceHook>>,
    /// The highest high-water second this holder wrote (Unix seconds).
    pub(super) known_hw: AtomicU64,
}

pub(super) struct RenewState {
    pub(super) stop: bool,
    /// Why the generator is fenced, while it is.
    pub(super) fenced: Option<LeaseError>,
    pub(super) lost: bool,
    pub(super) last_error: Option<String>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, RenewState> {
        crate::sync::lock(&self.state)
    }

    /// Stops the generator for good: `e` is why, and the renewal thread
    /// stops renewing.
    pub(super) fn fence_for_good(&self, shard: u32, e: LeaseError) {
        let mut state = self.lock();
        if !state.lost {
            log::warn!("shard {shard}: {e}");
        }
        state.lost = true;
        state.fenced = Some(e);
        self.set_fence(true);
        drop(state);
        self.changed.notify_all();
    }

    pub(super) fn set_fence(&self, on: bool) {
        if let Some(hook) = &*crate::sync::lock(&self.hook) {
            hook(on);
        }
    }
}

/// The renewal thread's own state.
pub(super) struct Renewer {
    pub(super) config: LeaseConfig,
    pub(super) client: Client,
    pub(super) shard: u32,
    pub(super) token: String,
    /// The layout's fingerprint, which the record must still carry.
    pub(super) layout: String,
    pub(super) shared: Arc<Shared>,
    /// Send time of the last successful renewal (or the acquisition).
    pub(super) last_ok: Instant,
}

pub(super) enum Renewal {
    Held,
    /// Gone for good: another holder took the shard, or the record vanished
    /// or was garbled.
    Lost(LeaseError),
}

impl Renewer {
    pub(super) fn run(mut self) {
        let mut conn: Option<Connection> = None;
        let mut next = self.last_ok + self.config.renew_every();
        loop {
            let fence_at = self.last_ok + self.config.fence_after();
            {
                let mut state = self.shared.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    let now = Instant::now();
                    if state.fenced.is_none() && now >= fence_at {
                        let reason = match &state.last_error {
                            Some(e) => format!(
                                "no renewal succeeded for {:?}; last error: {e}",
                                now - self.last_ok
                            ),
                            None => format!("no renewal succeeded for {:?}", now - self.last_ok),
                        };
                        log::warn!(
                            "shard {}: the Redis lease could not be renewed in time ({reason}); \
                             issuing stops until it is",
                            self.shard
                        );
                        state.fenced = Some(LeaseError::Fenced {
                            shard: self.shard,
                            reason,
                        });
                        self.shared.set_fence(true);
                    }
                    if now >= next && !state.lost {
                        break;
                    }
                    let wake = if state.fenced.is_some() {
                        next
                    } else {
                        next.min(fence_at)
                    };
                    let wait = if state.lost {
                        Duration::from_secs(3600)
                    } else {
                        wake.saturating_duration_since(now)
                    };
                    state = crate::sync::wait_timeout(&self.shared.changed, state, wait);
                }
            }
            let sent = Instant::now();
            // A renewal must not outlast the fence, or the fence would come late.
            let timeout = if sent < fence_at {
                (fence_at - sent).min(self.config.op_timeout())
            } else {
                self.config.op_timeout()
            };
            let result = self.renew(&mut conn, timeout);
            let mut state = self.shared.lock();
            match result {
                Ok(Renewal::Held) => {
                    self.last_ok = sent;
                    next = sent + self.config.renew_every();
                    state.last_error = None;
                    if state.fenced.take().is_some() {
                        log::warn!(
                            "shard {}: the Redis lease is held again; issuing resumes",
                            self.shard
                        );
                        self.shared.set_fence(false);
                    }
                }
                Ok(Renewal::Lost(e)) => {
                    drop(state);
                    self.shared.fence_for_good(self.shard, e);
                    continue;
                }
                Err(e) => {
                    state.last_error = Some(e.to_string());
                    next = sent + self.config.retry_every();
                }
            }
        }
    }

    fn renew(
        &self,
        conn: &mut Option<Connection>,
        timeout: Duration,
    ) -> redis::RedisResult<Renewal> {
        let known = self.shared.known_hw.load(Relaxed);
        let answer: i64 = with_conn(&self.client, conn, timeout, |c| {
            RENEW
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(millis(self.config.ttl))
                .arg(known)
                .arg(&self.layout)
                .invoke(c)
        })?;
        Ok(match answer {
            1 | 2 => Renewal::Held,
            0 => Renewal::Lost(LeaseError::Lost { shard: self.shard }),
            trouble => Renewal::Lost(record_trouble(&self.config, self.shard, trouble)),
        })
    }
}
