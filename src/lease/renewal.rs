//! The renewal thread: keeps the lease alive, and stops the generator
//! issuing when it cannot (the fence, at the deadline), when the store's
//! clock and the host's disagree (the skew), or for good when the lease or
//! the record is lost.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::restore::restore_then_stop;
use super::{host_time, Engine, LeaseConfig, LeaseError, Renewed, Trouble};
use crate::durable::FenceHook;

pub(super) struct Shared {
    pub(super) state: Mutex<RenewState>,
    pub(super) changed: Condvar,
    pub(super) hook: Mutex<Option<FenceHook>>,
    /// The highest high-water second this holder raised (Unix seconds).
    pub(super) known_hw: AtomicU64,
    /// The highest wall-clock second this holder recorded (0: none).
    pub(super) known_seen: AtomicU64,
}

#[derive(Default)]
pub(super) struct RenewState {
    pub(super) stop: bool,
    /// Why the deadline passed without a renewal, while it has.
    pub(super) late: Option<LeaseError>,
    /// The clocks disagree, while they do.
    pub(super) skew: Option<LeaseError>,
    /// Gone for good, and why.
    pub(super) lost: Option<LeaseError>,
    pub(super) last_error: Option<String>,
    /// The store's clock at the last answer that told it, and when (on the
    /// monotonic clock) that answer arrived.
    pub(super) server: Option<(Duration, Instant)>,
}

impl RenewState {
    /// Why the generator issues nothing, if it does not: a lost lease
    /// first, then a skew, then a late renewal (the fence).
    pub(super) fn stopped(&self) -> Option<&LeaseError> {
        self.lost
            .as_ref()
            .or(self.skew.as_ref())
            .or(self.late.as_ref())
    }

    /// The store's clock now, estimated on the monotonic clock from its
    /// last answer, so that a step of this host's wall clock does not move
    /// it.
    pub(super) fn server_now(&self) -> Option<Duration> {
        self.server.map(|(t, at)| t + at.elapsed())
    }
}

/// How far `host` is ahead of `server` (negative: behind), in seconds.
pub(super) fn ahead(host: Duration, server: Duration) -> f64 {
    host.as_secs_f64() - server.as_secs_f64()
}

/// The skew error, if `host` and `server` differ by more than the limit.
pub(super) fn check_skew(
    config: &LeaseConfig,
    shard: Option<u32>,
    host: Duration,
    server: Duration,
) -> Option<LeaseError> {
    let ahead = ahead(host, server);
    (ahead.abs() > config.max_skew.as_secs_f64()).then_some(LeaseError::ClockSkew {
        shard,
        ahead,
        limit: config.max_skew,
    })
}

impl Shared {
    pub(super) fn new(known_hw: u64, known_seen: u64) -> Shared {
        Shared {
            state: Mutex::new(RenewState::default()),
            changed: Condvar::new(),
            hook: Mutex::new(None),
            known_hw: AtomicU64::new(known_hw),
            known_seen: AtomicU64::new(known_seen),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, RenewState> {
        crate::sync::lock(&self.state)
    }

    /// Stops the generator for good: `e` is why, and the renewal thread
    /// stops renewing.
    pub(super) fn stop_for_good(&self, shard: u32, e: LeaseError) {
        let mut state = self.lock();
        if state.lost.is_none() {
            log::warn!("shard {shard}: {e}");
            state.lost = Some(e);
        }
        self.apply(&state);
        drop(state);
        self.changed.notify_all();
    }

    /// Stops or resumes the generator's issuing from the state.
    pub(super) fn apply(&self, state: &RenewState) {
        if let Some(hook) = &*crate::sync::lock(&self.hook) {
            hook(state.stopped().is_some());
        }
    }
}

/// The renewal thread's own state.
pub(super) struct Renewer {
    pub(super) config: LeaseConfig,
    pub(super) engine: Arc<dyn Engine>,
    pub(super) shard: u32,
    pub(super) shared: Arc<Shared>,
    /// Send time of the last successful renewal (or the acquisition).
    pub(super) last_ok: Instant,
}

impl Renewer {
    pub(super) fn run(mut self) {
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
                    if state.late.is_none() && now >= fence_at {
                        let waited = now - self.last_ok;
                        let reason = match &state.last_error {
                            Some(e) => {
                                format!("no renewal succeeded for {waited:?}; last error: {e}")
                            }
                            None => format!("no renewal succeeded for {waited:?}"),
                        };
                        log::warn!(
                            "shard {}: the lease could not be renewed in time ({reason}); \
                             issuing stops until it is",
                            self.shard
                        );
                        state.late = Some(LeaseError::fenced(self.shard, reason));
                        self.shared.apply(&state);
                    }
                    if now >= next && state.lost.is_none() {
                        break;
                    }
                    let wake = if state.late.is_some() {
                        next
                    } else {
                        next.min(fence_at)
                    };
                    let wait = if state.lost.is_some() {
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
            let known = self.shared.known_hw.load(Relaxed);
            let result = self.engine.renew(known, timeout);
            match result {
                Ok(renewed) => {
                    if let Err(e) = self.held(renewed, known) {
                        restore_then_stop(&*self.engine, &self.shared, self.shard, e);
                        continue;
                    }
                    self.last_ok = sent;
                    next = sent + self.config.renew_every();
                }
                Err(Trouble::Lost(e)) => {
                    restore_then_stop(&*self.engine, &self.shared, self.shard, e);
                    continue;
                }
                Err(Trouble::Again(e)) => {
                    self.shared.lock().last_error = Some(e.to_string());
                    next = sent + self.config.retry_every();
                }
            }
        }
    }

    /// A renewal went through: check the record's mark and the clocks, and
    /// lift the deadline's fence. `Err`: the lease is lost for good.
    fn held(&self, renewed: Renewed, known: u64) -> Result<(), LeaseError> {
        if renewed.mark.unwrap_or(0) < known {
            return Err(LeaseError::mark_lowered(
                self.shard,
                &self.engine.describe(),
            ));
        }
        let mut state = self.shared.lock();
        state.last_error = None;
        if state.late.take().is_some() {
            log::warn!(
                "shard {}: the lease is held again; issuing resumes",
                self.shard
            );
        }
        if let Some(server) = renewed.server_time {
            state.server = Some((server, Instant::now()));
            let skew = check_skew(&self.config, Some(self.shard), host_time(), server);
            match (&state.skew, &skew) {
                (None, Some(e)) => log::warn!("{e}"),
                (Some(_), None) => log::warn!(
                    "shard {}: this host's clock agrees with the lease store's again; issuing \
                     resumes",
                    self.shard
                ),
                _ => {}
            }
            state.skew = skew;
        }
        self.shared.apply(&state);
        Ok(())
    }
}
