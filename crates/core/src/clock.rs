//! Where time comes from, as every idutil crate reads it: the [`Clock`]
//! trait, and [`ManualClock`], a clock a test drives. The wall clock that
//! generators read by default, [`idutil::SystemClock`](https://docs.rs/idutil/latest/idutil/struct.SystemClock.html), is the `idutil`
//! crate's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of whole seconds since the Unix epoch.
///
/// The generator asks it once per ID, so it should be cheap. It may go
/// backwards; the generator copes ([`idutil::Generator`](https://docs.rs/idutil/latest/idutil/struct.Generator.html), *Clock
/// rollbacks*).
pub trait Clock: Send + Sync + 'static {
    /// Whole seconds since 1970-01-01T00:00:00Z. A clock set before 1970
    /// reads 0.
    fn now(&self) -> u64;
}

/// One read of the wall clock, uncached.
pub fn wall_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A clock that only moves when told to: for tests and simulations,
/// including clocks that go backwards.
///
/// Clones share the same time, so a test can keep one and hand another to a
/// generator.
///
/// ```
/// use idutil::{Clock, ManualClock};
/// let clock = ManualClock::new(1_700_000_000);
/// let handle = clock.clone();
/// handle.rewind(3600); // the wall clock goes back an hour
/// assert_eq!(clock.now(), 1_700_000_000 - 3600);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `unix_seconds`.
    pub fn new(unix_seconds: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(unix_seconds)))
    }

    /// A clock reading the current wall-clock second.
    pub fn starting_now() -> ManualClock {
        ManualClock::new(wall_now())
    }

    /// Sets the time.
    pub fn set(&self, unix_seconds: u64) {
        self.0.store(unix_seconds, Relaxed);
    }

    /// Moves the time forward.
    pub fn advance(&self, seconds: u64) {
        self.0.fetch_add(seconds, Relaxed);
    }

    /// Moves the time back (not below 0).
    pub fn rewind(&self, seconds: u64) {
        let _ = self
            .0
            .fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_sub(seconds)));
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

impl<C: Clock> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// A duration in seconds, a started second counting as a whole one.
pub fn whole_seconds(d: std::time::Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_goes_both_ways() {
        let c = ManualClock::new(100);
        c.advance(5);
        assert_eq!(c.now(), 105);
        c.rewind(50);
        assert_eq!(c.now(), 55);
        c.rewind(1000);
        assert_eq!(c.now(), 0);
    }
}
