//! Many processes on one shard at once: hundreds of short commands, library
//! processes killed at random, a default state directory, another state
//! directory (before and after the per-host lock's file is removed), and a
//! member that holds the shard's short lock for too long.

use idutil_harness as harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use harness::{parts, Ledger, Rng};

use crate::child_env;

/// Runs `runs` commands made by `command`, `at_once` at a time; returns
/// each one's IDs, in the order it printed them. Every command must
/// succeed.
pub(crate) fn run_many(
    runs: usize,
    at_once: usize,
    command: impl Fn() -> Command + Sync,
) -> Vec<Vec<u64>> {
    run_many_parsed(runs, at_once, harness::parse_ids, command)
}

/// [`run_many`] for commands whose output `parse` reads (a child's marked
/// lines, say).
pub(crate) fn run_many_parsed(
    runs: usize,
    at_once: usize,
    parse: impl Fn(&str) -> Vec<u64> + Sync,
    command: impl Fn() -> Command + Sync,
) -> Vec<Vec<u64>> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(runs));
    thread::scope(|scope| {
        for _ in 0..at_once {
            scope.spawn(|| loop {
                if next.fetch_add(1, SeqCst) >= runs {
                    return;
                }
                let out = harness::output_within(&mut command(), Duration::from_secs(60));
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                assert!(out.status.success(), "a command failed: {stderr}");
                let ids = parse(&String::from_utf8_lossy(&out.stdout));
                results.lock().unwrap().push(ids);
            });
        }
    });
    results.into_inner().unwrap()
}

fn assert_each_increasing_and_all_distinct(runs: &[Vec<u64>], each: usize) {
    let mut ledger = Ledger::new();
    for ids in runs {
        assert_eq!(ids.len(), each, "a run printed {} IDs", ids.len());
        ledger.record(ids);
    }
    ledger.assert_unique();
}

/// A thousand runs of `idutil next -n 20`, 32 at a time, on one shard: no
/// refusal, no duplicate, each run's IDs increasing.
#[test]
fn a_thousand_commands_thirty_two_at_a_time_share_one_shard() {
    let dir = harness::state_dir();
    let runs = run_many(1000, 32, || {
        let mut cmd = harness::idutil(5, dir.path());
        cmd.args(["next", "-n", "20"]);
        cmd
    });
    assert_eq!(runs.len(), 1000);
    assert_each_increasing_and_all_distinct(&runs, 20);
    // The last to leave recorded the last ID handed out: the next run
    // continues after every one of them, without skipping a window.
    let max = runs.iter().flatten().copied().max().unwrap();
    let after = harness::next(5, dir.path(), 1);
    assert!(after[0] > max);
    assert!(
        parts(after[0]).seconds <= parts(max).seconds + 1,
        "{} resumes {} s after {}",
        after[0],
        parts(after[0]).seconds - parts(max).seconds,
        max
    );
    // Nothing is left in the per-host lock directory.
    let space = harness::space_for(dir.path());
    for lock_dir in ["/run/lock", "/dev/shm", "/tmp"] {
        let left = Path::new(lock_dir).join(format!("idutil.{space}.shard-5.lock"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
}

/// The same through the default state directory (`$HOME/.local/state`),
/// as commands in scripts and cron jobs run: twelve at once.
#[test]
fn twelve_processes_share_the_default_state_directory() {
    let home = harness::state_dir();
    let runs = run_many(12, 12, || {
        let mut cmd = Command::new(harness::bin());
        cmd.env("HOME", home.path())
            .env_remove("XDG_STATE_HOME")
            .env_remove("IDUTIL_STATE_DIR")
            .env("IDUTIL_SHARD", "6")
            .env("IDUTIL_ID_SPACE", harness::space_for(home.path()))
            .stdin(Stdio::null())
            .args(["next", "-n", "5000"]);
        cmd
    });
    assert_eq!(runs.len(), 12);
    assert_each_increasing_and_all_distinct(&runs, 5000);
    assert!(home
        .path()
        .join(".local/state/idutil/shard-6.state")
        .is_file());
}

/// Eight library processes issue on one shard at once; four are killed
/// with SIGKILL at random moments; eight more follow while the rest go on.
/// No ID repeats, and each process's IDs increase.
#[test]
fn library_processes_killed_at_random_and_their_successors_never_repeat_an_id() {
    let dir = harness::state_dir();
    let mut rng = Rng::from_env_or_time("library_processes_killed_at_random");
    let start = |_| {
        let mut child = harness::spawn_child("child_issue_until_killed", &child_env(7, dir.path()));
        let out = child.stdout.take().unwrap();
        let (ids, reader) = harness::read_until_issuing(out);
        (child, ids, reader)
    };
    let mut ledger = Ledger::new();
    let mut per_process: Vec<Vec<u64>> = Vec::new();
    let mut finish = |mut child: Child, mut ids: Vec<u64>, reader, kill: bool| {
        if kill {
            harness::sigkill(&mut child);
        } else {
            harness::send(&child, "TERM");
        }
        let text = harness::read_rest(reader);
        ids.extend(harness::child_ids(&text).0);
        let _ = harness::wait_within(&mut child, Duration::from_secs(20));
        per_process.push(ids);
    };
    let first: Vec<_> = (0..8).map(start).collect();
    let mut survivors = Vec::new();
    for (i, (child, ids, reader)) in first.into_iter().enumerate() {
        if i % 2 == 0 {
            thread::sleep(Duration::from_millis(rng.range(0, 150)));
            finish(child, ids, reader, true);
        } else {
            survivors.push((child, ids, reader));
        }
    }
    let second: Vec<_> = (0..8).map(start).collect();
    thread::sleep(Duration::from_millis(300));
    for (child, ids, reader) in survivors.into_iter().chain(second) {
        let kill = rng.range(0, 2) == 0;
        finish(child, ids, reader, kill);
    }
    for ids in &per_process {
        assert!(!ids.is_empty(), "every process issued");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
        ledger.record(ids);
    }
    ledger.assert_unique();
    // And a command afterwards starts after all of them.
    ledger.record_after_all(&harness::next(7, dir.path(), 1000));
}

/// Another state directory for a shard in use on this host is refused,
/// naming both directories and the holder, and still after the per-host
/// lock's file was removed under the holder. The holder's own directory
/// goes on sharing the shard.
#[test]
fn another_state_directory_is_refused_even_after_the_host_lock_file_is_removed() {
    let dir = harness::state_dir();
    let elsewhere = harness::state_dir();
    let space = harness::space_for(dir.path());
    let mut holder = harness::spawn_child(
        "child_hold_shard",
        &[
            child_env(8, dir.path()),
            vec![
                ("IDUTIL_ID_SPACE", space.clone()),
                ("IDUTIL_CHILD_N", "10".to_string()),
            ],
        ]
        .concat(),
    );
    let pid = holder.id();
    let (mut ids, rest) = harness::read_until_ready(holder.stdout.take().unwrap());
    let refused = |what: &str| {
        let r = harness::run(
            harness::idutil(8, elsewhere.path())
                .env("IDUTIL_ID_SPACE", &space)
                .args(["next", "-n", "5"]),
        )
        .expect_code(1, what);
        assert!(r.stdout.is_empty(), "{what}: nothing issued");
        for want in [
            format!("pid {pid}"),
            dir.path().display().to_string(),
            elsewhere.path().display().to_string(),
        ] {
            assert!(r.stderr.contains(&want), "{what}: {want} in {}", r.stderr);
        }
    };
    refused("another state directory");
    let lock = Path::new("/run/lock").join(format!("idutil.{space}.shard-8.lock"));
    let lock = if lock.exists() {
        lock
    } else {
        // Hosts without /run/lock use the next directory of the list.
        ["/dev/shm", "/tmp"]
            .iter()
            .map(|d| Path::new(d).join(format!("idutil.{space}.shard-8.lock")))
            .find(|p| p.exists())
            .expect("the per-host lock file")
    };
    std::fs::remove_file(&lock).unwrap();
    refused("another state directory, the lock file removed");
    // The holder's directory still shares the shard.
    ids.extend(
        harness::run(
            harness::idutil(8, dir.path())
                .env("IDUTIL_ID_SPACE", &space)
                .args(["next", "-n", "5"]),
        )
        .expect_code(0, "the holder's directory")
        .stdout
        .lines()
        .map(|l| l.parse::<u64>().unwrap()),
    );
    drop(holder.stdin.take());
    ids.extend(harness::child_ids(&harness::read_rest(rest)).0);
    assert!(harness::wait_within(&mut holder, Duration::from_secs(20)).success());
    harness::assert_unique_set(&ids);
    // Gone: the other directory may take the shard now.
    harness::run(
        harness::idutil(8, elsewhere.path())
            .env("IDUTIL_ID_SPACE", &space)
            .args(["next", "-n", "5"]),
    )
    .expect_code(0, "once the holder is gone");
}

/// A process that holds the shard's short lock and does not let go (here
/// `flock(1)`, standing for a member stopped with SIGSTOP in the middle of
/// a draw) makes the others wait a bounded time, then fail with an error
/// naming it; once it lets go, they issue again.
#[test]
fn a_member_that_holds_the_short_lock_too_long_is_named_after_a_bounded_wait() {
    let Some(flock) = harness::tool("flock", "util-linux", "a process holding the claim lock")
    else {
        return;
    };
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(9, dir.path(), 100));
    let claim = dir.path().join("shard-9.claim");
    assert!(claim.is_file(), "the shard's claim file");
    // `-o`: the lock stays with flock itself, not with `sleep`.
    let mut holder = Command::new(flock)
        .arg("-o")
        .arg(&claim)
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    // Wait until it holds the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .contains(&format!(" {} ", holder.id()))
    {
        assert!(Instant::now() < deadline, "flock never took the lock");
        thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let r = harness::run(harness::idutil(9, dir.path()).args(["next", "-n", "5"]))
        .expect_code(1, "a member holding the short lock");
    let waited = started.elapsed();
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains(&format!("pid {}", holder.id())) && r.stderr.contains("stopped or stuck"),
        "{}",
        r.stderr
    );
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(30),
        "waited {waited:?}"
    );
    harness::sigkill(&mut holder);
    ledger.record_after_all(&harness::next(9, dir.path(), 100));
    ledger.assert_unique();
}

/// Where the kernel's boot id cannot be read (no `/proc`, or systemd's
/// `ProcSubset=pid`), a claim file can never say which boot wrote it.
/// The command must still issue at once, near the clock, not draw block
/// after empty block while it pushes the shard's reservation hours ahead.
/// The boot id is hidden by a mount namespace of the command's own.
#[test]
fn a_command_that_cannot_read_the_boot_id_issues_near_the_clock() {
    let hide = "mount --bind /dev/null /proc/sys/kernel/random/boot_id";
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", hide])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        harness::skipped(format_args!(
            "SKIPPED: `unshare -m` with a bind mount is not permitted here, so a \
             generator that cannot read the boot id is NOT tested"
        ));
        return;
    }
    let dir = harness::state_dir();
    for _ in 0..2 {
        let plain = harness::idutil(8, dir.path());
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "sh", "-c", &format!("{hide} && exec \"$@\""), "sh"])
            .arg(plain.get_program())
            .args(plain.get_args())
            .envs(
                plain
                    .get_envs()
                    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
            )
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_STATE_DIR")
            .args(["next", "-n", "3"]);
        let out = harness::output_within(&mut cmd, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let ids = harness::printed_ids(&out);
        assert_eq!(ids.len(), 3, "{stderr}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        for id in ids {
            let ahead = harness::unix_second(id).saturating_sub(now);
            assert!(ahead <= 60, "{id} is {ahead} s ahead of the clock");
        }
    }
}
