//! Unit tests of the state file format, the store and recovery.

mod format;
mod recovery;
mod store;

use crate::layout::Layout;
use crate::state::StateFile;

pub(super) fn sample() -> StateFile {
    StateFile {
        layout: Layout::DEFAULT,
        shard: 7,
        clock_id: 3,
        seen_max: 1_763_751_234,
        seen_last_run: 1_763_751_200,
        high_water: [(0, 1_763_751_239)].into_iter().collect(),
        last: Some((1_763_751_236, 17)),
        skip: None,
    }
}

pub(super) fn sample_for(shard: u32) -> StateFile {
    StateFile { shard, ..sample() }
}

/// The default layout's last second: 2136-02-07T06:28:15Z.
pub(super) const LAST: u64 = 5_241_652_095;
