//! The high-water handoff: the next holder of a shard starts after every
//! ID its previous holder issued, whether that one closed cleanly (right
//! after its exact last ID) or was killed with SIGKILL in the middle of
//! issuing (after the mark, once its lease expired, not before).

use std::time::Instant;

use idutil_harness::lease::{leased, leased_shard, open_when_free};
use idutil_harness::{state_dir, unix_second, wall_now};

use crate::{config, lease_child, shared, Engine, Seen, TTL};

pub fn the_mark_goes_to_the_next_holder_after_a_clean_close<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let prefix = "handoff-close";
    server.prepare(prefix, 0..=0);
    let config = config(&*server, prefix, None).shards(0..=0);
    let (host_a, host_b) = (state_dir(), state_dir());
    let a = leased(&host_a, config.clone()).open().unwrap();
    // A burst more than a second's worth: ahead of the clock.
    let a_ids: Vec<u64> = a.next_ids(100_000).unwrap().map(u64::from).collect();
    a.close().unwrap();
    assert_eq!(
        server.record(prefix, 0).holder,
        None,
        "{}: the clean close kept the lease",
        E::NAME
    );
    let b = leased(&host_b, config).open().unwrap();
    let b_ids: Vec<u64> = b.next_ids(1000).unwrap().map(u64::from).collect();
    let b_issued = wall_now();
    let a_last = *a_ids.last().unwrap();
    assert!(
        b_ids[0] > a_last,
        "{}: B starts at {} before A's last ID {a_last}",
        E::NAME,
        b_ids[0]
    );
    // Right after A's exact last ID, not after the mark A raised ahead of
    // it: in that ID's second (or the next, if it was the second's last)
    // unless the clock has passed it.
    let resume = (unix_second(a_last) + 1).max(b_issued);
    assert!(
        unix_second(b_ids[0]) <= resume,
        "{}: B starts in second {}, past A's last ID {a_last} (second {}) and the clock \
         ({b_issued}): the clean close's exact last ID was not handed over",
        E::NAME,
        unix_second(b_ids[0]),
        unix_second(a_last)
    );
    let mut seen = Seen::new();
    seen.add(a_ids, "A");
    seen.add(b_ids, "B");
    b.close().unwrap();
}

pub fn the_mark_goes_to_the_next_holder_after_a_sigkill<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let prefix = "handoff-kill";
    server.prepare(prefix, 0..=0);
    let config = config(&*server, prefix, None).shards(0..=0);
    let (host_a, host_b) = (state_dir(), state_dir());
    let url = server.url_at(server.port());
    let mut a = lease_child(&url, prefix, 0..=0, None, host_a.path());
    leased_shard(&mut a, &format!("{}: A", E::NAME));
    let mut a_ids = Vec::new();
    for line in a.by_ref() {
        if let Some(id) = line.strip_prefix("id ") {
            a_ids.push(id.parse::<u64>().unwrap());
        }
        if a_ids.len() >= 5000 {
            break;
        }
    }
    idutil_harness::sigkill(&mut a.child);
    let killed = Instant::now();
    a_ids.extend(a.ids_until_done().0);
    let (b, b_at) = open_when_free(&leased(&host_b, config), TTL * 3);
    // It was issuing, so unfenced: its last renewal was sent less than
    // three quarters of the TTL before the kill, and the store keeps the
    // lease a full TTL from it. The shard comes free then (B asked until
    // three TTLs had passed), not before.
    let free_after = b_at - killed;
    assert!(
        free_after > TTL / 4,
        "{}: the killed holder's shard came free {free_after:?} after the kill (TTL {TTL:?})",
        E::NAME
    );
    let b_ids: Vec<u64> = b.next_ids(1000).unwrap().map(u64::from).collect();
    let a_max = *a_ids.iter().max().unwrap();
    assert!(
        b_ids[0] > a_max,
        "{}: B starts at {} before A's last ID {a_max}",
        E::NAME,
        b_ids[0]
    );
    let mut seen = Seen::new();
    seen.add(a_ids, "A");
    seen.add(b_ids, "B");
    b.close().unwrap();
}
