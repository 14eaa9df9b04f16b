//! Recovery: what is certain in a damaged file, where a shard resumes,
//! and writing the plan.

use std::fs;
use std::path::Path;
use std::time::Duration;

use super::{sample, LAST};
use crate::error::Error;
use crate::generator::DEFAULT_WINDOW;
use crate::layout::{Layout, EPOCH_2000};
use crate::state::recover::plan_recovery_from;
use crate::state::{
    inspect, plan_recovery, state_path, OldState, RecoverOptions, Recovery, StateFile,
};

const NOW: u64 = 1_763_751_300;

/// The plan, or the refusal's message followed by `(remedy R)`.
fn plan_for(old: Option<&str>, options: &RecoverOptions) -> std::result::Result<Recovery, String> {
    let old = old.map(|t| t.as_bytes().to_vec());
    plan_recovery_from(
        Path::new("/state"),
        7,
        &Layout::DEFAULT,
        options,
        old,
        None,
        NOW,
    )
    .map_err(|e| match &e {
        Error::RecoveryRefused { remedy, .. } => match remedy {
            Some(remedy) => format!("{e} (remedy {remedy:?})"),
            None => format!("{e} (remedy None)"),
        },
        _ => e.to_string(),
    })
}

/// A state file as idutil wrote it before files carried a checksum:
/// the case where a damaged file's legible fields are all there is.
fn unsummed(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("checksum ="))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("version = 2", "version = 1")
}

#[test]
fn a_checksum_catches_a_changed_digit_and_makes_nothing_certain() {
    let good = borrowed().render();
    assert!(StateFile::parse(&good).is_ok());
    assert!(StateFile::parse(&unsummed(&good)).is_ok(), "older files");
    // One digit of the mark lowered: still a consistent file, but not
    // the one written.
    let edited = good.replace(&format!("0:{}", NOW + 3_000), &format!("0:{}", NOW + 1_000));
    let err = StateFile::parse(&edited).unwrap_err();
    assert!(err.contains("checksum"), "{err}");
    // So recovery cannot trust the mark, nor any other field.
    let err = plan_for(Some(&edited), &RecoverOptions::new()).unwrap_err();
    assert!(
        err.contains("checksum") && err.contains("(remedy After)"),
        "{err}"
    );
    let r = plan_for(Some(&edited), &RecoverOptions::new().after(NOW + 5_000)).unwrap();
    assert!(r.resume_after >= NOW + 5_000);
    // Without a checksum, a mark below what the file says was seen is
    // not certain either.
    let seen = unsummed(&good).replace(
        &format!("seen_max = {NOW}"),
        &format!("seen_max = {}", NOW + 4_000),
    );
    let err = plan_for(Some(&seen), &RecoverOptions::new()).unwrap_err();
    assert!(err.contains("below"), "{err}");

    // An uncertain mark still counts as evidence: a vouched-for time earlier
    // than a legible mark never makes the shard resume before it.
    let mark = NOW + 3_000;
    let cut = good.replace("checksum = ", "checksum = 0");
    for (damaged, what) in [(&cut, "checksum"), (&edited, "changed digit")] {
        let r = plan_for(Some(damaged), &RecoverOptions::new().after(NOW)).unwrap();
        let legible = if damaged == &cut { mark } else { NOW + 1_000 };
        assert!(r.resume_after > legible, "{what}: {}", r.resume_after);
    }
}

/// A crashed, borrowed-ahead state: the mark is far past the clock.
fn borrowed() -> StateFile {
    StateFile {
        seen_max: NOW,
        seen_last_run: NOW,
        high_water: [(0, NOW + 3_000)].into_iter().collect(),
        last: None,
        ..sample()
    }
}

#[test]
fn recovery_refuses_without_a_certain_mark_unless_a_time_is_vouched_for() {
    let good = unsummed(&borrowed().render());
    let truncated_in_mark = &good[..good.find("high_water = ").unwrap() + 17];
    let truncated_before = &good[..good.find("high_water").unwrap()];
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "no state file"),
        (Some(String::new()), "no legible version"),
        (Some(truncated_in_mark.into()), "no complete high_water"),
        (Some(truncated_before.into()), "no complete high_water"),
        (
            Some(good.replace("version = 1", "version = 7")),
            "unknown version",
        ),
        (
            Some(good.replace("high_water", "high_wa\0er")),
            "no complete high_water",
        ),
        (
            Some(good.replace(&format!("0:{}", NOW + 3_000), "")),
            "empty",
        ),
        (
            Some(good.replace(&format!("0:{}", NOW + 3_000), "0:0")),
            "outside",
        ),
        (
            Some(good.replace(&format!("0:{}", NOW + 3_000), "0:18446744073709551615")),
            "outside",
        ),
        (
            Some(good.replace(&format!("0:{}", NOW + 3_000), "0:99999999999999999999")),
            "outside",
        ),
        (
            Some(good.replace(&format!("0:{}", NOW + 3_000), "0:1x")),
            "malformed",
        ),
        (
            Some(good.replace(
                &format!("0:{}", NOW + 3_000),
                &format!("0:{} 0:1000000000", NOW + 3_000),
            )),
            "twice",
        ),
        (
            Some(good.replace("shard = 7", "shard = 8")),
            "another shard",
        ),
    ];
    for (old, want) in cases {
        let err = plan_for(old.as_deref(), &RecoverOptions::new()).unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
        assert!(err.contains("(remedy After)"), "{want}: {err}");
        // Vouching for a time is enough, and the recovery resumes after it.
        let vouched = NOW + 10_000;
        let r = plan_for(old.as_deref(), &RecoverOptions::new().after(vouched)).unwrap();
        assert!(
            r.resume_after >= vouched + DEFAULT_WINDOW.as_secs(),
            "{want}"
        );
        assert_eq!(r.kept_as.is_some(), old.is_some(), "{want}");
    }
}

#[test]
fn recovery_resumes_after_every_legible_second_plus_the_window() {
    let good = unsummed(&borrowed().render());
    let mark = NOW + 3_000;
    // A damaged line elsewhere: the mark is certain and wins.
    let damaged = good.replace(&format!("seen_max = {NOW}"), "\0\0\0\0");
    let r = plan_for(Some(&damaged), &RecoverOptions::new()).unwrap();
    assert!(matches!(r.found, OldState::Damaged { .. }), "{:?}", r.found);
    assert_eq!((r.latest, r.latest_from), (mark, "the high-water mark"));
    assert_eq!(r.resume_after, mark + DEFAULT_WINDOW.as_secs());
    assert_eq!(r.clock_id, 4, "bumped from 3");
    assert_eq!(r.new_state().high_water[&0], r.resume_after);

    // A last ID above the mark: a generator never writes that, so the
    // mark is not certain; a vouched-for time is needed.
    let above = good.replace("end\n", &format!("last = {} 5\nend\n", mark + 50));
    let err = plan_for(Some(&above), &RecoverOptions::new()).unwrap_err();
    assert!(err.contains("below the last issued ID"), "{err}");
    let r = plan_for(Some(&above), &RecoverOptions::new().after(mark + 50)).unwrap();
    assert!(matches!(r.found, OldState::Damaged { .. }));
    assert_eq!(r.latest, mark + 50);

    // `last = 0 0`: refused by a generator, ignored as evidence here.
    let zero = good.replace("end\n", "last = 0 0\nend\n");
    let r = plan_for(Some(&zero), &RecoverOptions::new()).unwrap();
    assert_eq!(r.latest, mark);

    // A later vouched-for time wins; an earlier one changes nothing.
    let r = plan_for(Some(&damaged), &RecoverOptions::new().after(mark + 99)).unwrap();
    assert_eq!(
        (r.latest, r.latest_from),
        (mark + 99, "the time vouched for")
    );
    let r = plan_for(Some(&damaged), &RecoverOptions::new().after(NOW - 99)).unwrap();
    assert_eq!(r.latest, mark);

    // Non-UTF-8 bytes in a comment do not hide the mark.
    let mut bytes = damaged.clone().into_bytes();
    bytes.splice(2..2, [0xff, 0xfe]);
    let r = plan_recovery_from(
        Path::new("/state"),
        7,
        &Layout::DEFAULT,
        &RecoverOptions::new(),
        Some(bytes),
        None,
        NOW,
    )
    .unwrap();
    assert_eq!(r.latest, mark);

    // The wall clock counts too, and the window is the caller's.
    let old_mark = good.replace(&format!("0:{mark}"), &format!("0:{}", NOW - 500));
    let old_mark = old_mark.replace(&format!("= {NOW}\n"), &format!("= {}\n", NOW - 600));
    let old_mark = old_mark.replace("version = 1", "version = 1\n\0");
    let r = plan_for(
        Some(&old_mark),
        &RecoverOptions::new().window(Duration::from_secs(60)),
    )
    .unwrap();
    assert_eq!((r.latest, r.latest_from), (NOW, "the wall clock"));
    assert_eq!(r.resume_after, NOW + 60);
}

#[test]
fn recovery_refuses_a_healthy_file_unless_forced() {
    let healthy = borrowed().render();
    let err = plan_for(Some(&healthy), &RecoverOptions::new()).unwrap_err();
    assert!(
        err.contains("healthy") && err.contains("(remedy Force)"),
        "{err}"
    );
    let r = plan_for(Some(&healthy), &RecoverOptions::new().force(true)).unwrap();
    assert_eq!(r.found, OldState::Healthy);
    assert_eq!(r.resume_after, NOW + 3_000 + DEFAULT_WINDOW.as_secs());

    // A sound file for another layout needs no forcing; its marks count.
    let other = StateFile {
        layout: Layout::new(30, 2, 16, 5, EPOCH_2000).unwrap(),
        clock_id: 4, // clock value 0, which has the mark
        ..borrowed()
    };
    let r = plan_for(Some(&other.render()), &RecoverOptions::new()).unwrap();
    assert_eq!(r.found, OldState::OtherLayout(other.layout));
    assert_eq!(r.latest, NOW + 3_000);
}

#[test]
fn recovery_never_creates_a_dead_shard() {
    let err = plan_for(None, &RecoverOptions::new().after(LAST + 1)).unwrap_err();
    assert!(err.contains("past the layout's last second"), "{err}");
    let err = plan_for(None, &RecoverOptions::new().after(u64::MAX)).unwrap_err();
    assert!(err.contains("past the layout's last second"), "{err}");
    let err = plan_for(None, &RecoverOptions::new().after(LAST - 2)).unwrap_err();
    assert!(err.contains("no second of the layout"), "{err}");
    let err = plan_for(
        None,
        &RecoverOptions::new().after(NOW).window(Duration::MAX),
    )
    .unwrap_err();
    assert!(err.contains("no second of the layout"), "{err}");
    // The last usable resumption leaves exactly one second.
    let r = plan_for(
        None,
        &RecoverOptions::new().after(LAST - 1 - DEFAULT_WINDOW.as_secs()),
    )
    .unwrap();
    assert_eq!(r.resume_after, LAST - 1);
    assert_eq!(r.found, OldState::Missing);
    assert_eq!(r.kept_as, None);
}

#[test]
fn recovery_bumps_the_clock_id_with_checked_arithmetic() {
    let good = unsummed(&borrowed().render());
    let damaged = good.replace("version = 1", "version = 1\n\0");
    let r = plan_for(Some(&damaged), &RecoverOptions::new()).unwrap();
    assert_eq!(r.clock_id, 4);
    // One that cannot be bumped further starts again from 1: every
    // clock value resumes after the same second.
    for id in [u64::MAX, u64::MAX - 1] {
        let max = damaged.replace("clock_id = 3", &format!("clock_id = {id}"));
        let r = plan_for(Some(&max), &RecoverOptions::new()).unwrap();
        assert_eq!(r.clock_id, 1);
        r.new_state().check().unwrap();
    }
    // An illegible clock id restarts the count at 1.
    let gone = damaged.replace("clock_id = 3", "clock_id = ?");
    assert_eq!(
        plan_for(Some(&gone), &RecoverOptions::new())
            .unwrap()
            .clock_id,
        1
    );
}

#[test]
fn recovery_writes_a_valid_state_and_keeps_the_old_bytes_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let path = state_path(dir.path(), 7);
    let damaged = unsummed(&borrowed().render()).replace("version = 1", "version = 1\n\0");
    fs::write(&path, &damaged).unwrap();
    // Whatever sits at the copy's path is replaced, not written through.
    let target = dir.path().join("precious");
    fs::write(&target, "keep me").unwrap();
    let kept = dir.path().join("shard-7.state.bad");
    std::os::unix::fs::symlink(&target, &kept).unwrap();

    let r = plan_recovery(dir.path(), 7, &Layout::DEFAULT, &RecoverOptions::new()).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        damaged,
        "planning changes nothing"
    );
    // The file changing between planning and applying is refused.
    fs::write(&path, format!("{damaged}\n")).unwrap();
    let err = r.apply().unwrap_err();
    assert!(matches!(err, Error::RecoveryRefused { .. }), "{err}");
    fs::write(&path, &damaged).unwrap();
    r.apply().unwrap();

    assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
    assert!(!fs::symlink_metadata(&kept)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read_to_string(&kept).unwrap(), damaged);
    let now = inspect(dir.path(), 7).unwrap().state.unwrap();
    assert_eq!(&now, r.new_state());
    assert_eq!(now.high_water[&0], r.resume_after);
}
