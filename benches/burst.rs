//! A sustained burst: 4 million IDs per measured round, drawn as fast as
//! possible by one thread or shared by two, through `IdUtil::next_id()`,
//! `Generator::next_id()` and ferroid's `AtomicSnowflakeGenerator`, in the
//! same process and run, rounds alternating between them. Reports the
//! total wall time per ID (median and range over the rounds) and the ratio
//! to ferroid.
//!
//! Four million IDs are a minute of borrowed seconds for idutil (65,536
//! per second per shard), so a round crosses 61 second boundaries and
//! several reservation writes: the slow path and the shard thread are
//! part of what is measured, as they are in a real burst. Each round of
//! `Generator::next_id()` opens a fresh generator in a fresh state
//! directory; `IdUtil::next_id()` is the one process-wide generator, so its
//! rounds run further and further ahead of the clock, as a long-lived
//! service's would.
//!
//! Beside the wall time, the process's CPU time per ID over the round
//! (every thread: the callers, the clock threads, the shard thread):
//! on a 2-core machine that other work shares, wall time also counts the
//! time other processes held the cores, CPU time does not, but it does not
//! count waiting on the disk either.
//!
//! Each contender gets one untimed warm-up round (page faults, the clock
//! threads starting), then the timed rounds rotate the order, so each runs
//! first, second and third equally often. The closures are called directly,
//! not through a `dyn` pointer, as an application would call them.
//!
//! Batches: rounds of 16 calls of `next_ids(1_000_000)` (16 million IDs,
//! 244 borrowed seconds), every ID read. The first round runs on a freshly
//! opened generator, which has no rate yet and reserves a window at a time
//! until its reservation catches up with the burst; it is reported apart
//! from the median of the later rounds, the sustained rate.
//!
//! `cargo bench -p idutil-benches --bench burst [-- FILTER]`; FILTER (`1`,
//! `2`, `batch`) runs only the matching part, for profiling. BENCHMARKS.md
//! quotes the output. Under `cargo test -p idutil-benches --benches` it
//! runs one short round as a smoke test.

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use idutil::{Generator, IdUtil};

mod peers;

const GLOBAL_SHARD: u32 = 7;
const EXPLICIT_SHARD: u32 = 8;
const ROUNDS: usize = 7;
const IDS_PER_ROUND: u64 = 4_000_000;
const BATCH: u64 = 1_000_000;
const BATCHES_PER_ROUND: u64 = 16;

/// CPU time used by the whole process so far, every thread counted (the
/// callers, the clock threads and the shard thread), in nanoseconds.
fn process_cpu() -> u128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` only writes the `timespec` it is given.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if r != 0 {
        return 0;
    }
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// A round's cost per ID, in nanoseconds.
#[derive(Clone, Copy)]
struct Cost {
    /// Wall time from the release of a barrier to the last thread's end.
    wall: f64,
    /// CPU time of the whole process meanwhile: what the round took from
    /// the machine's cores, whatever else ran on them.
    cpu: f64,
}

/// Runs `threads` threads that together call `next` `total` times.
fn round(threads: usize, total: u64, next: impl Fn() -> u64 + Sync) -> Cost {
    let per_thread = total / threads as u64;
    let start = Barrier::new(threads + 1);
    let next = &next;
    let elapsed = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let mut last = 0;
                    for _ in 0..per_thread {
                        last = black_box(next());
                    }
                    last
                })
            })
            .collect();
        start.wait();
        let cpu = process_cpu();
        let began = Instant::now();
        for w in workers {
            black_box(w.join().expect("a bench thread"));
        }
        (began.elapsed(), process_cpu() - cpu)
    });
    let ids = (per_thread * threads as u64) as f64;
    Cost {
        wall: elapsed.0.as_nanos() as f64 / ids,
        cpu: elapsed.1 as f64 / ids,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("idutil-burst")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a state directory")
}

fn open(shard: u32, dir: &tempfile::TempDir) -> Generator {
    Generator::builder()
        .shard(shard)
        .state_dir(dir.path())
        .open()
        .expect("open a generator")
}

/// One round of `which` (0 `IdUtil`, 1 a fresh `Generator`, 2 ferroid).
fn contender(which: usize, threads: usize, ids: u64) -> Cost {
    match which {
        0 => round(threads, ids, || IdUtil::next_id() as u64),
        1 => {
            let dir = state_dir();
            let g = open(EXPLICIT_SHARD, &dir);
            let t = round(threads, ids, || g.next_id().expect("an ID").as_u64());
            g.close().expect("close the generator");
            t
        }
        _ => {
            let f = peers::ferroid();
            round(threads, ids, || {
                f.next_id(|_| std::hint::spin_loop()).to_raw()
            })
        }
    }
}

/// Wall time per ID, in nanoseconds, for `batches` calls of
/// `next_ids(BATCH)`, every ID read.
fn batch_round(g: &Generator, batches: u64) -> f64 {
    let began = Instant::now();
    let mut sum = 0u64;
    for _ in 0..batches {
        for id in g.next_ids(BATCH).expect("a batch") {
            sum = sum.wrapping_add(id.as_u64());
        }
    }
    black_box(sum);
    began.elapsed().as_nanos() as f64 / (batches * BATCH) as f64
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench");
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let wanted = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    let (rounds, ids, batches) = if smoke {
        (1, 100_000, 1)
    } else {
        (ROUNDS, IDS_PER_ROUND, BATCHES_PER_ROUND)
    };
    let global_dir = state_dir();
    std::env::set_var("IDUTIL_STATE_DIR", global_dir.path());
    std::env::set_var("IDUTIL_SHARD", GLOBAL_SHARD.to_string());
    // An ID space of its own: generators of other processes on this host
    // keep theirs.
    std::env::set_var("IDUTIL_ID_SPACE", format!("burst-{}", std::process::id()));
    IdUtil::init().expect("open the process-wide generator");

    println!("load average at start: {}", load_average());
    println!("sustained burst: {ids} IDs per round, 1 warm-up + {rounds} rounds, order rotating");
    println!(
        "{:<8} {:<26} {:>9} {:>13} {:>6} {:>9} {:>6}",
        "threads", "generator", "wall ns/ID", "range", "ratio", "CPU ns/ID", "ratio"
    );
    let names = [
        "idutil IdUtil::next_id",
        "idutil Generator::next_id",
        "ferroid AtomicSnowflake",
    ];
    for threads in [1, 2] {
        if !wanted(&threads.to_string()) {
            continue;
        }
        for which in 0..3 {
            contender(which, threads, ids);
        }
        let mut walls: [Vec<f64>; 3] = Default::default();
        let mut cpus: [Vec<f64>; 3] = Default::default();
        for r in 0..rounds {
            for k in 0..3 {
                let which = (r + k) % 3;
                let cost = contender(which, threads, ids);
                walls[which].push(cost.wall);
                cpus[which].push(cost.cpu);
            }
        }
        let ferroid_wall = median(&mut walls[2].clone());
        let ferroid_cpu = median(&mut cpus[2].clone());
        for ((name, w), c) in names.iter().zip(walls.iter_mut()).zip(cpus.iter_mut()) {
            let (mw, mc) = (median(w), median(c));
            println!(
                "{threads:<8} {name:<26} {mw:>9.2} {:>13} {:>6.2} {mc:>9.2} {:>6.2}",
                format!("{:.2}–{:.2}", w[0], w[w.len() - 1]),
                mw / ferroid_wall,
                mc / ferroid_cpu
            );
        }
    }

    if wanted("batch") {
        let dir = state_dir();
        let g = open(EXPLICIT_SHARD, &dir);
        let first = batch_round(&g, batches);
        let mut per_id: Vec<f64> = (0..rounds).map(|_| batch_round(&g, batches)).collect();
        let m = median(&mut per_id);
        println!(
            "batches of {BATCH}, {batches} per round, each ID read: first round after \
             opening {first:.3} ns per ID; then median {m:.3} ns per ID (range {:.3}–{:.3}), \
             lead {} s",
            per_id[0],
            per_id[per_id.len() - 1],
            g.lead()
        );
        g.close().expect("close the generator");
    }
    println!("load average at end: {}", load_average());
    IdUtil::shutdown().expect("close the process-wide generator");
}
