//! The reservation: how far ahead to reserve (`request`, `headroom`), the
//! limit the hot path may run to (`publish_limit`), and the thread that
//! writes each reservation and the clean close (`shard_thread`).

use std::sync::atomic::Ordering::{Relaxed, Release};
use std::thread;
use std::time::{Duration, Instant};

use super::{Cold, Inner, CLOSED, FLAGS};
use crate::clock::Clock;
use crate::durable::Durable;
use crate::error::{Error, Result};
use crate::generator::plan::cover_seen;
use crate::generator::{HEADROOM, MAX_HEADROOM, MIN_BLOCK, MIN_RATE_SPAN};

/// The longest a generator whose state was replaced keeps its shard after
/// it stopped, so that closing it never waits for long: what a generator
/// that follows the clock reserves is a few seconds ahead.
const MAX_REPLACED_WAIT: u64 = 60;

impl<C: Clock> Inner<C> {
    /// Asks the shard thread to reserve past `second`: a window ahead, plus
    /// [`HEADROOM`] of issuing at the recent rate. The reservation never
    /// depends on the lead, so a restart after a crash, which starts after
    /// the reservation, skips at most that much: N crashes in a row cost N
    /// such skips, never a doubling.
    pub(super) fn request(&self, cold: &mut Cold, second: u64) {
        let ahead = self.window.saturating_add(self.headroom(cold));
        let mut target = second.saturating_add(ahead).min(self.hot.usable_last);
        if let Some((first, _)) = cold.island {
            target = target.min(first.saturating_sub(1));
        }
        if target > cold.wanted {
            cold.wanted = target;
            self.changed.notify_all();
        }
    }

    /// Seconds of counter the generator issues in [`HEADROOM`] at its
    /// recent rate: the last whole sample's (a sample spans one to two
    /// headrooms), or, early in a burst, the current sample's extrapolated,
    /// but at most twice what the current sample has issued so far. Either
    /// way it is at most twice what was really issued in the last two
    /// headrooms.
    fn headroom(&self, cold: &mut Cold) -> u64 {
        self.recent_issuing(cold)
            .div_ceil(u64::from(self.hot.layout.max_sequence()) + 1)
            .min(MAX_HEADROOM.as_secs())
    }

    /// How many counter values a process sharing its shard draws at once:
    /// what it issues in [`HEADROOM`] at its recent rate, but at most a
    /// quarter of what it issued since it opened, and at least
    /// [`MIN_BLOCK`]. Both measure this process's own IDs, never the
    /// shard's counter, which also moves with the other processes' blocks.
    /// So a block starts small and grows with the process's use: what a
    /// process leaves unused when it ends (its last block, when another
    /// process drew after it) is at most a quarter of what it issued, or
    /// a quarter second of its issuing, or [`MIN_BLOCK`].
    ///
    /// A process that said how many IDs it expects
    /// ([`Builder::expected_ids`](crate::Builder::expected_ids)) draws no
    /// more than it has left of them (the call's own batch aside).
    pub(super) fn block_size(&self, cold: &mut Cold) -> u64 {
        let recent = self.recent_issuing(cold);
        let issued = self.issued(cold);
        let size = recent.min(issued / 4).max(MIN_BLOCK);
        match self.expected {
            Some(expected) if issued < expected => size.min(expected - issued),
            _ => size,
        }
    }

    /// Counter values this generator issued itself in [`HEADROOM`] at the
    /// recent rate (see [`headroom`](Inner::headroom)).
    fn recent_issuing(&self, cold: &mut Cold) -> u64 {
        let now = Instant::now();
        let total = self.issued(cold);
        let issued = total.saturating_sub(cold.rate_from);
        let elapsed = now.saturating_duration_since(cold.rate_since);
        let scale = |span: Duration| -> u64 {
            let scaled = u128::from(issued) * HEADROOM.as_nanos() / span.as_nanos().max(1);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        if elapsed >= HEADROOM {
            // A sample much older than the headroom says nothing about the
            // last quarter second: start a new one from nothing.
            cold.recent = if elapsed < 2 * HEADROOM {
                scale(elapsed)
            } else {
                0
            };
            cold.rate_from = total;
            cold.rate_since = now;
            cold.recent
        } else {
            let early = scale(elapsed.max(MIN_RATE_SPAN)).min(issued.saturating_mul(2));
            cold.recent.max(early)
        }
    }

    /// Recomputes the hot path's limit from the cold state, letting
    /// through at least `floor` where the reservation covers it.
    pub(super) fn publish_limit(&self, cold: &Cold, floor: u64) {
        if cold.closing {
            return;
        }
        // While a write is under way, run up to the durable mark rather
        // than through the slow path.
        let soft = if cold.wanted > cold.reserved {
            cold.reserved
        } else {
            cold.trigger
        };
        let mut limit = soft.max(floor.min(cold.reserved));
        limit = limit.min(self.hot.usable_last);
        if let Some((first, _)) = cold.island {
            limit = limit.min(first.saturating_sub(1));
        }
        if let Some(max_lead) = self.max_lead {
            limit = limit.min(cold.seen_max.saturating_add(max_lead));
        }
        // `limit` is within the layout's range (at most `usable_last`, at
        // least the epoch), so its next second's counter is exact. Never
        // past the block this generator drew. Released after the cursor
        // moved into a new block: a call that reads this limit then finds
        // the cursor there (`take` acquires it), never behind it in the
        // values of another process.
        let limit = self.hot.layout.counter_at(limit + 1).min(cold.block.1);
        self.hot.limit.store(limit, Release);
    }

    /// The shard thread: the only writer of the state file while the
    /// generator runs, so writes never overtake each other.
    pub(in crate::generator) fn shard_thread(&self, durable: Durable) -> Result<()> {
        let layout = self.hot.layout;
        let mut cold = self.lock();
        while !cold.closing {
            if cold.wanted <= cold.reserved {
                cold = crate::sync::wait(&self.changed, cold);
                continue;
            }
            // A request waits here while the write before it lands; a
            // burst moves on meanwhile. Asking again from where it is now
            // (the same rule, at a later second and rate) keeps a burst
            // that outruns the disk from waiting on one write after
            // another while its reservation grows.
            let at = layout.counter_second(self.cursor.0.load(Relaxed) & !FLAGS);
            if at > cold.seen_max {
                self.request(&mut cold, at);
            }
            let target = cold.wanted;
            let mut file = cold.file.clone();
            let mark = file.high_water.entry(self.clock_value).or_insert(0);
            *mark = (*mark).max(target);
            file.seen_max = cold.seen_max;
            file.seen_last_run = cold.seen_run;
            cover_seen(&mut file);
            drop(cold);
            // The reservation counts only once the lease's store has it too.
            let saved = durable.reserve(&file, target);
            cold = self.lock();
            match saved {
                Ok(written) => {
                    // With other processes on the shard, what they wrote
                    // too: their marks and clock readings.
                    let mark = written.high_water.get(&self.clock_value).copied();
                    cold.reserved = cold
                        .reserved
                        .max(target)
                        .max(mark.unwrap_or(0).min(self.hot.usable_last));
                    cold.seen_max = cold.seen_max.max(written.seen_max);
                    cold.file = written;
                    let at = layout.counter_second(self.cursor.0.load(Relaxed) & !FLAGS);
                    cold.trigger = if at > cold.seen_max {
                        // Borrowing: ask again once half the room is used,
                        // so the other half, a window plus about an eighth
                        // of a second of issuing, is left to outrun the
                        // next write.
                        at + cold.reserved.saturating_sub(at) / 2
                    } else {
                        // No earlier than the first second of the range.
                        cold.reserved
                            .saturating_sub(self.window / 2)
                            .max(layout.epoch())
                    };
                }
                Err(e @ Error::StateReplaced { .. }) => {
                    drop(cold);
                    let e = self.stop_replaced(e);
                    self.outwait_reservation();
                    return Err(e);
                }
                Err(e) => {
                    log::warn!("shard {}: {e}", self.shard);
                    // Handed to every call that waits for this write; the
                    // next call that needs more asks again.
                    cold.failure = Some(e);
                    cold.failures += 1;
                    cold.wanted = cold.reserved;
                }
            }
            self.publish_limit(&cold, 0);
            self.changed.notify_all();
        }
        // Clean close: every value below the cursor may have been issued,
        // none at or above it was.
        let next = self.cursor.0.load(Relaxed) & !FLAGS;
        let mut file = cold.file.clone();
        file.seen_max = cold.seen_max;
        file.seen_last_run = cold.seen_run;
        if let Some(last) = next.checked_sub(1) {
            let second = layout.counter_second(last);
            file.last = Some((second, layout.counter_sequence(last)));
            let mark = file.high_water.entry(self.clock_value).or_insert(0);
            *mark = (*mark).max(second);
        }
        cover_seen(&mut file);
        let block = cold.block;
        drop(cold);
        let saved = durable.close(&layout, &file, next, block);
        if let Err(e @ Error::StateReplaced { .. }) = saved {
            let e = self.stop_replaced(e);
            self.outwait_reservation();
            return Err(e);
        }
        saved
    }

    /// The state directory or lock file gave way under the generator:
    /// stop issuing for good, write nothing more, and answer every later
    /// call with `e`.
    #[cold]
    fn stop_replaced(&self, e: Error) -> Error {
        log::warn!("{e}");
        self.cursor.0.fetch_or(CLOSED, Relaxed);
        let mut cold = self.lock();
        if let Error::StateReplaced { reason, .. } = &e {
            cold.replaced = Some(reason.clone());
        }
        cold.closing = true;
        self.hot.limit.store(0, Relaxed);
        self.changed.notify_all();
        // Every ID issued is below a reservation the lease's store already has.
        self.hold.give_up(cold.seen_max);
        e
    }

    /// A generator whose state was replaced keeps its shard (the host lock,
    /// held by the store this thread owns) until the wall clock passes
    /// every second it reserved. A generator that then starts over on this host, in a state
    /// directory recreated where the old one was, starts after every ID
    /// this one may have issued. The wait is at most [`MAX_REPLACED_WAIT`]
    /// seconds of real time, whatever the clock does.
    #[cold]
    fn outwait_reservation(&self) {
        let reserved = self.lock().reserved;
        let ahead = reserved
            .saturating_add(1)
            .saturating_sub(self.hot.time.now());
        if ahead == 0 {
            return;
        }
        // Closing waits for this, so it is capped: past the cap, what the
        // generator borrowed further ahead is at risk (the `state` module's
        // docs, *Older copies and deleted files*), and the warning says so.
        let wait = ahead.min(MAX_REPLACED_WAIT);
        log::warn!(
            "shard {}: keeping the shard for {wait} s, until the wall clock passes {} \
             this generator reserved, so that no generator on this host issues its IDs again",
            self.shard,
            if wait < ahead {
                "the first minute of what"
            } else {
                "every second"
            }
        );
        let deadline = Instant::now() + Duration::from_secs(wait);
        while self.hot.time.now() <= reserved {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}
