//! What `/proc` tells of other processes: who holds a `flock` (from
//! `/proc/locks`, read whole), whether its pids are this process's PID
//! namespace's, a process's user, and whether it is stopped, live or asleep.

use std::fs::File;
use std::io::{self, BufRead, BufReader};

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
pub(super) fn flocks(mut keep: impl FnMut(&str) -> bool) -> Option<Vec<(u32, String)>> {
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
            Ok(pid) if pid > 0 && keep(file) => found.push((pid, file.to_string())),
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
