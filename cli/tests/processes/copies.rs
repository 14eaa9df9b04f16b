//! An older copy of a shard's claim file put back while its members run:
//! copied back over it in place (`cp`, a restore into the same file), or
//! renamed over it. Members are library processes issuing as they would
//! in production; commands join meanwhile.

use idutil_harness as harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use harness::{Ledger, Rng};

use crate::child_env;

/// A member process issuing until told to stop: pausing `pause_ms` after
/// each 64 IDs (0: flat out).
struct Member {
    child: Child,
    ids: Vec<u64>,
    /// Reads the rest of its output as it comes, so that it never waits
    /// on a full pipe.
    rest: thread::JoinHandle<String>,
}

impl Member {
    fn start(shard: u32, dir: &Path, pause_ms: u64) -> Member {
        let mut env = child_env(shard, dir);
        if pause_ms > 0 {
            env.push(("IDUTIL_CHILD_PAUSE_MS", pause_ms.to_string()));
        }
        // Quiet: the members that find their claim file replaced stop
        // with a panic, and say so on stderr.
        let mut child = harness::child::child_command("child_issue_until_killed", &env)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (ids, rest) = harness::read_until_issuing(child.stdout.take().unwrap());
        let rest = thread::spawn(move || harness::read_rest(rest));
        Member { child, ids, rest }
    }

    /// Stops it (SIGTERM, or SIGKILL) and returns every ID it printed.
    fn stop(mut self, kill: bool) -> Vec<u64> {
        if kill {
            harness::sigkill(&mut self.child);
        } else if self.child.try_wait().unwrap().is_none() {
            harness::send(&self.child, "TERM");
        }
        let text = self.rest.join().unwrap();
        self.ids.extend(harness::child_ids(&text).0);
        let _ = harness::wait_within(&mut self.child, Duration::from_secs(90));
        self.ids
    }
}

/// `idutil next -n N` on the shard: its IDs (none if it was refused).
fn command_ids(shard: u32, dir: &Path, n: u64) -> Vec<u64> {
    let out = harness::output_within(
        harness::idutil(shard, dir).args(["next", "-n", &n.to_string()]),
        Duration::from_secs(60),
    );
    harness::printed_ids(&out)
}

/// Four members issue on one shard (three fast, one that pauses and so
/// draws seldom, long before the copy is taken), and commands join
/// meanwhile, while the test copies the claim file aside and puts the copy
/// back in place (the same file, its old text), again and again at random
/// moments, by writing it and with `cp`. Whoever draws next, whether it
/// drew after the copy was taken or not, must not hand out a block any
/// member drew since: no ID repeats.
#[test]
fn an_older_claim_file_put_back_in_place_under_running_members_never_repeats_an_id() {
    let dir = harness::state_dir();
    let shard = 10;
    let mut rng = Rng::from_env_or_time("an_older_claim_file_put_back_in_place");
    let claim = dir.path().join(format!("shard-{shard}.claim"));
    let aside = harness::state_dir();
    let copy = aside.path().join("claim.copy");
    let members: Vec<Member> = [2, 2, 2, 300]
        .into_iter()
        .map(|pause| Member::start(shard, dir.path(), pause))
        .collect();
    let mut ledger = Ledger::new();
    for round in 0..16 {
        std::fs::copy(&claim, &copy).unwrap();
        thread::sleep(Duration::from_millis(rng.range(5, 250)));
        if round % 2 == 0 {
            std::fs::write(&claim, std::fs::read(&copy).unwrap()).unwrap();
        } else {
            let status = Command::new("cp").arg(&copy).arg(&claim).status().unwrap();
            assert!(status.success(), "cp");
        }
        if round % 4 == 3 {
            ledger.record(&command_ids(shard, dir.path(), 2_000));
        } else {
            thread::sleep(Duration::from_millis(rng.range(5, 100)));
        }
    }
    for member in members {
        let ids = member.stop(false);
        assert!(!ids.is_empty(), "every member issued");
        ledger.record(&ids);
    }
    ledger.assert_unique();
    ledger.record_after_all(&command_ids(shard, dir.path(), 100));
}

/// The same with the copy renamed over the claim file (a new file at its
/// path): the members that hold the old one stop at their next draw
/// ([`idutil::Error::StateReplaced`]), and the commands that open the
/// shard meanwhile draw from the copy. None of them may hand out what the
/// members drew after the copy was taken and still issue from.
#[test]
fn an_older_claim_file_renamed_over_the_claim_file_never_repeats_an_id() {
    let dir = harness::state_dir();
    let shard = 11;
    let mut rng = Rng::from_env_or_time("an_older_claim_file_renamed_over");
    let claim = dir.path().join(format!("shard-{shard}.claim"));
    // At a pace, near the clock: a member that stops keeps its shard
    // until the clock passes what it reserved.
    let members: Vec<Member> = [5, 5, 5, 300]
        .into_iter()
        .map(|pause| Member::start(shard, dir.path(), pause))
        .collect();
    let copy = std::fs::read(&claim).unwrap();
    thread::sleep(Duration::from_millis(rng.range(100, 400)));
    let renamed = dir.path().join("claim.copy");
    std::fs::write(&renamed, &copy).unwrap();
    std::fs::rename(&renamed, &claim).unwrap();
    let mut ledger = Ledger::new();
    for _ in 0..4 {
        ledger.record(&command_ids(shard, dir.path(), 3_000));
    }
    thread::sleep(Duration::from_millis(300));
    for member in members {
        ledger.record(&member.stop(false));
    }
    ledger.assert_unique();
}
