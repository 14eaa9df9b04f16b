//! Telling a forked child from its parent: a `pthread_atfork` hook that
//! counts forks in the child, so that a generator opened before the fork
//! finds out with one load of a static, not a system call per ID.
//!
//! The only `unsafe` code of the crate lives here.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Once;

/// How many times this process is a `fork()` away from the process that
/// installed the hook: 0 in the original process, 1 in its children, and
/// so on. Only ever raised, and only in a child.
static FORKS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

/// Runs in the child right after `fork()`, in its only thread. It only
/// raises an atomic counter and clears the cached clock (whose thread
/// stayed in the parent), atomic operations that are async-signal-safe:
/// nothing it does can meet a lock another thread of the parent held at
/// the fork.
extern "C" fn in_child() {
    FORKS.fetch_add(1, Relaxed);
    crate::clock::forget_ticker();
}

/// The fork count of this process, after making sure the hook is in place:
/// a generator records it when it opens and stops issuing once
/// [`current`] differs.
#[cfg(unix)]
pub(crate) fn install() -> u64 {
    HOOK.call_once(|| {
        // SAFETY: `pthread_atfork` only records the three handlers; the
        // one given is a plain `extern "C" fn` with no captured state that
        // lives as long as the program, and it does nothing but an atomic
        // add. A failure (ENOMEM) leaves the hook out: see below.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            log::warn!(
                "cannot install the fork hook (error {rc}): a child created by fork() \
                 would issue its parent's IDs; do not fork while a generator is open"
            );
        }
    });
    FORKS.load(Relaxed)
}

#[cfg(not(unix))]
pub(crate) fn install() -> u64 {
    0
}

/// The fork count now: different from what [`install`] returned in the
/// process that opened a generator exactly when this is a child of it.
#[inline(always)]
pub(crate) fn current() -> u64 {
    FORKS.load(Relaxed)
}

/// A lock that a child of `fork()` can always take: a thread that held it
/// in the parent at the fork did not follow into the child and would never
/// let go, so a holder from an earlier fork count is taken over, and what
/// the lock guards is put back to `T::default()` (leaked, never read: the
/// holder may have left it half-written). Between the threads of one
/// process it is an ordinary lock, for short holds: a waiter yields its
/// core until the holder lets go.
pub(crate) struct ForkMutex<T> {
    /// 0 when free, else the holder's fork count plus one.
    holder: AtomicU64,
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and at most one
// guard exists per process at a time (the `holder` word); a guard of an
// earlier process is never used again in this one.
unsafe impl<T: Send> Sync for ForkMutex<T> {}
// SAFETY: as for `Sync`; moving the lock moves its value.
unsafe impl<T: Send> Send for ForkMutex<T> {}

/// A [`ForkMutex`] held: let go when dropped.
pub(crate) struct ForkGuard<'a, T> {
    lock: &'a ForkMutex<T>,
}

impl<T: Default> ForkMutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        ForkMutex {
            holder: AtomicU64::new(0),
            value: std::cell::UnsafeCell::new(value),
        }
    }

    /// Takes the lock, taking it over from a holder that stayed behind in
    /// a parent process. A waiter yields its core, then sleeps a
    /// millisecond at a time: a holder may be opening a generator.
    pub(crate) fn lock(&self) -> ForkGuard<'_, T> {
        let mut attempt = 0u32;
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            if attempt < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// Takes the lock if no thread of this process holds it.
    pub(crate) fn try_lock(&self) -> Option<ForkGuard<'_, T>> {
        use std::sync::atomic::Ordering::Acquire;
        // With the hook in place before the lock is first held, a child
        // forked while it is held counts one fork more than its holder.
        let me = install() + 1;
        loop {
            let held = self.holder.load(Relaxed);
            if held != 0 && held >= me {
                return None;
            }
            if self
                .holder
                .compare_exchange(held, me, Acquire, Relaxed)
                .is_ok()
            {
                if held != 0 {
                    // SAFETY: this thread now holds the lock; the value's
                    // old bytes are overwritten without being read or
                    // dropped.
                    unsafe { std::ptr::write(self.value.get(), T::default()) };
                }
                return Some(ForkGuard { lock: self });
            }
        }
    }
}

impl<T> std::ops::Deref for ForkGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard is the only way to the value while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for ForkGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ForkGuard<'_, T> {
    fn drop(&mut self) {
        self.lock
            .holder
            .store(0, std::sync::atomic::Ordering::Release);
    }
}
