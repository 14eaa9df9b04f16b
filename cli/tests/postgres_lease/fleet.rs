//! Many holders at once and one after another, with kills and skewed clocks.

use idutil_harness as harness;

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil::{Generator, Layout};
use idutil_harness::child::{child_command, ChildProc};
use idutil_harness::lease::leased_shard;
use idutil_harness::{state_dir, Rng};

use crate::{leased, server, Tally, WIDE};

/// A child leasing from `url`; `skew` (libfaketime's `+1h`) moves its
/// wall clock.
pub(crate) fn lease_child(
    url: &str,
    ttl_ms: u64,
    shards: (u32, u32),
    count: Option<usize>,
    skew: Option<(&harness::Faketime, &str)>,
) -> ChildProc {
    lease_child_in(&state_dir().keep(), url, ttl_ms, shards, count, skew)
}

/// [`lease_child`] with the state directory `dir`: children given the same
/// one are processes of one host.
fn lease_child_in(
    dir: &std::path::Path,
    url: &str,
    ttl_ms: u64,
    shards: (u32, u32),
    count: Option<usize>,
    skew: Option<(&harness::Faketime, &str)>,
) -> ChildProc {
    let mut envs = vec![
        (
            "IDUTIL_CHILD_LEASE",
            format!("{url} {ttl_ms} {} {}", shards.0, shards.1),
        ),
        ("IDUTIL_STATE_DIR", dir.display().to_string()),
        ("IDUTIL_ID_SPACE", harness::space_for(dir)),
        ("IDUTIL_LAYOUT", WIDE.to_string()),
    ];
    if let Some(count) = count {
        envs.push(("IDUTIL_CHILD_COUNT", count.to_string()));
    }
    let mut cmd = child_command("lease_child_process", &envs);
    if let Some((faketime, spec)) = skew {
        faketime.apply(&mut cmd, spec);
    }
    ChildProc::start(cmd)
}

/// SIGKILL, wherever the child is; one that already finished (a sequential
/// holder can end its run just before) is only reaped.
fn kill(c: &mut ChildProc) {
    let _ = c.child.kill();
    let _ = c.child.wait();
}

/// A child's IDs until it ends, is killed, or `limit` IDs have arrived.
pub(crate) fn read_ids(child: &mut ChildProc, limit: usize) -> (Vec<u64>, Vec<String>) {
    let mut ids = Vec::new();
    let mut other = Vec::new();
    for line in child.by_ref() {
        match line.strip_prefix("id ") {
            Some(id) => ids.push(id.parse().unwrap()),
            None => other.push(line),
        }
        if ids.len() >= limit {
            break;
        }
    }
    (ids, other)
}

/// 40 processes lease at once from a 1,024-shard layout, each its own
/// shard; 6 more run with their clock an hour ahead and are refused. Some
/// of the 40 are killed with SIGKILL at random moments. Then 40 holders one
/// after another on 4 shards (each resuming after the previous holders of
/// its shard), killed at random moments too, again with skewed ones among
/// them. No ID is issued twice, and no skewed holder moves a shard's mark.
#[test]
fn forty_concurrent_and_forty_sequential_holders_with_kills_and_skewed_clocks() {
    let Some(pg) = server() else { return };
    let faketime = harness::faketime();
    let url = pg.tcp_url();
    let mut rng = Rng::from_env_or_time("forty holders");
    let mut all = Tally::new();

    let mut children: Vec<ChildProc> = (0..40)
        .map(|_| lease_child(&url, 3000, (0, 1023), None, None))
        .collect();
    let mut shards = HashSet::new();
    for (i, c) in children.iter_mut().enumerate() {
        let shard = leased_shard(c, &format!("child {i}"));
        assert!(shards.insert(shard), "shard {shard} leased twice");
    }
    if let Some(ft) = &faketime {
        for i in 0..6 {
            let mut c = lease_child(&url, 3000, (0, 1023), None, Some((ft, "+1h")));
            let line = c.next().expect("the skewed child reports");
            assert!(
                line.starts_with("failed") && line.contains("ahead of the lease store's"),
                "skewed child {i}: {line}"
            );
        }
    }
    for (i, c) in children.iter_mut().enumerate() {
        let limit = if rng.range(0, 3) == 0 {
            1 + rng.range(0, 400) as usize
        } else {
            400
        };
        let (ids, other) = read_ids(c, limit);
        assert!(other.is_empty(), "child {i}: {other:?}");
        if limit < 400 {
            kill(c);
        }
        all.add(ids, &format!("concurrent child {i}"));
    }
    // The concurrent holders, killed, hold their shards until their leases
    // expire.
    drop(children);
    thread::sleep(Duration::from_millis(3200));

    let marks_before = pg.psql("SELECT max(high_water) FROM idutil_lease");
    for i in 0..40 {
        let skewed = faketime.as_ref().filter(|_| i % 8 == 7).map(|f| (f, "+1h"));
        // Every one of the 4 shards may be held by a killed holder whose
        // lease has not expired yet: wait for one, as a restarting pod would.
        // A child to be killed issues until it is: one told to stop after
        // 600 IDs could finish first, and the kill would find it gone.
        let crash = rng.range(0, 2) == 0;
        let count = if crash { None } else { Some(600) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut c, line) = loop {
            let mut c = lease_child(&url, 1500, (0, 3), count, skewed);
            let line = c.next().expect("the child reports its lease");
            if !line.starts_with("failed no free shard") || Instant::now() > deadline {
                break (c, line);
            }
            thread::sleep(Duration::from_millis(200));
        };
        if skewed.is_some() {
            assert!(line.contains("ahead of the lease store's"), "{i}: {line}");
            continue;
        }
        assert!(line.starts_with("leased "), "sequential child {i}: {line}");
        let limit = if crash {
            1 + rng.range(0, 600) as usize
        } else {
            600
        };
        let (ids, other) = read_ids(&mut c, limit);
        if crash {
            kill(&mut c);
        } else {
            assert!(other.iter().all(|l| l == "done"), "{i}: {other:?}");
        }
        all.add(ids, &format!("sequential child {i}"));
    }
    let marks_after = pg.psql("SELECT max(high_water) FROM idutil_lease");
    let (before, after): (u64, u64) = (marks_before.parse().unwrap(), marks_after.parse().unwrap());
    assert!(
        after < harness::wall_now() + 3600 - 60,
        "a skewed holder pushed a mark an hour ahead: {before} -> {after}"
    );
}

/// 110 holders at once on a 10-shard-bit layout, in threads: each its own
/// shard, and all their IDs distinct.
#[test]
fn over_a_hundred_concurrent_holders_each_get_their_own_shard() {
    let Some(pg) = server() else { return };
    let layout: Layout = WIDE.parse().unwrap();
    let url = pg.tcp_url();
    let hosts: Vec<_> = (0..110).map(|_| state_dir()).collect();
    let generators: Vec<Generator> = thread::scope(|s| {
        let opening: Vec<_> = hosts
            .iter()
            .map(|h| {
                let url = url.clone();
                s.spawn(move || {
                    leased(h, LeaseConfig::new(url))
                        .layout(layout)
                        .open()
                        .unwrap()
                })
            })
            .collect();
        opening.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let shards: HashSet<u32> = generators.iter().map(Generator::shard).collect();
    assert_eq!(shards.len(), 110, "every holder has its own shard");
    let mut all = Tally::new();
    for (i, g) in generators.iter().enumerate() {
        let ids: Vec<u64> = g.next_ids(100).unwrap().map(u64::from).collect();
        all.add(ids, &format!("holder {i}"));
    }
    let leased: u64 = pg
        .psql("SELECT count(*) FROM idutil_lease WHERE holder IS NOT NULL")
        .parse()
        .unwrap();
    assert_eq!(leased, 110);
    drop(generators);
    let leased: u64 = pg
        .psql("SELECT count(*) FROM idutil_lease WHERE holder IS NOT NULL")
        .parse()
        .unwrap();
    assert_eq!(leased, 0, "every lease is given back at close");
}

/// The processes of one host that share a state directory each lease a
/// shard of their own, as the lease docs say (*Many processes on one
/// host*): six children at once with one state directory hold six rows,
/// six shards, and their IDs never repeat; the directory keeps a state
/// file for each shard.
#[test]
fn the_processes_of_one_host_lease_a_shard_each() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let host = state_dir();
    let mut children: Vec<ChildProc> = (0..6)
        .map(|_| lease_child_in(host.path(), &url, 3000, (0, 1023), None, None))
        .collect();
    let mut shards = HashSet::new();
    for (i, c) in children.iter_mut().enumerate() {
        let shard = leased_shard(c, &format!("child {i}"));
        assert!(
            shards.insert(shard),
            "shard {shard} leased twice on one host"
        );
    }
    let held = || -> u64 {
        pg.psql("SELECT count(*) FROM idutil_lease WHERE holder IS NOT NULL")
            .parse()
            .unwrap()
    };
    assert_eq!(held(), 6, "one lease for each process");
    let mut all = Tally::new();
    for (i, c) in children.iter_mut().enumerate() {
        let (ids, other) = read_ids(c, 300);
        assert!(other.is_empty(), "child {i}: {other:?}");
        all.add(ids, &format!("process {i}"));
    }
    for mut c in children {
        kill(&mut c);
    }
    for shard in shards {
        assert!(
            host.path().join(format!("shard-{shard}.state")).exists(),
            "no state file for shard {shard}"
        );
    }
}
