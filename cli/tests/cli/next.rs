//! `idutil next`: what it prints, streaming, readers that stop early.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use idutil_harness::run;

use crate::{idutil, reason_lines, text, TIMEOUT};

#[test]
fn next_decode_and_state_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(idutil(dir.path()).args(["next", "-n", "3"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The only thing on stderr: the shard starts with no state file.
    assert_eq!(reason_lines(&text(&out.stderr)), Vec::<&str>::new());
    assert!(text(&out.stderr).contains("has no state file"));
    let ids: Vec<u64> = text(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        ids.iter().all(|&id| id < 1 << 53 && id & 31 == 1),
        "{ids:?}"
    );

    let out = run(idutil(dir.path()).args(["--shard", "4", "next", "--count", "2", "--json"]));
    let json: Vec<u64> = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(json.len(), 2);
    assert!(json.iter().all(|&id| id & 31 == 4));

    let out = run(idutil(dir.path()).args(["decode", "1452736581206048", "9007199254740991"]));
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        "id=1452736581206048 time=2021-12-13T13:53:03Z unix_seconds=1639403583 sequence=1 shard=0 clock=0\n\
         id=9007199254740991 time=2136-02-07T06:28:15Z unix_seconds=5241652095 sequence=65535 shard=31 clock=0\n"
    );
    let out = run(idutil(dir.path()).args(["decode", "--json", "1452736581206048"]));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v[0]["id"], 1452736581206048u64);
    assert_eq!(v[0]["time"], "2021-12-13T13:53:03Z");

    let out = run(idutil(dir.path()).args(["state", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v["shard"], 1);
    assert_eq!(v["state"]["last_issued"]["id"], ids[2], "the exact last ID");
}

/// Runs `idutil next -n N [--json]` and reads its output as it comes:
/// calls `at(pid)` once `at_line` IDs have arrived, and stops reading
/// (closing the pipe) after `stop_after` IDs, if given. Returns the exit
/// code, stderr and the number of IDs read.
fn stream(
    dir: &Path,
    n: u64,
    json: bool,
    stop_after: Option<u64>,
    at_line: u64,
    mut at: impl FnMut(u32),
) -> (Option<i32>, String, u64) {
    let mut cmd = idutil(dir);
    cmd.args(["next", "-n", &n.to_string()]);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A watchdog bounds the whole run.
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(TIMEOUT).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            return false;
        }
        true
    });
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = BufReader::with_capacity(1 << 16, child.stdout.take().unwrap());
    let mut count = 0u64;
    let mut called = false;
    loop {
        let buf = match stdout.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let len = buf.len();
        // One newline or comma ends each ID, in either format.
        count += buf.iter().filter(|&&b| b == b'\n' || b == b',').count() as u64;
        stdout.consume(len);
        if !called && count >= at_line {
            called = true;
            at(pid);
        }
        if stop_after.is_some_and(|s| count >= s) {
            break;
        }
    }
    drop(stdout); // the writer now gets EPIPE
    let status = child.wait().unwrap();
    let _ = done.send(());
    assert!(
        watchdog.join().unwrap(),
        "idutil next -n {n} did not finish within {TIMEOUT:?}"
    );
    (status.code(), stderr.join().unwrap(), count)
}

#[test]
fn a_reader_that_stops_early_ends_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // The shard's first run, which says it starts with no state file.
    assert!(run(idutil(dir.path()).arg("next")).status.success());
    for json in [false, true] {
        let (code, stderr, count) = stream(dir.path(), 1_000_000, json, Some(1), 0, |_| {});
        assert_eq!(code, Some(0), "json={json}: {stderr}");
        assert!(stderr.is_empty(), "json={json}: {stderr:?}");
        assert!(count < 1_000_000, "the whole output was read: {count}");
    }
    // And the shard is free again at once: the generator was closed.
    let out = run(idutil(dir.path()).args(["next"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Peak resident memory of a running process, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn next_streams_large_counts_in_flat_memory() {
    if peak_kib(std::process::id()).is_none() {
        idutil_harness::skipped(format_args!(
            "SKIPPED next_streams_large_counts_in_flat_memory: no /proc, so the command's \
             memory is NOT checked"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let measure = |n: u64| {
        let mut peak = None;
        // Measure half-way, while the process is still writing.
        let (code, stderr, count) = stream(dir.path(), n, false, None, n / 2, |pid| {
            peak = peak_kib(pid)
        });
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(count, n, "every ID arrived");
        peak.expect("the process was still running")
    };
    let small = measure(50_000);
    let large = measure(5_000_000);
    eprintln!("peak memory: {small} KiB for 50,000 IDs, {large} KiB for 5,000,000");
    // Holding 5,000,000 IDs would take 40 MB as integers, far more as text.
    assert!(
        large < small + 8 * 1024,
        "peak memory grew with N: {small} KiB for 50,000 IDs, {large} KiB for 5,000,000"
    );
}

#[test]
fn zero_ids_and_recovering_after_now() {
    let dir = tempfile::tempdir().unwrap();
    for (json, expected) in [(false, ""), (true, "[]\n")] {
        let mut args = vec!["next", "-n", "0"];
        if json {
            args.push("--json");
        }
        let out = run(idutil(dir.path()).args(&args));
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected);
    }
    // A shard whose state file is gone and that issued nothing ahead of
    // the clock: "the current time" is `--after now`.
    let ids: Vec<u64> = text(&run(idutil(dir.path()).args(["next", "-n", "3"])).stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    std::fs::remove_file(dir.path().join("shard-1.state")).unwrap();
    let out = run(idutil(dir.path()).arg("next"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--after TIME"),
        "{}",
        text(&out.stderr)
    );
    let out = run(idutil(dir.path()).args(["state", "recover", "--after", "now"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(idutil(dir.path()).arg("next"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after: u64 = text(&out.stdout).trim().parse().unwrap();
    assert!(after > *ids.last().unwrap());
}

/// A run that leaves the shard more than a minute ahead of the wall clock
/// says why: its own demand, when it issued more than the shard's 65,536
/// IDs a second, and otherwise not (the lead was there before it).
#[test]
fn a_run_far_ahead_of_the_clock_names_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(idutil(dir.path())
        .args(["next", "-n", "5000000"])
        .stdout(Stdio::null()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("this run issued 5000000 IDs") && stderr.contains("--max-lead"),
        "{stderr}"
    );
    let out = run(idutil(dir.path()).args(["next", "-n", "5"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("more than this run's 5 IDs account for")
            && !stderr.contains("this run issued"),
        "{stderr}"
    );
}
