//! Damaged state refused by the command until recovered.

use idutil_harness as harness;

use std::path::Path;

use idutil_harness::{idutil, on_disk, run, unix_second, wall_now, Damage, Ledger};

/// Checks that `idutil next` and `idutil state` refuse a damaged file and
/// leave it as it is. (A well-formed file for another layout is no damage
/// to `idutil state`, which only shows it.)
fn assert_command_refuses(shard: u32, dir: &Path, damaged: &[u8], kind: Damage) {
    let path = harness::state_file(dir, shard);
    let commands: &[&[&str]] = match kind {
        Damage::WrongLayout => {
            let r = run(idutil(shard, dir).arg("state")).expect_code(0, "idutil state");
            assert!(
                r.stdout
                    .contains("layout:       seconds:31 clock:1 sequence:16"),
                "{}",
                r.stdout
            );
            &[&["next", "-n", "5"]]
        }
        _ => &[&["next", "-n", "5"], &["state"]],
    };
    for &args in commands {
        let r = run(idutil(shard, dir).args(args)).expect_code(1, &format!("{kind:?}: {args:?}"));
        assert_eq!(r.stdout, "", "{kind:?}: {args:?}");
        let msg = r.stderr.trim();
        assert_eq!(msg.lines().count(), 1, "{kind:?}: one line: {msg}");
        assert!(msg.contains(&path.display().to_string()), "{kind:?}: {msg}");
        assert!(msg.contains("idutil state recover"), "{kind:?}: {msg}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "{kind:?}: {args:?} changed the damaged file"
        );
    }
}

/// `idutil state recover [--after T]`, which must succeed.
fn recover(shard: u32, dir: &Path, after: Option<u64>) -> String {
    let mut cmd = idutil(shard, dir);
    cmd.args(["state", "recover"]);
    if let Some(t) = after {
        cmd.args(["--after", &t.to_string()]);
    }
    run(&mut cmd).expect_code(0, "idutil state recover").stdout
}

/// `idutil state recover` without `--after`, which must refuse and leave
/// the file as it is.
fn recover_refused(shard: u32, dir: &Path, damaged: &[u8]) {
    let r = run(idutil(shard, dir).args(["state", "recover"]))
        .expect_code(1, "idutil state recover without a certain mark");
    let msg = r.stderr.trim();
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    assert!(msg.contains("--after TIME"), "{msg}");
    assert_eq!(
        std::fs::read(harness::state_file(dir, shard)).unwrap(),
        damaged
    );
}

#[test]
fn damaged_state_is_refused_by_the_command_until_recovered() {
    let dir = harness::state_dir();
    for (i, kind) in Damage::ALL.into_iter().enumerate() {
        let shard = 20 + i as u32;
        let mut ledger = Ledger::new();
        // Nearly four seconds' worth: the run borrows into the reservation
        // window, so resuming at the clock would not be enough. (Checked
        // against the clock before the run: on a loaded machine printing
        // and parsing 250,000 lines may take seconds.)
        let started = wall_now();
        ledger.record(&harness::next(shard, dir.path(), 250_000));
        let issued_until = unix_second(ledger.max().unwrap());
        assert!(issued_until >= started + 3, "borrowed ahead of the clock");
        let damaged = kind.apply(&harness::state_file(dir.path(), shard));
        assert_command_refuses(shard, dir.path(), &damaged, kind);

        let after = if kind.keeps_the_mark() {
            None
        } else {
            recover_refused(shard, dir.path(), &damaged);
            Some(issued_until)
        };
        let out = recover(shard, dir.path(), after);
        assert!(out.contains("\nrecovered "), "{kind:?}: {out}");
        let ids = harness::next(shard, dir.path(), 200);
        ledger.record_after_all(&ids);
        // Recovering bumps the clock id.
        assert!(on_disk(dir.path(), shard).clock_id >= 1, "{kind:?}");
        ledger.assert_unique();
    }
}

#[test]
fn recover_resumes_after_a_far_borrow() {
    let dir = harness::state_dir();

    // Torn write elsewhere: the checksum fails, so even the legible
    // high-water line is not certain; --after covers the borrow.
    let ids = harness::next(1, dir.path(), 3_000_000);
    let mut ledger = Ledger::new();
    ledger.record(&[ids[0], *ids.last().unwrap()]);
    drop(ids);
    let mark = on_disk(dir.path(), 1).high_water[&0];
    let damaged = Damage::Corrupt.apply(&harness::state_file(dir.path(), 1));
    assert_command_refuses(1, dir.path(), &damaged, Damage::Corrupt);
    recover_refused(1, dir.path(), &damaged);
    recover(1, dir.path(), Some(mark));
    ledger.record_after_all(&harness::next(1, dir.path(), 100));

    // Truncated: the high-water number is lost; --after covers the borrow.
    let ids = harness::next(2, dir.path(), 3_000_000);
    let mut ledger = Ledger::new();
    ledger.record(&[ids[0], *ids.last().unwrap()]);
    drop(ids);
    let mark = on_disk(dir.path(), 2).high_water[&0];
    let damaged = Damage::Truncated.apply(&harness::state_file(dir.path(), 2));
    let legible = String::from_utf8_lossy(&damaged);
    assert!(
        !legible.contains(&mark.to_string())
            && !legible.contains(&unix_second(ledger.max().unwrap()).to_string()),
        "the truncation must destroy the borrowed seconds:\n{legible}"
    );
    assert_command_refuses(2, dir.path(), &damaged, Damage::Truncated);
    recover_refused(2, dir.path(), &damaged);
    let out = recover(2, dir.path(), Some(mark));
    assert!(
        out.contains(&format!("({mark}), the time vouched for")),
        "the latest known second is {mark}: {out}"
    );
    ledger.record_after_all(&harness::next(2, dir.path(), 100));
}
