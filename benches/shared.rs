//! Processes sharing one shard: how fast they issue together, how far the
//! shard's counter moves per ID they issue, the lead they leave, what a
//! block draw costs, and, in the same run, a lone process's hot path
//! beside ferroid's `AtomicSnowflakeGenerator`.
//!
//! Every worker is this benchmark binary run again (`IDUTIL_SHARED_WORKER`
//! set), a process of its own on one thread, on the same shard and state
//! directory. Each round starts in a fresh state directory, just after a
//! wall-clock second begins.
//!
//! - **Long-lived**: 1, 4, 16 and 32 processes, opened first and released
//!   at once through their stdin, each issuing `next_id()` flat out for
//!   2 s (one call in 64 timed), then timing every call for 200 ms.
//! - **Short-lived**: 64 processes, 1, 4, 16 and 32 at a time (a new one
//!   starts as soon as one exits), each opening the shard, issuing 2,000
//!   IDs one `next_id()` at a time, every call timed, and closing, as a
//!   script's `idutil next -n 2000` does. With `--command PATH`, the
//!   processes are that `idutil` binary's `next -n 2000` instead (no call
//!   timings then).
//!
//! **Counter moved per ID.** The shard's counter is an ID's
//! `(seconds << 16) | sequence` (its shard bits left out). Before a round,
//! a probe opens the shard alone, issues one ID `S` and closes; after
//! every worker has exited, a second probe does the same and issues `E`,
//! the first ID the next run gets. The counter values strictly between
//! them, `counter(E) − counter(S) − 1`, are what the round used up: every
//! ID the workers issued is among them (checked), and so is every value a
//! worker drew and never issued, whether it was lost when the worker
//! exited or skipped. *Counter moved per ID* is that, divided by the IDs
//! the workers issued: 1.00 is perfect, 2.00 means the shard moved twice
//! as far as its IDs account for, and ran ahead of the clock twice as
//! fast. The wall clock moves the counter too, when it passes it; every
//! round here issues more than 65,536 IDs a second from the start of a
//! second, so the counter stays ahead of the clock and only the workers
//! move it (a round where the clock overtook the last ID is marked `*`).
//!
//! **Lead left**: the newest ID's second minus the wall clock's when the
//! last worker has exited. Beside it, the lead a perfect shard would
//! leave: the first probe's second plus the IDs issued over 65,536, minus
//! the same wall clock (a shard that issued more than 65,536 IDs a second
//! has borrowed that much whatever it does).
//!
//! **A draw**: the calls over a microsecond of the short-lived workers: a
//! call that drew a block (a process issuing 2,000 IDs draws about 13:
//! blocks start small and grow with its own use), rarely one that waited
//! for the CPU or a member's turn. Their median is what a draw costs the
//! caller; one at a time, nobody else holds the lock.
//!
//! `cargo bench -p idutil-benches --bench shared [-- ROUNDS]
//! [long|short|lone] [--command PATH]` (default 5 rounds, every part).
//! BENCHMARKS.md quotes the output. Under `cargo test -p idutil-benches
//! --benches` it runs one short round of each part as a smoke test,
//! checking that every ID falls between the probes.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::time::{MonotonicClock, MASTODON_EPOCH};
use idutil::{Generator, Id};

ferroid::define_snowflake_id!(
    /// 41 bits of milliseconds, 22 of sequence, as `benches/plain.rs`.
    PlainId, u64,
    reserved: 1,
    timestamp: 41,
    machine_id: 0,
    sequence: 22
);

const SHARD: u32 = 12;
const WORKER: &str = "IDUTIL_SHARED_WORKER";

/// The ID space of this run's shard, `bench-shared-PID` (the parent's
/// pid): a run beside another never shares its per-host lock.
static ID_SPACE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn id_space() -> &'static str {
    ID_SPACE.get_or_init(|| format!("bench-shared-{}", std::process::id()))
}

/// Opens the shard. Members wait up to a minute for one that holds the
/// short lock: on two cores, under other builds and 32 processes issuing
/// flat out, a member once held it past the default five seconds.
///
/// Opening is tried again when refused with [`idutil::Error::HostLocked`]
/// (said on stderr): a process that joins while the first one holds the
/// per-host lock alone, before it shares it, waits for it a fifth of a
/// second, and two busy cores can keep the first one from running longer.
fn open(dir: &Path) -> Generator {
    let mut tries = 0;
    loop {
        let opened = Generator::builder()
            .id_space(id_space())
            .shard(SHARD)
            .state_dir(dir)
            .member_wait(Duration::from_secs(60))
            .open();
        match opened {
            Err(idutil::Error::HostLocked { .. }) if tries < 20 => {
                eprintln!(
                    "worker {}: refused by the per-host lock; trying again",
                    std::process::id()
                );
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            opened => return opened.expect("open the shard"),
        }
    }
}

/// The shard's counter at `id`: its seconds and sequence, shard left out.
fn counter(id: Id) -> u64 {
    (id.seconds() << 16) | u64::from(id.sequence())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A long-lived worker: opens the shard, waits for its stdin to close,
/// issues flat out for `run_for`, then times every call for 200 ms (or
/// `run_for`, if shorter). Prints the IDs issued in all, those issued
/// flat out and the nanoseconds that took, the sampled p99.9 and the
/// longest call (ns), the first and last ID, and the calls over a
/// microsecond (ns).
fn long_worker(dir: &Path, run_for: Duration) {
    let g = open(dir);
    println!("ready");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    // One call in 64 is timed.
    let mut samples = Vec::with_capacity(1 << 20);
    let mut count = 0u64;
    let first = g.next_id().unwrap();
    let start = Instant::now();
    while start.elapsed() < run_for {
        for i in 0..4096u64 {
            if i % 64 == 0 {
                let t = Instant::now();
                black_box(g.next_id().unwrap());
                samples.push(t.elapsed().as_nanos() as u64);
            } else {
                black_box(g.next_id().unwrap());
            }
        }
        count += 4096;
    }
    let elapsed = start.elapsed();
    let flat_out = count;
    // The calls that drew a block are few: time every call for a moment,
    // and keep those over a microsecond (a draw, or a wait for the short
    // lock, a reservation or the CPU).
    let t_all = Instant::now();
    let mut longest = 0u64;
    let mut slow = Vec::new();
    let mut last = first;
    while t_all.elapsed() < run_for.min(Duration::from_millis(200)) {
        let t = Instant::now();
        last = g.next_id().unwrap();
        let ns = t.elapsed().as_nanos() as u64;
        count += 1;
        longest = longest.max(ns);
        if ns > 1_000 {
            slow.push(ns);
        }
    }
    samples.sort_unstable();
    let p999 = samples[((samples.len() - 1) as f64 * 0.999) as usize];
    g.close().unwrap();
    print!(
        "{} {flat_out} {} {p999} {longest} {first} {last}",
        count + 1,
        elapsed.as_nanos()
    );
    for ns in slow {
        print!(" {ns}");
    }
    println!();
}

/// A short-lived worker: opens the shard, issues `n` IDs one call at a
/// time, timing each, closes. Prints `count first last slow...`.
fn short_worker(dir: &Path, n: u64) {
    let g = open(dir);
    let first = g.next_id().unwrap();
    let mut last = first;
    let mut slow = Vec::new();
    for _ in 1..n {
        let t = Instant::now();
        last = g.next_id().unwrap();
        let ns = t.elapsed().as_nanos() as u64;
        if ns > 1_000 {
            slow.push(ns);
        }
    }
    g.close().unwrap();
    print!("{n} {first} {last}");
    for ns in slow {
        print!(" {ns}");
    }
    println!();
}

/// What a worker reports.
#[derive(Default)]
struct Report {
    count: u64,
    /// IDs a second (long-lived workers).
    rate: f64,
    p999: u64,
    longest: u64,
    first: u64,
    last: u64,
    slow: Vec<u64>,
}

fn parse_long(line: &str) -> Report {
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    Report {
        count: f[0],
        rate: f[1] as f64 / (f[2] as f64 / 1e9),
        p999: f[3],
        longest: f[4],
        first: f[5],
        last: f[6],
        slow: f[7..].to_vec(),
    }
}

fn parse_short(line: &str) -> Report {
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    Report {
        count: f[0],
        first: f[1],
        last: f[2],
        slow: f[3..].to_vec(),
        ..Report::default()
    }
}

/// What one round shows.
struct Round {
    /// IDs issued by all the workers.
    issued: u64,
    /// Counter values strictly between the probes, over `issued`.
    moved_per_id: f64,
    /// The newest ID's second minus the wall clock at the end.
    lead: f64,
    /// The lead a shard that moved one value per ID would leave.
    ideal_lead: f64,
    /// The wall clock had passed the newest ID at the end.
    clock_passed: bool,
    rate: f64,
    p999: u64,
    longest: u64,
    slow: Vec<u64>,
    wall: Duration,
}

/// A probe: one ID from the shard, opened alone, closed cleanly.
fn probe(dir: &Path) -> Id {
    let g = open(dir);
    let id = g.next_id().unwrap();
    g.close().unwrap();
    id
}

/// Whether rounds start just after a wall-clock second begins (not in
/// the smoke run, which checks only that every ID falls between the
/// probes).
static ALIGN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A fresh state directory, entered just after a wall-clock second
/// begins, and the first probe's ID.
fn begin() -> (tempfile::TempDir, Id) {
    let dir = tempfile::Builder::new()
        .prefix("bench-shared-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    if ALIGN.load(std::sync::atomic::Ordering::Relaxed) {
        let fraction = unix_now().fract();
        std::thread::sleep(Duration::from_secs_f64(1.0 - fraction + 0.002));
    }
    let s = probe(dir.path());
    (dir, s)
}

/// Ends a round: the second probe, and the counter and lead figures.
fn finish(dir: &Path, s: Id, reports: &[Report], wall: Duration) -> Round {
    let end = unix_now();
    let e = probe(dir);
    let issued: u64 = reports.iter().map(|r| r.count).sum();
    let newest = reports.iter().map(|r| r.last).max().unwrap();
    let newest = Id::from_u64(newest).unwrap();
    for r in reports {
        assert!(
            r.first > s.as_u64() && r.last < e.as_u64() && r.first <= r.last,
            "an ID outside the probes: {} < {}..={} < {}",
            s,
            r.first,
            r.last,
            e
        );
    }
    let moved = counter(e) - counter(s) - 1;
    assert!(moved >= issued, "{moved} counter values for {issued} IDs");
    let s_unix = s.unix_seconds() as f64 + f64::from(s.sequence()) / 65_536.0;
    Round {
        issued,
        moved_per_id: moved as f64 / issued as f64,
        lead: newest.unix_seconds() as f64 - end.floor(),
        ideal_lead: (s_unix + issued as f64 / 65_536.0 - end).max(0.0),
        clock_passed: (end as u64) > newest.unix_seconds(),
        rate: reports.iter().map(|r| r.rate).sum(),
        p999: reports.iter().map(|r| r.p999).max().unwrap(),
        longest: reports.iter().map(|r| r.longest).max().unwrap(),
        slow: reports
            .iter()
            .flat_map(|r| r.slow.iter().copied())
            .collect(),
        wall,
    }
}

fn worker_command(spec: String) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env(WORKER, format!("{} {spec}", id_space()))
        .stdout(Stdio::piped());
    c
}

/// `processes` long-lived workers at once, for `run_for`.
fn long_round(processes: usize, run_for: Duration) -> Round {
    let (dir, s) = begin();
    let spec = format!("long {} {}", run_for.as_millis(), dir.path().display());
    let mut children: Vec<_> = (0..processes)
        .map(|_| {
            worker_command(spec.clone())
                .stdin(Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let mut r = BufReader::new(c.stdout.take().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            r
        })
        .collect();
    let started = Instant::now();
    for c in &mut children {
        drop(c.stdin.take());
    }
    let mut reports = Vec::new();
    for (c, r) in children.iter_mut().zip(&mut readers) {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        reports.push(parse_long(&line));
        assert!(c.wait().unwrap().success());
    }
    finish(dir.path(), s, &reports, started.elapsed())
}

/// `total` short-lived workers, `at_once` at a time, each issuing `n`.
fn short_round(total: usize, at_once: usize, n: u64, command: Option<&Path>) -> Round {
    let (dir, s) = begin();
    let start = |dir: &Path| -> Child {
        match command {
            Some(idutil) => Command::new(idutil)
                .args(["next", "-n", &n.to_string()])
                .env("IDUTIL_STATE_DIR", dir)
                .env("IDUTIL_SHARD", SHARD.to_string())
                .env("IDUTIL_ID_SPACE", id_space())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start idutil"),
            None => worker_command(format!("short {n} {}", dir.display()))
                .spawn()
                .expect("start a worker"),
        }
    };
    let started = Instant::now();
    let mut running: Vec<Child> = Vec::new();
    let mut launched = 0;
    let mut reports = Vec::new();
    while launched < total || !running.is_empty() {
        while launched < total && running.len() < at_once {
            running.push(start(dir.path()));
            launched += 1;
        }
        // Wait for whichever exits first (its output, at most a few
        // thousand IDs, fits in the pipe).
        let done = loop {
            if let Some(i) = running
                .iter_mut()
                .position(|c| c.try_wait().unwrap().is_some())
            {
                break i;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let mut c = running.swap_remove(done);
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(c.wait().unwrap().success());
        reports.push(match command {
            Some(_) => {
                let ids: Vec<u64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
                Report {
                    count: ids.len() as u64,
                    first: ids[0],
                    last: *ids.last().unwrap(),
                    ..Report::default()
                }
            }
            None => parse_short(&out),
        });
    }
    finish(dir.path(), s, &reports, started.elapsed())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median and 90th percentile of the pooled slow calls, in µs.
fn slow_calls(rounds: &[Round]) -> (usize, f64, f64) {
    let mut all: Vec<u64> = rounds.iter().flat_map(|r| r.slow.iter().copied()).collect();
    all.sort_unstable();
    if all.is_empty() {
        return (0, 0.0, 0.0);
    }
    let at = |q: f64| all[((all.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    (all.len(), at(0.5), at(0.9))
}

/// A lead in seconds, as text: `12 s`, `3 min 20 s`, `10 h 41 min`.
fn lead(seconds: f64) -> String {
    let s = seconds.round() as i64;
    let (sign, s) = if s < 0 { ("-", -s) } else { ("", s) };
    if s < 60 {
        format!("{sign}{s} s")
    } else if s < 3600 {
        format!("{sign}{} min {} s", s / 60, s % 60)
    } else {
        format!("{sign}{} h {} min", s / 3600, s % 3600 / 60)
    }
}

/// The median round's figures, and `*` when the clock passed the newest
/// ID in any round.
fn summary(runs: &[Round]) -> (f64, f64, f64, &'static str) {
    let moved = median(runs.iter().map(|r| r.moved_per_id).collect());
    let left = median(runs.iter().map(|r| r.lead).collect());
    let ideal = median(runs.iter().map(|r| r.ideal_lead).collect());
    let mark = if runs.iter().any(|r| r.clock_passed) {
        "*"
    } else {
        ""
    };
    (moved, left, ideal, mark)
}

/// Nanoseconds per ID of a lone process's loop, idutil then ferroid,
/// alternating, medians of `rounds`.
fn lone(dir: &Path, rounds: usize, n: u64) -> (f64, f64) {
    let g = Generator::builder()
        .id_space(format!("{}-lone", id_space()))
        .shard(SHARD + 1)
        .state_dir(dir)
        .open()
        .unwrap();
    let f: AtomicSnowflakeGenerator<PlainId, MonotonicClock<1>> =
        AtomicSnowflakeGenerator::new(0, MonotonicClock::<1>::with_epoch(MASTODON_EPOCH));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            black_box(g.next_id().unwrap());
        }
        a.push(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        for _ in 0..n {
            black_box(f.next_id(|_| std::hint::spin_loop()).to_raw());
        }
        b.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    g.close().unwrap();
    (median(a), median(b))
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER) {
        let mut words = spec.splitn(4, ' ');
        ID_SPACE.set(words.next().unwrap().to_string()).unwrap();
        let (kind, arg, dir) = (
            words.next().unwrap(),
            words.next().unwrap().parse().unwrap(),
            PathBuf::from(words.next().unwrap()),
        );
        match kind {
            "long" => long_worker(&dir, Duration::from_millis(arg)),
            _ => short_worker(&dir, arg),
        }
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
    let rounds: usize = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    let command = args
        .iter()
        .position(|a| a == "--command")
        .map(|i| PathBuf::from(&args[i + 1]));
    ALIGN.store(!smoke, std::sync::atomic::Ordering::Relaxed);
    let (run_for, long_counts, short_total, short_counts, short_n) = if smoke {
        (Duration::from_millis(100), &[1, 4][..], 8, &[4][..], 500)
    } else {
        (
            Duration::from_secs(2),
            &[1, 4, 16, 32][..],
            64,
            &[1, 4, 16, 32][..],
            2000,
        )
    };
    // `long`, `short`, `lone`: only those parts.
    let parts: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| ["long", "short", "lone"].contains(a))
        .collect();
    let part = |name: &str| parts.is_empty() || parts.contains(&name);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}", load.trim());
    if part("long") {
        long_part(rounds, run_for, long_counts);
    }
    if part("short") {
        short_part(
            rounds,
            short_total,
            short_counts,
            short_n,
            command.as_deref(),
        );
    }
    if part("lone") {
        lone_part(rounds, smoke);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load after: {}", load.trim());
}

/// The long-lived rounds and their table.
fn long_part(rounds: usize, run_for: Duration, counts: &[usize]) {
    println!(
        "\nlong-lived: each process next_id() flat out for {} ms, then {} ms timing every call; \
         median of {rounds}",
        run_for.as_millis(),
        run_for.min(Duration::from_millis(200)).as_millis()
    );
    println!(
        "processes  IDs/s together  counter moved per ID  lead left (perfect)  sampled p99.9  \
         calls over 1 us: median, p90 (count)  slowest"
    );
    let mut alone = 0.0;
    for &processes in counts {
        let runs: Vec<Round> = (0..rounds)
            .map(|_| long_round(processes, run_for))
            .collect();
        let rate = median(runs.iter().map(|r| r.rate).collect());
        if processes == 1 {
            alone = rate;
        }
        let (moved, left, ideal, mark) = summary(&runs);
        let p999 = median(runs.iter().map(|r| r.p999 as f64).collect());
        let longest = median(runs.iter().map(|r| r.longest as f64).collect());
        let (n_slow, slow_median, slow_p90) = slow_calls(&runs);
        println!(
            "{processes:>9}  {:>7.1} M/s ({:.2}x one)  {moved:>6.2}{mark}  {:>12} ({})  {p999:>6.0} ns  \
             {slow_median:>7.1} / {slow_p90:>7.1} us ({n_slow})  {:>8.1} us",
            rate / 1e6,
            rate / alone,
            lead(left),
            lead(ideal),
            longest / 1e3
        );
    }
}

/// The short-lived rounds and their table.
fn short_part(rounds: usize, total: usize, counts: &[usize], n: u64, command: Option<&Path>) {
    match command {
        Some(c) => println!(
            "\nshort-lived: {total} x `{} next -n {n}`, N at a time; median of {rounds}",
            c.display()
        ),
        None => println!(
            "\nshort-lived: {total} processes, N at a time, each opening, {n} x \
             next_id() (every call timed), closing; median of {rounds}"
        ),
    }
    println!(
        "at a time  IDs issued  wall time  counter moved per ID  lead left (perfect)  \
         calls over 1 us: median, p90 (per process)"
    );
    for &at_once in counts {
        let runs: Vec<Round> = (0..rounds)
            .map(|_| short_round(total, at_once, n, command))
            .collect();
        let (moved, left, ideal, mark) = summary(&runs);
        let wall = median(runs.iter().map(|r| r.wall.as_secs_f64()).collect());
        let issued = median(runs.iter().map(|r| r.issued as f64).collect());
        let (n_slow, slow_median, slow_p90) = slow_calls(&runs);
        println!(
            "{at_once:>9}  {issued:>10.0}  {:>7.0} ms  {moved:>6.2}{mark}  {:>12} ({})  \
             {slow_median:>7.1} / {slow_p90:>7.1} us ({:.1})",
            wall * 1e3,
            lead(left),
            lead(ideal),
            n_slow as f64 / (rounds * total) as f64
        );
    }
}

/// A lone process's hot path beside ferroid's.
fn lone_part(rounds: usize, smoke: bool) {
    let dir = tempfile::Builder::new()
        .prefix("bench-shared-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let n = if smoke { 100_000 } else { 20_000_000 };
    let (ours, theirs) = lone(dir.path(), rounds.max(3), n);
    println!(
        "\nlone process, one thread: idutil {ours:.2} ns/ID, ferroid {theirs:.2} ns/ID ({:.2}x)",
        ours / theirs
    );
}
