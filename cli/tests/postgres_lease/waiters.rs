//! Calls that wait on a reservation the lease refuses: each gets the lease's own error.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::Error;
use idutil_harness::state_dir;

use crate::{leased, server};

/// The shard's row is deleted under a live holder, then several threads
/// at once ask for more IDs than the reserved window holds: the
/// reservation's raise of the row fails, and every call that waited on it
/// gets [`Error::Lease`] naming the lost shard, in every build (the
/// shard thread's error is shared with its waiters, not rebuilt per
/// variant). The TTL is long, so the renewal does not notice first: the
/// errors come from the failed reservation.
#[test]
fn every_waiter_of_a_refused_reservation_gets_the_lease_error() {
    let Some(pg) = server() else { return };
    let host = state_dir();
    let config = LeaseConfig::new(pg.tcp_url())
        .ttl(Duration::from_secs(60))
        .shards(5..=5);
    let g = Arc::new(leased(&host, config).open().unwrap());
    g.next_ids(10).unwrap();
    pg.psql("DELETE FROM idutil_lease WHERE shard = 5");
    let waiters = 4;
    let start = Arc::new(Barrier::new(waiters));
    let calls: Vec<_> = (0..waiters)
        .map(|_| {
            let (g, start) = (g.clone(), start.clone());
            // 1,000,000 IDs of the default layout's 65,536 a second: past
            // the 5-second window, so each call waits on a reservation.
            thread::spawn(move || {
                start.wait();
                g.next_ids(1_000_000).map(|_| ())
            })
        })
        .collect();
    for call in calls {
        let err = call.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, Error::Lease(LeaseError::RecordLost { .. })),
            "{err:?}"
        );
        assert_eq!(err.shard(), Some(5), "{err}");
    }
}
