//! Another local user on the per-host lock.

use idutil_harness as harness;

use std::fs;
use std::path::Path;
use std::process::Command;

use idutil_harness::Ledger;

use crate::as_nobody;

/// The host-wide directory the per-host lock files live in: the first of
/// the directories idutil looks at that exists.
fn host_lock_dir() -> &'static Path {
    ["/run/lock", "/dev/shm", "/tmp"]
        .iter()
        .map(Path::new)
        .find(|d| d.is_dir())
        .expect("a host-wide lock directory")
}

fn host_lock_file(dir: &Path, shard: u32) -> std::path::PathBuf {
    host_lock_dir().join(format!(
        "idutil.{}.shard-{shard}.lock",
        harness::space_for(dir)
    ))
}

/// Kills a process group started with `process_group(0)`.
struct Group(std::process::Child);
impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// Another local user takes the per-host lock names of shards 0 to 28
/// (holding a `flock` on each) and plants a FIFO and a symbolic link at
/// those of shards 29 and 30: each of those shards is refused at once,
/// with the holder's pid and user and the file named, as a name taken by
/// another user, never as "another generator"; `state` shows the holder;
/// shard 31 still works.
#[test]
fn another_local_user_taking_the_host_lock_names_is_reported_as_such() {
    use std::os::unix::process::CommandExt as _;
    let Some(mut nobody) = as_nobody() else {
        return;
    };
    let dir = harness::state_dir();
    let files: Vec<String> = (0..=30)
        .map(|s| host_lock_file(dir.path(), s).display().to_string())
        .collect();
    let script = format!(
        "for n in $(seq 0 28); do flock -n {dir}/idutil.{space}.shard-$n.lock sleep 120 & done; \
         mkfifo {fifo}; ln -s /etc/passwd {link}; wait",
        dir = host_lock_dir().display(),
        space = harness::space_for(dir.path()),
        fifo = files[29],
        link = files[30],
    );
    let squatter = Group(
        nobody
            .args(["sh", "-c", &script])
            .process_group(0)
            .spawn()
            .expect("start the other user's processes"),
    );
    // Until every name is taken.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (0..=28).any(|s| {
        !harness::state_json(s, dir.path())["host_locked"]
            .as_bool()
            .unwrap()
    }) || fs::symlink_metadata(&files[30]).is_err()
    {
        assert!(std::time::Instant::now() < deadline, "the squatter started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut ledger = Ledger::new();
    for shard in [0, 3, 28] {
        let start = std::time::Instant::now();
        let r = harness::run(harness::idutil(shard, dir.path()).args(["next", "-n", "5"]))
            .expect_code(1, "a name another user holds");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert!(r.stdout.is_empty());
        let msg = r.stderr.trim();
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert!(
            msg.contains("uid 65534, another user")
                && msg.contains(&files[shard as usize])
                && msg.contains(" by pid ")
                && !msg.contains("another generator"),
            "{msg}"
        );
        let state = harness::state_json(shard, dir.path());
        assert!(state["host_holder_pid"].as_u64().is_some(), "{state}");
    }
    for (shard, what) in [(29, "not a regular file"), (30, "symbolic link")] {
        let start = std::time::Instant::now();
        let r = harness::run(harness::idutil(shard, dir.path()).arg("next"))
            .expect_code(1, "an unusable lock file");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert!(
            r.stderr.contains(what) && r.stderr.contains(&files[shard as usize]),
            "{}",
            r.stderr
        );
    }
    ledger.record(&harness::next(31, dir.path(), 1000));
    drop(squatter);
    for file in &files {
        let _ = fs::remove_file(file);
    }
    // The names are free again: the shards work.
    ledger.record(&harness::next(3, dir.path(), 1000));
}

/// Another local user hammers whatever a generator exposes on the host
/// (the lock file, and the per-host socket names of earlier releases)
/// while the command issues as fast as it can: SIGTERM still ends it at
/// once, with a clean close.
#[test]
fn another_local_user_flooding_the_host_lock_does_not_stall_issuing() {
    use std::os::unix::process::CommandExt as _;
    let Some(nobody) = as_nobody() else {
        return;
    };
    let dir = harness::state_dir();
    let flooder = Group(
        harness::child::child_command_through(
            nobody,
            "child_flood",
            &[
                ("IDUTIL_FLOOD_SPACE", harness::space_for(dir.path())),
                (
                    "IDUTIL_FLOOD_FILE",
                    host_lock_file(dir.path(), 7).display().to_string(),
                ),
            ],
        )
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start the flooder"),
    );
    let mut ledger = Ledger::new();
    for round in 0..3 {
        let mut child = harness::idutil(7, dir.path())
            .args(["next", "-n", "1000000000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        // Issuing under the flood: the first MiB of IDs is out (read, not
        // waited for by a guess), then the signal.
        let mut first = vec![0; (1 << 20) + 1];
        std::io::Read::read_exact(&mut stdout, &mut first).expect("a MiB of IDs");
        let reader = std::thread::spawn(move || {
            let mut text = String::from_utf8(first).unwrap();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
            text
        });
        let start = std::time::Instant::now();
        harness::send(&child, "TERM");
        let status = harness::wait_within(&mut child, std::time::Duration::from_secs(30));
        let took = start.elapsed();
        // The requirement: SIGTERM stops `next` at once (the README's
        // "stop it cleanly"), its close never waiting on what another
        // user does to the host lock. A close is a flush and one write of
        // the state file: 3 s is that on a loaded machine, and below what
        // a close held up by the flood would take (a lock that does not
        // move is given up only after `member_wait`, 5 s).
        assert!(
            took < std::time::Duration::from_secs(3),
            "round {round}: SIGTERM took {took:?}"
        );
        assert_eq!(status.code(), Some(128 + 15), "round {round}: {status}");
        let text = reader.join().unwrap();
        assert!(text.len() > 1 << 20, "round {round}: {} bytes", text.len());
        // The first and the last 64 KiB of lines stand for the run (every
        // run is checked increasing by the command's own tests): each run
        // starts after everything before it.
        let head = &text[..text[..1 << 16].rfind('\n').unwrap() + 1];
        let tail = &text[text.len() - (1 << 16)..];
        let tail = &tail[tail.find('\n').unwrap() + 1..];
        let ends = harness::parse_complete_ids(&format!("{head}{tail}"));
        ledger.record_after_all(&ends);
    }
    drop(flooder);
}
