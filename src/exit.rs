//! Closing the process-wide generator when the process exits: an `atexit`
//! hook, so that a short program that calls `IdUtil::next_id()` and ends
//! (a command, a script, a test) closes its shard cleanly as a `drop`
//! would. The next run then continues right after its last ID, and the
//! per-host lock's file is removed when it was the last to hold it.

// Allowed here, as src/lib.rs says.
#![allow(unsafe_code)]

use std::sync::{Once, OnceLock};

static HOOK: Once = Once::new();
/// What the hook runs: the process-wide generator's close, given by
/// `global` (which this module does not reach back into).
static CLOSE: OnceLock<fn()> = OnceLock::new();

/// Runs when the process exits normally (returning from `main`,
/// `std::process::exit`), never after `_exit` or a signal that kills it.
/// It must not unwind into the C library.
extern "C" fn at_exit() {
    if let Some(&close) = CLOSE.get() {
        let _ = std::panic::catch_unwind(close);
    }
}

/// Installs the hook that runs `close` at exit, once per process (the
/// first `close` given is the one it runs).
pub(crate) fn install(close: fn()) {
    HOOK.call_once(|| {
        let _ = CLOSE.set(close);
        // SAFETY: `atexit` only records the handler; the one given is a
        // plain `extern "C" fn` that lives as long as the program and
        // catches every panic before it could cross into C.
        let rc = unsafe { libc::atexit(at_exit) };
        if rc != 0 {
            log::warn!(
                "cannot install the exit hook (error {rc}): call IdUtil::shutdown() before \
                 the process exits, or the next run starts after the reserved window"
            );
        }
    });
}
