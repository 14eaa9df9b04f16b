//! Renewal and the fence: a holder cut off from the store stops issuing
//! within three quarters of the TTL of the cut and goes on once the store
//! answers again; the store expires the lease only after the full TTL, and
//! the holder then finds its shard another's and stays stopped.

use std::sync::Arc;
use std::time::Instant;

use idutil_harness::lease::{leased, open_when_free};
use idutil_harness::proxy::Proxy;
use idutil_harness::state_dir;

use crate::{config, shared, wait_until, Driver, Engine, Failure, Seen, TTL};

pub fn renewal_and_fence<E: Engine>() {
    let Some(server) = shared::<E>() else { return };
    let prefix = "fence";
    server.prepare(prefix, 0..=0);
    let proxy = Proxy::start(server.port());
    let (host_a, host_b) = (state_dir(), state_dir());
    let through = config(&*server, prefix, Some(proxy.port())).shards(0..=0);
    let a = Arc::new(leased(&host_a, through).open().unwrap());
    let driver = Driver::start(a.clone());
    // Three quarters of the TTL, and the moment the renewal thread takes
    // to wake at that deadline and raise the fence on a busy machine.
    let fence = TTL * 3 / 4 + TTL / 8;
    let within = TTL * 3;
    wait_until("A issues", within, || driver.issued() > 100);

    // Cut off for less than the TTL: fenced, then issuing again.
    let cut = Instant::now();
    proxy.cut();
    wait_until("A fenced", within, || {
        driver.failed_since(Failure::Fenced, cut).is_some()
    });
    let last = driver.last_issue().unwrap();
    assert!(
        last < cut + fence,
        "{}: A issued {:?} after the cut, past the fence of {fence:?}",
        E::NAME,
        last - cut
    );
    let healed = Instant::now();
    proxy.heal();
    wait_until("A issues again", within, || {
        driver.last_issue().is_some_and(|at| at > healed)
    });

    // Cut off for good: the store frees the shard after the full TTL,
    // never while A may still issue.
    let cut = Instant::now();
    proxy.cut();
    let direct = config(&*server, prefix, None).shards(0..=0);
    let (b, b_at) = open_when_free(&leased(&host_b, direct), within);
    let a_last = driver.last_issue().unwrap();
    assert!(
        a_last < cut + fence && a_last < b_at,
        "{}: A issued {:?} after the cut, B took the shard {:?} after it",
        E::NAME,
        a_last - cut,
        b_at - cut
    );
    // A was issuing at the cut, so its last renewal was sent less than
    // three quarters of the TTL before it; the store keeps the lease a
    // full TTL from that renewal (and frees it then: B asked for the shard
    // until `within`).
    assert!(
        b_at > cut + TTL / 4,
        "{}: the store freed the shard {:?} after the cut (TTL {TTL:?})",
        E::NAME,
        b_at - cut
    );
    let b_ids: Vec<u64> = b.next_ids(1000).unwrap().map(u64::from).collect();

    // A reaches the store again, and stays stopped: the shard is B's.
    let healed = Instant::now();
    proxy.heal();
    wait_until("A finds the shard lost", within, || {
        driver.failed_since(Failure::Lost, healed).is_some()
    });
    let log = driver.finish();
    let a_max = log.ids.iter().map(|(id, _)| *id).max().unwrap();
    assert!(b_ids[0] > a_max, "{}: B starts before A's last ID", E::NAME);
    let mut seen = Seen::new();
    seen.add(log.ids.iter().map(|(id, _)| *id), "A");
    seen.add(b_ids, "B");
    assert_eq!(
        a.next_id_nowait().map_err(|e| Failure::of(&e)),
        Err(Failure::Lost),
        "{}",
        E::NAME
    );
    b.close().unwrap();
}
