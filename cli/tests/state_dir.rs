//! The state directory as a trust boundary: relative paths, deleted or
//! replaced lock files and directories under a live generator, one shard
//! per host across state directories, symbolic links, FIFOs, devices,
//! modes, owners and deleted state files. Real processes of the command
//! and of a long-lived library user (this binary, re-executed).

use idutil_harness as harness;

use std::fs;
use std::io::{BufRead, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use harness::{Ledger, ID_MARK, READY_MARK};
use idutil::state::Remedy;
use idutil::{Error, Generator, ManualClock};

/// Marks the error line a child prints when it stops issuing.
const ERROR_MARK: &str = "@error=";

/// A command that must fail fast: exit status 1 within 10 s; its stderr.
fn refused(cmd: &mut Command, what: &str) -> String {
    let start = Instant::now();
    let out = harness::output_within(cmd, Duration::from_secs(10));
    let r = harness::Run::from_output(out).expect_code(1, what);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{what} took {:?}",
        start.elapsed()
    );
    r.stderr
}

fn private_dir() -> tempfile::TempDir {
    let dir = harness::state_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

// ---------------------------------------------------------------------------
// Relative paths.

#[test]
fn a_relative_state_dir_is_a_usage_error() {
    let cwd = harness::state_dir();
    for (env, args) in [
        (Some("state"), vec!["--shard", "3", "next"]),
        (None, vec!["--shard", "3", "--state-dir", "state", "next"]),
        (Some("./state"), vec!["--shard", "3", "state"]),
    ] {
        let mut cmd = Command::new(harness::bin());
        cmd.current_dir(cwd.path())
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_STATE_DIR")
            .env("IDUTIL_ID_SPACE", harness::space_for(cwd.path()))
            .args(&args);
        if let Some(v) = env {
            cmd.env("IDUTIL_STATE_DIR", v);
        }
        let r = harness::run(&mut cmd).expect_code(2, "a relative state dir");
        assert!(r.stderr.contains("relative"), "{}", r.stderr);
        assert!(r.stdout.is_empty());
    }
    assert_eq!(
        fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "nothing created"
    );
    assert!(matches!(
        Generator::builder().state_dir("state").shard(3).open(),
        Err(Error::RelativeStateDir { .. })
    ));
}

#[test]
fn a_bad_id_space_is_a_usage_error() {
    let dir = private_dir();
    let r = harness::run(harness::idutil(3, dir.path()).args(["--id-space", "a/b", "next"]))
        .expect_code(2, "a bad --id-space");
    assert!(r.stderr.contains("ID space"), "{}", r.stderr);
    let r = harness::run(
        harness::idutil(3, dir.path())
            .env("IDUTIL_ID_SPACE", "")
            .arg("next"),
    )
    .expect_code(2, "an empty IDUTIL_ID_SPACE");
    assert!(r.stderr.contains("IDUTIL_ID_SPACE"), "{}", r.stderr);
    assert!(matches!(
        harness::builder(dir.path()).id_space("x y").shard(3).open(),
        Err(Error::InvalidIdSpace { .. })
    ));
}

// ---------------------------------------------------------------------------
// Ground pulled away under a live generator.

/// A long-lived library user: `IdUtil` from the environment, issuing IDs
/// at about 130,000 a second (faster than a second's sequence numbers, so
/// it borrows and writes reservations often) until an error, which it
/// prints before exiting.
fn spawn_issuer(shard: u32, dir: &Path) -> Child {
    harness::spawn_child(
        "child_issue_until_error",
        &[
            ("IDUTIL_CHILD_DIR", dir.display().to_string()),
            ("IDUTIL_STATE_DIR", dir.display().to_string()),
            ("IDUTIL_SHARD", shard.to_string()),
        ],
    )
}

/// Waits for an issuer started by [`spawn_issuer`] to stop on its own;
/// returns its IDs and its error line.
fn wait_for_error(
    child: &mut Child,
    mut rest: impl BufRead,
    mut ids: Vec<u64>,
) -> (Vec<u64>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut error = None;
    let mut line = String::new();
    while error.is_none() {
        assert!(Instant::now() < deadline, "the child never stopped");
        line.clear();
        if rest.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(i) = line.find(ERROR_MARK) {
            error = Some(line[i + ERROR_MARK.len()..].trim().to_string());
        } else {
            ids.extend(harness::child_ids(&line).0);
        }
    }
    // The child waits for its stdin to close after an error.
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    let error = error.unwrap_or_else(|| panic!("the child ended ({status}) without an error line"));
    (ids, error)
}

#[test]
fn deleting_the_lock_file_fences_the_holder_and_a_second_process_is_refused() {
    let dir = private_dir();
    let shard = 11;
    let mut child = spawn_issuer(shard, dir.path());
    let pid = child.id();
    let (ids, rest) = harness::read_until_ready(child.stdout.take().unwrap());

    fs::remove_file(dir.path().join(format!("shard-{shard}.lock"))).unwrap();
    let err = refused(
        harness::idutil(shard, dir.path()).args(["next", "-n", "1000"]),
        "a second process on the shard",
    );
    assert!(err.contains("in use by another generator"), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");

    let (ids, error) = wait_for_error(&mut child, rest, ids);
    assert!(
        error.contains("lock file") && error.contains("was deleted"),
        "{error}"
    );
    assert!(error.contains("stopped issuing"), "{error}");
    // How many IDs the child issues before its next write notices the
    // deletion depends on the machine's load; at least its first.
    assert!(!ids.is_empty(), "the child issued no IDs");

    // The state file still covers everything: a new run starts after it all.
    let mut ledger = Ledger::new();
    ledger.record(&ids);
    ledger.record_after_all(&harness::next(shard, dir.path(), 1000));
    ledger.assert_unique();
}

#[test]
fn deleting_the_state_dir_fences_the_holder_which_never_writes_into_the_new_one() {
    let parent = private_dir();
    let dir = parent.path().join("state");
    let shard = 12;
    let mut child = spawn_issuer(shard, &dir);
    let pid = child.id();
    let (ids, rest) = harness::read_until_ready(child.stdout.take().unwrap());

    fs::remove_dir_all(&dir).unwrap();
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let err = refused(
        harness::idutil(shard, &dir).args(["next", "-n", "1000"]),
        "a second process on the recreated directory",
    );
    assert!(err.contains(&format!("pid {pid}")), "{err}");

    let (ids, error) = wait_for_error(&mut child, rest, ids);
    assert!(
        // Deleted, or replaced when the new directory came first.
        error.contains("state directory")
            && (error.contains("was deleted") || error.contains("was replaced")),
        "{error}"
    );
    assert!(!ids.is_empty());
    let left: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the fenced generator wrote {left:?}");
    harness::assert_unique_set(&ids);
}

#[test]
fn a_successor_on_a_recreated_dir_never_reissues_what_a_fenced_holder_issued() {
    let parent = private_dir();
    let dir = parent.path().join("state");
    let shard = 14;
    // A holder that follows the clock: it issues in the current second.
    let mut holder = harness::idutil(shard, &dir)
        .args(["next", "-n", "100000000", "--max-lead", "1s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once it prints, it has opened the shard and issues.
    let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.ends_with('\n'), "the holder printed no ID: {first:?}");
    let reader = thread::spawn(move || first + &harness::read_rest(out));
    fs::remove_dir_all(&dir).unwrap();
    // The successor starts over in a new directory at the same path as soon
    // as the host lets it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let successor = loop {
        let r = harness::run(harness::idutil(shard, &dir).args(["next", "-n", "100000"]));
        if r.code == Some(0) {
            break harness::parse_ids(&r.stdout);
        }
        assert!(r.stderr.contains("in use"), "{}", r.stderr);
        assert!(Instant::now() < deadline, "the shard never came free");
        thread::sleep(Duration::from_millis(200));
    };
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the holder fences itself");
    let fenced = harness::parse_complete_ids(&reader.join().unwrap());
    assert!(!fenced.is_empty());
    let mut all = fenced.clone();
    all.extend(&successor);
    harness::assert_unique_set(&all);
    assert!(successor[0] > *fenced.last().unwrap());
}

#[test]
fn a_fenced_generator_stops_for_good_and_writes_nothing_more() {
    let dir = private_dir();
    let clock = ManualClock::new(1_700_000_000);
    let g = harness::builder(dir.path())
        .shard(13)
        .clock(clock.clone())
        .window(Duration::from_secs(2))
        .open()
        .unwrap();
    let first = g.next_id().unwrap();
    let state = harness::state_file(dir.path(), 13);
    let before = fs::read(&state).unwrap();
    // Replaced, not just deleted: a new file at the lock file's path.
    let lock = dir.path().join("shard-13.lock");
    fs::remove_file(&lock).unwrap();
    fs::write(&lock, "").unwrap();

    clock.set(1_700_000_100);
    let err = g
        .next_id()
        .expect_err("the write past the reservation fences");
    assert!(
        matches!(&err, Error::StateReplaced { shard: 13, reason, .. } if reason.contains("replaced")),
        "{err:?}"
    );
    for _ in 0..3 {
        assert!(matches!(g.next_id(), Err(Error::StateReplaced { .. })));
        assert!(matches!(g.next_ids(10), Err(Error::StateReplaced { .. })));
    }
    assert!(matches!(g.close(), Err(Error::StateReplaced { .. })));
    assert!(matches!(g.next_id(), Err(Error::StateReplaced { .. })));
    assert_eq!(
        fs::read(&state).unwrap(),
        before,
        "nothing written after the fence"
    );
    drop(g);
    assert_eq!(fs::read(&state).unwrap(), before);

    // The shard itself is usable again, after everything issued.
    let again = harness::builder(dir.path())
        .shard(13)
        .clock(ManualClock::new(1_700_000_000))
        .open()
        .unwrap();
    assert!(again.next_id().unwrap() > first);
}

#[test]
fn two_state_dirs_for_one_shard_on_one_host_refuse_the_second() {
    let a = private_dir();
    let b = private_dir();
    let shard = 14;
    let space = harness::space_for(a.path());
    let mut child = harness::spawn_child(
        "child_hold_shard",
        &[
            ("IDUTIL_CHILD_SHARD", shard.to_string()),
            ("IDUTIL_CHILD_DIR", a.path().display().to_string()),
            ("IDUTIL_ID_SPACE", space.clone()),
            ("IDUTIL_CHILD_N", "100".to_string()),
        ],
    );
    let pid = child.id();
    let (ids, _rest) = harness::read_until_ready(child.stdout.take().unwrap());
    assert_eq!(ids.len(), 100);

    let err = refused(
        harness::idutil(shard, b.path())
            .env("IDUTIL_ID_SPACE", &space)
            .args(["next", "-n", "1000"]),
        "a second process on the shard in another directory",
    );
    assert!(err.contains("in use by another generator"), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(!harness::state_file(b.path(), shard).exists());
    // `state` shows the holder on this host.
    let report = harness::run(
        harness::idutil(shard, b.path())
            .env("IDUTIL_ID_SPACE", &space)
            .args(["state", "--json"]),
    )
    .expect_code(0, "idutil state");
    let report: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    assert_eq!(report["host_holder_pid"], u64::from(pid));

    // In another ID space the same shard is free.
    harness::run(harness::idutil(shard, b.path()).args(["next"])).expect_code(0, "another space");

    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let r = harness::run(
        harness::idutil(shard, b.path())
            .env("IDUTIL_ID_SPACE", &space)
            .args(["next"]),
    );
    r.expect_code(0, "once the holder is gone");
}

// ---------------------------------------------------------------------------
// Symbolic links, FIFOs, devices and huge files.

#[test]
fn a_symlinked_lock_file_is_refused_and_its_target_untouched() {
    let dir = private_dir();
    let outside = harness::state_dir();
    let target = outside.path().join("precious");
    fs::write(&target, "precious\n").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("shard-3.lock")).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a symlinked lock file",
    );
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");

    // A dangling link is not followed into a new file either.
    let missing = outside.path().join("created-through-a-link");
    std::os::unix::fs::symlink(&missing, dir.path().join("shard-4.lock")).unwrap();
    refused(
        harness::idutil(4, dir.path()).arg("next"),
        "a dangling lock link",
    );
    assert!(!missing.exists());

    // The state directory itself must not be a link.
    let link = outside.path().join("dir-link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let err = refused(
        harness::idutil(5, &link).arg("next"),
        "a symlinked state dir",
    );
    assert!(err.contains("symbolic link"), "{err}");
    // Nor may a trailing slash or dot smuggle the link through.
    for spelled in [
        format!("{}/", link.display()),
        format!("{}/.", link.display()),
    ] {
        let err = refused(
            harness::idutil(5, Path::new(&spelled)).arg("next"),
            "a symlinked state dir with a trailing slash or dot",
        );
        assert!(err.contains("symbolic link"), "{spelled}: {err}");
    }
    assert!(!dir.path().join("shard-5.lock").exists());
}

#[test]
fn a_hard_linked_lock_file_is_refused_and_its_other_name_untouched() {
    let dir = private_dir();
    let victim = dir.path().join("precious");
    fs::write(&victim, "precious\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(&victim, dir.path().join("shard-3.lock")).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a hard-linked lock file",
    );
    assert!(err.contains("hard link"), "{err}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn a_state_dir_under_a_directory_another_user_controls_is_refused() {
    if !is_root() {
        harness::skipped(format_args!(
            "SKIPPED: needs root to hand a directory to another user"
        ));
        return;
    }
    let outer = harness::state_dir();
    let parent = outer.path().join("theirs");
    fs::create_dir(&parent).unwrap();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).unwrap();
    let chown = Command::new("chown")
        .args(["nobody"])
        .arg(&parent)
        .status()
        .unwrap();
    assert!(chown.success());
    // Whoever owns the parent could move the state directory away, and a
    // new one would start over: refused, however private the dir itself.
    let dir = parent.join("state");
    let err = refused(
        harness::idutil(3, &dir).arg("next"),
        "a state dir under another user's directory",
    );
    assert!(err.contains("directory above it"), "{err}");
    // A sticky, world-writable parent (like /tmp) is fine.
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o1777)).unwrap();
    Command::new("chown")
        .arg("root")
        .arg(&parent)
        .status()
        .unwrap();
    harness::next(3, &dir, 3);
}

#[test]
fn a_state_file_linked_to_a_secret_is_refused_without_leaking_it() {
    let dir = private_dir();
    let outside = harness::state_dir();
    let secret = outside.path().join("secret");
    let text = "password = hunter2-SECRET-TOKEN\n";
    fs::write(&secret, text).unwrap();
    std::os::unix::fs::symlink(&secret, harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a linked state file",
        );
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert!(
            !err.contains("hunter2"),
            "{args:?} leaked the secret: {err}"
        );
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), text);
}

#[test]
fn recover_replaces_a_symlinked_bad_copy_instead_of_writing_through_it() {
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    let state = harness::state_file(dir.path(), 3);
    fs::write(&state, "garbage\n").unwrap();
    let outside = harness::state_dir();
    let target = outside.path().join("target");
    fs::write(&target, "keep me\n").unwrap();
    let bad = dir.path().join("shard-3.state.bad");
    std::os::unix::fs::symlink(&target, &bad).unwrap();
    // The garbage keeps no mark: the operator vouches for a time.
    let after = (harness::wall_now() + 60).to_string();
    harness::run(harness::idutil(3, dir.path()).args(["state", "recover", "--after", &after]))
        .expect_code(0, "state recover");
    assert_eq!(fs::read_to_string(&target).unwrap(), "keep me\n");
    let meta = fs::symlink_metadata(&bad).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(fs::read_to_string(&bad).unwrap(), "garbage\n");
}

#[test]
fn a_fifo_as_the_state_file_fails_fast_everywhere() {
    let dir = private_dir();
    let state = harness::state_file(dir.path(), 3);
    let made = Command::new("mkfifo")
        .arg(&state)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a FIFO state file",
        );
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
}

#[test]
fn a_device_or_a_huge_file_is_refused_quickly() {
    let dir = private_dir();
    std::os::unix::fs::symlink("/dev/zero", harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a link to /dev/zero",
        );
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
    }
    let huge = harness::state_file(dir.path(), 4);
    let file = fs::File::create(&huge).unwrap();
    file.set_len(1 << 30).unwrap();
    fs::set_permissions(&huge, fs::Permissions::from_mode(0o600)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(4, dir.path()).args(args),
            "a 1 GiB state file",
        );
        assert!(err.contains("larger than"), "{args:?}: {err}");
    }
}

// ---------------------------------------------------------------------------
// Modes and owners.

#[test]
fn under_umask_000_the_dir_is_0700_and_the_files_0600() {
    let root = harness::state_dir();
    let dir = root.path().join("new/state");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(harness::bin())
        .args(["--shard", "3", "--state-dir"])
        .arg(&dir)
        .args(["next", "-n", "5"])
        .env("IDUTIL_ID_SPACE", harness::space_for(&dir));
    harness::run(&mut cmd).expect_code(0, "idutil next under umask 000");
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&root.path().join("new")), 0o700);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("shard-3.lock")), 0o600);
    assert_eq!(mode(&harness::state_file(&dir, 3)), 0o600);
}

#[test]
fn a_dir_or_file_writable_by_others_is_refused_with_the_fix() {
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    for args in [&["next"][..], &["state"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a 0777 state dir",
        );
        assert!(
            err.contains(&format!("chmod 700 {}", dir.path().display())),
            "{err}"
        );
    }
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let state = harness::state_file(dir.path(), 3);
    fs::set_permissions(&state, fs::Permissions::from_mode(0o666)).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a 0666 state file",
    );
    assert!(
        err.contains(&format!("chmod 600 {}", state.display())),
        "{err}"
    );
    fs::set_permissions(&state, fs::Permissions::from_mode(0o600)).unwrap();
    harness::next(3, dir.path(), 10);
}

#[test]
fn a_dir_owned_by_another_user_is_refused_with_the_fix() {
    if !is_root() {
        harness::skipped(format_args!(
            "SKIPPED a_dir_owned_by_another_user_is_refused_with_the_fix: \
             needs root to give a directory to another user"
        ));
        return;
    }
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    // `nobody` owns it now, and could delete our state file.
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a dir owned by nobody",
        );
        assert!(
            err.contains("uid 65534") && err.contains("chown"),
            "{args:?}: {err}"
        );
    }
    // A file in our own directory owned by someone else is refused too.
    std::os::unix::fs::chown(dir.path(), Some(0), Some(0)).unwrap();
    let state = harness::state_file(dir.path(), 3);
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a state file owned by nobody",
    );
    assert!(err.contains("uid 65534"), "{err}");

    // And `nobody` itself, running idutil on root's directory, is refused.
    std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let setpriv = Command::new("setpriv").arg("--version").output();
    if setpriv.is_err() {
        harness::skipped(format_args!(
            "SKIPPED the setpriv part: no setpriv on this machine"
        ));
        return;
    }
    let bin_copy = harness::state_dir();
    fs::set_permissions(bin_copy.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin_copy.path().join("idutil");
    fs::copy(harness::bin(), &exe).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["--shard", "3", "--state-dir"])
        .arg(dir.path())
        .arg("next")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR");
    let err = refused(&mut cmd, "nobody on root's directory");
    assert!(err.contains("uid 0") && err.contains("chown"), "{err}");
}

// ---------------------------------------------------------------------------
// Deleted state.

#[test]
fn a_deleted_state_file_is_refused_not_restarted_at_the_clock() {
    let dir = private_dir();
    let mut ledger = Ledger::new();
    // Far more than a second's sequence numbers: the run borrows ahead.
    ledger.record(&harness::next(3, dir.path(), 200_000));
    fs::remove_file(harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a deleted state file",
        );
        assert!(err.contains("missing"), "{args:?}: {err}");
        assert!(err.contains("state recover"), "{args:?}: {err}");
        assert!(err.contains("--after TIME"), "{args:?}: {err}");
    }
    // The library says the same in its own terms.
    let err = harness::builder(dir.path())
        .shard(3)
        .open()
        .expect_err("a deleted state file");
    assert!(
        matches!(
            err,
            Error::BadState {
                remedy: Remedy::After,
                ..
            }
        ),
        "{err:?}"
    );
    // The way out: recovery, after the latest second the shard reached.
    let after = harness::unix_second(ledger.max().unwrap());
    harness::run(harness::idutil(3, dir.path()).args([
        "state",
        "recover",
        "--after",
        &after.to_string(),
    ]))
    .expect_code(0, "state recover --after");
    ledger.record_after_all(&harness::next(3, dir.path(), 1000));
}

// ---------------------------------------------------------------------------
// Child entry points.

#[test]
#[ignore = "a child process entry point, run by the tests above"]
fn child_issue_until_error() {
    if !harness::is_child() {
        return;
    }
    use std::fmt::Write as _;
    let mut out = std::io::stdout().lock();
    let first = idutil::IdUtil::try_next_id().expect("the child opens the shard");
    writeln!(out, "{ID_MARK}{first}\n{READY_MARK}").unwrap();
    out.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut chunk = String::new();
    while Instant::now() < deadline {
        chunk.clear();
        let mut failed = None;
        for _ in 0..256 {
            match idutil::IdUtil::try_next_id() {
                Ok(id) => writeln!(chunk, "{ID_MARK}{id}").unwrap(),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = &failed {
            let line = e.to_string().replace('\n', " ");
            writeln!(chunk, "{ERROR_MARK}{line}").unwrap();
        }
        if out
            .write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
        if failed.is_some() {
            // A long-lived process goes on after a failed call: stay alive
            // (holding whatever the generator holds) until the parent
            // closes our stdin.
            drop(out);
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
#[ignore = "a child process entry point, run by the tests above"]
fn child_hold_shard() {
    if harness::is_child() {
        harness::hold_shard_child();
    }
}
