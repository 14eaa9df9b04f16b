//! How long a process sharing a shard waits for the member that holds its
//! short lock, and whom it names when it gives up: never a live member on
//! busy cores, a stopped one as stopped, and a holder in another PID
//! namespace without a pid that means nothing here.

use idutil_harness as harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use harness::Ledger;

/// What the error for a member that held the short lock too long says.
const STALLED: &str = "claim lock for over";

/// Rounds of 32 `idutil next -n 2000` started at once on one shard, with
/// a thread spinning on every core: the members queue for the short lock
/// while the holder of the moment waits for the CPU or for its disk (a
/// state file's `fsync` then takes seconds), but every one of them is
/// alive and lets go. None may give up and call another member stalled.
#[test]
fn thirty_two_commands_at_once_on_busy_cores_never_call_a_live_member_stalled() {
    let dir = harness::state_dir();
    let stop = AtomicBool::new(false);
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    let mut failures = Vec::new();
    let mut ids = Vec::new();
    thread::scope(|scope| {
        for _ in 0..cores {
            scope.spawn(|| {
                while !stop.load(Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let _stop = harness::threads::SetOnDrop(&stop);
        for round in 0..12 {
            let runs: Vec<_> = (0..32)
                .map(|_| {
                    let mut cmd = harness::idutil(20, dir.path());
                    cmd.args(["next", "-n", "2000"]);
                    scope.spawn(move || harness::output_within(&mut cmd, Duration::from_secs(100)))
                })
                .collect();
            for run in runs {
                let out = run.join().unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                if !out.status.success() || stderr.contains(STALLED) {
                    failures.push(format!("round {round}: {}: {stderr}", out.status));
                }
                if out.status.success() {
                    let run = harness::parse_ids(&String::from_utf8_lossy(&out.stdout));
                    assert_eq!(run.len(), 2000);
                    ids.extend(run);
                }
            }
        }
    });
    assert!(
        failures.is_empty(),
        "{} of 384 commands failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    harness::assert_unique_set(&ids);
}

/// `flock -o` holding the claim file's lock of `shard` in `dir` (once it
/// holds it), killed when dropped, stopped or not.
struct ClaimLockHolder(Child);

impl ClaimLockHolder {
    fn start(flock: &Path, shard: u32, dir: &Path) -> ClaimLockHolder {
        let claim = dir.join(format!("shard-{shard}.claim"));
        assert!(claim.is_file(), "the shard's claim file");
        // `-o`: the lock stays with flock itself, not with `sleep`.
        let holder = ClaimLockHolder(
            Command::new(flock)
                .arg("-o")
                .arg(&claim)
                .args(["sleep", "600"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string("/proc/locks")
            .unwrap()
            .contains(&format!(" {} ", holder.pid()))
        {
            assert!(Instant::now() < deadline, "flock never took the lock");
            thread::sleep(Duration::from_millis(20));
        }
        holder
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ClaimLockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process that holds the short lock and is stopped (SIGSTOP) is named
/// as stopped, after the bounded wait.
#[test]
fn a_stopped_holder_of_the_short_lock_is_named_as_stopped() {
    let Some(flock) = harness::tool("flock", "util-linux", "a stopped holder of the claim lock")
    else {
        return;
    };
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(21, dir.path(), 100));
    let holder = ClaimLockHolder::start(&flock, 21, dir.path());
    harness::send(&holder.0, "STOP");
    let started = Instant::now();
    let r = harness::run(harness::idutil(21, dir.path()).args(["next", "-n", "5"]))
        .expect_code(1, "a stopped member holding the short lock");
    let waited = started.elapsed();
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr
            .contains(&format!("(pid {}) is stopped", holder.pid())),
        "{}",
        r.stderr
    );
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(30),
        "waited {waited:?}"
    );
    drop(holder);
    ledger.record_after_all(&harness::next(21, dir.path(), 100));
    ledger.assert_unique();
}

/// A process started in a PID namespace of its own waits for a holder of
/// the short lock outside it. With the host's `/proc` (whose pids are not
/// its own), and with a `/proc` of its own (where the holder does not
/// show), it names no pid: it says the holder is in another PID namespace.
#[test]
fn a_holder_of_the_short_lock_in_another_pid_namespace_is_not_named_by_a_pid() {
    let Some(flock) = harness::tool("flock", "util-linux", "a holder of the claim lock") else {
        return;
    };
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        harness::skipped(format_args!(
            "SKIPPED: `unshare --pid` is not permitted here, so a claim lock holder in \
             another PID namespace is NOT tested"
        ));
        return;
    }
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(22, dir.path(), 100));
    let holder = ClaimLockHolder::start(&flock, 22, dir.path());
    for own_proc in [false, true] {
        let plain = harness::idutil(22, dir.path());
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork"]);
        if own_proc {
            cmd.arg("--mount-proc");
        }
        cmd.arg(plain.get_program())
            .args(plain.get_args())
            .envs(
                plain
                    .get_envs()
                    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
            )
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_STATE_DIR")
            .args(["next", "-n", "5"]);
        let what = format!("a holder in another PID namespace, a /proc of its own: {own_proc}");
        let r = harness::run(&mut cmd).expect_code(1, &what);
        assert!(r.stdout.is_empty(), "{what}");
        assert!(
            r.stderr.contains(STALLED)
                && r.stderr.contains("another PID namespace")
                && !r.stderr.contains(&format!("pid {}", holder.pid()))
                && !r.stderr.contains("pid unknown"),
            "{what}: {}",
            r.stderr
        );
    }
    drop(holder);
    ledger.record_after_all(&harness::next(22, dir.path(), 100));
    ledger.assert_unique();
}
