//! Configuring a generator: the [`Builder`] and its settings, which
//! `open.rs` reads (where [`Builder::open`] is).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// The docs link the generator the builder opens (`open.rs`).
#[cfg(doc)]
use super::Generator;
use super::{
    DEFAULT_CLOCK_STEP_CONFIRM, DEFAULT_END_MARGIN, DEFAULT_MAX_CLOCK_STEP, DEFAULT_MEMBER_WAIT,
    DEFAULT_WINDOW, MAX_WINDOW,
};
use crate::clock::{whole_seconds, Clock, SystemClock};
use crate::durable;
// The settings' docs name the errors opening returns.
#[cfg(doc)]
use crate::error::Error;
use crate::layout::Layout;

/// Configures and opens a [`Generator`].
///
/// Every setting has a default: the shard from
/// [`IDUTIL_SHARD`](crate::env::SHARD) or the host name, the state
/// directory from [`IDUTIL_STATE_DIR`](crate::env::STATE_DIR) or the
/// platform's state directory, the host's ID space from
/// [`IDUTIL_ID_SPACE`](crate::env::ID_SPACE) or `default`, the layout from
/// [`IDUTIL_LAYOUT`](crate::env::LAYOUT) or [`Layout::DEFAULT`], the
/// [`SystemClock`], a reservation window of 5 seconds ([`DEFAULT_WINDOW`])
/// and no lead cap (a leased generator: its lease's, 30 s by default).
#[derive(Debug)]
pub struct Builder<C: Clock = SystemClock> {
    pub(super) shard: Option<u32>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) id_space: Option<String>,
    /// `None`: `IDUTIL_LAYOUT`, else [`Layout::DEFAULT`].
    pub(super) layout: Option<Layout>,
    /// The time source, set with [`Builder::clock`]; shared with the
    /// generator a child of `fork()` opens from the same settings.
    pub(super) time: Arc<C>,
    pub(super) window: u64,
    pub(super) max_lead: Option<u64>,
    /// A throw-away generator for tests: see [`Builder::ephemeral`].
    pub(super) ephemeral: bool,
    pub(super) end_margin: u64,
    pub(super) max_step: Option<(u64, Duration)>,
    pub(super) member_wait: Duration,
    /// How many IDs the process expects to issue, if it knows
    /// ([`Builder::expected_ids`]).
    pub(super) expected: Option<u64>,
    /// The state file's companions: with the feature `redis`, the lease.
    pub(super) durable: durable::Settings,
}

impl<C: Clock> Clone for Builder<C> {
    fn clone(&self) -> Self {
        Builder {
            shard: self.shard,
            state_dir: self.state_dir.clone(),
            id_space: self.id_space.clone(),
            layout: self.layout,
            time: Arc::clone(&self.time),
            window: self.window,
            max_lead: self.max_lead,
            ephemeral: self.ephemeral,
            end_margin: self.end_margin,
            max_step: self.max_step,
            member_wait: self.member_wait,
            expected: self.expected,
            durable: self.durable.clone(),
        }
    }
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
            time: Arc::new(SystemClock),
            window: DEFAULT_WINDOW.as_secs(),
            max_lead: None,
            ephemeral: false,
            end_margin: DEFAULT_END_MARGIN.as_secs(),
            max_step: Some((DEFAULT_MAX_CLOCK_STEP.as_secs(), DEFAULT_CLOCK_STEP_CONFIRM)),
            member_wait: DEFAULT_MEMBER_WAIT,
            expected: None,
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
    /// platform's state directory. `dir` is created if missing, but not its
    /// parents ([`state`](crate::state), *Security: the directory is a
    /// trust boundary*).
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Names the host's ID space instead of
    /// [`IDUTIL_ID_SPACE`](crate::env::ID_SPACE) (default `default`),
    /// checked by [`open`](Builder::open) against
    /// [`check_id_space`](crate::host_lock::check_id_space). It scopes the
    /// per-host lock only, and is not the lease's ID space in its store
    /// (`LeaseConfig::prefix`, default `idutil`). What each is, and which
    /// generators must share one: [`host_lock`](crate::host_lock#id-spaces),
    /// *ID spaces*.
    #[doc(alias = "host ID space")]
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
            time: Arc::new(clock),
            window: self.window,
            max_lead: self.max_lead,
            ephemeral: self.ephemeral,
            end_margin: self.end_margin,
            max_step: self.max_step,
            member_wait: self.member_wait,
            expected: self.expected,
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
    ///
    /// A leased generator's lead is capped by its lease too, at 30 s by
    /// default (`LeaseConfig::max_lead`):
    /// the smaller cap applies, and the lease counts the jump after a
    /// restore or a failover from it.
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

    /// How long the generator waits for another process sharing its shard
    /// that holds the shard's short lock and does not let go, when drawing
    /// a block or writing the state file (default five seconds,
    /// [`DEFAULT_MEMBER_WAIT`]).
    ///
    /// The wait counts only while nothing moves: it starts over whenever
    /// the members make progress (the claim file changes: a block drawn,
    /// the state file written) or the lock changes hands, so a member that
    /// queues behind many others on busy cores waits its turn. With nothing
    /// moving, the generator looks at the holder in `/proc` every half
    /// wait. A holder that kept the lock from one look to the next and is
    /// stopped (`SIGSTOP`, a debugger: its threads in state `T` or `t` in
    /// `/proc/<pid>/task/*/stat`) or asleep (every thread waiting on
    /// something else, which a member's turn never does) is given up on
    /// after this wait; one that is live (a thread running or
    /// waiting on its disk, `R` or `D`: a slow `fsync` takes seconds on a
    /// busy disk), this generator's own other thread, or a holder `/proc`
    /// does not show (in another PID namespace) after twelve times this
    /// wait. Then the call returns [`Error::MemberStalled`] naming the
    /// holder (opening too; opening returns [`Error::Locked`] after this
    /// wait for the first process of the shard, while it plans where to
    /// resume). See
    /// [`state`](crate::state#processes-sharing-a-shard), *A member that
    /// does not let go*.
    pub fn member_wait(mut self, wait: Duration) -> Self {
        self.member_wait = wait;
        self
    }

    /// How many IDs this process expects to issue from the generator, when
    /// it knows (a command asked for `n` IDs, a batch job): a process that
    /// shares its shard with others then draws no more of the shard than
    /// that, so that a short process leaves nothing unused behind it. Only
    /// a hint: past it the generator issues on, drawing as usual. Without
    /// it, blocks start at 64 IDs and grow with what the process issues
    /// (see [`state`](crate::state), *Processes sharing a shard*).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
    /// # std::env::set_var("IDUTIL_ID_SPACE", "doc-expected-ids");
    /// use idutil::Generator;
    ///
    /// let generator = Generator::builder()
    ///     .shard(2)
    ///     .state_dir(dir.path())
    ///     .expected_ids(5)
    ///     .open()?;
    /// let ids: Vec<_> = generator.next_ids(5)?.collect();
    /// assert_eq!(ids.len(), 5);
    /// # Ok::<(), idutil::Error>(())
    /// ```
    pub fn expected_ids(mut self, n: u64) -> Self {
        self.expected = Some(n);
        self
    }
}

#[cfg(any(feature = "postgres-lease", feature = "redis"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres-lease", feature = "redis"))))]
impl<C: Clock> Builder<C> {
    /// Leases the shard from the store `config` names (PostgreSQL with
    /// feature `postgres-lease`, Redis with feature `redis`) instead of
    /// taking it from `IDUTIL_SHARD` or the host name. An explicit
    /// [`shard`](crate::Builder::shard) narrows the lease to that one shard.
    /// Without this call, `IDUTIL_LEASE_URL` turns
    /// the lease on when it is set (set but empty or blank, opening fails
    /// with [`Error::InvalidEnv`](crate::Error::InvalidEnv)). See
    /// [`lease`](crate::lease).
    pub fn lease(mut self, config: crate::lease::LeaseConfig) -> Self {
        self.durable.lease = Some(std::sync::Arc::new(config));
        self
    }
}
