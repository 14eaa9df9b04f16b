//! The clock moving while a generator runs: rollbacks, moments far ahead, forward steps.

use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use idutil::{Error, Id, Layout, ManualClock};

use crate::{builder, open, T};

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
