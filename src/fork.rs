//! Telling a forked child from its parent: a `pthread_atfork` hook that
//! counts forks in the child, and a page the kernel empties in every child
//! (`MADV_WIPEONFORK`), hook or no hook, so that a generator opened before
//! the fork finds out with two loads, not a system call per ID.

// Allowed here, as src/lib.rs says.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Once;

/// How many times this process is a fork away from the process that
/// installed the hook: 0 in the original process, 1 in its children, and
/// so on. Only ever raised, and only in a child.
static FORKS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();
/// The fork count plus one, where the hot path reads it (see [`current`]):
/// in a page the kernel hands every child emptied, where it can
/// ([`WIPED`]), else in [`KEPT`]. The hook writes it again in the child; a
/// child made without the hook reads 0 there.
static MARK: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::addr_of!(KEPT).cast_mut());
/// [`MARK`] where no page can be emptied on fork.
static KEPT: AtomicU64 = AtomicU64::new(1);
/// Whether [`MARK`] is in a page the kernel empties in every child.
static WIPED: AtomicBool = AtomicBool::new(false);
/// The pid the fork count belongs to: where no page is emptied on fork,
/// a process whose pid differs was made without the hook.
static PID: AtomicU32 = AtomicU32::new(0);
/// Whether this process was made by a fork that ran no hook, since the
/// last one that did (see [`raw`]).
static RAW: AtomicBool = AtomicBool::new(false);

/// The word the hot path reads.
#[inline(always)]
fn mark() -> &'static AtomicU64 {
    // SAFETY: `MARK` only ever points at `KEPT` or at a page mapped once
    // and never unmapped: a live `AtomicU64` for the rest of the program.
    unsafe { &*MARK.load(Relaxed) }
}

/// Runs in the child right after `fork()`, in its only thread. It only
/// raises an atomic counter, records its pid and clears the cached clock
/// (whose thread stayed in the parent): atomic operations and `getpid`,
/// all async-signal-safe, so nothing it does can meet a lock another
/// thread of the parent held at the fork.
extern "C" fn in_child() {
    let forks = FORKS.fetch_add(1, Relaxed) + 1;
    // SAFETY: `getpid` has no preconditions.
    PID.store(unsafe { libc::getpid() } as u32, Relaxed);
    RAW.store(false, Relaxed);
    mark().store(forks + 1, Relaxed);
    crate::clock::forget_ticker();
}

/// The fork count of this process, after making sure the hook is in place:
/// a generator records it when it opens and stops issuing once
/// [`current`] differs.
pub(crate) fn install() -> u64 {
    HOOK.call_once(|| {
        // SAFETY: `pthread_atfork` only records the three handlers; the
        // one given is a plain `extern "C" fn` with no captured state that
        // lives as long as the program, and it does nothing but atomic
        // operations and `getpid`. A failure (ENOMEM) leaves the hook out:
        // see below.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            log::warn!(
                "cannot install the fork hook (error {rc}): a child created by fork() \
                 cannot open a generator of its own, its calls fail, and where the kernel \
                 cannot empty a page in children it may first issue its parent's IDs; do \
                 not fork while a generator is open"
            );
        }
        PID.store(std::process::id(), Relaxed);
        if let Some(page) = page_wiped_on_fork() {
            page.store(FORKS.load(Relaxed) + 1, Relaxed);
            MARK.store(std::ptr::from_ref(page).cast_mut(), Relaxed);
            WIPED.store(true, Relaxed);
        }
    });
    checked()
}

/// A word in a page of its own that the kernel hands every child of this
/// process emptied (`MADV_WIPEONFORK`, Linux 4.14 and later), mapped once
/// and never unmapped. `None` where it cannot be had.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn page_wiped_on_fork() -> Option<&'static AtomicU64> {
    const SIZE: usize = 4096;
    // SAFETY: a new private anonymous mapping, touching no existing memory.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `page` is the mapping of `SIZE` bytes just made.
    if unsafe { libc::madvise(page, SIZE, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: unmaps the mapping just made, which nothing refers to.
        unsafe { libc::munmap(page, SIZE) };
        return None;
    }
    // SAFETY: the mapping is page-aligned, zeroed, readable and writable,
    // and lives for the rest of the program: a valid `AtomicU64`.
    Some(unsafe { &*page.cast::<AtomicU64>() })
}

#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn page_wiped_on_fork() -> Option<&'static AtomicU64> {
    None
}

/// The fork count now: different from what [`install`] returned in the
/// process that opened a generator exactly when this is a child of it.
/// Two loads, no system call: in a child made without the hook (see
/// [`raw`]) it reads `u64::MAX` where the page was emptied; elsewhere
/// only [`checked`] notices such a child.
#[inline(always)]
pub(crate) fn current() -> u64 {
    mark().load(Relaxed).wrapping_sub(1)
}

/// [`current`], after noticing whether this process was made by a fork
/// that ran no hook: the `clone` or `fork` system call made directly, or
/// glibc's `_Fork`. Such a child is counted as one fork more, and
/// [`raw`] says so until it forks again with the hook. Where no page is
/// emptied on fork it costs a `getpid` system call: for the slow paths,
/// never per ID.
pub(crate) fn checked() -> u64 {
    if HOOK.is_completed() {
        let raw = if WIPED.load(Relaxed) {
            mark().load(Relaxed) == 0
        } else {
            let pid = PID.load(Relaxed);
            pid != std::process::id()
                && PID
                    .compare_exchange(pid, std::process::id(), Relaxed, Relaxed)
                    .is_ok()
        };
        if raw {
            RAW.store(true, Relaxed);
            let forks = FORKS.fetch_add(1, Relaxed) + 1;
            // Where the page was emptied, once: another thread may have
            // counted this fork already.
            let _ = mark().compare_exchange(
                if WIPED.load(Relaxed) { 0 } else { forks },
                forks + 1,
                Relaxed,
                Relaxed,
            );
            crate::clock::forget_ticker();
        }
    }
    current()
}

/// Whether this process was made by a fork that ran no hook (see
/// [`checked`]), since the last fork that did: its copies of the
/// generators opened before never issue, and open no generator of their
/// own in their place either.
pub(crate) fn raw() -> bool {
    checked();
    RAW.load(Relaxed)
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
