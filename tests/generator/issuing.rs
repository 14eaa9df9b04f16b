//! Issuing: threads, borrowed seconds, batches, shards and layouts, reservations.

use idutil_harness as harness;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use idutil::{Error, Generator, Id, Layout, ManualClock};

use crate::{builder, open, PER_SECOND, T};

#[test]
fn threads_share_one_strictly_increasing_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let generator = Arc::new(
        Generator::builder()
            .id_space(harness::space_for(dir.path()))
            .shard(9)
            .state_dir(dir.path())
            .open()
            .unwrap(),
    );
    const THREADS: usize = 4;
    const EACH: usize = 1_000_000;
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let g = Arc::clone(&generator);
            thread::spawn(move || {
                let mut ids = Vec::with_capacity(EACH);
                for _ in 0..EACH {
                    ids.push(g.next_id().unwrap());
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::with_capacity(THREADS * EACH);
    let mut seen = harness::Tally::with_capacity(THREADS * EACH);
    for (t, h) in handles.into_iter().enumerate() {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each thread sees strictly increasing IDs"
        );
        seen.add(ids.iter().copied().map(u64::from), &format!("thread {t}"));
        all.extend(ids);
    }
    assert!(all.iter().all(|id| *id <= Id::MAX && id.shard() == 9));
    all.sort_unstable();
    // The state file never lags the IDs issued.
    let report = idutil::state::inspect(dir.path(), 9).unwrap();
    let reserved = report.state.unwrap().high_water[&0];
    assert!(reserved >= all.last().unwrap().unix_seconds());
}

#[test]
fn borrows_the_next_second_when_the_sequence_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 1, &clock);
    let first: Vec<Id> = (0..PER_SECOND).map(|_| g.next_id().unwrap()).collect();
    assert!(first.iter().all(|id| id.unix_seconds() == T));
    assert_eq!(first[0].sequence(), 0);
    assert_eq!(first.last().unwrap().sequence(), 65_535);
    assert_eq!(g.lead(), 0);

    let borrowed = g.next_id().unwrap();
    assert_eq!(borrowed.unix_seconds(), T + 1, "borrowed the next second");
    assert_eq!(borrowed.sequence(), 0);
    assert!(borrowed > *first.last().unwrap());
    assert_eq!(g.lead(), 1);

    // When the clock reaches the borrowed second, nothing is repeated.
    clock.advance(1);
    let next = g.next_id().unwrap();
    assert_eq!((next.unix_seconds(), next.sequence()), (T + 1, 1));
    assert_eq!(g.lead(), 0);

    // A later clock second starts a fresh sequence.
    clock.advance(5);
    let later = g.next_id().unwrap();
    assert_eq!((later.unix_seconds(), later.sequence()), (T + 6, 0));
}

#[test]
fn batches_span_seconds_and_stay_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 5, &clock);
    let before = g.next_id().unwrap();
    let batch = g.next_ids(1_000_000).unwrap();
    assert_eq!(batch.len(), 1_000_000);
    let ids: Vec<Id> = batch.collect();
    assert!(ids[0] > before);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        ids.last().unwrap().unix_seconds(),
        T + 15,
        "15 borrowed seconds"
    );
    assert!(g.next_id().unwrap() > *ids.last().unwrap());
    assert_eq!(g.next_ids(0).unwrap().count(), 0);
    // The reservation covers the borrowed seconds before they are handed out.
    assert!(g.reserved_until() >= T + 15);
}

#[test]
fn a_closed_generator_issues_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 6, &clock);
    g.next_id().unwrap();
    g.close().unwrap();
    g.close().unwrap();
    assert!(matches!(g.next_id(), Err(Error::Closed)));
    assert!(matches!(g.next_ids(10), Err(Error::Closed)));
    // The shard is free again.
    let again = open(&dir, 6, &clock);
    again.next_id().unwrap();
}

#[test]
fn ids_carry_shard_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(31, 2, 14, 6, 1_600_000_000).unwrap();
    let clock = ManualClock::new(T);
    let g = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(63)
        .state_dir(dir.path())
        .layout(layout)
        .clock(clock)
        .open()
        .unwrap();
    let ids: Vec<Id> = (0..50_000).map(|_| g.next_id().unwrap()).collect();
    harness::assert_unique_set(&ids.iter().copied().map(u64::from).collect::<Vec<_>>());
    for id in ids {
        let p = layout.decode(id).unwrap();
        assert_eq!(p.shard, 63);
        assert_eq!(p.clock, 0);
        assert!(p.seconds >= T - 1_600_000_000);
    }
    let too_big = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(64)
        .state_dir(dir.path())
        .layout(layout)
        .open();
    assert!(matches!(
        too_big,
        Err(Error::ShardOutOfRange {
            shard: 64,
            max: 63,
            ..
        })
    ));
}

#[test]
fn a_long_burst_reserves_by_its_rate_not_by_its_lead() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 28, &clock);
    // Borrow two hours in one batch, then let the rate sample go quiet.
    let far = g.next_ids(7200 * PER_SECOND).unwrap().last().unwrap();
    assert!(g.reserved_until() >= far.unix_seconds());
    std::thread::sleep(std::time::Duration::from_millis(600));
    g.next_id().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    // A trickle of IDs (a quarter second's worth every 50 ms) now crosses
    // the next extension: it reserves a window and what the last quarter
    // second issued, not another two hours.
    let before = g.reserved_until();
    let mut last = far;
    while g.reserved_until() == before {
        std::thread::sleep(std::time::Duration::from_millis(50));
        last = g.next_ids(PER_SECOND / 4).unwrap().last().unwrap();
        assert!(
            last.unix_seconds() <= g.reserved_until(),
            "issued past the durable mark"
        );
    }
    let reserved = g.reserved_until();
    assert!(
        reserved <= last.unix_seconds() + idutil::DEFAULT_WINDOW.as_secs() + 3,
        "reserved {} s past the last ID at a trickle, with a lead of {} s",
        reserved - last.unix_seconds(),
        g.lead()
    );
}

#[test]
fn a_failed_reservation_write_stops_at_the_durable_mark_and_recovers() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    let clock = ManualClock::new(T);
    let g = Generator::builder()
        .id_space(harness::space_for(&dir))
        .shard(27)
        .state_dir(&dir)
        .clock(clock.clone())
        .window(Duration::from_secs(1))
        .open()
        .unwrap();
    let reserved = g.reserved_until();
    let before = g.next_id().unwrap();
    // No extension can be written: a directory takes the state file's name,
    // so the rename fails. (Deleting the state directory would fence the
    // generator for good instead.)
    let state = dir.join("shard-27.state");
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    clock.advance(10);
    let mut issued = vec![before];
    let err = loop {
        assert!(
            issued.len() < 1_000_000,
            "kept issuing without a durable mark"
        );
        match g.next_id() {
            Ok(id) => issued.push(id),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("state"), "{err}");
    // The caller waited on the shard thread's write: it gets that
    // write's own I/O error as the source, the system's error number
    // included, not a copy of its text.
    let source = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("no I/O source: {err:?}"));
    assert!(source.raw_os_error().is_some(), "{source:?}");
    assert!(
        issued.iter().all(|id| id.unix_seconds() <= reserved),
        "nothing past the durable mark {reserved}"
    );
    // The name is free again: the next call writes the reservation and goes
    // on.
    std::fs::remove_dir(&state).unwrap();
    let after = g.next_id().unwrap();
    assert!(after > *issued.last().unwrap());
    assert_eq!(after.unix_seconds(), T + 10);
    assert!(g.reserved_until() >= T + 10);
}

#[test]
fn no_window_setting_can_make_a_crash_skip_to_the_end_of_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = builder(&dir, 26, &clock)
        .window(Duration::MAX)
        .open()
        .unwrap();
    g.next_id().unwrap();
    // What a crash now would skip to: the durable mark, capped.
    assert!(
        g.reserved_until() <= T + idutil::MAX_WINDOW.as_secs(),
        "reserved until {} with the clock at {T}",
        g.reserved_until()
    );
}
