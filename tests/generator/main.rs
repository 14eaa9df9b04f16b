//! Behaviour of one generator: threads, borrowing, clock rollbacks while
//! running, the end of the range, the lead cap and batches.

use idutil_harness as harness;

use idutil::{Builder, Generator, ManualClock};

mod clock;
mod environment;
mod issuing;
mod lead;
mod range;

const T: u64 = 1_700_000_000;
const PER_SECOND: u64 = 65_536;

/// A generator for `shard` in `dir` (and its own ID space), on `clock`.
fn builder(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Builder<ManualClock> {
    Generator::builder()
        .id_space(harness::space_for(dir.path()))
        .shard(shard)
        .state_dir(dir.path())
        .clock(clock.clone())
}

fn open(dir: &tempfile::TempDir, shard: u32, clock: &ManualClock) -> Generator<ManualClock> {
    builder(dir, shard, clock).open().expect("open")
}

/// Child entry point of
/// `environment::a_lease_url_in_the_environment_is_never_ignored`: opens a
/// generator from the environment and says whether it was refused.
#[test]
#[ignore = "child process entry point, run by the tests in this crate"]
fn child_open_from_the_environment() {
    if !harness::is_child() {
        return;
    }
    let dir = harness::child_var("IDUTIL_CHILD_DIR");
    let opened = Generator::builder()
        .id_space(harness::space_for(&dir))
        .shard(3)
        .state_dir(&dir)
        .open();
    match opened {
        Ok(_) => println!("@opened"),
        Err(e) => println!("@refused {e}"),
    }
}
