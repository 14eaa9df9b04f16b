//! Processes sharing one shard: the IDs a second that 1, 2, 4 and 8
//! processes issue together on one shard, each as fast as it can on one
//! thread; how long a call that draws a block takes (the slowest calls of
//! a process sharing the shard with busy others); and, in the same run, a
//! lone process's hot path beside ferroid's `AtomicSnowflakeGenerator`.
//!
//! Every worker is this benchmark binary run again (`IDUTIL_SHARED_WORKER`
//! set), a process of its own, released at once through its stdin so that
//! they overlap; each issues for a fixed time and prints its count and
//! the latency of its calls. Each line is the median of the rounds.
//!
//! `cargo bench --bench shared [-- ROUNDS]` (default 5). BENCHMARKS.md
//! quotes the output. Under `cargo test --benches` it runs one short round
//! as a smoke test.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::time::{MonotonicClock, MASTODON_EPOCH};
use idutil::Generator;

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

/// A worker: opens the shard, waits for its stdin to close, issues for
/// the given time, prints `count slowest p99_ns p999_ns draws_over_1us`.
fn worker(dir: &Path, run_for: Duration) {
    let g = Generator::builder()
        .id_space("bench-shared")
        .shard(SHARD)
        .state_dir(dir)
        .open()
        .expect("open the shard");
    println!("ready");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    // Per call timings are sampled: one call in 64 is timed, and every
    // call slower than a microsecond (a draw, a wait) is counted.
    let mut samples = Vec::with_capacity(1 << 20);
    let mut slow = 0u64;
    let mut count = 0u64;
    let start = Instant::now();
    while start.elapsed() < run_for {
        for i in 0..4096u64 {
            if i % 64 == 0 {
                let t = Instant::now();
                black_box(g.next_id().unwrap());
                let ns = t.elapsed().as_nanos() as u64;
                samples.push(ns);
            } else {
                black_box(g.next_id().unwrap());
            }
        }
        count += 4096;
    }
    let elapsed = start.elapsed();
    // The calls that drew a block: timed again apart, with one call timed
    // in every 4096, would miss most; so time every call for a moment.
    let t_all = Instant::now();
    let mut longest = 0u64;
    let mut slow_calls = Vec::new();
    while t_all.elapsed() < Duration::from_millis(200) {
        let t = Instant::now();
        black_box(g.next_id().unwrap());
        let ns = t.elapsed().as_nanos() as u64;
        longest = longest.max(ns);
        if ns > 1_000 {
            slow += 1;
            slow_calls.push(ns);
        }
    }
    slow_calls.sort_unstable();
    let slow_median = slow_calls.get(slow_calls.len() / 2).copied().unwrap_or(0);
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "{} {} {} {} {} {} {}",
        count,
        elapsed.as_nanos(),
        at(0.99),
        at(0.999),
        longest,
        slow,
        slow_median
    );
    g.close().unwrap();
}

struct Round {
    ids_per_sec: f64,
    p99: u64,
    p999: u64,
    longest: u64,
    /// Calls over a microsecond in 200 ms of timing every call (a draw,
    /// or a wait for the short lock or the CPU), and their median.
    slow: u64,
    slow_median: u64,
}

/// `processes` workers on one shard at once, for `run_for`.
fn round(dir: &Path, processes: usize, run_for: Duration) -> Round {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .env(WORKER, format!("{} {}", dir.display(), run_for.as_millis()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
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
    for c in &mut children {
        drop(c.stdin.take());
    }
    let mut total = 0.0;
    let (mut p99, mut p999, mut longest, mut slow, mut slow_median) = (0, 0, 0, 0, 0);
    for (c, r) in children.iter_mut().zip(&mut readers) {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        total += f[0] as f64 / (f[1] as f64 / 1e9);
        p99 = p99.max(f[2]);
        p999 = p999.max(f[3]);
        longest = longest.max(f[4]);
        slow += f[5];
        slow_median = slow_median.max(f[6]);
        assert!(c.wait().unwrap().success());
    }
    Round {
        ids_per_sec: total,
        p99,
        p999,
        longest,
        slow,
        slow_median,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per ID of a lone process's loop, idutil then ferroid,
/// alternating, medians of `rounds`.
fn lone(dir: &Path, rounds: usize, n: u64) -> (f64, f64) {
    let g = Generator::builder()
        .id_space("bench-shared-lone")
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
        let (dir, ms) = spec.rsplit_once(' ').unwrap();
        worker(Path::new(dir), Duration::from_millis(ms.parse().unwrap()));
        return;
    }
    let smoke =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    let run_for = Duration::from_millis(if smoke { 100 } else { 1000 });
    let dir = tempfile::Builder::new()
        .prefix("bench-shared-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}", load.trim());
    println!(
        "processes  IDs/s together (median of {rounds})  sampled p99 / p99.9  calls over 1 us (their median)  slowest call"
    );
    let mut alone = 0.0;
    for processes in [1, 2, 4, 8] {
        let runs: Vec<Round> = (0..rounds)
            .map(|_| round(dir.path(), processes, run_for))
            .collect();
        let rate = median(runs.iter().map(|r| r.ids_per_sec).collect());
        if processes == 1 {
            alone = rate;
        }
        let p99 = median(runs.iter().map(|r| r.p99 as f64).collect());
        let p999 = median(runs.iter().map(|r| r.p999 as f64).collect());
        let longest = median(runs.iter().map(|r| r.longest as f64).collect());
        let slow = median(runs.iter().map(|r| r.slow as f64).collect());
        let slow_median = median(runs.iter().map(|r| r.slow_median as f64).collect());
        println!(
            "{processes:>9}  {:>12.1} M/s ({:.2}x one)  {:>5.0} / {:>5.0} ns  {:>6.0} ({:>6.1} us)  \
             {:>9.1} us",
            rate / 1e6,
            rate / alone,
            p99,
            p999,
            slow,
            slow_median / 1e3,
            longest / 1e3
        );
    }
    let n = if smoke { 100_000 } else { 20_000_000 };
    let (ours, theirs) = lone(dir.path(), rounds.max(3), n);
    println!(
        "lone process, one thread: idutil {ours:.2} ns/ID, ferroid {theirs:.2} ns/ID ({:.2}x)",
        ours / theirs
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load after: {}", load.trim());
}
