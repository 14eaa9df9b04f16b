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
