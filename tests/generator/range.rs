//! The end of the layout's range, and clocks outside it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::{Error, Generator, Id, Layout, ManualClock};

use crate::{builder, open, PER_SECOND, T};

/// [`open`], with no end margin: the generator issues up to the layout's
/// very last ID.
fn full_range(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    builder(dir, shard, clock)
        .end_margin(Duration::ZERO)
        .open()
        .expect("open")
}

#[test]
fn stops_cleanly_at_the_end_of_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let last_second = Layout::DEFAULT.last_unix_second();
    assert_eq!(last_second, 5_241_652_095, "2136-02-07T06:28:15Z");
    let clock = ManualClock::new(last_second);
    let g = full_range(&dir, 31, &clock);
    let ids: Vec<Id> = g.next_ids(PER_SECOND).unwrap().collect();
    assert_eq!(
        *ids.last().unwrap(),
        Id::MAX,
        "the very last ID is 2^53 - 1"
    );
    for _ in 0..3 {
        match g.next_id() {
            Err(Error::EndOfRange {
                last_unix_second, ..
            }) => {
                assert_eq!(last_unix_second, last_second)
            }
            other => panic!("expected EndOfRange, got {other:?}"),
        }
    }
    assert!(matches!(g.next_ids(1), Err(Error::EndOfRange { .. })));
    drop(g);
    // A clock past the range cannot even open the shard.
    clock.advance(1000);
    let refused = builder(&dir, 31, &clock).end_margin(Duration::ZERO).open();
    assert!(matches!(refused, Err(Error::ClockOutOfRange { .. })));
    // Back at the last second, the shard knows its last ID was used.
    clock.set(last_second);
    let g = full_range(&dir, 31, &clock);
    assert!(matches!(g.next_id(), Err(Error::EndOfRange { .. })));
}

#[test]
fn a_batch_that_would_cross_the_end_of_the_range_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Layout::DEFAULT.last_unix_second());
    let g = full_range(&dir, 30, &clock);
    assert!(matches!(
        g.next_ids(PER_SECOND + 1),
        Err(Error::EndOfRange { .. })
    ));
    // Nothing was consumed by the refusal.
    assert_eq!(g.next_id().unwrap().sequence(), 0);
}

#[test]
fn a_clock_outside_the_layout_issues_nothing_records_nothing_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 29, &clock);
    let mut last = g.next_id().unwrap();
    let readings = [
        u64::MAX,
        u64::MAX / 3,
        1 << 40,
        Layout::DEFAULT.last_unix_second() + 1,
        Layout::DEFAULT.epoch() - 1,
        0,
    ];
    for reading in readings {
        clock.set(reading);
        for _ in 0..3 {
            match g.next_id() {
                Err(Error::ClockOutOfRange { unix_second, .. }) => {
                    assert_eq!(unix_second, reading)
                }
                other => panic!("{reading}: expected ClockOutOfRange, got {other:?}"),
            }
        }
        assert!(g.next_ids(10).is_err());
        // The clock is sane again: issuing goes on where it was.
        clock.set(T);
        let id = g.next_id().unwrap();
        assert!(id > last && id.unix_seconds() == T, "{reading}: {id:?}");
        last = id;
    }
    assert!(g.lead() == 0, "an absurd reading is not lead");
    g.close().unwrap();
    let state = std::fs::read_to_string(dir.path().join("shard-29.state")).unwrap();
    for reading in readings {
        assert!(
            !state.contains(&reading.to_string()) || reading == 0,
            "{reading} was recorded:\n{state}"
        );
    }
    let g = open(&dir, 29, &clock);
    assert!(g.next_id().unwrap() > last);
}

#[test]
fn a_clock_flickering_out_of_the_layout_while_threads_issue_is_never_the_end_of_the_range() {
    // One thread's call can see the out-of-range flag in the cursor just
    // before another thread, back in range, clears it: the call must then
    // retry, not read the flag as a second past the end.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = Arc::new(open(&dir, 25, &clock));
    let stop = Arc::new(AtomicBool::new(false));
    // Per thread: IDs issued, and calls refused for the clock.
    let counts: Arc<Vec<[AtomicU64; 2]>> = Arc::new(
        (0..4)
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect(),
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (g, stop, counts) = (Arc::clone(&g), Arc::clone(&stop), Arc::clone(&counts));
            thread::spawn(move || {
                let mut last = None;
                while !stop.load(Relaxed) {
                    let got = if t % 2 == 0 {
                        g.next_id()
                    } else {
                        g.next_ids(3).map(|b| b.last().unwrap())
                    };
                    match got {
                        Ok(id) => {
                            assert!(Some(id) > last, "{id:?} after {last:?}");
                            last = Some(id);
                            counts[t][0].fetch_add(1, Relaxed);
                        }
                        Err(Error::ClockOutOfRange { .. }) => {
                            counts[t][1].fetch_add(1, Relaxed);
                        }
                        Err(e) => panic!("with the clock flickering: {e:?}"),
                    }
                }
            })
        })
        .collect();
    // At least 1.5 s of flickering, and until every thread has both issued
    // IDs and been refused for the clock, however slow the machine.
    let started = Instant::now();
    let mut second = T;
    let enough = || {
        counts
            .iter()
            .all(|c| c.iter().all(|n| n.load(Relaxed) >= 10))
    };
    while (started.elapsed() < Duration::from_millis(1500) || !enough())
        && !threads.iter().any(thread::JoinHandle::is_finished)
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "issued and refused per thread: {counts:?}"
        );
        clock.set(Layout::DEFAULT.epoch() - 1);
        thread::sleep(Duration::from_micros(50));
        second += 1;
        clock.set(second);
        thread::sleep(Duration::from_micros(50));
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}
