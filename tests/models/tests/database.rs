//! The database's counter, explored: no value handed out twice by the
//! sessions of `NAME_next_id()`, whatever the order of their reads and
//! draws, the cancels, the clock moving on or set back and the row's mark
//! raised (see `idutil_models::database`).

use std::time::Instant;

use idutil_models::database::{DatabaseCounter, Rules, SECOND};
use idutil_models::explore::{depth, explore, Outcome};

/// `sessions` sessions, `cancels` cancels, and (`faults`) one clock set
/// back and one raise of the row's mark; the counter starts at `start`.
fn model(rules: Rules, sessions: u8, cancels: u8, faults: bool, start: u8) -> DatabaseCounter {
    DatabaseCounter {
        rules,
        sessions,
        seconds: 3,
        lead: 1,
        cancels,
        backs: u8::from(faults),
        raises: u8::from(faults),
        start,
    }
}

fn run(m: &DatabaseCounter, steps: usize) -> Outcome<DatabaseCounter> {
    let started = Instant::now();
    let out = explore(m, steps);
    eprintln!(
        "{:?}, {} sessions: {} states to depth {} in {:.1?}",
        m.rules,
        m.sessions,
        out.states,
        out.depth,
        started.elapsed()
    );
    out
}

fn holds(m: &DatabaseCounter, steps: usize) {
    if let Some(cex) = run(m, steps).violation {
        panic!("{}\n{}", cex.why, cex.steps());
    }
}

#[test]
fn no_value_is_handed_out_twice() {
    // From a counter never used, and from one a value short of the end of
    // a second (where a stale draw meets the next second).
    holds(&model(Rules::CODE, 2, 3, true, 0), depth(26, 32));
    holds(
        &model(Rules::CODE, 2, 3, true, SECOND * 2 - 1),
        depth(26, 32),
    );
}

fn caught(rules: Rules, cancels: u8, start: u8, steps: usize) {
    let out = run(&model(rules, 2, cancels, false, start), steps);
    let cex = out.violation.expect("a counterexample");
    eprintln!("{}\n{}", cex.why, cex.steps());
}

#[test]
fn a_draw_without_reading_the_counter_first_is_caught() {
    let rules = Rules {
        read_first: false,
        ..Rules::CODE
    };
    caught(rules, 6, 0, 60);
}

#[test]
fn a_jump_whatever_the_gap_is_caught() {
    let rules = Rules {
        jump_margin: false,
        ..Rules::CODE
    };
    caught(rules, 2, SECOND * 2 - 1, 40);
}

#[test]
fn a_catch_up_without_the_lock_is_caught() {
    let rules = Rules {
        lock: false,
        ..Rules::CODE
    };
    caught(rules, 0, 0, 30);
}
