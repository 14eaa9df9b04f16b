//! One state directory per shard and ID space on a host.
//!
//! The processes of a host that open a shard with the same state
//! directory share it (see [`state`](crate::state), *Processes sharing a
//! shard*); two directories for one shard would be two independent
//! counters issuing the same IDs. So every generator also holds its shard
//! on the host through a `flock` on a file in a host-wide directory,
//! `/run/lock/idutil.<ID space>.shard-<N>.lock` (or in `/dev/shm`, else
//! `/tmp`, where there is no `/run/lock`), for its whole life: shared by
//! the generators of one state directory, whose identity (device, inode
//! and path) the first of them writes into the file, and exclusive for a
//! generator that holds its shard alone (a leased one). The kernel drops
//! the lock when the process exits, however it exits. A generator for the
//! shard in the same ID space with another state directory, in this
//! process or another, gets [`Error::HostLocked`] naming the holder's pid
//! (from `/proc/locks`, when the holder runs in this process's PID
//! namespace), its user (from `/proc/<pid>`) and both directories. The last holder removes the file when it lets go, and
//! every taker checks after locking that the file it locked is still the
//! one at the path, so a file removed meanwhile is never shared.
//!
//! A file removed while generators hold it (by root's cleanup of
//! `/run/lock`, or by the user who created it) does not let another
//! directory in: every holder also **marks the lock directory itself**,
//! with read locks on a few bytes of it (open file description locks,
//! `F_OFD_SETLK`, in a range of 8 KiB the lock file's name picks): the
//! bytes say which state directory it shares the shard through (its
//! device and inode), or that it holds the shard alone. Removing a file
//! leaves them in place; the kernel drops them when the holder exits,
//! however it exits. Every taker marks the directory before it checks that
//! the file it locked is still the one at the path, then asks the kernel
//! (`F_OFD_GETLK`) whether another holder marks the shard for another
//! directory, or alone, and refuses the shard if so. [`holder`] tells who
//! holds a shard, a holder known only by its marks included.
//!
//! The marks, and not something else, because the meeting point must be
//! one that removing a file cannot take away, and that every process
//! sharing the lock file shares: the directory that holds the file is
//! both, and a mark is asked of the kernel, so nothing is served and no
//! PID namespace hides it. `/proc` is not enough: its `/proc/locks` leaves
//! out the locks of processes outside the PID namespace it was mounted
//! for, as `/proc/<pid>/fd` does their files, so a generator in a
//! container or under `unshare --pid` sees no holder there. An abstract
//! Unix socket name survives `rm` too, but it belongs to the network
//! namespace, not to the processes that share the lock directory, and
//! telling its holder's state directory would mean answering on it (the
//! socket earlier releases used could be flooded).
//!
//! `/proc` still helps where it can: a generator that finds itself alone
//! on the lock file reads all of `/proc/locks` (a line at a time, however
//! many locks the host holds) for processes holding a removed file of
//! this name, which names the holder's pid and state directory in the
//! error (a holder in another PID namespace is named by no pid) and finds
//! generators of earlier releases, which leave no marks. Where the lock
//! directory takes no marks (Linux before 3.15, a platform whose file
//! offsets have 32 bits, some network file systems), a warning says so and
//! `/proc` is all there is. Removing the lock directory itself (`rm -r
//! /run/lock`) removes the marks with it: do not. Two names whose ranges
//! meet (one chance in 2<sup>50</sup> per pair) only ever refuse each other.
//!
//! The threads of one process share their reads of `/proc/locks` (the
//! kernel lists it under one host-wide lock): one read serves every thread
//! that asked before it began, and none gets a read that began before its
//! call. The first member of a state directory writes the directory into
//! the file as soon as it holds it alone, then checks the marks and
//! `/proc`, then shares it; a generator of the same directory that finds
//! the file held alone and naming its directory waits up to 5 s for the
//! share (those checks can take seconds on busy cores), where any other
//! holder is refused after a few tries, within a fraction of a second.
//!
//! The scope is the lock directory: processes that see the same
//! `/run/lock`, in any PID or network namespace, share the lock and the
//! marks, while containers with a `/run/lock` of their own are separate
//! hosts to it, so give them distinct shards (or a lease). Outside Linux
//! only the state directory's lock applies, and a generator holds its
//! shard alone.
//!
//! # ID spaces
//!
//! Two settings carry the words "ID space", and they are two different
//! things with two defaults. The **host's ID space**, here, scopes this
//! per-host lock ([`Builder::id_space`](crate::Builder::id_space), default
//! `default`). The **lease's ID space** is a fleet's name in its lease
//! store, which every host of the fleet shares
//! (`lease::LeaseConfig::prefix`, features `postgres-lease` or `redis`,
//! default `idutil`: the Redis key prefix,
//! the `space` column of PostgreSQL's table; the lease's docs call it the
//! ID space). A leased generator has both, and the two names need not
//! match.
//!
//! The lock is per host's ID space ([`Builder::id_space`](crate::Builder::id_space),
//! [`env::ID_SPACE`](crate::env::ID_SPACE), `idutil --id-space NAME`;
//! names as [`check_id_space`] allows; default `default`), so that
//! independent ID spaces, such as two apps with separate databases on one
//! host, can use the same shard numbers. **Generators whose IDs go into the
//! same table must share an ID space**: in two spaces, the same shard
//! issues the same IDs. The default puts every generator on a host in one
//! space, which is always safe.
//!
//! # Another local user
//!
//! A lock that must stop two users' generators (an application's, and an
//! administrator's `sudo idutil next`) from sharing a shard needs a name
//! every user can take, and a name every user can take can be taken first
//! by a hostile one: no shared mechanism prevents that, and a per-user one
//! would let two users issue the same IDs. So the name is shared, and the
//! cost of hostility is kept small and visible:
//!
//! - Nothing is served: the generator reads the lock file only when it
//!   takes it, and answers nothing on it, so another user who opens,
//!   probes or floods it, or the directory, costs a running generator
//!   nothing, and cannot stall an ID, a save or a SIGTERM.
//! - Another user cannot join the processes sharing a shard: they share
//!   it through the state directory, which is its owner's alone
//!   ([`state`](crate::state), *Security*).
//! - A name held by a process of another user is refused as
//!   [`Error::HostLocked`] naming the holder's
//!   pid, its user and the file, and saying that if it is not an idutil
//!   generator of that user it took the name to block the shard, which an
//!   administrator can end (root can remove the file; `/run/lock` is
//!   sticky, so its owner and root are the only ones who can). A file
//!   idutil never makes (a FIFO, a symbolic link, another user's file this
//!   user may not open) is
//!   [`Error::HostLockUnusable`], refused
//!   at once, never followed or waited on.
//! - Marks on the lock directory are the same: any user who may read the
//!   directory can mark a shard's range, and then the shard is refused as
//!   [`Error::HostLocked`] with no pid (an administrator finds the holder
//!   by its `OFDLCK` on the directory in the `lock:` lines of
//!   `/proc/<pid>/fdinfo/*`, as a recent `lslocks` does, and ends it).
//!   Marks are only read when a generator takes the shard, never
//!   afterwards.
//! - Meanwhile another shard, or an ID space of its own for IDs that never
//!   share a table, goes on. A hostile user can take every name of an ID
//!   space it knows: that is a denial of service an administrator ends,
//!   not a duplicate ID.

use crate::error::{Error, Result};

/// The host's ID space generators use when none is named (not the lease's,
/// `lease::DEFAULT_PREFIX`: see [*ID spaces*](self#id-spaces)).
pub const DEFAULT_ID_SPACE: &str = "default";

/// Checks an ID space name: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
///
/// # Errors
///
/// The reason, when the name is not valid.
pub fn check_id_space(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        return Err("an ID space name cannot be empty");
    }
    if name.len() > 64 {
        return Err("an ID space name has at most 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("an ID space name may hold only letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// The ID space from `explicit`, else
/// [`IDUTIL_ID_SPACE`](crate::env::ID_SPACE), else [`DEFAULT_ID_SPACE`].
///
/// # Errors
///
/// [`Error::InvalidIdSpace`] for a bad explicit name,
/// [`Error::InvalidEnv`] for a bad [`IDUTIL_ID_SPACE`](crate::env::ID_SPACE).
pub fn resolve_id_space(explicit: Option<&str>) -> Result<String> {
    if let Some(name) = explicit {
        check_id_space(name).map_err(|reason| Error::InvalidIdSpace {
            name: name.to_string(),
            reason,
        })?;
        return Ok(name.to_string());
    }
    match std::env::var_os(crate::env::ID_SPACE) {
        None => Ok(DEFAULT_ID_SPACE.to_string()),
        Some(value) => {
            let text = value.to_string_lossy().into_owned();
            match value.to_str().map(check_id_space) {
                Some(Ok(())) => Ok(text),
                Some(Err(reason)) => Err(Error::InvalidEnv {
                    var: crate::env::ID_SPACE,
                    value: text,
                    reason,
                }),
                None => Err(Error::InvalidEnv {
                    var: crate::env::ID_SPACE,
                    value: text,
                    reason: "not valid UTF-8",
                }),
            }
        }
    }
}

/// Who holds a shard of an ID space on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostHolder {
    /// No generator on this host holds it.
    None,
    /// A process holds it; its pid could not be learnt.
    Unknown,
    /// The process with this pid holds it.
    Pid(u32),
}

/// The directories that may hold the per-host lock files, in order: the
/// first that exists is the one every process on the host uses.
#[cfg(target_os = "linux")]
const LOCK_DIRS: [&str; 3] = ["/run/lock", "/dev/shm", "/tmp"];

fn lock_name(id_space: &str, shard: u32) -> String {
    format!("idutil.{id_space}.shard-{shard}.lock")
}

/// The per-host hold on a shard of an ID space, released when dropped.
#[derive(Debug)]
pub(crate) struct HostLock {
    #[cfg(target_os = "linux")]
    _held: linux::Held,
}

/// The state directory a shared hold is for: its `(device, inode)`, and
/// its path for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirIdentity {
    pub(crate) id: (u64, u64),
    pub(crate) path: std::path::PathBuf,
}

#[cfg(target_os = "linux")]
impl HostLock {
    /// Takes the shard of `id_space` for this process.
    ///
    /// # Errors
    ///
    /// [`Error::HostLocked`] if a process on this host holds it;
    /// [`Error::HostLockUnusable`] if its lock file cannot be used (another
    /// user's file this user may not open, a symbolic link, not a regular
    /// file); [`Error::Io`] if the lock directory or file cannot be read.
    pub(crate) fn acquire(id_space: &str, shard: u32) -> Result<HostLock> {
        Ok(HostLock {
            _held: linux::acquire(id_space, shard, None)?,
        })
    }

    /// Joins the processes of this host that hold the shard of `id_space`
    /// with the state directory `dir`: a shared hold, refused
    /// ([`Error::HostLocked`], naming the other directory) while processes
    /// hold the shard with another state directory or exclusively, even
    /// when the file they hold was removed from the lock directory.
    ///
    /// # Errors
    ///
    /// As [`HostLock::acquire`].
    pub(crate) fn join(id_space: &str, shard: u32, dir: &DirIdentity) -> Result<HostLock> {
        Ok(HostLock {
            _held: linux::acquire(id_space, shard, Some(dir))?,
        })
    }
}

#[cfg(not(target_os = "linux"))]
impl HostLock {
    /// No per-host lock outside Linux: only the state directory's applies.
    pub(crate) fn acquire(_id_space: &str, _shard: u32) -> Result<HostLock> {
        Ok(HostLock {})
    }

    /// No per-host lock outside Linux: only the state directory's applies.
    pub(crate) fn join(_id_space: &str, _shard: u32, _dir: &DirIdentity) -> Result<HostLock> {
        Ok(HostLock {})
    }
}

/// The pid holding a `flock` on `file`, from `/proc/locks` (Linux only):
/// `None` also when `/proc` numbers processes in another PID namespace
/// than this process's, where its pid would name another process here.
pub(crate) fn flock_holder(file: &std::fs::File) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let st = rustix::fs::fstat(file).ok()?;
        linux::flock_holder(&st).filter(|_| procfs::pids_are_ours())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Who holds the `flock` on a file, as far as `/proc` lets this process
/// tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlockHolder {
    /// This process.
    ThisProcess,
    /// Another process, by its pid as `/proc` numbers it; `ours` when
    /// that is this process's PID namespace.
    Process { pid: u32, ours: bool },
    /// Nothing `/proc/locks` shows: a process of another PID namespace
    /// (whose locks it leaves out), or nobody any more.
    Hidden,
    /// `/proc/locks` cannot be read (or there is none: outside Linux).
    Unknown,
}

/// Who holds the `flock` on `file`: another process rather than this one
/// when both do.
pub(crate) fn flock_holder_of(file: &std::fs::File) -> FlockHolder {
    #[cfg(target_os = "linux")]
    {
        let Some(pids) = rustix::fs::fstat(file)
            .ok()
            .and_then(|st| procfs::flock_pids(&st))
        else {
            return FlockHolder::Unknown;
        };
        let me = procfs::self_in_proc();
        match pids.iter().find(|&&pid| Some(pid) != me) {
            Some(&pid) => FlockHolder::Process {
                pid,
                ours: me == Some(std::process::id()),
            },
            None if pids.is_empty() => FlockHolder::Hidden,
            None => FlockHolder::ThisProcess,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        FlockHolder::Unknown
    }
}

/// How the process `/proc` numbers `pid` is (Linux; elsewhere
/// [`ProcessState::Gone`]).
pub(crate) fn process_state(pid: u32) -> ProcessState {
    #[cfg(target_os = "linux")]
    {
        procfs::process_state(pid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        ProcessState::Gone
    }
}

/// How a process is, from the state of each of its threads in
/// `/proc/<pid>/task/*/stat` on Linux; elsewhere nothing tells, and a
/// holder is [`ProcessState::Gone`].
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcessState {
    /// A thread runs or waits for a CPU (`R`), or waits on a disk (`D`):
    /// it goes on by itself.
    Live,
    /// Stopped (`T`: `SIGSTOP`, a terminal's Ctrl-Z) or stopped by a
    /// debugger (`t`), and no thread runs.
    Stopped,
    /// Every thread sleeps (`S`), waiting for something else: another
    /// process, a pipe, a timer.
    Asleep,
    /// Gone, or not shown.
    Gone,
}

/// Who holds `shard` of `id_space` on this host. Never blocks and never
/// creates anything: a holder whose pid cannot be learnt is
/// [`HostHolder::Unknown`]. Outside Linux, always [`HostHolder::None`].
pub fn holder(id_space: &str, shard: u32) -> HostHolder {
    #[cfg(target_os = "linux")]
    {
        linux::holder(id_space, shard)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (id_space, shard);
        HostHolder::None
    }
}

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod marks;
#[cfg(target_os = "linux")]
mod procfs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_space_names() {
        for good in ["default", "a", "app-1.prod_eu", &"x".repeat(64)] {
            assert!(check_id_space(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65), "a\0b"] {
            assert!(check_id_space(bad).is_err(), "{bad:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn second_holder_is_refused_with_the_pid_until_the_first_goes() {
        let space = format!("unit-{}-hostlock", std::process::id());
        assert_eq!(holder(&space, 4), HostHolder::None);
        let first = HostLock::acquire(&space, 4).unwrap();
        match HostLock::acquire(&space, 4) {
            Err(Error::HostLocked {
                shard: 4, pid, uid, ..
            }) => {
                assert_eq!(pid, Some(std::process::id()));
                assert_eq!(uid, None, "the same user");
            }
            other => panic!("expected HostLocked, got {other:?}"),
        }
        // Another shard and another space are independent.
        let _other_shard = HostLock::acquire(&space, 5).unwrap();
        let _other_space = HostLock::acquire(&format!("{space}-b"), 4).unwrap();
        for _ in 0..300 {
            assert_eq!(holder(&space, 4), HostHolder::Pid(std::process::id()));
        }
        drop(first);
        assert_eq!(holder(&space, 4), HostHolder::None);
        let again = HostLock::acquire(&space, 4).unwrap();
        drop(again);
        // Released, the file is gone: nothing is left behind.
        let dir = LOCK_DIRS
            .iter()
            .find(|d| std::path::Path::new(d).is_dir())
            .unwrap();
        let path = std::path::Path::new(dir).join(lock_name(&space, 4));
        assert!(!path.exists(), "{} left behind", path.display());
    }
}
