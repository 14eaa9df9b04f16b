//! The crate's two error types: [`IdError`] for values, [`Error`] for
//! everything a generator and its state meet at run time.

mod display;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::shard::{HostnameProblem, ShardSource};
use crate::state::{ClaimHolder, Remedy};
pub use idutil_core::error::{EnvError, IdError};
use idutil_core::lease_error::LeaseError;

/// Everything that can go wrong while opening a generator, issuing IDs, or
/// looking after a shard's state.
///
/// Each message says what happened and, where there is one, what to do about
/// it in terms of this library and its environment variables. The `idutil`
/// command adds its own hints (its flags and sub-commands) when it prints
/// them. [`Error::path`] and [`Error::shard`] give the file and shard
/// involved, and [`Error::RecoveryRefused`] what would let a recovery go
/// ahead, for callers that want to react rather than print.
///
/// It is `Clone`: an I/O error is shared ([`Arc`]), so every call that
/// waited on the same failed reservation gets the same error, variant and
/// source included.
///
/// Its `Debug` form is the variant's name and the message, so a `main`
/// that returns the error with `?` prints what happened and what to do:
///
/// ```
/// fn main() -> Result<(), idutil::Error> {
///     let e = "12x".parse::<idutil::Id>().map_err(idutil::Error::from).unwrap_err();
///     // `main` returning `Err(e)` prints `Error: ` and this.
///     assert_eq!(format!("{e:?}"), r#"Id: invalid ID "12x": not a decimal integer"#);
///     Ok(())
/// }
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Error {
    /// A value that is not an ID, passed on with `?` from code that parses
    /// or builds IDs.
    Id(IdError),
    /// A batch larger than [`Generator::next_ids`](crate::Generator::next_ids)
    /// takes in one step.
    #[non_exhaustive]
    BatchTooLarge {
        /// The size asked for.
        n: u64,
        /// The largest batch.
        max: u64,
    },
    /// The shard is larger than the layout's shard field holds.
    #[non_exhaustive]
    ShardOutOfRange {
        /// The shard asked for.
        shard: u64,
        /// The largest shard the layout holds.
        max: u64,
        /// Where the shard came from.
        source: ShardSource,
    },
    /// An environment variable (`IDUTIL_SHARD`, `IDUTIL_STATE_DIR`, ...;
    /// [`env`](crate::env) lists them) holds a value that cannot be used.
    #[non_exhaustive]
    InvalidEnv {
        /// The variable's name.
        var: &'static str,
        /// Its value, lossily decoded.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The host name could not be read.
    Hostname(Arc<io::Error>),
    /// The host name cannot choose the shard: its number is beyond the
    /// layout's shard range, or its ending looks random (a container id, a
    /// Kubernetes Deployment pod) so that hosts named like it would
    /// collide. [The host-name rule](crate::shard#the-host-name-rule) says
    /// which names choose a shard.
    #[non_exhaustive]
    UnusableHostname {
        /// The host name, as read.
        host: String,
        /// Why it cannot choose the shard.
        problem: HostnameProblem,
    },
    /// No state directory was given and no platform default could be found.
    NoStateDir,
    /// The generator reached the last second its layout can represent.
    #[non_exhaustive]
    EndOfRange {
        /// The last representable second, in seconds since the Unix epoch.
        last_unix_second: u64,
    },
    /// The shard reached the end margin of its layout's range (see
    /// [`Builder::end_margin`](crate::Builder::end_margin)): the last
    /// seconds, kept clear so that a clock far ahead for a moment cannot
    /// use the shard up. A recovery that vouches for the time the clock
    /// skipped ([`RecoverOptions::unused`](crate::state::RecoverOptions::unused))
    /// brings the shard back.
    #[non_exhaustive]
    EndMarginReached {
        /// The shard.
        shard: u32,
        /// The first second of the margin (Unix seconds).
        from: u64,
        /// The margin, in seconds.
        margin: u64,
        /// The layout's last second (Unix seconds).
        last_unix_second: u64,
    },
    /// The wall clock reads a second outside the layout's range: before
    /// its epoch or after its last second (less the generator's end margin,
    /// [`Builder::end_margin`](crate::Builder::end_margin)). Nothing is
    /// issued or recorded on such a reading; generators work again once
    /// the clock is sane.
    #[non_exhaustive]
    ClockOutOfRange {
        /// The clock's reading, in seconds since the Unix epoch.
        unix_second: u64,
        /// The layout's epoch, its first second.
        first: u64,
        /// The last second a generator acts on: the layout's last second
        /// less the end margin.
        last: u64,
    },
    /// Issuing would take the generator further ahead of the wall clock than
    /// its `max_lead` allows (only from the non-waiting calls).
    #[non_exhaustive]
    LeadCapReached {
        /// The lead the ID would have had, in seconds.
        lead: u64,
        /// The configured cap, in seconds.
        max_lead: u64,
    },
    /// Another generator (in this process or another) holds the shard's
    /// lock file in the state directory ([`state`](crate::state), *The two
    /// files of a shard*).
    #[non_exhaustive]
    Locked {
        /// The shard.
        shard: u32,
        /// The state directory.
        dir: PathBuf,
        /// The pid recorded by the holder, when it could be read.
        pid: Option<u32>,
    },
    /// A process on this host holds the shard in the same ID space,
    /// whatever its state directory (Linux; see
    /// [`host_lock`](crate::host_lock)): another generator, or, when it runs
    /// as another user, possibly a process that took the name to block the
    /// shard.
    #[non_exhaustive]
    HostLocked {
        /// The shard.
        shard: u32,
        /// The ID space.
        id_space: String,
        /// The holder's pid, when the system tells (`/proc/locks`).
        pid: Option<u32>,
        /// The holder's user, when it is not this process's user.
        uid: Option<u32>,
        /// The per-host lock file.
        lock_file: PathBuf,
        /// The state directory the holders use, when it is another one
        /// than [`dir`](Error::HostLocked::dir) and the lock file says.
        held_dir: Option<PathBuf>,
        /// The state directory of the generator that was refused, when it
        /// asked to share the shard.
        dir: Option<PathBuf>,
    },
    /// A process sharing the shard held its short lock (the claim file's,
    /// see [`state`](crate::state#processes-sharing-a-shard)) for longer
    /// than a generator waits for it with no member making progress (see
    /// [`Builder::member_wait`](crate::Builder::member_wait)): stopped
    /// (`SIGSTOP`, a debugger), asleep while it holds the lock, or stuck on
    /// a disk that does not answer. Nothing was issued by the call; a later
    /// one tries again.
    #[non_exhaustive]
    MemberStalled {
        /// The shard.
        shard: u32,
        /// The state directory.
        dir: PathBuf,
        /// The pid of the other process holding the lock, in this
        /// process's PID namespace, when the system tells (`/proc/locks`):
        /// the pid of [`ClaimHolder::Process`], else `None`.
        pid: Option<u32>,
        /// Who held the lock, as far as this process could tell.
        holder: ClaimHolder,
        /// How long this generator waited with no member making progress.
        waited: std::time::Duration,
    },
    /// The shard's per-host lock file cannot be used: another user's file
    /// this user may not open, a symbolic link, or not a regular file.
    /// idutil never makes such a file; someone else did, perhaps to block
    /// the shard. See [`host_lock`](crate::host_lock), *Another local user*.
    #[non_exhaustive]
    HostLockUnusable {
        /// The shard.
        shard: u32,
        /// The ID space.
        id_space: String,
        /// The per-host lock file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An ID space name that
    /// [`check_id_space`](crate::host_lock::check_id_space) refuses.
    #[non_exhaustive]
    InvalidIdSpace {
        /// The name, as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A relative state directory: it would name a different directory in
    /// each working directory.
    #[non_exhaustive]
    RelativeStateDir {
        /// The directory, as given.
        path: PathBuf,
    },
    /// The state directory named (by [`Builder::state_dir`](crate::Builder::state_dir)
    /// or [`IDUTIL_STATE_DIR`](crate::env::STATE_DIR); the command's
    /// `--state-dir`) cannot be one: the path names something that is not a
    /// directory, or lies under one, or under a missing parent (only the
    /// default state directory is created with its parents). The setting is
    /// wrong, not the directory: name another (the command exits 2). The
    /// rules: [`state`](crate::state), *Security: the directory is a trust
    /// boundary*.
    #[non_exhaustive]
    UnusableStateDir {
        /// The directory, as named.
        path: PathBuf,
        /// What is wrong, and what to do about it.
        reason: String,
    },
    /// A state directory or file that cannot be trusted: a symbolic link,
    /// not a regular file, too large, owned by another user, or writable by
    /// group or others. The message says how to fix it. The checks:
    /// [`state`](crate::state), *Security: the directory is a trust
    /// boundary*.
    #[non_exhaustive]
    Untrusted {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong, and what to do about it.
        reason: String,
    },
    /// The platform's default state directory (`$XDG_STATE_HOME/idutil` or
    /// `~/.local/state/idutil`, used because
    /// [`IDUTIL_STATE_DIR`](crate::env::STATE_DIR) is not set) cannot be
    /// created or used: `source` says why. The message says to set
    /// `IDUTIL_STATE_DIR`.
    #[non_exhaustive]
    DefaultStateDir {
        /// The default state directory.
        path: PathBuf,
        /// What went wrong there: [`Error::Io`] or [`Error::Untrusted`].
        source: Box<Error>,
    },
    /// The state directory or the shard's lock file was deleted or replaced
    /// while the generator held it. The generator stopped issuing for good
    /// and writes nothing more; every later call returns this error
    /// ([`state`](crate::state), *Older copies and deleted files*).
    #[non_exhaustive]
    StateReplaced {
        /// The shard.
        shard: u32,
        /// What was found.
        reason: String,
    },
    /// The state directory or file could not be created, read or written.
    #[non_exhaustive]
    Io {
        /// What was being done, e.g. `"create the state directory"`.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error, also [`source`](std::error::Error::source)'s.
        source: Arc<io::Error>,
    },
    /// The state file exists but cannot be trusted: unreadable, truncated,
    /// corrupt, from an unknown version, or written for another layout or
    /// shard. It is never reset silently.
    #[non_exhaustive]
    BadState {
        /// The state file.
        path: PathBuf,
        /// The shard it belongs to.
        shard: u32,
        /// What is wrong with it.
        reason: String,
        /// What lets the shard go on: [`Remedy::Recover`], or
        /// [`Remedy::After`] when the file is gone and nothing says how far
        /// the shard got.
        remedy: Remedy,
    },
    /// [`state::recover`](crate::state::recover) (the command `idutil state
    /// recover`) refused to restart a shard's state: it cannot know where to
    /// resume (no state file, or a high-water mark that cannot be read with
    /// certainty, and no time vouched for), the state file is healthy and
    /// the recovery was not forced, or resuming would leave no second of the
    /// layout.
    #[non_exhaustive]
    RecoveryRefused {
        /// The state file.
        path: PathBuf,
        /// The shard.
        shard: u32,
        /// Why.
        reason: String,
        /// What would let the recovery go ahead, if anything can: `None`
        /// when resuming would leave no second of the layout.
        remedy: Option<Remedy>,
    },
    /// The generator was opened by the parent of this process, and this
    /// process was made by a fork that ran no fork handlers (the `clone`
    /// or `fork` system call made directly, glibc's `_Fork`): its copy of
    /// the generator issues nothing (see
    /// [`Generator`](crate::Generator#fork), *`fork()`*). A child of
    /// `fork()` never gets it: its calls go to a generator of its own.
    #[non_exhaustive]
    Forked {
        /// The parent's shard.
        shard: u32,
    },
    /// The generator was closed; it issues no more IDs.
    Closed,
    /// The process-wide generator was already initialized.
    AlreadyInitialized,
    /// The shard lease (features `postgres-lease`, `redis`): no free shard,
    /// the lease could not be renewed in time or was lost, the clocks
    /// disagree, or the store could not be reached.
    Lease(LeaseError),
}

impl Error {
    /// [`Error::BadState`] for the state file at `path`.
    pub(crate) fn bad_state(path: &Path, shard: u32, reason: String, remedy: Remedy) -> Error {
        Error::BadState {
            path: path.to_path_buf(),
            shard,
            reason,
            remedy,
        }
    }

    /// What lets the shard go on after [`Error::BadState`] or
    /// [`Error::RecoveryRefused`], if anything can.
    ///
    /// ```
    /// # fn handle(e: idutil::Error) {
    /// use idutil::state::Remedy;
    /// if e.remedy() == Some(Remedy::Recover) {
    ///     eprintln!("run: idutil state recover");
    /// }
    /// # }
    /// ```
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::BadState { remedy, .. } => Some(*remedy),
            Error::RecoveryRefused { remedy, .. } => *remedy,
            Error::DefaultStateDir { source, .. } => source.remedy(),
            _ => None,
        }
    }

    /// The file or directory involved, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Locked { dir, .. } | Error::MemberStalled { dir, .. } => Some(dir),
            Error::DefaultStateDir { source, .. } => source.path(),
            Error::Io { path, .. }
            | Error::BadState { path, .. }
            | Error::RecoveryRefused { path, .. }
            | Error::RelativeStateDir { path }
            | Error::UnusableStateDir { path, .. }
            | Error::Untrusted { path, .. }
            | Error::HostLockUnusable { path, .. }
            | Error::HostLocked {
                lock_file: path, ..
            } => Some(path),
            _ => None,
        }
    }

    /// The shard involved, if any. A shard number too large for a `u32`
    /// (from `IDUTIL_SHARD` or a host name) gives `None`; the message still
    /// names it.
    pub fn shard(&self) -> Option<u32> {
        match self {
            Error::ShardOutOfRange { shard, .. } => u32::try_from(*shard).ok(),
            Error::UnusableHostname {
                problem: HostnameProblem::OutOfRange { digits, .. },
                ..
            } => digits.parse().ok(),
            Error::Locked { shard, .. }
            | Error::BadState { shard, .. }
            | Error::RecoveryRefused { shard, .. }
            | Error::HostLocked { shard, .. }
            | Error::HostLockUnusable { shard, .. }
            | Error::StateReplaced { shard, .. }
            | Error::MemberStalled { shard, .. }
            | Error::EndMarginReached { shard, .. }
            | Error::Forked { shard } => Some(*shard),
            Error::Lease(e) => e.shard(),
            _ => None,
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            action,
            path: path.to_path_buf(),
            source: Arc::new(source),
        }
    }
}

impl From<IdError> for Error {
    fn from(e: IdError) -> Self {
        Error::Id(e)
    }
}

impl From<EnvError> for Error {
    fn from(e: EnvError) -> Self {
        let EnvError { var, value, reason } = e;
        Error::InvalidEnv { var, value, reason }
    }
}

impl From<LeaseError> for Error {
    fn from(e: LeaseError) -> Self {
        Error::Lease(e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
