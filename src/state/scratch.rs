//! Throw-away state directories for ephemeral generators (tests), and the
//! sweeping of those whose process is gone.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tempfile::TempDir;

use crate::error::{Error, Result};

/// What every scratch directory's name starts with, before the pid.
const PREFIX: &str = "idutil-ephemeral-";

/// This process's private directory in the system's temporary directory,
/// made on first use and kept for the life of the process: every ephemeral
/// generator of the process keeps its state there, so one opened after
/// another on the same shard continues after it. Directories left by
/// processes that are gone are removed when it is made, so repeated test
/// runs do not pile them up.
pub(crate) fn scratch_dir() -> Result<PathBuf> {
    static DIR: Mutex<Option<(u32, TempDir)>> = Mutex::new(None);
    let mut dir = crate::sync::lock(&DIR);
    let pid = std::process::id();
    match dir.take() {
        Some((owner, made)) if owner == pid => {
            let path = made.path().to_path_buf();
            *dir = Some((owner, made));
            return Ok(path);
        }
        // A child of `fork()`: the directory is its parent's, which
        // removes it; the child makes one of its own.
        Some((_, parents)) => std::mem::forget(parents),
        None => {}
    }
    let tmp = std::env::temp_dir();
    sweep(&tmp);
    let made = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-", std::process::id()))
        .tempdir_in(&tmp)
        .map_err(|e| Error::io("create a scratch state directory in", &tmp, e))?;
    let path = made.path().to_path_buf();
    *dir = Some((pid, made));
    Ok(path)
}

/// Removes this user's scratch directories in `tmp` whose process no
/// longer exists. A pid reused since only keeps a directory a while longer.
fn sweep(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    let euid = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let Some(pid) = scratch_pid(&entry.file_name()) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_dir() || meta.uid() != euid || alive(pid) {
            continue;
        }
        let _ = fs::remove_dir_all(entry.path());
    }
}

/// The pid in a scratch directory's name, `idutil-ephemeral-<pid>-<random>`.
fn scratch_pid(name: &OsStr) -> Option<i32> {
    let rest = name.to_str()?.strip_prefix(PREFIX)?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process with this pid exists (one of another user counts).
fn alive(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        ),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sweeping() {
        assert_eq!(scratch_pid(OsStr::new("idutil-ephemeral-12-abc")), Some(12));
        for other in [
            "idutil-ephemeral-12",
            "idutil-ephemeral-12-",
            "idutil-ephemeral-x-abc",
            "idutil-ephemeral--abc",
            "something-else-12-abc",
        ] {
            assert_eq!(scratch_pid(OsStr::new(other)), None, "{other}");
        }

        let tmp = tempfile::tempdir().unwrap();
        // A process that has exited, and one that runs.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let gone = tmp.path().join(format!("{PREFIX}{dead}-x1"));
        let live = tmp
            .path()
            .join(format!("{PREFIX}{}-x2", std::process::id()));
        let unrelated = tmp.path().join(format!("other-{dead}-x3"));
        for d in [&gone, &live, &unrelated] {
            fs::create_dir(d).unwrap();
            fs::write(d.join("shard-0.lock"), "1\n").unwrap();
        }
        sweep(tmp.path());
        assert!(!gone.exists(), "a dead process's directory stays");
        assert!(live.exists() && unrelated.exists());
    }
}
