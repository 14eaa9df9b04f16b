//! SIGKILL at random moments, mid-output, and right after a large borrow.

use idutil_harness as harness;

use std::path::Path;
use std::thread;
use std::time::Duration;

use idutil::state;
use idutil_harness::child::ChildProc;
use idutil_harness::{on_disk, unix_second, wall_now, Ledger, Rng};

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

/// Where the processes of `shard` drew up to, as its claim file says
/// (`None` without one that says it): after a crash, the next run starts
/// there when it can trust the claim file, else after the state file's
/// mark.
fn claimed(dir: &Path, shard: u32) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(format!("shard-{shard}.claim"))).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("next "))
        .and_then(|next| next.parse().ok())
}

/// The counter value of an ID (the default layout): its second and
/// sequence number.
fn counter(id: u64) -> u64 {
    let parts = harness::parts(id);
    (parts.seconds << 16) | u64::from(parts.sequence)
}

/// After a crash the next run starts after everything the killed process
/// may have issued, printed or not: after the state file's `mark`, or,
/// in the same boot, where the blocks it drew ended (`claimed`).
fn assert_resumes_after_the_crash(first: u64, mark: u64, claimed: Option<u64>, what: &str) {
    assert!(
        unix_second(first) > mark || claimed.is_some_and(|next| counter(first) >= next),
        "{what}: after a crash the first ID ({first}, second {}) must be past the reserved \
         high-water {mark} or the claim file's counter {claimed:?}",
        unix_second(first)
    );
}

#[test]
fn sigkill_at_random_moments_never_repeats() {
    let dir = harness::state_dir();
    let shard = 3;
    let mut rng = Rng::from_env_or_time("sigkill_at_random_moments_never_repeats");
    let mut ledger = Ledger::new();
    let mut crash_mark: Option<u64> = None;
    let mut claim = None;
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
            assert_resumes_after_the_crash(first, mark, claim, &format!("round {round}"));
        }
        ledger.record_after_all(&ids);
        rounds_with_output += usize::from(!ids.is_empty());
        crash_mark = check_after_kill(dir.path(), shard, &ledger, round).or(crash_mark);
        claim = claimed(dir.path(), shard);
    }
    // The command on the same shard takes over.
    let ids = harness::next(shard, dir.path(), 100);
    let mark = crash_mark.expect("some round wrote state");
    assert_resumes_after_the_crash(ids[0], mark, claim, "the command");
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
    let mut claim = None;
    for round in 0..3 {
        let mut child = harness::spawn_next(shard, dir.path(), n);
        let ids = harness::kill_after_lines(&mut child, rng.range(1, 50_000));
        assert!(!ids.is_empty());
        if let Some(mark) = crash_mark {
            assert_resumes_after_the_crash(ids[0], mark, claim, &format!("round {round}"));
        }
        ledger.record_after_all(&ids);
        let mark = check_after_kill(dir.path(), shard, &ledger, round).unwrap();
        crash_mark = Some(mark);
        claim = claimed(dir.path(), shard);
    }
    let ids = harness::next(shard, dir.path(), 100);
    assert_resumes_after_the_crash(ids[0], crash_mark.unwrap(), claim, "the command");
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

/// A command that is to borrow three million IDs ahead is killed after
/// its first line: the next run must not reuse anything it may have
/// issued, printed or not (the rest of its batch, of its block).
#[test]
fn a_crash_right_after_a_large_borrow_resumes_after_everything_it_drew() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let mut child = harness::spawn_next(5, dir.path(), 3_000_000);
    let printed = harness::kill_after_lines(&mut child, 1);
    ledger.record(&printed);
    let s = on_disk(dir.path(), 5);
    assert_eq!(s.last, None);
    let mark = s.high_water[&0];
    assert!(mark >= unix_second(*printed.last().unwrap()));
    let claim = claimed(dir.path(), 5);
    assert!(
        claim.is_some_and(|next| next > counter(printed[0])),
        "the claim file says where its blocks end: {claim:?}"
    );

    let again = harness::next(5, dir.path(), 10);
    assert_resumes_after_the_crash(again[0], mark, claim, "the next run");
    ledger.record_after_all(&again);
}

/// Rounds of processes sharing a shard, every one of them killed with
/// SIGKILL at a random moment of its issuing and the next ones started at
/// once, in the same boot: the first to open again continues where the
/// killed ones' blocks ended (the claim file's counter), not after the
/// state file's mark, a window ahead. So the newest ID stays within 2 s of
/// the wall clock after every round, where it used to move a window
/// further ahead each round; no ID repeats. The test holds the claim
/// file's lock while it kills, as a member in its turn does, so the kills
/// land between turns: a member killed inside one (while it writes the
/// state file, a few milliseconds) leaves the claim file behind the state
/// file, and the next start is after the mark, as after any crash.
#[test]
fn members_all_killed_and_started_again_in_the_same_boot_stay_near_the_clock() {
    let dir = harness::state_dir();
    let shard = 6;
    let mut rng = Rng::from_env_or_time("members_all_killed_and_started_again");
    let mut ledger = Ledger::new();
    let env = [
        child_env(shard, dir.path()),
        vec![
            ("IDUTIL_CHILD_RATE", "1000".to_string()),
            ("IDUTIL_CHILD_FOR_MS", "60000".to_string()),
        ],
    ]
    .concat();
    for round in 0..12 {
        let mut members: Vec<(ChildProc, String)> = (0..3)
            .map(|_| {
                let mut member = ChildProc::spawn("child_issue_at_rate", &env);
                let first = member.next().expect("the member issues");
                (member, first)
            })
            .collect();
        thread::sleep(Duration::from_millis(rng.range(100, 1500)));
        let claim = hold_claim(dir.path(), shard);
        for (member, _) in &mut members {
            thread::sleep(Duration::from_millis(rng.range(0, 20)));
            harness::sigkill(&mut member.child);
        }
        drop(claim);
        for (mut member, first) in members {
            let ids: Vec<u64> = std::iter::once(first)
                .chain(member.by_ref())
                .filter_map(|line| line.strip_prefix("id ").map(|id| id.parse().unwrap()))
                .collect();
            ledger.record(&ids);
        }
        let newest = ledger.max().unwrap();
        let ahead = unix_second(newest).saturating_sub(wall_now());
        assert!(
            ahead <= 2,
            "round {round}: the newest ID, {newest}, is {ahead} s ahead of the wall clock"
        );
    }
    ledger.assert_unique();
    ledger.record_after_all(&harness::next(shard, dir.path(), 100));
}

/// Holds `shard`'s claim file locked, as a member in its turn does, until
/// dropped.
fn hold_claim(dir: &Path, shard: u32) -> std::fs::File {
    let claim = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(format!("shard-{shard}.claim")))
        .expect("open the claim file");
    rustix::fs::flock(&claim, rustix::fs::FlockOperation::LockExclusive)
        .expect("lock the claim file");
    claim
}
