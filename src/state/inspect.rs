//! Reading a shard's state and lock from outside, without disturbing a
//! running generator.

use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::format::{parse_state, StateFile};
use super::lock_file::{check_lock_mark, is_held, missing_state, read_lock_file, LockNote};
use super::paths::{lock_name, lock_path, state_name, state_path};
use super::trust::{check_file, open_dir, open_in, read_in};
use crate::error::{Error, Result};

/// What `idutil state` shows: the state file as it is on disk, read without
/// taking the lock, and who holds the lock.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StateReport {
    /// The state file's path.
    pub path: PathBuf,
    /// The shard.
    pub shard: u32,
    /// The file's contents; `None` if there is no state file yet.
    pub state: Option<StateFile>,
    /// The pid of the live generator holding the shard, if one does.
    pub holder: Option<u32>,
    /// Whether some process holds the lock (the pid may be unreadable).
    pub locked: bool,
}

/// Reads a shard's state and lock without disturbing a running generator.
///
/// Nothing is created, no symbolic link is followed, and a FIFO or device
/// in place of a file is refused at once rather than waited on.
///
/// # Errors
///
/// [`Error::BadState`](crate::Error::BadState) if the file cannot be trusted (or is missing
/// although the shard had one), [`Error::UnusableStateDir`](crate::Error::UnusableStateDir) if
/// the directory is not one, [`Error::Untrusted`](crate::Error::Untrusted) if the directory or a
/// file fails [the checks every open goes
/// through](crate::state#security-the-directory-is-a-trust-boundary),
/// [`Error::Io`](crate::Error::Io) if it cannot be read.
pub fn inspect(dir: &Path, shard: u32) -> Result<StateReport> {
    let path = state_path(dir, shard);
    let peek = peek(dir, shard)?;
    let state = match peek.state {
        Some(bytes) => {
            let state = parse_state(&bytes, &path, shard)?;
            check_lock_mark(&path, shard, &state, &peek.note)?;
            Some(state)
        }
        None if peek.note.had_state => return Err(missing_state(&path, shard)),
        None => None,
    };
    Ok(StateReport {
        path,
        shard,
        state,
        holder: peek.holder.flatten(),
        locked: peek.holder.is_some(),
    })
}

/// A shard's files as seen from outside, without taking its lock or
/// changing anything: through the same checks as a generator's reads (no
/// symbolic links, regular files only, a size cap).
pub(super) struct Peek {
    /// `Some` while a generator holds the lock, with its pid if legible.
    pub(super) holder: Option<Option<u32>>,
    /// What the lock file says: whether the shard has had a state file,
    /// and the highest mark it held.
    pub(super) note: LockNote,
    /// The state file's bytes, if there is one.
    pub(super) state: Option<Vec<u8>>,
}

pub(super) fn peek(dir: &Path, shard: u32) -> Result<Peek> {
    let Some(dir_fd) = open_dir(dir, false)? else {
        return Ok(Peek {
            holder: None,
            note: LockNote::default(),
            state: None,
        });
    };
    let lock_path = lock_path(dir, shard);
    let (holder, note) = match open_in(&dir_fd, &lock_path, &lock_name(shard), OFlags::RDONLY)? {
        Some(f) => {
            check_file(&f, &lock_path)?;
            let note =
                read_lock_file(&f).map_err(|e| Error::io("read the lock file", &lock_path, e))?;
            match is_held(&f) {
                Ok(false) => (None, note),
                Ok(true) => (Some(crate::host_lock::flock_holder(&f).or(note.pid)), note),
                Err(e) => return Err(Error::io("test the lock on", &lock_path, e)),
            }
        }
        None => (None, LockNote::default()),
    };
    let path = state_path(dir, shard);
    let state = read_in(&dir_fd, &path, &state_name(shard))?.map(|(bytes, _)| bytes);
    Ok(Peek {
        holder,
        note,
        state,
    })
}
