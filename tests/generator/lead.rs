//! The lead cap: how far ahead of the clock a generator may borrow.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::{Error, Id, ManualClock};

use crate::{builder, PER_SECOND, T};

#[test]
fn the_lead_cap_stops_borrowing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = builder(&dir, 3, &clock)
        .max_lead(Duration::from_secs(2))
        .open()
        .unwrap();
    // Seconds T, T+1 and T+2 hold 3 * 65,536 IDs.
    let ids: Vec<Id> = g.next_ids(3 * PER_SECOND).unwrap().collect();
    assert_eq!(ids.last().unwrap().unix_seconds(), T + 2);
    assert_eq!(g.lead(), 2);
    match g.next_id_nowait() {
        Err(Error::LeadCapReached { lead, max_lead, .. }) => assert_eq!((lead, max_lead), (3, 2)),
        other => panic!("expected LeadCapReached, got {other:?}"),
    }
    // Refusals consume nothing: the cap is still exactly one second away.
    for _ in 0..100_000 {
        assert!(g.next_id_nowait().is_err());
    }
    // `next_id` waits for the clock instead. (Timed from before the ticker
    // starts: a pause of this thread between the two cannot shorten it.)
    let started = Instant::now();
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            clock.advance(1);
        })
    };
    let id = g.next_id().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200), "it waited");
    assert_eq!((id.unix_seconds(), id.sequence()), (T + 3, 0));
    ticker.join().unwrap();
}

#[test]
fn a_batch_the_lead_cap_can_never_let_through_is_refused_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = Arc::new(
        builder(&dir, 24, &clock)
            .max_lead(Duration::from_secs(1))
            .open()
            .unwrap(),
    );
    // Two seconds of sequence numbers span a lead of 1 from the start of
    // the clock's second; one more ID never fits, whatever the clock does.
    let call = {
        let g = Arc::clone(&g);
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || tx.send(g.next_ids(2 * PER_SECOND + 1).map(|b| b.len())));
        rx
    };
    for _ in 0..20 {
        clock.advance(1);
        thread::sleep(Duration::from_millis(10));
    }
    let got = call
        .recv_timeout(Duration::from_secs(10))
        .expect("next_ids waited for good");
    assert!(
        matches!(got, Err(Error::BatchTooLarge { n, max, .. }) if n == 2 * PER_SECOND + 1 && max == 2 * PER_SECOND),
        "{got:?}"
    );
    assert!(matches!(
        g.next_ids_nowait(2 * PER_SECOND + 1),
        Err(Error::BatchTooLarge { .. })
    ));
    // Nothing was taken: the largest batch the cap allows still fits.
    let ids: Vec<Id> = g.next_ids(2 * PER_SECOND).unwrap().collect();
    assert_eq!(ids[0].unix_seconds(), T + 20);
    assert_eq!(ids[0].sequence(), 0);
    assert_eq!(ids.last().unwrap().unix_seconds(), T + 21);
}

#[test]
fn a_rollback_does_not_count_towards_the_lead_cap() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = builder(&dir, 4, &clock)
        .max_lead(Duration::from_secs(1))
        .open()
        .unwrap();
    g.next_id().unwrap();
    clock.rewind(600);
    // Within the current second and one borrowed one: allowed.
    let ids: Vec<Id> = g.next_ids(PER_SECOND).unwrap().collect();
    assert!(ids.iter().all(|id| id.unix_seconds() >= T));
    assert_eq!(g.lead(), 1);
}
