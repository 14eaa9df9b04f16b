//! Restarts of the command, fast, after far borrows, and across a clock rolled back.

use idutil_harness as harness;

use std::path::Path;

use idutil_harness::{idutil, on_disk, parts, run, unix_second, wall_now, Ledger};

/// The counter step between consecutive IDs of one shard.
const STEP: u64 = 1 << 5;

/// The ID right after `id` from the same generator (default layout).
fn successor(id: u64) -> u64 {
    if parts(id).sequence < u32::from(u16::MAX) {
        id + STEP
    } else {
        let p = parts(id);
        idutil::Layout::DEFAULT
            .encode(idutil::Parts {
                seconds: p.seconds + 1,
                sequence: 0,
                ..p
            })
            .unwrap()
            .as_u64()
    }
}

#[test]
fn hundreds_of_fast_restarts_continue_right_after_the_last_id() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let mut prev_last: Option<u64> = None;
    let mut same_second = 0;
    // At least 300 restarts, and as many more as it takes (on a loaded
    // machine a restart can take a good part of a second) for 100 of them
    // to land in the second their predecessor ended in.
    let mut round = 0;
    while round < 300 || same_second < 100 {
        assert!(
            round < 3000,
            "only {same_second} of {round} restarts landed in the same second"
        );
        let ids = harness::next(1, dir.path(), 50);
        let after = wall_now();
        if let Some(last) = prev_last {
            let (first_s, last_s) = (unix_second(ids[0]), unix_second(last));
            if first_s == last_s {
                // A clean close records the exact last ID: the next run
                // continues with the next sequence number.
                assert_eq!(ids[0], successor(last), "round {round}");
                same_second += 1;
            } else {
                // A new second: its first sequence number, and no jump of a
                // reservation window past the clock.
                assert!(first_s > last_s, "round {round}");
                assert_eq!(parts(ids[0]).sequence, 0, "round {round}");
                assert!(
                    first_s <= after,
                    "round {round}: {first_s} is ahead of the clock ({after})"
                );
            }
        }
        ledger.record_after_all(&ids);
        prev_last = ids.last().copied();
        round += 1;
    }
    ledger.assert_unique();
}

#[test]
fn a_restart_after_a_far_borrow_continues_after_it() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    // The clock before the run, not after: printing and checking 3,000,000
    // IDs can take seconds on a loaded machine.
    let started = wall_now();
    let ids = harness::next(2, dir.path(), 3_000_000);
    let (first, last) = (ids[0], *ids.last().unwrap());
    drop(ids);
    // 3,000,000 IDs at 65,536 a second: about 45 seconds borrowed. (Measured
    // from before the run: printing and parsing 3,000,000 lines of a debug
    // build on a loaded machine can take several seconds.)
    assert!(unix_second(last) >= unix_second(first) + 45);
    assert!(unix_second(last) >= started + 45);
    assert!(
        unix_second(last) > wall_now(),
        "the borrow runs ahead of the clock"
    );
    ledger.record(&[first, last]);
    assert!(on_disk(dir.path(), 2).high_water[&0] >= unix_second(last));

    let again = harness::next(2, dir.path(), 10);
    assert_eq!(
        again[0],
        successor(last),
        "right after the last borrowed ID"
    );
    ledger.record_after_all(&again);
}

/// `idutil next -n N` with the wall clock an hour back.
fn next_an_hour_ago(faketime: &harness::Faketime, shard: u32, dir: &Path, n: u64) -> harness::Run {
    let mut cmd = faketime.command("-1h", harness::bin());
    cmd.env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir))
        .args(["--shard", &shard.to_string(), "--state-dir"])
        .arg(dir)
        .args(["next", "-n", &n.to_string()]);
    run(&mut cmd).expect_code(0, "idutil next under faketime")
}

#[test]
fn a_clock_rolled_back_an_hour_across_a_restart_bumps_the_clock_id() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let dir = harness::state_dir();

    // faketime really moves the binary's clock: a fresh shard starts at
    // the faked time.
    let before = wall_now();
    let fresh = harness::parse_ids(&next_an_hour_ago(&faketime, 9, dir.path(), 1).stdout);
    let after = wall_now();
    let faked = unix_second(fresh[0]);
    assert!(
        before - 3600 <= faked && faked <= after - 3600 + 1,
        "under faketime -1h the ID is from {faked}, not about {}",
        before - 3600
    );

    let mut ledger = Ledger::new();
    ledger.record(&harness::next(4, dir.path(), 1000));
    assert_eq!(harness::state_json(4, dir.path())["state"]["clock_id"], 0);

    let r = next_an_hour_ago(&faketime, 4, dir.path(), 1000);
    let ids = harness::parse_ids(&r.stdout);
    assert_eq!(ids.len(), 1000);
    ledger.record_after_all(&ids);
    let warning = r.stderr.trim();
    assert_eq!(warning.lines().count(), 1, "one warning line: {warning}");
    assert!(warning.contains("warning"), "{warning}");
    assert!(warning.contains("clock id bumped to 1"), "{warning}");
    let back: u64 = warning
        .split("the wall clock is ")
        .nth(1)
        .and_then(|rest| rest.split(" s behind").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the warning does not give the rollback: {warning}"));
    assert!(
        (3590..=3600).contains(&back),
        "rolled back {back} s: {warning}"
    );
    let json = harness::state_json(4, dir.path());
    assert_eq!(json["state"]["clock_id"], 1);
    let seen_max = json["state"]["seen_max"].as_u64().unwrap();
    let seen_last_run = json["state"]["seen_last_run"].as_u64().unwrap();
    assert!(
        seen_max >= before && seen_last_run + 3500 < seen_max,
        "{json}"
    );

    // Still an hour back: no new rollback, no new bump, no warning.
    let r = next_an_hour_ago(&faketime, 4, dir.path(), 1000);
    assert_eq!(r.stderr, "");
    ledger.record_after_all(&harness::parse_ids(&r.stdout));
    assert_eq!(harness::state_json(4, dir.path())["state"]["clock_id"], 1);

    // Back to the real time: forward is not a rollback.
    let r = run(idutil(4, dir.path()).args(["next", "-n", "1000"])).expect_code(0, "idutil next");
    assert_eq!(r.stderr, "");
    ledger.record_after_all(&harness::parse_ids(&r.stdout));
    assert_eq!(harness::state_json(4, dir.path())["state"]["clock_id"], 1);
    ledger.assert_unique();
}
