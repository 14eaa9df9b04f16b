//! Library-level proofs of the durability guarantees: clean close and
//! crash restarts, clock rollbacks across restarts with and without clock
//! bits, the shard lock, and damaged state files.
//!
//! Crashes are real: a child process (this test binary, re-executed to run
//! one `#[ignore]`d entry point) is killed with SIGKILL.

use idutil_harness as harness;

use std::path::Path;

use harness::{Damage, Ledger};
use idutil::state::{self, RecoverOptions, Remedy, StateFile};
use idutil::{Error, Generator, Id, Layout, ManualClock, DEFAULT_WINDOW, EPOCH_2000};

/// A fixed wall-clock second for manual-clock tests (2023-11-14).
const T: u64 = 1_700_000_000;

/// Two clock bits: four clock values.
const CLOCKED: Layout = Layout::new_const(30, 2, 16, 5, EPOCH_2000);

fn open_at(dir: &Path, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .clock(clock.clone())
        .open()
        .expect("open the generator")
}

fn open_layout_at(
    dir: &Path,
    shard: u32,
    layout: Layout,
    clock: &ManualClock,
) -> Generator<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .layout(layout)
        .clock(clock.clone())
        .open()
        .expect("open the generator")
}

fn issue<C: idutil::Clock>(g: &Generator<C>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| g.next_id().expect("issue an ID").as_u64())
        .collect()
}

fn on_disk(dir: &Path, shard: u32) -> StateFile {
    state::inspect(dir, shard)
        .expect("inspect the state")
        .state
        .expect("a state file exists")
}

fn mark(state: &StateFile, clock_value: u32) -> u64 {
    state.high_water[&clock_value]
}

/// The counter step between consecutive IDs of one generator (the shard
/// bits sit below the sequence).
fn id_step(layout: &Layout) -> u64 {
    1 << layout.shard_bits()
}

#[test]
fn clean_close_continues_right_after_the_last_id() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let mut ledger = Ledger::new();
    for round in 0..40 {
        let g = open_at(dir.path(), 3, &clock);
        let ids = issue(&g, 25);
        g.close().unwrap();
        if let Some(prev) = ledger.max() {
            // Same second: exactly the next sequence number, not a window
            // ahead.
            assert_eq!(ids[0], prev + id_step(&Layout::DEFAULT), "round {round}");
        }
        ledger.record_after_all(&ids);
        let s = on_disk(dir.path(), 3);
        let last = Id::from_u64(*ids.last().unwrap()).unwrap();
        assert_eq!(s.last, Some((last.unix_seconds(), last.sequence())));
        assert_eq!(s.clock_id, 0);
    }
    // A new second: starts at sequence 0 of it.
    clock.advance(1);
    let g = open_at(dir.path(), 3, &clock);
    let ids = issue(&g, 3);
    assert_eq!(Id::from_u64(ids[0]).unwrap().unix_seconds(), T + 1);
    assert_eq!(Id::from_u64(ids[0]).unwrap().sequence(), 0);
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

#[test]
fn rollback_across_a_clean_restart_bumps_the_clock_id() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let mut ledger = Ledger::new();

    let g = open_at(dir.path(), 4, &clock);
    ledger.record(&issue(&g, 1000));
    g.close().unwrap();
    assert_eq!(on_disk(dir.path(), 4).clock_id, 0);

    for rollbacks in 1..=3u64 {
        clock.rewind(3600);
        let g = open_at(dir.path(), 4, &clock);
        assert_eq!(
            g.clock_id(),
            rollbacks,
            "clock id after rollback {rollbacks}"
        );
        assert_eq!(on_disk(dir.path(), 4).clock_id, rollbacks);
        let ids = issue(&g, 1000);
        // Without clock bits the IDs keep increasing: they continue after
        // the last one, ahead of the rolled-back clock...
        ledger.record_after_all(&ids);
        assert!(Id::from_u64(ids[0]).unwrap().unix_seconds() >= T);
        // ...and that is not lead: the clock went back, nothing borrowed.
        assert_eq!(g.lead(), 0, "a rollback does not count as lead");
        g.close().unwrap();
    }

    // The clock moving forward again is no rollback.
    clock.set(T + 10);
    let g = open_at(dir.path(), 4, &clock);
    assert_eq!(g.clock_id(), 3);
    let ids = issue(&g, 10);
    assert_eq!(Id::from_u64(ids[0]).unwrap().unix_seconds(), T + 10);
    ledger.record_after_all(&ids);
    g.close().unwrap();
    let s = on_disk(dir.path(), 4);
    assert_eq!(s.clock_id, 3);
    assert_eq!(s.seen_max, T + 10);
    ledger.assert_unique();
}

/// A child process holding shard `shard`: it issued `n` IDs on a manual
/// clock at `time` and printed them; the returned IDs are what it printed.
fn crashed_child(dir: &Path, shard: u32, n: u64, time: u64) -> Vec<u64> {
    let mut child = harness::spawn_child(
        "child_hold_shard",
        &[
            ("IDUTIL_CHILD_SHARD", shard.to_string()),
            ("IDUTIL_CHILD_DIR", dir.display().to_string()),
            ("IDUTIL_CHILD_N", n.to_string()),
            ("IDUTIL_CHILD_TIME", time.to_string()),
        ],
    );
    let (ids, _reader) = harness::read_until_ready(child.stdout.take().unwrap());
    assert_eq!(ids.len() as u64, n);
    harness::sigkill(&mut child);
    ids
}

#[test]
fn crash_resumes_after_the_reserved_high_water() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let printed = crashed_child(dir.path(), 6, 500, T);
    ledger.record(&printed);
    let s = on_disk(dir.path(), 6);
    assert_eq!(
        s.last, None,
        "a killed generator leaves no clean-close record"
    );
    let high_water = mark(&s, 0);
    assert!(
        high_water >= T + DEFAULT_WINDOW.as_secs(),
        "reserved a window ahead"
    );

    // Same second as the crash: the restart must not reuse the reserved
    // but unprinted seconds either.
    let clock = ManualClock::new(T);
    let g = open_at(dir.path(), 6, &clock);
    assert_eq!(g.clock_id(), 0, "no rollback, no bump");
    let ids = issue(&g, 100);
    assert_eq!(Id::from_u64(ids[0]).unwrap().unix_seconds(), high_water + 1);
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

#[test]
fn rollback_across_a_crash_bumps_the_clock_id() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&crashed_child(dir.path(), 7, 300, T));
    let high_water = mark(&on_disk(dir.path(), 7), 0);

    let clock = ManualClock::new(T - 3600);
    let g = open_at(dir.path(), 7, &clock);
    assert_eq!(g.clock_id(), 1);
    assert_eq!(on_disk(dir.path(), 7).clock_id, 1);
    let ids = issue(&g, 300);
    assert!(Id::from_u64(ids[0]).unwrap().unix_seconds() > high_water);
    ledger.record_after_all(&ids);
    g.close().unwrap();

    // And again, killed on the rolled-back clock, restarted further back.
    ledger.record_after_all(&crashed_child(dir.path(), 7, 300, T - 3600));
    let high_water = mark(&on_disk(dir.path(), 7), 0);
    let clock = ManualClock::new(T - 7200);
    let g = open_at(dir.path(), 7, &clock);
    assert_eq!(g.clock_id(), 2);
    let ids = issue(&g, 300);
    assert!(Id::from_u64(ids[0]).unwrap().unix_seconds() > high_water);
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

/// IDs of a clock-bits layout: every one decodes to `clock_value` and is
/// new.
fn record_clocked(ledger: &mut Ledger, ids: &[u64], clock_value: u32) {
    for &id in ids {
        let p = CLOCKED.decode(Id::from_u64(id).unwrap()).unwrap();
        assert_eq!(p.clock, clock_value, "clock value of {id}");
    }
    ledger.record(ids);
    ledger.assert_unique();
}

fn clocked_second(id: u64) -> u64 {
    CLOCKED.decode(Id::from_u64(id).unwrap()).unwrap().seconds + CLOCKED.epoch()
}

#[test]
fn clock_bits_rollback_moves_to_a_fresh_clock_value_on_real_time() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let mut ledger = Ledger::new();

    let g = open_layout_at(dir.path(), 2, CLOCKED, &clock);
    assert_eq!(g.clock_value(), 0);
    record_clocked(&mut ledger, &issue(&g, 2000), 0);
    g.close().unwrap();

    clock.rewind(3600);
    let g = open_layout_at(dir.path(), 2, CLOCKED, &clock);
    assert_eq!((g.clock_id(), g.clock_value()), (1, 1));
    let ids = issue(&g, 2000);
    record_clocked(&mut ledger, &ids, 1);
    // On real time, not after the old mark.
    assert_eq!(clocked_second(ids[0]), T - 3600);
    g.close().unwrap();
    let s = on_disk(dir.path(), 2);
    assert_eq!(s.clock_id, 1);
    assert!(mark(&s, 0) >= T, "the old value's mark is kept");
    assert!(mark(&s, 1) < T, "the new value's mark follows its own time");
}

#[test]
fn clock_bits_repeated_rollbacks_cycle_through_values() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let mut expected_value = 0;
    let mut expected_id = 0;
    // Each round: the clock jumps forward (same value, real time), then
    // goes back an hour across a restart (next value, real time). Nine
    // rollbacks cycle through the four values twice and a bit.
    for round in 0..9u64 {
        let forward = T + round * 10_000;
        let clock = ManualClock::new(forward);
        let g = open_layout_at(dir.path(), 9, CLOCKED, &clock);
        assert_eq!(g.clock_value(), expected_value, "round {round} forward");
        assert_eq!(g.clock_id(), expected_id);
        let ids = issue(&g, 500);
        assert_eq!(clocked_second(ids[0]), forward);
        record_clocked(&mut ledger, &ids, expected_value);
        g.close().unwrap();

        clock.rewind(3600);
        let g = open_layout_at(dir.path(), 9, CLOCKED, &clock);
        expected_value = (expected_value + 1) % 4;
        expected_id += 1;
        assert_eq!(g.clock_value(), expected_value, "round {round} rollback");
        assert_eq!(g.clock_id(), expected_id);
        let ids = issue(&g, 500);
        assert_eq!(clocked_second(ids[0]), forward - 3600, "runs on real time");
        record_clocked(&mut ledger, &ids, expected_value);
        g.close().unwrap();
        assert_eq!(on_disk(dir.path(), 9).clock_id, expected_id);
    }
    assert_eq!(expected_id, 9);
}

#[test]
fn clock_bits_with_every_mark_ahead_resume_after_the_lowest() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let clock = ManualClock::new(T);
    let run = |at: u64, value: u32, ledger: &mut Ledger| {
        clock.set(at);
        let g = open_layout_at(dir.path(), 11, CLOCKED, &clock);
        assert_eq!(g.clock_value(), value, "at {at}");
        let ids = issue(&g, 300);
        record_clocked(ledger, &ids, value);
        g.close().unwrap();
        ids
    };
    // Marks end up: value 0 at T+5, 1 at T+105, 2 at T-7195, 3 at T+205.
    run(T, 0, &mut ledger);
    run(T - 3600, 1, &mut ledger);
    run(T + 100, 1, &mut ledger);
    run(T - 7200, 2, &mut ledger);
    run(T - 10_800, 3, &mut ledger);
    run(T + 200, 3, &mut ledger);
    let before = on_disk(dir.path(), 11);
    let lowest = (0..4).min_by_key(|&c| mark(&before, c)).unwrap();
    assert_eq!(lowest, 2);
    let value2_max = ledger
        .ids()
        .iter()
        .copied()
        .filter(|&id| CLOCKED.decode(Id::from_u64(id).unwrap()).unwrap().clock == 2)
        .max()
        .unwrap();

    // Far back: every value's mark is ahead of the clock.
    let far = T - 20_000;
    assert!((0..4).all(|c| mark(&before, c) > far));
    clock.set(far);
    let g = open_layout_at(dir.path(), 11, CLOCKED, &clock);
    assert_eq!(g.clock_value(), 2, "the value with the lowest mark");
    assert_eq!(g.clock_id(), before.clock_id + 3);
    let ids = issue(&g, 300);
    assert_eq!(clocked_second(ids[0]), mark(&before, 2) + 1);
    // Within clock value 2, strictly after everything it issued before.
    assert!(ids[0] > value2_max);
    record_clocked(&mut ledger, &ids, 2);
    g.close().unwrap();
    ledger.assert_unique();
}

#[test]
fn a_second_generator_for_a_shard_in_one_process_is_refused() {
    let dir = harness::state_dir();
    let first = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(5)
        .state_dir(dir.path())
        .open()
        .unwrap();
    let a = first.next_id().unwrap();

    // In the same ID space the per-host lock refuses it first.
    let err = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(5)
        .state_dir(dir.path())
        .open()
        .expect_err("the shard is taken on this host");
    assert!(
        matches!(&err, Error::HostLocked { shard: 5, pid: Some(p), .. } if *p == std::process::id()),
        "{err:?}"
    );
    // In another ID space, the directory's lock does.
    let err = Generator::builder()
        .id_space(format!("{}-other", harness::space_for(dir.path())))
        .shard(5)
        .state_dir(dir.path())
        .open()
        .expect_err("the shard is taken in the directory");
    match &err {
        Error::Locked {
            shard, dir: d, pid, ..
        } => {
            assert_eq!(*shard, 5);
            assert_eq!(d, dir.path());
            assert_eq!(*pid, Some(std::process::id()));
        }
        other => panic!("expected Error::Locked, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("shard 5"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );

    // Another shard in the same directory is independent.
    let other = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(6)
        .state_dir(dir.path())
        .open()
        .unwrap();
    let c = other.next_id().unwrap();

    // The first still works; once it is closed the shard is free again.
    let b = first.next_id().unwrap();
    first.close().unwrap();
    let again = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(5)
        .state_dir(dir.path())
        .open()
        .unwrap();
    let d = again.next_id().unwrap();
    assert!(a < b && b < d);
    harness::assert_unique_set(&[a, b, c, d].map(Id::as_u64));
}

/// Issues from shard `shard` in `dir` on the system clock: `n` IDs in one
/// batch, then a few more one by one; closes cleanly.
fn issue_system(dir: &Path, shard: u32, n: u64) -> Vec<u64> {
    let g = Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .open()
        .unwrap();
    let mut ids: Vec<u64> = g.next_ids(n).unwrap().map(Id::as_u64).collect();
    ids.extend(issue(&g, 10));
    g.close().unwrap();
    ids
}

fn assert_refused(dir: &Path, shard: u32, damaged: &[u8], kind: Damage) {
    let path = harness::state_file(dir, shard);
    let err = Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .open()
        .expect_err("a damaged state file is refused");
    assert!(
        matches!(
            &err,
            Error::BadState { path: p, shard: s, remedy: Remedy::Recover, .. }
                if *p == path && *s == shard
        ),
        "{kind:?}: {err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{kind:?}: {msg}");
    assert!(
        msg.contains(&format!("Recovering shard {shard}")),
        "{kind:?}: {msg}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "{kind:?}: the damaged file must be left as it was"
    );
}

#[test]
fn damaged_state_is_refused_and_recover_resumes_after_everything() {
    let dir = harness::state_dir();
    for (i, kind) in Damage::ALL.into_iter().enumerate() {
        let shard = 10 + i as u32;
        let mut ledger = Ledger::new();
        // Nearly four seconds' worth: the run borrows into the reservation
        // window, so resuming at the clock would not be enough. (Checked
        // against the clock before the run, as the run itself may take
        // seconds on a loaded machine; the generator's cached second may
        // trail that reading by one.)
        let started = harness::wall_now();
        ledger.record(&issue_system(dir.path(), shard, 250_000));
        let issued_until = harness::unix_second(ledger.max().unwrap());
        assert!(issued_until >= started + 2, "borrowed ahead of the clock");
        let path = harness::state_file(dir.path(), shard);
        let damaged = kind.apply(&path);
        assert_refused(dir.path(), shard, &damaged, kind);
        // Twice: refusing must not have changed anything.
        assert_refused(dir.path(), shard, &damaged, kind);

        let plain = RecoverOptions::new();
        let r = if kind.keeps_the_mark() {
            state::recover(dir.path(), shard, &Layout::DEFAULT, &plain).expect("recover")
        } else {
            // The mark is gone or cannot be trusted: recovery needs a time
            // vouched for, and changes nothing without one.
            let err = state::recover(dir.path(), shard, &Layout::DEFAULT, &plain)
                .expect_err("no certain mark: refused");
            assert!(
                matches!(
                    &err,
                    Error::RecoveryRefused { shard: s, remedy: Some(Remedy::After), .. } if *s == shard
                ),
                "{kind:?}: {err:?}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), damaged, "{kind:?}");
            let vouched = plain.after(issued_until);
            state::recover(dir.path(), shard, &Layout::DEFAULT, &vouched).expect("recover")
        };
        assert_eq!(r.path, path);
        assert!(r.resume_after >= issued_until, "{kind:?}");
        let kept = dir.path().join(format!("shard-{shard}.state.bad"));
        assert_eq!(std::fs::read(kept).unwrap(), damaged, "{kind:?}: copy kept");
        ledger.record_after_all(&issue_system(dir.path(), shard, 100));
        ledger.assert_unique();
    }
}

#[test]
fn a_state_file_for_another_layout_is_refused_both_ways() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let g = open_layout_at(dir.path(), 1, CLOCKED, &clock);
    issue(&g, 10);
    g.close().unwrap();
    let path = harness::state_file(dir.path(), 1);
    let before = std::fs::read(&path).unwrap();
    let err = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(1)
        .state_dir(dir.path())
        .clock(clock.clone())
        .open()
        .expect_err("another layout is refused");
    assert!(matches!(err, Error::BadState { .. }), "{err:?}");
    assert!(err.to_string().contains("Recovering shard 1"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let g = open_at(dir.path(), 2, &clock);
    issue(&g, 10);
    g.close().unwrap();
    let err = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(2)
        .state_dir(dir.path())
        .layout(CLOCKED)
        .clock(clock)
        .open()
        .expect_err("another layout is refused");
    assert!(matches!(err, Error::BadState { .. }), "{err:?}");
}

#[test]
fn recover_resumes_after_a_far_borrow_in_a_damaged_file() {
    let dir = harness::state_dir();

    // A damaged line fails the checksum: no field, the mark included, is
    // certain any more, so a vouched-for time is needed.
    let mut ledger = Ledger::new();
    // The clock before the run (which may take seconds on a loaded
    // machine); the generator's cached second may trail it by one.
    let started = harness::wall_now();
    ledger.record(&issue_system(dir.path(), 1, 3_000_000));
    let far = harness::unix_second(ledger.max().unwrap());
    assert!(far >= started + 44, "borrowed about 45 s ahead");
    let path = harness::state_file(dir.path(), 1);
    Damage::Corrupt.apply(&path);
    let err = state::recover(dir.path(), 1, &Layout::DEFAULT, &RecoverOptions::new())
        .expect_err("a failed checksum leaves nothing certain");
    assert!(err.to_string().contains("checksum"), "{err}");
    let r = state::recover(
        dir.path(),
        1,
        &Layout::DEFAULT,
        &RecoverOptions::new().after(far),
    )
    .unwrap();
    assert!(r.resume_after >= far, "{} < {far}", r.resume_after);
    ledger.record_after_all(&issue_system(dir.path(), 1, 100));

    // A version 1 file (written before files had a checksum) whose
    // high-water line survives the damage: recover resumes after it.
    let mut ledger = Ledger::new();
    ledger.record(&issue_system(dir.path(), 3, 3_000_000));
    let far = harness::unix_second(ledger.max().unwrap());
    let path = harness::state_file(dir.path(), 3);
    let v1: String = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("checksum ="))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("version = 2", "version = 1");
    std::fs::write(&path, v1).unwrap();
    Damage::Corrupt.apply(&path);
    let r = state::recover(dir.path(), 3, &Layout::DEFAULT, &RecoverOptions::new()).unwrap();
    assert!(r.resume_after >= far, "{} < {far}", r.resume_after);
    ledger.record_after_all(&issue_system(dir.path(), 3, 100));

    // The numbers are gone: refused, until `after` covers the borrow.
    let mut ledger = Ledger::new();
    ledger.record(&issue_system(dir.path(), 2, 3_000_000));
    let far = on_disk(dir.path(), 2).high_water[&0];
    Damage::Empty.apply(&harness::state_file(dir.path(), 2));
    assert_refused(dir.path(), 2, b"", Damage::Empty);
    let err = state::recover(dir.path(), 2, &Layout::DEFAULT, &RecoverOptions::new())
        .expect_err("nothing legible: refused");
    assert!(matches!(err, Error::RecoveryRefused { .. }), "{err:?}");
    let options = RecoverOptions::new().after(far);
    state::recover(dir.path(), 2, &Layout::DEFAULT, &options).unwrap();
    ledger.record_after_all(&issue_system(dir.path(), 2, 100));
}

/// Child entry point: see [`harness::hold_shard_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_hold_shard() {
    if harness::is_child() {
        harness::hold_shard_child();
    }
}

/// 2100-01-01T00:00:00Z.
const Y2100: u64 = 4_102_444_800;

/// A generator opened while the clock read 2100 pushed the shard there;
/// the clock comes back. A recovery that vouches for the skipped interval
/// brings the shard back to the real time, and when the shard reaches
/// 2100 again (by borrowing, or by the clock) it passes over every second
/// issued there: nothing is issued twice.
#[test]
fn a_shard_pushed_ahead_by_a_wrong_clock_comes_back_and_passes_over_what_it_issued() {
    let dir = tempfile::tempdir().unwrap();
    let now = harness::wall_now();
    let clock = ManualClock::new(now);
    let open = |clock: &ManualClock| {
        Generator::builder()
            .id_space(harness::space_for(dir.path()))
            .shard(4)
            .state_dir(dir.path())
            .clock(clock.clone())
            .max_clock_step(None)
            .open()
            .expect("open the generator")
    };
    let mut ledger = Ledger::new();
    let g = open(&clock);
    ledger.record(&issue(&g, 1000));
    drop(g);
    // Opened at a wrong clock: nothing to compare it with, so it starts
    // there, and 200,000 IDs borrow a few seconds past it.
    clock.set(Y2100);
    let g = open(&clock);
    let far: Vec<u64> = g.next_ids(200_000).unwrap().map(|id| id.as_u64()).collect();
    ledger.record_after_all(&far);
    drop(g);
    let far_end = harness::unix_second(*far.last().unwrap());
    clock.set(now + 10);
    let g = open(&clock);
    let shifted = issue(&g, 10);
    assert!(harness::unix_second(shifted[0]) >= far_end, "still in 2100");
    ledger.record_after_all(&shifted);
    drop(g);

    // Vouched: nothing of the shard between an hour from now and 2100.
    let options = RecoverOptions::new().unused(now + 3600, Y2100);
    let r = state::recover(dir.path(), 4, &Layout::DEFAULT, &options).unwrap();
    let (first, last) = r.skip.expect("the far-ahead seconds are recorded");
    assert_eq!(first, Y2100);
    assert!(last > far_end, "{last} covers every ID issued there");
    assert!(r.resume_after < now + 3600, "{}", r.resume_after);
    assert!(std::fs::read_to_string(harness::state_file(dir.path(), 4))
        .unwrap()
        .contains("version = 3"));
    // A vouched interval that holds a mark is refused.
    let wrong = RecoverOptions::new().unused(now, Y2100 + 10);
    assert!(matches!(
        state::plan_recovery(dir.path(), 4, &Layout::DEFAULT, &wrong),
        Err(Error::RecoveryRefused { .. })
    ));

    // Back on real time.
    clock.set(now + 20);
    let g = open(&clock);
    let back = issue(&g, 1000);
    assert!(
        harness::unix_second(back[0]) < now + 60,
        "back to the real time"
    );
    ledger.record(&back);
    // Borrowed up to 2100 (the clock jumps there for good): the seconds
    // issued there are passed over. (One by one: a batch is consecutive,
    // so one that would cross them starts past them.)
    clock.set(Y2100 - 1);
    let across = issue(&g, 70_000);
    assert!(harness::unix_second(across[0]) == Y2100 - 1);
    assert!(harness::unix_second(*across.last().unwrap()) > last);
    ledger.record(&across);
    drop(g);
    // The state file no longer needs its line.
    assert_eq!(on_disk(dir.path(), 4).skip, None);
    ledger.record_after_all(&issue(&open(&clock), 1000));
    ledger.assert_unique();
}

/// A generator that opens with the clock already past the first skipped
/// second starts after the last.
#[test]
fn a_generator_opening_inside_the_skipped_seconds_starts_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let now = harness::wall_now();
    let clock = ManualClock::new(Y2100);
    let open = |clock: &ManualClock| {
        Generator::builder()
            .id_space(harness::space_for(dir.path()))
            .shard(6)
            .state_dir(dir.path())
            .clock(clock.clone())
            .max_clock_step(None)
            .open()
            .expect("open the generator")
    };
    let mut ledger = Ledger::new();
    ledger.record(&issue(&open(&clock), 100_000));
    let options = RecoverOptions::new().unused(now + 3600, Y2100);
    let r = state::recover(dir.path(), 6, &Layout::DEFAULT, &options).unwrap();
    let (_, last) = r.skip.unwrap();
    clock.set(Y2100 + 1);
    let ids = issue(&open(&clock), 1000);
    assert!(harness::unix_second(ids[0]) > last);
    ledger.record_after_all(&ids);
}
