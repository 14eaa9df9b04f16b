//! The edges of the operating system, in the library: a `fork()` of a
//! process holding generators, a reservation write that fails under
//! waiting threads, and a state file restored from an older copy.
//!
//! Processes are real: this test binary, re-executed to run one
//! `#[ignore]`d entry point, forks with `fork(2)` itself.

use idutil_harness as harness;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use harness::{child_var, Ledger};
use idutil::state;
use idutil::{Generator, IdUtil, ManualClock};

/// A fixed wall-clock second for manual-clock tests (2023-11-14).
const T: u64 = 1_700_000_000;

/// How many IDs the forked child takes from its parent's process-wide
/// generator.
const CHILD_CALLS: u64 = 20_000;

/// Runs the entry point `entry` in a child process with `dir` as its
/// state directory, within a minute, and returns what it printed; panics
/// with both streams unless it succeeded.
fn child_report(entry: &str, dir: &tempfile::TempDir) -> String {
    let out = harness::output_within(
        &mut harness::child::child_command(
            entry,
            &[("IDUTIL_CHILD_DIR", dir.path().display().to_string())],
        ),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the `fork` entry point in a child process and checks its report:
/// every ID the parent and its forked child printed is unique, the forked
/// child issued from its parent's generators (each opened a generator of
/// its own in the child, a member of the shard beside the parent), closed
/// them without a panic, and opened a shard of its own too.
#[test]
fn a_forked_child_never_issues_its_parents_ids() {
    let dir = harness::state_dir();
    let stdout = child_report("child_fork", &dir);
    let lines: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix('@')).collect();
    let field = |key: &str| -> Vec<&str> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .collect()
    };
    assert_eq!(field("unexpected"), Vec::<&str>::new(), "{stdout}");
    assert_eq!(field("child-global"), [CHILD_CALLS.to_string()], "{stdout}");
    assert_eq!(field("child-explicit"), ["12"], "{stdout}");
    assert_eq!(field("child-closed"), ["ok"], "{stdout}");
    assert_eq!(field("grandchild-status"), ["0"], "{stdout}");
    let ids: Vec<u64> = field("id ").iter().map(|t| harness::parse_id(t)).collect();
    let by_shard = |shard: u32| {
        ids.iter()
            .filter(|&&id| id & 31 == u64::from(shard))
            .count()
    };
    // The parent's two generators before and after the fork and the
    // child's beside them, and the child's own generator on shard 4.
    assert_eq!(by_shard(3), 2000 + CHILD_CALLS as usize, "{stdout}");
    assert_eq!(by_shard(5), 2000 + 12, "{stdout}");
    assert_eq!(by_shard(4), 1001, "{stdout}");
    harness::assert_unique_set(&ids);
    // The child's clock was not frozen at the parent's last reading: its
    // generator follows the wall clock.
    assert_eq!(field("child-clock-follows"), ["true"], "{stdout}");
    // The child's own shard was closed cleanly; the parent's shards too.
    for shard in [3, 4, 5] {
        let report = state::inspect(dir.path(), shard).unwrap();
        assert!(report.state.unwrap().last.is_some(), "shard {shard}");
        assert!(!report.locked, "shard {shard} is still locked");
    }
}

/// Child entry point of [`a_forked_child_never_issues_its_parents_ids`]:
/// opens the process-wide generator on shard 3 and a generator on shard 5,
/// issues from both, forks, and issues from both again while the forked
/// child tries them, reopens `IdUtil` on shard 4 and issues from it.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    IdUtil::init_with(harness::builder(&dir).shard(3)).expect("open shard 3");
    let explicit = harness::builder(&dir)
        .shard(5)
        .open()
        .expect("open shard 5");
    let mut text = String::new();
    let print_ids = |text: &mut String, n: usize, g: &dyn Fn() -> u64| {
        for _ in 0..n {
            text.push_str(&format!("@id {}\n", g()));
        }
    };
    print_ids(&mut text, 1000, &|| IdUtil::next_id() as u64);
    print_ids(&mut text, 1000, &|| explicit.next_id().unwrap().as_u64());
    emit(&text);

    // SAFETY: in a process with threads, the child of `fork` may rely only
    // on what the copy keeps consistent. It calls the library (whose
    // behaviour after `fork` is what this test checks; its `pthread_atfork`
    // handlers run around the call), formats and writes its report, and
    // leaves with `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // The forked child: a stuck call would hang it, so it is killed
        // after a while whatever happens.
        // SAFETY: `alarm` only arms a timer; its SIGALRM, left at the
        // default action, ends this child.
        unsafe { libc::alarm(30) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            forked_child(&dir, &explicit)
        }))
        .map_or(3, |()| 0);
        // SAFETY: `_exit` ends the process at once, without running
        // destructors or `atexit` handlers that the parent's copy owns.
        unsafe { libc::_exit(code) };
    }
    // The parent goes on issuing from both generators meanwhile.
    let mut text = String::new();
    print_ids(&mut text, 1000, &|| IdUtil::next_id() as u64);
    print_ids(&mut text, 1000, &|| explicit.next_id().unwrap().as_u64());
    emit(&text);
    let mut status = 0;
    // SAFETY: `status` is a valid, writable `c_int` for the call, and
    // `pid` is this process's own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    };
    emit(&format!("@grandchild-status {code}\n"));
    explicit.close().unwrap();
    IdUtil::shutdown().unwrap();
}

fn forked_child(dir: &Path, explicit: &Generator) {
    let mut text = String::new();
    let mut issued = 0;
    for _ in 0..CHILD_CALLS {
        match IdUtil::try_next_id() {
            Ok(id) => {
                issued += 1;
                text.push_str(&format!("@id {id}\n"));
            }
            Err(e) => text.push_str(&format!("@unexpected {e}\n")),
        }
    }
    text.push_str(&format!("@child-global {issued}\n"));
    let mut issued = 0;
    let results = [
        explicit.next_id().map(|id| vec![id]),
        explicit.next_id_nowait().map(|id| vec![id]),
        explicit.next_ids(10).map(|batch| batch.collect()),
    ];
    for result in results {
        match result {
            Ok(ids) => {
                for id in ids {
                    issued += 1;
                    text.push_str(&format!("@id {id}\n"));
                }
            }
            Err(e) => text.push_str(&format!("@unexpected {e}\n")),
        }
    }
    text.push_str(&format!("@child-explicit {issued}\n"));
    let closed = explicit
        .close()
        .map_or_else(|e| e.to_string(), |()| "ok".into());
    text.push_str(&format!("@child-closed {closed}\n"));
    // The environment's shard is the parent's; the child opens its own.
    IdUtil::init_with(harness::builder(dir).shard(4)).expect("the child opens shard 4");
    for _ in 0..1000 {
        text.push_str(&format!("@id {}\n", IdUtil::next_id()));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let id = IdUtil::next_id() as u64;
    text.push_str(&format!("@id {id}\n"));
    let follows = harness::unix_second(id) + 1 >= harness::wall_now();
    text.push_str(&format!("@child-clock-follows {follows}\n"));
    IdUtil::shutdown().expect("the child closes shard 4");
    emit(&text);
}

/// Writes `text` to stdout in one piece, flushed: parent and forked child
/// share the pipe.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// A reservation write that fails (the process may not write a byte:
/// `RLIMIT_FSIZE` 0, a real `EFBIG` from the kernel) while four threads
/// wait on it: every one of them gets the error, at once; once writing
/// works again the next call retries and issues, after everything before.
#[test]
fn a_failed_reservation_write_answers_every_waiting_thread() {
    let dir = harness::state_dir();
    let stdout = child_report("child_failed_write", &dir);
    let answers: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("@answer "))
        .collect();
    // Every thread answered (none waits for ever). A thread that read the
    // cursor before another moved it to the new clock may still take an
    // ID within the old reservation; every other answer is the error.
    assert_eq!(answers.len(), 4, "{stdout}");
    let mut raced = Vec::new();
    for answer in &answers {
        match answer.strip_prefix("an ID ") {
            Some(id) => raced.push(harness::parse_id(id)),
            None => assert!(answer.contains("File too large"), "{stdout}"),
        }
    }
    assert!(raced.len() < 4, "no thread waited on the write: {stdout}");
    raced.sort_unstable();
    let mut ledger = Ledger::new();
    let ids = |key: &str| -> Vec<u64> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(key))
            .map(harness::parse_id)
            .collect()
    };
    ledger.record(&ids("@before "));
    ledger.record_after_all(&raced);
    for &id in &raced {
        assert_eq!(harness::unix_second(id), T, "within the old reservation");
    }
    ledger.record_after_all(&ids("@after "));
    assert_eq!(ids("@after ").len(), 1000, "{stdout}");
}

/// Child entry point of
/// [`a_failed_reservation_write_answers_every_waiting_thread`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_failed_write() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let clock = ManualClock::new(T);
    let g = Arc::new(
        harness::builder(&dir)
            .shard(6)
            .clock(clock.clone())
            .open()
            .expect("open shard 6"),
    );
    let mut text = String::new();
    for _ in 0..1000 {
        text.push_str(&format!("@before {}\n", g.next_id().unwrap()));
    }
    emit(&text);
    let limit = |bytes: u64| {
        let limit = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: `limit` is a valid `rlimit` that outlives the call,
        // which only reads it.
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) };
        assert_eq!(rc, 0, "setrlimit");
    };
    // SAFETY: `SIG_IGN` installs no handler code, so nothing runs in a
    // signal context; ignoring SIGXFSZ makes a write past the limit fail
    // with EFBIG instead of killing the process.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    limit(0);
    // Far past the reservation: every call needs the next write.
    clock.set(T + 100);
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (g, start) = (Arc::clone(&g), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                match g.next_id() {
                    Ok(id) => format!("an ID {id}"),
                    Err(e) => e.to_string(),
                }
            })
        })
        .collect();
    let mut text = String::new();
    for t in threads {
        text.push_str(&format!("@answer {}\n", t.join().unwrap()));
    }
    emit(&text);
    limit(libc::RLIM_INFINITY);
    let mut text = String::new();
    for _ in 0..1000 {
        text.push_str(&format!("@after {}\n", g.next_id().expect("a retry")));
    }
    emit(&text);
    g.close().unwrap();
}

/// A child of `fork()` whose thread is opening its own generator (here
/// held up on the shard's claim file) forks again: the grandchild must
/// open a generator of its own and issue, not wait for ever on a lock
/// held by a thread that did not follow it through the fork.
#[test]
fn a_grandchild_forked_while_its_parent_opens_a_generator_still_issues() {
    let dir = harness::state_dir();
    let stdout = child_report("child_fork_while_opening", &dir);
    assert!(
        stdout.contains("@grandchild issued"),
        "the grandchild did not issue: {stdout}"
    );
}

/// Child entry point of
/// [`a_grandchild_forked_while_its_parent_opens_a_generator_still_issues`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork_while_opening() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let g = harness::builder(&dir)
        .shard(9)
        .member_wait(Duration::from_secs(20))
        .open()
        .expect("open shard 9");
    g.next_id().expect("the parent issues");
    // SAFETY: as in `child_fork`: the forked child calls the library and
    // leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: `alarm` only arms a timer whose default action ends
        // this child.
        unsafe { libc::alarm(40) };
        let report = fork_while_opening(&dir, &g);
        emit(&report);
        // SAFETY: `_exit` ends the process without running the parent's
        // destructors.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: `status` is valid and writable, `child` this process's child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    g.close().unwrap();
}

/// In the forked child: a thread opens the child's own generator while
/// the claim file is held, and the child forks meanwhile; the grandchild
/// issues (or is found stuck after ten seconds). Returns the report.
fn fork_while_opening(dir: &Path, g: &Generator) -> String {
    let claim = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("shard-9.claim"))
        .expect("open the claim file");
    fs2::FileExt::lock_exclusive(&claim).expect("hold the claim file");
    let opener = std::thread::scope(|scope| {
        let opener = scope.spawn(|| g.next_id().map(|_| ()));
        // The thread is now opening the child's generator, waiting on the
        // claim file.
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: the grandchild calls the library and leaves with `_exit`.
        let grandchild = unsafe { libc::fork() };
        if grandchild == 0 {
            // SAFETY: as above.
            unsafe { libc::alarm(40) };
            let text = match g.next_id() {
                Ok(_) => "@grandchild issued\n".to_string(),
                Err(e) => format!("@grandchild refused {e}\n"),
            };
            emit(&text);
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        // Let the opening thread (and the grandchild) through.
        fs2::FileExt::unlock(&claim).expect("let go of the claim file");
        let mut report = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut status = 0;
            // SAFETY: `status` is valid and writable.
            let done = unsafe { libc::waitpid(grandchild, &mut status, libc::WNOHANG) };
            if done == grandchild {
                break;
            }
            if std::time::Instant::now() > deadline {
                report.push_str("@grandchild stuck\n");
                // SAFETY: ends this process's own child.
                unsafe { libc::kill(grandchild, libc::SIGKILL) };
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let opened = opener.join().unwrap();
        report.push_str(&format!("@child opened {opened:?}\n"));
        report
    });
    opener
}
