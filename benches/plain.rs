//! The hot path as an application's own loop measures it: fresh threads
//! each round (no barrier, no shared total), each making 2 million IDs
//! through a closure called with static dispatch, rounds alternating
//! between idutil and ferroid's `AtomicSnowflakeGenerator`, and the median
//! of the per-round ratios (idutil's time over ferroid's in the same
//! round; the same for the process's CPU time beside it). Two shapes:
//! each ID passed to `black_box` (a loop that uses the value), and the IDs
//! collected into a `Vec` (a loop that keeps them).
//!
//! ferroid is set up as its users set it up: 41 timestamp bits, no machine
//! bits, 22 sequence bits, `MonotonicClock::<1>` on the Mastodon epoch
//! (the Unix epoch). `IdUtil::next_id` is the process-wide generator,
//! `Generator::next_id` one generator opened for the whole run; both open
//! their state in a fresh directory under the target directory.
//!
//! `cargo bench -p idutil-benches --bench plain [-- FILTER]
//! [--burst-peer]`; FILTER (`1`, `2`, `Vec`, `IdUtil`, `Generator`) runs
//! only the matching lines; `--burst-peer` compares with ferroid set up as
//! `benches/burst.rs` sets it up (37 bits of milliseconds from a second
//! ago, 5 machine bits) instead, to tell the loop from the peer's setup.
//! BENCHMARKS.md quotes the output. Under `cargo test -p idutil-benches
//! --benches` it runs one short round as a smoke test.

use std::hint::black_box;
use std::thread;
use std::time::Instant;

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::time::{MonotonicClock, MASTODON_EPOCH};
use idutil::{Generator, IdUtil};

mod peers;

ferroid::define_snowflake_id!(
    /// 41 bits of milliseconds, 22 of sequence: the sequence never runs out
    /// within a millisecond here.
    PlainId, u64,
    reserved: 1,
    timestamp: 41,
    machine_id: 0,
    sequence: 22
);

type Ferroid = AtomicSnowflakeGenerator<PlainId, MonotonicClock<1>>;

const ROUNDS: usize = 7;
const PER_THREAD: u64 = 2_000_000;
const GLOBAL_SHARD: u32 = 9;
const EXPLICIT_SHARD: u32 = 10;

/// How a thread's loop uses the IDs.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// `black_box(next())` per call.
    Use,
    /// `(0..n).map(|_| next()).collect::<Vec<_>>()`.
    Collect,
}

/// Wall time per ID, in nanoseconds, of `threads` fresh threads each
/// making `n` IDs with `next`.
/// CPU time used by the whole process so far, every thread counted, in
/// nanoseconds.
fn process_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` only writes the `timespec` it is given.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// A round's wall time and the process's CPU time per ID, in nanoseconds:
/// on a machine other work shares, the wall time also counts the time
/// others held the cores; the CPU time does not.
#[derive(Clone, Copy)]
struct Cost {
    wall: f64,
    cpu: f64,
}

fn round<F: Fn() -> u64 + Sync>(threads: usize, n: u64, shape: Shape, next: &F) -> Cost {
    let cpu = process_cpu();
    let began = Instant::now();
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || match shape {
                    Shape::Use => {
                        for _ in 0..n {
                            black_box(next());
                        }
                    }
                    Shape::Collect => {
                        let ids: Vec<u64> = (0..n).map(|_| next()).collect();
                        black_box(ids);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a bench thread");
        }
    });
    let ids = (threads as u64 * n) as f64;
    Cost {
        wall: began.elapsed().as_nanos() as f64 / ids,
        cpu: (process_cpu() - cpu) / ids,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `rounds` rounds alternating `idutil` and `peer` (each first every other
/// round, after one untimed warm-up each); returns the median of the
/// per-round ratios (wall time), their range, each side's median wall time
/// per ID, and the median of the per-round ratios of CPU time.
fn compare<A, B>(
    threads: usize,
    n: u64,
    shape: Shape,
    rounds: usize,
    idutil: &A,
    peer: &B,
) -> (f64, f64, f64, f64, f64, f64)
where
    A: Fn() -> u64 + Sync,
    B: Fn() -> u64 + Sync,
{
    round(threads, n, shape, idutil);
    round(threads, n, shape, peer);
    let (mut ratios, mut mine, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    let mut cpu_ratios = Vec::new();
    for r in 0..rounds {
        let (a, b) = if r % 2 == 0 {
            let a = round(threads, n, shape, idutil);
            (a, round(threads, n, shape, peer))
        } else {
            let b = round(threads, n, shape, peer);
            (round(threads, n, shape, idutil), b)
        };
        ratios.push(a.wall / b.wall);
        cpu_ratios.push(a.cpu / b.cpu);
        mine.push(a.wall);
        theirs.push(b.wall);
    }
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(0.0, f64::max);
    (
        median(&mut ratios),
        low,
        high,
        median(&mut mine),
        median(&mut theirs),
        median(&mut cpu_ratios),
    )
}

fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("idutil-plain")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a state directory")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Every line of the table: one and two threads, both shapes, both ways
/// of calling idutil, each against `peer`.
fn lines<G, E, P>(filter: Option<&str>, n: u64, rounds: usize, global: &G, explicit: &E, peer: &P)
where
    G: Fn() -> u64 + Sync,
    E: Fn() -> u64 + Sync,
    P: Fn() -> u64 + Sync,
{
    println!(
        "plain loop: fresh threads per round, {n} IDs per thread, 1 warm-up + {rounds} \
         rounds alternating with ferroid; ratio = idutil / ferroid per round"
    );
    println!(
        "{:<8} {:<10} {:<22} {:>7} {:>13} {:>10} {:>11} {:>9}",
        "threads",
        "shape",
        "idutil",
        "ratio",
        "ratio range",
        "idutil ns",
        "ferroid ns",
        "CPU ratio"
    );
    for threads in [1, 2] {
        for shape in [Shape::Use, Shape::Collect] {
            let shape_name = match shape {
                Shape::Use => "black_box",
                Shape::Collect => "into a Vec",
            };
            for name in ["IdUtil::next_id", "Generator::next_id"] {
                let line = format!("{threads} {shape_name} {name}");
                if filter.is_some_and(|f| !line.contains(f)) {
                    continue;
                }
                let (m, low, high, a, b, c) = if name.starts_with("IdUtil") {
                    compare(threads, n, shape, rounds, global, peer)
                } else {
                    compare(threads, n, shape, rounds, explicit, peer)
                };
                println!(
                    "{threads:<8} {shape_name:<10} {name:<22} {m:>7.2} {:>13} {a:>10.2} {b:>11.2} {c:>9.2}",
                    format!("{low:.2}–{high:.2}")
                );
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench");
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let (rounds, n) = if smoke {
        (1, 10_000)
    } else {
        (ROUNDS, PER_THREAD)
    };

    let global_dir = state_dir();
    std::env::set_var("IDUTIL_STATE_DIR", global_dir.path());
    std::env::set_var("IDUTIL_SHARD", GLOBAL_SHARD.to_string());
    std::env::set_var("IDUTIL_ID_SPACE", format!("plain-{}", std::process::id()));
    IdUtil::init().expect("open the process-wide generator");
    let explicit_dir = state_dir();
    let generator = Generator::builder()
        .shard(EXPLICIT_SHARD)
        .state_dir(explicit_dir.path())
        .open()
        .expect("open a generator");
    let ferroid: Ferroid =
        AtomicSnowflakeGenerator::new(0, MonotonicClock::<1>::with_epoch(MASTODON_EPOCH));

    let burst_ferroid = peers::ferroid();
    let global = || IdUtil::next_id() as u64;
    let explicit = || generator.next_id().expect("an ID").as_u64();

    println!("load average at start: {}", load_average());
    // Two calls, not a branch in the closure: each peer's loop is compiled
    // as its users' would be.
    if args.iter().any(|a| a == "--burst-peer") {
        println!("peer: ferroid as benches/burst.rs sets it up");
        let peer = || burst_ferroid.next_id(|_| std::hint::spin_loop()).to_raw();
        lines(filter.as_deref(), n, rounds, &global, &explicit, &peer);
    } else {
        let peer = || ferroid.next_id(|_| std::hint::spin_loop()).to_raw();
        lines(filter.as_deref(), n, rounds, &global, &explicit, &peer);
    }
    println!("load average at end: {}", load_average());
    generator.close().expect("close the generator");
    IdUtil::shutdown().expect("close the process-wide generator");
}
