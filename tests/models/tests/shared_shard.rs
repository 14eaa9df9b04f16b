//! The shared-shard protocol, explored: no counter value handed out twice
//! across kills, new boots and older copies put back (see
//! `idutil_models::shared`).

use std::time::Instant;

use idutil_models::explore::{depth, explore};
use idutil_models::shared::{Budget, OlderClaim, Rules, SharedShard};

fn run(rules: Rules, bound: usize) -> idutil_models::explore::Outcome<SharedShard> {
    let started = Instant::now();
    let out = explore(&SharedShard::new(rules), bound);
    eprintln!(
        "{rules:?}: {} states to depth {} (bounded: {}) in {:.1?}",
        out.states,
        out.depth,
        out.bounded,
        started.elapsed()
    );
    out
}

#[test]
fn no_value_is_handed_out_twice() {
    let out = run(Rules::CHECKED, depth(22, 25));
    if let Some(cex) = &out.violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}

#[test]
fn without_the_older_claim_check_a_claim_put_back_repeats_values() {
    let rules = Rules {
        older_claim: OlderClaim::Trusted,
        ..Rules::CHECKED
    };
    let cex = run(rules, depth(20, 24))
        .violation
        .expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn a_draw_from_an_untrusted_claim_after_its_own_reservation_repeats_values() {
    // What `disk_mark` is for: another process may have drawn up to its
    // own reservation, beyond this one's; only the state file's mark
    // bounds them all.
    // (With the older-claim record, that record alone would catch it: the
    // claim written after an untrusted draw is below what was recorded.)
    let rules = Rules {
        untrusted_after_disk_mark: false,
        older_claim: OlderClaim::Trusted,
        older_claim_on_leave: false,
        ..Rules::CHECKED
    };
    // Only what the counterexample needs, so that it is within reach: two
    // processes, one kill (during a claim write), no copies put back.
    let mut shard = SharedShard::new(rules);
    shard.budget = Budget {
        opens: 2,
        kills: 1,
        boots: 0,
        ticks: 0,
        claim_copies: 0,
        claim_restores: 0,
        note_restores: 0,
        state_copies: 0,
        state_restores: 0,
    };
    let started = Instant::now();
    let out = explore(&shard, 60);
    eprintln!("{} states in {:.1?}", out.states, started.elapsed());
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn what_a_process_knows_of_its_own_draws_does_not_catch_an_older_claim() {
    // The older-claim check needs a record outside the claim file: a
    // process that joins after the copy was put back knows nothing.
    let rules = Rules {
        older_claim: OlderClaim::BelowOwn,
        ..Rules::CHECKED
    };
    let cex = run(rules, depth(20, 24))
        .violation
        .expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn an_older_claim_trusted_when_the_last_process_leaves_repeats_values() {
    // Leaving reads the claim file too: to give back the rest of its
    // block when nobody drew after it, and, the last to leave, to record
    // the last value. An older claim trusted there gives back values
    // another process was handed since (or resumes the next run inside
    // them): the older-claim check must hold there as in a draw.
    let rules = Rules {
        older_claim_on_leave: false,
        ..Rules::CHECKED
    };
    // Only what the counterexample needs: three opens, a kill, a copy of
    // the claim file put back.
    let mut shard = SharedShard::new(rules);
    shard.budget = Budget {
        opens: 3,
        kills: 1,
        boots: 0,
        ticks: 0,
        claim_copies: 1,
        claim_restores: 1,
        note_restores: 0,
        state_copies: 0,
        state_restores: 0,
    };
    let started = Instant::now();
    let out = explore(&shard, 60);
    eprintln!("{} states in {:.1?}", out.states, started.elapsed());
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn without_the_claim_floor_an_older_state_file_put_back_repeats_values() {
    // A copy of the state file with the current mark but an older exact
    // last ID (a run in between stayed within the mark), put back after
    // every member is gone: the first to open again must start after what
    // the claim file and the lock file's note say was drawn.
    let rules = Rules {
        claim_floor: false,
        ..Rules::CHECKED
    };
    let mut shard = SharedShard::new(rules);
    shard.budget = Budget {
        opens: 3,
        kills: 1,
        boots: 0,
        ticks: 0,
        claim_copies: 0,
        claim_restores: 0,
        note_restores: 0,
        state_copies: 1,
        state_restores: 1,
    };
    let started = Instant::now();
    let out = explore(&shard, 60);
    eprintln!("{} states in {:.1?}", out.states, started.elapsed());
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn a_claim_file_and_lock_file_put_back_together_repeat_values_for_a_newcomer() {
    // The documented limit (the `state` module's *Older copies and deleted
    // files*): an older copy of both files put back together is caught
    // only by a process that drew after the copy was taken, as a whole
    // directory restored is not caught at all.
    let mut shard = SharedShard::new(Rules::CHECKED);
    shard.budget = Budget {
        opens: 2,
        kills: 0,
        boots: 0,
        ticks: 0,
        claim_copies: 1,
        claim_restores: 1,
        note_restores: 1,
        state_copies: 0,
        state_restores: 0,
    };
    let cex = explore(&shard, 40).violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

/// Two processes, one kill, one copy of the claim file put back: small
/// enough to explore every state.
fn put_back_and_kill(rules: Rules) -> SharedShard {
    let mut shard = SharedShard::new(rules);
    shard.budget = Budget {
        opens: 2,
        kills: 1,
        boots: 0,
        ticks: 0,
        claim_copies: 1,
        claim_restores: 1,
        note_restores: 0,
        state_copies: 0,
        state_restores: 0,
    };
    shard
}

#[test]
fn a_kill_between_the_note_and_the_claim_after_an_older_copy_lets_it_back() {
    // A process finds an older copy of the claim file put back (it reads
    // as nothing) and writes the claim file without a `next`, with its
    // mark. Were that counted as lowering, the lock file's note would be
    // written first, without its `claim` line. Killed before the
    // claim write, it leaves the older copy in place and nothing that
    // refutes it: a process that joined since trusts it.
    let out = explore(&put_back_and_kill(Rules::DROPPING_THE_NOTE), 60);
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn keeping_the_note_when_the_claim_has_no_next_closes_it() {
    let started = Instant::now();
    let out = explore(&put_back_and_kill(Rules::CHECKED), depth(50, 80));
    eprintln!(
        "{} states to depth {} in {:.1?}",
        out.states,
        out.depth,
        started.elapsed()
    );
    if let Some(cex) = out.violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}
