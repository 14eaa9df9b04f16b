//! What a holder knows of its lease, in one owner: whether the generator
//! may issue (the deadline's fence, a clock skew, a loss for good), the
//! marks this holder raised, the store's clock, and the hook that pauses
//! and resumes the generator. The holder (`holder.rs`) and the renewal
//! thread (`renewal.rs`) change it only through its methods; a change to
//! whether the generator may issue reaches it through the hook at once.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::LeaseError;

/// Called when the lease's fence goes up (`true`: the lease is not known
/// to be held, issuing pauses) or down (`false`: issuing may go on).
pub type FenceHook = Box<dyn Fn(bool) + Send + Sync>;

/// A held lease's standing; see the module docs.
pub struct Standing {
    shard: u32,
    state: Mutex<State>,
    changed: Condvar,
    hook: Mutex<Option<FenceHook>>,
    /// The highest high-water second this holder raised (Unix seconds).
    known_mark: AtomicU64,
    /// The highest wall-clock second this holder recorded (0: none).
    known_seen: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The holder gave the lease back: the renewal thread ends.
    closing: bool,
    /// Why the deadline passed without a renewal, while it has.
    late: Option<LeaseError>,
    /// The clocks disagree, while they do.
    skew: Option<LeaseError>,
    /// Gone for good, and why.
    lost: Option<LeaseError>,
    /// The last failed renewal's error, for the fence's message.
    last_error: Option<String>,
    /// The store's clock at the last answer that told it, and when (on the
    /// monotonic clock) that answer arrived.
    server: Option<(Duration, Instant)>,
}

impl State {
    /// Why the generator issues nothing, if it does not: a lost lease
    /// first, then a skew, then a late renewal (the fence).
    fn stopped(&self) -> Option<&LeaseError> {
        self.lost
            .as_ref()
            .or(self.skew.as_ref())
            .or(self.late.as_ref())
    }
}

impl Standing {
    /// A lease just granted, with the record's marks and, if the store
    /// told it, its clock.
    pub fn new(shard: u32, known_mark: u64, known_seen: u64, server: Option<Duration>) -> Standing {
        Standing {
            shard,
            state: Mutex::new(State {
                server: server.map(|t| (t, Instant::now())),
                ..State::default()
            }),
            changed: Condvar::new(),
            hook: Mutex::new(None),
            known_mark: AtomicU64::new(known_mark),
            known_seen: AtomicU64::new(known_seen),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Stops or resumes the generator's issuing from `state`.
    fn apply(&self, state: &State) {
        if let Some(hook) = &*crate::sync::lock(&self.hook) {
            hook(state.stopped().is_some());
        }
    }

    /// Installs the hook that stops and resumes the generator's issuing,
    /// and applies the current standing.
    pub fn set_hook(&self, hook: FenceHook) {
        let state = self.lock();
        *crate::sync::lock(&self.hook) = Some(hook);
        if state.stopped().is_some() {
            self.apply(&state);
        }
    }

    /// The shard.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// Why the generator may not issue, if it may not.
    pub fn stopped(&self) -> Option<LeaseError> {
        self.lock().stopped().cloned()
    }

    /// Whether the lease is gone for good.
    pub fn is_lost(&self) -> bool {
        self.lock().lost.is_some()
    }

    /// The highest high-water second this holder raised (Unix seconds).
    pub fn known_mark(&self) -> u64 {
        self.known_mark.load(Relaxed)
    }

    /// The highest wall-clock second this holder recorded (0: none).
    pub fn known_seen(&self) -> u64 {
        self.known_seen.load(Relaxed)
    }

    /// The store took a raise to `mark` and `seen`.
    pub fn raised(&self, mark: u64, seen: u64) {
        self.known_mark.fetch_max(mark, Relaxed);
        self.known_seen.fetch_max(seen, Relaxed);
    }

    /// The store's clock now, estimated on the monotonic clock from its
    /// last answer, so that a step of this host's wall clock does not move
    /// it.
    pub fn server_now(&self) -> Option<Duration> {
        self.lock().server.map(|(t, at)| t + at.elapsed())
    }

    /// Stops the generator for good: `e` is why, and the renewal thread
    /// stops renewing.
    pub fn stop_for_good(&self, e: LeaseError) {
        let mut state = self.lock();
        if state.lost.is_none() {
            log::warn!("shard {}: {e}", self.shard);
            state.lost = Some(e);
        }
        self.apply(&state);
        drop(state);
        self.changed.notify_all();
    }

    /// The holder gives the lease back: the renewal thread ends.
    pub fn close(&self) {
        self.lock().closing = true;
        self.changed.notify_all();
    }

    /// Waits until a renewal is due at `next`, raising the fence if
    /// `fence_at` passes first (no renewal since `last_ok`). A lease lost
    /// for good is not renewed: it waits for the close. `false`: the holder
    /// closed, and the renewal thread ends.
    pub fn wait_until_due(&self, last_ok: Instant, fence_at: Instant, next: Instant) -> bool {
        let mut state = self.lock();
        loop {
            if state.closing {
                return false;
            }
            let now = Instant::now();
            if state.late.is_none() && now >= fence_at {
                let waited = now - last_ok;
                let reason = match &state.last_error {
                    Some(e) => format!("no renewal succeeded for {waited:?}; last error: {e}"),
                    None => format!("no renewal succeeded for {waited:?}"),
                };
                log::warn!(
                    "shard {}: the lease could not be renewed in time ({reason}); issuing stops \
                     until it is",
                    self.shard
                );
                state.late = Some(LeaseError::fenced(self.shard, reason));
                self.apply(&state);
            }
            if now >= next && state.lost.is_none() {
                return true;
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
            state = crate::sync::wait_timeout(&self.changed, state, wait);
        }
    }

    /// A renewal failed, for now: `e` goes into the fence's message.
    pub fn renewal_failed(&self, e: &LeaseError) {
        self.lock().last_error = Some(e.to_string());
    }

    /// A renewal went through: the deadline's fence comes down; the store's
    /// clock (if it told it) is kept, and `skew` (what it and this host's
    /// disagree by beyond the limit) stops or resumes issuing.
    pub fn renewed(&self, server: Option<Duration>, skew: Option<LeaseError>) {
        let mut state = self.lock();
        state.last_error = None;
        if state.late.take().is_some() {
            log::warn!(
                "shard {}: the lease is held again; issuing resumes",
                self.shard
            );
        }
        if let Some(server) = server {
            state.server = Some((server, Instant::now()));
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
        self.apply(&state);
    }
}
