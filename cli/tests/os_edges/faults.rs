//! Failing system calls, unwritable output, threads that cannot start, slow writes, old copies.

use idutil_harness as harness;

use std::fs;
use std::io::BufRead as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use idutil_harness::Ledger;

use crate::as_nobody;

/// `idutil` under `strace`, which makes every `syscall` on `path` fail
/// with `errno`; `None` (after a loud skip) without strace.
fn with_fault(syscall: &str, errno: &str, path: &Path, idutil: &Command) -> Option<Command> {
    let strace = harness::tool("strace", "strace", "a failing read of the lock file")?;
    let mut cmd = Command::new(strace);
    cmd.args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(path)
        .arg(format!("-e trace={syscall}").replace(' ', ""))
        .arg(format!("-einject={syscall}:error={errno}"))
        .arg(idutil.get_program())
        .args(idutil.get_args());
    for (k, v) in idutil.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    Some(cmd)
}

/// A state file that is gone is refused; a read of the lock file that
/// then fails (EIO) is refused too, naming the lock file, and never read
/// as "this shard never had a state file".
#[test]
fn a_failed_read_of_the_lock_file_is_never_read_as_a_fresh_shard() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(1, dir.path(), 300_000));
    fs::remove_file(harness::state_file(dir.path(), 1)).unwrap();
    let r = harness::run(harness::idutil(1, dir.path()).arg("next"))
        .expect_code(1, "a missing state file");
    assert!(r.stderr.contains("missing"), "{}", r.stderr);
    let lock = dir.path().join("shard-1.lock");
    let mut plain = harness::idutil(1, dir.path());
    plain.args(["next", "-n", "300000"]);
    let Some(mut faulty) = with_fault("pread64", "EIO", &lock, &plain) else {
        return;
    };
    for _ in 0..10 {
        let r = harness::run(&mut faulty).expect_code(1, "a lock file that cannot be read");
        assert!(
            r.stderr.contains("cannot read the lock file")
                && r.stderr.contains(&lock.display().to_string())
                && r.stderr.contains("Input/output error"),
            "{}",
            r.stderr
        );
        ledger.record(&harness::parse_ids(&r.stdout));
    }
    // The shard is still refused as it was: the lock file kept its note.
    let r = harness::run(&mut plain).expect_code(1, "still missing");
    assert!(r.stderr.contains("missing"), "{}", r.stderr);
    // `idutil state` meets the same failure and says so.
    let mut state = harness::idutil(1, dir.path());
    state.arg("state");
    let mut faulty = with_fault("pread64", "EIO", &lock, &state).unwrap();
    let r = harness::run(&mut faulty).expect_code(1, "state with a failing read");
    assert!(
        r.stderr.contains("cannot read the lock file"),
        "{}",
        r.stderr
    );
    ledger.assert_unique();
}

/// A state file put back from an older copy (a backup, a snapshot) while
/// the lock file, never replaced, stays: refused, naming both marks;
/// `state` says so; `recover` calls it an older copy, not healthy, and
/// resumes after the lock file's mark.
#[test]
fn a_state_file_restored_from_an_older_copy_is_refused_and_recovered_past_it() {
    let dir = harness::state_dir();
    let path = harness::state_file(dir.path(), 2);
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(2, dir.path(), 10));
    let old = fs::read(&path).unwrap();
    // Far ahead of the copy: 400,000 IDs borrow several seconds.
    ledger.record(&harness::next(2, dir.path(), 400_000));
    fs::write(&path, &old).unwrap();
    let r =
        harness::run(harness::idutil(2, dir.path()).arg("next")).expect_code(1, "a restored copy");
    assert!(
        r.stderr.contains("older copy") && r.stderr.contains("shard-2.lock"),
        "{}",
        r.stderr
    );
    assert!(harness::parse_ids(&r.stdout).is_empty());
    let r = harness::run(harness::idutil(2, dir.path()).arg("state"))
        .expect_code(1, "state of a restored copy");
    assert!(r.stderr.contains("older copy"), "{}", r.stderr);
    let r = harness::run(harness::idutil(2, dir.path()).args(["state", "recover"]))
        .expect_code(0, "recover an older copy");
    assert!(
        r.stdout.contains("older copy") && r.stdout.contains("lock file"),
        "{}",
        r.stdout
    );
    ledger.record_after_all(&harness::next(2, dir.path(), 100_000));
    ledger.assert_unique();
}

/// `idutil ARGS` through `sh -c` with the shell redirections `redirect`
/// (`>&-`, `2>/dev/full`), in `dir` on `shard`.
fn idutil_redirected(shard: u32, dir: &Path, args: &str, redirect: &str) -> harness::Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "exec \"$0\" --shard {shard} --state-dir \"$1\" {args} {redirect}"
        ))
        .arg(harness::bin())
        .arg(dir)
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir));
    harness::run(&mut cmd)
}

/// Standard output closed: nothing is issued (every ID would be lost), an
/// error exit says why, and nothing is created. Standard output full: an
/// error exit. Standard error unwritable: the right exit status, never a
/// panic.
#[test]
fn output_that_cannot_be_written_is_an_error_exit_never_a_silent_loss_or_a_panic() {
    let parent = harness::state_dir();
    let dir = parent.path().join("state");
    let r = idutil_redirected(1, &dir, "next -n 100", ">&-").expect_code(1, "stdout closed");
    assert!(
        r.stderr.contains("standard output is closed"),
        "{}",
        r.stderr
    );
    assert!(!dir.exists(), "nothing is created");
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(1, &dir, 10));
    let r = idutil_redirected(1, &dir, "next -n 100", ">/dev/full").expect_code(1, "stdout full");
    assert!(r.stderr.contains("cannot write the output"), "{}", r.stderr);
    // Issued, though not printed: recorded as the shard's last ID, and the
    // next run continues after them.
    let last = harness::state_json(1, &dir)["state"]["last_issued"]["id"]
        .as_u64()
        .expect("a last ID");
    assert!(
        last > ledger.ids().iter().copied().max().unwrap(),
        "the run whose output was full issued nothing"
    );
    let after = harness::next(1, &dir, 10);
    assert!(after[0] > last, "{} after {last}", after[0]);
    ledger.record_after_all(&after);
    // A usage error and a runtime error with stderr unwritable.
    idutil_redirected(1, &dir, "next --no-such-flag", "2>/dev/full").expect_code(2, "usage");
    idutil_redirected(1, &dir, "next -n 5", "2>&- >/dev/null").expect_code(0, "stderr closed");
    // A runtime error: the state file is a directory.
    std::fs::create_dir(dir.join("shard-2.state")).unwrap();
    idutil_redirected(2, &dir, "next", "2>/dev/full").expect_code(1, "state file a directory");
}

/// A child process killed (and reaped) when dropped, as a test that fails
/// midway must not leave it running.
struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// No thread can be started (`prlimit --nproc`, as another user, since
/// root is not limited): an error exit that says so, never a panic.
#[test]
fn a_thread_that_cannot_start_is_an_error_exit_not_a_panic() {
    let Some(nobody) = as_nobody() else {
        return;
    };
    let parent = tempfile::Builder::new()
        .prefix("idutil-nproc-")
        .tempdir()
        .unwrap();
    let dir = parent.path().join("state");
    fs::create_dir(&dir).unwrap();
    Command::new("chown")
        .args(["65534:65534"])
        .arg(&dir)
        .status()
        .unwrap();
    // `prlimit` runs as the other user; its limit counts that user's
    // processes, so a few limits cover where each thread would be needed.
    let mut refused = 0;
    for nproc in 1..=3 {
        let mut cmd = Command::new(nobody.get_program());
        cmd.args(nobody.get_args())
            .args(["prlimit", &format!("--nproc={nproc}")])
            .arg(harness::bin())
            .args(["--shard", "3", "--state-dir"])
            .arg(&dir)
            .arg("next")
            .env("IDUTIL_ID_SPACE", harness::space_for(&dir));
        let r = harness::run(&mut cmd);
        assert_ne!(r.code, Some(101), "nproc {nproc}: a panic: {}", r.stderr);
        assert!(
            r.code == Some(0) || (r.code == Some(1) && r.stderr.contains("thread")),
            "nproc {nproc}: {:?} {}",
            r.code,
            r.stderr
        );
        refused += usize::from(r.code == Some(1));
    }
    assert!(refused > 0, "no limit stopped a thread");
}

/// SIGTERM while the command waits on a reservation write that takes 10 s
/// (`strace` delays its `fsync`, the first after opening): the message says
/// it was waiting for the state file, not for its output; it closes
/// cleanly and the next run continues after every ID printed.
#[test]
fn a_signal_during_a_slow_reservation_write_says_what_it_waited_on() {
    let Some(strace) = harness::tool("strace", "strace", "a signal during a slow disk write")
    else {
        return;
    };
    let dir = harness::state_dir();
    let mut cmd = Command::new(strace);
    cmd.args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync"])
        .arg("-einject=fsync:delay_exit=10000000:when=4")
        .arg(harness::bin())
        .args(["--shard", "6", "--state-dir"])
        .arg(dir.path())
        .args(["next", "-n", "1000000000"])
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = Killed(cmd.spawn().unwrap());
    let child = &mut child.0;
    let stdout = child.stdout.take().unwrap();
    // Every line printed, and how many so far.
    let printed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = printed.clone();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut lines = std::io::BufReader::new(stdout);
        while lines.read_line(&mut text).is_ok_and(|n| n > 0) {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        text
    });
    // The command itself: strace's child running the binary.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let pid = loop {
        let found = fs::read_to_string(&children).ok().and_then(|t| {
            t.split_whitespace()
                .find(|pid| {
                    fs::read_link(format!("/proc/{pid}/exe"))
                        .is_ok_and(|exe| exe == Path::new(harness::bin()))
                })
                .map(str::to_string)
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the command ended before the signal"
        );
        assert!(std::time::Instant::now() < deadline, "the command started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Until the first window is used and the command waits on the next
    // write: it printed IDs, then nothing for a second (of the write's 10).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = (0, std::time::Instant::now());
    loop {
        let now = printed.load(std::sync::atomic::Ordering::Relaxed);
        if now != seen.0 {
            seen = (now, std::time::Instant::now());
        } else if now > 0 && seen.1.elapsed() >= std::time::Duration::from_secs(1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never waited on a write ({now} IDs printed)"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_raw(pid.parse().unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = harness::wait_within(child, std::time::Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("waiting for the state file to be written")
            && !stderr.contains("stuck writing the output"),
        "{stderr}"
    );
    let text = reader.join().unwrap();
    let mut ledger = Ledger::new();
    let ids = harness::parse_complete_ids(&text);
    assert!(!ids.is_empty());
    ledger.record(&ids);
    ledger.record_after_all(&harness::next(6, dir.path(), 1000));
}

/// Every system call a block draw makes on the shard's claim file fails
/// once, in turn, with each of EIO, ENOSPC, EINTR, EAGAIN and ENOLCK, at
/// the first and at a later draw: each run exits 0 or 1 (never a panic,
/// never a hang), no ID repeats across all of them, and the next run is
/// healthy and starts after every one.
#[test]
fn every_system_call_of_a_block_draw_failing_once_costs_no_duplicate_hang_or_panic() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(3, dir.path(), 10));
    let claim = dir.path().join("shard-3.claim");
    assert!(claim.is_file());
    let mut failed_runs = 0;
    for syscall in ["flock", "pread64", "pwrite64", "ftruncate"] {
        for errno in ["EIO", "ENOSPC", "EINTR", "EAGAIN", "ENOLCK"] {
            for when in [1, 3] {
                let mut plain = harness::idutil(3, dir.path());
                // Enough IDs for several draws as the rate grows.
                plain.args(["next", "-n", "20000"]);
                let Some(mut faulty) = with_fault(syscall, errno, &claim, &plain) else {
                    return;
                };
                // One failure only, at the `when`-th call.
                let args: Vec<_> = faulty.get_args().map(|a| a.to_owned()).collect();
                let mut once = Command::new(faulty.get_program());
                for arg in args {
                    match arg.to_str() {
                        Some(a) if a.starts_with("-einject=") => {
                            once.arg(format!("{a}:when={when}"))
                        }
                        _ => once.arg(arg),
                    };
                }
                for (k, v) in faulty.get_envs() {
                    match v {
                        Some(v) => once.env(k, v),
                        None => once.env_remove(k),
                    };
                }
                faulty = once;
                let what = format!("{syscall} failing with {errno} at call {when}");
                let out = harness::output_within(&mut faulty, Duration::from_secs(60));
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                let code = out.status.code();
                assert!(
                    code == Some(0) || code == Some(1),
                    "{what}: exit {code:?}: {stderr}"
                );
                assert!(!stderr.contains("panicked"), "{what}: {stderr}");
                let ids = harness::parse_complete_ids(&String::from_utf8_lossy(&out.stdout));
                if code == Some(0) {
                    assert_eq!(ids.len(), 20000, "{what}");
                } else {
                    failed_runs += 1;
                    let reasons = stderr
                        .lines()
                        .filter(|l| l.starts_with("idutil: error:"))
                        .count();
                    assert_eq!(reasons, 1, "{what}: {stderr}");
                }
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "{what}");
                ledger.record(&ids);
            }
        }
    }
    // The faults were real: some runs met them as errors.
    assert!(failed_runs > 0, "no injected failure surfaced");
    ledger.assert_unique();
    ledger.record_after_all(&harness::next(3, dir.path(), 1000));
}

/// `idutil next` with every `sendto` and `recvfrom` failing (EIO), as a
/// signal-catching thread's socket would see them: it prints every ID,
/// exits 0 at once, and a SIGTERM still stops it cleanly.
#[test]
fn failing_socket_calls_neither_hang_nor_panic_the_command() {
    let Some(strace) = harness::tool("strace", "strace", "failing socket calls") else {
        return;
    };
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    for syscall in ["sendto", "recvfrom", "sendmsg", "recvmsg"] {
        let mut cmd = Command::new(&strace);
        cmd.args(["-f", "-qq", "-o", "/dev/null"])
            .arg(format!("-einject={syscall}:error=EIO"))
            .arg(harness::bin())
            .args(["--shard", "4", "--state-dir"])
            .arg(dir.path())
            .args(["next", "-n", "1000"])
            .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()));
        let out = harness::output_within(&mut cmd, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{syscall}: {stderr}");
        let ids = harness::parse_complete_ids(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(ids.len(), 1000, "{syscall}");
        ledger.record_after_all(&ids);
    }
    ledger.assert_unique();
}
