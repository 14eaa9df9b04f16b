//! SIGKILL at random moments, mid-output, and right after a large borrow.

use idutil_harness as harness;

use std::path::Path;
use std::thread;
use std::time::Duration;

use idutil::state;
use idutil_harness::{on_disk, unix_second, Ledger, Rng};

use crate::child_env;

/// After a kill: the state file must cover everything printed, and say
/// nothing was closed cleanly. Returns its high-water second.
fn check_after_kill(dir: &Path, shard: u32, ledger: &Ledger, round: usize) -> Option<u64> {
    let s = state::inspect(dir, shard).unwrap().state?;
    assert_eq!(
        s.last, None,
        "round {round}: killed, yet a clean close is recorded"
    );
    let mark = s.high_water[&0];
    if let Some(max) = ledger.max() {
        assert!(
            unix_second(max) <= mark,
            "round {round}: ID {max} was issued past the durable high-water {mark}"
        );
    }
    Some(mark)
}

#[test]
fn sigkill_at_random_moments_never_repeats() {
    let dir = harness::state_dir();
    let shard = 3;
    let mut rng = Rng::from_env_or_time("sigkill_at_random_moments_never_repeats");
    let mut ledger = Ledger::new();
    let mut crash_mark: Option<u64> = None;
    let mut rounds_with_output = 0;
    for round in 0..20 {
        let mut env = child_env(shard, dir.path());
        env.push(("IDUTIL_CHILD_WINDOW", "1".into()));
        if round % 2 == 1 {
            // Borrow fast: the reservation is extended again and again, so
            // kills land while it is being written.
            env.push(("IDUTIL_CHILD_BATCH", rng.range(1, 100_000).to_string()));
        }
        let mut child = harness::spawn_child("child_issue_until_killed", &env);
        let stdout = child.stdout.take().unwrap();
        let (mut ids, reader) = if rng.range(0, 4) == 0 {
            // Any moment from the start, opening included.
            let reader = thread::spawn(move || harness::read_rest(stdout));
            thread::sleep(Duration::from_millis(rng.range(0, 60)));
            (Vec::new(), reader)
        } else {
            // A moment while it issues (once it does: on a loaded machine
            // getting there may take longer than the pause).
            let (first, rest) = harness::read_until_issuing(stdout);
            let reader = thread::spawn(move || harness::read_rest(rest));
            thread::sleep(Duration::from_millis(rng.range(0, 150)));
            (first, reader)
        };
        harness::sigkill(&mut child);
        ids.extend(harness::child_ids(&reader.join().unwrap()).0);
        if let (Some(mark), Some(&first)) = (crash_mark, ids.first()) {
            assert!(
                unix_second(first) > mark,
                "round {round}: after a crash the first ID ({first}, second {}) must be \
                 past the reserved high-water {mark}",
                unix_second(first)
            );
        }
        ledger.record_after_all(&ids);
        rounds_with_output += usize::from(!ids.is_empty());
        crash_mark = check_after_kill(dir.path(), shard, &ledger, round).or(crash_mark);
    }
    // The command on the same shard takes over.
    let ids = harness::next(shard, dir.path(), 100);
    assert!(unix_second(ids[0]) > crash_mark.expect("some round wrote state"));
    ledger.record_after_all(&ids);
    assert!(
        rounds_with_output >= 5,
        "only {rounds_with_output} of 20 rounds printed IDs before the kill"
    );
    eprintln!("{} IDs over 20 killed children", ledger.ids().len());
    ledger.assert_unique();
}

#[test]
fn sigkill_mid_output_of_a_huge_batch_never_repeats() {
    let dir = harness::state_dir();
    let shard = 4;
    let n = 20_000_000;
    let mut rng = Rng::from_env_or_time("sigkill_mid_output_of_a_huge_batch_never_repeats");
    let mut ledger = Ledger::new();
    let mut crash_mark = None;
    for round in 0..3 {
        let mut child = harness::spawn_next(shard, dir.path(), n);
        let ids = harness::kill_after_lines(&mut child, rng.range(1, 50_000));
        assert!(!ids.is_empty());
        if let Some(mark) = crash_mark {
            assert!(unix_second(ids[0]) > mark, "round {round}");
        }
        ledger.record_after_all(&ids);
        let mark = check_after_kill(dir.path(), shard, &ledger, round).unwrap();
        crash_mark = Some(mark);
    }
    let ids = harness::next(shard, dir.path(), 100);
    assert!(unix_second(ids[0]) > crash_mark.unwrap());
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

#[test]
fn a_crash_right_after_a_large_borrow_resumes_after_the_reservation() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let mut child = harness::spawn_next(5, dir.path(), 3_000_000);
    let printed = harness::kill_after_lines(&mut child, 1);
    ledger.record(&printed);
    let s = on_disk(dir.path(), 5);
    assert_eq!(s.last, None);
    let mark = s.high_water[&0];
    assert!(mark >= unix_second(*printed.last().unwrap()));

    let again = harness::next(5, dir.path(), 10);
    assert!(
        unix_second(again[0]) > mark,
        "must not reuse the reservation"
    );
    ledger.record_after_all(&again);
}
