//! The leased shard, explored: no second issued by two holders, whatever
//! the crashes, the holders cut off from the store, the failovers and
//! the clocks within the skew limit (see `idutil_models::lease`).

use std::time::Instant;

use idutil_models::explore::{depth, explore, Outcome};
use idutil_models::lease::{Floor, LeasedShard, Rules, Timing};

/// Explores `rules` for `seconds` of the store's time.
fn run(rules: Rules, seconds: u32) -> Outcome<LeasedShard> {
    let started = Instant::now();
    let out = explore(&LeasedShard::new(rules, seconds * 1000), 100_000);
    eprintln!(
        "{rules:?}, {seconds} s: {} states to depth {} in {:.1?}",
        out.states,
        out.depth,
        started.elapsed()
    );
    out
}

fn holds(rules: Rules, seconds: u32) {
    if let Some(cex) = run(rules, seconds).violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}

fn caught(rules: Rules, seconds: u32) {
    let cex = run(rules, seconds).violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn no_two_holders_issue_the_same_id_through_crashes_cuts_and_failover() {
    let rules = Rules {
        restores: false,
        ..Rules::CODE
    };
    holds(rules, depth(12, 14) as u32);
}

#[test]
fn writes_not_conditioned_on_the_fencing_epoch_are_caught() {
    let rules = Rules {
        fencing: false,
        restores: false,
        ..Rules::CODE
    };
    caught(rules, 12);
}

#[test]
fn a_restore_without_the_history_check_is_caught() {
    let rules = Rules {
        floor: Floor::None,
        ..Rules::CODE
    };
    caught(rules, 6);
}

#[test]
fn a_floor_without_the_fence_is_caught() {
    // The earlier floor (the store's clock plus the lead cap plus the skew
    // limit plus one second) covers what any holder can have issued when
    // the check runs, not what a holder that has not yet learned of the
    // restore issues after it: until its next renewal, or its fence if it
    // is cut off, its clock and so its lead cap go on, within a
    // reservation raised before the restore.
    let rules = Rules {
        floor: Floor::WithoutFence,
        ..Rules::CODE
    };
    caught(rules, 8);
}

#[test]
fn a_restored_row_revives_a_holder_cut_off_before_it() {
    // A holder cut off from the store past its lease's expiry is fenced,
    // and another leases the shard. A backup taken while the first held
    // the row, restored now, gives the row back to the first: its epoch
    // and token match again, its mark is not below what it raised, so its
    // renewal and its raise go through (the history check runs only when
    // a shard is leased) and it issues the seconds the second holder
    // issued after the backup. The floor, fence and all, does not help:
    // nobody leases. (The code's rules: a known gap, until holders check
    // the history themselves.)
    let mut shard = LeasedShard::new(Rules::CODE, 10_500);
    shard.failovers = 0;
    shard.crashes = 0;
    // Clocks that agree with the store's: the skew plays no part.
    shard.offsets = vec![0];
    let started = Instant::now();
    let out = explore(&shard, 100_000);
    eprintln!("{} states in {:.1?}", out.states, started.elapsed());
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn holders_that_check_the_history_repeat_nothing() {
    // The gap above closed: with the code's floor, a holder whose server
    // or table changed under it stops as if its lease were lost.
    let rules = Rules {
        holder_checks_history: true,
        ..Rules::CODE
    };
    let mut shard = LeasedShard::new(rules, depth(8, 11) as u32 * 1000);
    shard.failovers = 0;
    shard.crashes = 0;
    let started = Instant::now();
    let out = explore(&shard, 100_000);
    eprintln!("{} states in {:.1?}", out.states, started.elapsed());
    if let Some(cex) = out.violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}

/// The shard with a short TTL (2 s), clocks that agree (the skew terms are
/// the default timing's tests' subject), a fleet lead cap of 1 s, a window
/// of 8 s (one raise reserves past a lead), and a holder
/// of an earlier configuration that may have leased with a lead cap of 8 s
/// before the backup: a larger reach on record, as
/// a holder with the default caps leaves it. Small numbers, so that the
/// explored time covers a raise and the wait after it. Holders check the
/// history themselves, as in the test above, so that what is found is the
/// raise's doing, not the known gap of a revived holder.
fn mixed_caps(floor: Floor, seconds: u32) -> LeasedShard {
    let rules = Rules {
        floor,
        holder_checks_history: true,
        ..Rules::CODE
    };
    let mut shard = LeasedShard::new(rules, seconds * 1000);
    shard.timing = Timing {
        ttl: 2_000,
        renew_every: 666,
        fence_after: 1_500,
        max_skew: 0,
        max_lead: 1,
        window: 8,
    };
    shard.offsets = vec![0];
    shard.earlier_lead = Some(8);
    shard.failovers = 0;
    shard.crashes = 0;
    shard
}

fn explore_mixed(floor: Floor, seconds: u32) -> Outcome<LeasedShard> {
    let started = Instant::now();
    let out = explore(&mixed_caps(floor, seconds), 100_000);
    eprintln!(
        "{floor:?}, mixed caps, {seconds} s: {} states to depth {} in {:.1?}",
        out.states,
        out.depth,
        started.elapsed()
    );
    out
}

#[test]
fn a_raise_counting_only_the_leasing_holder_s_reach_is_caught() {
    // A holder with a larger cap than the one leasing after the restore,
    // named by the restored row, had issued past the leaser's own reach.
    let cex = explore_mixed(Floor::OwnReach, 7)
        .violation
        .expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn the_reach_of_the_holder_the_row_names_covers_a_larger_earlier_cap() {
    // The code's rule: the larger of the leaser's reach and the one on
    // record for the holder the row names. A holder whose row was taken
    // over before the backup has its marks in the row, so its reach no
    // longer counts.
    if let Some(cex) = explore_mixed(Floor::Code, depth(7, 8) as u32).violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}
