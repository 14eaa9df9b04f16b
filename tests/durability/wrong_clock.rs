//! A shard pushed ahead by a wrong clock, and the seconds it skipped.

use idutil_harness as harness;

use std::path::Path;

use idutil::state::{self, RecoverOptions};
use idutil::{Error, Generator, Layout, ManualClock};
use idutil_harness::{on_disk, Ledger};

use crate::issue;

/// 2100-01-01T00:00:00Z.
const Y2100: u64 = 4_102_444_800;

/// A generator on `shard` in `dir` on `clock`, which may step any distance.
fn open_unlimited(dir: &Path, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    harness::builder(dir)
        .shard(shard)
        .clock(clock.clone())
        .max_clock_step(None)
        .open()
        .expect("open the generator")
}

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
    let open = |clock: &ManualClock| open_unlimited(dir.path(), 4, clock);
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
    let open = |clock: &ManualClock| open_unlimited(dir.path(), 6, clock);
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
