//! The checks every open in the state directory goes through: the
//! directory's owner and mode and those of the directories above it, no
//! symbolic links, regular files of ours only, a size cap.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use rustix::fs::{self as rfs, Mode, OFlags};
use rustix::io::Errno;

use super::paths::{cleaned, is_default_dir};
use crate::error::{Error, Result};

/// The most a state, lock or damaged file may hold: far more than any of
/// them needs, little enough that a huge file or a device is refused
/// rather than read.
pub const MAX_FILE_SIZE: u64 = 64 * 1024;

/// Refuses a state directory that someone else could move or replace:
/// every directory above it must belong to this user or to root, and be
/// writable by no one else unless its sticky bit is set (as `/tmp`'s is).
/// Write access for the group counts as no one else when the group is the
/// process's own (see [`group_write_is_ours`]): a volume Kubernetes
/// prepares for `fsGroup` is owned by root, group-writable and setgid.
fn check_ancestors(dir: &Path) -> Result<()> {
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
/// Why that group and no other: the [`state`](crate::state) module,
/// *Security: the directory is a trust boundary*.
fn group_write_is_ours(gid: u32) -> bool {
    gid == rustix::process::getegid().as_raw()
}

/// `(device, inode)` of an open file or directory.
pub(super) fn file_id(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rfs::fstat(fd)?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// `(device, inode)` and length of what `path` names, relative to `dir`
/// unless absolute, without following a symbolic link; of `dir` itself
/// when `path` is empty. `None` if nothing has that name.
///
/// Reads no times, where the system can tell it so (`statx` asking for
/// the inode and size alone): the processes sharing a shard check their
/// files at every turn, and on a file system that records times finely
/// only once they were read (multigrain timestamps, Linux 6.13 on: ext4,
/// XFS, btrfs, tmpfs), a change time read makes the next write to the
/// file take a fine-grained one, so that every turn's write would update
/// the inode on disk. The same `(device, inode)` as [`file_id`].
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
pub(super) fn id_at(dir: impl AsFd, path: &Path) -> io::Result<Option<((u64, u64), u64)>> {
    let stat = || {
        let st = if path.as_os_str().is_empty() {
            rfs::fstat(&dir)
        } else {
            rfs::statat(&dir, path, rfs::AtFlags::SYMLINK_NOFOLLOW)
        };
        st.map(|st| {
            let len = u64::try_from(st.st_size).unwrap_or(u64::MAX);
            ((st.st_dev as u64, st.st_ino as u64), len)
        })
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let seen = {
        let flags = if path.as_os_str().is_empty() {
            rfs::AtFlags::EMPTY_PATH | rfs::AtFlags::SYMLINK_NOFOLLOW
        } else {
            rfs::AtFlags::SYMLINK_NOFOLLOW
        };
        let mask = rfs::StatxFlags::INO | rfs::StatxFlags::SIZE;
        match rfs::statx(&dir, path, flags, mask) {
            Ok(st) => Ok((
                (
                    rfs::makedev(st.stx_dev_major, st.stx_dev_minor) as u64,
                    st.stx_ino,
                ),
                st.stx_size,
            )),
            // No statx (before Linux 4.11, or refused by an old seccomp
            // profile).
            Err(Errno::NOSYS) => stat(),
            Err(e) => Err(e),
        }
    };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let seen = stat();
    match seen {
        Ok(seen) => Ok(Some(seen)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Opens `dir` as a directory without following a symbolic link, after
/// creating it with mode 0700 when `create` (with its missing parents only
/// when it is the platform's default: see [`create_private_dirs`]); checks
/// its owner and mode. `None` if it does not exist and `create` is false.
pub(super) fn open_dir(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    open_dir_checked(dir, create).map_err(|e| match e {
        Error::Io { .. } | Error::Untrusted { .. } | Error::UnusableStateDir { .. }
            if is_default_dir(dir) =>
        {
            Error::DefaultStateDir {
                path: dir.to_path_buf(),
                source: Box::new(e),
            }
        }
        e => e,
    })
}

fn open_dir_checked(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    let dir = &cleaned(dir)?;
    if create {
        create_private_dirs(dir, is_default_dir(dir))?;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rfs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            if !link {
                return Err(not_a_directory(dir));
            }
            return Err(Error::Untrusted {
                path: dir.to_path_buf(),
                reason: "it is a symbolic link, and the state directory itself must not be one \
                         (its parents may be); name the directory the link points to"
                    .to_string(),
            });
        }
        Err(e) => return Err(Error::io("open the state directory", dir, e.into())),
    };
    let st = rfs::fstat(&fd).map_err(|e| Error::io("examine", dir, e.into()))?;
    check_owner_and_mode(dir, &st, true)?;
    check_ancestors(dir)?;
    Ok(Some(fd))
}

/// [`Error::UnusableStateDir`] for a `dir` the system says is not a
/// directory (`ENOTDIR`): `dir` itself, or a path above it.
fn not_a_directory(dir: &Path) -> Error {
    let reason = match dir
        .ancestors()
        .skip(1)
        .find(|above| fs::metadata(above).is_ok_and(|m| !m.is_dir()))
    {
        Some(above) => format!(
            "{} above it is not a directory; name a directory",
            above.display()
        ),
        None => "it is not a directory; name a directory".to_string(),
    };
    Error::UnusableStateDir {
        path: dir.to_path_buf(),
        reason,
    }
}

/// [`Error::UnusableStateDir`] for a named `dir` whose `parent` does not
/// exist (a symbolic link to nothing included).
fn missing_parent(dir: &Path, parent: &Path) -> Error {
    Error::UnusableStateDir {
        path: dir.to_path_buf(),
        reason: format!(
            "its parent {} does not exist; create it, or correct the path: only the last \
             component of a state directory that is named is created, so that a mistyped \
             path is refused rather than starting the shard afresh",
            parent.display()
        ),
    }
}

/// Creates `dir` with mode 0700 whatever the umask, and its missing
/// parents alike when `with_parents`; without, a missing parent is
/// [`Error::UnusableStateDir`] (the rule: [`state`](super), *Security:
/// the directory is a trust boundary*).
fn create_private_dirs(dir: &Path, with_parents: bool) -> Result<()> {
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
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Err(not_a_directory(dir)),
            Err(e) => return Err(Error::io("create the state directory", at, e)),
        }
    }
    if let (false, [_, parent, ..]) = (with_parents, missing.as_slice()) {
        return Err(missing_parent(dir, parent));
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
            // The parent is there as a symbolic link to nothing, or was
            // removed meanwhile: missing all the same.
            Err(e) if e.kind() == io::ErrorKind::NotFound && !with_parents => {
                let parent = path.parent().unwrap_or(path);
                if fs::metadata(parent).is_err_and(|m| m.kind() == io::ErrorKind::NotFound) {
                    return Err(missing_parent(dir, parent));
                }
                return Err(Error::io("create the state directory", path, e));
            }
            Err(e) => return Err(Error::io("create the state directory", path, e)),
        }
    }
    Ok(())
}

/// Refuses what sshd refuses for `~/.ssh`: a directory or file that
/// another user owns, that others may write, or that a group other than
/// the process's own may write (see [`group_write_is_ours`]).
fn check_owner_and_mode(path: &Path, st: &rfs::Stat, is_dir: bool) -> Result<()> {
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

fn too_large(path: &Path) -> Error {
    Error::Untrusted {
        path: path.to_path_buf(),
        reason: format!(
            "it is larger than {} KiB, far more than idutil ever writes; move it away",
            MAX_FILE_SIZE / 1024
        ),
    }
}

/// Reads at most [`MAX_FILE_SIZE`] bytes; a longer file is refused.
fn read_capped(file: &mut File, path: &Path) -> Result<Vec<u8>> {
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

/// Opens `name` in the directory (as [`open_in`], read-only), checks it
/// ([`check_file`]) and reads it ([`read_capped`]): its bytes and what
/// `fstat` said, or `None` if there is no such file.
pub(super) fn read_in(
    dir_fd: &OwnedFd,
    path: &Path,
    name: &str,
) -> Result<Option<(Vec<u8>, rfs::Stat)>> {
    let Some(mut file) = open_in(dir_fd, path, name, OFlags::RDONLY)? else {
        return Ok(None);
    };
    let stat = check_file(&file, path)?;
    let bytes = read_capped(&mut file, path)?;
    Ok(Some((bytes, stat)))
}
