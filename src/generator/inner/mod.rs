//! A generator's shared state, owned here: the cursor and its flags, the
//! fields the hot path reads (`Hot`), the rest of `Inner`, and the cold
//! state behind the mutex (`Cold`). Its parts act on it: the hot path in
//! `hot`, the reservation in `reserve`; the rest of the generator goes
//! through the methods below.

mod hot;
mod reserve;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::durable::ShardHold;
use crate::error::Error;
use crate::id::Id;
use crate::layout::Layout;
use crate::shard::ShardSource;
use crate::state::StateFile;

/// Set in the cursor once the generator is closed: every later
/// compare-and-swap fails and the slow path reports [`Error::Closed`].
const CLOSED: u64 = 1 << 63;
/// Set in the cursor while issuing waits for the shard's lease (its fence
/// is up: the lease is not known to be held): every compare-and-swap fails
/// and the slow path reports why.
const PAUSED: u64 = 1 << 62;
/// Set in the cursor while the clock reads outside the layout's range:
/// every compare-and-swap fails and the slow path reports
/// [`Error::ClockOutOfRange`] until the clock is sane again.
const CLOCK_OUT: u64 = 1 << 61;
/// Flags that are not part of the counter.
const FLAGS: u64 = CLOSED | PAUSED | CLOCK_OUT;

/// Keeps what it holds on cache lines of its own (two: Intel's adjacent
/// line prefetcher fetches lines in pairs), so that writes to one part of
/// a generator do not evict another from the other cores' caches.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What the hot path reads besides the cursor: written only by the slow
/// path and the shard thread, when the limit or the clock changes,
/// never on every ID.
struct Hot<C> {
    /// The first counter value the hot path may not issue without asking
    /// the slow path: the start of the second after the last one it may
    /// issue, which is never above the durably reserved second. Kept as a
    /// counter, so the hot path compares without shifting; 0 stops it.
    limit: AtomicU64,
    /// The clock reading last acted on (Unix seconds).
    last_now: AtomicU64,
    /// The time source (a [`Clock`]).
    time: Arc<C>,
    layout: Layout,
    base: u64,
    /// The last second (Unix seconds, as every second outside a counter)
    /// the generator may issue in or act on a clock reading of: the
    /// layout's last second less the end margin.
    usable_last: u64,
    /// The process's fork count when the generator opened (see
    /// [`fork`](crate::fork)): a different count means this is a child of
    /// the process that opened it.
    forks: u64,
}

/// A generator's shared state: the cursor, what the hot path reads, what
/// the slow path and the shard thread need besides, and the cold
/// state behind its mutex.
pub(super) struct Inner<C> {
    /// The next counter value to hand out (the layout makes and reads
    /// counters), plus the [`CLOSED`], [`PAUSED`] and [`CLOCK_OUT`] flags.
    /// Incrementing past the last sequence number carries into the next
    /// second: that is borrowing.
    cursor: Padded<AtomicU64>,
    hot: Padded<Hot<C>>,
    shard: u32,
    shard_source: ShardSource,
    clock_id: u64,
    clock_value: u32,
    window: u64,
    max_lead: Option<u64>,
    /// The end margin, in seconds.
    end_margin: u64,
    /// The largest forward step of the clock followed at once, and how
    /// long a larger one must hold before it is followed.
    max_step: Option<(u64, Duration)>,
    /// How many IDs the process expects to issue
    /// ([`Builder::expected_ids`](crate::Builder::expected_ids)).
    expected: Option<u64>,
    path: PathBuf,
    dir: PathBuf,
    /// Why issuing is paused, and giving the shard back (see
    /// [`durable`](crate::durable)).
    hold: ShardHold,
    /// Apart from the hot fields: locking writes the mutex, and everything
    /// in `Cold` is written under it.
    cold: Padded<Mutex<Cold>>,
    /// Signals the shard thread (new request, closing) and waiters (reservation
    /// done or failed).
    changed: Condvar,
}

/// Everything off the hot path, behind one mutex. Seconds are Unix
/// seconds, as everywhere outside a counter: the layout turns them into
/// counters and back, and nothing else adds or takes away its epoch.
struct Cold {
    /// Highest wall-clock second seen by any run on this shard: the base of
    /// the lead, so a clock rollback never counts as lead.
    seen_max: u64,
    /// Highest wall-clock second this run has seen.
    seen_run: u64,
    in_rollback: bool,
    /// Durable: no ID past this second until the state file says so.
    reserved: u64,
    /// Requested reservation; above `reserved` while a write is under way.
    wanted: u64,
    /// Passing this second asks for the next extension.
    trigger: u64,
    /// The rate sample: the IDs this generator had issued
    /// ([`issued`](Inner::issued)) at `rate_since`.
    rate_from: u64,
    rate_since: Instant,
    /// The first counter value this generator could issue: where its
    /// cursor stood when it opened.
    opened_at: u64,
    /// How far the cursor moved without issuing: up to the clock, to the
    /// start of a block drawn past it (over the other processes' blocks),
    /// past seconds issued far ahead. The cursor's distance from
    /// `opened_at`, less this, is what this generator issued itself.
    jumped: u64,
    /// Counter values issued in the last whole sample, scaled to
    /// [`HEADROOM`](crate::generator::HEADROOM).
    recent: u64,
    /// Whether a clock reading outside the layout's range was logged.
    warned_out_of_range: bool,
    /// The last clock reading acted on (Unix seconds) and when it was
    /// taken: with the time elapsed since, where the clock should be now.
    trusted: (u64, Instant),
    /// A forward step of the clock larger than the limit, not followed
    /// yet: how far it is ahead of where the clock should be, and since
    /// when it has held.
    step: Option<(u64, Instant)>,
    /// Seconds IDs may have been issued in far ahead (first, last; from
    /// the state file's `skip` line): nothing is reserved or issued in
    /// them, and the generator passes over them when it gets there.
    island: Option<(u64, u64)>,
    /// The last reservation write that failed, its error handed as it is
    /// (a clone sharing its source) to every call that waited on it (see
    /// `failures`).
    failure: Option<Error>,
    /// How many reservation writes have failed: a waiting call returns
    /// [`failure`](Cold::failure) once this moves, so every waiter of a
    /// failed write gets an answer, not just the first to wake.
    failures: u64,
    /// Why the generator stopped for good when its state directory or
    /// lock file was replaced ([`Error::StateReplaced`]): it issues and
    /// writes nothing more.
    replaced: Option<String>,
    closing: bool,
    /// The state as last written, the template for the next write.
    file: StateFile,
    /// The counter values this generator may issue, `start..end`: with
    /// other processes sharing the shard, the block it drew last (empty
    /// until the first draw); alone on it, everything (`0..u64::MAX`).
    block: (u64, u64),
}

/// What opening worked out, from which a generator starts: see
/// [`Inner::new`]. Seconds are Unix seconds.
pub(in crate::generator) struct Start<C> {
    pub(in crate::generator) time: Arc<C>,
    pub(in crate::generator) layout: Layout,
    pub(in crate::generator) shard: u32,
    pub(in crate::generator) shard_source: ShardSource,
    /// The state as opening wrote it, with the first window reserved.
    pub(in crate::generator) file: StateFile,
    /// The first counter value to hand out.
    pub(in crate::generator) counter: u64,
    /// The clock reading opening acted on.
    pub(in crate::generator) now: u64,
    /// How far the clock read ahead of `now`, a forward step not followed
    /// yet (see `follow_step`), and for how long it has held.
    pub(in crate::generator) step: Option<(u64, Duration)>,
    /// The second the first window reserved up to.
    pub(in crate::generator) reserved: u64,
    pub(in crate::generator) usable_last: u64,
    pub(in crate::generator) end_margin: u64,
    pub(in crate::generator) window: u64,
    pub(in crate::generator) max_lead: Option<u64>,
    pub(in crate::generator) max_step: Option<(u64, Duration)>,
    pub(in crate::generator) expected: Option<u64>,
    pub(in crate::generator) hold: ShardHold,
    pub(in crate::generator) path: PathBuf,
    pub(in crate::generator) dir: PathBuf,
    pub(in crate::generator) forks: u64,
}

impl<C: Clock> Inner<C> {
    /// The shared state of a generator that starts at `s`, its hot path's
    /// limit published and the lease's fence pausing it.
    pub(in crate::generator) fn new(s: Start<C>) -> Arc<Inner<C>> {
        let clock_value = s.file.clock_value();
        let start_second = s.layout.counter_second(s.counter);
        let block = if s.hold.is_shared() {
            (0, 0)
        } else {
            (0, u64::MAX)
        };
        let inner = Arc::new(Inner {
            cursor: Padded(AtomicU64::new(s.counter)),
            hot: Padded(Hot {
                limit: AtomicU64::new(0),
                last_now: AtomicU64::new(s.now),
                time: s.time,
                layout: s.layout,
                base: s.layout.base(clock_value, s.shard),
                usable_last: s.usable_last,
                forks: s.forks,
            }),
            shard: s.shard,
            shard_source: s.shard_source,
            clock_id: s.file.clock_id,
            clock_value,
            window: s.window,
            max_lead: s.max_lead,
            end_margin: s.end_margin,
            max_step: s.max_step,
            expected: s.expected,
            path: s.path,
            dir: s.dir,
            hold: s.hold,
            cold: Padded(Mutex::new(Cold {
                seen_max: s.file.seen_max,
                seen_run: s.now,
                in_rollback: false,
                reserved: s.reserved,
                wanted: s.reserved,
                // The first new second (by the clock or by borrowing) asks
                // for the next window: a burst right after opening then has
                // the whole first window to outrun the write.
                trigger: start_second,
                rate_from: 0,
                rate_since: Instant::now(),
                opened_at: s.counter,
                jumped: 0,
                recent: 0,
                warned_out_of_range: false,
                trusted: (s.now, Instant::now()),
                step: s.step.map(|(ahead, held)| {
                    let now = Instant::now();
                    (ahead, now.checked_sub(held).unwrap_or(now))
                }),
                // Seconds issued far ahead: the reservation stops short of
                // them until the generator passes over them.
                island: s.file.skip,
                failure: None,
                failures: 0,
                replaced: None,
                closing: false,
                file: s.file,
                block,
            })),
            changed: Condvar::new(),
        });
        inner.publish_limit(&inner.lock(), 0);
        let weak = Arc::downgrade(&inner);
        inner.hold.on_fence(Box::new(move |up| {
            if let Some(inner) = weak.upgrade() {
                if up {
                    inner.cursor.0.fetch_or(PAUSED, Relaxed);
                } else {
                    inner.cursor.0.fetch_and(!PAUSED, Relaxed);
                }
            }
        }));
        inner
    }

    /// Moves the cursor up to `to` (never down), counting the distance as
    /// jumped, not issued. Under the cold lock, as every such move is.
    fn jump_to(&self, cold: &mut Cold, to: u64) -> u64 {
        let before = self.cursor.0.fetch_max(to, Relaxed);
        // With a flag set the cursor reads past any counter: nothing moved.
        cold.jumped = cold.jumped.saturating_add(to.saturating_sub(before));
        before
    }

    /// How many counter values this generator issued itself since it
    /// opened: not the distance its cursor moved, which also counts the
    /// clock's seconds and the other processes' blocks it jumped over.
    fn issued(&self, cold: &Cold) -> u64 {
        let cursor = self.cursor.0.load(Relaxed) & !FLAGS;
        cursor
            .saturating_sub(cold.opened_at)
            .saturating_sub(cold.jumped)
    }

    fn lock(&self) -> MutexGuard<'_, Cold> {
        // Nothing under this lock can be left half-done by a panic.
        crate::sync::lock(&self.cold)
    }

    /// The ID of a counter value [`take`](Inner::take) handed out.
    #[inline]
    pub(in crate::generator) fn id(&self, counter: u64) -> Id {
        Id::from_valid(self.hot.layout.pack(counter, self.hot.base))
    }

    pub(in crate::generator) fn layout(&self) -> Layout {
        self.hot.layout
    }

    /// The bits of every ID that do not change: clock value and shard.
    pub(in crate::generator) fn base(&self) -> u64 {
        self.hot.base
    }

    pub(in crate::generator) fn shard(&self) -> u32 {
        self.shard
    }

    pub(in crate::generator) fn shard_source(&self) -> &ShardSource {
        &self.shard_source
    }

    pub(in crate::generator) fn clock_id(&self) -> u64 {
        self.clock_id
    }

    pub(in crate::generator) fn clock_value(&self) -> u32 {
        self.clock_value
    }

    pub(in crate::generator) fn max_lead(&self) -> Option<u64> {
        self.max_lead
    }

    /// The state file.
    pub(in crate::generator) fn path(&self) -> &Path {
        &self.path
    }

    /// The state directory.
    pub(in crate::generator) fn dir(&self) -> &Path {
        &self.dir
    }

    /// See [`Generator::lead`](crate::Generator::lead).
    pub(in crate::generator) fn lead(&self) -> u64 {
        let cursor = self.cursor.0.load(Relaxed) & !FLAGS;
        let current = self.hot.layout.counter_second(cursor.saturating_sub(1));
        current.saturating_sub(self.lock().seen_max)
    }

    /// The highest second durably reserved.
    pub(in crate::generator) fn reserved(&self) -> u64 {
        self.lock().reserved
    }

    /// Stops issuing and tells the shard thread to close the shard.
    pub(in crate::generator) fn begin_close(&self) {
        self.cursor.0.fetch_or(CLOSED, Relaxed);
        let mut cold = self.lock();
        cold.closing = true;
        self.hot.limit.store(0, Relaxed);
        self.changed.notify_all();
    }

    /// Stops issuing in this copy of the generator, a child's of `fork()`,
    /// touching nothing else: the locks may have been held by a thread of
    /// the parent at the fork.
    pub(in crate::generator) fn stop_forked_copy(&self) {
        self.cursor.0.fetch_or(CLOSED, Relaxed);
    }

    /// Nothing was issued and no shard thread runs: give the lease
    /// back (and stop its renewal thread) before the generator goes away.
    pub(in crate::generator) fn give_up_unissued(&self) {
        self.hold.give_up(0);
    }

    /// Why a closed generator does not issue: [`Error::StateReplaced`] if
    /// it stopped because its state was replaced, else [`Error::Closed`].
    fn closed_error(&self, cold: &Cold) -> Error {
        match &cold.replaced {
            Some(reason) => Error::StateReplaced {
                shard: self.shard,
                reason: reason.clone(),
            },
            None => Error::Closed,
        }
    }

    /// Whether this process is a child, created by `fork()`, of the one
    /// that opened the generator: a child made without the fork hook too
    /// (see [`fork::checked`](crate::fork::checked)), so not for the hot
    /// path.
    #[inline]
    pub(in crate::generator) fn forked(&self) -> bool {
        crate::fork::checked() != self.hot.forks
    }
}
