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
    assert!(r.stderr.contains("cannot read the lock file"), "{}", r.stderr);
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
    let r = harness::run(harness::idutil(2, dir.path()).arg("next"))
        .expect_code(1, "a restored copy");
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
        assert_eq!(fs::read(harness::state_file(dir.path(), 4)).unwrap(), before);
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
