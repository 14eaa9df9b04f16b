//! The generator's hot path, copied from `src/generator/inner/` with
//! loom's atomics and lock, so that loom runs it under every interleaving
//! of its threads (to a preemption bound): `Inner::take` (the
//! compare-and-swap on the cursor below the limit), `Inner::slow` (the
//! reservation wait, the block drawn from the shard's counter, the cursor
//! jumped into it), `Inner::tick` (the cursor moved up to the clock),
//! `Inner::jump_to`, `Inner::publish_limit` (the limit and its clamp to
//! the block) and the shard thread's publishing of a new limit
//! (`shard_thread`). The clock is an atomic the test moves, the
//! durable layer a reservation that lands at once, and the claim file a
//! counter behind a lock (`shared::draw`'s arithmetic) that another
//! process draws from too.
//!
//! The copy keeps the code's order of operations and memory orderings;
//! what it leaves out (the lead cap, the island, the end margin, the
//! flags other than `CLOSED`, the rate that sizes blocks) only ever
//! lowers the limit or stops issuing. A call that needs a reservation
//! writes it itself, under the lock, where the code's waits for the
//! shard thread with the lock let go; the trigger is set as for a
//! generator that borrows.
//!
//! What loom cannot show: it runs the threads one step at a time, so a
//! compare-and-swap always reads the cursor's latest value. The weak
//! reordering the limit's `Release`/`Acquire` pair rules out (a call that
//! read a new block's limit, yet swapped a cursor value from before the
//! jump into the block) never happens under it, with the pair or without:
//! `tests/constants.rs` pins the orderings instead. `tests/constants.rs` checks that
//! the lines it copies are still the code's.

use loom::sync::atomic::AtomicU64;
use loom::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use loom::sync::{Arc, Mutex};

/// `CLOSED` in `generator/inner/mod.rs`: set in the cursor, every
/// compare-and-swap fails.
pub const CLOSED: u64 = 1 << 63;
/// `FLAGS`, of which the model sets only `CLOSED`.
pub const FLAGS: u64 = CLOSED | (1 << 62) | (1 << 61);

/// Counter values in a second: the model's layout has one sequence bit.
pub const SEQUENCE_BITS: u32 = 1;
/// The reservation window, in seconds.
pub const WINDOW: u64 = 1;
/// The last second the model may issue in.
pub const USABLE_LAST: u64 = 6;
/// The most values a block holds.
pub const BLOCK: u64 = 2;

/// `Layout::counter_at` (epoch 0).
pub fn counter_at(second: u64) -> u64 {
    second << SEQUENCE_BITS
}

/// `Layout::counter_second` (epoch 0).
pub fn counter_second(counter: u64) -> u64 {
    counter >> SEQUENCE_BITS
}

/// A known-wrong change to the hot path, for the negative controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The code as it is.
    Code,
    /// The compare-and-swap replaced by a load and a store.
    LoadStore,
    /// A new block's limit published before the cursor moved into it.
    PublishBeforeJump,
    /// The limit not clamped to the block drawn.
    NoClamp,
}

/// The claim file and the state file, as the processes sharing the shard
/// see them: where the next block starts, and the durable mark.
#[derive(Debug, Default)]
pub struct Shard {
    pub next: u64,
    pub reserved: u64,
}

impl Shard {
    /// `shared::draw`: a block `start..end` at or after `from`, below the
    /// mark; empty when the mark leaves no room for `min` values.
    pub fn draw(&mut self, from: u64, size: u64, min: u64, reserved: u64) -> (u64, u64, u64) {
        let reserved = self.reserved.max(reserved);
        let limit = counter_at(reserved + 1);
        let start = self.next.max(from);
        let end = (start + size.max(min)).min(limit);
        if end.saturating_sub(start) < min.max(1) {
            return (start, start, reserved);
        }
        self.next = end;
        (start, end, reserved)
    }
}

/// `Cold`: what the slow path and the shard thread share under the
/// lock.
#[derive(Debug)]
pub struct Cold {
    pub reserved: u64,
    pub wanted: u64,
    pub trigger: u64,
    pub block: (u64, u64),
    /// Every block drawn (the model's record, for the invariant).
    pub blocks: Vec<(u64, u64)>,
}

/// `Inner`, the parts the hot path touches.
pub struct Inner {
    pub cursor: AtomicU64,
    pub limit: AtomicU64,
    pub last_now: AtomicU64,
    pub clock: Arc<AtomicU64>,
    pub cold: Mutex<Cold>,
    pub shard: Arc<Mutex<Shard>>,
    pub variant: Variant,
}

/// Why `take` gave nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    Closed,
    EndOfRange,
}

impl Inner {
    /// A generator that shares its shard, opened at `start` with `reserved`
    /// durable and no block yet (`Inner::new`).
    pub fn new(
        variant: Variant,
        clock: Arc<AtomicU64>,
        shard: Arc<Mutex<Shard>>,
        start: u64,
        reserved: u64,
    ) -> Inner {
        let inner = Inner {
            cursor: AtomicU64::new(start),
            limit: AtomicU64::new(0),
            last_now: AtomicU64::new(clock.load(Relaxed)),
            clock,
            cold: Mutex::new(Cold {
                reserved,
                wanted: reserved,
                trigger: counter_second(start),
                block: (0, 0),
                blocks: Vec::new(),
            }),
            shard,
            variant,
        };
        inner.publish_limit(&inner.cold.lock().unwrap(), 0);
        inner
    }

    /// `Inner::take`: `n` consecutive counter values; the first.
    pub fn take(&self, n: u64) -> Result<u64, Stop> {
        if self.clock.load(Relaxed) != self.last_now.load(Relaxed) {
            self.tick();
        }
        let mut cur = self.cursor.load(Relaxed);
        loop {
            let last = cur + (n - 1);
            if last >= self.limit.load(Acquire) {
                self.slow(last & !FLAGS, n)?;
                cur = self.cursor.load(Relaxed);
                continue;
            }
            if self.variant == Variant::LoadStore {
                // Known wrong: another thread may take the same value
                // between the load and the store.
                let now = self.cursor.load(Relaxed);
                if now == cur {
                    self.cursor.store(cur + n, Relaxed);
                    return Ok(cur);
                }
                cur = now;
                continue;
            }
            match self
                .cursor
                .compare_exchange_weak(cur, cur + n, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(cur),
                Err(_) => {
                    loom::thread::yield_now();
                    cur = self.cursor.load(Relaxed);
                }
            }
        }
    }

    /// `Inner::tick`: a new clock reading moves the cursor up to it.
    fn tick(&self) {
        let mut cold = self.cold.lock().unwrap();
        let now = self.clock.load(Relaxed);
        if self.last_now.load(Relaxed) == now {
            return;
        }
        self.last_now.store(now, Relaxed);
        let cursor = self.jump_to(counter_at(now));
        let second = counter_second(cursor).max(now);
        if second > cold.trigger && cursor & FLAGS == 0 {
            self.request(&mut cold, second);
        }
        self.publish_limit(&cold, 0);
    }

    /// `Inner::jump_to`: the cursor up to `to`, never down.
    fn jump_to(&self, to: u64) -> u64 {
        self.cursor.fetch_max(to, Relaxed)
    }

    /// `Inner::request`: ask the shard thread for `second` and a
    /// window more.
    fn request(&self, cold: &mut Cold, second: u64) {
        let target = (second + WINDOW).min(USABLE_LAST);
        if target > cold.wanted {
            cold.wanted = target;
        }
    }

    /// `Inner::slow`: raise the limit, reserve, draw a block, or stop.
    fn slow(&self, last: u64, n: u64) -> Result<(), Stop> {
        let mut second = counter_second(last);
        let mut cold = self.cold.lock().unwrap();
        loop {
            if self.cursor.load(Relaxed) & CLOSED != 0 {
                return Err(Stop::Closed);
            }
            if second > USABLE_LAST {
                return Err(Stop::EndOfRange);
            }
            if second > cold.reserved {
                // The call waits for the shard thread's write; here
                // the write lands at once (`extend` below, under the lock).
                self.request(&mut cold, second);
                self.extend_locked(&mut cold);
                continue;
            }
            if last >= cold.block.1 || self.cursor.load(Relaxed) & !FLAGS < cold.block.0 {
                let from = self.cursor.load(Relaxed) & !FLAGS;
                let (start, end, reserved) =
                    self.shard
                        .lock()
                        .unwrap()
                        .draw(from, BLOCK, n, cold.reserved);
                cold.reserved = cold.reserved.max(reserved.min(USABLE_LAST));
                if start == end {
                    second = counter_second(start + (n - 1));
                    if second <= cold.reserved {
                        continue;
                    }
                    self.request(&mut cold, second);
                    self.extend_locked(&mut cold);
                    continue;
                }
                cold.block = (start, end);
                cold.blocks.push((start, end));
                if self.variant == Variant::PublishBeforeJump {
                    // Known wrong: a call may read the new limit and take
                    // the value the cursor still points at, outside the
                    // block.
                    self.publish_limit(&cold, 0);
                    self.jump_to(start);
                } else {
                    self.jump_to(start);
                    self.publish_limit(&cold, 0);
                }
                return Ok(());
            }
            if second > cold.trigger {
                self.request(&mut cold, second);
            }
            self.publish_limit(&cold, second);
            return Ok(());
        }
    }

    /// `Inner::publish_limit`.
    fn publish_limit(&self, cold: &Cold, floor: u64) {
        let soft = if cold.wanted > cold.reserved {
            cold.reserved
        } else {
            cold.trigger
        };
        let mut limit = soft.max(floor.min(cold.reserved));
        limit = limit.min(USABLE_LAST);
        let limit = if self.variant == Variant::NoClamp {
            counter_at(limit + 1)
        } else {
            counter_at(limit + 1).min(cold.block.1)
        };
        self.limit.store(limit, Release);
    }

    /// One pass of the shard thread (`Inner::shard_thread`): the
    /// wanted reservation written, the trigger moved, the limit
    /// published.
    pub fn extend(&self) {
        let mut cold = self.cold.lock().unwrap();
        self.extend_locked(&mut cold);
    }

    fn extend_locked(&self, cold: &mut Cold) {
        if cold.wanted <= cold.reserved {
            return;
        }
        let target = cold.wanted;
        // The durable write (the state file, then the claim file's mark).
        {
            let mut shard = self.shard.lock().unwrap();
            shard.reserved = shard.reserved.max(target);
        }
        cold.reserved = cold.reserved.max(target);
        let at = counter_second(self.cursor.load(Relaxed) & !FLAGS);
        cold.trigger = at + cold.reserved.saturating_sub(at) / 2;
        self.publish_limit(cold, 0);
    }

    /// `Inner::begin_close`.
    pub fn close(&self) {
        self.cursor.fetch_or(CLOSED, Relaxed);
        let _cold = self.cold.lock().unwrap();
        self.limit.store(0, Relaxed);
    }
}
