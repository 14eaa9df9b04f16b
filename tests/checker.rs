//! The tests' duplicate check (`Tally`, which `first_duplicate`,
//! `assert_unique_set` and `Ledger` go through) catches what it looks for:
//! duplicates planted among many IDs, from one issuer or two, a run that
//! does not increase, a run that does not start after everything recorded,
//! an ID past 2^53 − 1. Every guarantee test
//! trusts these checks to fail; here they must.

use std::panic::{catch_unwind, AssertUnwindSafe};

use idutil_harness::{assert_unique_set, first_duplicate, Ledger, Tally, MAX_SAFE};

/// Whether `f` panics.
fn panics(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

/// A million increasing IDs in steps of 32, as one shard issues them.
fn run(from: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| (from + i) << 5 | 7).collect()
}

#[test]
fn a_planted_duplicate_is_found_wherever_it_is() {
    let ids = run(1 << 40, 1_000_000);
    assert_eq!(first_duplicate(&ids), None);
    for at in [0, 1, 499_999, 999_999] {
        let mut planted = ids.clone();
        planted.push(ids[at]);
        assert_eq!(first_duplicate(&planted), Some(ids[at]), "planted at {at}");
        assert!(panics(|| assert_unique_set(&planted)), "planted at {at}");
    }
}

#[test]
fn a_ledger_finds_a_duplicate_across_runs() {
    let mut ledger = Ledger::new();
    ledger.record(&run(1 << 40, 1000));
    ledger.record(&run((1 << 40) + 999, 10));
    assert!(panics(|| ledger.assert_unique()));
    // Dropping a ledger that holds a duplicate fails the test too.
    assert!(panics(move || drop(ledger)));
}

#[test]
fn a_ledger_refuses_a_run_that_does_not_increase_or_start_after_all() {
    let mut ledger = Ledger::new();
    ledger.record(&run(1 << 40, 10));
    let mut back = run(1 << 41, 10);
    back.swap(3, 4);
    assert!(panics(|| Ledger::new().record(&back)));
    assert!(panics(|| ledger.record_after_all(&run((1 << 40) + 5, 10))));
    assert!(panics(|| Ledger::new().record(&[MAX_SAFE + 1])));
    std::mem::forget(ledger);
}

#[test]
fn a_tally_names_both_issuers_of_a_duplicate_and_counts_repeats() {
    let ids = run(1 << 40, 100_000);
    let mut tally = Tally::new();
    tally.add(ids.iter().copied(), "holder A");
    tally.add(run(1 << 41, 10), "holder B");
    assert_eq!(tally.len(), 100_010);
    for at in [0, 50_000, 99_999] {
        let planted = ids[at];
        let message = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut copy = Tally::new();
            copy.add(ids.iter().copied(), "holder A");
            copy.add([planted], "holder C");
        }))
        .expect_err("a repeat is caught");
        let message = message.downcast_ref::<String>().unwrap();
        assert!(
            message.contains(&planted.to_string())
                && message.contains("holder A")
                && message.contains("holder C"),
            "{message}"
        );
    }
    // Repeats within one issuer's own IDs too.
    assert!(panics(|| Tally::new().add([5 << 5, 6 << 5, 5 << 5], "one")));
    assert!(panics(|| Tally::new().add([MAX_SAFE + 1], "one")));
    // Counted, for the measured cases: three of five seen before.
    let counted = tally.count_duplicates([ids[1], ids[2], 1, ids[3], 2], "holder D");
    assert_eq!(counted, 3);
    assert!(tally.contains(1) && tally.contains(ids[3]));
}
