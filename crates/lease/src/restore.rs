//! A mark known anywhere is never lost: what a holder does when it finds
//! its shard's record lowered, gone or taken, whatever the engine.
//!
//! Raising a mark is always safe (it only makes the next holder start
//! later), so before it stops for good the holder raises the record back
//! to the highest mark it raised, re-creating the record if it is gone.
//! The next holder, on any host, then resumes after every ID this one
//! issued, instead of re-issuing the seconds the lost mark covered. A
//! restore that does not go through is logged; the shard's state file on
//! this host still keeps the mark for a holder here.

use crate::interface::Held;
use crate::standing::Standing;
use crate::LeaseError;

/// Stops the holder for good with `e`, after restoring the record's mark
/// (once; a holder already stopped has restored it).
pub fn restore_then_stop(held: &dyn Held, standing: &Standing, e: LeaseError) {
    let mark = standing.known_mark();
    let shard = standing.shard();
    if mark > 0 && !standing.is_lost() {
        match held.restore(mark, standing.known_seen()) {
            Ok(()) => log::warn!(
                "shard {shard}: {e}; the record's high-water second is raised back to {mark}, \
                 the highest this holder raised it to, so the next holder starts after it"
            ),
            Err(trouble) => log::warn!(
                "shard {shard}: {e}; the record's high-water second could not be raised back \
                 to {mark} ({}): raise it by hand (`high_water` at least {mark}) before the \
                 shard is leased again",
                trouble.into_error()
            ),
        }
    }
    standing.stop_for_good(e);
}
