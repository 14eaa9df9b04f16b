//! A full layout: under a layout with two shard bits, four holders lease
//! the four shards; the next open fails at once, naming the full range,
//! and the four issue nothing twice.

use std::time::{Duration, Instant};

use idutil::{Id, Layout};
use idutil_harness::lease::{is_no_free_shard, leased};
use idutil_harness::{state_dir, Tally};

use crate::{config, shared, Engine};

/// Four shards of 2^19 IDs a second.
const FOUR: &str = "seconds:32 clock:0 sequence:19 shard:2 epoch:946684800";

pub fn a_full_layout<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let layout: Layout = FOUR.parse().unwrap();
    // Every shard's first use (Redis holds a shard without a record for a
    // TTL first): no records to prepare under another layout.
    let config = config(&*server, "full", None);
    let hosts: Vec<_> = (0..4).map(|_| state_dir()).collect();
    let holders: Vec<_> = std::thread::scope(|s| {
        let opening: Vec<_> = hosts
            .iter()
            .map(|h| s.spawn(|| leased(h, config.clone()).layout(layout).open()))
            .collect();
        opening.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let holders: Vec<_> = holders
        .into_iter()
        .map(|g| g.unwrap_or_else(|e| panic!("{}: {e}", E::NAME)))
        .collect();
    let mut shards: Vec<u32> = holders.iter().map(|g| g.shard()).collect();
    shards.sort();
    assert_eq!(shards, [0, 1, 2, 3], "{}", E::NAME);

    let asked = Instant::now();
    let extra = state_dir();
    match leased(&extra, config.clone()).layout(layout).open() {
        Err(e) if is_no_free_shard(&e) => {
            let text = e.to_string();
            assert!(text.contains("all 4 shards"), "{}: {text}", E::NAME);
        }
        Err(e) => panic!("{}: unclear refusal: {e}", E::NAME),
        Ok(g) => panic!("{}: a fifth holder leased shard {}", E::NAME, g.shard()),
    }
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{}: the refusal took {took:?}",
        E::NAME
    );

    let mut seen = Tally::new();
    for (i, g) in holders.into_iter().enumerate() {
        let ids: Vec<Id> = g.next_ids(10_000).unwrap().collect();
        let shard = g.shard();
        assert!(
            ids.iter()
                .all(|&id| layout.decode(id).unwrap().shard == shard),
            "{}: holder {i} issued off its shard {shard}",
            E::NAME
        );
        seen.add(ids.into_iter().map(u64::from), &format!("holder {i}"));
        g.close().unwrap();
    }
}
