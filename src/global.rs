//! The process-wide generator behind `IdUtil::next_id()`.

use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::generator::{Builder, Generator, IdBatch};

static GLOBAL: OnceLock<Generator> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());
/// In a child created by `fork()` after [`GLOBAL`] was set: the generator
/// opened in the child, which replaces the parent's (left as it is, never
/// dropped, as a `static` is). Set under [`INIT`].
static REOPENED: OnceLock<Generator> = OnceLock::new();

/// The one-line API: IDs from a process-wide [`Generator`], created on first
/// use from the environment (`IDUTIL_SHARD` or the host name,
/// `IDUTIL_STATE_DIR` or the platform's state directory).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
/// # std::env::set_var("IDUTIL_STATE_DIR", dir.path());
/// # std::env::set_var("IDUTIL_ID_SPACE", "doc-global"); // its own, beside other tests
/// # std::env::set_var("IDUTIL_SHARD", "1");
/// use idutil::IdUtil;
///
/// IdUtil::init()?; // optional: fail at start-up, not at the first ID
/// let id = IdUtil::next_id();
/// assert!(IdUtil::try_next_id()? > id);
/// # Ok::<(), idutil::Error>(())
/// ```
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
            Err(e) => panic!("idutil: cannot issue an ID: {e}"),
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
    /// Those of [`Builder::open`].
    pub fn init() -> Result<&'static Generator> {
        IdUtil::init_inner(None)
    }

    /// Creates the process-wide generator from `builder`.
    ///
    /// In a child created by `fork()` after the parent's process-wide
    /// generator opened, this opens the child's own (on another shard: the
    /// parent holds its shard), which later calls use; until then they
    /// fail with [`Error::Forked`]. This works once per process tree: in a
    /// child of that child, open a [`Generator`] of its own instead.
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
        // `REOPENED`; the parent's generator reports `Forked` itself.
        match (GLOBAL.get(), REOPENED.get()) {
            (Some(g), None) => Ok(g),
            (Some(_), Some(reopened)) => Ok(reopened),
            (None, _) => IdUtil::init(),
        }
    }

    /// Closes the process-wide generator cleanly (see
    /// [`Generator::close`]): call it at the end of `main` so a restart
    /// continues right after the last ID instead of after the reserved
    /// window. IDs requested afterwards fail with [`Error::Closed`].
    ///
    /// # Errors
    ///
    /// Those of [`Generator::close`].
    pub fn shutdown() -> Result<()> {
        if let Some(g) = REOPENED.get() {
            return g.close();
        }
        match GLOBAL.get() {
            Some(g) => g.close(),
            None => Ok(()),
        }
    }

    fn init_inner(builder: Option<Builder>) -> Result<&'static Generator> {
        let _guard = crate::sync::lock(&INIT);
        let existing = match (GLOBAL.get(), REOPENED.get()) {
            // A child of `fork()`: the parent's generator issues nothing
            // here (`Error::Forked`); one opened in the child does. Without
            // a builder the parent's is reported: the environment names the
            // parent's shard, which the parent holds.
            (Some(g), None) if g.forked() => match builder {
                None => Some(g),
                Some(builder) => {
                    let generator = builder.open()?;
                    return Ok(REOPENED.get_or_init(|| generator));
                }
            },
            // In a child of a child, the first child's generator (which
            // reports `Error::Forked`) stays: one reopening per process
            // tree.
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
        Ok(GLOBAL.get_or_init(|| generator))
    }
}
