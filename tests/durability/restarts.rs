//! Clean restarts and crashes, with and without the clock rolled back.

use idutil_harness as harness;

use std::path::Path;

use idutil::{Id, Layout, ManualClock, DEFAULT_WINDOW};
use idutil_harness::{on_disk, Ledger};

use crate::{issue, mark, open_at, T};

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

/// After a crash, and a restart of the host (the claim file names
/// another boot), the next generator starts after the reserved
/// high-water second: nothing says how far the killed one drew.
#[test]
fn crash_resumes_after_the_reserved_high_water() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let printed = crashed_child(dir.path(), 6, 500, T);
    ledger.record(&printed);
    let claim = dir.path().join("shard-6.claim");
    let text = std::fs::read_to_string(&claim).unwrap();
    let rebooted: String = text
        .lines()
        .map(|line| match line.strip_prefix("boot ") {
            Some(_) => "boot 00000000-0000-0000-0000-000000000000\n".to_string(),
            None => format!("{line}\n"),
        })
        .collect();
    assert_ne!(text, rebooted, "the claim file names its boot");
    std::fs::write(&claim, rebooted).unwrap();
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

/// After a crash in the same boot, the next generator continues where
/// the killed one's blocks ended, as the claim file says, not after the
/// reserved high-water second a window ahead: nothing it drew comes
/// again, and the IDs stay with the clock.
#[test]
fn crash_in_the_same_boot_resumes_where_the_blocks_ended() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let printed = crashed_child(dir.path(), 7, 500, T);
    ledger.record(&printed);
    let s = on_disk(dir.path(), 7);
    assert_eq!(s.last, None);
    assert!(mark(&s, 0) >= T + DEFAULT_WINDOW.as_secs());
    let claim = std::fs::read_to_string(dir.path().join("shard-7.claim")).unwrap();
    let next: u64 = claim
        .lines()
        .find_map(|line| line.strip_prefix("next "))
        .and_then(|n| n.parse().ok())
        .expect("the claim file says where the blocks end");

    let clock = ManualClock::new(T);
    let g = open_at(dir.path(), 7, &clock);
    let ids = issue(&g, 100);
    let first = Id::from_u64(ids[0]).unwrap();
    assert_eq!(first.unix_seconds(), T, "at the clock, not after the mark");
    let parts = first.parts();
    assert_eq!((parts.seconds << 16) | u64::from(parts.sequence), next);
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
