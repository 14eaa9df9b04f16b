//! The shard's claim file, `shard-N.claim`: the counter the processes
//! sharing a shard draw their blocks from, and the short lock they take
//! turns under (see [*Processes sharing a shard*](super#processes-sharing-a-shard)).
//!
//! The file is never renamed or removed, and written in place: a few dozen
//! bytes under its own exclusive `flock`. It is not synced: it only has to
//! be right while the host stays up, and it names the boot it was written
//! in, so that after a restart of the host nobody trusts it and the first
//! generator starts after the state file's durable mark instead. Its
//! counter is written to the lock file's note too, so that an older copy
//! put back is told apart ([`Store::claims`](super::Store::claims)).
//!
//! ```text
//! 4242
//! boot 60b8a74e-9190-4fbf-b16c-2a0d1e5f3c77
//! next 53547265818641
//! reserved 0 1763751239
//! clock 1763751234 86400123
//! ```

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use rustix::fs::{self as rfs, Mode, OFlags};

use super::trust::{check_file, file_id, id_at, open_in};
use super::wait::{self, Progress, Watch};
use crate::error::{Error, Result};
use crate::flock::{try_flock, Flock};

/// What the claim file says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claims {
    /// The first counter value no member was given: blocks are drawn
    /// from here. `None` when the file does not say it for this boot (a
    /// new file, one from before the host restarted, a garbled one): then
    /// nothing below the state file's mark may be handed out. Read
    /// through [`Store::claims`](super::Store::claims), `None` too for an
    /// older copy put back.
    pub(crate) next: Option<u64>,
    /// The durable mark (Unix seconds) of the members' clock id, as the
    /// last member to write the state file left it: `(clock_id, second)`.
    /// A member reads the others' reservations here without reading the
    /// state file. Never above what the state file holds.
    pub(crate) reserved: Option<(u64, u64)>,
    /// The members' time: the wall-clock second (Unix) the last member to
    /// draw acted on, and the time since boot when it did, in
    /// milliseconds ([`since_boot`](crate::clock::since_boot)). A process
    /// that joins has no clock reading of its own to judge a forward step
    /// by: this one, plus the time elapsed since on the boot's clock, is
    /// where the members' clock should be now.
    pub(crate) clock: Option<(u64, u64)>,
    /// A forward step of the clock a process saw at open, far ahead of the
    /// members' time and not followed yet: the reading, and the time since
    /// boot when it was first seen, in milliseconds. Processes that open
    /// later follow the step once it has held for the confirmation time,
    /// as a running generator does; a member that acts on the stepped time
    /// removes it.
    pub(crate) step: Option<(u64, u64)>,
}

/// The claim file, held open.
///
/// Its `flock` is taken on a descriptor opened for each turn and closed
/// after it, never on the one held open: a `flock` belongs to the open
/// file, which a child of `fork()` shares, so a lock taken on a
/// long-lived descriptor would outlive a member killed during its turn
/// for as long as any child it forked lives, and stall every other member.
#[derive(Debug)]
pub(crate) struct ClaimFile {
    file: File,
    dir_fd: OwnedFd,
    name: String,
    path: PathBuf,
    /// The file's `(device, inode)`: a member checks at each turn that
    /// the path still names it (see [`ClaimFile::check`]).
    id: (u64, u64),
    shard: u32,
    dir: PathBuf,
    /// The threads of this generator (its calls and its reservation
    /// thread) take turns here first: a `flock` belongs to the open file,
    /// so it keeps other processes and generators out, not the other
    /// threads that use the same file.
    threads: Mutex<()>,
    /// Turns this generator began (a descriptor reopened for each, taken
    /// or not), and the file's length as learnt in the turn `length_turn`:
    /// a turn that checked the file knows its length, and reads and writes
    /// it without asking the system again. Changed only under `threads`.
    turns: AtomicU64,
    length_turn: AtomicU64,
    length: AtomicU64,
    /// How many turns this generator's threads took: one of them holding
    /// the lock for long is told from one after the other.
    taken: AtomicU64,
}

/// The claim file's lock, held on a descriptor of its own: released
/// when dropped.
pub(crate) struct Turn<'a> {
    file: File,
    _thread: MutexGuard<'a, ()>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let _ = fs2::FileExt::unlock(&self.file);
    }
}

/// How long a member waits between attempts at a lock another member
/// holds: short at first (a draw holds it for microseconds, a write of the
/// state file for a few milliseconds), then longer.
fn pause(attempt: u32) -> Duration {
    Duration::from_micros(20u64 << attempt.min(7))
}

impl ClaimFile {
    /// Opens (creating, 0600) and checks the shard's claim file.
    pub(crate) fn open(dir_fd: &OwnedFd, dir: &Path, shard: u32) -> Result<ClaimFile> {
        let name = format!("shard-{shard}.claim");
        let path = dir.join(&name);
        let flags = OFlags::RDWR | OFlags::CREATE;
        let file = open_in(dir_fd, &path, &name, flags)?
            .ok_or_else(|| Error::io("create", &path, io::ErrorKind::NotFound.into()))?;
        check_file(&file, &path)?;
        rfs::fchmod(&file, Mode::from_raw_mode(0o600))
            .map_err(|e| Error::io("set the mode of", &path, e.into()))?;
        let id = file_id(&file).map_err(|e| Error::io("examine", &path, e))?;
        let dir_fd = dir_fd
            .try_clone()
            .map_err(|e| Error::io("open the state directory", dir, e))?;
        Ok(ClaimFile {
            file,
            dir_fd,
            name,
            path,
            id,
            shard,
            dir: dir.to_path_buf(),
            threads: Mutex::new(()),
            turns: AtomicU64::new(0),
            length_turn: AtomicU64::new(u64::MAX),
            length: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        })
    }

    /// Takes the claim lock, waiting for the member that holds it as long
    /// as the members make progress or the lock changes hands; without
    /// either, `wait` for a holder that is stopped or asleep, and
    /// [`LIVE_WAITS`](wait::LIVE_WAITS) times `wait` for one that is live
    /// or cannot be seen: past that, [`Error::MemberStalled`] naming it.
    pub(crate) fn turn(&self, wait: Duration) -> Result<Turn<'_>> {
        let mut watch = Watch::new(self.progress());
        let mut attempt = 0;
        loop {
            let thread = match self.threads.try_lock() {
                Ok(guard) => Some(guard),
                // Nothing under this lock is left half-done by a panic.
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            // Another thread of this generator is in its turn.
            let here = thread.is_none();
            if let Some(thread) = thread {
                let file = self.reopen()?;
                let taken = try_flock(&file, Flock::Exclusive)
                    .map_err(|e| Error::io("lock", &self.path, e))?;
                if taken {
                    self.taken.fetch_add(1, Relaxed);
                    return Ok(Turn {
                        file,
                        _thread: thread,
                    });
                }
            }
            let seen = watch.look(self.progress(), wait, || wait::sight(&self.file, here));
            if let Some((holder, waited)) = seen {
                return Err(Error::MemberStalled {
                    shard: self.shard,
                    dir: self.dir.clone(),
                    pid: holder.pid(),
                    holder,
                    waited,
                });
            }
            std::thread::sleep(pause(attempt));
            attempt += 1;
        }
    }

    /// The error for a claim file found `what` ("deleted", "replaced"):
    /// when the state directory itself is gone from its path, that is
    /// what happened, and what the message names.
    fn gone(&self, what: &str) -> Error {
        let dir = match id_at(rfs::CWD, &self.dir) {
            Ok(Some((id, _))) if file_id(&self.dir_fd).ok() == Some(id) => None,
            Ok(Some(_)) => Some("replaced"),
            Ok(None) => Some("deleted"),
            Err(_) => None,
        };
        let reason = match dir {
            Some(dir_what) => format!("the state directory {} was {dir_what}", self.dir.display()),
            None => format!("the claim file {} was {what}", self.path.display()),
        };
        Error::StateReplaced {
            shard: self.shard,
            reason,
        }
    }

    /// What shows the members making progress: the claim file's text, read
    /// without the lock (a write half seen is a change too), and this
    /// generator's turns.
    fn progress(&self) -> Progress {
        let mut text = [0u8; 256];
        let len = self.file.read_at(&mut text, 0).unwrap_or(0);
        Progress::new(text, len, self.taken.load(Relaxed))
    }

    /// A descriptor of its own on the claim file, for one turn:
    /// `Err(Error::StateReplaced)` if the path no longer names the file
    /// this member opened (see [`ClaimFile::check`]).
    fn reopen(&self) -> Result<File> {
        let gone = |what: &str| self.gone(what);
        // A new turn: what an earlier one learnt of the length is stale.
        self.turns.fetch_add(1, Relaxed);
        let file = open_in(&self.dir_fd, &self.path, &self.name, OFlags::RDWR)?
            .ok_or_else(|| gone("deleted"))?;
        match id_at(&file, Path::new("")) {
            Ok(Some((id, _))) if id == self.id => Ok(file),
            Ok(_) => Err(gone("replaced")),
            Err(e) => Err(Error::io("examine", &self.path, e)),
        }
    }

    /// `Err(Error::StateReplaced)` unless the path still names the file
    /// this member opened. A claim file removed (or replaced) under the
    /// members is a second counter for whoever opens the path next: it
    /// starts after the state file's mark, and the members that hold the
    /// old file must draw nothing more from it, or both would hand out the
    /// same values. Checked during a turn: a member that passed it drew
    /// below the mark the newcomer reads.
    pub(crate) fn check(&self, _turn: &Turn<'_>) -> Result<()> {
        let gone = |what: &str| self.gone(what);
        // By its name in the directory held open: the store checks, in
        // the same turn, that the directory's path still names it.
        match id_at(&self.dir_fd, Path::new(&self.name)) {
            Ok(Some((id, length))) if id == self.id => {
                // Under the lock: the length stays until this turn writes.
                self.learnt(Some(length));
                Ok(())
            }
            Ok(Some(_)) => Err(gone("replaced")),
            Ok(None) => Err(gone("deleted")),
            Err(e) => Err(Error::io("examine", &self.path, e)),
        }
    }

    /// Reads the file. A read that fails is an error, never "nothing
    /// claimed".
    pub(crate) fn read(&self, turn: &Turn<'_>) -> Result<Claims> {
        let mut bytes = [0u8; 256];
        // The length this turn learnt, if any: then no read past the end
        // to find it.
        let known = self.known().filter(|&n| n <= bytes.len() as u64);
        let mut n = 0;
        let mut whole = false;
        while n < bytes.len() {
            if known == Some(n as u64) {
                whole = true;
                break;
            }
            match turn.file.read_at(&mut bytes[n..], n as u64) {
                Ok(0) => {
                    whole = true;
                    break;
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.learnt(None);
                    return Err(Error::io("read", &self.path, e));
                }
            }
        }
        self.learnt(whole.then_some(n as u64));
        Ok(parse(
            &String::from_utf8_lossy(&bytes[..n]),
            boot_id().as_deref(),
        ))
    }

    /// Writes `claims`, with this process's pid (advice for messages) and
    /// the current boot.
    ///
    /// Written in place over the old text; cut to length only when the old
    /// text was longer (cutting a file costs more than the rest of a draw,
    /// and the text seldom gets shorter: see [`render`]).
    pub(crate) fn write(&self, turn: &Turn<'_>, claims: &Claims) -> Result<()> {
        let text = render(claims, pid(), boot_id().as_deref());
        let len = text.len() as u64;
        let old = self.known();
        // Unknown until written: a write that fails leaves it so.
        self.learnt(None);
        old.map_or_else(|| length(&turn.file), Ok)
            .and_then(|old| {
                turn.file.write_all_at(text.as_bytes(), 0)?;
                if old > len {
                    turn.file.set_len(len)?;
                }
                self.learnt(Some(len));
                Ok(())
            })
            .map_err(|e| Error::io("write", &self.path, e))
    }

    /// Records the file's length as this turn knows it (`None`: not known).
    fn learnt(&self, length: Option<u64>) {
        match length {
            Some(length) => {
                self.length.store(length, Relaxed);
                self.length_turn.store(self.turns.load(Relaxed), Relaxed);
            }
            None => self.length_turn.store(u64::MAX, Relaxed),
        }
    }

    /// The file's length, if this turn learnt it.
    fn known(&self) -> Option<u64> {
        (self.length_turn.load(Relaxed) == self.turns.load(Relaxed))
            .then(|| self.length.load(Relaxed))
    }
}

/// This process's pid, asked of the system once per process: `getpid` is
/// a system call, and a draw writes the pid each time. A child of `fork()`
/// asks again.
pub(super) fn pid() -> u32 {
    // `(fork count + 1) << 32 | pid`; 0: not asked yet.
    static PID: AtomicU64 = AtomicU64::new(0);
    let forks = (crate::fork::current() & 0xffff_ffff) + 1;
    let cached = PID.load(Relaxed);
    if cached >> 32 == forks {
        return cached as u32;
    }
    let pid = std::process::id();
    PID.store((forks << 32) | u64::from(pid), Relaxed);
    pid
}

/// The file's length, read without its times (see [`id_at`]).
fn length(file: &File) -> io::Result<u64> {
    Ok(id_at(file, Path::new(""))?.map_or(0, |(_, length)| length))
}

/// Whether this process can tell which boot wrote a claim file: without
/// the kernel's boot id (no `/proc`, or systemd's `ProcSubset=pid`), no
/// claim could ever be trusted, every draw would start after the state
/// file's mark and find no room there, so such a generator holds its shard
/// alone instead of sharing it.
pub(crate) fn boot_known() -> bool {
    boot_id().is_some()
}

/// The kernel's id of the current boot: `None` where it cannot be read,
/// and then no claim is trusted.
fn boot_id() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = text.trim();
        (!id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| id.to_string())
    })
    .clone()
}

/// The claim file's text. The pid's line (which [`parse`] skips) is padded
/// to the widest pid, so that members whose pids differ in width leave
/// texts of one length, and [`ClaimFile::write`] seldom has to cut one.
fn render(claims: &Claims, pid: u32, boot: Option<&str>) -> String {
    let mut text = format!("{pid:<10}\n");
    if let Some(boot) = boot {
        text.push_str(&format!("boot {boot}\n"));
        if let Some(next) = claims.next {
            text.push_str(&format!("next {next}\n"));
        }
        if let Some((clock_id, second)) = claims.reserved {
            text.push_str(&format!("reserved {clock_id} {second}\n"));
        }
        if let Some((second, boot_ms)) = claims.clock {
            text.push_str(&format!("clock {second} {boot_ms}\n"));
        }
        if let Some((second, boot_ms)) = claims.step {
            text.push_str(&format!("step {second} {boot_ms}\n"));
        }
    }
    text
}

/// Reads the file's text strictly: a line that does not parse, or a file
/// from another boot, says nothing.
fn parse(text: &str, boot: Option<&str>) -> Claims {
    let mut claims = Claims::default();
    let mut same_boot = false;
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    for line in text.lines().skip(1) {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("boot"), Some(id), None, None) => same_boot = boot == Some(id),
            (Some("next"), Some(n), None, None) => match number(n) {
                Some(n) => claims.next = Some(n),
                None => return Claims::default(),
            },
            (Some("reserved"), Some(c), Some(s), None) => match (number(c), number(s)) {
                (Some(c), Some(s)) => claims.reserved = Some((c, s)),
                _ => return Claims::default(),
            },
            (Some("clock"), Some(s), Some(b), None) => match (number(s), number(b)) {
                (Some(s), Some(b)) => claims.clock = Some((s, b)),
                _ => return Claims::default(),
            },
            (Some("step"), Some(s), Some(b), None) => match (number(s), number(b)) {
                (Some(s), Some(b)) => claims.step = Some((s, b)),
                _ => return Claims::default(),
            },
            _ => return Claims::default(),
        }
    }
    if same_boot {
        claims
    } else {
        Claims::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_round_trip_within_a_boot_only() {
        let claims = Claims {
            next: Some(123_456_789),
            reserved: Some((2, 1_763_751_239)),
            clock: Some((1_763_751_234, 86_400_123)),
            step: Some((1_763_851_234, 86_400_456)),
        };
        let text = render(&claims, 42, Some("b-1"));
        assert_eq!(parse(&text, Some("b-1")), claims);
        // Another boot, no boot id, or a garbled line: nothing is trusted.
        assert_eq!(parse(&text, Some("b-2")), Claims::default());
        assert_eq!(parse(&text, None), Claims::default());
        for bad in [
            "next 12x",
            "next -1",
            "reserved 1",
            "next 1 2",
            "clock 5",
            "clock 5 x",
            "step 5",
            "junk",
        ] {
            let garbled = format!("{text}{bad}\n");
            assert_eq!(parse(&garbled, Some("b-1")), Claims::default(), "{bad}");
        }
        assert_eq!(parse("", Some("b-1")), Claims::default());
        let none = render(&Claims::default(), 1, Some("b-1"));
        assert_eq!(parse(&none, Some("b-1")), Claims::default());
    }
}
