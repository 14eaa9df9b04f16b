//! The latency of single calls: 10 million `next_id` calls, each timed with
//! `Instant::now()` on both sides, on one thread and on two threads sharing
//! one generator. Prints p50, p99, p99.9, p99.99 and the worst call, and how
//! many calls took over 100 µs and over 1 ms.
//!
//! A slow call is either preempted (the 2-core machine runs other work) or
//! blocked (waiting on the state file's fsync, or on a lock): the bench
//! reads the thread's voluntary and involuntary context switches
//! (`getrusage(RUSAGE_THREAD)`) around each run. Zero voluntary switches
//! means no call slept, so none waited on the disk; the involuntary ones
//! are the preemptions behind the worst calls. A counting allocator checks
//! that the calls allocate nothing on the calling thread.
//!
//! `cargo bench -p idutil-benches --bench latency`; BENCHMARKS.md quotes
//! the output. Under `cargo test -p idutil-benches --benches` it runs
//! 100,000 calls as a smoke test.
//!
//! Generating flat out borrows a second every 65,536 IDs, so the generator
//! runs far ahead of the clock here and its shard thread keeps writing
//! the state file: the worst case for "no call waits on the disk".

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::thread;
use std::time::Instant;

use idutil::{Generator, IdUtil};

const GLOBAL_SHARD: u32 = 5;
const EXPLICIT_SHARD: u32 = 6;

/// The system allocator, counting the allocations each thread makes.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed straight to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Per-call latencies in nanoseconds, recorded without allocating in the
/// timed loop, and the context switches of the threads that made them.
struct Recorder {
    nanos: Vec<u32>,
    voluntary: i64,
    involuntary: i64,
    allocations: u64,
    /// Every block of [`BLOCK`] calls during which the thread slept, with
    /// the slowest call of the block (ns): a call that waited on the disk
    /// is one of these.
    slept: Vec<(usize, u32)>,
}

/// Calls between two reads of the context switch counters.
const BLOCK: usize = 1024;

/// This thread's (voluntary, involuntary) context switches so far.
fn context_switches() -> (i64, i64) {
    // SAFETY: `getrusage` only writes the `rusage` it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    (usage.ru_nvcsw, usage.ru_nivcsw)
}

impl Recorder {
    fn run(calls: usize, mut f: impl FnMut() -> u64) -> Recorder {
        // Written now, so no page is first touched inside the timed loop.
        let mut nanos = vec![u32::MAX; calls];
        let mut slept = Vec::with_capacity(1024);
        let before = context_switches();
        let allocated = allocations();
        let mut last = before;
        for (i, block) in nanos.chunks_mut(BLOCK).enumerate() {
            for slot in block.iter_mut() {
                let start = Instant::now();
                black_box(f());
                let took = start.elapsed();
                *slot = u32::try_from(took.as_nanos()).unwrap_or(u32::MAX);
            }
            let now = context_switches();
            if now.0 != last.0 && slept.len() < slept.capacity() {
                slept.push((i * BLOCK, block.iter().copied().max().unwrap_or(0)));
            }
            last = now;
        }
        let allocated = allocations() - allocated;
        Recorder {
            allocations: allocated,
            nanos,
            voluntary: last.0 - before.0,
            involuntary: last.1 - before.1,
            slept,
        }
    }

    fn merge(mut self, other: Recorder) -> Recorder {
        self.nanos.extend(other.nanos);
        self.voluntary += other.voluntary;
        self.involuntary += other.involuntary;
        self.allocations += other.allocations;
        self.slept.extend(other.slept);
        self
    }

    fn report(mut self, name: &str) {
        self.nanos.sort_unstable();
        let n = self.nanos.len();
        let at = |q: f64| self.nanos[((n as f64 * q) as usize).min(n - 1)];
        let over = |limit: u32| self.nanos.iter().filter(|&&t| t > limit).count();
        let us = |ns: u32| format!("{:.1} µs", f64::from(ns) / 1000.0);
        println!(
            "| {name} | {n} | {} ns | {} ns | {} ns | {} ns | {} | {} | {} | {} | {} | {} |",
            at(0.5),
            at(0.99),
            at(0.999),
            at(0.9999),
            us(self.nanos[n - 1]),
            over(100_000),
            over(1_000_000),
            self.voluntary,
            self.involuntary,
            self.allocations,
        );
        for (call, worst) in &self.slept {
            println!(
                "| ↳ slept in calls {call}..{}: slowest call {} |",
                call + BLOCK,
                us(*worst)
            );
        }
    }
}

fn two_threads(calls: usize, f: impl Fn() -> u64 + Sync) -> Recorder {
    thread::scope(|s| {
        let a = s.spawn(|| Recorder::run(calls, &f));
        let b = s.spawn(|| Recorder::run(calls, &f));
        a.join().unwrap().merge(b.join().unwrap())
    })
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = if benching { 10_000_000 } else { 100_000 };
    let dir = tempfile::Builder::new()
        .prefix("idutil-latency")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create the bench state directory");
    std::env::set_var("IDUTIL_STATE_DIR", dir.path());
    std::env::set_var("IDUTIL_SHARD", GLOBAL_SHARD.to_string());
    // An ID space of its own: other generators on this host keep theirs.
    std::env::set_var("IDUTIL_ID_SPACE", format!("bench-{}", std::process::id()));
    IdUtil::init().expect("open the process-wide generator");
    let open = |shard| {
        Generator::builder()
            .shard(shard)
            .state_dir(dir.path())
            .open()
            .expect("open a generator")
    };

    println!(
        "| run | calls | p50 | p99 | p99.9 | p99.99 | max | > 100 µs | > 1 ms \
         | slept | preempted | allocations |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // What the timing itself costs: two `Instant::now()` and nothing between.
    Recorder::run(calls, || 0).report("empty call (timing overhead)");
    // Right after opening the lead is small, so the reservation runs only a
    // few borrowed seconds (a few milliseconds at full speed) ahead of the
    // cursor; once the lead has grown, each write reserves as far ahead
    // again (steady state).
    let generator = open(EXPLICIT_SHARD);
    Recorder::run(calls, || generator.next_id().unwrap().as_u64())
        .report("Generator::next_id, burst right after open");
    Recorder::run(calls, || IdUtil::next_id() as u64)
        .report("IdUtil::next_id, burst right after open");
    Recorder::run(calls, || generator.next_id().unwrap().as_u64())
        .report("Generator::next_id, steady state");
    two_threads(calls, || generator.next_id().unwrap().as_u64())
        .report("Generator::next_id, 2 threads, steady state (both)");
    println!(
        "\nlead after the runs: {} s (Generator), {} s (IdUtil)",
        generator.lead(),
        IdUtil::generator().unwrap().lead()
    );

    generator.close().expect("close the explicit generator");
    IdUtil::shutdown().expect("close the process-wide generator");
}
