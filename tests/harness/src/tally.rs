//! The duplicate check every test's IDs go through: each ID seen, with who
//! issued it.

use std::collections::HashMap;

use idutil::Id;

use crate::ids::MAX_SAFE;

/// Every ID seen in a test, with the issuer that printed or returned it
/// (a thread, a process, a holder), checked for the 53-bit limit and for
/// duplicates as it arrives. [`first_duplicate`](crate::first_duplicate),
/// [`assert_unique_set`](crate::assert_unique_set) and
/// [`Ledger`](crate::Ledger) go through it too; `tests/checker.rs` plants
/// duplicates it must catch.
#[derive(Default)]
pub struct Tally {
    /// Each ID and the index of its issuer in `issuers`.
    seen: HashMap<u64, u32>,
    issuers: Vec<String>,
}

impl Tally {
    pub fn new() -> Tally {
        Tally::default()
    }

    /// Room for `n` IDs.
    pub fn with_capacity(n: usize) -> Tally {
        Tally {
            seen: HashMap::with_capacity(n),
            issuers: Vec::new(),
        }
    }

    /// Records `ids`, issued by `who`: panics at an ID above 2^53 − 1, or
    /// one seen before, naming both issuers.
    pub fn add(&mut self, ids: impl IntoIterator<Item = u64>, who: &str) {
        for id in ids {
            assert!(id <= MAX_SAFE, "{who}: ID {id} is above 2^53 - 1");
            if let Some(first) = self.insert(id, who) {
                panic!("duplicate ID {id}: issued by {first} and by {who}");
            }
        }
    }

    /// Records `ids`, issued by `who`, and returns how many of them were
    /// seen before: for the tests that measure what a store's unsafe
    /// setup re-issues rather than fail at the first repeat.
    pub fn count_duplicates(&mut self, ids: impl IntoIterator<Item = u64>, who: &str) -> usize {
        ids.into_iter()
            .filter(|&id| self.insert(id, who).is_some())
            .count()
    }

    /// Records `id` for `who`; the issuer that had it first, if any.
    pub(crate) fn insert(&mut self, id: u64, who: &str) -> Option<&str> {
        let index = match self.issuers.last() {
            Some(last) if last == who => self.issuers.len() - 1,
            _ => match self.issuers.iter().position(|w| w == who) {
                Some(i) => i,
                None => {
                    self.issuers.push(who.to_string());
                    self.issuers.len() - 1
                }
            },
        };
        let index = u32::try_from(index).expect("fewer than 2^32 issuers");
        match self.seen.insert(id, index) {
            None => None,
            Some(first) => {
                // The first issuer keeps the ID.
                self.seen.insert(id, first);
                Some(&self.issuers[first as usize])
            }
        }
    }

    /// Whether `id` was seen.
    pub fn contains(&self, id: u64) -> bool {
        self.seen.contains_key(&id)
    }

    /// How many distinct IDs were seen.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The highest ID seen.
    pub fn max(&self) -> Option<u64> {
        self.seen.keys().copied().max()
    }

    /// The highest ID seen on `shard` (default layout).
    pub fn last_of_shard(&self, shard: u32) -> Option<u64> {
        self.seen
            .keys()
            .copied()
            .filter(|&id| Id::from_u64(id).is_some_and(|id| id.shard() == shard))
            .max()
    }
}
