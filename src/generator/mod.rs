//! Where IDs are issued: the [`Generator`] and its public face. Its
//! settings live in `builder`, opening in `open`, the state the hot path
//! and the reservation share in `inner` (the hot path in `inner/hot`, the
//! reservation of seconds ahead in `inner/reserve`), the restart maths in
//! `plan`, batches in `batch`.

mod batch;
mod builder;
mod fork_child;
mod inner;
mod open;
mod plan;

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use batch::IdBatch;
pub use builder::Builder;
use inner::Inner;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::id::Id;
use crate::layout::Layout;
use crate::shard::ShardSource;

/// Largest batch; keeps `cursor + n` far from overflow.
const MAX_BATCH: u64 = 1 << 40;
/// Default reservation window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(5);
/// The largest reservation window: what a crash may cost on
/// top of the headroom. A larger window asked for is this one, so that no
/// setting can make a crash skip to the end of the layout's range.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// The default end margin: a generator issues nothing in the
/// last day of its layout's range (see [`Builder::end_margin`]).
pub const DEFAULT_END_MARGIN: Duration = Duration::from_secs(86_400);
/// The default largest forward step of the wall clock a running generator
/// follows at once (see [`Builder::max_clock_step`]).
pub const DEFAULT_MAX_CLOCK_STEP: Duration = Duration::from_secs(86_400);
/// The default time a larger forward step must hold before a running
/// generator follows it (see [`Builder::clock_step_confirm`]).
pub const DEFAULT_CLOCK_STEP_CONFIRM: Duration = Duration::from_secs(300);
/// How long a generator that shares its shard with other processes waits
/// for one that holds the shard's short lock (see [`Builder::member_wait`]).
pub const DEFAULT_MEMBER_WAIT: Duration = Duration::from_secs(5);
/// The fewest counter values a process sharing a shard draws at once
/// (unless a batch asks for more): a draw costs a few microseconds, so a
/// process that issues a handful of IDs wastes little of the shard, and
/// one that issues more soon draws larger blocks.
const MIN_BLOCK: u64 = 64;
/// How often a call waiting on the lead cap looks at the clock again.
const LEAD_POLL: Duration = Duration::from_millis(5);
/// How much issuing, at the recent rate, a reservation covers beyond the
/// window: the time a reservation write has to land before a burst
/// reaches it. A write takes about half a millisecond on an ordinary disk,
/// and tens on a slow network disk; a quarter second outruns both. It is
/// also what a crash can cost on top of the window ([`Generator`], *What a
/// crash costs*).
pub const HEADROOM: Duration = Duration::from_millis(250);
/// The most headroom a reservation adds to the window, in seconds of
/// counter (an hour), whatever the rate: what a crash can cost at most on top of the
/// window. Only absurd rates reach it (an hour of borrowed seconds in a
/// quarter second); they then write the state a little more often.
pub const MAX_HEADROOM: Duration = Duration::from_secs(3600);
/// The shortest time over which a rate is extrapolated, so that a single
/// large batch is not read as an enormous rate.
const MIN_RATE_SPAN: Duration = Duration::from_millis(25);

/// An ID generator for one shard: thread-safe, lock-free on the hot path,
/// backed by a locked state file.
///
/// Share one per process (`&Generator`, `Arc<Generator>` or a `static`);
/// all threads draw from the same sequence. Open it with
/// [`Generator::builder`]; [`IdUtil`](crate::IdUtil) keeps a process-wide
/// one for you.
///
/// Closing (explicitly with [`close`](Generator::close), or by dropping it)
/// records the exact last ID, so the next generator for the shard continues
/// right after it; without a clean close it continues after the reserved
/// high-water second ([`state`](crate::state) has the file's rules).
///
/// # Processes sharing a shard
///
/// Every process of a host that opens the same shard with the same state
/// directory issues from it at once, and none repeats another's IDs: each
/// draws blocks of the shard's counter under a short lock and issues from
/// them lock-free. A process alone on its shard draws large blocks and
/// issues as fast as ever. Within one generator IDs increase; across
/// processes they interleave. The rules (what is shared, what is locked
/// and for how long, what a crash of one process costs, why another state
/// directory is refused) are the [`state`](crate::state) module's,
/// *Processes sharing a shard*.
///
/// **Sharing keeps time**: each process sizes its blocks by the IDs it
/// issues itself, so a shared shard runs ahead of the wall clock only by
/// the seconds its processes' IDs fill beyond the clock (counting up to a
/// quarter more, and 64 IDs a process, for blocks left unused), plus 2
/// seconds: below 65,536 IDs a second together, every ID is within 2
/// seconds of the clock. [`lead`](Generator::lead) says how far ahead this
/// generator runs. A process that joins under a clock far ahead of the
/// others' issues at their time until its clock's step has held (see
/// [`Builder::max_clock_step`]).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
/// # std::env::set_var("IDUTIL_ID_SPACE", "doc-generator"); // its own, beside other tests
/// use idutil::Generator;
///
/// let generator = Generator::builder().shard(3).state_dir(dir.path()).open()?;
/// let a = generator.next_id()?;
/// let b = generator.next_id()?;
/// assert!(b > a);
/// assert_eq!(b.shard(), 3);
/// let batch: Vec<_> = generator.next_ids(1000)?.collect();
/// assert!(batch[0] > b && batch.windows(2).all(|w| w[0] < w[1]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # How it issues
///
/// A generator keeps one atomic counter, `(second << sequence bits) |
/// sequence`. Each ID is one compare-and-swap on it; there is no lock on
/// the hot path and no allocation. The second used is `max(now, last
/// second used)`: when the clock moves on, the counter jumps up to it;
/// when a second's sequence numbers are used, incrementing carries into
/// the next second. That is *borrowing*: the generator runs ahead of the
/// clock, and the clock's next seconds are already taken. How far ahead it
/// runs is the [`lead`](Generator::lead); [`Builder::max_lead`] caps it.
///
/// When threads call at once, a call whose compare-and-swap loses waits 32
/// spin-loop hints (under a microsecond) before trying again, so that the
/// winning core keeps the counter's cache line and issues a run of IDs:
/// two threads together then issue about as fast as one, where retrying at
/// once made the cores trade the line on every attempt.
///
/// The wall clock is read through the C library, as `std` does (so tools
/// such as `faketime` move it), but not once per ID: [`SystemClock`]
/// caches the current second in an atomic that a small background thread
/// refreshes at each second boundary. A clock step shows up within 250 ms;
/// until then IDs carry the previous second, unique and increasing either
/// way.
///
/// # Clock rollbacks
///
/// While running, a clock that goes back (an NTP step, a VM restore)
/// changes nothing: IDs continue after the last second used, ahead of the
/// clock, until it catches up. It is logged once with `log::warn!`, and it
/// does not count as lead.
///
/// Across a restart the state file remembers the highest second the
/// previous run saw. A generator that opens with the clock behind that
/// bumps the persistent **clock id**, logs a warning, and resumes after
/// everything the previous runs may have issued. With clock bits in the
/// layout (`k > 0`), the clock id modulo 2<sup>k</sup> is part of every
/// ID, and the state file keeps a high-water mark per clock value: after a
/// rollback the generator moves to the next clock value whose mark is
/// behind the clock and runs on real time; if there is none, it resumes
/// after the lowest mark.
///
/// The word *clock* has three meanings here, each with its own name: the
/// **time source** (the [`Clock`] trait, which [`SystemClock`] and
/// [`ManualClock`](crate::ManualClock) implement and [`Builder::clock`]
/// sets; inside the crate it is called `time`); the **clock id** (the
/// persistent counter in the state file); and the **clock value** (the
/// clock id modulo 2<sup>k</sup>, carried in the layout's clock bits,
/// [`Layout::clock_bits`]).
///
/// # What a crash costs
///
/// Each reservation reaches a window ([`Builder::window`]) plus a
/// **headroom** past the second it is asked for: what the generator issues
/// in a quarter second ([`HEADROOM`](crate::HEADROOM)) at its recent rate,
/// nothing for a generator that follows the clock, about 380 borrowed
/// seconds for one thread issuing flat out. The generator's reservation
/// thread (named `idutil-shard-N`, N its shard) writes the next
/// reservation when half the room is used, so the hot path does
/// not wait on the disk unless the disk cannot write a small file in an
/// eighth of a second.
///
/// So after a crash the next run's first ID is at most a window plus a
/// headroom past the last ID issued. The headroom is measured from the IDs
/// the generator really issued (at most twice what it issued in the last
/// three quarters of a second, and never more than
/// [`MAX_HEADROOM`](crate::MAX_HEADROOM)), never from how far ahead it
/// already runs. A restarted generator starts with no rate at all, so
/// crashes cannot compound: N crashes in a row cost at most N such skips.
/// The reservation a lease keeps in its store is the same one.
///
/// Processes sharing a shard (see above) skip less. One killed while
/// others run loses only its unused block. When they are all gone and the
/// next one opens in the same boot, it starts where their blocks ended,
/// as the shard's claim file records it, or at the clock if later, with
/// no skip at all, as long as the claim file can be trusted (written in
/// this boot, no older copy, its mark the state file's own: the rule is
/// the [`state`](crate::state) module's, *Processes sharing a shard*);
/// otherwise, after a restart of the host say, it starts after the
/// reservation as above.
///
/// # A clock outside the layout's range, or far ahead
///
/// A wall clock that reads before the layout's epoch or after its last
/// second (a dead RTC battery, a clock set to 2140) says nothing about
/// which IDs are free. Opening under such a clock fails with
/// [`Error::ClockOutOfRange`] before anything is read, created, locked or
/// written; a running generator returns that error from every call while
/// the clock reads so, records nothing of the reading, and issues normally
/// once the clock is sane again.
///
/// A clock that jumps far ahead for a moment (a bad NTP answer, an RTC
/// read wrongly at boot, a 32-bit `time_t` that wraps in 2106) could push
/// the shard decades ahead, or to the end of the layout's range, where it
/// issues nothing ever again. The end margin ([`Builder::end_margin`]) and
/// the forward-step limit ([`Builder::max_clock_step`]) keep that from
/// happening silently; a shard pushed ahead anyway by a generator *opened*
/// under such a clock comes back with a recovery
/// ([`state`](crate::state), *Recovery*).
///
/// # `fork()`
///
/// A child created by `fork()` gets a copy of every generator its parent
/// had open: the same position and the same locks, through the
/// descriptors it inherited, but not its shard thread. Issuing from
/// that copy would repeat the parent's IDs, so a child never does: a
/// `pthread_atfork` hook, installed when the first generator opens, counts
/// forks in the child, and the first call on a generator opened before the
/// fork opens, in the child, a generator of its own from the same settings.
/// It joins the shard like any other process (see above), draws blocks of
/// its own, and every later call of the child goes to it; a pre-forking
/// server that opens its generator before it forks just works. The hot
/// path pays two loads and a compare per call, no system call.
/// Closing or dropping the copy in the child closes the child's own
/// generator and stops the copy (nothing of the parent's is written, the
/// parent's thread is not waited for), and the cached wall clock starts
/// its own thread in the child. A generator that holds its shard alone (a
/// leased or ephemeral one) opens in the child as it would anywhere: a
/// leased one on another shard. A call that cannot open the child's own
/// generator returns why. IDs already taken before the fork, in an
/// [`IdBatch`] not yet read, are in both processes' memory: read a batch
/// before forking, not after.
///
/// **A fork that runs no fork handlers is not supported**: the `clone` or
/// `fork` system call made directly (`libc::syscall(SYS_clone, SIGCHLD,
/// ...)`), or glibc's `_Fork()`. Such a child may only make
/// async-signal-safe calls until it `exec`s, and nothing tells it to
/// open a generator of its own. Its copy of a generator still never
/// hands out its parent's IDs, and never waits for the reservation
/// thread that stayed in the parent: on Linux 4.14 and later the fork
/// count sits in a page the kernel hands every child emptied
/// (`MADV_WIPEONFORK`), so every call of the copy returns
/// [`Error::Forked`] at once, the first included, and none opens a
/// generator in its place. Elsewhere the copy notices only at its next
/// slow step (a new block, its reservation's limit; one `getpid` there,
/// never per ID), and until then issues what its parent's copy could
/// still issue without one: the rest of its block for a process sharing
/// its shard, up to its next reservation request (about half a window of
/// seconds ahead) for one that holds its shard alone. Those IDs its
/// parent may issue too.
pub struct Generator<C: Clock = SystemClock> {
    inner: Arc<Inner<C>>,
    /// The shard thread (`inner/reserve.rs`).
    shard_thread: Mutex<Option<JoinHandle<Result<()>>>>,
    /// Whether it is ephemeral ([`Builder::ephemeral`]).
    ephemeral: bool,
    /// The settings it was opened with: a child of `fork()` opens its own
    /// generator from them.
    recipe: Builder<C>,
    /// In a child of `fork()`, the generator it opened (see *`fork()`*).
    child: fork_child::ForkChild<C>,
}

impl Generator<SystemClock> {
    /// A builder with every setting at its default.
    pub fn builder() -> Builder<SystemClock> {
        Builder::new()
    }

    /// A builder for an ephemeral generator, for tests: see
    /// [`Builder::ephemeral`].
    pub fn builder_ephemeral() -> Builder<SystemClock> {
        Builder::ephemeral()
    }
}

impl<C: Clock> Generator<C> {
    /// The next ID. Waits if the lead cap is reached, or (rarely, when IDs
    /// are drawn faster than the state file can reserve seconds) for the
    /// reservation to be written.
    ///
    /// # Errors
    ///
    /// [`Error::EndOfRange`] past the layout's last second,
    /// [`Error::Closed`] after [`close`](Generator::close), [`Error::Io`] if
    /// a needed reservation cannot be written, [`Error::MemberStalled`] if
    /// another process sharing the shard holds its short lock too long; in
    /// a child created by `fork()`, the errors of [`Builder::open`] when
    /// the child's own generator cannot be opened.
    #[inline]
    pub fn next_id(&self) -> Result<Id> {
        match self.inner.take(1, true) {
            Ok(v) => Ok(self.inner.id(v)),
            Err(Error::Forked { .. }) => self.in_child()?.next_id(),
            Err(e) => Err(e),
        }
    }

    /// Like [`next_id`](Generator::next_id), but never waits for the clock:
    /// at the lead cap it returns [`Error::LeadCapReached`]. (In this
    /// crate, `try_` means "returns an error instead of panicking", as on
    /// [`IdUtil::try_next_id`](crate::IdUtil::try_next_id); `_nowait`
    /// means "returns an error instead of waiting".)
    ///
    /// # Errors
    ///
    /// As [`next_id`](Generator::next_id), plus [`Error::LeadCapReached`].
    #[inline]
    pub fn next_id_nowait(&self) -> Result<Id> {
        match self.inner.take(1, false) {
            Ok(v) => Ok(self.inner.id(v)),
            Err(Error::Forked { .. }) => self.in_child()?.next_id_nowait(),
            Err(e) => Err(e),
        }
    }

    /// Reserves `n` consecutive IDs at once: one atomic step however large
    /// `n` is (up to 2<sup>40</sup>). The batch may span several seconds
    /// (borrowed ones included); it holds no memory per ID.
    ///
    /// # Errors
    ///
    /// As [`next_id`](Generator::next_id); [`Error::BatchTooLarge`] if `n` is
    /// above 2<sup>40</sup>, or, with a lead cap, if the batch spans more
    /// seconds than the cap lets one batch span (`max_lead + 1` seconds of
    /// sequence numbers): waiting for the clock could never let it through.
    pub fn next_ids(&self, n: u64) -> Result<IdBatch> {
        self.batch(n, true)
    }

    /// Like [`next_ids`](Generator::next_ids), but never waits for the
    /// clock: if the batch would pass the lead cap it returns
    /// [`Error::LeadCapReached`] and takes nothing.
    ///
    /// # Errors
    ///
    /// As [`next_ids`](Generator::next_ids), plus [`Error::LeadCapReached`].
    pub fn next_ids_nowait(&self, n: u64) -> Result<IdBatch> {
        self.batch(n, false)
    }

    fn batch(&self, n: u64, wait: bool) -> Result<IdBatch> {
        if n > MAX_BATCH {
            return Err(Error::BatchTooLarge { n, max: MAX_BATCH });
        }
        // Even from the first sequence number of the clock's second, a
        // batch spans at least `(n - 1) / counters_per_second` seconds of
        // lead.
        if let Some(max_lead) = self.inner.max_lead() {
            let max = max_lead
                .saturating_add(1)
                .saturating_mul(self.inner.layout().counters_per_second());
            if n > max {
                return Err(Error::BatchTooLarge { n, max });
            }
        }
        let first = match n {
            0 => 0,
            _ => match self.inner.take(n, wait) {
                Ok(first) => first,
                Err(Error::Forked { .. }) => return self.in_child()?.batch(n, wait),
                Err(e) => return Err(e),
            },
        };
        Ok(IdBatch::new(
            first,
            n,
            self.inner.layout(),
            self.inner.base(),
        ))
    }

    /// Seconds the generator's current second is ahead of the highest
    /// wall-clock second it has seen: how far it has borrowed. A clock
    /// rollback does not count.
    pub fn lead(&self) -> u64 {
        if self.inner.forked() {
            // The copy's locks may have been held by a parent thread at
            // the fork: the child's own generator answers (0 if it cannot
            // open: it issues nothing).
            return self.in_child().map_or(0, |child| child.lead());
        }
        self.inner.lead()
    }

    /// Whether this process is a child, created by `fork()`, of the
    /// process that opened the generator: then it issues from a generator
    /// of its own (see *`fork()`*).
    pub fn forked(&self) -> bool {
        self.inner.forked()
    }

    /// The shard.
    pub fn shard(&self) -> u32 {
        self.inner.shard()
    }

    /// Where the shard came from.
    pub fn shard_source(&self) -> &ShardSource {
        self.inner.shard_source()
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.inner.layout()
    }

    /// The persistent clock id.
    pub fn clock_id(&self) -> u64 {
        self.inner.clock_id()
    }

    /// The clock value IDs carry (`clock_id` modulo the layout's clock
    /// values; 0 without clock bits).
    pub fn clock_value(&self) -> u32 {
        self.inner.clock_value()
    }

    /// The state file.
    pub fn state_path(&self) -> &Path {
        self.inner.path()
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        self.inner.dir()
    }

    /// Whether this is an ephemeral generator ([`Builder::ephemeral`]),
    /// whose IDs are unique within its process only.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// The highest second (Unix seconds) durably reserved: no ID is issued
    /// past it until the state file says so.
    pub fn reserved_until(&self) -> u64 {
        if self.inner.forked() {
            // As in `lead`: 0 if the child's own generator cannot open.
            return self.in_child().map_or(0, |child| child.reserved_until());
        }
        self.inner.reserved()
    }

    /// Stops issuing, records the exact last ID in the state file and
    /// releases the shard. Later calls return [`Error::Closed`]. Closing
    /// twice is harmless; dropping the generator closes it too. In a child
    /// created by `fork()` it only stops the child's copy: the shard, its
    /// state file and its locks stay the parent's.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the final state cannot be written. The state file
    /// then still holds the reservation, so nothing is re-issued; the next
    /// generator just starts a little further ahead. [`Error::StateReplaced`] if
    /// the generator stopped because its state directory or lock file was
    /// replaced (then nothing is written).
    pub fn close(&self) -> Result<()> {
        if self.inner.forked() {
            // A child of `fork()`: the shard thread and the state
            // file are the parent's, and the locks of this copy may have
            // been held by a parent thread at the fork. Stop this copy
            // without touching either; the parent closes the shard.
            self.inner.stop_forked_copy();
            if let Ok(mut thread) = self.shard_thread.try_lock() {
                // No such thread in the child: joining it would wait for
                // ever, detaching it would free what the parent's copy owns.
                std::mem::forget(thread.take());
            }
            // The child's own generator closes as any other.
            return match self.opened_in_child() {
                Some(child) => child.close(),
                None => Ok(()),
            };
        }
        let Some(handle) = crate::sync::lock(&self.shard_thread).take() else {
            return Ok(());
        };
        self.inner.begin_close();
        handle.join().unwrap_or_else(|_| {
            Err(Error::io(
                "close",
                self.inner.path(),
                io::Error::other("the shard thread panicked"),
            ))
        })
    }
}

impl<C: Clock> Drop for Generator<C> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::warn!("closing the generator of shard {}: {e}", self.inner.shard());
        }
    }
}

impl<C: Clock> std::fmt::Debug for Generator<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("shard", &self.inner.shard())
            .field("layout", &self.inner.layout())
            .field("clock_id", &self.inner.clock_id())
            .field("state_path", &self.inner.path())
            .finish_non_exhaustive()
    }
}

/// Counters for unit tests, worked out apart from the functions they test.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::layout::Layout;

    /// The counter of sequence number `sequence` in `unix_second` (at or
    /// after the layout's epoch).
    pub(crate) fn counter(layout: &Layout, unix_second: u64, sequence: u64) -> u64 {
        layout.counter_from(unix_second - layout.epoch(), sequence)
    }
}
