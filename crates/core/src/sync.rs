//! Locks that outlive a panic, the rule of every idutil crate: every mutex
//! guards state that a panicking holder cannot leave half-done, so a
//! poisoned lock is used as is.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `mutex`, ignoring poisoning (see the module docs).
#[inline]
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `changed` once, ignoring poisoning.
pub fn wait<'a, T>(changed: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    changed.wait(guard).unwrap_or_else(|p| p.into_inner())
}

/// Waits on `changed` while `condition` holds, ignoring poisoning.
pub fn wait_while<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    condition: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    changed
        .wait_while(guard, condition)
        .unwrap_or_else(|p| p.into_inner())
}

/// Waits on `changed` for at most `timeout`, ignoring poisoning.
pub fn wait_timeout<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    match changed.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(p) => p.into_inner().0,
    }
}
