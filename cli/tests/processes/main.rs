//! Process-level proofs of the durability guarantees: the real `idutil`
//! binary restarted hundreds of times, killed with SIGKILL mid-output, run
//! under `faketime` with the clock an hour back,
//! locked out by a live holder, refused on damaged state files; and child
//! processes running library code (this test binary, re-executed to run one
//! `#[ignore]`d entry point) killed at random moments.

use idutil_harness as harness;

use std::path::Path;

mod copies;
mod damage;
mod holders;
mod keeping_time;
mod kills;
mod member_waits;
mod removed_host_lock;
mod restarts;
mod sharing;

/// Environment for a child on `shard` in `dir`.
fn child_env(shard: u32, dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("IDUTIL_CHILD_SHARD", shard.to_string()),
        ("IDUTIL_CHILD_DIR", dir.display().to_string()),
    ]
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

/// Child entry point: see [`harness::child::issue_at_rate_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_issue_at_rate() {
    if harness::is_child() {
        harness::child::issue_at_rate_child();
    }
}

/// Child entry point: see [`harness::child::issue_through_idutil_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_issue_through_idutil() {
    if harness::is_child() {
        harness::child::issue_through_idutil_child();
    }
}

/// Child entry point: see [`harness::hold_flocks_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_hold_flocks() {
    if harness::is_child() {
        harness::hold_flocks_child();
    }
}
