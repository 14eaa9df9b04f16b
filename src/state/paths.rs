//! The state directory and its files: where they are, and the checks
//! every open goes through (owner, mode, no symbolic links, a size cap).

use super::format::parse_state;
use super::*;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// Chooses the state directory: `explicit` if given, else
/// `IDUTIL_STATE_DIR`, else `$XDG_STATE_HOME/idutil`, else
/// `$HOME/.local/state/idutil`. Does not create it.
///
/// # Errors
///
/// [`Error::NoStateDir`] if none of these is set; [`Error::InvalidEnv`] if
/// `IDUTIL_STATE_DIR` is set but empty; [`Error::RelativeStateDir`] if the
/// directory given or set is not an absolute path.
pub fn state_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let absolute = |dir: PathBuf| cleaned(&dir);
    if let Some(dir) = explicit {
        return absolute(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(crate::env::STATE_DIR) {
        if dir.is_empty() {
            return Err(Error::InvalidEnv {
                var: crate::env::STATE_DIR,
                value: String::new(),
                reason: "empty; unset it or name a directory",
            });
        }
        return absolute(dir.into());
    }
    // The XDG spec says relative paths are to be ignored.
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Ok(xdg.join("idutil"));
        }
    }
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".local/state/idutil")),
        _ => Err(Error::NoStateDir),
    }
}

/// `dir` as an absolute path without `.` components or trailing slashes
/// (`/state/link/.` and `/state/link/` would let a symbolic link pass for
/// the directory itself) and without `..` (which may climb out of where a
/// link points).
pub(super) fn cleaned(dir: &Path) -> Result<PathBuf> {
    if !dir.is_absolute() {
        return Err(Error::RelativeStateDir {
            path: dir.to_path_buf(),
        });
    }
    if dir
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(Error::Untrusted {
            path: dir.to_path_buf(),
            reason: "it contains \"..\"; name the directory without it".to_string(),
        });
    }
    Ok(dir.components().collect())
}

/// Refuses a state directory that someone else could move or replace:
/// every directory above it must belong to this user or to root, and be
/// writable by no one else unless its sticky bit is set (as `/tmp`'s is).
/// Write access for the group counts as no one else when the group is the
/// process's own (see [`group_write_is_ours`]): a volume Kubernetes
/// prepares for `fsGroup` is owned by root, group-writable and setgid.
pub(super) fn check_ancestors(dir: &Path) -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    for parent in dir.ancestors().skip(1) {
        let meta = fs::metadata(parent).map_err(|e| Error::io("examine", parent, e))?;
        let mode = meta.mode() & 0o7777;
        let owner_ok = meta.uid() == euid || meta.uid() == 0;
        let sticky = mode & 0o1000 != 0;
        let others_write = mode & 0o002 != 0;
        let foreign_group_write = mode & 0o020 != 0 && !group_write_is_ours(meta.gid());
        if !owner_ok || (!sticky && (others_write || foreign_group_write)) {
            let why = if !owner_ok {
                format!("belongs to uid {}", meta.uid())
            } else if others_write {
                format!("is writable by every user (mode {mode:04o}) and not sticky")
            } else {
                format!(
                    "is writable by group {} (mode {mode:04o}), which is not this process's \
                     group {egid}",
                    meta.gid()
                )
            };
            return Err(Error::Untrusted {
                path: dir.to_path_buf(),
                reason: format!(
                    "the directory above it, {}, {why}, so another user could move the state \
                     directory away and a new one would start over; keep the state directory \
                     under directories owned by you or root and writable by no one else: not \
                     by others unless sticky (like /tmp), by the group only when it is this \
                     process's own group (in Kubernetes, runAsGroup equal to fsGroup)",
                    parent.display(),
                ),
            });
        }
    }
    Ok(())
}

/// Whether write access for the group `gid` leaves a file or directory to
/// this process alone: `gid` is the process's effective (primary) group.
///
/// sshd's `StrictModes` accepts a group-writable `~/.ssh` only when the
/// group has exactly one member, the owner (a user private group), which it
/// learns from `/etc/group`. A Kubernetes `fsGroup` has no entry there, yet
/// kubelet makes every file of the volume group-writable by it on each
/// mount; so idutil trusts the group that the process runs with and no
/// other. Supplementary groups are not trusted: they are how other users'
/// groups reach a process.
pub(super) fn group_write_is_ours(gid: u32) -> bool {
    gid == rustix::process::getegid().as_raw()
}

/// Path of a shard's state file in `dir`.
pub fn state_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.state"))
}

pub(super) fn lock_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.lock"))
}

/// The most a state, lock or damaged file may hold: far more than any of
/// them needs, little enough that a huge file or a device is refused
/// rather than read.
pub const MAX_FILE_SIZE: u64 = 64 * 1024;

pub(super) fn state_name(shard: u32) -> String {
    format!("shard-{shard}.state")
}

pub(super) fn lock_name(shard: u32) -> String {
    format!("shard-{shard}.lock")
}

pub(super) fn missing_state(path: &Path, shard: u32) -> Error {
    Error::bad_state(
        path,
        shard,
        format!(
            "the state file is missing although this shard had one in this directory \
             (shard-{shard}.lock records it), so starting again at the clock could re-issue \
             IDs; recover it after the latest time IDs of this shard may have reached \
             (the current time if none were issued ahead of the clock)"
        ),
        Remedy::After,
    )
}

/// `(device, inode)` of an open file or directory.
pub(super) fn file_id(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rfs::fstat(fd)?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// Opens `dir` as a directory without following a symbolic link, after
/// creating it (and its missing parents) with mode 0700 when `create`;
/// checks its owner and mode. `None` if it does not exist and `create` is
/// false.
pub(super) fn open_dir(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    open_dir_checked(dir, create).map_err(|e| match e {
        Error::Io { .. } | Error::Untrusted { .. } if is_default_dir(dir) => {
            Error::DefaultStateDir {
                path: dir.to_path_buf(),
                source: Box::new(e),
            }
        }
        e => e,
    })
}

/// Whether `dir` is the platform's default state directory, used because
/// nothing named another: then a failure there is news to the user, who
/// may never have chosen a state directory (`HOME=/` in a container).
fn is_default_dir(dir: &Path) -> bool {
    std::env::var_os(crate::env::STATE_DIR).is_none()
        && state_dir(None).is_ok_and(|default| cleaned(dir).is_ok_and(|d| d == default))
}

fn open_dir_checked(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    let dir = &cleaned(dir)?;
    if create {
        create_private_dirs(dir)?;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rfs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            let reason = if link {
                "it is a symbolic link, and the state directory itself must not be one (its \
                 parents may be); name the directory the link points to"
            } else {
                "it is not a directory"
            };
            return Err(Error::Untrusted {
                path: dir.to_path_buf(),
                reason: reason.to_string(),
            });
        }
        Err(e) => return Err(Error::io("open the state directory", dir, e.into())),
    };
    let st = rfs::fstat(&fd).map_err(|e| Error::io("examine", dir, e.into()))?;
    check_owner_and_mode(dir, &st, true)?;
    check_ancestors(dir)?;
    Ok(Some(fd))
}

/// Creates `dir` and its missing parents, each with mode 0700 whatever the
/// umask.
pub(super) fn create_private_dirs(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(at);
                match at.parent() {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
            Err(e) => return Err(Error::io("create the state directory", at, e)),
        }
    }
    for path in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {
                // The umask may have taken bits away; set them, on the
                // directory just made (not on what a link might name).
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                rfs::open(path, flags, Mode::empty())
                    .and_then(|fd| rfs::fchmod(fd, Mode::from_raw_mode(0o700)))
                    .map_err(|e| Error::io("set the mode of", path, e.into()))?;
            }
            // Made by someone else meanwhile: checked when opened.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create the state directory", path, e)),
        }
    }
    Ok(())
}

/// Refuses what sshd refuses for `~/.ssh`: a directory or file that
/// another user owns, that others may write, or that a group other than
/// the process's own may write (see [`group_write_is_ours`]).
pub(super) fn check_owner_and_mode(path: &Path, st: &rfs::Stat, is_dir: bool) -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    let uid = st.st_uid;
    let what = if is_dir { "directory" } else { "file" };
    if uid != euid {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "the {what} belongs to uid {uid}, not to uid {euid} that runs the generator, so \
                 another user could delete or replace the shard's state; use a state directory \
                 of your own (a directory inside a volume you cannot chown, such as a \
                 Kubernetes volume's root, is fine), or run as its owner, or give it to this \
                 user (chown -R {euid} {})",
                path.display()
            ),
        });
    }
    #[allow(clippy::unnecessary_cast)]
    let mode = st.st_mode as u32 & 0o7777;
    let group_write = mode & 0o020 != 0 && !group_write_is_ours(st.st_gid);
    if mode & 0o002 != 0 || group_write {
        let fix = if is_dir { "700" } else { "600" };
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "the {what} is writable by group or others (mode {mode:04o}, group {}), so \
                 another user could delete or replace the shard's state; run: chmod {fix} {}",
                st.st_gid,
                path.display()
            ),
        });
    }
    Ok(())
}

/// Opens `name` in the directory without following a symbolic link and
/// without blocking (a FIFO must not hang the caller): `None` if it does
/// not exist.
pub(super) fn open_in(
    dir_fd: &OwnedFd,
    path: &Path,
    name: &str,
    flags: OFlags,
) -> Result<Option<File>> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rfs::openat(dir_fd, name, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP) => Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it is a symbolic link, and idutil follows none in the state directory; \
                 remove it (rm {})",
                path.display()
            ),
        }),
        Err(e) => Err(Error::io("open", path, e.into())),
    }
}

/// Checks an opened file: a regular file of ours, not writable by others,
/// no larger than [`MAX_FILE_SIZE`].
pub(super) fn check_file(file: &File, path: &Path) -> Result<rfs::Stat> {
    let st = rfs::fstat(file).map_err(|e| Error::io("examine", path, e.into()))?;
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it is not a regular file (a FIFO, device, socket or directory), and idutil \
                 reads and writes only regular files; remove it (rm {})",
                path.display()
            ),
        });
    }
    check_owner_and_mode(path, &st, false)?;
    if st.st_nlink != 1 {
        // Writing it would write every other name it has.
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it has {} names (hard links), and idutil writes only files of its own; \
                 remove it (rm {})",
                st.st_nlink,
                path.display()
            ),
        });
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_FILE_SIZE {
        return Err(too_large(path));
    }
    Ok(st)
}

pub(super) fn too_large(path: &Path) -> Error {
    Error::Untrusted {
        path: path.to_path_buf(),
        reason: format!(
            "it is larger than {} KiB, far more than idutil ever writes; move it away",
            MAX_FILE_SIZE / 1024
        ),
    }
}

/// Reads at most [`MAX_FILE_SIZE`] bytes; a longer file is refused.
pub(super) fn read_capped(file: &mut File, path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    (&mut *file)
        .take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_large(path));
    }
    Ok(bytes)
}

/// Takes the exclusive lock without blocking. `inspect` holds a shared lock
/// for an instant to see whether a generator runs, so a contended lock is
/// retried for a few milliseconds before it counts as held.
pub(super) fn try_lock_exclusive(file: &File) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        match fs2::FileExt::try_lock_exclusive(file) {
            Err(e) if e.kind() == fs2::lock_contended_error().kind() && attempts < 10 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            result => return result,
        }
    }
}

/// Removes temporary files left by writers of this shard that were killed
/// between creating and renaming them. Only the lock holder calls this, so
/// none of them is in use.
pub(super) fn remove_stale_temporaries(dir_fd: &OwnedFd, shard: u32) {
    let prefix = format!(".shard-{shard}.");
    let Ok(entries) = rfs::Dir::read_from(dir_fd) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = rfs::unlinkat(dir_fd, entry.file_name(), AtFlags::empty());
        }
    }
}

/// What the lock file says, besides the lock itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LockNote {
    /// The pid of the generator that last took the lock (advice for error
    /// messages: the lock is what protects).
    pub(super) pid: Option<u32>,
    /// Whether the shard ever had a state file in this directory (a line
    /// `state`).
    pub(super) had_state: bool,
    /// The highest high-water mark (Unix seconds) a state file of this
    /// shard has held in this directory (a line `high_water N`): `Err` if
    /// the line is there but garbled.
    pub(super) mark: std::result::Result<Option<u64>, ()>,
}

impl Default for LockNote {
    /// No lock file: nothing recorded.
    fn default() -> Self {
        LockNote {
            pid: None,
            had_state: false,
            mark: Ok(None),
        }
    }
}

/// Reads the lock file's note. A read that fails is an error, never an
/// empty note: an empty note would let a shard whose state file is gone
/// start again at the clock.
pub(super) fn read_lock_file(file: &File) -> io::Result<LockNote> {
    let mut bytes = vec![0; 256];
    let mut n = 0;
    while n < bytes.len() {
        match file.read_at(&mut bytes[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let text = String::from_utf8_lossy(&bytes[..n]);
    let mut lines = text.lines().map(str::trim);
    let mut note = LockNote {
        pid: lines.next().and_then(|l| l.parse().ok()),
        ..LockNote::default()
    };
    for line in lines {
        if line == "state" {
            note.had_state = true;
        } else if let Some(mark) = line.strip_prefix("high_water") {
            let mark = mark.trim();
            note.mark = match mark.parse::<u64>() {
                Ok(m) if mark.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(m)),
                _ => Err(()),
            };
        }
    }
    Ok(note)
}

/// Writes the lock file's note: this process's pid, the `state` line and
/// the high-water mark. Written in place (the file is never replaced), as
/// one write of a few dozen bytes.
pub(super) fn write_lock_file(file: &File, had_state: bool, mark: Option<u64>) -> io::Result<()> {
    let mut text = format!("{}\n", std::process::id());
    if had_state {
        text.push_str("state\n");
    }
    if let Some(mark) = mark {
        text.push_str(&format!("high_water {mark}\n"));
    }
    file.write_all_at(text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)
}

/// The state file is an older copy than the lock file says the shard had
/// (restored from a backup or a snapshot, say): its mark is below the
/// mark the lock file keeps, so resuming after it could re-issue IDs.
pub(super) fn check_lock_mark(
    path: &Path,
    shard: u32,
    state: &StateFile,
    note: &LockNote,
) -> Result<()> {
    let lock = path.with_file_name(lock_name(shard));
    let bad = |reason: String| Error::bad_state(path, shard, reason, Remedy::Recover);
    let mark = note.mark.map_err(|()| {
        bad(format!(
            "the high_water line of the lock file {} is garbled, so nothing says whether \
             the state file is the latest one",
            lock.display()
        ))
    })?;
    let highest = state.highest_issuable();
    match mark {
        Some(mark) if mark > highest => Err(bad(format!(
            "its high-water mark ({highest}) is below the one the lock file {} keeps \
             ({mark}): it is an older copy of the state file (restored from a backup or \
             a snapshot?), and resuming after it could re-issue IDs",
            lock.display()
        ))),
        _ => Ok(()),
    }
}

pub(super) fn load_at(dir_fd: &OwnedFd, path: &Path, shard: u32) -> Result<Option<StateFile>> {
    let name = state_name(shard);
    let Some(mut file) = open_in(dir_fd, path, &name, OFlags::RDONLY)? else {
        return Ok(None);
    };
    check_file(&file, path)?;
    let bytes = read_capped(&mut file, path)?;
    parse_state(&bytes, path, shard).map(Some)
}
