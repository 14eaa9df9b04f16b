//! Library-level proofs of the durability guarantees: clean close and
//! crash restarts, clock rollbacks across restarts with and without clock
//! bits, the shard lock, and damaged state files.
//!
//! Crashes are real: a child process (this test binary, re-executed to run
//! one `#[ignore]`d entry point) is killed with SIGKILL.

use idutil_harness as harness;

use std::path::Path;

use idutil::state::StateFile;
use idutil::{Generator, Layout, ManualClock, EPOCH_2000};

mod clock_bits;
mod refusals;
mod restarts;
mod sharing;
mod wrong_clock;

/// A fixed wall-clock second for manual-clock tests (2023-11-14).
const T: u64 = 1_700_000_000;

/// Two clock bits: four clock values.
const CLOCKED: Layout = Layout::new_const(30, 2, 16, 5, EPOCH_2000);

fn open_at(dir: &Path, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .clock(clock.clone())
        .open()
        .expect("open the generator")
}

fn open_layout_at(
    dir: &Path,
    shard: u32,
    layout: Layout,
    clock: &ManualClock,
) -> Generator<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir))
        .shard(shard)
        .state_dir(dir)
        .layout(layout)
        .clock(clock.clone())
        .open()
        .expect("open the generator")
}

fn issue<C: idutil::Clock>(g: &Generator<C>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| g.next_id().expect("issue an ID").as_u64())
        .collect()
}

fn mark(state: &StateFile, clock_value: u32) -> u64 {
    state.high_water[&clock_value]
}

/// Child entry point: see [`harness::hold_shard_child`].
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_hold_shard() {
    if harness::is_child() {
        harness::hold_shard_child();
    }
}
