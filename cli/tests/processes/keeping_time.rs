//! A shard shared by processes keeps time: it runs ahead of the wall clock
//! only by what their IDs need beyond the shard's 65,536 a second, as the
//! `state` module's *Processes sharing a shard* states it. Many short
//! commands at once; an application's test suite run three times in one
//! default state directory; a long-lived member beside short ones; quiet
//! members beside one that borrowed far ahead, then SIGKILLed and
//! restarted; a process that joins under a clock a day ahead.

use idutil_harness as harness;

use std::process::Stdio;
use std::thread;
use std::time::Duration;

use harness::child::{child_command, ChildProc};
use harness::{unix_second, wall_now, Ledger};

use crate::child_env;
use crate::sharing::{run_many, run_many_parsed};

/// IDs one second of a shard holds in the default layout.
const PER_SECOND: u64 = 65_536;
/// What the bound allows on top of the seconds the IDs need: the docs'
/// fixed allowance.
const ALLOWANCE: u64 = 2;
/// The fewest IDs a process draws at once (`MIN_BLOCK`), which it may
/// leave unused when it ends.
const MIN_BLOCK: u64 = 64;

/// The docs' bound: after `processes` processes issued `issued` IDs between
/// the wall-clock seconds `from` and `to`, no ID's second is past the
/// later of `to` and the seconds from `from` those IDs fill (a quarter
/// more, and a smallest block per process, for what blocks left unused),
/// plus [`ALLOWANCE`].
fn bound(from: u64, to: u64, issued: u64, processes: u64) -> u64 {
    let counted = issued + issued / 4 + MIN_BLOCK * processes;
    to.max(from + counted.div_ceil(PER_SECOND)) + ALLOWANCE
}

fn assert_within(what: &str, ids: &[u64], bound: u64) {
    let newest = ids.iter().copied().max().expect("IDs were issued");
    let second = unix_second(newest);
    assert!(
        second <= bound,
        "{what}: the newest ID {newest} is in second {second}, {} s past the bound {bound} \
         (the wall clock is at {})",
        second - bound,
        wall_now()
    );
}

/// Sixty-four `idutil next -n 2000`, sixteen at a time, in a new state
/// directory: 128,000 IDs, two seconds of the shard. It ran 10 h 41 min
/// ahead when members sized their blocks by how far their counter moved.
#[test]
fn many_short_commands_at_once_keep_the_shard_near_the_clock() {
    let dir = harness::state_dir();
    let from = wall_now();
    let runs = run_many(64, 16, || {
        let mut cmd = harness::idutil(9, dir.path());
        cmd.args(["next", "-n", "2000"]);
        cmd
    });
    let mut ledger = Ledger::new();
    for ids in &runs {
        assert_eq!(ids.len(), 2000);
        ledger.record(ids);
    }
    ledger.assert_unique();
    let after = harness::next(9, dir.path(), 1);
    ledger.record_after_all(&after);
    let to = wall_now();
    assert_within(
        "64 short commands",
        ledger.ids(),
        bound(from, to, 128_001, 65),
    );
}

/// An application's test suite as `cargo nextest` runs it: sixty test
/// processes, sixteen at a time, each taking 3,500 IDs from the
/// process-wide generator in the default state directory; run three times
/// in a row. Each run leaves the shard within the bound: it added about a
/// day a run before.
#[test]
fn a_test_suite_run_three_times_in_one_default_state_directory_keeps_time() {
    let home = harness::state_dir();
    let space = harness::space_for(home.path());
    let mut ledger = Ledger::new();
    for run in 0..3 {
        let started = wall_now();
        let runs = run_many_parsed(
            60,
            16,
            |out| harness::child_ids(out).0,
            || {
                let mut cmd = child_command(
                    "child_issue_through_idutil",
                    &[
                        ("IDUTIL_CHILD_N", "3500".to_string()),
                        ("IDUTIL_SHARD", "10".to_string()),
                        ("IDUTIL_ID_SPACE", space.clone()),
                        ("HOME", home.path().display().to_string()),
                    ],
                );
                cmd.env_remove("XDG_STATE_HOME").stdin(Stdio::null());
                cmd
            },
        );
        for ids in &runs {
            assert_eq!(ids.len(), 3500, "run {run}: a test process issued all");
            ledger.record(ids);
        }
        ledger.assert_unique();
        let to = wall_now();
        let run_ids: Vec<u64> = runs.into_iter().flatten().collect();
        // Where the shard's counter stood when the run began: the clock,
        // or after what the run before borrowed and left in its blocks,
        // which the run's first ID shows.
        let first = run_ids.iter().copied().min().map_or(0, unix_second);
        let from = started.max(first);
        assert_within(
            &format!("test run {run}"),
            &run_ids,
            bound(from, to, 60 * 3500, 60),
        );
    }
    assert!(home
        .path()
        .join(".local/state/idutil/shard-10.state")
        .is_file());
}

/// A server that issues 2,000 IDs a second for four seconds while 120
/// short commands come and go beside it: together far below the shard's
/// ceiling, so every ID stays within the allowance of the clock.
#[test]
fn a_long_lived_member_beside_short_ones_keeps_time() {
    let dir = harness::state_dir();
    let mut server = ChildProc::start(child_command(
        "child_issue_at_rate",
        &[
            child_env(11, dir.path()),
            vec![
                ("IDUTIL_CHILD_RATE", "2000".to_string()),
                ("IDUTIL_CHILD_FOR_MS", "4000".to_string()),
            ],
        ]
        .concat(),
    ));
    let runs = run_many(120, 4, || {
        let mut cmd = harness::idutil(11, dir.path());
        cmd.args(["next", "-n", "300"]);
        cmd
    });
    let (served, done) = ids_until_ready(&mut server);
    assert!(done, "the server closed cleanly");
    assert!(served.windows(2).all(|w| w[0] < w[1]), "increasing");
    let to = wall_now();
    let mut ledger = Ledger::new();
    ledger.record(&served);
    for ids in &runs {
        ledger.record(ids);
    }
    ledger.assert_unique();
    // 8,000 + 36,000 IDs in more than four seconds: nothing to borrow.
    assert_within("the server", &served, to + ALLOWANCE);
    assert_within("the short commands", ledger.ids(), to + ALLOWANCE);
}

/// One member issues flat out (batches of 1,000) for a second and a half,
/// borrowing seconds of the shard, three quiet members joining it after
/// half a second; it is killed with SIGKILL, then one of the quiet ones,
/// and a new member joins. The quiet members issue
/// after what it borrowed, and the shard stays within the bound of what
/// was issued: the killed member's unused block costs at most a quarter
/// of its IDs, never hours (the quiet members' IDs ran 5,847 s ahead, and
/// a new member's first ID up to 3,606 s past the last ID, when members
/// counted each other's blocks as their own).
#[test]
fn quiet_members_beside_a_killed_borrower_stay_within_the_bound() {
    let dir = harness::state_dir();
    let from = wall_now();
    let quiet = |ms: u64| {
        ChildProc::start(child_command(
            "child_issue_at_rate",
            &[
                child_env(13, dir.path()),
                vec![
                    ("IDUTIL_CHILD_RATE", "1000".to_string()),
                    ("IDUTIL_CHILD_FOR_MS", ms.to_string()),
                ],
            ]
            .concat(),
        ))
    };
    let mut borrower = harness::spawn_child(
        "child_issue_until_killed",
        &[
            child_env(13, dir.path()),
            vec![("IDUTIL_CHILD_BATCH", "1000".to_string())],
        ]
        .concat(),
    );
    let (mut borrowed, reader) = harness::read_until_issuing(borrower.stdout.take().unwrap());
    // Batches are read as their first and last IDs, counted whole below.
    let reading = thread::spawn(move || harness::read_rest(reader));
    thread::sleep(Duration::from_millis(500));
    let mut quiet_ones: Vec<ChildProc> = (0..3).map(|_| quiet(5000)).collect();
    thread::sleep(Duration::from_millis(1000));
    eprintln!("killing the borrower");
    harness::sigkill(&mut borrower);
    borrowed.extend(harness::child_ids(&reading.join().unwrap()).0);
    // One quiet member killed too, mid-block; a new member joins.
    thread::sleep(Duration::from_millis(1000));
    let mut killed = quiet_ones.pop().unwrap();
    eprintln!("killing a quiet member");
    harness::sigkill(&mut killed.child);
    let newcomer = harness::next(13, dir.path(), 100);
    let mut ledger = Ledger::new();
    let mut quiet_ids = Vec::new();
    let (ids, _) = ids_until_ready(&mut killed);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
    ledger.record(&ids);
    quiet_ids.extend(ids);
    for member in &mut quiet_ones {
        let (ids, done) = ids_until_ready(member);
        assert!(done, "a quiet member closed cleanly");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
        ledger.record(&ids);
        quiet_ids.extend(ids);
    }
    ledger.record(&newcomer);
    ledger.assert_unique();
    let to = wall_now();
    // Each printed pair is a batch of 1,000 (a killed batch counts whole).
    let borrowed_count = borrowed.len() as u64 / 2 * 1000 + 1000;
    let issued = borrowed_count + quiet_ids.len() as u64 + 100;
    let bound = bound(from, to, issued, 5);
    assert_within("the quiet members", &quiet_ids, bound);
    assert_within("a member after the kill", &newcomer, bound);
    assert_within("the borrower", &borrowed, bound);
    // The newcomer continues right after what the members issued, not past
    // a killed member's reservation.
    let last_before = borrowed.iter().chain(&quiet_ids).copied().max().unwrap();
    assert!(
        unix_second(newcomer[0]) <= unix_second(last_before) + bound.saturating_sub(to).max(1),
        "the newcomer's first ID {} is {} s past the last ID {last_before} issued before it",
        newcomer[0],
        unix_second(newcomer[0]) - unix_second(last_before)
    );
}

/// A process joins under a clock a day and an hour ahead (past the day a
/// generator follows at once) while a member issues on the real clock: it
/// issues at the members' time, says why, and the member's IDs never jump
/// ahead with it.
#[test]
fn a_process_joining_under_a_far_clock_does_not_drag_the_members() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let dir = harness::state_dir();
    let mut member = ChildProc::start(child_command(
        "child_issue_at_rate",
        &[
            child_env(14, dir.path()),
            vec![
                ("IDUTIL_CHILD_RATE", "500".to_string()),
                ("IDUTIL_CHILD_FOR_MS", "3000".to_string()),
            ],
        ]
        .concat(),
    ));
    // The member's first ID: it has drawn, so the claim file holds the
    // members' time (a sleep here would let a slow start skip the race).
    let first = member
        .next()
        .and_then(|line| line.strip_prefix("id ").map(harness::parse_id))
        .expect("the member's first ID");
    let mut joiner = harness::idutil(14, dir.path());
    faketime.apply(&mut joiner, "+90000");
    let joined = harness::run(joiner.args(["next", "-n", "10"])).expect_code(0, "the joiner");
    let joined_ids = harness::parse_ids(&joined.stdout);
    assert!(
        joined
            .stderr
            .contains("ahead of the time the processes sharing shard 14 keep"),
        "the joiner says why it does not follow its clock: {}",
        joined.stderr
    );
    let (mut ids, done) = ids_until_ready(&mut member);
    ids.insert(0, first);
    assert!(done, "the member closed cleanly");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
    let to = wall_now();
    let mut ledger = Ledger::new();
    ledger.record(&ids);
    ledger.record(&joined_ids);
    ledger.assert_unique();
    assert_within("the joiner", &joined_ids, to + ALLOWANCE);
    assert_within("the member", &ids, to + ALLOWANCE);
}

/// IDs of a [`harness::issue_at_rate_child`] up to its ready mark, and
/// whether it printed the mark.
fn ids_until_ready(child: &mut ChildProc) -> (Vec<u64>, bool) {
    let mut ids = Vec::new();
    for line in child.by_ref() {
        if line.starts_with("ready") {
            return (ids, true);
        }
        if let Some(id) = line.strip_prefix("id ") {
            ids.push(harness::parse_id(id));
        }
    }
    (ids, false)
}
