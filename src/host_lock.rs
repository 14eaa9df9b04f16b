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
//! (from `/proc/locks`), its user (from `/proc/<pid>`) and both
//! directories. The last holder removes the file when it lets go, and
//! every taker checks after locking that the file it locked is still the
//! one at the path, so a file removed meanwhile is never shared.
//!
//! A file removed while generators hold it (by root's cleanup of
//! `/run/lock`, or by the user who created it) does not let another
//! directory in: a generator that finds itself alone on the file looks in
//! `/proc` for processes holding a removed file of that name, and refuses
//! the shard if theirs is another directory (or one it cannot read). [`holder`]
//! tells who holds a shard.
//!
//! The scope is the mount namespace: processes in other network namespaces
//! share the lock, while containers with a `/run/lock` of their own are
//! separate hosts to it, so give them distinct shards (or a lease). Outside
//! Linux only the state directory's lock applies, and a generator holds
//! its shard alone.
//!
//! # ID spaces
//!
//! The lock is per ID space ([`Builder::id_space`](crate::Builder::id_space),
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
//! - Meanwhile another shard, or an ID space of its own for IDs that never
//!   share a table, goes on. A hostile user can take every name of an ID
//!   space it knows: that is a denial of service an administrator ends,
//!   not a duplicate ID.

use crate::error::{Error, Result};

/// The ID space generators use when none is named.
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

/// The pid holding a `flock` on `file`, from `/proc/locks` (Linux only).
pub(crate) fn flock_holder(file: &std::fs::File) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let st = rustix::fs::fstat(file).ok()?;
        linux::flock_holder(&st)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
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
mod linux {
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsFd, OwnedFd};
    use std::path::{Path, PathBuf};

    use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::{lock_name, DirIdentity, HostHolder, LOCK_DIRS};
    use crate::error::{Error, Result};

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
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // The last member takes the lock exclusively (a failed attempt
            // drops the shared hold, which is being let go anyway).
            if self.shared && fs2::FileExt::try_lock_exclusive(&self._file).is_err() {
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
    fn open_existing(
        dir: &OwnedFd,
        name: &str,
    ) -> std::result::Result<Option<(File, bool)>, Errno> {
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

    pub(super) fn acquire(
        id_space: &str,
        shard: u32,
        shared: Option<&DirIdentity>,
    ) -> Result<Held> {
        let (dir_path, dir) = lock_dir()?;
        let name = lock_name(id_space, shard);
        let path = dir_path.join(&name);
        let unusable = |reason: String| Error::HostLockUnusable {
            shard,
            id_space: id_space.to_string(),
            path: path.clone(),
            reason,
        };
        let euid = rustix::process::geteuid().as_raw();
        // A few rounds: a file removed by its last holder between our open
        // and our lock, a lock held for an instant by a child between
        // fork and exec (it holds a copy of every descriptor until exec
        // closes it), or by a member writing the file before it shares
        // it, is not a holder.
        let mut last_err = None;
        for _ in 0..20 {
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
            let sole = match fs2::FileExt::try_lock_exclusive(&file) {
                Ok(()) => true,
                Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                    match (shared, fs2::FileExt::try_lock_shared(&file)) {
                        (Some(_), Ok(())) => false,
                        (_, Err(e)) if e.kind() != fs2::lock_contended_error().kind() => {
                            return Err(Error::io("lock", &path, e))
                        }
                        _ => {
                            last_err = Some(e);
                            std::thread::sleep(std::time::Duration::from_millis(10));
                            continue;
                        }
                    }
                }
                Err(e) => return Err(Error::io("lock", &path, e)),
            };
            // Still the file at the path? Its last holder may have removed
            // it after we opened it; then a new one may be locked by now.
            match rfs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if same_file(&now, &st) => {}
                Ok(_) | Err(Errno::NOENT) => continue,
                Err(e) => return Err(Error::io("examine", &path, e.into())),
            }
            let ours = ours || st.st_uid == euid;
            macro_rules! held {
                ($shared:expr) => {
                    Held {
                        _file: file,
                        dir,
                        name,
                        ours,
                        shared: $shared,
                    }
                };
            }
            let Some(identity) = shared else {
                return Ok(held!(false));
            };
            let refused = |pid: Option<u32>, held_dir: Option<PathBuf>| Error::HostLocked {
                shard,
                id_space: id_space.to_string(),
                pid,
                uid: pid.and_then(uid_of).filter(|&u| u != euid),
                lock_file: path.clone(),
                held_dir,
                dir: Some(identity.path.clone()),
            };
            if !sole {
                // Members hold it: theirs must be our state directory.
                match read_identity(&file) {
                    Some((id, _)) if id == identity.id => return Ok(held!(true)),
                    Some((_, held_dir)) => {
                        return Err(refused(flock_holder(&st), Some(held_dir)));
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
            // Alone on this file. A generator may still hold an older file
            // of this name that was removed under it.
            if let Some((pid, held_dir)) = orphaned_holder(&dir_path, &name, &st) {
                if held_dir.as_ref().map(|(id, _)| *id) != Some(identity.id) {
                    return Err(refused(Some(pid), held_dir.map(|(_, p)| p)));
                }
            }
            if !writable {
                // Another user's file this user may not write: it cannot
                // say which state directory holds the shard, so it is held
                // exclusively, as a generator of another kind would.
                return Ok(held!(false));
            }
            write_identity(&file, identity).map_err(|e| Error::io("write", &path, e))?;
            // Shared from here on: the members of this directory may join.
            fs2::FileExt::try_lock_shared(&file).map_err(|e| Error::io("lock", &path, e))?;
            return Ok(held!(true));
        }
        if last_err.is_none() {
            return Err(Error::io(
                "take",
                &path,
                io::Error::other("the lock file kept being replaced"),
            ));
        }
        let (pid, uid) = match holder_of(&dir, &name) {
            Some((pid, uid)) => (Some(pid), uid),
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
        use std::io::Read as _;
        let mut text = String::new();
        File::open("/proc/locks")
            .ok()?
            .take(1 << 20)
            .read_to_string(&mut text)
            .ok()?;
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let dev = st.st_dev as u64;
        let device = format!(
            "{:02x}:{:02x}:",
            rustix::fs::major(dev),
            rustix::fs::minor(dev)
        );
        let this = format!("{device}{}", st.st_ino);
        let gone = format!("{} (deleted)", dir.join(name).display());
        let mut pids: Vec<u32> = text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let at = fields.iter().position(|f| *f == "FLOCK")?;
                let (pid, file) = (fields.get(at + 3)?, fields.get(at + 4)?);
                (file.starts_with(&device) && *file != this)
                    .then(|| pid.parse().ok())
                    .flatten()
            })
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

    /// Reads `/proc/locks` (a few lines per lock on the host; capped) for
    /// the `FLOCK` on the file `st` describes.
    pub(super) fn flock_holder(st: &rfs::Stat) -> Option<u32> {
        use std::io::Read as _;
        let mut text = String::new();
        File::open("/proc/locks")
            .ok()?
            .take(1 << 20)
            .read_to_string(&mut text)
            .ok()?;
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        let dev = st.st_dev as u64;
        let want = format!(
            "{:02x}:{:02x}:{}",
            rustix::fs::major(dev),
            rustix::fs::minor(dev),
            st.st_ino
        );
        // Another process's lock first: this one may hold it too.
        let me = std::process::id();
        let mut holders = text.lines().filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK ADVISORY WRITE 1234 00:1a:5678 0 EOF"; a blocked
            // waiter's line has "->" after the number.
            let at = fields.iter().position(|f| *f == "FLOCK")?;
            let (pid, file) = (fields.get(at + 3)?, fields.get(at + 4)?);
            (*file == want).then(|| pid.parse::<u32>().ok()).flatten()
        });
        let first = holders.next()?;
        if first != me {
            return Some(first);
        }
        holders.find(|&pid| pid != me).or(Some(first))
    }

    /// A process's real uid, from `/proc/<pid>/status`.
    fn uid_of(pid: u32) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    pub(super) fn holder(id_space: &str, shard: u32) -> HostHolder {
        let Ok((_, dir)) = lock_dir() else {
            return HostHolder::Unknown;
        };
        let name = lock_name(id_space, shard);
        let file = match open_existing(&dir, &name) {
            Ok(Some((file, _))) => file,
            Ok(None) => return HostHolder::None,
            Err(_) => return HostHolder::Unknown,
        };
        // Exclusively, for an instant: the members of a state directory
        // hold it shared. A generator opening meanwhile tries again.
        match fs2::FileExt::try_lock_exclusive(&file) {
            Ok(()) => {
                let _ = fs2::FileExt::unlock(&file);
                HostHolder::None
            }
            Err(_) => match rfs::fstat(file.as_fd())
                .ok()
                .and_then(|st| flock_holder(&st))
            {
                Some(pid) => HostHolder::Pid(pid),
                None => HostHolder::Unknown,
            },
        }
    }
}

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
