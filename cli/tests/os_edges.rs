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
