//! Many holders at once: thirty holders, on sixteen shards with a short
//! TTL, open together; those that find no shard free wait for one, each
//! issues on its own shard and closes, and nobody issues an ID twice.

use std::time::Duration;

use idutil::Id;
use idutil_harness::lease::{leased, open_when_free};
use idutil_harness::state_dir;

use crate::{config, shared, Engine, Seen};

const HOLDERS: usize = 30;
const SHARDS: u32 = 16;

pub fn many_holders_at_once<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let prefix = "crowd";
    server.prepare(prefix, 0..=SHARDS - 1);
    let config = config(&*server, prefix, None).shards(0..=SHARDS - 1);
    let issued: Vec<(u32, Vec<u64>)> = std::thread::scope(|s| {
        let holders: Vec<_> = (0..HOLDERS)
            .map(|_| {
                let config = config.clone();
                s.spawn(move || {
                    let host = state_dir();
                    let (g, _) = open_when_free(&leased(&host, config), Duration::from_secs(30));
                    let mut ids = Vec::new();
                    for _ in 0..20 {
                        ids.extend(g.next_ids(100).unwrap().map(u64::from));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let shard = g.shard();
                    g.close().unwrap();
                    (shard, ids)
                })
            })
            .collect();
        holders.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut seen = Seen::new();
    for (i, (shard, ids)) in issued.into_iter().enumerate() {
        assert!(
            ids.iter()
                .all(|&id| Id::from_u64(id).unwrap().shard() == shard),
            "{}: holder {i} issued off its shard {shard}",
            E::NAME
        );
        seen.add(ids, &format!("holder {i}"));
    }
}
