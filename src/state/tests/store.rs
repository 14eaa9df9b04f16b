//! The store and the state directory.

use std::fs;
use std::path::Path;

use super::sample_for;
use crate::state::{state_dir, Store};

#[test]
fn taking_the_lock_removes_stale_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join(".shard-3.abc123.tmp");
    let other_shard = dir.path().join(".shard-31.abc123.tmp");
    fs::write(&stale, "half a state").unwrap();
    fs::write(&other_shard, "someone else's").unwrap();
    let store = Store::open(dir.path(), 3).unwrap();
    assert!(!stale.exists());
    assert!(other_shard.exists());
    store.save(&sample_for(3)).unwrap();
    assert_eq!(store.load().unwrap(), Some(sample_for(3)));
}

#[test]
fn dir_precedence() {
    let explicit = Path::new("/x/y");
    assert_eq!(state_dir(Some(explicit)).unwrap(), explicit);
}
