//! The hot path under loom (see `idutil_models::hot`): two threads of one
//! generator take values and batches while another process draws from
//! the shared counter, the clock moves and the shard thread
//! publishes a new limit. No value is handed out twice, each thread's
//! values increase, and every value lies in a block the generator drew.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use idutil_models::explore::long_run;
use idutil_models::hot::{counter_at, Inner, Shard, Variant};
use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use loom::sync::{Arc, Mutex};

/// Runs the scenario under loom with `variant`, every interleaving to
/// `preemptions` preemptions.
fn check(variant: Variant, second: &'static [u64], preemptions: usize) {
    let started = Instant::now();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(move || scenario(variant, second));
    eprintln!(
        "{variant:?}, {second:?}, {preemptions} preemptions: every interleaving in {:.1?}",
        started.elapsed()
    );
}

/// One thread takes two single values, the other `second` (single values
/// and batches), while another process draws one value.
fn scenario(variant: Variant, second: &'static [u64]) {
    let clock = Arc::new(AtomicU64::new(0));
    // The first process's plan: the counter starts at second 0, and one
    // window (1 s) is reserved.
    let shard = Arc::new(Mutex::new(Shard {
        next: 0,
        reserved: 1,
    }));
    let inner = Arc::new(Inner::new(
        variant,
        Arc::clone(&clock),
        Arc::clone(&shard),
        counter_at(0),
        1,
    ));
    let spawn = |batches: &'static [u64]| {
        let inner = Arc::clone(&inner);
        loom::thread::spawn(move || {
            let mut got = Vec::new();
            for &n in batches {
                if let Ok(first) = inner.take(n) {
                    got.extend(first..first + n);
                }
            }
            got
        })
    };
    let one = spawn(&[1, 1]);
    let two = spawn(second);
    let other = {
        let (shard, clock, inner) = (Arc::clone(&shard), Arc::clone(&clock), Arc::clone(&inner));
        loom::thread::spawn(move || {
            // Another process draws one value, the clock moves on, the
            // shard thread writes what was asked.
            let (start, end, _) = shard.lock().unwrap().draw(0, 1, 1, 0);
            clock.store(1, Relaxed);
            inner.extend();
            (start..end).collect::<Vec<u64>>()
        })
    };
    let one = one.join().unwrap();
    let two = two.join().unwrap();
    let other = other.join().unwrap();
    for got in [&one, &two] {
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "a thread's values do not increase: {got:?}"
        );
    }
    let blocks = inner.cold.lock().unwrap().blocks.clone();
    for v in one.iter().chain(&two) {
        assert!(
            blocks.iter().any(|(s, e)| (*s..*e).contains(v)),
            "value {v} is outside every block the generator drew {blocks:?} \
             (threads {one:?} {two:?}, the other process {other:?})"
        );
    }
    let mut all: Vec<u64> = one.iter().chain(&two).chain(&other).copied().collect();
    all.sort_unstable();
    let before = all.len();
    all.dedup();
    assert_eq!(
        before,
        all.len(),
        "a value handed out twice: threads {one:?} {two:?}, the other process {other:?}"
    );
}

/// `check(variant)` fails: loom found an interleaving that breaks the
/// invariant. The panic's message (the counterexample) is printed.
fn caught(variant: Variant) {
    let result = catch_unwind(AssertUnwindSafe(|| check(variant, &[1, 2], 2)));
    let message = match result {
        Ok(()) => panic!("{variant:?}: no interleaving broke the invariant"),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    };
    eprintln!("{variant:?} caught: {message}");
}

#[test]
fn no_value_twice_each_thread_increasing_all_within_blocks() {
    // A batch beside single values, to 2 preemptions; with
    // `IDUTIL_MODELS=long`, also a single value and then a batch, and the
    // batch alone to 3 preemptions.
    check(Variant::Code, &[2], 2);
    if long_run() {
        check(Variant::Code, &[1, 2], 2);
        check(Variant::Code, &[2], 3);
    }
}

#[test]
fn a_load_and_a_store_instead_of_the_compare_and_swap_is_caught() {
    caught(Variant::LoadStore);
}

#[test]
fn a_limit_published_before_the_cursor_moves_into_its_block_is_caught() {
    caught(Variant::PublishBeforeJump);
}

#[test]
fn a_limit_not_clamped_to_the_block_is_caught() {
    caught(Variant::NoClamp);
}
