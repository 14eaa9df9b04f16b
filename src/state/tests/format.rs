//! The state file's text: what parses, what is refused and why.

use super::{sample, LAST};
use crate::layout::{Layout, EPOCH_2000};
use crate::state::format::{checksum, lines, LineKind};
use crate::state::StateFile;

#[test]
fn round_trips() {
    let s = sample();
    assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
    let s = StateFile { last: None, ..s };
    assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
}

#[test]
fn rejects_damage() {
    let good = sample().render();
    let truncated = &good[..good.len() - 4];
    let cases = [
        ("", "empty"),
        ("garbage", "line 1 is malformed"),
        (truncated, "truncated"),
        (
            &good.replace("version = 2", "version = 4"),
            "unknown version",
        ),
        (&good.replace("clock_id = 3", "clock_id = x"), "clock_id"),
        (
            &good.replace("clock_id = 3", "clock_id = 3\nclock_id = 4"),
            "twice",
        ),
        (&good.replace("end", "end\nshard = 1"), "after the end"),
        (&good.replace("seen_max", "seen_maxx"), "unknown field"),
        (&good.replace("0:1763751239", "0;1763751239"), "high_water"),
        (&good.replace("0:1763751239", "1:1763751239"), "clock value"),
        (
            &good.replace("last = 1763751236 17", "last = 1763751236"),
            "last",
        ),
        (
            &good.replace("epoch:946684800", "epoch:18446744073709551615"),
            "too late",
        ),
    ];
    for (text, want) in cases {
        let err = StateFile::parse(text).unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
    }
}

/// The sample with one field changed, rendered, parsed and checked.
fn refused(edit: impl FnOnce(&mut StateFile)) -> String {
    let mut s = sample();
    edit(&mut s);
    StateFile::parse(&s.render()).expect_err("refused")
}

fn text_refused(text: &str) -> String {
    StateFile::parse(text).expect_err("refused")
}

#[test]
fn every_second_lies_within_the_layout() {
    let l = Layout::DEFAULT;
    assert_eq!(l.last_unix_second(), LAST);
    for bad in [0, l.epoch() - 1, LAST + 1, 300_000_000_000, u64::MAX] {
        let all_high = |s: &mut StateFile| {
            s.high_water.insert(0, bad);
            s.seen_max = bad;
            s.seen_last_run = bad;
            s.last = Some((bad, 0));
        };
        for (what, err) in [
            ("seen_max", refused(|s| s.seen_max = bad)),
            ("seen_last_run", refused(|s| s.seen_last_run = bad)),
            (
                "high_water",
                refused(|s| {
                    s.high_water.insert(0, bad);
                }),
            ),
            ("last issued second", refused(|s| s.last = Some((bad, 0)))),
            ("range", refused(all_high)),
        ] {
            assert!(err.contains(what), "{bad}: {what}: {err}");
            assert!(err.contains("range"), "{bad}: {err}");
        }
    }
    // The ends of the range themselves are fine.
    for edge in [l.epoch(), LAST] {
        let s = StateFile {
            seen_max: edge,
            seen_last_run: edge,
            high_water: [(0, edge)].into_iter().collect(),
            last: Some((edge, u32::from(u16::MAX))),
            ..sample()
        };
        assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
    }
}

#[test]
fn the_mark_must_not_wrap_or_be_empty_or_zero() {
    let good = sample().render();
    for (mark, want) in [
        ("0:18446744073709551615", "range"),
        ("0:18446744073709551616", "out of range"),
        ("", "empty"),
        ("0:0", "range"),
        ("0:", "not a number"),
        (":1763751239", "not a number"),
        ("0:-5", "not a number"),
        ("0:1763751239 0:1000000000", "twice"),
        ("0:1000000000 0:1763751239", "twice"),
    ] {
        let text = good.replace("high_water = 0:1763751239", &format!("high_water = {mark}"));
        let err = text_refused(&text);
        assert!(err.contains(want), "{mark:?}: {err}");
    }
}

#[test]
fn the_current_mark_covers_the_last_run_and_the_last_id() {
    let err = refused(|s| s.last = Some((1_763_751_240, 0)));
    assert!(err.contains("below the last issued second"), "{err}");
    let err = refused(|s| s.last = Some((0, 0)));
    assert!(err.contains("range"), "{err}");
    let err = refused(|s| {
        s.seen_max = 1_763_751_300;
        s.seen_last_run = 1_763_751_240;
    });
    assert!(err.contains("below seen_last_run"), "{err}");
    let err = refused(|s| s.seen_max = 1_763_751_240);
    assert!(err.contains("below seen_max"), "{err}");
    let err = refused(|s| s.seen_last_run = s.seen_max + 1);
    assert!(err.contains("seen_last_run is above seen_max"), "{err}");
    let err = refused(|s| s.last = Some((1_763_751_236, 65_536)));
    assert!(err.contains("sequence"), "{err}");
    let err = refused(|s| s.shard = 32);
    assert!(err.contains("shard"), "{err}");
}

#[test]
fn clock_values_and_the_clock_id() {
    let l = Layout::new(30, 2, 16, 5, EPOCH_2000).unwrap();
    let t = 1_763_751_234;
    let clocked = StateFile {
        layout: l,
        clock_id: 6, // clock value 2
        seen_max: t + 100,
        seen_last_run: t,
        // Value 2 runs on real time after a rollback; value 0 holds the
        // highest second seen.
        high_water: [(0, t + 105), (2, t + 5)].into_iter().collect(),
        last: None,
        ..sample()
    };
    assert_eq!(StateFile::parse(&clocked.render()).unwrap(), clocked);

    let missing = StateFile {
        clock_id: 5,
        ..clocked.clone()
    };
    let err = StateFile::parse(&missing.render()).unwrap_err();
    assert!(
        err.contains("no mark for the current clock value 1"),
        "{err}"
    );

    let text = clocked.render().replace("2:", "4:");
    assert!(text_refused(&text).contains("does not fit"));

    for id in [u64::MAX, u64::MAX - 3] {
        let err = StateFile::parse(
            &StateFile {
                clock_id: id,
                ..clocked.clone()
            }
            .render(),
        )
        .unwrap_err();
        assert!(err.contains("too large to be bumped"), "{id}: {err}");
    }
    // The highest clock id that can still be bumped through all four
    // clock values.
    let highest = StateFile {
        clock_id: u64::MAX - 4,
        high_water: [(0, t + 105), (3, t + 5)].into_iter().collect(),
        ..clocked.clone()
    };
    assert_eq!(highest.clock_value(), 3);
    assert_eq!(StateFile::parse(&highest.render()).unwrap(), highest);
}

#[test]
fn reasons_never_quote_the_file() {
    let secret = "hunter2-0123456789";
    let good = sample().render();
    let texts = [
        format!("{secret}\n"),
        format!("password = {secret}\n"),
        good.replace("version = 2", &format!("version = {secret}")),
        good.replace("shard = 7", &format!("shard = {secret}")),
        good.replace("clock_id = 3", &format!("clock_id = {secret}")),
        good.replace("0:1763751239", &format!("0:{secret}")),
        good.replace("0:1763751239", &format!("{secret}:1763751239")),
        good.replace("last = 1763751236 17", &format!("last = {secret}")),
        good.replace("epoch:946684800", &format!("epoch:{secret}")),
        good.replace("end\n", &format!("end\n{secret}\n")),
        good.replace("seen_max", secret),
    ];
    for text in &texts {
        let err = text_refused(text);
        assert!(!err.contains("hunter2"), "{err}");
        assert!(!err.contains("0123456789"), "{err}");
    }
}

#[test]
fn the_checksum_covers_every_byte_before_its_line() {
    let text = sample().render();
    let at = text.find("checksum = ").unwrap();
    let line = format!("checksum = {}\nend\n", checksum(&text[..at]));
    assert_eq!(&text[at..], line);
}

#[test]
fn lines_are_read_one_way_for_both_readers() {
    use LineKind::{Blank, End, Field, Malformed};
    let text = "# c\n\nversion = 2\n  end  \nbad\nlast = 1 2";
    let seen: Vec<_> = lines(text)
        .map(|l| (l.number, l.start, l.complete, l.kind))
        .collect();
    let version = Field {
        key: "version",
        value: "2",
    };
    let last = Field {
        key: "last",
        value: "1 2",
    };
    assert_eq!(
        seen,
        [
            (1, 0, true, Blank),
            (2, 4, true, Blank),
            (3, 5, true, version),
            (4, 17, true, End),
            (5, 25, true, Malformed),
            (6, 29, false, last),
        ]
    );
}
