//! Layouts with clock bits: rollbacks move to a fresh clock value.

use idutil_harness as harness;

use idutil::{Id, ManualClock};
use idutil_harness::{on_disk, Ledger};

use crate::{issue, mark, open_layout_at, CLOCKED, T};

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
