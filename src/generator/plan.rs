//! The restart plan: where a generator starts after the last run, whatever
//! the state file and the clock say (`plan`), and the marks every state
//! file written must cover (`cover_seen`).

use crate::layout::Layout;
use crate::state::StateFile;

/// Raises the current clock value's mark, where needed, so that the state
/// written says what every state file must: the current mark covers this
/// run's latest clock reading and the exact last ID, and the highest mark
/// covers the highest reading of any run (see the `state` module docs).
/// Raising a mark only ever skips seconds.
pub(super) fn cover_seen(file: &mut StateFile) {
    let value = file.clock_value();
    let others = file
        .high_water
        .iter()
        .filter(|(c, _)| **c != value)
        .map(|(_, m)| *m)
        .max()
        .unwrap_or(0);
    let mark = file.high_water.entry(value).or_insert(0);
    *mark = (*mark).max(file.seen_last_run);
    if let Some((second, _)) = file.last {
        *mark = (*mark).max(second);
    }
    if others.max(*mark) < file.seen_max {
        *mark = file.seen_max;
    }
}

/// Where a generator starts, worked out from the previous state file and
/// the clock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The state to write (before the reservation is added).
    pub(crate) file: StateFile,
    /// The first counter value to hand out.
    pub(crate) start: u64,
    /// Seconds the wall clock went back across the restart, if it did.
    pub(crate) rollback: Option<u64>,
}

/// Decides where a generator opening at `now` (Unix seconds) starts.
///
/// All arithmetic is saturating or checked: whatever `prev` holds, the start
/// is never before what it records (at worst it is the end of the range).
/// A clock reading before the layout's epoch is recorded as the epoch; one
/// past its last second is not recorded at all (the previous run's readings
/// stay), so the file remains valid. The error is a reason for
/// [`Error::BadState`]: a clock id that cannot be bumped.
pub(crate) fn plan(
    prev: Option<StateFile>,
    layout: &Layout,
    shard: u32,
    now: u64,
) -> std::result::Result<Plan, String> {
    let epoch = layout.epoch();
    // Clamped one past the range, so an absurd clock or mark cannot
    // overflow the counter: it just reaches the end of the range.
    let end = layout.counter_end();
    let at = |unix_second: u64| layout.counter_at(unix_second);
    let now_counter = at(now);
    let in_range = now <= layout.last_unix_second();
    let reading = now.clamp(epoch, layout.last_unix_second());
    let Some(prev) = prev else {
        return Ok(Plan {
            file: StateFile {
                layout: *layout,
                shard,
                clock_id: 0,
                seen_max: reading,
                seen_last_run: reading,
                high_water: Default::default(),
                last: None,
                skip: None,
            },
            start: now_counter,
            rollback: None,
        });
    };
    let seen_last_run = if in_range {
        reading
    } else {
        prev.seen_last_run
    };
    let values = u64::from(layout.clock_values());
    let old_value = prev.clock_value();
    let rollback = prev
        .seen_last_run
        .checked_sub(seen_last_run)
        .filter(|d| *d > 0);
    let mut clock_id = prev.clock_id;
    if rollback.is_some() {
        let mark = |c: u32| prev.high_water.get(&c).copied();
        let value_after = |step: u64| ((u64::from(old_value) + step) % values) as u32;
        // The first clock value after the current one whose mark is behind
        // the clock runs on real time; failing that, the lowest mark.
        let behind = (1..=values).find(|&step| mark(value_after(step)).is_none_or(|m| m < now));
        let step = behind.unwrap_or_else(|| {
            (1..=values)
                .min_by_key(|&step| mark(value_after(step)))
                .unwrap_or(1)
        });
        // The bumped id must itself be bumpable through every clock value,
        // as every state file's must: what this run writes is read again.
        clock_id = clock_id
            .checked_add(step)
            .filter(|id| id.checked_add(values).is_some())
            .ok_or("clock_id is too large to be bumped")?;
    }
    let file = StateFile {
        clock_id,
        seen_max: prev.seen_max.max(seen_last_run),
        seen_last_run,
        last: None,
        ..prev
    };
    let value = file.clock_value();
    let after = match (file.high_water.get(&value), prev.last) {
        // A clean close under this clock value: right after the exact last ID.
        (_, Some((sec, seq))) if value == old_value => Some(
            at(sec)
                .saturating_add(u64::from(seq))
                .saturating_add(1)
                .min(end),
        ),
        // Otherwise after everything the reservation allowed.
        (Some(&mark), _) => Some(at(mark.saturating_add(1))),
        (None, _) => None,
    };
    let mut start = after.map_or(now_counter, |a| a.max(now_counter));
    let mut file = file;
    if let Some((first, last)) = file.skip {
        // The clock has reached the seconds issued far ahead: pass over
        // them, and the line has done its work.
        if start >= at(first) {
            start = start.max(at(last.saturating_add(1)));
            file.skip = None;
        }
    }
    Ok(Plan {
        file,
        start,
        rollback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::test_support::counter;
    use crate::generator::DEFAULT_WINDOW;
    use std::collections::BTreeMap;

    const L: Layout = Layout::DEFAULT;
    const T: u64 = 1_700_000_000;

    fn file(
        clock_id: u64,
        seen: u64,
        marks: &[(u32, u64)],
        last: Option<(u64, u32)>,
        layout: Layout,
    ) -> StateFile {
        StateFile {
            layout,
            shard: 1,
            clock_id,
            seen_max: seen,
            seen_last_run: seen,
            high_water: marks.iter().copied().collect::<BTreeMap<_, _>>(),
            last,
            skip: None,
        }
    }

    #[test]
    fn fresh_state_starts_at_the_clock() {
        let p = plan(None, &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 0));
        assert_eq!(p.file.clock_id, 0);
    }

    #[test]
    fn clean_close_continues_after_the_last_id() {
        let p = plan(Some(file(0, T, &[(0, T + 5)], Some((T, 41)), L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 42));
        assert_eq!(p.file.last, None, "the new run must not look closed");
    }

    #[test]
    fn crash_continues_after_the_reservation() {
        let p = plan(Some(file(0, T, &[(0, T + 5)], None, L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T + 6, 0));
    }

    #[test]
    fn rollback_without_clock_bits_continues_after_the_mark() {
        let p = plan(
            Some(file(4, T, &[(0, T + 5)], Some((T + 1, 7)), L)),
            &L,
            1,
            T - 3600,
        )
        .unwrap();
        assert_eq!(p.rollback, Some(3600));
        assert_eq!(p.file.clock_id, 5);
        assert_eq!(p.start, counter(&L, T + 1, 8));
        assert_eq!(p.file.seen_max, T, "the rollback must not count as lead");
    }

    #[test]
    fn rollback_with_clock_bits_moves_to_a_clock_value_behind_the_clock() {
        let l = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        // Values 1 and 2 were used up to after the rolled-back time, 3 is
        // behind it.
        let prev = file(
            0,
            T,
            &[(0, T + 5), (1, T), (2, T - 100), (3, T - 7200)],
            None,
            l,
        );
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_id, 3);
        assert_eq!(p.file.clock_value(), 3);
        assert_eq!(p.start, counter(&l, T - 3600, 0), "runs on real time");
    }

    #[test]
    fn rollback_with_every_mark_ahead_resumes_after_the_lowest() {
        let l = Layout::new(30, 1, 17, 5, L.epoch()).unwrap();
        let prev = file(0, T, &[(0, T + 5), (1, T - 10)], None, l);
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_value(), 1);
        assert_eq!(p.start, counter(&l, T - 9, 0));
    }

    #[test]
    fn unused_clock_value_is_behind_any_clock() {
        let l = Layout::new(30, 1, 17, 5, L.epoch()).unwrap();
        let prev = file(0, T, &[(0, T + 5)], None, l);
        let p = plan(Some(prev), &l, 1, T - 3600).unwrap();
        assert_eq!(p.file.clock_id, 1);
        assert_eq!(p.start, counter(&l, T - 3600, 0));
    }

    /// The counter one past the layout's last second: the end of the range.
    fn end(layout: &Layout) -> u64 {
        counter(layout, layout.last_unix_second() + 1, 0)
    }

    /// What opening writes: the plan's file with the first window reserved
    /// (as opening does).
    fn opened(p: &Plan, layout: &Layout, window: u64) -> StateFile {
        let mut file = p.file.clone();
        let start_sec = layout.counter_second(p.start);
        let reserved = (start_sec + window).min(layout.last_unix_second());
        let value = file.clock_value();
        let mark = file.high_water.get(&value).copied().unwrap_or(0);
        file.high_water.insert(value, mark.max(reserved));
        file
    }

    #[test]
    fn extreme_marks_and_last_ids_end_the_range_instead_of_wrapping() {
        for mark in [u64::MAX, u64::MAX - 1, L.last_unix_second(), 1 << 40] {
            let p = plan(Some(file(0, T, &[(0, mark)], None, L)), &L, 1, T).unwrap();
            assert_eq!(p.start, end(&L), "mark {mark}");
        }
        for last in [
            (u64::MAX, u32::MAX),
            (L.last_unix_second(), u32::MAX),
            (u64::MAX, 0),
        ] {
            let p = plan(Some(file(0, T, &[(0, u64::MAX)], Some(last), L)), &L, 1, T).unwrap();
            assert_eq!(p.start, end(&L), "last {last:?}");
        }
        // The last ID of the range: the next is past it.
        let last = (L.last_unix_second(), L.max_sequence());
        let p = plan(
            Some(file(0, T, &[(0, L.last_unix_second())], Some(last), L)),
            &L,
            1,
            T,
        )
        .unwrap();
        assert_eq!(p.start, end(&L));
        // A mark of 0 (below the epoch) never starts before the clock.
        let p = plan(Some(file(0, T, &[(0, 0)], None, L)), &L, 1, T).unwrap();
        assert_eq!(p.start, counter(&L, T, 0));
    }

    #[test]
    fn a_clock_id_that_cannot_be_bumped_is_an_error_not_a_wrap() {
        let l = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        let every = [(0, T + 5), (1, T + 5), (2, T + 5), (3, T + 5)];
        let err = plan(Some(file(u64::MAX, T, &every, None, l)), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        // Clock value 2 (u64::MAX - 1 mod 4) moves two steps on, to the
        // unused value 0: one past u64::MAX.
        let prev = file(u64::MAX - 1, T, &[(2, T + 5), (3, T + 5)], None, l);
        let err = plan(Some(prev), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        // A bumped id must leave room for every clock value, as the reader
        // requires of every file: what this run writes is read again.
        let prev = file(u64::MAX - 2, T, &[(1, T + 5), (2, T + 5)], None, l);
        let err = plan(Some(prev), &l, 1, T - 3600).unwrap_err();
        assert!(err.contains("clock_id"), "{err}");
        let prev = file(u64::MAX - 10, T, &[(1, T + 5), (2, T + 5)], None, l);
        let bumped = plan(Some(prev), &l, 1, T - 3600).unwrap().file;
        assert_eq!(
            bumped.clock_id,
            u64::MAX - 8,
            "two steps on, to unused value 3"
        );
        // Without a rollback nothing is bumped.
        let prev = file(u64::MAX, T, &[(3, T + 5)], None, l);
        assert_eq!(plan(Some(prev), &l, 1, T).unwrap().file.clock_id, u64::MAX);
    }

    #[test]
    fn clock_readings_outside_the_layout_are_never_recorded() {
        let last = L.last_unix_second();
        for now in [last + 1, last + 1000, u64::MAX] {
            let p = plan(None, &L, 1, now).unwrap();
            assert_eq!(p.start, end(&L), "{now}");
            assert_eq!((p.file.seen_max, p.file.seen_last_run), (last, last));

            let prev = file(2, T, &[(0, T + 5)], Some((T, 3)), L);
            let p = plan(Some(prev), &L, 1, now).unwrap();
            assert_eq!(p.start, end(&L), "{now}");
            assert_eq!(p.rollback, None);
            assert_eq!((p.file.seen_max, p.file.seen_last_run), (T, T), "{now}");
        }
        // Before the epoch: recorded as the epoch, a rollback if the last
        // run saw later, and the start is still after the last ID.
        for now in [0, L.epoch() - 1] {
            let p = plan(None, &L, 1, now).unwrap();
            assert_eq!((p.start, p.file.seen_max), (0, L.epoch()));
            let prev = file(2, T, &[(0, T + 5)], Some((T, 3)), L);
            let p = plan(Some(prev), &L, 1, now).unwrap();
            assert_eq!(p.rollback, Some(T - L.epoch()));
            assert_eq!(p.file.seen_last_run, L.epoch());
            assert_eq!(p.start, counter(&L, T, 4));
        }
    }

    #[test]
    fn what_opening_writes_is_always_a_valid_state_file() {
        let clocked = Layout::new(30, 2, 16, 5, L.epoch()).unwrap();
        let nows = [
            0,
            L.epoch(),
            T - 3600,
            T,
            T + 3600,
            L.last_unix_second() - 3,
        ];
        for layout in [L, clocked] {
            let last = layout.last_unix_second();
            let prevs = [
                None,
                Some(file(0, T, &[(0, T + 5)], Some((T, 41)), layout)),
                Some(file(1, T, &[(0, T + 5), (1, T + 9)], None, layout)),
                Some(file(
                    3,
                    T,
                    &[(0, T - 99), (3, T + 2)],
                    Some((T + 1, 0)),
                    layout,
                )),
                Some(file(0, last - 4, &[(0, last - 3)], None, layout)),
            ];
            // The files with clock values 1 and 3 are for the clocked layout only.
            let fits = |p: &Option<StateFile>| {
                p.as_ref()
                    .is_none_or(|p| p.high_water.keys().all(|&c| c < layout.clock_values()))
            };
            for prev in prevs.into_iter().filter(fits) {
                if let Some(prev) = &prev {
                    prev.check().expect("a valid previous file");
                }
                for now in nows {
                    for window in [1, DEFAULT_WINDOW.as_secs(), 1 << 20] {
                        let p = plan(prev.clone(), &layout, 1, now).unwrap();
                        let written = opened(&p, &layout, window);
                        written.check().unwrap_or_else(|e| {
                            panic!("{layout:?} {prev:?} at {now}, window {window}: {e}")
                        });
                    }
                }
            }
        }
    }
}
