//! Fresh state directories, each test generator's own ID space, and the clock.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use idutil::Id;

/// A fresh, empty state directory, removed when dropped.
pub fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("idutil-test-")
        .tempdir()
        .expect("create a temporary state directory")
}

/// The ID space for generators on `dir`: one per state directory, so that
/// tests running in parallel on the same shard number do not refuse each
/// other through the per-host lock, while two generators on one directory
/// still meet there.
pub fn space_for(dir: impl AsRef<Path>) -> String {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: the same name in every process
    // of this build, children included.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.as_ref().hash(&mut h);
    format!("test-{:016x}", h.finish())
}

/// A generator builder on `dir`, in the ID space [`space_for`] it.
pub fn builder(dir: impl AsRef<Path>) -> idutil::Builder {
    idutil::Generator::builder()
        .id_space(space_for(&dir))
        .state_dir(dir.as_ref())
}

/// IDs from one generator per shard in `shards`, each on a manual clock
/// that runs from `t0` for `seconds` seconds, `per_second` IDs a second:
/// in issuing order, shard by shard.
pub fn ids_from_shards(shards: &[u32], t0: u64, seconds: u64, per_second: u64) -> Vec<Id> {
    let mut ids = Vec::new();
    for &shard in shards {
        let dir = state_dir();
        let clock = idutil::ManualClock::new(t0);
        let generator = builder(dir.path())
            .shard(shard)
            .clock(clock.clone())
            .open()
            .expect("open a generator");
        for second in 0..seconds {
            clock.set(t0 + second);
            ids.extend(generator.next_ids(per_second).expect("a batch"));
        }
    }
    ids
}

/// The state file of a shard.
pub fn state_file(dir: &Path, shard: u32) -> PathBuf {
    idutil::state::state_path(dir, shard)
}

/// The state file of a shard as [`idutil::state::inspect`] reads it; it
/// must exist.
pub fn on_disk(dir: &Path, shard: u32) -> idutil::state::StateFile {
    idutil::state::inspect(dir, shard)
        .expect("inspect the state")
        .state
        .expect("a state file exists")
}

/// The current wall-clock second.
pub fn wall_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Every `Id` issued from second `from` to second `to` (Unix seconds), both
/// included, sorted.
pub fn issued_between(ids: &[Id], from: u64, to: u64) -> Vec<Id> {
    let mut expected: Vec<Id> = ids
        .iter()
        .copied()
        .filter(|id| (from..=to).contains(&id.unix_seconds()))
        .collect();
    expected.sort();
    expected
}
