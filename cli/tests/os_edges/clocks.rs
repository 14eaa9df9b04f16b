//! Clocks at and past the end of the range, and a shard pushed to 2100.

use idutil_harness as harness;

use std::fs;

use idutil_harness::Ledger;

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
        let r = harness::next_under_faketime(&faketime, "@2136-02-07 06:28:10", 4, dir.path())
            .expect_code(1, "a clock in the end margin");
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert!(r.stderr.contains("clock"), "{}", r.stderr);
        assert_eq!(
            fs::read(harness::state_file(dir.path(), 4)).unwrap(),
            before
        );
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
    let r = harness::next_under_faketime(&faketime, "@2136-02-07 06:28:16", 5, &dir)
        .expect_code(1, "a clock past the range");
    assert!(r.stderr.contains("clock"), "{}", r.stderr);
    assert!(!dir.exists(), "the state directory was created");
    assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0);
}

/// The clock reads 2100 when the command opens the shard (a run has no
/// earlier reading of its own to compare with, and nothing ran on the
/// shard before it in this boot) and comes back: the shard
/// stays in 2100 until `state recover --unused-from --unused-to` brings it
/// back, after which it issues at the real time again and nothing is
/// issued twice.
#[test]
fn a_shard_pushed_to_2100_when_it_opened_comes_back_with_recover() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    const Y2100: u64 = 4_102_444_800;
    // The first run in this directory: nothing recorded in this boot to
    // judge its clock by (see the test below), so it follows it.
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let r = harness::next_under_faketime(&faketime, "@2100-01-01 00:00:00", 8, dir.path())
        .expect_code(0, "next while the clock reads 2100");
    ledger.record_after_all(&harness::parse_ids(&r.stdout));
    let shifted = harness::next(8, dir.path(), 10);
    assert!(harness::unix_second(shifted[0]) >= Y2100, "still in 2100");
    ledger.record_after_all(&shifted);
    let now = harness::wall_now();
    let r = harness::run(harness::idutil(8, dir.path()).args([
        "state",
        "recover",
        "--unused-from",
        &(now + 3600).to_string(),
        "--unused-to",
        "2100-01-01T00:00:00Z",
    ]))
    .expect_code(0, "recover from 2100");
    assert!(
        r.stdout.contains("passed over: 2100-01-01T00:00:00Z"),
        "{}",
        r.stdout
    );
    let back = harness::next(8, dir.path(), 1000);
    assert!(
        harness::unix_second(back[0]) < now + 120,
        "back to the real time"
    );
    ledger.record(&back);
    ledger.assert_unique();
}

/// The clock reads 2100 when a command opens a shard that processes used
/// earlier in this boot: it is far ahead of the time they recorded, so the
/// command issues at their time, says why, and the shard stays where it
/// was.
#[test]
fn a_command_under_a_clock_in_2100_after_others_in_this_boot_stays_at_their_time() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(8, dir.path(), 1000));
    let r = harness::next_under_faketime(&faketime, "@2100-01-01 00:00:00", 8, dir.path())
        .expect_code(0, "next while the clock reads 2100");
    assert!(
        r.stderr
            .contains("ahead of the time the processes sharing shard 8 keep"),
        "{}",
        r.stderr
    );
    let held = harness::parse_ids(&r.stdout);
    ledger.record_after_all(&held);
    let after = harness::next(8, dir.path(), 10);
    ledger.record_after_all(&after);
    let now = harness::wall_now();
    for id in held.iter().chain(&after) {
        assert!(
            harness::unix_second(*id) < now + 120,
            "{id} is not at the real time"
        );
    }
}
