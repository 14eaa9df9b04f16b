//! Configuring a generator ([`Builder`]) and opening it: taking the shard,
//! planning the restart and reserving the first window.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::hot::{Cold, Hot, Inner, Padded};
use super::plan::{cover_seen, plan, Plan};
use super::{
    Generator, DEFAULT_CLOCK_STEP_CONFIRM, DEFAULT_END_MARGIN, DEFAULT_MAX_CLOCK_STEP,
    DEFAULT_WINDOW, FENCED, MAX_WINDOW,
};
use crate::clock::{whole_seconds, Clock, SystemClock};
use crate::durable::{self, Durable};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shard::ShardSource;
use crate::state::{self, Remedy};

/// Configures and opens a [`Generator`].
///
/// Every setting has a default: the shard from `IDUTIL_SHARD` or the host
/// name, the state directory from `IDUTIL_STATE_DIR` or the platform's
/// state directory, the ID space from `IDUTIL_ID_SPACE` or `default`, the
/// layout from `IDUTIL_LAYOUT` or [`Layout::DEFAULT`], the [`SystemClock`],
/// a reservation window of 5 seconds and no lead cap.
#[derive(Clone, Debug)]
pub struct Builder<C: Clock = SystemClock> {
    shard: Option<u32>,
    state_dir: Option<PathBuf>,
    id_space: Option<String>,
    /// `None`: `IDUTIL_LAYOUT`, else [`Layout::DEFAULT`].
    layout: Option<Layout>,
    /// The time source, set with [`Builder::clock`].
    time: C,
    window: u64,
    max_lead: Option<u64>,
    /// A throw-away generator for tests: see [`Builder::ephemeral`].
    ephemeral: bool,
    end_margin: u64,
    max_step: Option<(u64, Duration)>,
    /// The state file's companions: with the feature `redis`, the lease.
    pub(crate) durable: durable::Settings,
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
            layout: None,
            time: SystemClock,
            window: DEFAULT_WINDOW.as_secs(),
            max_lead: None,
            ephemeral: false,
            end_margin: DEFAULT_END_MARGIN.as_secs(),
            max_step: Some((DEFAULT_MAX_CLOCK_STEP.as_secs(), DEFAULT_CLOCK_STEP_CONFIRM)),
            durable: durable::Settings::default(),
        }
    }

    /// A builder for an **ephemeral** generator, for tests and doctests:
    /// its state lives in a temporary directory of this process's own
    /// (shared by its ephemeral generators, so one reopened on a shard
    /// continues after the last) and its ID space is this process's own, so any number of test processes (parallel
    /// doctests, nextest's process per test) each open one at once, on any
    /// shard, with no setup. Its shard is 0 unless [`Builder::shard`] says
    /// otherwise; `IDUTIL_SHARD`, `IDUTIL_STATE_DIR`, `IDUTIL_ID_SPACE` and
    /// the host name are not read.
    ///
    /// **Its IDs are unique within the process only.** Two processes'
    /// ephemeral generators issue the same IDs, and nothing survives the
    /// process: never let them reach a shared database.
    /// [`IdUtil::init_ephemeral`](crate::IdUtil::init_ephemeral) makes the
    /// process-wide generator one.
    ///
    /// ```
    /// use idutil::Generator;
    ///
    /// let generator = Generator::builder_ephemeral().open()?;
    /// assert_eq!(generator.next_id()?.shard(), 0);
    /// # Ok::<(), idutil::Error>(())
    /// ```
    pub fn ephemeral() -> Self {
        Builder {
            ephemeral: true,
            ..Builder::new()
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
    /// databases, may use the same shard numbers. See
    /// [`host_lock`](crate::host_lock).
    pub fn id_space(mut self, name: impl Into<String>) -> Self {
        self.id_space = Some(name.into());
        self
    }

    /// Uses this layout instead of the one `IDUTIL_LAYOUT` names, or
    /// [`Layout::DEFAULT`].
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<C2> {
        Builder {
            shard: self.shard,
            state_dir: self.state_dir,
            id_space: self.id_space,
            layout: self.layout,
            time: clock,
            window: self.window,
            max_lead: self.max_lead,
            ephemeral: self.ephemeral,
            end_margin: self.end_margin,
            max_step: self.max_step,
            durable: self.durable,
        }
    }

    /// How far ahead the state file reserves seconds (rounded up to whole
    /// seconds, at least 1, at most [`MAX_WINDOW`]; default
    /// [`DEFAULT_WINDOW`], 5 s). This is what a crash costs: after one, the
    /// next generator starts up to this far past the last ID issued, plus
    /// the headroom of a burst ([`Generator`], *What a crash costs*). A
    /// larger window means fewer writes of the state file; a generator
    /// that follows the clock writes about once per half window.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = whole_seconds(window).clamp(1, MAX_WINDOW.as_secs());
        self
    }

    /// Caps the lead: how far (in whole seconds) the generator's second may
    /// run ahead of the highest wall-clock second seen, by borrowing.
    /// [`Generator::next_id`] waits for the clock at the cap;
    /// [`Generator::next_id_nowait`] returns [`Error::LeadCapReached`].
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

    /// How much of the end of the layout's range the generator keeps
    /// clear (whole seconds; default one day, [`DEFAULT_END_MARGIN`]): it
    /// issues no ID in those last seconds and treats a clock reading there
    /// like one outside the range ([`Error::ClockOutOfRange`]). A clock
    /// that reads the last seconds of the range for a moment then cannot
    /// use the shard up; a shard that reached the margin stops with
    /// [`Error::EndMarginReached`]. `Duration::ZERO` issues up to the
    /// layout's very last ID; a margin is at most half the layout's range.
    ///
    /// Opening reports [`Error::EndMarginReached`] before it writes
    /// anything, so a clock at 2136-02-07T06:28:10 for a moment costs the
    /// shard nothing. A deployment that really runs near the end of its
    /// layout sets a smaller margin.
    pub fn end_margin(mut self, margin: Duration) -> Self {
        self.end_margin = whole_seconds(margin);
        self
    }

    /// The largest forward step of the wall clock a running generator
    /// follows at once (default one day, [`DEFAULT_MAX_CLOCK_STEP`]);
    /// `None` follows every step. A larger step, measured from where the
    /// clock should be by the monotonic clock, is logged and not followed
    /// until it has held for [`clock_step_confirm`](Builder::clock_step_confirm):
    /// meanwhile IDs go on at the time before the step. A clock that jumps
    /// decades ahead for a moment then cannot shift the shard.
    ///
    /// A running generator keeps where the clock should be: the last
    /// reading it acted on plus the time elapsed since, by the monotonic
    /// clock. Once a new time has held for the confirmation period the
    /// generator follows it and logs that it did; a clock that comes back
    /// first was never followed. The monotonic clock stops while the
    /// machine sleeps, so after a suspend of more than the limit the
    /// generator follows the clock that much later, issuing meanwhile at
    /// the time it went to sleep, unique and increasing.
    ///
    /// A generator *opened* while the clock is far ahead has no earlier
    /// reading to compare with (a run of the `idutil` command at that
    /// moment, say), so it starts there, and the shard stays that far
    /// ahead, since a generator never resumes before anything the state
    /// file says may have been issued. The way back is a recovery that
    /// vouches for the skipped time
    /// ([`RecoverOptions::unused`](crate::state::RecoverOptions::unused)).
    pub fn max_clock_step(mut self, max_step: Option<Duration>) -> Self {
        let confirm = self
            .max_step
            .map_or(DEFAULT_CLOCK_STEP_CONFIRM, |(_, confirm)| confirm);
        self.max_step = max_step.map(|d| (whole_seconds(d), confirm));
        self
    }

    /// How long a forward step larger than
    /// [`max_clock_step`](Builder::max_clock_step) must hold before the
    /// generator follows it (default five minutes,
    /// [`DEFAULT_CLOCK_STEP_CONFIRM`]).
    pub fn clock_step_confirm(mut self, confirm: Duration) -> Self {
        if let Some((_, c)) = &mut self.max_step {
            *c = confirm;
        }
        self
    }

    /// Takes the shard's lock, reads its state and reserves the first
    /// window durably.
    ///
    /// # Errors
    ///
    /// [`Error::ClockOutOfRange`] if the clock reads outside the layout's
    /// range or in its end margin (then nothing is created or locked),
    /// [`Error::EndMarginReached`] if the shard already issued into its end
    /// margin, [`Error::ShardOutOfRange`], [`Error::InvalidEnv`] or
    /// [`Error::UnusableHostname`] for a bad shard,
    /// [`Error::InvalidIdSpace`] for a bad ID space name,
    /// [`Error::Locked`] if another generator holds the shard in the state
    /// directory, [`Error::HostLocked`] if one on this host holds it in the
    /// same ID space, [`Error::RelativeStateDir`] or [`Error::Untrusted`] if
    /// the state directory or a file in it fails the checks in the crate
    /// docs (*Security*),
    /// [`Error::BadState`] if the state file cannot be trusted,
    /// [`Error::Io`] if the state directory cannot be used,
    /// [`Error::InvalidEnv`] if `IDUTIL_LAYOUT` cannot be read; with a
    /// lease, [`Error::Lease`] if no shard is free, the store cannot be
    /// reached, its clock and this host's disagree or the shard's record
    /// cannot be trusted, and [`Error::InvalidEnv`] if `IDUTIL_LEASE_URL`
    /// is set but blank.
    pub fn open(mut self) -> Result<Generator<C>> {
        let ephemeral = self.ephemeral;
        // An ephemeral generator reads nothing from the environment.
        let layout = match self.layout {
            Some(layout) => layout,
            None if ephemeral => Layout::DEFAULT,
            None => Layout::from_env()?.unwrap_or_default(),
        };
        self.layout = Some(layout);
        // Before anything is read, created or locked: a later run must not
        // mistake such a reading for issued IDs, and a clock this wrong
        // leaves no trace.
        let now_unix = self.time.now();
        let usable_last = layout.max_seconds() - effective_margin(&layout, self.end_margin);
        if layout.seconds_of(now_unix).is_none_or(|s| s > usable_last) {
            return Err(Error::ClockOutOfRange {
                unix_second: now_unix,
                first: layout.epoch(),
                last: layout.epoch() + usable_last,
            });
        }
        if ephemeral {
            self.state_dir = Some(state::scratch_dir()?);
            self.id_space = Some(format!("ephemeral-{}", std::process::id()));
            self.shard = Some(self.shard.unwrap_or(0));
        }
        let (durable, shard, source) = durable::open(&durable::Request {
            settings: &self.durable,
            shard: self.shard,
            state_dir: self.state_dir.as_deref(),
            id_space: self.id_space.as_deref(),
            layout: &layout,
            time: &self.time,
            ephemeral,
        })?;
        let mut generator = Generator::start(self, durable, shard, source)?;
        generator.ephemeral = ephemeral;
        Ok(generator)
    }
}

/// The end margin a generator keeps: at most half the layout's range, so
/// that a layout of a few minutes (in tests, say) keeps a usable range.
fn effective_margin(layout: &Layout, margin: u64) -> u64 {
    margin.min(layout.max_seconds() / 2)
}

impl<C: Clock> Generator<C> {
    fn start(b: Builder<C>, durable: Durable, shard: u32, source: ShardSource) -> Result<Self> {
        let forks = crate::fork::install();
        let layout = b.layout.unwrap_or_default();
        let epoch = layout.epoch();
        let now_unix = b.time.now();
        let end_margin = effective_margin(&layout, b.end_margin);
        let usable_last = layout.max_seconds() - end_margin;
        if layout.seconds_of(now_unix).is_none_or(|s| s > usable_last) {
            // The clock moved since `open` looked: still nothing written.
            return Err(Error::ClockOutOfRange {
                unix_second: now_unix,
                first: epoch,
                last: epoch + usable_last,
            });
        }
        let prev = durable.load()?;
        if prev.is_none() && !b.ephemeral && source != ShardSource::Lease {
            log::warn!(
                "shard {shard} has no state file in {}, so it starts afresh at the clock: \
                 if this shard issued IDs before from another state directory (a container \
                 restarted without a persistent volume, another host with the same shard), \
                 it may issue the same IDs again",
                durable.dir().display()
            );
        }
        if let Some(prev) = &prev {
            state::check_layout(durable.path(), prev, &layout)?;
        }
        let Plan {
            mut file,
            mut start,
            rollback,
        } = plan(prev, &layout, shard, now_unix)
            .map_err(|reason| Error::bad_state(durable.path(), shard, reason, Remedy::Recover))?;
        if let Some(back) = rollback {
            log::warn!(
                "the wall clock is {back} s behind the last run of shard {shard} \
                 (state file {}); clock id bumped to {}, IDs continue after everything \
                 issued before",
                durable.path().display(),
                file.clock_id
            );
        }
        // The lease's record covers every holder of the shard, this host's
        // state file only this host: resume after the later of the two.
        start = durable.resume(&layout, start, &mut file);
        let now = now_unix.saturating_sub(epoch);
        let start_sec = start >> layout.sequence_bits();
        if start_sec > usable_last && start_sec <= layout.max_seconds() {
            // Refused before the reservation is written (see the crate
            // docs, *A clock far ahead*). Past the very end, the generator
            // opens and answers `EndOfRange`, as it always has.
            return Err(Error::EndMarginReached {
                shard,
                from: epoch + usable_last + 1,
                margin: end_margin,
                last_unix_second: layout.last_unix_second(),
            });
        }
        // Seconds issued far ahead, relative to the epoch: the reservation
        // stops short of them until the generator passes over them.
        let island = file
            .skip
            .map(|(first, last)| (first.saturating_sub(epoch), last.saturating_sub(epoch)));
        let mut reserved = start_sec.saturating_add(b.window).min(usable_last);
        if let Some((first, _)) = island {
            reserved = reserved.min(first.saturating_sub(1)).max(start_sec);
        }
        let value = file.clock_value();
        let mark = file.high_water.get(&value).copied().unwrap_or(0);
        file.high_water.insert(value, mark.max(epoch + reserved));
        cover_seen(&mut file);
        durable.reserve(&file, epoch + reserved)?;

        let inner = Arc::new(Inner {
            cursor: Padded(AtomicU64::new(start)),
            hot: Padded(Hot {
                limit: AtomicU64::new(0),
                last_now: AtomicU64::new(now_unix),
                time: b.time,
                layout,
                sequence_bits: layout.sequence_bits(),
                base: layout.base(value, shard),
                usable_last,
                forks,
            }),
            shard,
            shard_source: source,
            clock_id: file.clock_id,
            clock_value: value,
            window: b.window,
            max_lead: b.max_lead,
            end_margin,
            max_step: b.max_step,
            path: durable.path().to_path_buf(),
            dir: durable.dir().to_path_buf(),
            fence: durable.fence(),
            cold: Padded(Mutex::new(Cold {
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
                trusted: (now_unix, Instant::now()),
                step: None,
                island,
                failure: None,
                failures: 0,
                fenced: None,
                closing: false,
                file,
            })),
            changed: Condvar::new(),
        });
        inner.publish_limit(&inner.lock(), 0);
        let weak = Arc::downgrade(&inner);
        inner.fence.on_change(Box::new(move |on| {
            if let Some(inner) = weak.upgrade() {
                if on {
                    inner.cursor.0.fetch_or(FENCED, Relaxed);
                } else {
                    inner.cursor.0.fetch_and(!FENCED, Relaxed);
                }
            }
        }));
        let worker = Arc::clone(&inner);
        let extender = thread::Builder::new()
            .name(format!("idutil-shard-{shard}"))
            .spawn(move || worker.extend_until_closed(durable))
            .map_err(|e| {
                // Nothing was issued: give the lease back (and stop its
                // renewal thread) before the generator goes away.
                inner.fence.give_up(0);
                Error::io("start the reservation thread for", &inner.path, e)
            })?;
        Ok(Generator {
            inner,
            extender: Mutex::new(Some(extender)),
            ephemeral: false,
        })
    }
}
