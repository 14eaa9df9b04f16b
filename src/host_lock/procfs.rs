//! What `/proc` tells of other processes: who holds a `flock` (from
//! `/proc/locks`, read whole), whether its pids are this process's PID
//! namespace's, a process's user, and whether it is stopped, live or asleep.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs as rfs;

use super::ProcessState;

/// The `MAJ:MIN:` prefix `/proc/locks` names `st`'s device by.
pub(super) fn device_of(st: &rfs::Stat) -> String {
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let dev = st.st_dev as u64;
    format!(
        "{:02x}:{:02x}:",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    )
}

/// The file `st` describes as `/proc/locks` names it: `MAJ:MIN:INODE`.
pub(super) fn lock_key(st: &rfs::Stat) -> String {
    format!("{}{}", device_of(st), st.st_ino)
}

/// The pid `/proc/self` names this process by: its pid in the PID
/// namespace `/proc` was mounted for, which is not this process's own
/// when it runs in a namespace of its own under the host's `/proc`
/// (`unshare --pid` without `--mount-proc`). `None` if `/proc` does not
/// show this process at all.
pub(super) fn self_in_proc() -> Option<u32> {
    std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

/// Whether the pids `/proc` shows are this process's PID namespace's.
pub(super) fn pids_are_ours() -> bool {
    self_in_proc() == Some(std::process::id())
}

/// Every `FLOCK` held (not waited for) on the host as `/proc/locks` lists
/// it, on a file `keep` accepts (given as `MAJ:MIN:INODE`): the holder's
/// pid, as `/proc`'s PID namespace numbers it, and the file. The file is
/// read whole, a line at a time, however long it is (a host may hold tens
/// of thousands of locks). A lock of a process `/proc` does not show (in
/// another PID namespace) is not listed at all. `None` if it cannot be
/// read.
///
/// The read began after this call did (see [`holders`]): what it lists
/// is never older than what the caller did before the call.
pub(super) fn flocks(mut keep: impl FnMut(&str) -> bool) -> Option<Vec<(u32, String)>> {
    Some(
        holders()?
            .iter()
            .filter(|(_, file)| keep(file))
            .cloned()
            .collect(),
    )
}

/// Every `FLOCK` holder `/proc/locks` lists: its pid and its file.
type Holders = Arc<[(u32, String)]>;

/// The reads of `/proc/locks` the threads of this process share.
struct Reads {
    /// How many reads have begun.
    begun: u64,
    /// The number of the last read that ended, and what it found.
    ended: u64,
    found: Option<Holders>,
    /// Whether a read is under way.
    reading: bool,
}

static READS: Mutex<Reads> = Mutex::new(Reads {
    begun: 0,
    ended: 0,
    found: None,
    reading: false,
});
static READ_ENDED: Condvar = Condvar::new();
/// The fork count (see [`crate::fork`]) of the process whose threads share
/// [`READS`], once one has; `u64::MAX` before.
static SHARED_BY: AtomicU64 = AtomicU64::new(u64::MAX);

/// What `/proc/locks` lists, read after this call began, shared between
/// the threads of this process that ask at once.
///
/// The kernel lists `/proc/locks` under one host-wide lock, and a list of
/// every lock on the host is long: a process opening hundreds of
/// generators at once, each reading it whole, spent most of its opens
/// queued there (O(n²) in the kernel), and took the cores its lease's
/// server needed. So one read serves every thread that asked before it
/// began: a thread that asks while a read is under way waits for it and
/// then for the next, which begins after it asked, and every thread that
/// waited takes that one. A caller never gets a read that began before
/// its call: each uses it to see locks taken before the call (see
/// `orphaned_holder`).
///
/// A child of `fork()` reads alone: a thread of its parent may have held
/// [`READS`] at the fork, and would never let go in the child.
fn holders() -> Option<Holders> {
    let forks = crate::fork::install();
    let owner = match SHARED_BY.compare_exchange(u64::MAX, forks, SeqCst, SeqCst) {
        Ok(_) => forks,
        Err(owner) => owner,
    };
    if owner != forks {
        return read_holders().map(Holders::from);
    }
    let mut reads = crate::sync::lock(&READS);
    // The first read that can serve this call: the one after any under way.
    let wanted = reads.begun + 1;
    loop {
        if reads.ended >= wanted {
            return reads.found.clone();
        }
        if !reads.reading {
            reads.reading = true;
            reads.begun += 1;
            let number = reads.begun;
            drop(reads);
            let found = read_holders().map(Holders::from);
            let mut reads = crate::sync::lock(&READS);
            reads.reading = false;
            reads.ended = number;
            reads.found.clone_from(&found);
            drop(reads);
            READ_ENDED.notify_all();
            return found;
        }
        reads = crate::sync::wait(&READ_ENDED, reads);
    }
}

/// One read of `/proc/locks`: every `FLOCK` holder it lists.
fn read_holders() -> Option<Vec<(u32, String)>> {
    let mut reader = BufReader::with_capacity(1 << 16, File::open("/proc/locks").ok()?);
    let mut found = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return Some(found),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; a blocked
        // waiter's line has "->" after the number: not a holder.
        let mut fields = line.split_whitespace();
        let (Some(_), Some("FLOCK")) = (fields.next(), fields.next()) else {
            continue;
        };
        let (Some(_), Some(_), Some(pid), Some(file)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // 0 (or a negative number): a holder `/proc` cannot name.
        match pid.parse::<u32>() {
            Ok(pid) if pid > 0 => found.push((pid, file.to_string())),
            _ => {}
        }
    }
}

/// The pids holding a `flock` on the file `st` describes, as `/proc`'s
/// PID namespace numbers them; `None` if `/proc/locks` cannot be read.
pub(super) fn flock_pids(st: &rfs::Stat) -> Option<Vec<u32>> {
    let want = lock_key(st);
    let mut pids: Vec<u32> = flocks(|file| file == want)?
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Some(pids)
}

/// A process's real uid, from `/proc/<pid>/status`.
pub(super) fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// How the process `/proc` numbers `pid` is.
pub(crate) fn process_state(pid: u32) -> ProcessState {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return ProcessState::Gone;
    };
    let (mut live, mut stopped, mut any) = (false, false, false);
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // "1234 (name) S ...": the name may hold spaces and parentheses.
        let Some(state) = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
        else {
            continue;
        };
        match state {
            "R" | "D" => live = true,
            "T" | "t" => stopped = true,
            "Z" | "X" => continue,
            _ => {}
        }
        any = true;
    }
    match (any, live, stopped) {
        (false, _, _) => ProcessState::Gone,
        (_, true, _) => ProcessState::Live,
        (_, _, true) => ProcessState::Stopped,
        _ => ProcessState::Asleep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads at once each take a `flock` on a file of their own, then ask
    /// who holds it; then let go, and ask again. However the reads are shared, each answer is
    /// from a read that began after its call: it lists the lock taken
    /// before the call, and not the one let go before it.
    #[test]
    fn a_shared_read_never_began_before_the_call() {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for t in 0..32 {
                let dir = dir.path();
                s.spawn(move || {
                    for round in 0..20 {
                        let file = File::create(dir.join(format!("{t}-{round}"))).unwrap();
                        rfs::flock(&file, rfs::FlockOperation::NonBlockingLockExclusive).unwrap();
                        let key = lock_key(&rfs::fstat(&file).unwrap());
                        let held = flocks(|f| f == key).expect("/proc/locks");
                        // Listed once, or twice where the list moved
                        // between two pieces of the read.
                        assert!(!held.is_empty(), "thread {t}, round {round}");
                        drop(file);
                        let held = flocks(|f| f == key).expect("/proc/locks");
                        assert!(held.is_empty(), "thread {t}, round {round}: {held:?}");
                    }
                });
            }
        });
    }
}
