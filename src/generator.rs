//! Where IDs are issued: the lock-free hot path, borrowing, the lead cap,
//! and the reservation of seconds ahead in the state file.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::host_lock;
use crate::id::Id;
use crate::layout::Layout;
use crate::shard::{self, ShardSource};
use crate::state::{self, StateFile, Store};

/// Set in the cursor once the generator is closed: every later
/// compare-and-swap fails and the slow path reports [`Error::Closed`].
const CLOSED: u64 = 1 << 63;
/// Set in the cursor while the Redis lease is not known to be held: every
/// compare-and-swap fails and the slow path reports why.
const FENCED: u64 = 1 << 62;
/// Set in the cursor while the clock reads outside the layout's range:
/// every compare-and-swap fails and the slow path reports
/// [`Error::ClockOutOfRange`] until the clock is sane again.
const CLOCK_OUT: u64 = 1 << 61;
/// Flags that are not part of the counter.
const FLAGS: u64 = CLOSED | FENCED | CLOCK_OUT;
/// Largest batch; keeps `cursor + n` far from overflow.
const MAX_BATCH: u64 = 1 << 40;
/// Default reservation window, in seconds.
pub const DEFAULT_WINDOW: u64 = 5;
/// How often a call waiting on the lead cap looks at the clock again.
const LEAD_POLL: Duration = Duration::from_millis(5);
/// How much issuing, at the recent rate, a reservation covers beyond the
/// window: the time a reservation write has to land before a burst
/// reaches it. A write takes about half a millisecond on an ordinary disk,
/// and tens on a slow network disk; a quarter second outruns both. It is
/// also what a crash can cost on top of the window (see the crate docs,
/// `# Design`).
pub const HEADROOM: Duration = Duration::from_millis(250);
/// The most headroom a reservation adds to the window, in seconds of
/// counter, whatever the rate: what a crash can cost at most on top of the
/// window. Only absurd rates reach it (an hour of borrowed seconds in a
/// quarter second); they then write the state a little more often.
pub const MAX_HEADROOM_SECONDS: u64 = 3600;
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
/// high-water second.
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
pub struct Generator<C: Clock = SystemClock> {
    inner: Arc<Inner<C>>,
    extender: Mutex<Option<JoinHandle<Result<()>>>>,
}

/// Keeps the contended cursor on a cache line of its own.
#[repr(align(64))]
struct Padded(AtomicU64);

struct Inner<C> {
    /// The next counter value to hand out: `(second << sequence_bits) |
    /// sequence`, seconds since the layout epoch, plus the [`CLOSED`] and
    /// [`FENCED`] flags.
    /// Incrementing past the last sequence number carries into the next
    /// second: that is borrowing.
    cursor: Padded,
    /// The highest second the hot path may issue without asking the slow
    /// path. Never above the durably reserved second.
    limit: AtomicU64,
    /// The clock reading last acted on (Unix seconds).
    last_now: AtomicU64,
    clock: C,
    layout: Layout,
    sequence_bits: u32,
    base: u64,
    shard: u32,
    shard_source: ShardSource,
    clock_id: u64,
    clock_value: u32,
    window: u64,
    max_lead: Option<u64>,
    path: PathBuf,
    dir: PathBuf,
    /// The Redis lease the shard came from, if it did.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    lease: Leased,
    cold: Mutex<Cold>,
    /// Signals the extender (new request, closing) and waiters (reservation
    /// done or failed).
    changed: Condvar,
}

#[cfg(feature = "redis")]
type Leased = Option<crate::lease::Lease>;
#[cfg(not(feature = "redis"))]
type Leased = Option<std::convert::Infallible>;

/// Everything off the hot path, behind one mutex. Seconds are relative to
/// the layout epoch.
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
    /// The rate sample: the cursor (without flags) at `rate_since`.
    rate_from: u64,
    rate_since: Instant,
    /// Counter values issued in the last whole sample, scaled to
    /// [`HEADROOM`].
    recent: u64,
    /// Whether a clock reading outside the layout's range was logged.
    warned_out_of_range: bool,
    failure: Option<Error>,
    /// Why the generator fenced itself ([`Error::Fenced`]): it issues and
    /// writes nothing more.
    fenced: Option<String>,
    closing: bool,
    /// The state as last written, the template for the next write.
    file: StateFile,
}

/// Configures and opens a [`Generator`].
///
/// Every setting has a default: the shard from `IDUTIL_SHARD` or the host
/// name, the state directory from `IDUTIL_STATE_DIR` or the platform's
/// state directory, the ID space from `IDUTIL_ID_SPACE` or `default`,
/// [`Layout::DEFAULT`], the [`SystemClock`], a reservation window of 5
/// seconds and no lead cap.
#[derive(Clone, Debug)]
pub struct Builder<C: Clock = SystemClock> {
    shard: Option<u32>,
    state_dir: Option<PathBuf>,
    id_space: Option<String>,
    layout: Layout,
    clock: C,
    window: u64,
    max_lead: Option<u64>,
    #[cfg(feature = "redis")]
    lease: Option<crate::lease::LeaseConfig>,
}

impl Default for Builder<SystemClock> {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder<SystemClock> {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Builder {
            shard: None,
            state_dir: None,
            id_space: None,
            layout: Layout::DEFAULT,
            clock: SystemClock,
            window: DEFAULT_WINDOW,
            max_lead: None,
            #[cfg(feature = "redis")]
            lease: None,
        }
    }
}

impl<C: Clock> Builder<C> {
    /// Uses this shard instead of `IDUTIL_SHARD` or the host name.
    pub fn shard(mut self, shard: u32) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Keeps the state file in `dir` instead of `IDUTIL_STATE_DIR` or the
    /// platform's state directory.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Names the ID space instead of `IDUTIL_ID_SPACE` (default
    /// `default`): 1 to 64 characters of `A-Z a-z 0-9 . _ -`, checked by
    /// [`open`](Builder::open).
    ///
    /// On a host, one generator at a time may hold a shard of an ID space,
    /// whatever its state directory. Generators whose IDs go into the same
    /// table must share an ID space (the default puts every generator on a
    /// host in one); independent ID spaces, such as two apps with separate
    /// databases, may use the same shard numbers. See the crate docs,
    /// *Security*.
    pub fn id_space(mut self, name: impl Into<String>) -> Self {
        self.id_space = Some(name.into());
        self
    }

    /// Uses this layout.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<C2> {
        Builder {
            shard: self.shard,
            state_dir: self.state_dir,
            id_space: self.id_space,
            layout: self.layout,
            clock,
            window: self.window,
            max_lead: self.max_lead,
            #[cfg(feature = "redis")]
            lease: self.lease,
        }
    }

    /// How far ahead the state file reserves seconds (rounded up to whole
    /// seconds, at least 1; default 5). A larger window means fewer writes;
    /// after a crash the next generator starts up to this far ahead, plus
    /// the headroom of a burst (see the crate docs, *What a crash costs*).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = whole_seconds(window).max(1);
        self
    }

    /// Caps the lead: how far (in whole seconds) the generator's second may
    /// run ahead of the highest wall-clock second seen, by borrowing.
    /// [`Generator::next_id`] waits for the clock at the cap;
    /// [`Generator::try_next_id`] returns [`Error::LeadCapReached`].
    ///
    /// The lead counts from the highest wall-clock second ever seen, so
    /// after the clock steps back (an NTP correction, a VM restore) a
    /// capped generator that has used its lead waits until the clock
    /// catches up again: an hour's step back can stop issuing for an hour.
    /// Without a cap it borrows instead, and IDs keep coming.
    pub fn max_lead(mut self, max_lead: Duration) -> Self {
        self.max_lead = Some(whole_seconds(max_lead));
        self
    }

    /// Leases the shard from Redis instead of taking it from
    /// `IDUTIL_SHARD` or the host name (feature `redis`). An explicit
    /// [`shard`](Builder::shard) narrows the lease to that one shard. Without
    /// this call, `IDUTIL_REDIS_URL` turns the lease on when it is set (set
    /// but empty or blank, opening fails with [`Error::InvalidEnv`]). See
    /// [`lease`](crate::lease) and the crate docs, *The Redis lease*.
    #[cfg(feature = "redis")]
    pub fn redis_lease(mut self, config: crate::lease::LeaseConfig) -> Self {
        self.lease = Some(config);
        self
    }

    /// Takes the shard's lock, reads its state and reserves the first
    /// window durably.
    ///
    /// # Errors
    ///
    /// [`Error::ShardOutOfRange`], [`Error::InvalidEnv`] or
    /// [`Error::UnusableHostname`] for a bad shard,
    /// [`Error::InvalidIdSpace`] for a bad ID space name,
    /// [`Error::Locked`] if another generator holds the shard in the state
    /// directory, [`Error::HostLocked`] if one on this host holds it in the
    /// same ID space, [`Error::RelativeStateDir`] or [`Error::Untrusted`] if
    /// the state directory or a file in it fails the checks in the crate
    /// docs (*Security*),
    /// [`Error::BadState`] if the state file cannot be trusted,
    /// [`Error::Io`] if the state directory cannot be used; with a Redis
    /// lease, `Error::Lease` if no shard is free, Redis cannot be reached or
    /// the shard's record in Redis cannot be trusted, and
    /// [`Error::InvalidEnv`] if `IDUTIL_REDIS_URL` is set but blank.
    pub fn open(self) -> Result<Generator<C>> {
        #[cfg(feature = "redis")]
        {
            let config = match &self.lease {
                Some(config) => Some(config.clone()),
                None => crate::lease::LeaseConfig::from_env()?,
            };
            if let Some(config) = config {
                return self.open_leased(&config);
            }
        }
        // A lease that was asked for is never silently turned off.
        #[cfg(not(feature = "redis"))]
        if let Some(url) = std::env::var_os("IDUTIL_REDIS_URL") {
            return Err(Error::InvalidEnv {
                var: "IDUTIL_REDIS_URL",
                // A URL may hold a password.
                value: if url.is_empty() {
                    String::new()
                } else {
                    "***".into()
                },
                reason: "set, but this build of idutil has no Redis lease (feature `redis`); \
                         unset it, or build with the `redis` feature",
            });
        }
        let (shard, source) = shard::resolve_shard(self.shard, &self.layout)?;
        let dir = state::state_dir(self.state_dir.as_deref())?;
        let id_space = host_lock::resolve_id_space(self.id_space.as_deref())?;
        let store = Store::open_for_generator(&dir, shard, &id_space)?;
        Generator::start(self, store, shard, source, None)
    }

    #[cfg(feature = "redis")]
    fn open_leased(self, config: &crate::lease::LeaseConfig) -> Result<Generator<C>> {
        if self.shard.is_none() && std::env::var_os(shard::SHARD_ENV).is_some() {
            log::warn!(
                "{} is ignored: the shard is leased from Redis",
                shard::SHARD_ENV
            );
        }
        let dir = state::state_dir(self.state_dir.as_deref())?;
        let id_space = host_lock::resolve_id_space(self.id_space.as_deref())?;
        let mut skip = Vec::new();
        loop {
            let lease =
                crate::lease::Lease::acquire(config, &self.layout, self.shard, &skip, &self.clock)?;
            let shard = lease.shard();
            match Store::open_for_generator(&dir, shard, &id_space) {
                Ok(store) => {
                    return Generator::start(self, store, shard, ShardSource::Lease, Some(lease))
                }
                // A generator on this host still holds the shard's state
                // file although its lease expired: lease another shard.
                Err(Error::Locked { .. } | Error::HostLocked { .. }) if self.shard.is_none() => {
                    skip.push(shard)
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn whole_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// Raises the current clock value's mark, where needed, so that the state
/// written says what every state file must: the current mark covers this
/// run's latest clock reading and the exact last ID, and the highest mark
/// covers the highest reading of any run (see the `state` module docs).
/// Raising a mark only ever skips seconds.
fn cover_seen(file: &mut StateFile) {
    let value = file.clock_value();
    let others = file
        .high_water
        .iter()
        .filter(|(c, _)| **c != value)
        .map(|(_, m)| *m)
        .max()
        .unwrap_or(0);
    let mark = file.high_water.entry(value).or_insert(0);
    *mark = (*mark).max(file.seen_last_run);
    if let Some((second, _)) = file.last {
        *mark = (*mark).max(second);
    }
    if others.max(*mark) < file.seen_max {
        *mark = file.seen_max;
    }
}

/// Where a generator starts, worked out from the previous state file and
/// the clock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The state to write (before the reservation is added).
    pub(crate) file: StateFile,
    /// The first counter value to hand out.
    pub(crate) start: u64,
    /// Seconds the wall clock went back across the restart, if it did.
    pub(crate) rollback: Option<u64>,
}

/// Decides where a generator opening at `now` (Unix seconds) starts.
///
/// All arithmetic is saturating or checked: whatever `prev` holds, the start
/// is never before what it records (at worst it is the end of the range).
/// A clock reading before the layout's epoch is recorded as the epoch; one
/// past its last second is not recorded at all (the previous run's readings
/// stay), so the file remains valid. The error is a reason for
/// [`Error::BadState`]: a clock id that cannot be bumped.
pub(crate) fn plan(
    prev: Option<StateFile>,
    layout: &Layout,
    shard: u32,
    now: u64,
) -> std::result::Result<Plan, String> {
    let epoch = layout.epoch();
    // Clamped one past the range, so an absurd clock or mark cannot
    // overflow the counter: it just reaches the end of the range.
    let end = layout.counter_end();
    let at = |unix_second: u64| layout.counter_at(unix_second);
    let now_counter = at(now);
    let in_range = now <= layout.last_unix_second();
    let reading = now.clamp(epoch, layout.last_unix_second());
    let Some(prev) = prev else {
        return Ok(Plan {
            file: StateFile {
                layout: *layout,
                shard,
                clock_id: 0,
                seen_max: reading,
                seen_last_run: reading,
                high_water: Default::default(),
                last: None,
            },
            start: now_counter,
            rollback: None,
        });
    };
    let seen_last_run = if in_range {
        reading
    } else {
        prev.seen_last_run
    };
    let values = u64::from(layout.clock_values());
    let old_value = prev.clock_value();
    let rollback = prev
        .seen_last_run
        .checked_sub(seen_last_run)
        .filter(|d| *d > 0);
    let mut clock_id = prev.clock_id;
    if rollback.is_some() {
        let mark = |c: u32| prev.high_water.get(&c).copied();
        let value_after = |step: u64| ((u64::from(old_value) + step) % values) as u32;
        // The first clock value after the current one whose mark is behind
        // the clock runs on real time; failing that, the lowest mark.
        let behind = (1..=values).find(|&step| mark(value_after(step)).is_none_or(|m| m < now));
        let step = behind.unwrap_or_else(|| {
            (1..=values)
                .min_by_key(|&step| mark(value_after(step)))
                .unwrap_or(1)
        });
        // The bumped id must itself be bumpable through every clock value,
        // as every state file's must: what this run writes is read again.
        clock_id = clock_id
            .checked_add(step)
            .filter(|id| id.checked_add(values).is_some())
            .ok_or("clock_id is too large to be bumped")?;
    }
    let file = StateFile {
        clock_id,
        seen_max: prev.seen_max.max(seen_last_run),
        seen_last_run,
        last: None,
        ..prev
    };
    let value = file.clock_value();
    let after = match (file.high_water.get(&value), prev.last) {
        // A clean close under this clock value: right after the exact last ID.
        (_, Some((sec, seq))) if value == old_value => Some(
            at(sec)
                .saturating_add(u64::from(seq))
                .saturating_add(1)
                .min(end),
        ),
        // Otherwise after everything the reservation allowed.
        (Some(&mark), _) => Some(at(mark.saturating_add(1))),
        (None, _) => None,
    };
    let start = after.map_or(now_counter, |a| a.max(now_counter));
    Ok(Plan {
        file,
        start,
        rollback,
    })
}

impl Generator<SystemClock> {
    /// A builder with every setting at its default.
    pub fn builder() -> Builder<SystemClock> {
        Builder::new()
    }
}

impl<C: Clock> Generator<C> {
    fn start(
        b: Builder<C>,
        store: Store,
        shard: u32,
        source: ShardSource,
        lease: Leased,
    ) -> Result<Self> {
        let layout = b.layout;
        let epoch = layout.epoch();
        let now_unix = b.clock.now();
        if layout.seconds_of(now_unix).is_none() {
            // Refused before anything is read or written: a later run must
            // not mistake such a reading for issued IDs.
            return Err(Error::ClockOutOfRange {
                unix_second: now_unix,
                first: epoch,
                last: layout.last_unix_second(),
            });
        }
        let prev = store.load()?;
        if let Some(prev) = &prev {
            state::check_layout(store.path(), prev, &layout)?;
        }
        #[allow(unused_mut)]
        let Plan {
            mut file,
            mut start,
            rollback,
        } = plan(prev, &layout, shard, now_unix).map_err(|reason| Error::BadState {
            path: store.path().to_path_buf(),
            shard,
            reason,
        })?;
        if let Some(back) = rollback {
            log::warn!(
                "the wall clock is {back} s behind the last run of shard {shard} \
                 (state file {}); clock id bumped to {}, IDs continue after everything \
                 issued before",
                store.path().display(),
                file.clock_id
            );
        }
        #[cfg(feature = "redis")]
        if let Some(lease) = &lease {
            // Redis's record covers every holder of the shard, this host's
            // state file only this host: resume after the later of the two.
            let record = lease.record();
            start = start.max(record.resume_at(&layout));
            if let Some(seen) = record.seen {
                file.seen_max = file.seen_max.max(seen);
            }
        }
        let now = now_unix.saturating_sub(epoch);
        let start_sec = start >> layout.sequence_bits();
        let reserved = start_sec.saturating_add(b.window).min(layout.max_seconds());
        let value = file.clock_value();
        let mark = file.high_water.get(&value).copied().unwrap_or(0);
        file.high_water.insert(value, mark.max(epoch + reserved));
        cover_seen(&mut file);
        store.save(&file)?;
        #[cfg(feature = "redis")]
        if let Some(lease) = &lease {
            lease.raise(epoch + reserved, file.seen_max)?;
        }

        let inner = Arc::new(Inner {
            cursor: Padded(AtomicU64::new(start)),
            limit: AtomicU64::new(0),
            last_now: AtomicU64::new(now_unix),
            layout,
            sequence_bits: layout.sequence_bits(),
            base: layout.base(value, shard),
            shard,
            shard_source: source,
            clock_id: file.clock_id,
            clock_value: value,
            window: b.window,
            max_lead: b.max_lead,
            path: store.path().to_path_buf(),
            dir: store.dir().to_path_buf(),
            lease,
            clock: b.clock,
            cold: Mutex::new(Cold {
                seen_max: file.seen_max.saturating_sub(epoch),
                seen_run: now,
                in_rollback: false,
                reserved,
                wanted: reserved,
                // The first new second (by the clock or by borrowing) asks
                // for the next window: a burst right after opening then has
                // the whole first window to outrun the write.
                trigger: start_sec,
                rate_from: start,
                rate_since: Instant::now(),
                recent: 0,
                warned_out_of_range: false,
                failure: None,
                fenced: None,
                closing: false,
                file,
            }),
            changed: Condvar::new(),
        });
        inner.publish_limit(&inner.lock(), 0);
        #[cfg(feature = "redis")]
        if let Some(lease) = &inner.lease {
            let weak = Arc::downgrade(&inner);
            lease.set_hook(Box::new(move |on| {
                if let Some(inner) = weak.upgrade() {
                    if on {
                        inner.cursor.0.fetch_or(FENCED, Relaxed);
                    } else {
                        inner.cursor.0.fetch_and(!FENCED, Relaxed);
                    }
                }
            }));
        }
        let worker = Arc::clone(&inner);
        let extender = thread::Builder::new()
            .name(format!("idutil-shard-{shard}"))
            .spawn(move || worker.extend_until_closed(store))
            .map_err(|e| {
                // Nothing was issued: give the lease back (and stop its
                // renewal thread) before the generator goes away.
                #[cfg(feature = "redis")]
                if let Some(lease) = &inner.lease {
                    lease.finish(None, 0);
                }
                Error::io("start the reservation thread for", &inner.path, e)
            })?;
        Ok(Generator {
            inner,
            extender: Mutex::new(Some(extender)),
        })
    }

    /// The next ID. Waits if the lead cap is reached, or (rarely, when IDs
    /// are drawn faster than the state file can reserve seconds) for the
    /// reservation to be written.
    ///
    /// # Errors
    ///
    /// [`Error::EndOfRange`] past the layout's last second,
    /// [`Error::Closed`] after [`close`](Generator::close), [`Error::Io`] if
    /// a needed reservation cannot be written.
    #[inline]
    pub fn next_id(&self) -> Result<Id> {
        self.inner.take(1, true).map(|v| self.inner.id(v))
    }

    /// Like [`next_id`](Generator::next_id), but never waits for the clock:
    /// at the lead cap it returns [`Error::LeadCapReached`].
    ///
    /// # Errors
    ///
    /// As [`next_id`](Generator::next_id), plus [`Error::LeadCapReached`].
    #[inline]
    pub fn try_next_id(&self) -> Result<Id> {
        self.inner.take(1, false).map(|v| self.inner.id(v))
    }

    /// Reserves `n` consecutive IDs at once: one atomic step however large
    /// `n` is (up to 2<sup>40</sup>). The batch may span several seconds
    /// (borrowed ones included); it holds no memory per ID.
    ///
    /// # Errors
    ///
    /// As [`next_id`](Generator::next_id); [`Error::InvalidId`] if `n` is
    /// above 2<sup>40</sup>.
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
    pub fn try_next_ids(&self, n: u64) -> Result<IdBatch> {
        self.batch(n, false)
    }

    fn batch(&self, n: u64, wait: bool) -> Result<IdBatch> {
        if n > MAX_BATCH {
            return Err(Error::invalid_id(
                n.to_string(),
                "batch larger than 2^40 IDs",
            ));
        }
        let first = if n == 0 { 0 } else { self.inner.take(n, wait)? };
        Ok(IdBatch::new(first, n, self.inner.layout, self.inner.base))
    }

    /// Seconds the generator's current second is ahead of the highest
    /// wall-clock second it has seen: how far it has borrowed. A clock
    /// rollback does not count.
    pub fn lead(&self) -> u64 {
        let cursor = self.inner.cursor.0.load(Relaxed) & !FLAGS;
        let current = cursor.saturating_sub(1) >> self.inner.sequence_bits;
        current.saturating_sub(self.inner.lock().seen_max)
    }

    /// The shard.
    pub fn shard(&self) -> u32 {
        self.inner.shard
    }

    /// Where the shard came from.
    pub fn shard_source(&self) -> &ShardSource {
        &self.inner.shard_source
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.inner.layout
    }

    /// The persistent clock id.
    pub fn clock_id(&self) -> u64 {
        self.inner.clock_id
    }

    /// The clock value IDs carry (`clock_id` modulo the layout's clock
    /// values; 0 without clock bits).
    pub fn clock_value(&self) -> u32 {
        self.inner.clock_value
    }

    /// The state file.
    pub fn state_path(&self) -> &Path {
        &self.inner.path
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The highest second (Unix seconds) durably reserved: no ID is issued
    /// past it until the state file says so.
    pub fn reserved_until(&self) -> u64 {
        self.inner.lock().reserved + self.inner.layout.epoch()
    }

    /// Stops issuing, records the exact last ID in the state file and
    /// releases the shard. Later calls return [`Error::Closed`]. Closing
    /// twice is harmless; dropping the generator closes it too.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the final state cannot be written. The state file
    /// then still holds the reservation, so nothing is re-issued; the next
    /// generator just starts a little further ahead. [`Error::Fenced`] if
    /// the generator fenced itself (then nothing is written).
    pub fn close(&self) -> Result<()> {
        let Some(handle) = crate::sync::lock(&self.extender).take() else {
            return Ok(());
        };
        self.inner.cursor.0.fetch_or(CLOSED, Relaxed);
        {
            let mut cold = self.inner.lock();
            cold.closing = true;
            self.inner.limit.store(0, Relaxed);
            self.inner.changed.notify_all();
        }
        handle.join().unwrap_or_else(|_| {
            Err(Error::io(
                "close",
                &self.inner.path,
                io::Error::other("the reservation thread panicked"),
            ))
        })
    }
}

impl<C: Clock> Drop for Generator<C> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::warn!("closing the generator of shard {}: {e}", self.inner.shard);
        }
    }
}

impl<C: Clock> std::fmt::Debug for Generator<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("shard", &self.inner.shard)
            .field("layout", &self.inner.layout)
            .field("clock_id", &self.inner.clock_id)
            .field("state_path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Inner<C> {
    fn lock(&self) -> MutexGuard<'_, Cold> {
        // Nothing under this lock can be left half-done by a panic.
        crate::sync::lock(&self.cold)
    }

    #[inline]
    fn id(&self, counter: u64) -> Id {
        Id::from_valid(self.layout.pack(counter, self.base))
    }

    /// Hands out `n >= 1` consecutive counter values; returns the first.
    #[inline]
    fn take(&self, n: u64, wait: bool) -> Result<u64> {
        if self.clock.now() != self.last_now.load(Relaxed) {
            self.tick();
        }
        let mut cur = self.cursor.0.load(Relaxed);
        loop {
            let last_second = (cur + (n - 1)) >> self.sequence_bits;
            if last_second > self.limit.load(Relaxed) {
                self.slow(last_second, wait)?;
                cur = self.cursor.0.load(Relaxed);
                continue;
            }
            match self
                .cursor
                .0
                .compare_exchange_weak(cur, cur + n, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(cur),
                Err(actual) => cur = actual,
            }
        }
    }

    /// A new clock reading: note rollbacks, move the cursor up to the clock,
    /// ask for more reservation when it is due.
    #[cold]
    fn tick(&self) {
        let mut cold = self.lock();
        // Read the clock under the lock: a reading taken before another
        // thread acted on a newer one would otherwise look like a rollback.
        let now_unix = self.clock.now();
        if self.last_now.load(Relaxed) == now_unix {
            return;
        }
        self.last_now.store(now_unix, Relaxed);
        let Some(now) = self.layout.seconds_of(now_unix) else {
            // Neither issued on nor recorded: a clock this wrong says
            // nothing about which IDs are free.
            self.cursor.0.fetch_or(CLOCK_OUT, Relaxed);
            if !cold.warned_out_of_range {
                log::warn!(
                    "{} on shard {}; issuing stops until the clock is within the layout's range",
                    Error::ClockOutOfRange {
                        unix_second: now_unix,
                        first: self.layout.epoch(),
                        last: self.layout.last_unix_second(),
                    },
                    self.shard
                );
                cold.warned_out_of_range = true;
            }
            return;
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
        let cursor = self.cursor.0.fetch_max(now << self.sequence_bits, Relaxed);
        let second = (cursor >> self.sequence_bits).max(now);
        if second > cold.trigger && cursor & FLAGS == 0 {
            self.request(&mut cold, second);
        }
        self.publish_limit(&cold, 0);
    }

    /// The hot path found `second` above the limit: raise the limit, wait,
    /// or say why not. `Ok` means "try again".
    #[cold]
    fn slow(&self, second: u64, wait: bool) -> Result<()> {
        let mut cold = self.lock();
        loop {
            let flags = self.cursor.0.load(Relaxed) & FLAGS;
            // `close` sets the flag before `closing`: either means closed.
            if cold.closing || flags & CLOSED != 0 {
                return Err(self.closed_error(&cold));
            }
            if flags & FENCED != 0 {
                return Err(self.fenced_error());
            }
            if flags & CLOCK_OUT != 0 {
                return Err(Error::ClockOutOfRange {
                    unix_second: self.last_now.load(Relaxed),
                    first: self.layout.epoch(),
                    last: self.layout.last_unix_second(),
                });
            }
            if second > self.layout.max_seconds() {
                return Err(Error::EndOfRange {
                    last_unix_second: self.layout.last_unix_second(),
                });
            }
            if let Some(max_lead) = self.max_lead {
                let lead = second.saturating_sub(cold.seen_max);
                if lead > max_lead {
                    if !wait {
                        return Err(Error::LeadCapReached { lead, max_lead });
                    }
                    drop(cold);
                    thread::sleep(LEAD_POLL);
                    if self.clock.now() != self.last_now.load(Relaxed) {
                        self.tick();
                    }
                    cold = self.lock();
                    continue;
                }
            }
            if second > cold.reserved {
                self.request(&mut cold, second);
                cold = self
                    .changed
                    .wait_while(cold, |c| {
                        c.reserved < second && c.failure.is_none() && !c.closing
                    })
                    .unwrap_or_else(|p| p.into_inner());
                if let Some(e) = cold.failure.take() {
                    return Err(e);
                }
                continue;
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

    /// Asks the extender to reserve past `second`: a window ahead, plus
    /// [`HEADROOM`] of issuing at the recent rate. The reservation never
    /// depends on the lead, so a restart after a crash, which starts after
    /// the reservation, skips at most that much: N crashes in a row cost N
    /// such skips, never a doubling.
    fn request(&self, cold: &mut Cold, second: u64) {
        let ahead = self.window.saturating_add(self.headroom(cold));
        let target = second.saturating_add(ahead).min(self.layout.max_seconds());
        if target > cold.wanted {
            cold.wanted = target;
            cold.failure = None;
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
        let now = Instant::now();
        let cursor = self.cursor.0.load(Relaxed) & !FLAGS;
        let issued = cursor.saturating_sub(cold.rate_from);
        let elapsed = now.saturating_duration_since(cold.rate_since);
        let scale = |span: Duration| -> u64 {
            let scaled = u128::from(issued) * HEADROOM.as_nanos() / span.as_nanos().max(1);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        let units = if elapsed >= HEADROOM {
            // A sample much older than the headroom says nothing about the
            // last quarter second: start a new one from nothing.
            cold.recent = if elapsed < 2 * HEADROOM {
                scale(elapsed)
            } else {
                0
            };
            cold.rate_from = cursor;
            cold.rate_since = now;
            cold.recent
        } else {
            let early = scale(elapsed.max(MIN_RATE_SPAN)).min(issued.saturating_mul(2));
            cold.recent.max(early)
        };
        units
            .div_ceil(u64::from(self.layout.max_sequence()) + 1)
            .min(MAX_HEADROOM_SECONDS)
    }

    /// Recomputes the hot path's limit from the cold state, letting
    /// through at least `floor` where the reservation covers it.
    fn publish_limit(&self, cold: &Cold, floor: u64) {
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
        limit = limit.min(self.layout.max_seconds());
        if let Some(max_lead) = self.max_lead {
            limit = limit.min(cold.seen_max.saturating_add(max_lead));
        }
        self.limit.store(limit, Relaxed);
    }

    /// The reservation thread: the only writer of the state file while the
    /// generator runs, so writes never overtake each other.
    fn extend_until_closed(&self, store: Store) -> Result<()> {
        let epoch = self.layout.epoch();
        let mut cold = self.lock();
        while !cold.closing {
            if cold.wanted <= cold.reserved {
                cold = self.changed.wait(cold).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let target = cold.wanted;
            let mut file = cold.file.clone();
            let mark = file.high_water.entry(self.clock_value).or_insert(0);
            *mark = (*mark).max(epoch + target);
            file.seen_max = epoch + cold.seen_max;
            file.seen_last_run = epoch + cold.seen_run;
            cover_seen(&mut file);
            drop(cold);
            let saved = store.save(&file);
            // The reservation counts only once Redis has it too.
            #[cfg(feature = "redis")]
            let saved = saved.and_then(|()| match &self.lease {
                Some(lease) => lease.raise(epoch + target, file.seen_max),
                None => Ok(()),
            });
            cold = self.lock();
            match saved {
                Ok(()) => {
                    cold.reserved = cold.reserved.max(target);
                    cold.file = file;
                    let at = (self.cursor.0.load(Relaxed) & !FLAGS) >> self.sequence_bits;
                    cold.trigger = if at > cold.seen_max {
                        // Borrowing: ask again once half the room is used,
                        // so the other half, a window plus about an eighth
                        // of a second of issuing, is left to outrun the
                        // next write.
                        at + cold.reserved.saturating_sub(at) / 2
                    } else {
                        cold.reserved.saturating_sub(self.window / 2)
                    };
                }
                Err(e @ Error::Fenced { .. }) => {
                    drop(cold);
                    let e = self.stop_fenced(e);
                    self.outwait_reservation();
                    return Err(e);
                }
                Err(e) => {
                    log::warn!("shard {}: {e}", self.shard);
                    // Handed to the one call that waits for this write.
                    cold.failure = Some(e);
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
        file.seen_max = epoch + cold.seen_max;
        file.seen_last_run = epoch + cold.seen_run;
        if let Some(last) = next.checked_sub(1) {
            let second = last >> self.sequence_bits;
            let sequence = (last & u64::from(self.layout.max_sequence())) as u32;
            file.last = Some((epoch + second, sequence));
            let mark = file.high_water.entry(self.clock_value).or_insert(0);
            *mark = (*mark).max(epoch + second);
        }
        cover_seen(&mut file);
        drop(cold);
        let saved = store.save(&file);
        if let Err(e @ Error::Fenced { .. }) = saved {
            let e = self.stop_fenced(e);
            self.outwait_reservation();
            return Err(e);
        }
        #[cfg(feature = "redis")]
        if let Some(lease) = &self.lease {
            lease.finish(file.last, file.seen_max);
        }
        saved
    }

    /// The state directory or lock file gave way under the generator:
    /// stop issuing for good, write nothing more, and answer every later
    /// call with `e`.
    #[cold]
    fn stop_fenced(&self, e: Error) -> Error {
        log::warn!("{e}");
        self.cursor.0.fetch_or(CLOSED, Relaxed);
        let mut cold = self.lock();
        if let Error::Fenced { reason, .. } = &e {
            cold.fenced = Some(reason.clone());
        }
        cold.closing = true;
        self.limit.store(0, Relaxed);
        self.changed.notify_all();
        // Every ID issued is below a reservation Redis already has.
        #[cfg(feature = "redis")]
        if let Some(lease) = &self.lease {
            lease.finish(None, self.layout.epoch() + cold.seen_max);
        }
        e
    }

    /// A fenced generator keeps its shard (the host lock, held by the store
    /// this thread owns) until the wall clock passes every second it
    /// reserved. A generator that then starts over on this host, in a state
    /// directory recreated where the old one was, starts after every ID
    /// this one may have issued. The wait is bounded by the reservation's
    /// length in real time, whatever the clock does.
    #[cold]
    fn outwait_reservation(&self) {
        let reserved = self.layout.epoch() + self.lock().reserved;
        let wait = reserved.saturating_add(1).saturating_sub(self.clock.now());
        if wait == 0 {
            return;
        }
        log::warn!(
            "shard {}: keeping the shard for up to {wait} s, until the wall clock passes \
             every second this generator reserved, so that no generator on this host \
             issues its IDs again",
            self.shard
        );
        let deadline = Instant::now() + Duration::from_secs(wait);
        while self.clock.now() <= reserved {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    /// Why a closed generator does not issue: [`Error::Fenced`] if it
    /// fenced itself, else [`Error::Closed`].
    fn closed_error(&self, cold: &Cold) -> Error {
        match &cold.fenced {
            Some(reason) => Error::Fenced {
                shard: self.shard,
                reason: reason.clone(),
            },
            None => Error::Closed,
        }
    }

    /// Why a fenced generator does not issue.
    #[cold]
    fn fenced_error(&self) -> Error {
        #[cfg(feature = "redis")]
        if let Some(lease) = &self.lease {
            return Error::Lease(lease.fence_error());
        }
        Error::Closed
    }
}

/// `n` consecutive IDs reserved by [`Generator::next_ids`], produced on the
/// fly: strictly increasing, no memory per ID.
#[derive(Clone, Debug)]
pub struct IdBatch {
    /// The counter value of the next ID.
    next: u64,
    end: u64,
    /// The next ID, packed. Within a second each ID is the one before plus
    /// `step` (one sequence number), so only a new second needs
    /// [`Layout::pack`]: an addition per ID instead of three variable
    /// shifts.
    id: u64,
    step: u64,
    sequence_mask: u64,
    layout: Layout,
    base: u64,
}

impl IdBatch {
    fn new(first: u64, n: u64, layout: Layout, base: u64) -> IdBatch {
        IdBatch {
            next: first,
            end: first + n,
            id: layout.pack(first, base),
            step: 1 << layout.shard_bits(),
            sequence_mask: u64::from(layout.max_sequence()),
            layout,
            base,
        }
    }
}

impl Iterator for IdBatch {
    type Item = Id;

    #[inline]
    fn next(&mut self) -> Option<Id> {
        if self.next == self.end {
            return None;
        }
        let id = self.id;
        self.next += 1;
        self.id = if self.next & self.sequence_mask == 0 {
            self.layout.pack(self.next, self.base)
        } else {
            id + self.step
        };
        Some(Id::from_valid(id))
    }

    /// Skips ahead in one step, without producing the IDs in between.
    fn nth(&mut self, n: usize) -> Option<Id> {
        let left = self.end - self.next;
        match u64::try_from(n) {
            Ok(n) if n < left => {
                self.next += n;
                self.id = self.layout.pack(self.next, self.base);
                self.next()
            }
            _ => {
                self.next = self.end;
                None
            }
        }
    }

    /// The batch's last ID, in one step.
    fn last(mut self) -> Option<Id> {
        let left = self.end - self.next;
        let skip = usize::try_from(left.checked_sub(1)?).ok()?;
        self.nth(skip)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for IdBatch {}
impl std::iter::FusedIterator for IdBatch {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const L: Layout = Layout::DEFAULT;
    const T: u64 = 1_700_000_000;

    fn file(
        clock_id: u64,
        seen: u64,
        marks: &[(u32, u64)],
        last: Option<(u64, u32)>,
        layout: Layout,
    ) -> StateFile {
        StateFile {
            layout,
            shard: 1,
            clock_id,
            seen_max: seen,
            seen_last_run: seen,
            high_water: marks.iter().copied().collect::<BTreeMap<_, _>>(),
            last,
        }
    }

    fn counter(layout: &Layout, unix: u64, seq: u64) -> u64 {
        ((unix - layout.epoch()) << layout.sequence_bits()) | seq
    }

    #[test]
    fn fresh_state_starts_at_the_clock() {
        let p = plan(None, &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 0));
        assert_eq!(p.file.clock_id, 0);
    }

    #[test]
    fn clean_close_continues_after_the_last_id() {
        let p = plan(Some(file(0, T, &[(0, T + 5)], Some((T, 41)), L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 42));
        assert_eq!(p.file.last, None, "the new run must not look closed");
    }

    #[test]
    fn crash_continues_after_the_reservation() {
        let p = plan(Some(file(0, T, &[(0, T + 5)], None, L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T + 6, 0));
    }

    #[test]
    fn rollback_without_clock_bits_continues_after_the_mark() {
        let p = plan(
            Some(file(4, T, &[(0, T + 5)], Some((T + 1, 7)), L)),
            &L,
            1,
            T - 3600,
        )
        .unwrap();
        assert_eq!(p.rollback, Some(3600));
        assert_eq!(p.file.clock_id, 5);
        assert_eq!(p.start, counter(&L, T + 1, 8));
        assert_eq!(p.file.seen_max, T, "the rollback must not count as lead");
    }

    #[test]
    fn rollback_with_clock_bits_moves_to_a_clock_value_behind_the_clock() {
        let l = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        // Values 1 and 2 were used up to after the rolled-back time, 3 is
        // behind it.
        let prev = file(
            0,
            T,
            &[(0, T + 5), (1, T), (2, T - 100), (3, T - 7200)],
            None,
            l,
        );
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_id, 3);
        assert_eq!(p.file.clock_value(), 3);
        assert_eq!(p.start, counter(&l, T - 3600, 0), "runs on real time");
    }

    #[test]
    fn rollback_with_every_mark_ahead_resumes_after_the_lowest() {
        let l = Layout::new(30, 1, 17, 5, L.epoch()).unwrap();
        let prev = file(0, T, &[(0, T + 5), (1, T - 10)], None, l);
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_value(), 1);
        assert_eq!(p.start, counter(&l, T - 9, 0));
    }

    #[test]
    fn unused_clock_value_is_behind_any_clock() {
        let l = Layout::new(30, 1, 17, 5, L.epoch()).unwrap();
        let prev = file(0, T, &[(0, T + 5)], None, l);
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_id, 1);
        assert_eq!(p.start, counter(&l, T - 3600, 0));
    }

    /// The counter one past the layout's last second: the end of the range.
    fn end(layout: &Layout) -> u64 {
        (layout.max_seconds() + 1) << layout.sequence_bits()
    }

    /// What opening writes: the plan's file with the first window reserved
    /// (as `Generator::start` does).
    fn opened(p: &Plan, layout: &Layout, window: u64) -> StateFile {
        let mut file = p.file.clone();
        let start_sec = p.start >> layout.sequence_bits();
        let reserved = (start_sec + window).min(layout.max_seconds());
        let value = file.clock_value();
        let mark = file.high_water.get(&value).copied().unwrap_or(0);
        file.high_water
            .insert(value, mark.max(layout.epoch() + reserved));
        file
    }

    #[test]
    fn extreme_marks_and_last_ids_end_the_range_instead_of_wrapping() {
        for mark in [u64::MAX, u64::MAX - 1, L.last_unix_second(), 1 << 40] {
            let p = plan(Some(file(0, T, &[(0, mark)], None, L)), &L, 1, T).unwrap();
            assert_eq!(p.start, end(&L), "mark {mark}");
        }
        for last in [
            (u64::MAX, u32::MAX),
            (L.last_unix_second(), u32::MAX),
            (u64::MAX, 0),
        ] {
            let p = plan(Some(file(0, T, &[(0, u64::MAX)], Some(last), L)), &L, 1, T).unwrap();
            assert_eq!(p.start, end(&L), "last {last:?}");
        }
        // The last ID of the range: the next is past it.
        let last = (L.last_unix_second(), L.max_sequence());
        let p = plan(
            Some(file(0, T, &[(0, L.last_unix_second())], Some(last), L)),
            &L,
            1,
            T,
        )
        .unwrap();
        assert_eq!(p.start, end(&L));
        // A mark of 0 (below the epoch) never starts before the clock.
        let p = plan(Some(file(0, T, &[(0, 0)], None, L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 0));
    }

    #[test]
    fn a_clock_id_that_cannot_be_bumped_is_an_error_not_a_wrap() {
        let l = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        let every = [(0, T + 5), (1, T + 5), (2, T + 5), (3, T + 5)];
        let err = plan(Some(file(u64::MAX, T, &every, None, l)), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        // Clock value 2 (u64::MAX - 1 mod 4) moves two steps on, to the
        // unused value 0: one past u64::MAX.
        let prev = file(u64::MAX - 1, T, &[(2, T + 5), (3, T + 5)], None, l);
        let err = plan(Some(prev), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        // A bumped id must leave room for every clock value, as the reader
        // requires of every file: what this run writes is read again.
        let prev = file(u64::MAX - 2, T, &[(1, T + 5), (2, T + 5)], None, l);
        let err = plan(Some(prev), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        let prev = file(u64::MAX - 10, T, &[(1, T + 5), (2, T + 5)], None, l);
        let bumped = plan(Some(prev), &l, 1, T - 3600).unwrap().file;
        assert_eq!(
            bumped.clock_id,
            u64::MAX - 8,
            "two steps on, to unused value 3"
        );
        // Without a rollback nothing is bumped.
        let prev = file(u64::MAX, T, &[(3, T + 5)], None, l);
        assert_eq!(plan(Some(prev), &l, 1, T).unwrap().file.clock_id, u64::MAX);
    }

    #[test]
    fn clock_readings_outside_the_layout_are_never_recorded() {
        let last = L.last_unix_second();
        for now in [last + 1, last + 1000, u64::MAX] {
            let p = plan(None, &L, 1, now).unwrap();
            assert_eq!(p.start, end(&L), "{now}");
            assert_eq!((p.file.seen_max, p.file.seen_last_run), (last, last));

            let prev = file(2, T, &[(0, T + 5)], Some((T, 3)), L);
            let p = plan(Some(prev), &L, 1, now).unwrap();
            assert_eq!(p.start, end(&L), "{now}");
            assert_eq!(p.rollback, None);
            assert_eq!((p.file.seen_max, p.file.seen_last_run), (T, T), "{now}");
        }
        // Before the epoch: recorded as the epoch, a rollback if the last
        // run saw later, and the start is still after the last ID.
        for now in [0, L.epoch() - 1] {
            let p = plan(None, &L, 1, now).unwrap();
            assert_eq!((p.start, p.file.seen_max), (0, L.epoch()));
            let prev = file(2, T, &[(0, T + 5)], Some((T, 3)), L);
            let p = plan(Some(prev), &L, 1, now).unwrap();
            assert_eq!(p.rollback, Some(T - L.epoch()));
            assert_eq!(p.file.seen_last_run, L.epoch());
            assert_eq!(p.start, counter(&L, T, 4));
        }
    }

    #[test]
    fn what_opening_writes_is_always_a_valid_state_file() {
        let clocked = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        let nows = [
            0,
            L.epoch(),
            T - 3600,
            T,
            T + 3600,
            L.last_unix_second() - 3,
        ];
        for layout in [L, clocked] {
            let last = layout.last_unix_second();
            let prevs = [
                None,
                Some(file(0, T, &[(0, T + 5)], Some((T, 41)), layout)),
                Some(file(1, T, &[(0, T + 5), (1, T + 9)], None, layout)),
                Some(file(
                    3,
                    T,
                    &[(0, T - 99), (3, T + 2)],
                    Some((T + 1, 0)),
                    layout,
                )),
                Some(file(0, last - 4, &[(0, last - 3)], None, layout)),
            ];
            // The files with clock values 1 and 3 are for the clocked layout only.
            let fits = |p: &Option<StateFile>| {
                p.as_ref()
                    .is_none_or(|p| p.high_water.keys().all(|&c| c < layout.clock_values()))
            };
            for prev in prevs.into_iter().filter(fits) {
                if let Some(prev) = &prev {
                    prev.check().expect("a valid previous file");
                }
                for now in nows {
                    for window in [1, DEFAULT_WINDOW, 1 << 20] {
                        let p = plan(prev.clone(), &layout, 1, now).unwrap();
                        let written = opened(&p, &layout, window);
                        written.check().unwrap_or_else(|e| {
                            panic!("{layout:?} {prev:?} at {now}, window {window}: {e}")
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn batch_ids_are_the_packed_counters_across_seconds() {
        let layouts = [
            L,
            Layout::new(30, 2, 16, 5, L.epoch()).unwrap(),
            Layout::new(40, 0, 8, 5, L.epoch()).unwrap(),
        ];
        for layout in layouts {
            let base = layout.base(layout.clock_values() - 1, 3);
            let per_second = u64::from(layout.max_sequence()) + 1;
            let first = counter(&layout, T, per_second - 3);
            let n = 2 * per_second + 7;
            let ids: Vec<u64> = IdBatch::new(first, n, layout, base)
                .map(Id::as_u64)
                .collect();
            let packed: Vec<u64> = (first..first + n).map(|c| layout.pack(c, base)).collect();
            assert_eq!(ids, packed, "{layout:?}");
        }
        assert_eq!(IdBatch::new(0, 0, L, 0).next(), None);
        assert_eq!(IdBatch::new(0, 0, L, 0).last(), None);
        let per_second = 1 << L.sequence_bits();
        let first = counter(&L, T, per_second - 2);
        let batch = IdBatch::new(first, 5, L, L.base(0, 3));
        let all: Vec<Id> = batch.clone().collect();
        assert_eq!(batch.clone().last(), all.last().copied());
        for k in 0..7 {
            let mut b = batch.clone();
            assert_eq!(b.nth(k), all.get(k).copied(), "nth({k})");
            assert_eq!(b.next(), all.get(k + 1).copied(), "after nth({k})");
        }
    }
}
