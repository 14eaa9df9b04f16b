//! A free shard is taken atomically and never shared: holders in threads
//! and in child processes, opening at once, each lease a shard of their
//! own; with every shard leased, the next open fails with `NoFreeShard`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use idutil::Id;
use idutil_harness::lease::{is_no_free_shard, leased, leased_shard};
use idutil_harness::state_dir;

use crate::{config, lease_child, shared, Engine, Seen};

/// Holders per kind (threads, processes); the range has a shard for each.
const EACH: usize = 4;

pub fn acquire_is_exclusive<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let (prefix, shards) = ("exclusive", 0..=(2 * EACH as u32 - 1));
    server.prepare(prefix, shards.clone());
    let config = config(&*server, prefix, None).shards(shards.clone());
    let url = server.url_at(server.port());
    let root = state_dir();
    let mut children: Vec<_> = (0..EACH)
        .map(|i| {
            let dir = root.path().join(format!("process-{i}"));
            lease_child(&url, prefix, shards.clone(), Some(2000), &dir)
        })
        .collect();
    let hosts: Vec<_> = (0..EACH).map(|_| state_dir()).collect();
    let threads: Vec<_> = std::thread::scope(|s| {
        let opening: Vec<_> = hosts
            .iter()
            .map(|h| s.spawn(|| leased(h, config.clone()).open()))
            .collect();
        opening.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let threads: Vec<_> = threads
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.unwrap_or_else(|e| panic!("{}: thread {i}: {e}", E::NAME)))
        .collect();
    let mut held: Vec<(String, u32)> = threads
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("thread {i}"), g.shard()))
        .collect();
    for (i, child) in children.iter_mut().enumerate() {
        let who = format!("process {i}");
        let shard = leased_shard(child, &format!("{}: {who}", E::NAME));
        held.push((who, shard));
    }
    let distinct: BTreeSet<u32> = held.iter().map(|(_, s)| *s).collect();
    assert_eq!(
        distinct,
        shards.clone().collect(),
        "{}: a shard leased twice, or one left free: {held:?}",
        E::NAME
    );

    // Every shard leased: the next open fails at once, naming why.
    let asked = Instant::now();
    let extra = state_dir();
    match leased(&extra, config.clone()).open() {
        Err(e) if is_no_free_shard(&e) => {
            let text = e.to_string();
            assert!(text.contains("no free shard"), "{}: {text}", E::NAME);
        }
        Err(e) => panic!("{}: unclear refusal: {e}", E::NAME),
        Ok(g) => panic!("{}: a ninth holder leased shard {}", E::NAME, g.shard()),
    }
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{}: the refusal took {took:?}",
        E::NAME
    );

    let mut seen = Seen::new();
    let mut issued = Vec::new();
    for (g, (who, _)) in threads.iter().zip(&held) {
        issued.push((
            who.clone(),
            g.next_ids(2000).unwrap().map(u64::from).collect(),
        ));
    }
    for (child, (who, _)) in children.iter_mut().zip(&held[EACH..]) {
        let (ids, done) = child.ids_until_done();
        assert!(done, "{}: {who} did not finish", E::NAME);
        issued.push((who.clone(), ids));
    }
    for (who, ids) in issued {
        let shard = held.iter().find(|(w, _)| *w == who).unwrap().1;
        assert_eq!(ids.len(), 2000, "{}: {who}", E::NAME);
        assert!(
            ids.iter()
                .all(|&id| Id::from_u64(id).unwrap().shard() == shard),
            "{}: {who} issued on a shard other than its own, {shard}",
            E::NAME
        );
        seen.add(ids, &who);
    }
    for g in threads {
        g.close().unwrap();
    }
}
