//! Ground pulled away under a live generator: lock files and directories deleted or doubled.

use idutil_harness as harness;

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};
use std::{fs, thread};

use idutil::{Error, ManualClock};
use idutil_harness::Ledger;

use crate::{private_dir, refused, ERROR_MARK};

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
fn deleting_the_lock_file_fences_the_holder_and_a_second_process_starts_after_it() {
    let dir = private_dir();
    let shard = 11;
    let mut child = spawn_issuer(shard, dir.path());
    let (ids, rest) = harness::read_until_ready(child.stdout.take().unwrap());

    fs::remove_file(dir.path().join(format!("shard-{shard}.lock"))).unwrap();
    // Without the lock file nothing says the holder is there: a second
    // process starts the shard again, after the durable mark, which covers
    // every ID the holder may issue before it notices and stops.
    let second = harness::next(shard, dir.path(), 1000);

    let (ids, error) = wait_for_error(&mut child, rest, ids);
    // Deleted, and by now made again by the second process.
    assert!(
        error.contains("lock file")
            && (error.contains("was deleted") || error.contains("was replaced")),
        "{error}"
    );
    assert!(error.contains("stopped issuing"), "{error}");
    // How many IDs the child issues before its next write notices the
    // deletion depends on the machine's load; at least its first.
    assert!(!ids.is_empty(), "the child issued no IDs");

    // The state file still covers everything: the second run, and a new
    // one, start after it all.
    let mut ledger = Ledger::new();
    ledger.record(&ids);
    ledger.record_after_all(&second);
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
        // Deleted, or replaced when the new directory came first; or, when
        // the holder looked while the directory was being emptied, its
        // lock file or claim file deleted.
        (error.contains("state directory")
            || error.contains("lock file")
            || error.contains("claim file"))
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
