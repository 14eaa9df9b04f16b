//! A process sharing a shard that forked children (a pre-forking server)
//! and is then killed while it holds the shard's short lock: its children
//! keep copies of its open files, but not its locks.
//!
//! Processes are real: this test binary, re-executed to run one
//! `#[ignore]`d entry point, forks with `fork(2)` itself, and `strace`
//! kills it inside a system call it makes while it holds the lock.

use idutil_harness as harness;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{child_var, threads};

/// A member that forked an idle child is killed while it draws a block
/// (at its first `pwrite` once `strace` is attached: the claim file and
/// the lock file are written only during a turn). The other members must
/// go on issuing, not wait on a lock nobody will let go while the child
/// lives.
#[test]
fn a_member_killed_during_a_draw_leaves_no_lock_to_its_forked_child() {
    let Some(strace) = harness::tool("strace", "strace", "a member killed while it draws") else {
        return;
    };
    let dir = harness::state_dir();
    let mut member = harness::child::child_command(
        "child_fork_then_issue",
        &[("IDUTIL_CHILD_DIR", dir.path().display().to_string())],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(member.stdout.take().unwrap()).lines();
    let forked: i32 = loop {
        let line = lines.next().expect("the member's report").unwrap();
        if let Some(pid) = line.strip_prefix("@forked ") {
            break pid.parse().unwrap();
        }
    };
    let mut tracer = Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64"])
        .args(["-e", "inject=pwrite64:signal=KILL", "-p"])
        .arg(member.id().to_string())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while member.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the member was not killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = tracer.wait();
    let other = harness::builder(dir.path())
        .shard(11)
        .member_wait(Duration::from_secs(2))
        .open();
    let issued = other.and_then(|g| g.next_id());
    // SAFETY: ends the forked child, which would otherwise sleep on.
    unsafe { libc::kill(forked, libc::SIGKILL) };
    issued.expect("another member issues once the killed one is gone");
}

/// Child entry point of
/// [`a_member_killed_during_a_draw_leaves_no_lock_to_its_forked_child`]:
/// opens shard 11, forks a child that only sleeps, reports the child's
/// pid and issues until killed.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork_then_issue() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let g = harness::builder(&dir)
        .shard(11)
        .open()
        .expect("open shard 11");
    g.next_id().expect("issue before the fork");
    let child = fork_sleeper(false);
    let mut out = std::io::stdout().lock();
    writeln!(out, "@forked {child}").unwrap();
    out.flush().unwrap();
    drop(out);
    // Give strace time to attach, then draw block after block.
    std::thread::sleep(Duration::from_millis(500));
    loop {
        let _ = g.next_ids(10_000);
    }
}

/// A process that forked a child that never issues (a worker that has no
/// use for IDs, a daemon's double fork) closes its generator and exits
/// while the child lives on. The shard must open for the next process,
/// not stay locked by the child's copy of the lock file for as long as
/// the child lives.
#[test]
fn a_closed_member_leaves_no_lock_to_the_child_it_forked() {
    let dir = harness::state_dir();
    let (stdout, _) = run_child("child_fork_then_close", &dir, &[], Duration::from_secs(30));
    let forked: i32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("@forked "))
        .unwrap_or_else(|| panic!("no report: {stdout}"))
        .parse()
        .unwrap();
    assert!(stdout.contains("@closed ok"), "{stdout}");
    let issued = harness::builder(dir.path())
        .shard(12)
        .member_wait(Duration::from_secs(2))
        .open()
        .and_then(|g| g.next_id());
    // SAFETY: ends the forked child, which would otherwise sleep on.
    unsafe { libc::kill(forked, libc::SIGKILL) };
    issued.expect("the next process opens the shard");
}

/// Child entry point of
/// [`a_closed_member_leaves_no_lock_to_the_child_it_forked`]: opens shard
/// 12, forks a child that only sleeps, closes the generator and exits.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork_then_close() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let g = harness::builder(&dir)
        .shard(12)
        .open()
        .expect("open shard 12");
    g.next_id().expect("issue before the fork");
    let child = fork_sleeper(true);
    let closed = g.close().map_or_else(|e| e.to_string(), |()| "ok".into());
    println!("@forked {child}\n@closed {closed}");
}

/// A process forks while another of its threads creates the process-wide
/// generator (here held up on the shard's claim file): the child's first
/// `IdUtil` call must open a generator of its own and issue, not wait for
/// ever on the lock that thread held at the fork.
#[test]
fn a_child_forked_while_the_process_wide_generator_opens_still_issues() {
    let dir = harness::state_dir();
    let (stdout, stderr) = run_child(
        "child_fork_while_init",
        &dir,
        &[
            ("IDUTIL_STATE_DIR", dir.path().display().to_string()),
            ("IDUTIL_SHARD", "13".to_string()),
            ("IDUTIL_ID_SPACE", harness::space_for(dir.path())),
        ],
        Duration::from_secs(60),
    );
    assert!(
        stdout.contains("@forked issued"),
        "the child did not issue: {stdout}\n{stderr}"
    );
}

/// Child entry point of
/// [`a_child_forked_while_the_process_wide_generator_opens_still_issues`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork_while_init() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let claim = hold_claim(&dir, 13);
    std::thread::scope(|scope| {
        let opener = std::thread::Builder::new()
            .name("opener".to_string())
            .spawn_scoped(scope, || {
                idutil::IdUtil::init_with(
                    harness::builder(&dir)
                        .shard(13)
                        .member_wait(Duration::from_secs(20)),
                )
                .map(|_| ())
            })
            .unwrap();
        // The thread is now creating the process-wide generator, waiting
        // on the claim file.
        let opening = threads::wait_until_asleep(
            opener.thread(),
            || opener.is_finished(),
            Duration::from_secs(20),
        );
        assert!(opening, "the opener returned: {:?}", opener.join());
        let child = fork_into(|| {
            // SAFETY: `alarm` only arms a timer whose default action ends
            // this child.
            unsafe { libc::alarm(40) };
            let text = match idutil::IdUtil::try_next_id() {
                Ok(_) => "@forked issued\n".to_string(),
                Err(e) => format!("@forked refused {e}\n"),
            };
            print!("{text}");
            let _ = std::io::stdout().flush();
        });
        fs2::FileExt::unlock(&claim).expect("let go of the claim file");
        reap_or_kill(child);
        println!("@opened {:?}", opener.join().unwrap());
    });
    let _ = idutil::IdUtil::shutdown();
}

/// A process forks while one of its threads draws a block (here held up
/// on the shard's claim file): the child's first calls that only read the
/// generator (`lead`, `reserved_until`) must answer, not wait for ever on
/// the generator's lock that thread held at the fork.
#[test]
fn a_child_forked_during_a_draw_can_read_the_generator() {
    let dir = harness::state_dir();
    let (stdout, stderr) = run_child("child_fork_during_draw", &dir, &[], Duration::from_secs(60));
    assert!(
        stdout.contains("@forked answered"),
        "the child did not answer: {stdout}\n{stderr}"
    );
}

/// Child entry point of
/// [`a_child_forked_during_a_draw_can_read_the_generator`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_fork_during_draw() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let g = harness::builder(&dir)
        .shard(14)
        .member_wait(Duration::from_secs(20))
        .open()
        .expect("open shard 14");
    g.next_id().expect("issue before the fork");
    let claim = hold_claim(&dir, 14);
    std::thread::scope(|scope| {
        // A batch past the first block: the thread draws, and waits.
        let drawer = std::thread::Builder::new()
            .name("drawer".to_string())
            .spawn_scoped(scope, || g.next_ids(100_000).map(|_| ()))
            .unwrap();
        let drawing = threads::wait_until_asleep(
            drawer.thread(),
            || drawer.is_finished(),
            Duration::from_secs(20),
        );
        assert!(drawing, "the drawer returned: {:?}", drawer.join());
        let child = fork_into(|| {
            // SAFETY: `alarm` only arms a timer whose default action ends
            // this child.
            unsafe { libc::alarm(40) };
            let _ = (g.lead(), g.reserved_until());
            println!("@forked answered");
            let _ = std::io::stdout().flush();
        });
        fs2::FileExt::unlock(&claim).expect("let go of the claim file");
        reap_or_kill(child);
        println!("@drew {:?}", drawer.join().unwrap());
    });
    g.close().unwrap();
}

/// Forks this process: the child runs `child` and leaves with `_exit`
/// (never running the parent's destructors or exit hooks); the parent gets
/// the child's pid.
fn fork_into(child: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs `child` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        child();
        // SAFETY: `_exit` ends the process without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    pid
}

/// A forked child that only sleeps (a worker with no use for IDs), with
/// its copies of stdout and stderr closed if `quiet`, so that a reader of
/// the parent's output does not wait for it.
fn fork_sleeper(quiet: bool) -> libc::pid_t {
    fork_into(|| {
        if quiet {
            // SAFETY: closes this process's own descriptors 1 and 2.
            unsafe {
                libc::close(1);
                libc::close(2);
            }
        }
        std::thread::sleep(Duration::from_secs(60));
    })
}

/// Reaps `child` within 10 seconds, or says `@forked stuck` and kills it.
fn reap_or_kill(child: libc::pid_t) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut status = 0;
        // SAFETY: `status` is valid and writable.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            return;
        }
        if Instant::now() > deadline {
            println!("@forked stuck");
            // SAFETY: ends this process's own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Holds `shard`'s claim file locked, as a member in its turn does.
fn hold_claim(dir: &std::path::Path, shard: u32) -> std::fs::File {
    let claim = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(format!("shard-{shard}.claim")))
        .expect("open the claim file");
    fs2::FileExt::lock_exclusive(&claim).expect("hold the claim file");
    claim
}

/// Runs the entry point `name` as a child process on state directory
/// `dir` (plus `env`), within `limit`; its stdout and stderr.
fn run_child(
    name: &str,
    dir: &tempfile::TempDir,
    env: &[(&str, String)],
    limit: Duration,
) -> (String, String) {
    let mut vars = vec![("IDUTIL_CHILD_DIR", dir.path().display().to_string())];
    vars.extend(env.iter().cloned());
    let out = harness::output_within(&mut harness::child::child_command(name, &vars), limit);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A child made by a fork that runs no fork handlers (the `clone` system
/// call made directly, glibc's `_Fork`), of a process sharing its shard
/// and of one holding it alone: its copy of the parent's generator must
/// refuse at once, never issue the IDs left in its parent's block nor
/// wait for ever on the shard thread that stayed in the parent.
#[test]
fn a_child_of_a_raw_fork_refuses_and_never_repeats_its_parents_ids() {
    let mut problems = Vec::new();
    for how in ["clone", "_Fork"] {
        for kind in ["member", "alone"] {
            let what = format!("{how}, {kind}");
            let dir = harness::state_dir();
            let (stdout, stderr) = run_child(
                "child_raw_fork",
                &dir,
                &[
                    ("IDUTIL_CHILD_HOW", how.to_string()),
                    ("IDUTIL_CHILD_KIND", kind.to_string()),
                ],
                Duration::from_secs(60),
            );
            if stdout.contains("@unavailable") {
                harness::skipped(format_args!(
                    "SKIPPED: {how} is not available here, so a child it makes is NOT tested"
                ));
                continue;
            }
            let ids = |mark: &str| -> Vec<u64> {
                stdout
                    .lines()
                    .filter_map(|l| l.strip_prefix(mark))
                    .map(|id| id.parse().unwrap())
                    .collect()
            };
            let (parent, child) = (ids("@id "), ids("@cid "));
            assert!(
                stdout.contains("@parent done") && parent.len() == 2_010,
                "{what}: the parent went on issuing: {stdout}\n{stderr}"
            );
            let verdict = stdout
                .lines()
                .find(|l| l.starts_with("@child "))
                .unwrap_or("(no verdict: the child hung)");
            let mut seen = harness::Tally::new();
            seen.add(parent.iter().copied(), "the parent");
            let repeated = seen.count_duplicates(child.iter().copied(), "the child");
            if repeated > 0 || !child.is_empty() || !verdict.starts_with("@child refused") {
                problems.push(format!(
                    "{what}: the child issued {} IDs, {repeated} of them its parent's; {verdict}",
                    child.len()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Child entry point of
/// [`a_child_of_a_raw_fork_refuses_and_never_repeats_its_parents_ids`]:
/// opens shard 15 (shared, or alone: ephemeral), issues, forks without the
/// fork handlers (`IDUTIL_CHILD_HOW`: `clone` or `_Fork`), and both issue:
/// the child until refused (`@child refused ...`; its IDs as `@cid N`),
/// the parent 2,000 more (`@id N`), then reaps the child.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_raw_fork() {
    if !harness::is_child() {
        return;
    }
    let dir = PathBuf::from(child_var("IDUTIL_CHILD_DIR"));
    let g = match child_var("IDUTIL_CHILD_KIND").as_str() {
        "member" => harness::builder(&dir).shard(15).open(),
        _ => idutil::Generator::builder_ephemeral().shard(15).open(),
    }
    .expect("open shard 15");
    let mut parent: Vec<u64> = (0..10).map(|_| g.next_id().unwrap().as_u64()).collect();
    let Some(pid) = raw_fork(&child_var("IDUTIL_CHILD_HOW")) else {
        println!("@unavailable");
        return;
    };
    if pid == 0 {
        // SAFETY: `alarm` only arms a timer whose default action ends
        // this child: a child that hangs ends, and says nothing.
        unsafe { libc::alarm(20) };
        let mut text = String::new();
        let mut issued = 0u64;
        let verdict = loop {
            match g.next_id() {
                Ok(id) => {
                    // The first hundred thousand are enough to compare; the
                    // rest only has to run into the reservation.
                    if issued < 100_000 {
                        text.push_str(&format!("@cid {id}\n"));
                        if text.len() > 4_000 {
                            write_all_raw(&text);
                            text.clear();
                        }
                    }
                    issued += 1;
                    if issued == 20_000_000 {
                        break "@child issued 20000000 IDs\n".to_string();
                    }
                }
                Err(e) => break format!("@child refused: {e}\n"),
            }
        };
        text.push_str(&verdict);
        write_all_raw(&text);
        // SAFETY: `_exit` ends the process without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    parent.extend((0..2_000).map(|_| g.next_id().unwrap().as_u64()));
    let mut text: String = parent.iter().map(|id| format!("@id {id}\n")).collect();
    reap_or_kill(pid);
    text.push_str("@parent done\n");
    write_all_raw(&text);
    g.close().unwrap();
}

/// Forks this process without running the fork handlers: `clone` through
/// the system call itself, or glibc's `_Fork` (looked up at run time, since
/// older C libraries lack it). `None` if this cannot be done here.
fn raw_fork(how: &str) -> Option<libc::pid_t> {
    let pid = match how {
        #[cfg(target_os = "linux")]
        "clone" => {
            // SAFETY: `clone` with only the exit signal and no new stack
            // is `fork` without the C library's handlers; the child only
            // calls the generator, writes and leaves with `_exit`.
            unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) as libc::pid_t }
        }
        "_Fork" => {
            // SAFETY: looks up a symbol by a NUL-terminated name.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_Fork".as_ptr()) };
            if f.is_null() {
                return None;
            }
            // SAFETY: `_Fork` takes nothing and returns a pid, as declared
            // in glibc's <unistd.h>.
            let f: extern "C" fn() -> libc::pid_t = unsafe { std::mem::transmute(f) };
            f()
        }
        _ => return None,
    };
    assert!(pid >= 0, "{how} failed");
    Some(pid)
}

/// Writes `text` to standard output with `write(2)`, nothing buffered
/// (a child of a raw fork leaves with `_exit`).
fn write_all_raw(text: &str) {
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        // SAFETY: writes from a valid buffer of `rest.len()` bytes.
        let n = unsafe { libc::write(1, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}
