//! What is refused: a second generator, damaged state, another layout; and recovering.

use idutil_harness as harness;

use std::path::Path;

use idutil::state::{self, RecoverOptions, Remedy};
use idutil::{Error, Generator, Id, Layout, ManualClock};
use idutil_harness::{on_disk, Damage, Ledger};

use crate::{issue, open_at, open_layout_at, CLOCKED, T};

#[test]
fn generators_for_a_shard_in_one_process_share_it_and_another_directory_is_refused() {
    let dir = harness::state_dir();
    let open = |space: String, dir: &Path| {
        Generator::builder()
            .id_space(space)
            .shard(5)
            .state_dir(dir)
            .open()
    };
    let space = harness::space_for(dir.path());
    let first = open(space.clone(), dir.path()).unwrap();
    // In the same ID space and directory a second generator shares the
    // shard; in another ID space, the directory's files are shared all
    // the same. Each issues in increasing order, and none repeats another.
    let second = open(space.clone(), dir.path()).expect("the shard is shared");
    let third = open(format!("{space}-other"), dir.path()).expect("shared across spaces");
    let mut all = Vec::new();
    for g in [&first, &second, &third] {
        let ids: Vec<u64> = (0..2_000).map(|_| g.next_id().unwrap().as_u64()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "increasing within a generator"
        );
        all.extend(ids);
    }
    // Interleaved too.
    for _ in 0..500 {
        for g in [&first, &second, &third] {
            all.push(g.next_id().unwrap().as_u64());
        }
    }
    harness::assert_unique_set(&all);

    // Another state directory for the shard in the same ID space is refused,
    // naming both directories and the holder.
    let elsewhere = harness::state_dir();
    let err = open(space.clone(), elsewhere.path()).expect_err("one directory per shard");
    match &err {
        Error::HostLocked {
            shard: 5,
            pid: Some(p),
            ..
        } => assert_eq!(*p, std::process::id()),
        other => panic!("expected Error::HostLocked, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(
        msg.contains(&elsewhere.path().display().to_string()),
        "{msg}"
    );

    // Once every member closed, the shard is free again, and continues
    // after everything any of them issued.
    let max = *all.iter().max().unwrap();
    for g in [first, second, third] {
        g.close().unwrap();
    }
    let again = open(space, dir.path()).unwrap();
    assert!(again.next_id().unwrap().as_u64() > max);
}

/// Issues from shard `shard` in `dir` on the system clock: `n` IDs in one
/// batch, then a few more one by one; closes cleanly.
fn issue_system(dir: &Path, shard: u32, n: u64) -> Vec<u64> {
    let g = Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .open()
        .unwrap();
    let mut ids: Vec<u64> = g.next_ids(n).unwrap().map(Id::as_u64).collect();
    ids.extend(issue(&g, 10));
    g.close().unwrap();
    ids
}

fn assert_refused(dir: &Path, shard: u32, damaged: &[u8], kind: Damage) {
    let path = harness::state_file(dir, shard);
    let err = Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .open()
        .expect_err("a damaged state file is refused");
    assert!(
        matches!(
            &err,
            Error::BadState { path: p, shard: s, remedy: Remedy::Recover, .. }
                if *p == path && *s == shard
        ),
        "{kind:?}: {err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{kind:?}: {msg}");
    assert!(
        msg.contains(&format!("Recovering shard {shard}")),
        "{kind:?}: {msg}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "{kind:?}: the damaged file must be left as it was"
    );
}

#[test]
fn damaged_state_is_refused_and_recover_resumes_after_everything() {
    let dir = harness::state_dir();
    for (i, kind) in Damage::ALL.into_iter().enumerate() {
        let shard = 10 + i as u32;
        let mut ledger = Ledger::new();
        // Nearly four seconds' worth: the run borrows into the reservation
        // window, so resuming at the clock would not be enough. (Checked
        // against the clock before the run, as the run itself may take
        // seconds on a loaded machine; the generator's cached second may
        // trail that reading by one.)
        let started = harness::wall_now();
        ledger.record(&issue_system(dir.path(), shard, 250_000));
        let issued_until = harness::unix_second(ledger.max().unwrap());
        assert!(issued_until >= started + 2, "borrowed ahead of the clock");
        let path = harness::state_file(dir.path(), shard);
        let damaged = kind.apply(&path);
        assert_refused(dir.path(), shard, &damaged, kind);
        // Twice: refusing must not have changed anything.
        assert_refused(dir.path(), shard, &damaged, kind);

        let plain = RecoverOptions::new();
        let r = if kind.keeps_the_mark() {
            state::recover(dir.path(), shard, &Layout::DEFAULT, &plain).expect("recover")
        } else {
            // The mark is gone or cannot be trusted: recovery needs a time
            // vouched for, and changes nothing without one.
            let err = state::recover(dir.path(), shard, &Layout::DEFAULT, &plain)
                .expect_err("no certain mark: refused");
            assert!(
                matches!(
                    &err,
                    Error::RecoveryRefused { shard: s, remedy: Some(Remedy::After), .. } if *s == shard
                ),
                "{kind:?}: {err:?}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), damaged, "{kind:?}");
            let vouched = plain.after(issued_until);
            state::recover(dir.path(), shard, &Layout::DEFAULT, &vouched).expect("recover")
        };
        assert_eq!(r.path, path);
        assert!(r.resume_after >= issued_until, "{kind:?}");
        let kept = dir.path().join(format!("shard-{shard}.state.bad"));
        assert_eq!(std::fs::read(kept).unwrap(), damaged, "{kind:?}: copy kept");
        ledger.record_after_all(&issue_system(dir.path(), shard, 100));
        ledger.assert_unique();
    }
}

#[test]
fn a_state_file_for_another_layout_is_refused_both_ways() {
    let dir = harness::state_dir();
    let clock = ManualClock::new(T);
    let g = open_layout_at(dir.path(), 1, CLOCKED, &clock);
    issue(&g, 10);
    g.close().unwrap();
    let path = harness::state_file(dir.path(), 1);
    let before = std::fs::read(&path).unwrap();
    let err = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(1)
        .state_dir(dir.path())
        .clock(clock.clone())
        .open()
        .expect_err("another layout is refused");
    assert!(matches!(err, Error::BadState { .. }), "{err:?}");
    assert!(err.to_string().contains("Recovering shard 1"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let g = open_at(dir.path(), 2, &clock);
    issue(&g, 10);
    g.close().unwrap();
    let err = Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(2)
        .state_dir(dir.path())
        .layout(CLOCKED)
        .clock(clock)
        .open()
        .expect_err("another layout is refused");
    assert!(matches!(err, Error::BadState { .. }), "{err:?}");
}

#[test]
fn recover_resumes_after_a_far_borrow_in_a_damaged_file() {
    let dir = harness::state_dir();

    // A damaged line fails the checksum: no field, the mark included, is
    // certain any more, so a vouched-for time is needed.
    let mut ledger = Ledger::new();
    // The clock before the run (which may take seconds on a loaded
    // machine); the generator's cached second may trail it by one.
    let started = harness::wall_now();
    ledger.record(&issue_system(dir.path(), 1, 3_000_000));
    let far = harness::unix_second(ledger.max().unwrap());
    assert!(far >= started + 44, "borrowed about 45 s ahead");
    let path = harness::state_file(dir.path(), 1);
    Damage::Corrupt.apply(&path);
    let err = state::recover(dir.path(), 1, &Layout::DEFAULT, &RecoverOptions::new())
        .expect_err("a failed checksum leaves nothing certain");
    assert!(err.to_string().contains("checksum"), "{err}");
    let r = state::recover(
        dir.path(),
        1,
        &Layout::DEFAULT,
        &RecoverOptions::new().after(far),
    )
    .unwrap();
    assert!(r.resume_after >= far, "{} < {far}", r.resume_after);
    ledger.record_after_all(&issue_system(dir.path(), 1, 100));

    // A version 1 file (written before files had a checksum) whose
    // high-water line survives the damage: recover resumes after it.
    let mut ledger = Ledger::new();
    ledger.record(&issue_system(dir.path(), 3, 3_000_000));
    let far = harness::unix_second(ledger.max().unwrap());
    let path = harness::state_file(dir.path(), 3);
    let v1: String = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("checksum ="))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("version = 2", "version = 1");
    std::fs::write(&path, v1).unwrap();
    Damage::Corrupt.apply(&path);
    let r = state::recover(dir.path(), 3, &Layout::DEFAULT, &RecoverOptions::new()).unwrap();
    assert!(r.resume_after >= far, "{} < {far}", r.resume_after);
    ledger.record_after_all(&issue_system(dir.path(), 3, 100));

    // The numbers are gone: refused, until `after` covers the borrow.
    let mut ledger = Ledger::new();
    ledger.record(&issue_system(dir.path(), 2, 3_000_000));
    let far = on_disk(dir.path(), 2).high_water[&0];
    Damage::Empty.apply(&harness::state_file(dir.path(), 2));
    assert_refused(dir.path(), 2, b"", Damage::Empty);
    let err = state::recover(dir.path(), 2, &Layout::DEFAULT, &RecoverOptions::new())
        .expect_err("nothing legible: refused");
    assert!(matches!(err, Error::RecoveryRefused { .. }), "{err:?}");
    let options = RecoverOptions::new().after(far);
    state::recover(dir.path(), 2, &Layout::DEFAULT, &options).unwrap();
    ledger.record_after_all(&issue_system(dir.path(), 2, 100));
}
