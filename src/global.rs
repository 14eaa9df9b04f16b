//! The process-wide generator behind `IdUtil::next_id()`.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::generator::{Builder, Generator, IdBatch};
use crate::id::Id;

static GLOBAL: OnceLock<Generator> = OnceLock::new();
/// Held while the process-wide generator is created or closed: a lock a
/// child of `fork()` takes over from a thread of its parent that held it
/// at the fork (see [`ForkMutex`](crate::fork::ForkMutex)).
static INIT: crate::fork::ForkMutex<()> = crate::fork::ForkMutex::new(());
/// Set by [`close_at_exit`]: the process is exiting.
static EXITING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread runs the exit hook.
    static RUNS_EXIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Set by [`IdUtil::shutdown`]: the process-wide generator is gone for good.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);
/// In a child created by `fork()` after [`GLOBAL`] was set: the generator
/// opened in the child, which replaces the parent's (left as it is, never
/// dropped, as a `static` is). Set under [`INIT`].
static REOPENED: OnceLock<Generator> = OnceLock::new();

/// The one-line API: IDs from a process-wide [`Generator`], created on first
/// use from the environment (its shard, state directory, ID space and
/// lease: [`env`](crate::env) lists the variables).
///
/// ```
/// # idutil::IdUtil::init_ephemeral()?; // a doctest: see "In tests" below
/// use idutil::{Id, IdUtil};
///
/// IdUtil::init()?; // optional: fail at start-up, not at the first ID
/// let id: i64 = IdUtil::next_id(); // for a BIGINT column
/// let typed: Id = IdUtil::next(); // the same, typed
/// assert!(i64::from(typed) > id);
/// assert!(IdUtil::try_next_id()? > id); // an error instead of a panic
/// # Ok::<(), idutil::Error>(())
/// ```
///
/// # Names
///
/// `next_id` returns the `i64` a database column takes and `next` the
/// typed [`Id`]; each panics if no ID can be issued, and its `try_`
/// twin returns the error instead. (On a [`Generator`] every call returns
/// a `Result`; there `_nowait` marks the calls that return an error
/// instead of waiting at a lead cap.)
///
/// # In tests
///
/// An application's tests and doctests call `IdUtil` as production does,
/// with no setup. They run in many processes at once (each doctest is a
/// process; nextest runs each test in its own; several `cargo test` may
/// run together), and those processes share the host's shard like any
/// others ([`Generator`], *Processes sharing a shard*): every one gets IDs
/// no other has, so tests that share one test database never collide on a
/// primary key. The shard and the state directory come from the
/// environment, as in production; a CI runner whose host name has no
/// number uses shard 0 and says so in a warning.
///
/// [`IdUtil::init_ephemeral`] is for the tests that must not touch the
/// state directory at all (a read-only home, a sandbox): the process gets
/// a generator of its own in a scratch directory, whose IDs are unique
/// within the process only, so they must never reach a shared database.
/// The examples of this crate's docs use it, in hidden lines, to leave
/// the reader's state directory alone.
///
/// ```no_run
/// // An application's test: no setup.
/// let a = idutil::IdUtil::next_id();
/// assert!(idutil::IdUtil::next_id() > a);
/// ```
///
/// # At exit
///
/// The process-wide generator closes cleanly when the process exits
/// normally (returning from `main`, `std::process::exit`): the next run
/// continues right after its last ID, as after [`IdUtil::shutdown`]. A
/// process killed by a signal counts as a crash: the next run starts after
/// the reserved window instead.
///
/// A thread that still calls [`IdUtil::next_id`] or [`IdUtil::next`] once
/// the exit hook has closed the generator waits for the process to end
/// instead of panicking (under `panic = "abort"` a panic would turn the
/// clean exit into SIGABRT); the `try_` calls return [`Error::Closed`].
///
/// # Warnings
///
/// Warnings (a host name without a number, so shard 0; a shard that starts
/// with no state file; a clock rollback) go to the [`log`](https://docs.rs/log)
/// facade, like every message of this crate. An application that installs
/// no logger does not see them: check [`Generator::shard_source`] after
/// [`IdUtil::init`] to learn where the shard came from, or install a logger
/// (`env_logger`, `tracing`'s log bridge) before the first ID.
#[derive(Debug)]
pub struct IdUtil;

impl IdUtil {
    /// The next ID, as the `i64` a `BIGINT` column takes.
    ///
    /// # Panics
    ///
    /// If the process-wide generator cannot be created (bad shard, locked
    /// shard, unusable state directory, damaged state file) or cannot issue
    /// (past the layout's last second), with the full reason. Use
    /// [`IdUtil::try_next_id`] to handle those as errors, or
    /// [`IdUtil::init`] to meet them at start-up.
    #[inline]
    pub fn next_id() -> i64 {
        match IdUtil::try_next_id() {
            Ok(id) => id,
            Err(e) => cannot_issue(e),
        }
    }

    /// The next ID, or why there is none.
    ///
    /// # Errors
    ///
    /// Those of [`IdUtil::init`] on the first call, then those of
    /// [`Generator::next_id`].
    #[inline]
    pub fn try_next_id() -> Result<i64> {
        IdUtil::generator()?.next_id().map(i64::from)
    }

    /// The next ID, typed: [`IdUtil::next_id`] as an [`Id`].
    ///
    /// # Panics
    ///
    /// As [`IdUtil::next_id`]; [`IdUtil::try_next`] returns the error
    /// instead.
    #[inline]
    #[allow(clippy::should_implement_trait)] // `IdUtil` is never a value
    pub fn next() -> Id {
        match IdUtil::try_next() {
            Ok(id) => id,
            Err(e) => cannot_issue(e),
        }
    }

    /// The next ID, typed, or why there is none.
    ///
    /// # Errors
    ///
    /// As [`IdUtil::try_next_id`].
    #[inline]
    pub fn try_next() -> Result<Id> {
        IdUtil::generator()?.next_id()
    }

    /// `n` consecutive IDs at once (see [`Generator::next_ids`]).
    ///
    /// # Errors
    ///
    /// As [`IdUtil::try_next_id`].
    pub fn next_ids(n: u64) -> Result<IdBatch> {
        IdUtil::generator()?.next_ids(n)
    }

    /// Creates the process-wide generator from the environment now, if it
    /// does not exist yet.
    ///
    /// # Errors
    ///
    /// Those of [`Builder::open`]; [`Error::Closed`] after
    /// [`IdUtil::shutdown`].
    pub fn init() -> Result<&'static Generator> {
        IdUtil::init_inner(None)
    }

    /// Makes the process-wide generator an ephemeral one
    /// ([`Builder::ephemeral`]), for tests and doctests: see
    /// [*In tests*](IdUtil#in-tests). Calling it again is harmless.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyInitialized`] if the process-wide generator exists
    /// and is not ephemeral; otherwise those of [`Builder::open`] and
    /// [`IdUtil::init`].
    pub fn init_ephemeral() -> Result<&'static Generator> {
        match IdUtil::init_inner(Some(Builder::ephemeral())) {
            Err(Error::AlreadyInitialized) => match GLOBAL.get() {
                Some(g) if g.is_ephemeral() => Ok(g),
                _ => Err(Error::AlreadyInitialized),
            },
            other => other,
        }
    }

    /// Creates the process-wide generator from `builder`.
    ///
    /// In a child created by `fork()` after the parent's process-wide
    /// generator opened, this opens the child's own from `builder`, which
    /// later calls use. Without it, the child's calls go to a generator
    /// the parent's opens in the child from the same settings (see
    /// [`Generator`], *`fork()`*).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyInitialized`] if it exists already; otherwise those
    /// of [`Builder::open`].
    pub fn init_with(builder: Builder) -> Result<&'static Generator> {
        IdUtil::init_inner(Some(builder))
    }

    /// The process-wide generator, created from the environment on first
    /// use.
    ///
    /// # Errors
    ///
    /// Those of [`IdUtil::init`].
    #[inline]
    pub fn generator() -> Result<&'static Generator> {
        // A process never created by `fork()` (the fork count the
        // generator's own call reads anyway is 0) has no `REOPENED`.
        if let Some(g) = GLOBAL.get() {
            if crate::fork::current() == 0 {
                return Ok(g);
            }
        }
        // Only a child of `fork()` that opened its own generator has
        // `REOPENED`; the parent's generator opens one in the child itself.
        match (GLOBAL.get(), REOPENED.get()) {
            (Some(g), None) => Ok(g),
            (Some(_), Some(reopened)) => Ok(reopened),
            (None, _) => IdUtil::init(),
        }
    }

    /// Closes the process-wide generator cleanly (see
    /// [`Generator::close`]): call it at the end of `main` so a restart
    /// continues right after the last ID instead of after the reserved
    /// window. IDs requested afterwards fail with [`Error::Closed`], and so
    /// does [`IdUtil::init`]: the process-wide generator does not reopen.
    ///
    /// # Errors
    ///
    /// Those of [`Generator::close`].
    pub fn shutdown() -> Result<()> {
        let _guard = INIT.lock();
        SHUT_DOWN.store(true, SeqCst);
        if let Some(g) = REOPENED.get() {
            return g.close();
        }
        match GLOBAL.get() {
            Some(g) => g.close(),
            None => Ok(()),
        }
    }

    fn init_inner(builder: Option<Builder>) -> Result<&'static Generator> {
        let _guard = INIT.lock();
        if SHUT_DOWN.load(SeqCst) {
            return Err(Error::Closed);
        }
        let existing = match (GLOBAL.get(), REOPENED.get()) {
            // A child of `fork()`: the parent's generator issues from one
            // it opens in the child; one opened here from `builder` does
            // instead. Without a builder the parent's is reported.
            (Some(g), None) if g.forked() => match builder {
                None => Some(g),
                Some(builder) => {
                    let generator = builder.open()?;
                    crate::exit::install(close_at_exit);
                    return Ok(REOPENED.get_or_init(|| generator));
                }
            },
            // In a child of a child, the first child's generator stays
            // (and opens one of its own in the grandchild).
            (Some(g), Some(r)) if g.forked() => Some(r),
            (g, _) => g,
        };
        if let Some(g) = existing {
            return match builder {
                Some(_) => Err(Error::AlreadyInitialized),
                None => Ok(g),
            };
        }
        let generator = builder.unwrap_or_default().open()?;
        crate::exit::install(close_at_exit);
        Ok(GLOBAL.get_or_init(|| generator))
    }
}

/// Closes the process-wide generator as the process exits (see
/// [`exit`](crate::exit)): the one this process opened, never a parent's
/// copy after `fork()`. Skipped if another thread is opening it just then.
pub(crate) fn close_at_exit() {
    let _ = RUNS_EXIT.try_with(|runs| runs.set(true));
    EXITING.store(true, SeqCst);
    let Some(_guard) = INIT.try_lock() else {
        return;
    };
    let generator = match (GLOBAL.get(), REOPENED.get()) {
        (_, Some(reopened)) if !reopened.forked() => reopened,
        (Some(global), _) => global,
        (None, _) => return,
    };
    if let Err(e) = generator.close() {
        log::warn!("closing the process-wide generator at exit: {e}");
    }
}

/// Why `IdUtil::next_id()` or `next()` got no ID: a panic, except in a
/// thread other than the one exiting once the exit hook closed the
/// generator, which waits for the process to end.
#[cold]
#[inline(never)]
fn cannot_issue(e: Error) -> ! {
    let exiting = EXITING.load(SeqCst) && !RUNS_EXIT.try_with(|runs| runs.get()).unwrap_or(true);
    if exiting && matches!(e, Error::Closed) {
        loop {
            std::thread::park();
        }
    }
    panic!("idutil: cannot issue an ID: {e}")
}
