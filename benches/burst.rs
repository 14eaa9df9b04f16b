//! A sustained burst: 4 million IDs per measured round, drawn as fast as
//! possible by one thread or shared by two, through `IdUtil::next_id()`,
//! `Generator::next_id()` and ferroid's `AtomicSnowflakeGenerator`, in the
//! same process and run, rounds alternating between them. Reports the
//! total wall time per ID (median and range over the rounds) and the ratio
//! to ferroid.
//!
//! Four million IDs are a minute of borrowed seconds for idutil (65,536
//! per second per shard), so a round crosses 61 second boundaries and
//! several reservation writes: the slow path and the reservation thread are
//! part of what is measured, as they are in a real burst. Each round of
//! `Generator::next_id()` opens a fresh generator in a fresh state
//! directory; `IdUtil::next_id()` is the one process-wide generator, so its
//! rounds run further and further ahead of the clock, as a long-lived
//! service's would.
//!
//! `cargo bench --bench burst`; BENCHMARKS.md quotes the output. Under
//! `cargo test --benches` it runs one short round as a smoke test.

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::time::MonotonicClock;
use idutil::{Generator, IdUtil};

ferroid::define_snowflake_id!(
    /// Milliseconds since the bench started, 5 machine bits, 22 sequence
    /// bits: the sequence never runs out within a millisecond here.
    FerroidId, u64,
    reserved: 0,
    timestamp: 37,
    machine_id: 5,
    sequence: 22
);

const GLOBAL_SHARD: u32 = 7;
const EXPLICIT_SHARD: u32 = 8;
const ROUNDS: usize = 7;
const IDS_PER_ROUND: u64 = 4_000_000;
const BATCH: u64 = 1_000_000;

/// Runs `threads` threads that together call `next` `total` times; the
/// wall time per call, in nanoseconds, from the release of a barrier to
/// the last thread's end.
fn round(threads: usize, total: u64, next: &(dyn Fn() -> u64 + Sync)) -> f64 {
    let per_thread = total / threads as u64;
    let start = Barrier::new(threads + 1);
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
        let began = Instant::now();
        for w in workers {
            black_box(w.join().expect("a bench thread"));
        }
        began.elapsed()
    });
    elapsed.as_nanos() as f64 / (per_thread * threads as u64) as f64
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

fn ferroid() -> AtomicSnowflakeGenerator<FerroidId, MonotonicClock> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    AtomicSnowflakeGenerator::new(1, MonotonicClock::with_epoch(now - Duration::from_secs(1)))
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (rounds, ids) = if smoke {
        (1, 100_000)
    } else {
        (ROUNDS, IDS_PER_ROUND)
    };
    let global_dir = state_dir();
    std::env::set_var("IDUTIL_STATE_DIR", global_dir.path());
    std::env::set_var("IDUTIL_SHARD", GLOBAL_SHARD.to_string());
    IdUtil::init().expect("open the process-wide generator");

    println!("sustained burst: {ids} IDs per round, {rounds} rounds, alternating");
    println!(
        "{:<8} {:<28} {:>12} {:>20} {:>16}",
        "threads", "generator", "median ns/ID", "range ns/ID", "ratio to ferroid"
    );
    for threads in [1, 2] {
        let names = [
            "idutil IdUtil::next_id",
            "idutil Generator::next_id",
            "ferroid AtomicSnowflake",
        ];
        let mut times: [Vec<f64>; 3] = Default::default();
        for r in 0..rounds {
            // Alternate the order, so no contender always runs first.
            let order: [usize; 3] = if r % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
            for which in order {
                let t = match which {
                    0 => round(threads, ids, &|| IdUtil::next_id() as u64),
                    1 => {
                        let dir = state_dir();
                        let g = Generator::builder()
                            .shard(EXPLICIT_SHARD)
                            .state_dir(dir.path())
                            .open()
                            .expect("open a generator");
                        round(threads, ids, &|| g.next_id().unwrap().as_u64())
                    }
                    _ => {
                        let f = ferroid();
                        round(threads, ids, &|| {
                            f.next_id(|_| std::hint::spin_loop()).to_raw()
                        })
                    }
                };
                times[which].push(t);
            }
        }
        let ferroid_median = median(&mut times[2].clone());
        for (name, t) in names.iter().zip(times.iter_mut()) {
            let m = median(t);
            println!(
                "{threads:<8} {name:<28} {m:>12.2} {:>20} {:>16.2}",
                format!("{:.2}–{:.2}", t[0], t[t.len() - 1]),
                m / ferroid_median
            );
        }
    }

    // Batches: one call reserves a million consecutive IDs.
    let dir = state_dir();
    let g = Generator::builder()
        .shard(EXPLICIT_SHARD)
        .state_dir(dir.path())
        .open()
        .expect("open a generator");
    let mut per_id = Vec::new();
    for _ in 0..rounds {
        let began = Instant::now();
        let mut sum = 0u64;
        for _ in 0..(ids / BATCH).max(1) {
            for id in g.next_ids(BATCH).expect("a batch") {
                sum = sum.wrapping_add(id.as_u64());
            }
        }
        black_box(sum);
        per_id.push(began.elapsed().as_nanos() as f64 / ((ids / BATCH).max(1) * BATCH) as f64);
    }
    println!(
        "batches of {BATCH}, each ID read: median {:.3} ns per ID",
        median(&mut per_id)
    );
}
