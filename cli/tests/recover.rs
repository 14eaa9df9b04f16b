//! `idutil state recover` with the real binary: after a borrowed-ahead
//! crash and one damaged byte, after a zero-length state file, on a healthy
//! file, with `--dry-run`, with times past the layout's end; and `state`,
//! `decode` and `next` on state files holding absurd seconds. Every ID any
//! run printed is checked against every later run.

use idutil_harness as harness;

use std::path::Path;

use harness::{idutil, on_disk, run, unix_second, Ledger};
use idutil::{Layout, DEFAULT_WINDOW};

/// `idutil state recover` with `args`, expected to exit with `code`.
fn recover(shard: u32, dir: &Path, args: &[&str], code: i32) -> harness::Run {
    let mut cmd = idutil(shard, dir);
    cmd.args(["state", "recover"]).args(args);
    run(&mut cmd).expect_code(code, &format!("idutil state recover {args:?}"))
}

/// Asserts a refusal: one line on stderr, nothing on stdout, containing
/// `want`.
fn assert_one_line(r: &harness::Run, want: &str) {
    let msg = r.stderr.trim();
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    assert!(msg.starts_with("idutil: "), "{msg}");
    assert!(msg.contains(want), "{want:?} not in: {msg}");
}

/// Replaces the byte at `at` in the shard's state file.
fn damage_byte(dir: &Path, shard: u32, at: usize, byte: u8) -> Vec<u8> {
    let path = harness::state_file(dir, shard);
    let mut bytes = std::fs::read(&path).unwrap();
    assert_ne!(bytes[at], byte, "the damage changes the byte");
    bytes[at] = byte;
    std::fs::write(&path, &bytes).unwrap();
    bytes
}

/// Offset of the first byte of `what` in the shard's state file.
fn offset_of(dir: &Path, shard: u32, what: &str) -> usize {
    let text = std::fs::read_to_string(harness::state_file(dir, shard)).unwrap();
    text.find(what)
        .unwrap_or_else(|| panic!("{what:?} not in:\n{text}"))
}

fn state_bytes(dir: &Path, shard: u32) -> Vec<u8> {
    std::fs::read(harness::state_file(dir, shard)).unwrap()
}

#[test]
fn recover_after_a_borrowed_ahead_crash_and_one_damaged_byte_reissues_nothing() {
    let dir = harness::state_dir();
    // Where the byte goes: a field name outside the high-water line, or a
    // digit of the mark itself. Either way the checksum fails, so no field
    // is certain, the mark included: the operator must vouch for a time.
    let damages: [(&str, usize, u8); 3] = [
        ("seen_max", 2, b'X'),
        ("clock_id", 0, 0),
        ("high_water = 0:", 17, b'x'),
    ];
    for (i, (field, within, byte)) in damages.into_iter().enumerate() {
        let shard = 1 + i as u32;
        let mut ledger = Ledger::new();
        // About 45 s borrowed ahead of the clock, then a run killed after
        // a few thousand lines.
        let started = harness::wall_now();
        ledger.record(&harness::next(shard, dir.path(), 3_000_000));
        let mut child = harness::spawn_next(shard, dir.path(), 3_000_000);
        let printed = harness::kill_after_lines(&mut child, 3_000);
        assert!(printed.len() >= 3_000, "{field}");
        ledger.record_after_all(&printed);
        let crashed = on_disk(dir.path(), shard);
        assert_eq!(crashed.last, None, "killed: no clean close");
        let mark = crashed.high_water[&0];
        assert!(mark >= started + 45, "{field}: borrowed ahead");

        let at = offset_of(dir.path(), shard, field) + within;
        let damaged = damage_byte(dir.path(), shard, at, byte);
        let r = run(idutil(shard, dir.path()).args(["next", "-n", "5"]))
            .expect_code(1, "next on a damaged file");
        assert_one_line(&r, "idutil state recover");

        let r = recover(shard, dir.path(), &[], 1);
        assert_one_line(&r, "--after TIME");
        assert!(r.stderr.contains("checksum"), "{field}: {}", r.stderr);
        assert_eq!(state_bytes(dir.path(), shard), damaged, "{field}");
        // The operator vouches for the mark seen before the damage.
        recover(shard, dir.path(), &["--after", &mark.to_string()], 0);
        let kept = dir.path().join(format!("shard-{shard}.state.bad"));
        assert_eq!(std::fs::read(kept).unwrap(), damaged, "{field}: copy kept");
        let after = on_disk(dir.path(), shard);
        assert!(
            after.clock_id > crashed.clock_id,
            "{field}: clock id bumped"
        );

        let ids = harness::next(shard, dir.path(), 100);
        assert!(
            unix_second(ids[0]) > mark + DEFAULT_WINDOW.as_secs(),
            "{field}: resumes after the whole reserved batch and the window"
        );
        ledger.record_after_all(&ids);
        ledger.assert_unique();
    }
}

/// `t` as RFC 3339 at offset +02:00.
fn at_plus_two_hours(t: u64) -> String {
    let local = jiff::Timestamp::from_second(t as i64 + 7200).unwrap();
    format!("{}+02:00", local.strftime("%Y-%m-%dT%H:%M:%S"))
}

#[test]
fn a_zero_length_state_file_needs_a_vouched_time_and_then_reissues_nothing() {
    let dir = harness::state_dir();
    let shard = 5;
    let ids = harness::next(shard, dir.path(), 3_000_000);
    let mut ledger = Ledger::new();
    ledger.record(&[ids[0], *ids.last().unwrap()]);
    drop(ids);
    let last_second = unix_second(ledger.max().unwrap());
    assert!(
        last_second >= unix_second(ledger.ids()[0]) + 45,
        "3,000,000 IDs borrow about 45 s"
    );

    std::fs::write(harness::state_file(dir.path(), shard), b"").unwrap();
    let r = run(idutil(shard, dir.path()).args(["next", "-n", "3"]))
        .expect_code(1, "next on an empty state file");
    assert_one_line(&r, "idutil state recover");
    let r = recover(shard, dir.path(), &[], 1);
    assert_one_line(&r, "--after TIME");
    assert!(
        r.stderr.contains("cannot be read with certainty"),
        "{}",
        r.stderr
    );
    assert_eq!(
        state_bytes(dir.path(), shard),
        b"",
        "refusing changes nothing"
    );

    // The operator vouches for the batch's last second, written at +02:00.
    // The lock file's mark (the reservation past it) is later still.
    let vouched = at_plus_two_hours(last_second);
    let r = recover(shard, dir.path(), &["--after", &vouched], 0);
    let resume = on_disk(dir.path(), shard).high_water[&0];
    assert!(
        resume > last_second && r.stdout.contains("the mark the lock file keeps"),
        "{vouched} is {last_second}: {}",
        r.stdout
    );
    let ids = harness::next(shard, dir.path(), 100);
    ledger.record_after_all(&ids);
    ledger.assert_unique();
}

#[test]
fn with_no_state_file_recover_needs_a_vouched_time() {
    let dir = harness::state_dir();
    let shard = 6;
    let r = recover(shard, dir.path(), &[], 1);
    assert_one_line(&r, "no state file");
    assert!(r.stderr.contains("--after TIME"), "{}", r.stderr);
    assert!(!harness::state_file(dir.path(), shard).exists());

    let vouched = harness::wall_now() + 3600;
    let r = recover(shard, dir.path(), &["--after", &vouched.to_string()], 0);
    assert!(r.stdout.contains("there is no state file"), "{}", r.stdout);
    assert!(!dir.path().join("shard-6.state.bad").exists());
    let ids = harness::next(shard, dir.path(), 10);
    assert!(unix_second(ids[0]) > vouched);
}

#[test]
fn recover_refuses_a_healthy_file_unless_forced() {
    let dir = harness::state_dir();
    let shard = 7;
    let mut ledger = Ledger::new();
    ledger.record(&harness::next(shard, dir.path(), 1000));
    let healthy = state_bytes(dir.path(), shard);
    let r = recover(shard, dir.path(), &[], 1);
    assert_one_line(&r, "healthy");
    assert!(r.stderr.contains("--force"), "{}", r.stderr);
    assert_eq!(state_bytes(dir.path(), shard), healthy);
    // A dry run finds nothing to recover: it says so, and succeeds, as the
    // help's exit statuses of `state recover` say.
    let r = recover(shard, dir.path(), &["--dry-run"], 0);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    for want in [
        "found:        the state file is healthy",
        "dry run: nothing to recover, nothing was changed",
    ] {
        assert!(r.stdout.contains(want), "{want:?} not in:\n{}", r.stdout);
    }
    assert_eq!(state_bytes(dir.path(), shard), healthy);

    let mark = on_disk(dir.path(), shard).high_water[&0];
    let r = recover(shard, dir.path(), &["--force"], 0);
    assert!(
        r.stdout.contains("the state file is healthy"),
        "{}",
        r.stdout
    );
    let kept = dir.path().join(format!("shard-{shard}.state.bad"));
    assert_eq!(std::fs::read(kept).unwrap(), healthy);
    let ids = harness::next(shard, dir.path(), 10);
    assert!(unix_second(ids[0]) > mark);
    ledger.record_after_all(&ids);
}

#[test]
fn dry_run_prints_the_plan_and_changes_nothing() {
    let dir = harness::state_dir();
    let shard = 8;
    // Borrowed about 15 s ahead, so the mark stays the latest second
    // however slowly the test runs.
    harness::next(shard, dir.path(), 1_000_000);
    let at = offset_of(dir.path(), shard, "seen_max");
    let damaged = damage_byte(dir.path(), shard, at, b'#');
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let mark = on_disk_text_mark(&damaged);
    let vouched = mark.to_string();
    let r = recover(shard, dir.path(), &["--dry-run", "--after", &vouched], 0);
    for want in [
        "found:        the state file is damaged".to_string(),
        format!("({mark}), the time vouched for"),
        "resume after: ".to_string(),
        format!("({})", mark + DEFAULT_WINDOW.as_secs()),
        "dry run: nothing was changed".to_string(),
    ] {
        assert!(r.stdout.contains(&want), "{want:?} not in:\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("recovered"), "{}", r.stdout);
    assert_eq!(
        state_bytes(dir.path(), shard),
        damaged,
        "file bytes identical"
    );
    assert_eq!(listing(), before, "no file created or removed");

    // Refusals of a dry run are the same as a real one's.
    let r = recover(9, dir.path(), &["--dry-run"], 1);
    assert_one_line(&r, "--after TIME");
    assert_eq!(listing(), before);

    // The real run prints the same plan, then what it did.
    let r = recover(shard, dir.path(), &["--after", &vouched], 0);
    assert!(r
        .stdout
        .contains(&format!("({mark}), the time vouched for")));
    assert!(r.stdout.contains("\nrecovered "), "{}", r.stdout);
}

/// The high-water second in a state file's text.
fn on_disk_text_mark(text: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(text);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("high_water = 0:"))
        .expect("a high_water line");
    line.trim().parse().expect("a mark")
}

#[test]
fn recover_refuses_times_past_the_layouts_end() {
    let dir = harness::state_dir();
    let shard = 10;
    let last = Layout::DEFAULT.last_unix_second();
    for after in [
        "9999-12-31T23:59:59Z".to_string(),
        "9999-12-30T00:00:00+02:00".to_string(),
        "2136-02-07T06:28:16Z".to_string(),
        "2136-02-07T08:28:16+02:00".to_string(),
        (last + 1).to_string(),
        u64::MAX.to_string(),
        "99999999999999999999999".to_string(),
        // Inside the range, but resuming after it plus the window leaves
        // no second.
        last.to_string(),
        (last - 2).to_string(),
    ] {
        let r = run(idutil(shard, dir.path()).args(["state", "recover", "--after", &after]));
        assert!(
            matches!(r.code, Some(1 | 2)),
            "--after {after}: exit {:?}\n{}{}",
            r.code,
            r.stdout,
            r.stderr
        );
        assert_one_line(&r, "idutil");
        assert!(!harness::state_file(dir.path(), shard).exists(), "{after}");
    }
    // The latest usable time still works; the shard then stands in the
    // end margin a generator keeps clear (the crate docs, *A clock far
    // ahead*), which the command says.
    let latest = (last - 1 - DEFAULT_WINDOW.as_secs()).to_string();
    recover(shard, dir.path(), &["--after", &latest], 0);
    assert_eq!(on_disk(dir.path(), shard).high_water[&0], last - 1);
    let r = run(idutil(shard, dir.path()).args(["next", "-n", "3"]))
        .expect_code(1, "next in the end margin");
    assert!(
        r.stdout.is_empty() && r.stderr.contains("last 86400 s"),
        "{}",
        r.stderr
    );
}

/// A change to a state file's text.
type Edit<'a> = Box<dyn Fn(&str) -> String + 'a>;

/// Replaces the value of `key`'s line.
fn set(text: &str, key: &str, value: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with(&format!("{key} =")) {
                format!("{key} = {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn absurd_seconds_in_a_state_file_never_panic_the_command() {
    let dir = harness::state_dir();
    harness::next(11, dir.path(), 3);
    let path = harness::state_file(dir.path(), 11);
    let good = std::fs::read_to_string(&path).unwrap();
    let year_11500: u64 = 300_798_489_600; // about the year 11500
    let max = u64::MAX.to_string();
    let y = year_11500.to_string();
    let edits: Vec<(&str, Edit<'_>)> = vec![
        (
            "mark year 11500",
            Box::new(|t| set(t, "high_water", &format!("0:{y}"))),
        ),
        (
            "mark u64::MAX",
            Box::new(|t| set(t, "high_water", &format!("0:{max}"))),
        ),
        ("seen_max u64::MAX", Box::new(|t| set(t, "seen_max", &max))),
        (
            "seen year 11500",
            Box::new(|t| set(&set(t, "seen_max", &y), "seen_last_run", &y)),
        ),
        (
            "last u64::MAX",
            Box::new(|t| set(t, "last", &format!("{max} 65535"))),
        ),
        (
            "last year 11500",
            Box::new(|t| set(t, "last", &format!("{y} 0"))),
        ),
        (
            "all year 11500",
            Box::new(|t| {
                let t = set(t, "high_water", &format!("0:{y}"));
                let t = set(&t, "seen_max", &y);
                let t = set(&t, "seen_last_run", &y);
                set(&t, "last", &format!("{y} 4294967295"))
            }),
        ),
        (
            "epoch u64::MAX",
            Box::new(|t| t.replace("epoch:946684800", &format!("epoch:{max}"))),
        ),
        (
            "epoch year 11500",
            Box::new(|t| t.replace("epoch:946684800", &format!("epoch:{y}"))),
        ),
        ("clock_id u64::MAX", Box::new(|t| set(t, "clock_id", &max))),
    ];
    for (what, edit) in &edits {
        std::fs::write(&path, edit(&good)).unwrap();
        for args in [
            &["state"][..],
            &["state", "--json"],
            &["next", "-n", "3"],
            &["state", "recover", "--dry-run"],
            &["decode", "9007199254740991", "0", "1452736581206048"],
            &["decode", "--json", "9007199254740991"],
        ] {
            let r = run(idutil(11, dir.path()).args(args));
            assert!(
                matches!(r.code, Some(0 | 1)),
                "{what}: {args:?}: exit {:?}\n{}",
                r.code,
                r.stderr
            );
            if r.code == Some(1) {
                assert_one_line(&r, "idutil");
                assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
            }
            if (args[0] == "state" && args.len() <= 2) || args[0] == "next" {
                // Every one of these files is refused, naming the fix.
                assert_eq!(r.code, Some(1), "{what}: {args:?}: {}", r.stdout);
                assert!(
                    r.stderr.contains("idutil state recover"),
                    "{what}: {}",
                    r.stderr
                );
            }
        }
    }
}
