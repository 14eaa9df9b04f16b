//! Generators of one process sharing a shard through its claim file, and
//! what happens when that file is damaged or removed under them: the
//! members must never hand out one counter value twice.

use idutil_harness as harness;

use std::path::Path;

use idutil::{Generator, ManualClock};

use crate::{open_at, T};

/// The shard's claim file in `dir`.
fn claim_file(dir: &Path, shard: u32) -> std::path::PathBuf {
    dir.join(format!("shard-{shard}.claim"))
}

/// What `g` issues in one batch of `n`: empty if refused.
fn batch(g: &Generator<ManualClock>, n: u64) -> Vec<u64> {
    match g.next_ids(n) {
        Ok(ids) => ids.map(|id| id.as_u64()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Panics naming the first ID of `b` that is also in `a`.
fn assert_disjoint(a: &[u64], b: &[u64], what: &str) {
    let mut seen = harness::Tally::new();
    seen.add(a.iter().copied(), "a");
    let repeated = seen.count_duplicates(b.iter().copied(), "b");
    assert_eq!(repeated, 0, "{what}: {repeated} IDs issued twice");
}

/// A member killed between writing the claim file in place and cutting it
/// to its new length leaves the old text's tail behind (here a line `9`,
/// the end of a longer pid): the claim can no longer be read. The next
/// draw must still start after every block any member drew, however far
/// ahead of the drawing member's own reservation those blocks reach.
#[test]
fn a_claim_file_left_garbled_never_hands_out_a_block_twice() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let first = open_at(dir.path(), 6, &clock);
    let second = open_at(dir.path(), 6, &clock);
    // Thirty seconds of the shard in one batch: a block far past what the
    // second member has reserved.
    let big = batch(&first, 65_536 * 30);
    assert_eq!(big.len(), 65_536 * 30, "the first member's batch");
    let claim = claim_file(dir.path(), 6);
    let mut text = std::fs::read(&claim).unwrap();
    text.extend_from_slice(b"9\n");
    std::fs::write(&claim, text).unwrap();
    let small = batch(&second, 1_000);
    assert_disjoint(&big, &small, "after the claim file was garbled");
}

/// The claim file removed while members run (a cleanup of "lock files"):
/// a process that joins then creates a new one. Its draws and those of
/// the members that still hold the removed file must never overlap.
#[test]
fn a_claim_file_removed_under_its_members_never_splits_the_counter() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let first = open_at(dir.path(), 7, &clock);
    let mut before = batch(&first, 65_536 * 3);
    std::fs::remove_file(claim_file(dir.path(), 7)).unwrap();
    let joined = open_at(dir.path(), 7, &clock);
    let mut after = Vec::new();
    for second in 1..40 {
        clock.set(T + second);
        before.extend(batch(&first, 65_536 / 2));
        after.extend(batch(&joined, 65_536 / 2));
    }
    assert!(!after.is_empty(), "the joined member issued nothing");
    assert_disjoint(&before, &after, "after the claim file was removed");
    // A member that stopped keeps its shard until the clock passes what
    // it reserved: let the clock get there.
    clock.set(T + 600);
}

/// The counter value of an ID in the default layout: seconds and sequence.
fn counter(id: u64) -> u64 {
    id >> 5
}

/// A member sizes its blocks by the IDs it issued itself. After jumping
/// over another member's thirty seconds of the shard, a member that then
/// issues a hundred IDs one by one draws small blocks, so a third member's
/// first ID follows close after them, not thirty seconds further on (a
/// jump over the others' blocks once counted as issuing).
#[test]
fn a_member_sizes_its_blocks_by_its_own_ids_not_the_others_blocks() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let busy = open_at(dir.path(), 8, &clock);
    let quiet = open_at(dir.path(), 8, &clock);
    let big = batch(&busy, 65_536 * 30);
    assert_eq!(big.len(), 65_536 * 30);
    let small: Vec<u64> = (0..100)
        .map(|_| quiet.next_id().unwrap().as_u64())
        .collect();
    assert!(small.windows(2).all(|w| w[0] < w[1]));
    assert!(counter(small[0]) > counter(*big.last().unwrap()));
    let third = open_at(dir.path(), 8, &clock);
    let next = third.next_id().unwrap().as_u64();
    let gap = counter(next) - counter(*small.last().unwrap());
    assert!(
        gap <= 128,
        "the third member's first ID is {gap} counter values past the quiet member's last"
    );
}

/// A process that says how many IDs it will issue draws that many and no
/// more: the next member's first ID follows right after them.
#[test]
fn a_member_that_expects_n_ids_draws_n() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let short = harness::builder(dir.path())
        .shard(9)
        .clock(clock.clone())
        .expected_ids(5)
        .open()
        .unwrap();
    let other = open_at(dir.path(), 9, &clock);
    let five = batch(&short, 5);
    assert_eq!(five.len(), 5);
    let next = other.next_id().unwrap().as_u64();
    assert_eq!(
        counter(next),
        counter(five[4]) + 1,
        "the next member starts right after the five"
    );
}

/// A generator on `shard` in `dir` at `clock` that follows a forward step
/// of over 100 s only once it has held for 2 s.
fn open_stepping(dir: &Path, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    harness::builder(dir)
        .shard(shard)
        .clock(clock.clone())
        .max_clock_step(Some(std::time::Duration::from_secs(100)))
        .clock_step_confirm(std::time::Duration::from_secs(2))
        .open()
        .expect("open the generator")
}

/// Processes that open under a clock far ahead of the time the processes
/// sharing the shard keep issue at that time, each of them however short
/// its life, until the step has held for the confirmation time since the
/// first of them saw it; then they follow it.
#[test]
fn a_far_clock_at_open_is_held_back_until_its_step_has_held() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let first = open_stepping(dir.path(), 12, &clock);
    let before = batch(&first, 10);
    drop(first);
    let far = ManualClock::new(T + 1000);
    let held = open_stepping(dir.path(), 12, &far);
    let during = batch(&held, 10);
    drop(held);
    assert_eq!(during.len(), 10);
    assert!(during[0] > *before.last().unwrap());
    let second = harness::unix_second(during[9]);
    assert!(
        second < T + 10,
        "a step not confirmed yet is not followed: an ID in second {} ({} s past T)",
        second,
        second - T
    );
    std::thread::sleep(std::time::Duration::from_millis(2200));
    let far = ManualClock::new(T + 1002);
    let followed = open_stepping(dir.path(), 12, &far);
    let after = batch(&followed, 10);
    assert_eq!(after.len(), 10);
    assert!(
        harness::unix_second(after[0]) >= T + 1002,
        "a step that held for the confirmation time is followed"
    );
    assert!(after[0] > *during.last().unwrap());
}

/// An older copy of the claim file put back in place while members run
/// (a careless `cp` over it: the same file, its old text): the member
/// that drew long before the copy was taken draws next, and must not hand
/// out what another member drew after it was taken; nor may that member.
#[test]
fn an_older_claim_file_copied_back_in_place_never_hands_out_a_block_twice() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let a = open_at(dir.path(), 8, &clock);
    let b = open_at(dir.path(), 8, &clock);
    let mut from_a = batch(&a, 1_000);
    assert_eq!(from_a.len(), 1_000, "the first member's batch");
    let claim = claim_file(dir.path(), 8);
    let copy = std::fs::read(&claim).unwrap();
    let mut from_b = batch(&b, 1_000);
    assert_eq!(from_b.len(), 1_000, "the second member's batch");
    // In place: the same inode, its old text.
    std::fs::write(&claim, &copy).unwrap();
    from_a.extend(batch(&a, 2_000));
    assert_disjoint(&from_b, &from_a, "the member that drew before the copy");
    from_b.extend(batch(&b, 2_000));
    assert_disjoint(&from_a, &from_b, "the member that drew after the copy");
    let c = open_at(dir.path(), 8, &clock);
    let from_c = batch(&c, 2_000);
    assert_disjoint(&[from_a, from_b].concat(), &from_c, "a member that joins");
}

/// The claim file and the lock file put back together, both older
/// copies (a directory restored but for the state file): a member that
/// drew after the copies were taken knows that much, and must not hand out
/// what another member drew after it; nor may a member that joins.
#[test]
fn an_older_claim_file_and_lock_file_put_back_together_are_caught_by_a_later_drawer() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let a = open_at(dir.path(), 9, &clock);
    let b = open_at(dir.path(), 9, &clock);
    let mut from_a = batch(&a, 1_000);
    let claim = claim_file(dir.path(), 9);
    let lock = dir.path().join("shard-9.lock");
    let (claim_copy, lock_copy) = (
        std::fs::read(&claim).unwrap(),
        std::fs::read(&lock).unwrap(),
    );
    let mut from_b = batch(&b, 1_000);
    assert_eq!(from_b.len(), 1_000, "the second member's batch");
    // The first member draws after the second, above it.
    from_a.extend(batch(&a, 1_000));
    std::fs::write(&claim, &claim_copy).unwrap();
    std::fs::write(&lock, &lock_copy).unwrap();
    from_b.extend(batch(&b, 2_000));
    assert_disjoint(&from_a, &from_b, "the member that drew after the copies");
    let c = open_at(dir.path(), 9, &clock);
    let from_c = batch(&c, 2_000);
    assert_disjoint(&[from_a, from_b].concat(), &from_c, "a member that joins");
}

/// An older copy of the state file put back in place, its mark still the
/// current one (the run in between stayed within what was reserved):
/// its exact last ID is older than what was issued since, and the next
/// run must still start after everything the members drew.
#[test]
fn an_older_state_file_with_the_current_mark_put_back_never_repeats_an_id() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let state = dir.path().join("shard-13.state");
    let first = open_at(dir.path(), 13, &clock);
    // Thirty seconds borrowed: the runs after it stay within the mark.
    assert_eq!(batch(&first, 65_536 * 30).len(), 65_536 * 30);
    drop(first);
    let copy = std::fs::read(&state).unwrap();
    // A window of a second: the next runs reserve within the first's mark.
    let open_small = || {
        harness::builder(dir.path())
            .shard(13)
            .clock(clock.clone())
            .window(std::time::Duration::from_secs(1))
            .open()
            .expect("open the generator")
    };
    let second = open_small();
    let between = batch(&second, 1000);
    assert_eq!(between.len(), 1000);
    drop(second);
    std::fs::write(&state, copy).unwrap();
    let third = open_small();
    let after = batch(&third, 1000);
    assert_eq!(after.len(), 1000, "the third run issues");
    assert_disjoint(&between, &after, "after the older state file was put back");
}

/// The members' time in the claim file (`clock SECOND BOOT_MS`), read
/// back as its second.
fn recorded_time(dir: &Path, shard: u32) -> u64 {
    let text = std::fs::read_to_string(claim_file(dir, shard)).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("clock "))
        .expect("a clock line");
    line.split(' ').next().unwrap().parse().unwrap()
}

/// A process whose clock is a day behind the others' opens the shard in
/// between: the time the processes record never goes back with it, so the
/// processes after it, on the right clock, are not judged a day ahead.
#[test]
fn a_process_with_a_slow_clock_does_not_become_the_others_time() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let first = open_stepping(dir.path(), 14, &clock);
    batch(&first, 10);
    drop(first);
    let slow = ManualClock::new(T - 90_000);
    let behind = open_stepping(dir.path(), 14, &slow);
    assert_eq!(batch(&behind, 10).len(), 10);
    drop(behind);
    assert!(
        recorded_time(dir.path(), 14) >= T,
        "the recorded time went back to {}",
        recorded_time(dir.path(), 14)
    );
}
