//! The command at the edges of the operating system: a read of the lock
//! file that fails, a state file restored from an older copy, a clock far
//! in the future for a moment, another local user on the per-host lock,
//! and output that cannot be written. Faults are real: `strace` injects
//! the failing system call, `setpriv` runs the other user, libfaketime
//! moves the clock.

use idutil_harness as harness;

use std::fs;
use std::path::Path;
use std::process::Command;

use harness::Ledger;

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

/// `idutil next -n 3` with its clock set by libfaketime (`@2136-...`), in
/// `dir` (which need not exist).
fn next_at(faketime: &harness::Faketime, time: &str, shard: u32, dir: &Path) -> harness::Run {
    let mut cmd = faketime.command(time, harness::bin());
    cmd.env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir))
        .args(["--shard", &shard.to_string(), "--state-dir"])
        .arg(dir)
        .args(["next", "-n", "3"]);
    harness::run(&mut cmd)
}

/// The wall clock reads 2136-02-07T06:28:10, five seconds before the end
/// of the range, for a moment (ten runs): nothing is issued or recorded,
/// and with the clock right again the shard goes on; it is never used up.
#[test]
fn a_clock_at_the_end_of_the_range_for_a_moment_does_not_use_the_shard_up() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(4, dir.path(), 1000));
    let before = fs::read(harness::state_file(dir.path(), 4)).unwrap();
    for _ in 0..10 {
        let r = next_at(&faketime, "@2136-02-07 06:28:10", 4, dir.path())
            .expect_code(1, "a clock in the end margin");
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert!(r.stderr.contains("clock"), "{}", r.stderr);
        assert_eq!(
            fs::read(harness::state_file(dir.path(), 4)).unwrap(),
            before
        );
    }
    ledger.record_after_all(&harness::next(4, dir.path(), 300_000));
    let state = harness::state_json(4, dir.path());
    let mark = state["state"]["high_water"][0]["second"].as_u64().unwrap();
    assert!(mark < harness::wall_now() + 3600, "{state}");
}

/// A clock one second past the range: refused before anything is created
/// (no state directory, no lock file) or locked.
#[test]
fn a_clock_past_the_range_creates_nothing_on_disk() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let parent = harness::state_dir();
    let dir = parent.path().join("state");
    let r = next_at(&faketime, "@2136-02-07 06:28:16", 5, &dir)
        .expect_code(1, "a clock past the range");
    assert!(r.stderr.contains("clock"), "{}", r.stderr);
    assert!(!dir.exists(), "the state directory was created");
    assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0);
}

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

/// `setpriv` to run a command as `nobody`, or `None` after a loud skip
/// (without `setpriv`, which fails under CI, or without root).
fn as_nobody() -> Option<Command> {
    let setpriv = harness::tool("setpriv", "util-linux", "another local user")?;
    if !rustix::process::geteuid().is_root() {
        // As the other tests that need root: a loud skip (CI runs as root).
        harness::skipped(format_args!(
            "SKIPPED: not root, so another local user is NOT tested"
        ));
        return None;
    }
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    Some(cmd)
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
    let Some(mut nobody) = as_nobody() else {
        return;
    };
    let dir = harness::state_dir();
    let exe = std::env::current_exe().unwrap();
    let flooder = Group(
        nobody
            .arg(exe)
            .args(["child_flood", "--exact", "--ignored", "--nocapture", "-q"])
            .env(harness::child::CHILD_ENV, "1")
            .env("IDUTIL_FLOOD_SPACE", harness::space_for(dir.path()))
            .env("IDUTIL_FLOOD_FILE", host_lock_file(dir.path(), 7))
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
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
            text
        });
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let start = std::time::Instant::now();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let took = start.elapsed();
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

/// Child entry point (run as another user): connects again and again to
/// the per-host socket names of shards 0 to 31 of `IDUTIL_FLOOD_SPACE`
/// (what earlier releases listened on), keeping hundreds of connections
/// open, and opens and probes `IDUTIL_FLOOD_FILE`, until killed.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_flood() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixStream};
    if !harness::is_child() {
        return;
    }
    let space = std::env::var("IDUTIL_FLOOD_SPACE").unwrap();
    let file = std::env::var("IDUTIL_FLOOD_FILE").unwrap();
    std::thread::spawn(move || loop {
        for _ in 0..1000 {
            let _ = fs::File::open(&file);
        }
        let _ = Command::new("flock")
            .args(["-s", "-n", &file, "true"])
            .status();
    });
    let mut open = Vec::new();
    loop {
        for shard in 0..32 {
            let name = format!("idutil/{space}/shard-{shard}");
            if let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) {
                if let Ok(s) = UnixStream::connect_addr(&addr) {
                    open.push(s);
                }
            }
        }
        if open.len() > 500 {
            open.clear();
        }
    }
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
    let r = idutil_redirected(1, &dir, "next -n 100", ">/dev/full").expect_code(1, "stdout full");
    assert!(r.stderr.contains("cannot write the output"), "{}", r.stderr);
    // Issued, though not printed: the next run continues after them.
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(1, &dir, 10));
    // A usage error and a runtime error with stderr unwritable.
    idutil_redirected(1, &dir, "next --no-such-flag", "2>/dev/full").expect_code(2, "usage");
    idutil_redirected(1, &dir, "next -n 5", "2>&- >/dev/null").expect_code(0, "stderr closed");
    let holder = harness::spawn_next(2, &dir, 1_000_000_000);
    std::thread::sleep(std::time::Duration::from_millis(500));
    idutil_redirected(2, &dir, "next", "2>/dev/full").expect_code(1, "a held shard");
    drop(holder);
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
    let mut child = cmd.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
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
    // Long enough to use the first window and wait on the next write.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let pid = rustix::process::Pid::from_raw(pid.parse().unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "the command hangs");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
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

/// The clock reads 2100 when the command opens the shard (a run has no
/// earlier reading of its own to compare with) and comes back: the shard
/// stays in 2100 until `state recover --unused-from --unused-to` brings it
/// back, after which it issues at the real time again and nothing is
/// issued twice.
#[test]
fn a_shard_pushed_to_2100_when_it_opened_comes_back_with_recover() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    const Y2100: u64 = 4_102_444_800;
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(8, dir.path(), 1000));
    let r = next_at(&faketime, "@2100-01-01 00:00:00", 8, dir.path())
        .expect_code(0, "next while the clock reads 2100");
    ledger.record_after_all(&harness::parse_ids(&r.stdout));
    let shifted = harness::next(8, dir.path(), 10);
    assert!(harness::unix_second(shifted[0]) >= Y2100, "still in 2100");
    ledger.record_after_all(&shifted);
    let now = harness::wall_now();
    let r = harness::run(harness::idutil(8, dir.path()).args([
        "state",
        "recover",
        "--unused-from",
        &(now + 3600).to_string(),
        "--unused-to",
        "2100-01-01T00:00:00Z",
    ]))
    .expect_code(0, "recover from 2100");
    assert!(
        r.stdout.contains("passed over: 2100-01-01T00:00:00Z"),
        "{}",
        r.stdout
    );
    let back = harness::next(8, dir.path(), 1000);
    assert!(
        harness::unix_second(back[0]) < now + 120,
        "back to the real time"
    );
    ledger.record(&back);
    ledger.assert_unique();
}
