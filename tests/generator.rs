//! Behaviour of one generator: threads, borrowing, clock rollbacks while
//! running, the end of the range, the lead cap and batches.

use idutil_harness as harness;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use idutil::{Builder, Error, Generator, Id, Layout, ManualClock};

const T: u64 = 1_700_000_000;
const PER_SECOND: u64 = 65_536;

/// A generator for `shard` in `dir` (and its own ID space), on `clock`.
fn builder(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Builder<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(shard)
        .state_dir(dir.path())
        .clock(clock.clone())
}

fn open(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    builder(dir, shard, clock).open().expect("open")
}

/// [`open`], with no end margin: the generator issues up to the layout's
/// very last ID.
fn full_range(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    builder(dir, shard, clock)
        .end_margin(Duration::ZERO)
        .open()
        .expect("open")
}

/// Captures warnings, so tests can check what was logged for their shard.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.level() <= log::Level::Warn {
            self.0.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn warnings() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(capture).expect("no other logger");
        log::set_max_level(log::LevelFilter::Warn);
        capture
    })
}

fn warnings_about(shard: u32, needle: &str) -> usize {
    let tag = format!("shard {shard}");
    warnings()
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains(&tag) && m.contains(needle))
        .count()
}

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
    for h in handles {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each thread sees strictly increasing IDs"
        );
        all.extend(ids);
    }
    assert!(all.iter().all(|id| *id <= Id::MAX && id.shard() == 9));
    all.sort_unstable();
    let before = all.len();
    all.dedup();
    assert_eq!(all.len(), before, "duplicate IDs across threads");
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
fn a_rollback_while_running_keeps_ids_increasing_and_warns_once() {
    warnings();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 2, &clock);
    let mut last = g.next_id().unwrap();
    clock.rewind(3600);
    let after_rewind = g.next_id().unwrap();
    assert!(after_rewind > last);
    last = after_rewind;
    for i in 0..200_000 {
        if i % 50_000 == 0 {
            clock.advance(1); // still an hour behind
        }
        let id = g.next_id().unwrap();
        assert!(id > last, "{id} after {last}");
        last = id;
    }
    assert!(last.unix_seconds() >= T, "IDs never go back with the clock");
    assert_eq!(
        warnings_about(2, "went back 3600 s"),
        1,
        "one warning with the size of the rollback"
    );
    assert_eq!(
        g.lead(),
        3,
        "200,000 IDs borrowed 3 seconds; the rollback is no lead"
    );
    // The clock catching up ends the rollback; a second one warns again.
    clock.set(T + 100);
    let caught_up = g.next_id().unwrap();
    assert_eq!(caught_up.unix_seconds(), T + 100);
    clock.rewind(10);
    assert!(g.next_id().unwrap() > caught_up);
    assert_eq!(warnings_about(2, "went back 10 s"), 1);
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
    let ids: HashSet<Id> = (0..50_000).map(|_| g.next_id().unwrap()).collect();
    assert_eq!(ids.len(), 50_000);
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
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (g, stop) = (Arc::clone(&g), Arc::clone(&stop));
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
                        }
                        Err(Error::ClockOutOfRange { .. }) => {}
                        Err(e) => panic!("with the clock flickering: {e:?}"),
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut second = T;
    while started.elapsed() < Duration::from_millis(1500) {
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

/// 2100-01-01T00:00:00Z.
const Y2100: u64 = 4_102_444_800;
/// 2106-02-07T06:28:16Z: where a 32-bit unsigned `time_t` wraps.
const TIME_T_WRAP: u64 = 1 << 32;

#[test]
fn a_clock_far_ahead_for_a_moment_neither_shifts_nor_ends_the_shard() {
    let _ = warnings();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = open(&dir, 9, &clock);
    let mut ids = vec![g.next_id().unwrap()];
    for far in [Y2100, TIME_T_WRAP] {
        clock.set(far);
        ids.extend(g.next_ids(1000).unwrap());
        clock.set(T);
        ids.extend(g.next_ids(1000).unwrap());
    }
    // The end of the range for a moment: in the end margin, so nothing is
    // issued on it and nothing recorded.
    clock.set(Layout::DEFAULT.last_unix_second() - 5);
    for _ in 0..3 {
        match g.next_id() {
            Err(Error::ClockOutOfRange { last, .. }) => {
                assert_eq!(last, Layout::DEFAULT.last_unix_second() - 86_400)
            }
            other => panic!("expected ClockOutOfRange, got {other:?}"),
        }
    }
    clock.set(T);
    ids.push(g.next_id().unwrap());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // Every ID is at the real time, where a query by time finds it.
    let at = std::time::UNIX_EPOCH + Duration::from_secs(T);
    for id in &ids {
        assert_eq!(id.unix_seconds(), T, "{id:?}");
        assert!(Id::min_at(at).unwrap() <= *id && *id <= Id::max_at(at).unwrap());
    }
    assert!(g.reserved_until() < T + 60, "{}", g.reserved_until());
    assert_eq!(warnings_about(9, "jumped"), 2);
    drop(g);
    // What the file keeps is the real time too: the next run starts there.
    let g = open(&dir, 9, &clock);
    let next = g.next_id().unwrap();
    assert!(next > *ids.last().unwrap() && next.unix_seconds() < T + 60);
}

#[test]
fn a_forward_step_that_holds_is_followed_once_confirmed() {
    let _ = warnings();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T);
    let g = builder(&dir, 10, &clock)
        .clock_step_confirm(Duration::from_secs(1))
        .open()
        .unwrap();
    let ten_days = T + 10 * 86_400;
    clock.set(ten_days);
    assert_eq!(
        g.next_id().unwrap().unix_seconds(),
        T,
        "not followed at once"
    );
    thread::sleep(Duration::from_millis(1300));
    // The clock kept the step (and ran on with real time).
    clock.set(ten_days + 1);
    let id = g.next_id().unwrap();
    assert_eq!(id.unix_seconds(), ten_days + 1, "followed once confirmed");
    assert_eq!(warnings_about(10, "following it"), 1);
    // Without a limit, every step is followed at once.
    let dir = tempfile::tempdir().unwrap();
    let g = builder(&dir, 11, &clock)
        .max_clock_step(None)
        .open()
        .unwrap();
    clock.set(Y2100);
    assert_eq!(g.next_id().unwrap().unix_seconds(), Y2100);
}
