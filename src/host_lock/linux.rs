//! The per-host lock on Linux: taking and sharing the lock file in the
//! host-wide directory, the state directory it names, the marks on the
//! directory that outlive a removed file, and the holders `/proc` tells of.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::marks::{Mark, Slot};
use super::procfs::{self, device_of, flocks, lock_key, uid_of};
use super::{lock_name, DirIdentity, HostHolder, LOCK_DIRS};
use crate::error::{Error, Result};
use crate::flock::{change_flock, try_flock, Flock};

/// How long a generator waits for a member of its own state directory
/// that holds the per-host lock file alone while it checks the host,
/// before it shares the file: its checks read `/proc`, which on busy
/// cores with many processes can take seconds.
const FORMING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A held per-host lock: the open lock file (closing it releases the
/// `flock`), and where it is, to remove it on release.
#[derive(Debug)]
pub(super) struct Held {
    // Held for the `flock`; closing it releases the lock.
    _file: File,
    dir: OwnedFd,
    name: String,
    ours: bool,
    /// A shared hold, one of the members of a state directory.
    shared: bool,
    /// Where this holder's marks are on the lock directory (`dir`), if
    /// the directory takes them.
    marked: Option<Slot>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // The marks first: from here on this holder is leaving. (A child
        // of `fork()` shares the directory's open description, and with
        // it the marks, unless they are let go here.)
        if let Some(slot) = self.marked {
            slot.release(self.dir.as_fd());
        }
        // The last member takes the lock exclusively (a failed attempt
        // drops the shared hold, which is being let go anyway).
        if self.shared && !try_flock(&self._file, Flock::Exclusive).unwrap_or(false) {
            return;
        }
        // Removed while still locked: a taker that opened this file
        // before the removal finds, after locking it, that the path
        // names another file or none, and starts over.
        if self.ours {
            let _ = rfs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
        }
        // A child of `fork()` keeps a copy of the open file, and with
        // it the lock, unless it is let go here.
        let _ = fs2::FileExt::unlock(&self._file);
    }
}

/// The host-wide lock directory: the first of [`LOCK_DIRS`] that is a
/// directory, opened.
fn lock_dir() -> Result<(PathBuf, OwnedFd)> {
    for dir in LOCK_DIRS {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rfs::open(dir, flags, Mode::empty()) {
            Ok(fd) => return Ok((PathBuf::from(dir), fd)),
            Err(Errno::NOENT | Errno::NOTDIR) => continue,
            Err(e) => {
                return Err(Error::io(
                    "open the per-host lock directory",
                    Path::new(dir),
                    e.into(),
                ))
            }
        }
    }
    Err(Error::io(
        "find a per-host lock directory (/run/lock, /dev/shm or /tmp) for",
        Path::new("/run/lock"),
        io::ErrorKind::NotFound.into(),
    ))
}

/// Opens the lock file without following a symbolic link and without
/// blocking on a FIFO: read-write if this user may, else read-only (a
/// `flock` needs no more). `None` if there is no such file.
fn open_existing(dir: &OwnedFd, name: &str) -> std::result::Result<Option<(File, bool)>, Errno> {
    let base = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    for access in [OFlags::RDWR, OFlags::RDONLY] {
        match rfs::openat(dir, name, access | base, Mode::empty()) {
            Ok(fd) => return Ok(Some((File::from(fd), access == OFlags::RDWR))),
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::ACCESS) if access == OFlags::RDWR => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("the read-only attempt returns")
}

fn same_file(a: &rfs::Stat, b: &rfs::Stat) -> bool {
    (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
}

pub(super) fn acquire(id_space: &str, shard: u32, shared: Option<&DirIdentity>) -> Result<Held> {
    let (dir_path, dir) = lock_dir()?;
    let name = lock_name(id_space, shard);
    let path = dir_path.join(&name);
    let slot = Slot::of(&name);
    let unusable = |reason: String| Error::HostLockUnusable {
        shard,
        id_space: id_space.to_string(),
        path: path.clone(),
        reason,
    };
    let euid = rustix::process::geteuid().as_raw();
    let refused = |pid: Option<u32>, held_dir: Option<PathBuf>| Error::HostLocked {
        shard,
        id_space: id_space.to_string(),
        pid,
        uid: pid.and_then(uid_of).filter(|&u| u != euid),
        lock_file: path.clone(),
        held_dir,
        dir: shared.map(|d| d.path.clone()),
    };
    // A few rounds: a file removed by its last holder between our open
    // and our lock, a lock held for an instant by a child between
    // fork and exec (it holds a copy of every descriptor until exec
    // closes it), or by a member writing the file before it shares
    // it, is not a holder. A file held alone that already names our
    // state directory is a member of it checking the host before it
    // shares the file (see below): waited for longer, up to
    // `FORMING_WAIT`, since on busy cores its checks can outlast the
    // rounds.
    let mut last_err = None;
    let started = std::time::Instant::now();
    let mut forming = false;
    let mut round = 0;
    loop {
        round += 1;
        if round > 20 && !(forming && started.elapsed() < FORMING_WAIT) {
            break;
        }
        let (file, ours, writable) = match open_existing(&dir, &name) {
            Ok(Some((file, writable))) => (file, false, writable),
            Ok(None) => {
                let flags = OFlags::RDWR
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                match rfs::openat(&dir, name.as_str(), flags, Mode::from_raw_mode(0o644)) {
                    Ok(fd) => {
                        // Readable by every user, whatever the umask: a
                        // generator of another user takes it read-only.
                        rfs::fchmod(&fd, Mode::from_raw_mode(0o644))
                            .map_err(|e| Error::io("set the mode of", &path, e.into()))?;
                        (File::from(fd), true, true)
                    }
                    Err(Errno::EXIST) => continue,
                    Err(e) => return Err(Error::io("create", &path, e.into())),
                }
            }
            Err(Errno::LOOP) => {
                return Err(unusable(format!(
                    "it is a symbolic link{}, which idutil never follows",
                    owner_of(&dir, &name)
                )))
            }
            Err(Errno::ACCESS) => {
                return Err(unusable(format!(
                    "this user (uid {euid}) may not open it{}",
                    owner_of(&dir, &name)
                )))
            }
            Err(e) => return Err(Error::io("open", &path, e.into())),
        };
        let st = rfs::fstat(&file).map_err(|e| Error::io("examine", &path, e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(unusable(format!(
                "it is not a regular file{}",
                owner_of(&dir, &name)
            )));
        }
        let lock_error = |e| Error::io("lock", &path, e);
        let sole = if try_flock(&file, Flock::Exclusive).map_err(lock_error)? {
            true
        } else if shared.is_some() && try_flock(&file, Flock::Shared).map_err(lock_error)? {
            false
        } else {
            forming = shared.is_some_and(|identity| {
                read_identity(&file).is_some_and(|(id, _)| id == identity.id)
            });
            last_err = Some(fs2::lock_contended_error());
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        // Still the file at the path? Its last holder may have removed
        // it after we opened it; then a new one may be locked by now.
        if !still_at(&dir, &name, &st, &path)? {
            continue;
        }
        // The first member says at once which state directory holds the
        // shard, while it holds the file alone: the members of that
        // directory who find the file held meanwhile wait for it to be
        // shared (above), however long its checks below take.
        // A holder that shares with no one clears what a member wrote
        // before, so that no member waits for it as for one of its own.
        if sole && writable {
            match shared {
                Some(identity) => write_identity(&file, identity),
                None => file.set_len(0),
            }
            .map_err(|e| Error::io("write", &path, e))?;
        }
        if let (Some(identity), false) = (shared, sole) {
            // Members hold it: theirs must be our state directory.
            match read_identity(&file) {
                Some((id, _)) if id == identity.id => {}
                Some((_, held_dir)) => {
                    return Err(refused(own_pid(flock_holder(&st)), Some(held_dir)));
                }
                // Not written (yet): a member about to write it, or
                // a process that is no member. Let go and try again.
                None => {
                    let _ = fs2::FileExt::unlock(&file);
                    last_err = Some(fs2::lock_contended_error());
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            }
        }
        // Another user's file this user may not write cannot say which
        // state directory holds the shard: it is held exclusively, as a
        // generator of another kind would.
        let mark = match shared {
            Some(identity) if writable || !sole => Mark::Dir(identity.id),
            _ => Mark::Exclusive,
        };
        // The marks on the directory, which a removal of the file leaves
        // in place. Taken before the path is checked again: a holder
        // whose file is removed after that check is marked, so whoever
        // takes the next file at the path sees it.
        let marked = match slot.hold(dir.as_fd(), mark) {
            Ok(()) => Some(slot),
            Err(e) => {
                unmarked(&dir_path, &e);
                None
            }
        };
        let unmark = || {
            if let Some(slot) = marked {
                slot.release(dir.as_fd());
            }
        };
        if !still_at(&dir, &name, &st, &path).inspect_err(|_| unmark())? {
            unmark();
            continue;
        }
        let conflict = match marked {
            Some(slot) => slot.conflicts(dir.as_fd(), mark).map_err(|e| {
                unmark();
                Error::io("examine the per-host lock directory for", &path, e)
            })?,
            None => false,
        };
        // Where `/proc` shows them (and for generators of releases that
        // left no marks): processes that hold a removed file of this
        // name, its state directory where this user may read it.
        let orphan = if sole || conflict {
            orphaned_holder(&dir_path, &name, &st)
        } else {
            None
        };
        let other_dir = match (&orphan, shared) {
            (Some((_, held_dir)), Some(identity)) => {
                held_dir.as_ref().map(|(held, _)| *held) != Some(identity.id)
            }
            (Some(_), None) => true,
            (None, _) => false,
        };
        if conflict || (sole && other_dir) {
            unmark();
            let (pid, held_dir) = match orphan {
                Some((pid, held_dir)) => (own_pid(Some(pid)), held_dir.map(|(_, p)| p)),
                None => (None, None),
            };
            return Err(refused(pid, held_dir));
        }
        let shared = match shared {
            // The first member, whose file names its state directory
            // (above): it shares it with the members of that directory.
            Some(_) if sole && writable => {
                if let Err(e) = change_flock(&file, Flock::Shared) {
                    unmark();
                    return Err(Error::io("share", &path, e));
                }
                true
            }
            Some(_) => !sole,
            None => false,
        };
        return Ok(Held {
            _file: file,
            dir,
            name,
            ours: ours || st.st_uid == euid,
            shared,
            marked,
        });
    }
    if last_err.is_none() {
        return Err(Error::io(
            "take",
            &path,
            io::Error::other("the lock file kept being replaced"),
        ));
    }
    let (pid, uid) = match holder_of(&dir, &name) {
        Some((pid, uid)) => (own_pid(Some(pid)), uid),
        None => (None, None),
    };
    Err(Error::HostLocked {
        shard,
        id_space: id_space.to_string(),
        pid,
        uid: uid.filter(|&u| u != euid),
        lock_file: path,
        held_dir: None,
        dir: shared.map(|d| d.path.clone()),
    })
}

/// Whether the path `name` in `dir` still names the file `st` describes.
fn still_at(dir: &OwnedFd, name: &str, st: &rfs::Stat, path: &Path) -> Result<bool> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(now) => Ok(same_file(&now, st)),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::io("examine", path, e.into())),
    }
}

/// Says, once per process, that the lock directory takes no marks.
fn unmarked(dir: &Path, e: &io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::warn!(
            "the per-host lock directory {} takes no byte-range locks ({e}): a generator \
             whose lock file is removed while it runs is seen only where /proc shows it",
            dir.display()
        );
    });
}

/// `pid` if it is this process's PID namespace's: one read in a `/proc`
/// of another namespace numbers another process here.
fn own_pid(pid: Option<u32>) -> Option<u32> {
    pid.filter(|_| procfs::pids_are_ours())
}

/// Records in the per-host lock file which state directory holds the
/// shard: `dir DEV INO PATH` (the path for messages only).
fn write_identity(file: &File, dir: &DirIdentity) -> io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let shown = dir.path.to_string_lossy().replace(['\n', '\r'], "?");
    let text = format!("dir {} {} {shown}\n", dir.id.0, dir.id.1);
    file.write_all_at(text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)
}

/// The state directory a per-host lock file names, if it names one.
fn read_identity(file: &File) -> Option<((u64, u64), PathBuf)> {
    use std::os::unix::fs::FileExt as _;
    let mut bytes = vec![0; 4200];
    let n = file.read_at(&mut bytes, 0).ok()?;
    let text = std::str::from_utf8(&bytes[..n]).ok()?;
    let line = text.strip_suffix('\n')?;
    let mut parts = line.splitn(4, ' ');
    let (Some("dir"), Some(dev), Some(ino), Some(shown)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some(((dev.parse().ok()?, ino.parse().ok()?), PathBuf::from(shown)))
}

/// A process that holds a `flock` on a removed file of this name (in
/// `/proc/<pid>/fd`, "NAME (deleted)"), other than `st`: a generator
/// whose lock file was removed under it. Its pid, and the state
/// directory its file names where this user may read it.
#[allow(clippy::type_complexity)]
fn orphaned_holder(
    dir: &Path,
    name: &str,
    st: &rfs::Stat,
) -> Option<(u32, Option<((u64, u64), PathBuf)>)> {
    let device = device_of(st);
    let this = lock_key(st);
    let gone = format!("{} (deleted)", dir.join(name).display());
    let mut pids: Vec<u32> = flocks(|file| file.starts_with(&device) && file != this)?
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if target.as_os_str() != std::ffi::OsStr::new(&gone) {
                continue;
            }
            // This process's own generators are found the same way.
            let held = File::open(fd.path()).ok().and_then(|f| read_identity(&f));
            return Some((pid, held));
        }
    }
    None
}

/// `", which belongs to uid N"` for the entry `name` in `dir`, or
/// nothing if it cannot be examined.
fn owner_of(dir: &OwnedFd, name: &str) -> String {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => format!(", which belongs to uid {}", st.st_uid),
        Err(_) => String::new(),
    }
}

/// The pid holding a `flock` on `name` in `dir`, from `/proc/locks`,
/// and that process's real uid where `/proc` tells.
fn holder_of(dir: &OwnedFd, name: &str) -> Option<(u32, Option<u32>)> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    let pid = flock_holder(&st)?;
    Some((pid, uid_of(pid)))
}

/// The pid holding a `flock` on the file `st` describes, from
/// `/proc/locks` (as `/proc`'s PID namespace numbers it): another
/// process's first, as this one may hold it too.
pub(super) fn flock_holder(st: &rfs::Stat) -> Option<u32> {
    let holders = procfs::flock_pids(st)?;
    let me = procfs::self_in_proc();
    holders
        .iter()
        .copied()
        .find(|&pid| Some(pid) != me)
        .or_else(|| holders.first().copied())
}

pub(super) fn holder(id_space: &str, shard: u32) -> HostHolder {
    let Ok((_, dir)) = lock_dir() else {
        return HostHolder::Unknown;
    };
    let name = lock_name(id_space, shard);
    let file = match open_existing(&dir, &name) {
        Ok(Some((file, _))) => file,
        Ok(None) => return marked_holder(&dir, &name),
        Err(_) => return HostHolder::Unknown,
    };
    // Exclusively, for an instant: the members of a state directory
    // hold it shared. A generator opening meanwhile tries again.
    match try_flock(&file, Flock::Exclusive) {
        Ok(true) => {
            let _ = fs2::FileExt::unlock(&file);
            marked_holder(&dir, &name)
        }
        Ok(false) | Err(_) => match own_pid(
            rfs::fstat(file.as_fd())
                .ok()
                .and_then(|st| flock_holder(&st)),
        ) {
            Some(pid) => HostHolder::Pid(pid),
            None => HostHolder::Unknown,
        },
    }
}

/// With no lock file held at the path: a holder whose file was removed,
/// which only its marks on the directory show.
fn marked_holder(dir: &OwnedFd, name: &str) -> HostHolder {
    match Slot::of(name).held(dir.as_fd()) {
        Ok(true) => HostHolder::Unknown,
        _ => HostHolder::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn identity(n: u64) -> DirIdentity {
        DirIdentity {
            id: (0, n),
            path: PathBuf::from(format!("/nowhere/{n}")),
        }
    }

    /// A first member holds the lock file alone, its state directory
    /// written in it, for longer than the rounds a contended lock is tried
    /// (its checks of the host on busy cores): a generator of the same
    /// state directory waits for it to share the file and joins; one of
    /// another directory is refused without that wait.
    #[test]
    fn a_first_member_checking_the_host_is_waited_for_by_its_own_directory_only() {
        let space = format!("unit-{}-forming", std::process::id());
        let (_, dir) = lock_dir().unwrap();
        let name = lock_name(&space, 6);
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC;
        let first = File::from(
            rfs::openat(&dir, name.as_str(), flags, Mode::from_raw_mode(0o644)).unwrap(),
        );
        assert!(try_flock(&first, Flock::Exclusive).unwrap());
        write_identity(&first, &identity(1)).unwrap();

        let start = Instant::now();
        let other = acquire(&space, 6, Some(&identity(2)));
        assert!(
            matches!(other, Err(Error::HostLocked { .. })),
            "another directory: {other:?}"
        );
        assert!(
            start.elapsed() < FORMING_WAIT,
            "another directory waited {:?}",
            start.elapsed()
        );

        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_secs(1));
                change_flock(&first, Flock::Shared).unwrap();
            });
            let joined = acquire(&space, 6, Some(&identity(1)));
            assert!(joined.is_ok(), "the same directory: {:?}", joined.err());
        });
        drop(first);
        let _ = rfs::unlinkat(&dir, name.as_str(), AtFlags::empty());
    }
}
