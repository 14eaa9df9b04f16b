//! Restarts and killed connections: the server killed and started again
//! under live holders, then their connections closed from the server's
//! side; the holders go on, and they and the next holder issue nothing
//! twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idutil_harness::lease::leased;
use idutil_harness::state_dir;

use crate::{config, wait_until, Driver, Engine, Failure, Seen};

/// Long enough that the lease outlives the restart: a holder whose lease
/// lapsed while the store was down may stop for good (Redis's docs).
const TTL: Duration = Duration::from_secs(4);

pub fn restarts_and_killed_connections<E: Engine>() {
    let Some(mut server) = E::start() else { return };
    let prefix = "restarts";
    server.prepare(prefix, 0..=1);
    let config = config(&server, prefix, None).shards(0..=1).ttl(TTL);
    let hosts = [state_dir(), state_dir()];
    let holders: Vec<_> = hosts
        .iter()
        .map(|h| Arc::new(leased(h, config.clone()).open().unwrap()))
        .collect();
    let drivers: Vec<_> = holders.iter().map(|g| Driver::start(g.clone())).collect();
    // Issuing for longer than the TTL: past the reservation and the
    // fence, so the holders renewed and raised meanwhile.
    let each_goes_on = |what: &str| {
        let from = Instant::now() + TTL;
        wait_until(&format!("{}: {what}", E::NAME), TTL * 5, || {
            drivers
                .iter()
                .all(|d| d.last_issue().is_some_and(|at| at > from))
        });
    };
    each_goes_on("issuing");

    server.kill();
    std::thread::sleep(Duration::from_millis(300));
    server.start_again();
    each_goes_on("issuing after the restart");

    let closed = server.kill_connections();
    assert!(closed >= 2, "{}: {closed} connections closed", E::NAME);
    each_goes_on("issuing after the connections were closed");

    let mut seen = Seen::new();
    for (i, d) in drivers.into_iter().enumerate() {
        let log = d.finish();
        let stopped = log
            .failures
            .iter()
            .find(|(kind, ..)| matches!(kind, Failure::Lost | Failure::RecordLost));
        assert!(stopped.is_none(), "{}: holder {i}: {stopped:?}", E::NAME);
        seen.add(
            log.ids.into_iter().map(|(id, _)| id),
            &format!("holder {i}"),
        );
    }
    for g in holders {
        Arc::into_inner(g).unwrap().close().unwrap();
    }
    let later = state_dir();
    let g = leased(&later, config).open().unwrap();
    seen.add(g.next_ids(5000).unwrap().map(u64::from), "the next holder");
    g.close().unwrap();
}
