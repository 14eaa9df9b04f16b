//! Process-level proofs of the durability guarantees: the real `idutil`
//! binary restarted hundreds of times, killed with SIGKILL mid-output, run
//! under `faketime` with the clock an hour back,
//! locked out by a live holder, refused on damaged state files; and child
//! processes running library code (this test binary, re-executed to run one
//! `#[ignore]`d entry point) killed at random moments.

use idutil_harness as harness;

use std::io::BufReader;
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::Duration;

use harness::{idutil, parts, run, unix_second, wall_now, Damage, Ledger, Rng};
use idutil::state::{self, StateFile};

/// The counter step between consecutive IDs of one shard.
const STEP: u64 = 1 << 5;

fn on_disk(dir: &Path, shard: u32) -> StateFile {
    state::inspect(dir, shard)
        .expect("inspect the state")
        .state
        .expect("a state file exists")
}

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

/// Environment for a child on `shard` in `dir`.
fn child_env(shard: u32, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("IDUTIL_CHILD_SHARD", shard.to_string()),
        ("IDUTIL_CHILD_DIR", dir.display().to_string()),
    ]
}

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

/// A child process holding `shard` after issuing `n` IDs.
struct Holder {
    child: Child,
    ids: Vec<u64>,
    // Kept open until the child has exited, so it never writes to a closed
    // pipe.
    _out: BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(shard: u32, dir: &Path, n: u64) -> Holder {
        let mut env = child_env(shard, dir);
        env.push(("IDUTIL_CHILD_N", n.to_string()));
        let mut child = harness::spawn_child("child_hold_shard", &env);
        let (ids, out) = harness::read_until_ready(child.stdout.take().unwrap());
        assert_eq!(ids.len() as u64, n);
        Holder {
            child,
            ids,
            _out: out,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin: it closes its generator and exits.
    fn release(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait for the holder");
        assert!(status.success(), "the holder exited with {status}");
    }
}

#[test]
fn a_live_process_holding_the_shard_locks_out_the_command() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let holder = Holder::start(12, dir.path(), 100);
    ledger.record(&holder.ids);

    for _ in 0..2 {
        let r = run(idutil(12, dir.path()).args(["next", "-n", "5"]))
            .expect_code(1, "idutil next on a held shard");
        assert_eq!(r.stdout, "", "nothing issued");
        let msg = r.stderr.trim();
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        assert!(msg.contains("shard 12"), "{msg}");
        // The per-host lock refuses it before the directory's: it names the
        // shard and the holder, whose directory it cannot know.
        assert!(msg.contains("in use by another generator"), "{msg}");
        assert!(msg.contains(&format!("pid {}", holder.pid())), "{msg}");
    }
    // Recovery is refused too: it would replace a live generator's state.
    let r = run(idutil(12, dir.path()).args(["state", "recover"]))
        .expect_code(1, "idutil state recover on a held shard");
    assert!(
        r.stderr.contains(&format!("pid {}", holder.pid())),
        "{}",
        r.stderr
    );
    // Other shards in the same directory are free.
    let other = harness::next(13, dir.path(), 5);

    holder.release();
    let ids = harness::next(12, dir.path(), 100);
    ledger.record_after_all(&ids);
    ledger.record(&other);
    ledger.assert_unique();
}

#[test]
fn the_state_command_shows_path_shard_clock_id_high_water_last_issued_and_holder() {
    let dir = harness::state_dir();
    let shard = 14;
    let path = harness::state_file(dir.path(), shard);
    let path_text = path.display().to_string();
    let state = |json: bool| {
        let mut cmd = idutil(shard, dir.path());
        cmd.arg("state");
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd).expect_code(0, "idutil state").stdout
    };

    let text = state(false);
    assert!(text.contains(&path_text), "{text}");
    assert!(text.contains("lock holder:  none"), "{text}");
    assert!(text.contains("none yet"), "{text}");

    let ids = harness::next(shard, dir.path(), 5);
    let last = *ids.last().unwrap();
    let disk = on_disk(dir.path(), shard);
    let mark = disk.high_water[&0];
    let text = state(false);
    for want in [
        format!("path:         {path_text}"),
        format!("shard:        {shard}"),
        "lock holder:  none".to_string(),
        "clock id:     0".to_string(),
        format!("({mark}) clock value 0"),
        format!("ID {last} (clean close)"),
    ] {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    let json = harness::state_json(shard, dir.path());
    assert_eq!(json["path"], path_text);
    assert_eq!(json["shard"], shard);
    assert_eq!(json["locked"], false);
    assert!(json["holder_pid"].is_null());
    assert_eq!(json["state"]["clock_id"], 0);
    assert_eq!(json["state"]["high_water"][0]["second"], mark);
    assert_eq!(json["state"]["last_issued"]["id"], last);
    assert_eq!(
        json["state"]["last_issued"]["sequence"],
        parts(last).sequence
    );

    // A live holder: its pid, and no clean-close record while it runs.
    let holder = Holder::start(shard, dir.path(), 3);
    assert!(holder.ids[0] > last);
    let pid = holder.pid();
    let text = state(false);
    assert!(text.contains(&format!("lock holder:  pid {pid}")), "{text}");
    assert!(text.contains("last issued:  unknown"), "{text}");
    let json = harness::state_json(shard, dir.path());
    assert_eq!(json["locked"], true);
    assert_eq!(json["holder_pid"], pid);
    assert!(json["state"]["last_issued"].is_null());
    let held_mark = json["state"]["high_water"][0]["second"].as_u64().unwrap();
    assert!(held_mark >= unix_second(*holder.ids.last().unwrap()));
    let held = holder.ids.clone();
    holder.release();

    let json = harness::state_json(shard, dir.path());
    assert!(json["holder_pid"].is_null());
    assert_eq!(json["state"]["last_issued"]["id"], *held.last().unwrap());
    harness::assert_unique_set(&[ids, held].concat());
}

/// Checks that `idutil next` and `idutil state` refuse a damaged file and
/// leave it as it is. (A well-formed file for another layout is no damage
/// to `idutil state`, which only shows it.)
fn assert_command_refuses(shard: u32, dir: &Path, damaged: &[u8], kind: Damage) {
    let path = harness::state_file(dir, shard);
    let commands: &[&[&str]] = match kind {
        Damage::WrongLayout => {
            let r = run(idutil(shard, dir).arg("state")).expect_code(0, "idutil state");
            assert!(
                r.stdout
                    .contains("layout:       seconds:31 clock:1 sequence:16"),
                "{}",
                r.stdout
            );
            &[&["next", "-n", "5"]]
        }
        _ => &[&["next", "-n", "5"], &["state"]],
    };
    for &args in commands {
        let r = run(idutil(shard, dir).args(args)).expect_code(1, &format!("{kind:?}: {args:?}"));
        assert_eq!(r.stdout, "", "{kind:?}: {args:?}");
        let msg = r.stderr.trim();
        assert_eq!(msg.lines().count(), 1, "{kind:?}: one line: {msg}");
        assert!(msg.contains(&path.display().to_string()), "{kind:?}: {msg}");
        assert!(msg.contains("idutil state recover"), "{kind:?}: {msg}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "{kind:?}: {args:?} changed the damaged file"
        );
    }
}

/// `idutil state recover [--after T]`, which must succeed.
fn recover(shard: u32, dir: &Path, after: Option<u64>) -> String {
    let mut cmd = idutil(shard, dir);
    cmd.args(["state", "recover"]);
    if let Some(t) = after {
        cmd.args(["--after", &t.to_string()]);
    }
    run(&mut cmd).expect_code(0, "idutil state recover").stdout
}

/// `idutil state recover` without `--after`, which must refuse and leave
/// the file as it is.
fn recover_refused(shard: u32, dir: &Path, damaged: &[u8]) {
    let r = run(idutil(shard, dir).args(["state", "recover"]))
        .expect_code(1, "idutil state recover without a certain mark");
    let msg = r.stderr.trim();
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    assert!(msg.contains("--after TIME"), "{msg}");
    assert_eq!(
        std::fs::read(harness::state_file(dir, shard)).unwrap(),
        damaged
    );
}

#[test]
fn damaged_state_is_refused_by_the_command_until_recovered() {
    let dir = harness::state_dir();
    for (i, kind) in Damage::ALL.into_iter().enumerate() {
        let shard = 20 + i as u32;
        let mut ledger = Ledger::new();
        // Nearly four seconds' worth: the run borrows into the reservation
        // window, so resuming at the clock would not be enough. (Checked
        // against the clock before the run: on a loaded machine printing
        // and parsing 250,000 lines may take seconds.)
        let started = wall_now();
        ledger.record(&harness::next(shard, dir.path(), 250_000));
        let issued_until = unix_second(ledger.max().unwrap());
        assert!(issued_until >= started + 3, "borrowed ahead of the clock");
        let damaged = kind.apply(&harness::state_file(dir.path(), shard));
        assert_command_refuses(shard, dir.path(), &damaged, kind);

        let after = if kind.keeps_the_mark() {
            None
        } else {
            recover_refused(shard, dir.path(), &damaged);
            Some(issued_until)
        };
        let out = recover(shard, dir.path(), after);
        assert!(out.contains("\nrecovered "), "{kind:?}: {out}");
        let ids = harness::next(shard, dir.path(), 200);
        ledger.record_after_all(&ids);
        // Recovering bumps the clock id.
        assert!(on_disk(dir.path(), shard).clock_id >= 1, "{kind:?}");
        ledger.assert_unique();
    }
}

#[test]
fn recover_resumes_after_a_far_borrow() {
    let dir = harness::state_dir();

    // Torn write elsewhere: the checksum fails, so even the legible
    // high-water line is not certain; --after covers the borrow.
    let ids = harness::next(1, dir.path(), 3_000_000);
    let mut ledger = Ledger::new();
    ledger.record(&[ids[0], *ids.last().unwrap()]);
    drop(ids);
    let mark = on_disk(dir.path(), 1).high_water[&0];
    let damaged = Damage::Corrupt.apply(&harness::state_file(dir.path(), 1));
    assert_command_refuses(1, dir.path(), &damaged, Damage::Corrupt);
    recover_refused(1, dir.path(), &damaged);
    recover(1, dir.path(), Some(mark));
    ledger.record_after_all(&harness::next(1, dir.path(), 100));

    // Truncated: the high-water number is lost; --after covers the borrow.
    let ids = harness::next(2, dir.path(), 3_000_000);
    let mut ledger = Ledger::new();
    ledger.record(&[ids[0], *ids.last().unwrap()]);
    drop(ids);
    let mark = on_disk(dir.path(), 2).high_water[&0];
    let damaged = Damage::Truncated.apply(&harness::state_file(dir.path(), 2));
    let legible = String::from_utf8_lossy(&damaged);
    assert!(
        !legible.contains(&mark.to_string())
            && !legible.contains(&unix_second(ledger.max().unwrap()).to_string()),
        "the truncation must destroy the borrowed seconds:\n{legible}"
    );
    assert_command_refuses(2, dir.path(), &damaged, Damage::Truncated);
    recover_refused(2, dir.path(), &damaged);
    let out = recover(2, dir.path(), Some(mark));
    assert!(
        out.contains(&format!("({mark}), the time vouched for")),
        "the latest known second is {mark}: {out}"
    );
    ledger.record_after_all(&harness::next(2, dir.path(), 100));
}

/// Child entry point: see [`harness::hold_shard_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_hold_shard() {
    if harness::is_child() {
        harness::hold_shard_child();
    }
}

/// Child entry point: see [`harness::issue_until_killed_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_issue_until_killed() {
    if harness::is_child() {
        harness::issue_until_killed_child();
    }
}
