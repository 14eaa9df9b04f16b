//! Reading and checking IDs: the 53-bit limit, order, parts and duplicates.

use idutil::{Id, Layout};

use crate::tally::Tally;

/// JavaScript's `Number.MAX_SAFE_INTEGER`: no ID may exceed it.
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// Parses one decimal ID and checks the 53-bit limit.
pub fn parse_id(text: &str) -> u64 {
    let v: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("not an ID: {text:?}: {e}"));
    assert!(v <= MAX_SAFE, "ID {v} is above 2^53 - 1");
    v
}

/// Parses `idutil next` output: one ID per line, strictly increasing.
pub fn parse_ids(stdout: &str) -> Vec<u64> {
    let ids: Vec<u64> = stdout.lines().map(parse_id).collect();
    assert_increasing(&ids);
    ids
}

/// Parses the output of an `idutil next` that was killed: the complete
/// (newline-terminated) lines only.
pub fn parse_complete_ids(stdout: &str) -> Vec<u64> {
    match stdout.rfind('\n') {
        Some(i) => parse_ids(&stdout[..=i]),
        None => Vec::new(),
    }
}

/// Asserts strictly increasing (hence duplicate-free) order.
pub fn assert_increasing(ids: &[u64]) {
    if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
        panic!(
            "IDs not strictly increasing at {i}: {} then {}",
            ids[i],
            ids[i + 1]
        );
    }
}

/// Default-layout parts of an ID.
pub fn parts(id: u64) -> idutil::Parts {
    Id::from_u64(id).expect("ID within 53 bits").parts()
}

/// Unix second of an ID under the default layout.
pub fn unix_second(id: u64) -> u64 {
    parts(id).seconds + Layout::DEFAULT.epoch()
}

/// Checks a set of IDs issued by unrelated runs (not ordered) for
/// duplicates and the 53-bit limit.
pub fn assert_unique_set(ids: &[u64]) {
    for &id in ids {
        assert!(id <= MAX_SAFE, "ID {id} is above 2^53 - 1");
    }
    if let Some(id) = first_duplicate(ids) {
        panic!("duplicate ID {id} among {} IDs", ids.len());
    }
}

/// The first ID of `ids` (in their order) that occurs earlier in them too,
/// if any: the check of [`assert_unique_set`] and
/// [`Ledger`](crate::Ledger), made by a [`Tally`], the one duplicate check
/// every test's IDs go through.
pub fn first_duplicate(ids: &[u64]) -> Option<u64> {
    let mut tally = Tally::with_capacity(ids.len());
    ids.iter()
        .copied()
        .find(|&id| tally.insert(id, "").is_some())
}
