//! The ledger: every ID a test saw, checked for the limit, order and duplicates.

use crate::ids::{assert_increasing, first_duplicate, parts, unix_second, MAX_SAFE};

/// Every ID seen in a test, in the order seen, across runs, processes and
/// crashes. Checks the 53-bit limit on the way in and duplicates at the end
/// (and whenever asked).
#[derive(Default)]
pub struct Ledger {
    ids: Vec<u64>,
    max: Option<u64>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records a run's IDs, in the order one generator issued them: they
    /// must be strictly increasing within the run.
    pub fn record(&mut self, run: &[u64]) {
        for &id in run {
            assert!(id <= MAX_SAFE, "ID {id} is above 2^53 - 1");
        }
        assert_increasing(run);
        self.ids.extend_from_slice(run);
        if let Some(&last) = run.last() {
            self.max = Some(self.max.map_or(last, |m| m.max(last)));
        }
    }

    /// Records a run that must start after every ID recorded so far.
    pub fn record_after_all(&mut self, run: &[u64]) {
        if let (Some(max), Some(&first)) = (self.max, run.first()) {
            assert!(
                first > max,
                "run starts at {first}, not after every earlier ID (highest {max}; \
                 {first} is {} s and sequence {} vs {} s and sequence {})",
                unix_second(first),
                parts(first).sequence,
                unix_second(max),
                parts(max).sequence,
            );
        }
        self.record(run);
    }

    /// The highest ID recorded.
    pub fn max(&self) -> Option<u64> {
        self.max
    }

    /// Every ID recorded, in the order recorded.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// Panics with the first duplicate, if any ([`first_duplicate`]).
    pub fn assert_unique(&self) {
        if let Some(id) = first_duplicate(&self.ids) {
            panic!("duplicate ID {id} among {} IDs", self.ids.len());
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.assert_unique();
        }
    }
}
