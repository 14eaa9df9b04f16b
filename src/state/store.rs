//! The locked store of one shard's state: taking the locks, checking that
//! the directory and lock file are still the ones opened, and the atomic
//! replacement of the state file.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};

use super::claim::{ClaimFile, Claims, Turn};
use super::format::{parse_state, StateFile};
use super::lock_file::{
    check_lock_mark, join_shard, lock_shard, missing_state, read_lock_file, write_lock_file,
    LockNote,
};
use super::paths::{cleaned, lock_path, state_name, state_path};
use super::trust::{file_id, id_at, open_dir, read_in};
use crate::error::{Error, Result};
use crate::flock::{change_flock, try_flock, Flock};
use crate::host_lock::{DirIdentity, HostLock};

/// A locked shard in a state directory: the exclusive right to read and
/// replace its state file, for as long as the value lives.
///
/// The directory and the lock file are held open. Every file in the
/// directory is opened relative to the directory's descriptor, without
/// following symbolic links, and checked to be a regular file of ours
/// before it is read; every write first checks that the directory and
/// the lock file are still the ones at their paths (see [`Store::save`]).
pub(crate) struct Store {
    dir: PathBuf,
    path: PathBuf,
    lock_path: PathBuf,
    shard: u32,
    dir_fd: OwnedFd,
    dir_id: (u64, u64),
    // Held for the `flock`; closing it releases the lock.
    lock: File,
    lock_id: (u64, u64),
    /// What the lock file records: whether a state file was ever written
    /// for this shard in this directory, and the highest mark it held.
    note: Mutex<LockNote>,
    /// The per-host hold on the shard, for generators.
    _host: Option<HostLock>,
    /// A member's: the claim file the processes sharing the shard draw
    /// blocks from and take turns on. `None` for an exclusive holder.
    claim: Option<ClaimFile>,
    /// The claim file's `next` as this member last wrote it (0: never).
    /// While it runs, no other member writes less (see [`Store::claims`]).
    wrote: AtomicU64,
    /// Whether no other generator held the shard in this directory when
    /// this one opened: it plans the restart.
    first: bool,
    /// How long a member waits for another that holds a lock.
    wait: Duration,
}

impl Store {
    /// Takes the shard's per-host lock in `id_space` (see
    /// [`host_lock`](crate::host_lock)), then its lock in `dir`.
    pub(crate) fn open_for_generator(dir: &Path, shard: u32, id_space: &str) -> Result<Store> {
        let host = HostLock::acquire(id_space, shard)?;
        let mut store = Store::open(dir, shard)?;
        store._host = Some(host);
        Ok(store)
    }

    /// Joins the generators that share `shard` of `id_space` through `dir`
    /// (see [*Processes sharing a shard*](super#processes-sharing-a-shard)):
    /// takes the per-host lock shared, then the shard's lock file shared,
    /// or exclusively for a moment when no other generator holds it
    /// ([`Store::is_first`]: the opener plans the restart, then calls
    /// [`Store::share`]). Waits at most `wait` for a member that holds a
    /// lock.
    pub(crate) fn join(dir: &Path, shard: u32, id_space: &str, wait: Duration) -> Result<Store> {
        let dir = &cleaned(dir)?;
        let dir_fd = open_dir(dir, true)?.ok_or_else(|| {
            Error::io(
                "open the state directory",
                dir,
                io::ErrorKind::NotFound.into(),
            )
        })?;
        let dir_id = file_id(&dir_fd).map_err(|e| Error::io("examine", dir, e))?;
        let host = HostLock::join(
            id_space,
            shard,
            &DirIdentity {
                id: dir_id,
                path: dir.to_path_buf(),
            },
        )?;
        let lock_path = lock_path(dir, shard);
        let (lock, lock_id, first) = join_shard(&dir_fd, dir, &lock_path, shard, wait)?;
        let claim = ClaimFile::open(&dir_fd, dir, shard)?;
        let turn = claim.turn(wait)?;
        if first {
            remove_stale_temporaries(&dir_fd, shard);
        }
        let note = sign_lock_file(&lock, &lock_path)?;
        drop(turn);
        Ok(Store {
            dir: dir.to_path_buf(),
            path: state_path(dir, shard),
            lock_path,
            shard,
            dir_fd,
            dir_id,
            lock,
            lock_id,
            note: Mutex::new(note),
            _host: Some(host),
            claim: Some(claim),
            wrote: AtomicU64::new(0),
            first,
            wait,
        })
    }

    /// Whether this generator opened with no other holding the shard in
    /// this directory (always, for an exclusive holder).
    pub(crate) fn is_first(&self) -> bool {
        self.first
    }

    /// Whether this generator shares the shard with other processes.
    pub(crate) fn is_shared(&self) -> bool {
        self.claim.is_some()
    }

    /// The first member has planned the restart and written it: from now
    /// on others may join.
    pub(crate) fn share(&self) -> Result<()> {
        if self.claim.is_some() && self.first {
            change_flock(&self.lock, Flock::Shared)
                .map_err(|e| Error::io("share the lock of", &self.lock_path, e))?;
        }
        Ok(())
    }

    /// Whether this member is the last one holding the shard: it then
    /// holds the shard's lock file exclusively (a failed attempt lets go of
    /// its shared hold, so call it only when closing). Always, for an
    /// exclusive holder.
    pub(crate) fn is_last(&self) -> bool {
        self.claim.is_none() || try_flock(&self.lock, Flock::Exclusive).unwrap_or(false)
    }

    /// Takes the shard's short lock, which members hold while they draw a
    /// block or write the state file: `None` for an exclusive holder,
    /// which needs none.
    ///
    /// # Errors
    ///
    /// [`Error::MemberStalled`] when another member holds it longer than
    /// this generator waits; [`Error::StateReplaced`] when the directory or
    /// the lock file is no longer the one this member opened.
    pub(crate) fn turn(&self) -> Result<Option<Turn<'_>>> {
        match &self.claim {
            Some(claim) => {
                let turn = claim.turn(self.wait).map_err(|e| match e {
                    // The claim file gone with the directory or the lock
                    // file: that is what to report.
                    Error::StateReplaced { .. } => self.check_ground().err().unwrap_or(e),
                    e => e,
                })?;
                // A member whose directory or lock file was replaced is no
                // longer one: another generator may have started the shard
                // again, and its claims are not this one's to draw from.
                self.check_ground()?;
                claim.check(&turn)?;
                // What other members wrote since.
                let note = read_lock_file(&self.lock)
                    .map_err(|e| Error::io("read the lock file", &self.lock_path, e))?;
                *crate::sync::lock(&self.note) = note;
                Ok(Some(turn))
            }
            None => Ok(None),
        }
    }

    /// What the claim file says, read during a turn: nothing
    /// ([`Claims::default`], as from a garbled file) when it is an older
    /// copy put back (see
    /// [*Older copies and deleted files*](super#older-copies-and-deleted-files)).
    ///
    /// Its `next` only goes up while members run, but for a member that
    /// leaves and gives back the end of its block, which lies above every
    /// other member's blocks. So a claim file is an older copy when its
    /// `next` is below what the lock file's note says the last member to
    /// write it wrote (a copy of the claim file alone put back, whoever
    /// drew last), or below what this member itself wrote last (the claim
    /// file and the lock file put back together, and this member drew
    /// after the copy was taken). Nothing it says is then to be trusted:
    /// the next draw starts after the state file's mark, above every block
    /// any member drew, and writes both files again.
    pub(crate) fn claims(&self, turn: &Turn<'_>) -> Result<Claims> {
        let Some(claim) = &self.claim else {
            return Ok(Claims::default());
        };
        let claims = claim.read(turn)?;
        let Some(next) = claims.next else {
            return Ok(claims);
        };
        let noted = crate::sync::lock(&self.note).claim;
        let wrote = Some(self.wrote.load(Relaxed)).filter(|&w| w > next);
        let why = match noted {
            Ok(noted) => match noted.filter(|&n| n > next).max(wrote) {
                Some(above) => format!(
                    "says its next block starts at {next}, below {above} that its members \
                     wrote last: an older copy was put back"
                ),
                None => return Ok(claims),
            },
            Err(()) => format!(
                "cannot be checked: the claim line of the lock file {} is garbled",
                self.lock_path.display()
            ),
        };
        log::warn!(
            "the claim file {} of shard {} {why}; the next block starts after the state \
             file's mark instead",
            self.dir
                .join(format!("shard-{}.claim", self.shard))
                .display(),
            self.shard
        );
        Ok(Claims::default())
    }

    /// The claim file's `next` as the lock file's note says, read at the
    /// start of the turn this member is in (or last was in).
    pub(crate) fn noted_claim(&self) -> Option<u64> {
        crate::sync::lock(&self.note).claim.ok().flatten()
    }

    /// Writes the claim file during a turn, and its `next` in the lock
    /// file's note (see [`Store::claims`]). Of the two writes, the one
    /// that lowers the value goes first, so that a member killed between
    /// them leaves the note at or below the claim file, which then still
    /// counts.
    pub(crate) fn set_claims(&self, turn: &Turn<'_>, claims: &Claims) -> Result<()> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        if claims.next.is_none() {
            // A claim nobody vouches for (an older copy found, a garbled
            // file): the note keeps the counter it holds. Written without
            // it, a member killed before the claim file is written would
            // leave an older copy there with nothing to refute it; kept,
            // the next draw starts after the mark, above it.
            claim.write(turn, claims)?;
            self.wrote.store(0, Relaxed);
            return Ok(());
        }
        let mut note = crate::sync::lock(&self.note);
        let lowers = match (note.claim, claims.next) {
            (Ok(Some(noted)), Some(next)) => next < noted,
            _ => false,
        };
        if !lowers {
            claim.write(turn, claims)?;
        }
        // A garbled mark is left as it is, for `load` to refuse: the note
        // then keeps its old `claim` line, and a lower claim file counts
        // as an older copy until the note can be written again.
        if let Ok(mark) = note.mark {
            // Read at the start of this turn, or written during it: no
            // other process wrote it since. Unknown if this write fails.
            let len = note.len.take();
            let len = write_lock_file(&self.lock, note.had_state, mark, claims.next, len)
                .map_err(|e| Error::io("write the lock file", &self.lock_path, e))?;
            note.claim = Ok(claims.next);
            note.len = Some(len);
        }
        if lowers {
            claim.write(turn, claims)?;
        }
        self.wrote.store(claims.next.unwrap_or(0), Relaxed);
        Ok(())
    }

    /// Creates the directory if needed (mode 0700), checks it, and takes
    /// the shard's lock in it.
    pub(crate) fn open(dir: &Path, shard: u32) -> Result<Store> {
        let dir = &cleaned(dir)?;
        let dir_fd = open_dir(dir, true)?.ok_or_else(|| {
            Error::io(
                "open the state directory",
                dir,
                io::ErrorKind::NotFound.into(),
            )
        })?;
        let dir_id = file_id(&dir_fd).map_err(|e| Error::io("examine", dir, e))?;
        let lock_path = lock_path(dir, shard);
        let (lock, lock_id) = lock_shard(&dir_fd, dir, &lock_path, shard)?;
        remove_stale_temporaries(&dir_fd, shard);
        let note = sign_lock_file(&lock, &lock_path)?;
        Ok(Store {
            dir: dir.to_path_buf(),
            path: state_path(dir, shard),
            lock_path,
            shard,
            dir_fd,
            dir_id,
            lock,
            lock_id,
            note: Mutex::new(note),
            _host: None,
            claim: None,
            wrote: AtomicU64::new(0),
            first: true,
            wait: Duration::ZERO,
        })
        .inspect(|store| store.forget_claims())
    }

    /// An exclusive holder (a leased generator, a recovery) changes the
    /// shard without drawing from the claim file: what it says is no
    /// longer true, so it is emptied, and the next members start after
    /// the state file. The lock file's note forgets it too.
    fn forget_claims(&self) {
        let name = format!("shard-{}.claim", self.shard);
        let path = self.dir.join(&name);
        if let Ok(Some(file)) = super::trust::open_in(&self.dir_fd, &path, &name, OFlags::RDWR) {
            let _ = file.set_len(0);
        }
        let mut note = crate::sync::lock(&self.note);
        if let (Ok(mark), Ok(Some(_))) = (note.mark, note.claim) {
            let len = note.len.take();
            if let Ok(len) = write_lock_file(&self.lock, note.had_state, mark, None, len) {
                note.claim = Ok(None);
                note.len = Some(len);
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the state file: `None` if there is none yet.
    ///
    /// A missing state file for a shard that had one in this directory,
    /// and a state file whose mark is below the one the lock file keeps
    /// (an older copy put back), are [`Error::BadState`], never a fresh
    /// start.
    pub(crate) fn load(&self) -> Result<Option<StateFile>> {
        let state = match self.read_raw()? {
            Some((bytes, _)) => Some(parse_state(&bytes, &self.path, self.shard)?),
            None => None,
        };
        let note = *crate::sync::lock(&self.note);
        match &state {
            None if note.had_state => return Err(missing_state(&self.path, self.shard)),
            None => {}
            Some(state) => check_lock_mark(&self.path, self.shard, state, &note)?,
        }
        Ok(state)
    }

    /// The state file's bytes and modification time (Unix seconds), as
    /// checked and capped as [`Store::load`] reads them: `None` if there
    /// is none.
    pub(crate) fn read_raw(&self) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        let read = read_in(&self.dir_fd, &self.path, &state_name(self.shard))?;
        Ok(read.map(|(bytes, stat)| (bytes, u64::try_from(stat.st_mtime).ok())))
    }

    /// Keeps `bytes` (a damaged state file) beside the state file as
    /// `shard-N.state.bad`, replacing whatever had that name (a symbolic
    /// link itself, never its target).
    pub(crate) fn keep_bad(&self, bytes: &[u8]) -> Result<()> {
        let name = format!("{}.bad", state_name(self.shard));
        let kept = self.dir.join(&name);
        self.check_ground()?;
        self.replace(&name, bytes)
            .map_err(|e| Error::io("keep a copy of the old state as", &kept, e))
    }

    /// Replaces the state file atomically and durably.
    ///
    /// First checks that the state directory and the lock file are still
    /// the ones this store opened: if either was deleted or replaced,
    /// writes nothing and returns [`Error::StateReplaced`]. Records in the lock
    /// file that the shard has a state file, after the first write.
    pub(crate) fn save(&self, state: &StateFile) -> Result<()> {
        self.check_ground()?;
        if let Err(e) = self.replace(&state_name(self.shard), state.render().as_bytes()) {
            // A directory removed under the write makes it fail: say why.
            self.check_ground()?;
            return Err(Error::io("write the state file in", &self.dir, e));
        }
        self.note_in_lock_file(state);
        Ok(())
    }

    /// Records in the lock file, after a state file was written, that the
    /// shard has one and the highest mark it holds, so that an older copy
    /// of the state file put back later is refused ([`Store::load`]). The
    /// first time, synced: a lost `state` line would let a shard whose
    /// state file is gone start again. A failure is logged and retried at
    /// the next write: the state file already holds the reservation.
    fn note_in_lock_file(&self, state: &StateFile) {
        let mut note = crate::sync::lock(&self.note);
        let highest = state.high_water.values().copied().max();
        let mark = match note.mark {
            Ok(Some(old)) => highest.map(|m| m.max(old)).or(Some(old)),
            _ => highest,
        };
        if note.had_state && note.mark == Ok(mark) {
            return;
        }
        let first = !note.had_state;
        let claim = note.claim.unwrap_or(None);
        let len = note.len.take();
        let written = write_lock_file(&self.lock, true, mark, claim, len).and_then(|len| {
            if first {
                self.lock.sync_all()?;
            }
            Ok(len)
        });
        match written {
            Ok(len) => {
                note.had_state = true;
                note.mark = Ok(mark);
                note.claim = Ok(claim);
                note.len = Some(len);
            }
            Err(e) if first || note.mark.is_ok() => {
                log::warn!(
                    "cannot record in {} that shard {} has a state file and its mark ({e}); \
                     retrying at the next write",
                    self.lock_path.display(),
                    self.shard
                );
                // Warned once: until a write succeeds, `mark` says "not
                // known to be written".
                if !first {
                    note.mark = Err(());
                }
            }
            Err(_) => {}
        }
    }

    /// `Err(Error::StateReplaced)` unless the directory and lock file paths still
    /// name the directory and file this store holds open.
    ///
    /// The directory by its path; the lock file by its name in the
    /// directory held open, which the path was just found to name. Both
    /// read no times (see [`id_at`]): members check at every turn.
    fn check_ground(&self) -> Result<()> {
        let replaced = |reason: String| Error::StateReplaced {
            shard: self.shard,
            reason,
        };
        match id_at(rfs::CWD, &self.dir) {
            Ok(Some((id, _))) if id == self.dir_id => {}
            Ok(Some(_)) => {
                return Err(replaced(format!(
                    "the state directory {} was replaced",
                    self.dir.display()
                )))
            }
            Ok(None) => {
                return Err(replaced(format!(
                    "the state directory {} was deleted",
                    self.dir.display()
                )))
            }
            Err(e) => return Err(Error::io("examine", &self.dir, e)),
        }
        let name = self.lock_path.file_name().map(Path::new);
        match id_at(&self.dir_fd, name.unwrap_or(&self.lock_path)) {
            Ok(Some((id, _))) if id == self.lock_id => Ok(()),
            Ok(Some(_)) => Err(replaced(format!(
                "the lock file {} was replaced",
                self.lock_path.display()
            ))),
            Ok(None) => Err(replaced(format!(
                "the lock file {} was deleted",
                self.lock_path.display()
            ))),
            Err(e) => Err(Error::io("examine", &self.lock_path, e)),
        }
    }

    /// Writes `bytes` to a new temporary file in the directory (0600,
    /// created exclusively), syncs it, renames it over `name` and syncs the
    /// directory, all relative to the directory's descriptor: a directory
    /// deleted meanwhile makes this fail, and one recreated at the same
    /// path is never written to.
    fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = tempfile::Builder::new()
            .prefix(&temporary_prefix(self.shard))
            .suffix(TEMPORARY_SUFFIX)
            .make_in(&self.dir, |path| {
                let name = path
                    .file_name()
                    .ok_or_else(|| io::Error::other("no file name"))?;
                let fd = rfs::openat(
                    &self.dir_fd,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                rfs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
                Ok(File::from(fd))
            })?;
        let (mut file, mut temp_path) = tmp.into_parts();
        // Removed by name relative to the directory below, never by path.
        temp_path.disable_cleanup(true);
        let tmp_name = temp_path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| io::Error::other("no file name"))?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                rfs::renameat(&self.dir_fd, &*tmp_name, &self.dir_fd, name).map_err(io::Error::from)
            });
        if let Err(e) = written {
            let _ = rfs::unlinkat(&self.dir_fd, &*tmp_name, AtFlags::empty());
            return Err(e);
        }
        rfs::fsync(&self.dir_fd).map_err(io::Error::from)
    }
}

impl Drop for Store {
    /// Lets go of the shard's lock before closing the lock file: a child
    /// of `fork()` holds a copy of the open file, and with it the lock
    /// (shared, or exclusive after [`Store::is_last`]), for as long as it
    /// lives; the next process would find the shard held. Only the process
    /// that opened the store drops it: a child's copy of a generator never
    /// does.
    fn drop(&mut self) {
        let _ = fs2::FileExt::unlock(&self.lock);
    }
}

/// Reads the lock file's note and writes this process's pid into it,
/// keeping the rest. The pid is advice for error messages; the lock is
/// what protects. A garbled mark is left as it is, for `load` to refuse,
/// and so is a garbled `claim` line, which makes the claim file untrusted.
fn sign_lock_file(lock: &File, lock_path: &Path) -> Result<LockNote> {
    let mut note =
        read_lock_file(lock).map_err(|e| Error::io("read the lock file", lock_path, e))?;
    if let (Ok(mark), Ok(claim)) = (note.mark, note.claim) {
        note.len = write_lock_file(lock, note.had_state, mark, claim, note.len).ok();
    }
    Ok(note)
}

/// How the temporary files a writer of `shard` renames into place begin:
/// `.shard-N.`, hidden, and never a prefix of another shard's.
fn temporary_prefix(shard: u32) -> String {
    format!(".shard-{shard}.")
}

/// How those temporary files end.
const TEMPORARY_SUFFIX: &str = ".tmp";

/// Removes temporary files left by writers of this shard that were killed
/// between creating and renaming them. Only the lock holder calls this, so
/// none of them is in use.
fn remove_stale_temporaries(dir_fd: &OwnedFd, shard: u32) {
    let prefix = temporary_prefix(shard);
    let Ok(entries) = rfs::Dir::read_from(dir_fd) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(TEMPORARY_SUFFIX) {
            let _ = rfs::unlinkat(dir_fd, entry.file_name(), AtFlags::empty());
        }
    }
}
