//! Throughput of idutil against its peers (one thread, two threads sharing
//! one generator, batches), the clock options behind the hot path, and the
//! cold path (opening a generator, the whole `idutil next` process).
//!
//! `cargo bench -p idutil-benches --bench generate`; BENCHMARKS.md quotes
//! the medians (`python3 benches/report.py` rebuilds its table from
//! `target/criterion`).
//!
//! Every peer is set up so that it measures CPU, not its format's cap:
//! the snowflake layouts get 22 sequence bits (4 million IDs per
//! millisecond), so none of them waits for the next millisecond here.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use idutil::{Clock, Generator, Id, IdUtil, SystemClock, EPOCH_2000};

mod peers;

/// Shard of the process-wide generator (`IDUTIL_SHARD`).
const GLOBAL_SHARD: u32 = 1;
/// Shard of the explicit generator.
const EXPLICIT_SHARD: u32 = 2;
/// Shard opened and closed over and over by the cold-path benches.
const COLD_SHARD: u32 = 3;
/// Shard used by the `idutil next` process bench.
const PROCESS_SHARD: u32 = 4;
const BATCH: u64 = 1_000_000;

/// The classic 53-bit generator (`IdUtil.java`), ported as it is: the wall
/// clock read on every call, one lock around the state, the sequence starting
/// at 1 in each second and borrowing the next second when it wraps.
struct Classic {
    state: Mutex<ClassicState>,
    shard: u64,
}

struct ClassicState {
    last_epoch: u64,
    offset: u64,
}

impl Classic {
    fn new(shard: u64) -> Classic {
        Classic {
            state: Mutex::new(ClassicState {
                last_epoch: 0,
                offset: 0,
            }),
            shard,
        }
    }

    fn next_id(&self) -> u64 {
        let mut epoch_second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut s = self.state.lock().unwrap();
        loop {
            if epoch_second < s.last_epoch {
                epoch_second = s.last_epoch;
            }
            if s.last_epoch != epoch_second {
                s.last_epoch = epoch_second;
                s.offset = 0;
            }
            s.offset += 1;
            let next = s.offset & 0xFFFF;
            if next == 0 {
                epoch_second += 1;
                continue;
            }
            return ((epoch_second - EPOCH_2000) << 21) | (next << 5) | self.shard;
        }
    }
}

/// Everything the benches share: the state directory (on the target
/// directory's file system, so fsync costs what it costs on disk), the
/// explicit generator and the peers.
struct Fixture {
    dir: tempfile::TempDir,
    explicit: Generator,
    ferroid: peers::Ferroid,
    snowflake_me: snowflake_me::Snowflake,
    ulid: Mutex<ulid::Generator>,
    classic: Classic,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("idutil-bench")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("create the bench state directory");
        // The process-wide generator reads its settings from the environment.
        std::env::set_var("IDUTIL_STATE_DIR", dir.path());
        std::env::set_var("IDUTIL_SHARD", GLOBAL_SHARD.to_string());
        // An ID space of its own: other generators on this host keep theirs.
        std::env::set_var("IDUTIL_ID_SPACE", format!("bench-{}", std::process::id()));
        IdUtil::init().expect("open the process-wide generator");
        let explicit = Generator::builder()
            .shard(EXPLICIT_SHARD)
            .state_dir(dir.path())
            .open()
            .expect("open the explicit generator");

        let epoch = peers::epoch();
        let ferroid = peers::ferroid();
        let start_ms = i64::try_from(epoch.as_millis()).unwrap();
        let snowflake_me = snowflake_me::Snowflake::builder()
            .start_time(start_ms)
            .bit_len_time(36)
            .bit_len_data_center_id(0)
            .bit_len_machine_id(5)
            .bit_len_sequence(22)
            .data_center_id(&|| Ok(0))
            .machine_id(&|| Ok(1))
            .finalize()
            .expect("build the snowflake_me generator");
        Fixture {
            dir,
            explicit,
            ferroid,
            snowflake_me,
            ulid: Mutex::new(ulid::Generator::new()),
            classic: Classic::new(1),
        }
    }

    fn ferroid_next(&self) -> peers::FerroidId {
        // Retry at once on a lost race; with 22 sequence bits nothing else
        // makes it wait.
        self.ferroid.next_id(|_| std::hint::spin_loop())
    }
}

/// Runs `bench` once per generator under test, each a plain closure (no
/// dynamic call in the measured loop). `$ulid` is the ulid generator's
/// call: the ulid `Generator` takes `&mut self`, so it has no lock on one
/// thread and a `Mutex` on two.
macro_rules! for_each_contender {
    ($fx:expr, $bench:ident($g:expr), $ulid_name:expr, $ulid:expr) => {{
        let fx: &Fixture = $fx;
        let g = $g;
        $bench(g, "idutil IdUtil::next_id", || IdUtil::next_id() as u64);
        $bench(g, "idutil Generator::next_id", || {
            fx.explicit.next_id().unwrap().as_u64()
        });
        $bench(g, "ferroid AtomicSnowflakeGenerator", || {
            fx.ferroid_next().to_raw()
        });
        $bench(g, "snowflake_me Snowflake", || {
            fx.snowflake_me.next_id().unwrap().as_u64()
        });
        $bench(g, "uuid Uuid::now_v7", || {
            uuid::Uuid::now_v7().as_u64_pair().1
        });
        $bench(g, $ulid_name, $ulid);
        $bench(g, "classic mutex + SystemTime", || fx.classic.next_id());
    }};
}

fn hot_group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    g
}

/// What the hot path is built from: the clock options (why the cached
/// clock and its ticker thread exist) and one atomic read-modify-write (the
/// floor for any lock-free generator that hands out strictly increasing IDs
/// from one shared counter).
fn primitives(c: &mut Criterion) {
    let mut g = hot_group(c, "primitives");
    g.throughput(Throughput::Elements(1));
    g.bench_function("SystemTime::now", |b| {
        b.iter(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
    });
    g.bench_function("clock_gettime(CLOCK_REALTIME_COARSE)", |b| {
        b.iter(|| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec for the call.
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
            ts.tv_sec
        })
    });
    g.bench_function("Instant::now", |b| b.iter(Instant::now));
    g.bench_function("SystemClock::now (cached)", |b| {
        b.iter(|| SystemClock.now())
    });
    let counter = AtomicU64::new(0);
    g.bench_function("AtomicU64 load + compare_exchange", |b| {
        b.iter(|| {
            let current = counter.load(Relaxed);
            counter
                .compare_exchange_weak(current, current + 1, Relaxed, Relaxed)
                .is_ok()
        })
    });
    g.bench_function("AtomicU64 fetch_add", |b| {
        b.iter(|| counter.fetch_add(1, Relaxed))
    });
    g.finish();
}

fn one_thread(c: &mut Criterion, fx: &Fixture) {
    let mut g = hot_group(c, "one_thread");
    g.throughput(Throughput::Elements(1));
    let mut ulid = ulid::Generator::new();
    for_each_contender!(
        fx,
        bench_one(&mut g),
        "ulid Generator",
        || ulid.generate().unwrap().0 as u64
    );
    g.finish();
}

/// Two threads draw from the same generator; the time per element is the
/// wall time divided by the IDs both made, so it compares directly with the
/// one-thread numbers (lower than one thread means it scales).
fn two_threads(c: &mut Criterion, fx: &Fixture) {
    let mut g = hot_group(c, "two_threads");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(30)
        .throughput(Throughput::Elements(1));
    for_each_contender!(fx, bench_two(&mut g), "ulid Generator (Mutex)", || fx
        .ulid
        .lock()
        .unwrap()
        .generate()
        .unwrap()
        .0
        as u64);
    g.finish();
}

fn bench_one(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut f: impl FnMut() -> u64) {
    g.bench_function(name, |b| b.iter(&mut f));
}

fn bench_two(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, f: impl Fn() -> u64 + Sync) {
    g.bench_function(name, |b| b.iter_custom(|iters| on_two_threads(iters, &f)));
}

/// Wall time for two threads, started together, to make `iters` IDs
/// between them.
fn on_two_threads(iters: u64, f: &(impl Fn() -> u64 + Sync)) -> Duration {
    let barrier = Barrier::new(2);
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let workers: Vec<_> = [iters.div_ceil(2), iters / 2]
            .into_iter()
            .map(|n| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..n {
                        black_box(f());
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    end - start
}

fn batch(c: &mut Criterion, fx: &Fixture) {
    let mut g = hot_group(c, "batch_1m");
    g.throughput(Throughput::Elements(BATCH))
        .sample_size(30)
        .measurement_time(Duration::from_secs(3));
    g.bench_function("idutil IdUtil::next_ids, iterated", |b| {
        b.iter(|| {
            IdUtil::next_ids(BATCH)
                .unwrap()
                .fold(0u64, |acc, id| acc.wrapping_add(id.as_u64()))
        })
    });
    let mut ids: Vec<Id> = Vec::with_capacity(BATCH as usize);
    g.bench_function("idutil Generator::next_ids, into a Vec", |b| {
        b.iter(|| {
            ids.clear();
            ids.extend(fx.explicit.next_ids(BATCH).unwrap());
            ids.last().copied()
        })
    });
    let mut snowflakes = Vec::with_capacity(BATCH as usize);
    g.bench_function("snowflake_me next_ids_into, into a Vec", |b| {
        b.iter(|| {
            snowflakes.clear();
            fx.snowflake_me
                .next_ids_into(BATCH as usize, &mut snowflakes)
                .unwrap();
            snowflakes.last().copied()
        })
    });
    g.finish();
}

fn cold(c: &mut Criterion, fx: &Fixture) {
    let mut g = c.benchmark_group("cold");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat);
    let dir = fx.dir.path();
    let open = || {
        Generator::builder()
            .shard(COLD_SHARD)
            .state_dir(dir)
            .open()
            .unwrap()
    };
    g.bench_function("open (lock + state read + durable write)", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let generator = black_box(open());
                spent += start.elapsed();
                generator.close().unwrap();
            }
            spent
        })
    });
    // What a process waits for before its first ID: the time to close is
    // not counted.
    g.bench_function("open → first ID (state directory)", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let generator = open();
                black_box(generator.next_id().unwrap());
                spent += start.elapsed();
                generator.close().unwrap();
            }
            spent
        })
    });
    g.bench_function("open + one ID + close", |b| {
        b.iter(|| {
            let generator = open();
            let id = generator.next_id().unwrap();
            generator.close().unwrap();
            id
        })
    });
    match idutil_binary() {
        Some(bin) => {
            g.bench_function("idutil next (whole process)", |b| {
                b.iter(|| run_idutil_next(&bin, dir))
            });
        }
        None => eprintln!(
            "idutil next (whole process): skipped, the idutil command is not built \
             beside this bench (cargo build --release -p idutil-cli builds it)"
        ),
    }
    g.finish();
}

/// The `idutil` command of the `idutil-cli` package, built into the same
/// profile directory as this bench (`cargo build --release -p idutil-cli`:
/// `cargo bench` builds into `release`).
fn idutil_binary() -> Option<PathBuf> {
    // <target>/<profile>/deps/generate-<hash> -> <target>/<profile>/idutil
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("idutil");
    bin.is_file().then_some(bin)
}

fn run_idutil_next(bin: &Path, dir: &Path) -> u64 {
    let out = Command::new(bin)
        .arg("--shard")
        .arg(PROCESS_SHARD.to_string())
        .arg("--state-dir")
        .arg(dir)
        .arg("next")
        .output()
        .expect("run idutil");
    assert!(
        out.status.success(),
        "idutil next failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn main() {
    let fx = Fixture::new();
    let mut c = Criterion::default().configure_from_args();
    primitives(&mut c);
    one_thread(&mut c, &fx);
    two_threads(&mut c, &fx);
    batch(&mut c, &fx);
    cold(&mut c, &fx);
    c.final_summary();
    IdUtil::shutdown().expect("close the process-wide generator");
    fx.explicit.close().expect("close the explicit generator");
}
