//! The shard's lock file in the state directory: its `flock`, and the
//! note it keeps (the holder's pid, whether the shard had a state file,
//! the highest mark one held, the claim file's counter as its members
//! last wrote it).

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{self as rfs, Mode, OFlags};

use super::format::StateFile;
use super::paths::lock_name;
use super::remedy::Remedy;
use super::trust::{check_file, file_id, open_in};
use crate::error::{Error, Result};
use crate::flock::{try_flock, Flock};

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
    /// The claim file's `next` as the processes sharing the shard last
    /// wrote it, written in the same turn (a line `claim N`): a claim file
    /// that says less is an older copy put back (see
    /// [*Older copies and deleted files*](super#older-copies-and-deleted-files)).
    /// `Err` if the line is there but garbled.
    pub(super) claim: std::result::Result<Option<u64>, ()>,
    /// How long the note was when read or last written: `None` when not
    /// known (it was longer than a note can be).
    pub(super) len: Option<usize>,
}

impl Default for LockNote {
    /// No lock file: nothing recorded.
    fn default() -> Self {
        LockNote {
            pid: None,
            had_state: false,
            mark: Ok(None),
            claim: Ok(None),
            len: Some(0),
        }
    }
}

/// Reads the lock file's note. A read that fails is an error, never an
/// empty note: an empty note would let a shard whose state file is gone
/// start again at the clock.
pub(super) fn read_lock_file(file: &File) -> io::Result<LockNote> {
    let mut bytes = [0; 256];
    let n = read_start(file, &mut bytes)?;
    let text = String::from_utf8_lossy(&bytes[..n]);
    let mut lines = text.lines().map(str::trim);
    let mut note = LockNote {
        pid: lines.next().and_then(|l| l.parse().ok()),
        len: (n < bytes.len()).then_some(n),
        ..LockNote::default()
    };
    let number = |text: &str| match text.trim().parse::<u64>() {
        Ok(n) if text.trim().bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(()),
    };
    let mut claim = None;
    for line in lines {
        if line == "state" {
            note.had_state = true;
        } else if let Some(mark) = line.strip_prefix("high_water") {
            note.mark = number(mark);
        } else if let Some(next) = line.strip_prefix("claim") {
            // The first one: a note written shorter over a longer one by a
            // process killed before it cut the file leaves the old tail
            // behind it.
            claim.get_or_insert(number(next));
        }
    }
    note.claim = claim.unwrap_or(Ok(None));
    Ok(note)
}

/// Reads the start of a small file into `bytes`: how many bytes it read,
/// all of the file when fewer than `bytes` holds. A short read of a regular
/// file is its end, so a file that fits takes one system call.
fn read_start(file: &File, bytes: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < bytes.len() {
        match file.read_at(&mut bytes[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n < bytes.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes the lock file's note: this process's pid, the `state` line, the
/// high-water mark and the claim file's counter. Written in place (the
/// file is never replaced), as one write of a few dozen bytes, cut to its
/// length unless the note was `len` bytes long (as read, with the lock
/// held, since) and this one is no shorter. Its length.
pub(super) fn write_lock_file(
    file: &File,
    had_state: bool,
    mark: Option<u64>,
    claim: Option<u64>,
    len: Option<usize>,
) -> io::Result<usize> {
    // The pid padded to the widest one, as in the claim file: members
    // whose pids differ in width write notes of one length, and a note
    // seldom has to be cut.
    let mut text = format!("{:<10}\n", super::claim::pid());
    if had_state {
        text.push_str("state\n");
    }
    if let Some(mark) = mark {
        text.push_str(&format!("high_water {mark}\n"));
    }
    if let Some(next) = claim {
        text.push_str(&format!("claim {next}\n"));
    }
    file.write_all_at(text.as_bytes(), 0)?;
    if len.is_none_or(|len| text.len() < len) {
        file.set_len(text.len() as u64)?;
    }
    Ok(text.len())
}

/// Takes the exclusive lock without blocking: whether it was taken.
/// `inspect` takes it exclusively too, for an instant, to see whether a
/// generator runs ([`is_held`]), so a contended lock is tried again for a
/// few milliseconds before it counts as held.
fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    for _ in 0..10 {
        if try_flock(file, Flock::Exclusive)? {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    try_flock(file, Flock::Exclusive)
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

/// Opens the shard's lock file (creating it, 0600, if there is none) and
/// checks it: the file and its `(device, inode)`.
fn open_lock_file(dir_fd: &OwnedFd, lock_path: &Path, shard: u32) -> Result<(File, (u64, u64))> {
    let lock_name = lock_name(shard);
    let lock = match open_in(
        dir_fd,
        lock_path,
        &lock_name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
    ) {
        Ok(Some(file)) => {
            // Ours: 0600 whatever the umask.
            rfs::fchmod(&file, Mode::from_raw_mode(0o600))
                .map_err(|e| Error::io("set the mode of", lock_path, e.into()))?;
            file
        }
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            open_in(dir_fd, lock_path, &lock_name, OFlags::RDWR)?.ok_or_else(|| {
                Error::io(
                    "open the lock file",
                    lock_path,
                    io::ErrorKind::NotFound.into(),
                )
            })?
        }
        Err(e) => return Err(e),
        // Only when the directory vanished under us.
        Ok(None) => {
            return Err(Error::io(
                "create the lock file",
                lock_path,
                io::ErrorKind::NotFound.into(),
            ))
        }
    };
    check_file(&lock, lock_path)?;
    let lock_id = file_id(&lock).map_err(|e| Error::io("examine", lock_path, e))?;
    Ok((lock, lock_id))
}

/// Opens the shard's lock file in the directory (creating it, 0600, if
/// there is none), checks it and takes its exclusive lock: the file, held
/// open for the lock, and its `(device, inode)`. [`Error::Locked`], with
/// the holder's pid where legible, if another process holds it.
pub(super) fn lock_shard(
    dir_fd: &OwnedFd,
    dir: &Path,
    lock_path: &Path,
    shard: u32,
) -> Result<(File, (u64, u64))> {
    let (lock, lock_id) = open_lock_file(dir_fd, lock_path, shard)?;
    match try_lock_exclusive(&lock) {
        Ok(true) => Ok((lock, lock_id)),
        Ok(false) => Err(Error::Locked {
            shard,
            dir: dir.to_path_buf(),
            pid: crate::host_lock::flock_holder(&lock)
                .or_else(|| read_lock_file(&lock).ok().and_then(|note| note.pid)),
        }),
        Err(e) => Err(Error::io("lock", lock_path, e)),
    }
}

/// Whether some process holds the lock, shared or exclusive, learnt by
/// taking it exclusively for an instant: a generator opening meanwhile
/// waits that instant and tries again, never mistaking it for a member.
pub(super) fn is_held(file: &File) -> io::Result<bool> {
    let taken = try_flock(file, Flock::Exclusive)?;
    if taken {
        let _ = fs2::FileExt::unlock(file);
    }
    Ok(!taken)
}

/// Opens the shard's lock file as [`lock_shard`] does and joins the
/// generators that hold it: exclusively when none does (the `bool` is
/// then `true`: the caller plans the restart, then shares the lock), else
/// shared. A generator holding it exclusively (one planning, for an
/// instant; a leased generator or a recovery, for longer) is waited for at
/// most `wait`, then [`Error::Locked`].
pub(super) fn join_shard(
    dir_fd: &OwnedFd,
    dir: &Path,
    lock_path: &Path,
    shard: u32,
    wait: std::time::Duration,
) -> Result<(File, (u64, u64), bool)> {
    let (lock, lock_id) = open_lock_file(dir_fd, lock_path, shard)?;
    let deadline = std::time::Instant::now() + wait;
    let mut attempt = 0u32;
    loop {
        let lock_error = |e| Error::io("lock", lock_path, e);
        if try_flock(&lock, Flock::Exclusive).map_err(lock_error)? {
            return Ok((lock, lock_id, true));
        }
        if try_flock(&lock, Flock::Shared).map_err(lock_error)? {
            return Ok((lock, lock_id, false));
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(Error::Locked {
                shard,
                dir: dir.to_path_buf(),
                pid: crate::host_lock::flock_holder(&lock)
                    .or_else(|| read_lock_file(&lock).ok().and_then(|note| note.pid)),
            });
        }
        let pause = std::time::Duration::from_micros(50u64 << attempt.min(6));
        std::thread::sleep(pause.min(deadline - now));
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note_of(text: &str) -> LockNote {
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(text.as_bytes(), 0).unwrap();
        read_lock_file(&file).unwrap()
    }

    #[test]
    fn the_note_keeps_the_claim_line_and_refuses_a_garbled_one() {
        let file = tempfile::tempfile().unwrap();
        let len = write_lock_file(&file, true, Some(1_763_751_239), Some(123_456), None).unwrap();
        let note = read_lock_file(&file).unwrap();
        assert_eq!(note.pid, Some(std::process::id()));
        assert!(note.had_state);
        assert_eq!(note.mark, Ok(Some(1_763_751_239)));
        assert_eq!(note.claim, Ok(Some(123_456)));
        assert_eq!(note.len, Some(len));
        // A note written before the line existed says nothing of it.
        assert_eq!(note_of("42\nstate\nhigh_water 5\n").claim, Ok(None));
        assert_eq!(note_of("42\nstate\nclaim 12x\n").claim, Err(()));
        assert_eq!(note_of("42\nclaim\n").claim, Err(()));
        // The tail an unfinished write leaves behind comes after the line
        // written last.
        assert_eq!(note_of("42\nclaim 7\nclaim 700\n").claim, Ok(Some(7)));
    }

    #[test]
    fn a_note_is_cut_to_its_length_unless_it_grew() {
        let file = tempfile::tempfile().unwrap();
        let long = write_lock_file(&file, true, Some(1_000_000), Some(1_000_000), None).unwrap();
        // Shorter: cut, whatever the length known.
        let short = write_lock_file(&file, true, Some(1), Some(1), Some(long)).unwrap();
        assert_eq!(file.metadata().unwrap().len(), short as u64);
        assert_eq!(read_lock_file(&file).unwrap().claim, Ok(Some(1)));
        // As long or longer than the note it replaces: one write.
        let again = write_lock_file(&file, true, Some(2), Some(2), Some(short)).unwrap();
        assert_eq!(again, short);
        assert_eq!(read_lock_file(&file).unwrap().claim, Ok(Some(2)));
        // A length not known: cut.
        file.set_len(200).unwrap();
        write_lock_file(&file, true, Some(3), None, None).unwrap();
        let note = read_lock_file(&file).unwrap();
        assert_eq!((note.mark, note.claim), (Ok(Some(3)), Ok(None)));
        assert_eq!(note.len, Some(file.metadata().unwrap().len() as usize));
    }

    #[test]
    fn reading_the_start_of_a_file_stops_at_its_end_or_the_buffer() {
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(&[b'x'; 300], 0).unwrap();
        let mut bytes = [0; 256];
        assert_eq!(read_start(&file, &mut bytes).unwrap(), 256);
        assert_eq!(read_lock_file(&file).unwrap().len, None);
        file.set_len(10).unwrap();
        assert_eq!(read_start(&file, &mut bytes).unwrap(), 10);
    }
}
