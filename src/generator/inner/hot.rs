//! The hot path: how a call takes IDs from the cursor (`take`), follows
//! the clock (`tick`) and falls back to the slow path at the limit
//! (`slow`).

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::thread;
use std::time::Instant;

use super::{Cold, Inner, CLOCK_OUT, CLOSED, FLAGS, PAUSED};
use crate::clock::Clock;
use crate::durable::Ask;
use crate::error::{Error, Result};
use crate::generator::LEAD_POLL;

/// How many spin-loop hints a call that lost the race for the cursor waits
/// before trying again: about 0.8 µs where a hint costs 24 ns (this
/// machine's `pause`). Long enough for the winning thread to issue a run of
/// IDs while its core keeps the cache line; on two threads in a sustained
/// burst that is several times the throughput of retrying at once (see
/// BENCHMARKS.md), for well under a microsecond more on the losing call.
const BACKOFF_SPINS: u32 = 32;

/// Waits [`BACKOFF_SPINS`] spin-loop hints; out of line, so that the hot
/// path stays small enough to inline.
#[cold]
#[inline(never)]
fn backoff() {
    for _ in 0..BACKOFF_SPINS {
        std::hint::spin_loop();
    }
}

impl<C: Clock> Inner<C> {
    /// Hands out `n >= 1` consecutive counter values; returns the first.
    #[inline]
    pub(in crate::generator) fn take(&self, n: u64, wait: bool) -> Result<u64> {
        // A child of `fork()` shares the cursor's value and the state file
        // with its parent: it must not issue. One load of a static a fork
        // hook raises in the child, no system call (see `fork`).
        if crate::fork::current() != self.hot.forks {
            return Err(self.forked_error());
        }
        if self.hot.time.now() != self.hot.last_now.load(Relaxed) {
            self.tick();
        }
        let mut cur = self.cursor.0.load(Relaxed);
        loop {
            // Flags, in the high bits, put `last` past any limit.
            let last = cur + (n - 1);
            if last >= self.hot.limit.load(Acquire) {
                // Without the flags: another thread may clear them before
                // the slow path looks, and a flag read as a second is past
                // the end of the range.
                self.slow(last & !FLAGS, n, wait)?;
                cur = self.cursor.0.load(Relaxed);
                continue;
            }
            match self
                .cursor
                .0
                .compare_exchange_weak(cur, cur + n, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(cur),
                Err(_) => {
                    // Another thread took the value: let it run on while
                    // this core waits, rather than pull the cursor's cache
                    // line back at once (two cores trading the line on
                    // every attempt is what contention costs).
                    backoff();
                    cur = self.cursor.0.load(Relaxed);
                }
            }
        }
    }

    /// A new clock reading: note rollbacks, move the cursor up to the clock,
    /// ask for more reservation when it is due.
    #[cold]
    fn tick(&self) {
        if self.forked() {
            // The next step of the slow path says so; nothing to lock here.
            return;
        }
        let mut cold = self.lock();
        // Read the clock under the lock: a reading taken before another
        // thread acted on a newer one would otherwise look like a rollback.
        let now_unix = self.hot.time.now();
        if self.hot.last_now.load(Relaxed) == now_unix {
            return;
        }
        self.hot.last_now.store(now_unix, Relaxed);
        let Some(now) = self.usable(now_unix) else {
            // Neither issued on nor recorded: a clock this wrong says
            // nothing about which IDs are free.
            self.cursor.0.fetch_or(CLOCK_OUT, Relaxed);
            if !cold.warned_out_of_range {
                log::warn!(
                    "{} on shard {}; issuing stops until the clock is within the layout's range",
                    self.clock_out_of_range(now_unix),
                    self.shard
                );
                cold.warned_out_of_range = true;
            }
            return;
        };
        let now = match self.follow_step(&mut cold, now_unix) {
            Some(expected) => self.usable(expected).unwrap_or(now),
            None => now,
        };
        if self.cursor.0.fetch_and(!CLOCK_OUT, Relaxed) & CLOCK_OUT != 0 {
            cold.warned_out_of_range = false;
        }
        if now < cold.seen_run {
            if !cold.in_rollback {
                log::warn!(
                    "the wall clock went back {} s on shard {}; IDs continue after the last \
                     second used, ahead of the clock, until it catches up",
                    cold.seen_run - now,
                    self.shard
                );
                cold.in_rollback = true;
            }
        } else {
            cold.in_rollback = false;
            cold.seen_run = now;
        }
        cold.seen_max = cold.seen_max.max(now);
        if cold.island.is_some_and(|(first, _)| now >= first) {
            self.pass_island(&mut cold);
        }
        let cursor = self.jump_to(&mut cold, self.hot.layout.counter_at(now));
        let second = self.hot.layout.counter_second(cursor).max(now);
        if second > cold.trigger && cursor & FLAGS == 0 {
            self.request(&mut cold, second);
        }
        self.publish_limit(&cold, 0);
    }

    /// The hot path found the counter value `last` (the last of `n` it
    /// wants) at or above the limit: raise the limit, draw a block, wait,
    /// or say why not. `Ok` means "try again".
    #[cold]
    fn slow(&self, last: u64, n: u64, wait: bool) -> Result<()> {
        if self.forked() {
            // A child made without the fork hook, where the hot path
            // cannot tell: the locks below may have been held by a thread
            // of its parent, and the shard thread stayed there.
            return Err(self.forked_error());
        }
        let layout = self.hot.layout;
        let mut second = layout.counter_second(last);
        let mut cold = self.lock();
        loop {
            let flags = self.cursor.0.load(Relaxed) & FLAGS;
            // `close` sets the flag before `closing`: either means closed.
            if cold.closing || flags & CLOSED != 0 {
                return Err(self.closed_error(&cold));
            }
            if flags & PAUSED != 0 {
                return Err(self.paused_error());
            }
            if flags & CLOCK_OUT != 0 {
                return Err(self.clock_out_of_range(self.hot.last_now.load(Relaxed)));
            }
            if second > self.hot.layout.last_unix_second() {
                return Err(Error::EndOfRange {
                    last_unix_second: self.hot.layout.last_unix_second(),
                });
            }
            if second > self.hot.usable_last {
                return Err(self.end_margin_error());
            }
            if cold.island.is_some_and(|(first, _)| second >= first) {
                // Try again from past the seconds issued far ahead.
                self.pass_island(&mut cold);
                return Ok(());
            }
            if let Some(max_lead) = self.max_lead {
                let lead = second.saturating_sub(cold.seen_max);
                if lead > max_lead {
                    if !wait {
                        return Err(Error::LeadCapReached { lead, max_lead });
                    }
                    drop(cold);
                    thread::sleep(LEAD_POLL);
                    if self.hot.time.now() != self.hot.last_now.load(Relaxed) {
                        self.tick();
                    }
                    cold = self.lock();
                    continue;
                }
            }
            if second > cold.reserved {
                self.request(&mut cold, second);
                let failures = cold.failures;
                cold = crate::sync::wait_while(&self.changed, cold, |c| {
                    c.reserved < second && c.failures == failures && !c.closing
                });
                if cold.failures != failures && cold.reserved < second {
                    // The next call asks again: a write that failed is not
                    // remembered as a verdict.
                    return Err(match &cold.failure {
                        Some(e) => e.clone(),
                        None => Error::io(
                            "reserve seconds in",
                            &self.path,
                            std::io::Error::other("the reservation write failed"),
                        ),
                    });
                }
                continue;
            }
            if last >= cold.block.1 || self.cursor.0.load(Relaxed) & !FLAGS < cold.block.0 {
                // Another process shares the shard: draw the next block.
                let from = self.cursor.0.load(Relaxed) & !FLAGS;
                let size = self.block_size(&mut cold);
                let ask = Ask {
                    from,
                    size,
                    min: n,
                    clock_id: self.clock_id,
                    reserved: cold.reserved,
                    now: cold.seen_run,
                };
                let block = self.hold.draw(&layout, ask)?;
                cold.reserved = cold.reserved.max(block.reserved.min(self.hot.usable_last));
                if block.start == block.end {
                    // The mark leaves no room: reserve past what the
                    // block needs, then draw again.
                    second = layout.counter_second(block.start.saturating_add(n - 1));
                    if second <= cold.reserved {
                        // Reserved meanwhile by another process.
                        continue;
                    }
                    self.request(&mut cold, second);
                    continue;
                }
                cold.block = (block.start, block.end);
                self.jump_to(&mut cold, block.start);
                self.publish_limit(&cold, 0);
                return Ok(());
            }
            if second > cold.trigger {
                self.request(&mut cold, second);
            }
            // Past the trigger with nothing more to ask for (the end of the
            // range, or a reservation already far ahead): the durable mark
            // is the limit, or this would loop.
            self.publish_limit(&cold, second);
            return Ok(());
        }
    }

    /// A clock reading the generator may act on: within the layout's
    /// range and before its end margin.
    #[inline]
    fn usable(&self, unix_second: u64) -> Option<u64> {
        (self.hot.layout.epoch()..=self.hot.usable_last)
            .contains(&unix_second)
            .then_some(unix_second)
    }

    fn clock_out_of_range(&self, unix_second: u64) -> Error {
        Error::ClockOutOfRange {
            unix_second,
            first: self.hot.layout.epoch(),
            last: self.hot.usable_last,
        }
    }

    #[cold]
    fn end_margin_error(&self) -> Error {
        Error::EndMarginReached {
            shard: self.shard,
            from: self.hot.usable_last + 1,
            margin: self.end_margin,
            last_unix_second: self.hot.layout.last_unix_second(),
        }
    }

    /// A clock reading far ahead of where the clock should be (the last
    /// reading acted on plus the time elapsed since, on the monotonic
    /// clock) is not followed at once: `Some(where the clock should be)`
    /// to act on instead, until the step has held for the confirmation
    /// time. `None`: follow the reading.
    fn follow_step(&self, cold: &mut Cold, reading: u64) -> Option<u64> {
        let (max_step, confirm) = self.max_step?;
        let (base, at) = cold.trusted;
        let expected = base.saturating_add(at.elapsed().as_secs());
        if reading <= expected.saturating_add(max_step) {
            cold.trusted = (reading, Instant::now());
            if cold.step.take().is_some() {
                log::warn!(
                    "the wall clock of shard {} is back within {max_step} s of where it should \
                     be; issuing follows it again",
                    self.shard
                );
            }
            return None;
        }
        let ahead = reading - expected;
        match cold.step {
            // The same step, give or take the clock's own ticks.
            Some((seen, since)) if seen.abs_diff(ahead) <= 2 => {
                if since.elapsed() >= confirm {
                    log::warn!(
                        "the wall clock of shard {} has held {ahead} s ahead for {} s: \
                         following it",
                        self.shard,
                        confirm.as_secs()
                    );
                    cold.step = None;
                    cold.trusted = (reading, Instant::now());
                    return None;
                }
            }
            _ => {
                log::warn!(
                    "the wall clock of shard {} jumped {ahead} s ahead of where it should be \
                     (more than the {max_step} s a generator follows at once); IDs go on at \
                     the time before the jump until the new time has held for {} s",
                    self.shard,
                    confirm.as_secs()
                );
                cold.step = Some((ahead, Instant::now()));
            }
        }
        Some(expected)
    }

    /// The generator reached the seconds issued far ahead (the state
    /// file's `skip` line): move the cursor past them. The next
    /// reservation is written without the line and past them, before any
    /// ID there is issued.
    #[cold]
    fn pass_island(&self, cold: &mut Cold) {
        let Some((first, last)) = cold.island.take() else {
            return;
        };
        log::warn!(
            "shard {} reached the seconds issued far ahead before a recovery ({} to {}); \
             IDs continue after them",
            self.shard,
            first,
            last
        );
        let past = self.hot.layout.counter_at(last.saturating_add(1));
        self.jump_to(cold, past);
        cold.file.skip = None;
        self.publish_limit(cold, 0);
    }

    #[cold]
    #[inline(never)]
    fn forked_error(&self) -> Error {
        Error::Forked { shard: self.shard }
    }

    /// Why a paused generator does not issue: the lease's fence. Only the
    /// lease pauses a generator, so there is always one to ask; were there
    /// none, the generator could never issue again, which is what
    /// [`Error::Closed`] says.
    #[cold]
    fn paused_error(&self) -> Error {
        self.hold.why_paused().unwrap_or(Error::Closed)
    }
}
