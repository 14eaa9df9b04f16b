//! What crashes, signals and impossible clocks cost a shard, proved with
//! real processes: the `idutil` command and library children (this test
//! binary, re-executed) killed with SIGKILL over and over, stopped with
//! SIGTERM, SIGINT and SIGHUP, and run under `faketime` in 2140 and past
//! year 10000. A crash costs a bounded skip that never compounds; a signal
//! costs nothing; a clock outside the layout's range issues nothing and
//! stores nothing.

use idutil_harness as harness;

use std::io::{BufRead, BufReader, Read};
use std::thread;
use std::time::{Duration, Instant};

use harness::{idutil, parts, send, unix_second, wait_within, Ledger, Rng};

/// The default reservation window, in seconds.
const WINDOW: u64 = idutil::DEFAULT_WINDOW.as_secs();
/// IDs in one second of one shard.
const PER_SECOND: u64 = 65_536;

/// Seconds from the last ID of one run to the first of the next.
fn skip(last: u64, first: u64) -> u64 {
    unix_second(first) - unix_second(last)
}

/// The most a crash may skip past a run's last printed ID: the window, the
/// second in progress, IDs issued but not yet printed (`unprinted`
/// seconds' worth), and twice what the run issued in all (the reservation
/// covers at most twice the recent issuing, and never more than
/// `MAX_HEADROOM`; the run's whole output bounds that from above).
fn crash_bound(run: &[u64], unprinted: u64) -> u64 {
    let span = unix_second(*run.last().unwrap()) - unix_second(run[0]);
    let headroom = (2 * (span + 1 + unprinted)).min(idutil::MAX_HEADROOM.as_secs());
    WINDOW + 2 + unprinted + headroom
}

/// The skips between the runs of a crash loop, each checked against
/// [`crash_bound`] as it comes.
#[derive(Default)]
struct Skips {
    previous: Option<Vec<u64>>,
    seen: Vec<u64>,
}

impl Skips {
    /// Records a run that crashed with up to `unprinted` seconds' worth of
    /// IDs taken but not printed, after checking the skip from the run
    /// before.
    fn after(&mut self, round: usize, ids: Vec<u64>, unprinted: u64, ledger: &mut Ledger) {
        if let Some(prev) = &self.previous {
            let s = skip(*prev.last().unwrap(), ids[0]);
            let bound = crash_bound(prev, unprinted);
            assert!(
                s <= bound,
                "round {round}: the crash skipped {s} s, more than {bound} s (skips so far: \
                 {:?})",
                self.seen
            );
            self.seen.push(s);
        }
        ledger.record_after_all(&ids);
        self.previous = Some(ids);
    }
}

#[test]
fn sixteen_sigkills_of_the_command_mid_burst_each_cost_a_bounded_skip() {
    let dir = harness::state_dir();
    let shard = 6;
    let mut rng = Rng::from_env_or_time("sixteen_sigkills_of_the_command_mid_burst");
    let mut ledger = Ledger::new();
    let mut skips = Skips::default();
    for round in 0..16 {
        let mut child = harness::spawn_next(shard, dir.path(), 100_000_000);
        let ids = harness::kill_after_lines(&mut child, rng.range(1, 300_000));
        assert!(!ids.is_empty(), "round {round} printed nothing");
        // Unprinted: the batch being printed (1,024 IDs), the command's
        // 8 KiB buffer and the 64 KiB pipe: under a second.
        skips.after(round, ids, 1, &mut ledger);
    }
    let skips = skips.seen;
    eprintln!("skips after each SIGKILL, in seconds: {skips:?}");
    // Nothing compounds: the shard is still within minutes of the clock.
    let ids = harness::next(shard, dir.path(), 10);
    let ahead = unix_second(ids[0]).saturating_sub(harness::wall_now());
    let total: u64 = skips.iter().sum::<u64>() + 16 * 60;
    assert!(ahead <= total, "{ahead} s ahead after 16 crashes");
    ledger.record_after_all(&ids);
}

#[test]
fn fifteen_sigkills_of_a_library_burst_each_cost_a_bounded_skip() {
    let dir = harness::state_dir();
    let shard = 8;
    let mut rng = Rng::from_env_or_time("fifteen_sigkills_of_a_library_burst");
    let mut ledger = Ledger::new();
    let mut skips = Skips::default();
    for round in 0..15 {
        let env = vec![
            ("IDUTIL_CHILD_SHARD", shard.to_string()),
            ("IDUTIL_CHILD_DIR", dir.path().display().to_string()),
            // Whole seconds per call: the fastest way to borrow.
            ("IDUTIL_CHILD_BATCH", PER_SECOND.to_string()),
        ];
        let mut child = harness::spawn_child("child_issue_until_killed", &env);
        // Killed at a random moment once it issues (a loaded machine may
        // take longer than the pause below to get there).
        let (mut ids, rest) = harness::read_until_issuing(child.stdout.take().unwrap());
        let reader = thread::spawn(move || harness::read_rest(rest));
        thread::sleep(Duration::from_millis(rng.range(20, 200)));
        harness::sigkill(&mut child);
        ids.extend(harness::child_ids(&reader.join().unwrap()).0);
        // The child prints 32 batches at a time: up to 32 seconds' worth
        // taken but not printed.
        skips.after(round, ids, 32, &mut ledger);
    }
    let skips = skips.seen;
    eprintln!("skips after each SIGKILL, in seconds: {skips:?}");
    assert_eq!(skips.len(), 14, "a skip between each two rounds");
}

#[test]
fn sigterm_sigint_and_sighup_close_cleanly_and_the_next_run_continues_in_the_same_second() {
    for (signal, number) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
        let dir = harness::state_dir();
        let shard = 9;
        let mut ledger = Ledger::new();
        let mut child = harness::spawn_next(shard, dir.path(), 100_000_000);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut text = String::new();
        for _ in 0..200_000 {
            out.read_line(&mut text).unwrap();
        }
        send(&child, signal);
        out.read_to_string(&mut text).unwrap();
        let status = wait_within(&mut child, Duration::from_secs(10));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(128 + number), "SIG{signal}: {stderr}");
        assert!(stderr.contains(&format!("SIG{signal}")), "{stderr}");
        let printed = harness::parse_ids(&text);
        ledger.record(&printed);
        let last = *printed.last().unwrap();

        let s = harness::state_json(shard, dir.path());
        assert!(
            !s["state"]["last_issued"].is_null(),
            "SIG{signal} is a clean close: {s}"
        );
        let again = harness::next(shard, dir.path(), 1);
        let clock = harness::wall_now();
        ledger.record_after_all(&again);
        // Only the rest of the batch being printed (under 1,024 IDs) is
        // skipped: the next run starts in the same or the next second, or
        // at the clock if a loaded machine took longer than that to get
        // here, never a reservation window further.
        assert!(
            unix_second(again[0]) <= (unix_second(last) + 1).max(clock),
            "SIG{signal}: the next run starts at {} s, the last printed ID was at {} s \
             (sequence {}), the clock is at {clock} s",
            unix_second(again[0]),
            unix_second(last),
            parts(last).sequence
        );
    }
}

#[test]
fn signals_while_the_command_opens_never_cost_a_skip() {
    let dir = harness::state_dir();
    let shard = 13;
    let mut rng = Rng::from_env_or_time("signals_while_the_command_opens");
    let mut ledger = Ledger::new();
    for round in 0..40 {
        let mut child = harness::spawn_next(shard, dir.path(), 1);
        thread::sleep(Duration::from_micros(rng.range(0, 4000)));
        send(&child, ["TERM", "INT", "HUP"][round % 3]);
        let status = wait_within(&mut child, Duration::from_secs(10));
        let printed =
            harness::parse_complete_ids(&harness::read_rest(child.stdout.take().unwrap()));
        // Killed before the handlers were in place (nothing opened yet),
        // finished first, or stopped cleanly: never a crash.
        assert!(
            status
                .code()
                .is_none_or(|c| [0, 129, 130, 143].contains(&c)),
            "round {round}: {status:?}"
        );
        ledger.record_after_all(&printed);
    }
    // A crash leaves a reservation behind, and forty of them would have
    // pushed the shard minutes ahead; clean closes leave it at the clock.
    let ids = harness::next(shard, dir.path(), 1);
    ledger.record_after_all(&ids);
    let ahead = unix_second(ids[0]).saturating_sub(harness::wall_now());
    assert!(
        ahead <= WINDOW + 1,
        "{ahead} s ahead after 40 early signals"
    );
}

#[test]
fn a_signal_while_stdout_is_stuck_still_closes_cleanly() {
    let dir = harness::state_dir();
    let shard = 10;
    // Nobody reads stdout: the command blocks in a write once the pipe is
    // full, and must still stop on SIGTERM.
    let mut child = harness::spawn_next(shard, dir.path(), 100_000_000);
    wait_until_full(child.stdout.as_ref().unwrap(), Duration::from_secs(60));
    send(&child, "TERM");
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(143));
    let printed = harness::parse_complete_ids(&harness::read_rest(child.stdout.take().unwrap()));
    assert!(!printed.is_empty());
    let s = harness::state_json(shard, dir.path());
    assert!(!s["state"]["last_issued"].is_null(), "{s}");
    let again = harness::next(shard, dir.path(), 5);
    assert!(again[0] > *printed.last().unwrap());
    let mut ledger = Ledger::new();
    ledger.record(&printed);
    ledger.record_after_all(&again);
}

/// Waits (at most `limit`) until the pipe a child writes to is full, so
/// that the child is blocked writing to it; on a loaded machine that may
/// take a while after the start. Full: within a page of its capacity (a
/// write that does not fit waits for room) and not filling any more.
fn wait_until_full(out: &std::process::ChildStdout, limit: Duration) {
    let capacity = rustix::pipe::fcntl_getpipe_size(out).expect("the pipe's capacity") as u64;
    let deadline = Instant::now() + limit;
    let mut before = 0;
    loop {
        let queued = rustix::io::ioctl_fionread(out).expect("bytes in the pipe");
        if queued + 4096 > capacity && queued == before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pipe held {queued} of {capacity} bytes after {limit:?}"
        );
        before = queued;
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_clock_past_the_layout_issues_nothing_stores_nothing_and_the_shard_still_works() {
    let Some(faketime) = harness::faketime() else {
        return;
    };
    let dir = harness::state_dir();
    let shard = 11;
    let mut ledger = Ledger::new();
    // A fresh shard: nothing is written at all.
    let r = harness::next_under_faketime(&faketime, "@2140-01-01 00:00:00", shard, dir.path());
    let r = r.expect_code(1, "next in 2140");
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("clock"), "{}", r.stderr);
    assert!(!harness::state_file(dir.path(), shard).exists());
    ledger.record(&harness::next(shard, dir.path(), 1000));

    // A used shard: its state file is left byte for byte as it was.
    let before = std::fs::read(harness::state_file(dir.path(), shard)).unwrap();
    for offset in [
        "@2140-01-01 00:00:00",
        "@2136-02-07 06:28:16",
        "+400000000000",
    ] {
        let r = harness::next_under_faketime(&faketime, offset, shard, dir.path());
        let r = r.expect_code(1, offset);
        assert!(r.stdout.is_empty(), "{offset}: {}", r.stdout);
        assert_eq!(r.stderr.lines().count(), 1, "{offset}: {}", r.stderr);
        let after = std::fs::read(harness::state_file(dir.path(), shard)).unwrap();
        assert_eq!(before, after, "{offset}: the state file changed");
        // Inspecting such a shard under such a clock does not panic either.
        let mut cmd = faketime.command(offset, harness::bin());
        cmd.env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
            .args(["--shard", &shard.to_string(), "--state-dir"])
            .arg(dir.path())
            .arg("state");
        harness::run(&mut cmd).expect_code(0, "state under an absurd clock");
    }
    // With a sane clock the shard goes on after everything issued.
    ledger.record_after_all(&harness::next(shard, dir.path(), 1000));
}

#[test]
fn next_warns_when_a_run_ends_far_ahead_and_max_lead_waits_for_the_clock() {
    let dir = harness::state_dir();
    let shard = 12;
    // 10 million IDs: about 150 borrowed seconds.
    let r = harness::run(idutil(shard, dir.path()).args(["next", "-n", "10000000"]))
        .expect_code(0, "a long run");
    // Besides the note that the shard starts with no state file.
    let warning: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| !l.contains("has no state file"))
        .collect();
    assert_eq!(warning.len(), 1, "{}", r.stderr);
    assert!(warning[0].contains("65,536"), "{}", r.stderr);
    assert!(warning[0].contains("--max-lead"), "{}", r.stderr);
    let ids = harness::parse_ids(&r.stdout);
    assert_eq!(ids.len(), 10_000_000);

    // A short run stays quiet (once the shard has its state file).
    let dir = harness::state_dir();
    harness::next(shard, dir.path(), 1);
    let r = harness::run(idutil(shard, dir.path()).args(["next", "-n", "1000"]))
        .expect_code(0, "a short run");
    assert_eq!(r.stderr, "");

    // With a lead cap of 1 s, 200,000 IDs (about 3 s of sequence numbers)
    // wait for the clock instead of borrowing further.
    let started = harness::wall_now();
    let began = Instant::now();
    let r =
        harness::run(idutil(shard, dir.path()).args(["next", "-n", "200000", "--max-lead", "1s"]))
            .expect_code(0, "a capped run");
    let ids = harness::parse_ids(&r.stdout);
    assert_eq!(ids.len(), 200_000);
    let ended = harness::wall_now();
    for &id in &ids {
        assert!(
            unix_second(id) <= ended + 1,
            "ID at {} s with the clock at {ended} s and a 1 s cap",
            unix_second(id)
        );
    }
    assert!(
        began.elapsed() >= Duration::from_millis(900),
        "200,000 IDs under a 1 s cap took only {:?} (started at {started})",
        began.elapsed()
    );
    assert_eq!(r.stderr, "", "no lead warning under the cap");
    // A cap too large to matter is no cap (it once wrapped and spun).
    let huge = harness::output_within(
        idutil(shard, dir.path()).args(["next", "-n", "100", "--max-lead", "18446744073709551615"]),
        Duration::from_secs(20),
    );
    assert!(huge.status.success(), "{huge:?}");
    for bad in ["-1", "soon", "", "5 parsecs"] {
        harness::run(idutil(shard, dir.path()).args(["next", "--max-lead", bad]))
            .expect_code(2, bad);
    }
}

/// Child entry point: see [`harness::issue_until_killed_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_issue_until_killed() {
    if harness::is_child() {
        harness::issue_until_killed_child();
    }
}
