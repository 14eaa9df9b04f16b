//! The wall clock the generators read: [`SystemClock`], cached per second
//! by a thread of its own. The [`Clock`] trait and [`ManualClock`] are
//! `idutil-core`'s, re-exported here.

pub use idutil_core::clock::{wall_now, whole_seconds, Clock, ManualClock};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock, read through the C library (as `std` does, so tools like
/// `faketime` move it), cached per second.
///
/// A `SystemTime::now()` call costs tens of nanoseconds; an ID costs a few.
/// So the first use starts one small background thread (`idutil-clock`) that
/// reads the wall clock just after each second boundary (and at least every
/// 250 ms) and publishes the second in an atomic; [`SystemClock::now`] is a
/// single atomic load. A step of the wall clock shows up within 250 ms;
/// until then IDs keep the previous second, which the generator treats like
/// any other clock reading (unique and increasing either way). If the thread
/// cannot be started, every call reads the wall clock directly.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

static TICK: AtomicU64 = AtomicU64::new(0);
static DIRECT: AtomicBool = AtomicBool::new(false);
/// The fork count (see [`fork`](crate::fork)) of the process whose ticker
/// thread runs, if one was started: a child of `fork()` has no such thread
/// and starts its own.
static TICKER: Mutex<Option<u64>> = Mutex::new(None);
const MAX_SLEEP: Duration = Duration::from_millis(250);

/// The time since the host booted, suspended time included: the same in
/// every process of a boot, and never stepped with the wall clock, so a
/// wall-clock reading taken by one process, plus the time elapsed on this
/// clock since, is where another process's wall clock should be. `None`
/// where it cannot be read.
pub(crate) fn since_boot() -> Option<Duration> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let nanos = u32::try_from(t.tv_nsec).ok()?;
        Some(Duration::new(u64::try_from(t.tv_sec).ok()?, nanos))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u64 {
        let t = TICK.load(Relaxed);
        if t != 0 {
            return t;
        }
        start_ticker()
    }
}

/// Called in a child of `fork()`, from the fork hook (so only an atomic
/// store): the ticker thread stayed in the parent, so the next reading
/// starts one in the child instead of returning the parent's frozen second.
pub(crate) fn forget_ticker() {
    TICK.store(0, Relaxed);
}

#[cold]
fn start_ticker() -> u64 {
    let forks = crate::fork::install();
    let mut ticker = crate::sync::lock(&TICKER);
    if *ticker != Some(forks) {
        *ticker = Some(forks);
        DIRECT.store(false, Relaxed);
        TICK.store(wall_now().max(1), Relaxed);
        let spawned = thread::Builder::new()
            .name("idutil-clock".into())
            .spawn(move || loop {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                TICK.store(now.as_secs().max(1), Relaxed);
                let to_next_second =
                    Duration::from_nanos(1_000_000_000 - u64::from(now.subsec_nanos()))
                        + Duration::from_micros(200);
                thread::sleep(to_next_second.min(MAX_SLEEP));
            });
        if spawned.is_err() {
            DIRECT.store(true, Relaxed);
            TICK.store(0, Relaxed);
        }
    }
    drop(ticker);
    if DIRECT.load(Relaxed) {
        wall_now()
    } else {
        // The ticker has stored a reading (or a fork hook just cleared it,
        // in a child of a child: read the wall clock once).
        match TICK.load(Relaxed) {
            0 => wall_now(),
            t => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_follows_the_wall_clock() {
        let a = wall_now();
        let t = SystemClock.now();
        let b = wall_now();
        assert!(a <= t + 1 && t <= b, "{a} <= {t} <= {b}");
        // The ticker keeps up across a second boundary.
        thread::sleep(Duration::from_millis(1300));
        let t2 = SystemClock.now();
        assert!(t2 > t && t2 + 1 >= wall_now(), "{t} -> {t2}");
    }
}
