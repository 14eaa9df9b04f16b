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

/// What a block draw costs on the claim file: a turn (the short lock on a
/// descriptor of its own, the checks that the directory, lock file and
/// claim file are still the ones opened), a read and a write, as
/// `durable::shared::draw` takes them. Not a test: a measurement, run by
/// hand (BENCHMARKS.md, *Processes sharing a shard*):
///
/// `DRAW_DIR=target/tmp cargo test --release --lib draw_turn_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn draw_turn_cost() {
    use crate::state::Claims;
    use std::time::{Duration, Instant};
    let dir = match std::env::var_os("DRAW_DIR") {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let space = format!("unit-{}-draw", std::process::id());
    let store = Store::join(dir.path(), 29, &space, Duration::from_secs(5)).unwrap();
    store.share().unwrap();
    let n: usize = std::env::var("DRAW_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let mut times = Vec::with_capacity(n);
    let mut claims = Claims {
        next: Some(1 << 36),
        reserved: Some((3, 1_763_751_239)),
        clock: Some((1_763_751_234, 86_400_123)),
        ..Claims::default()
    };
    for _ in 0..n {
        let t = Instant::now();
        let turn = store.turn().unwrap().unwrap();
        let read = store.claims(&turn).unwrap();
        claims.next = Some(read.next.unwrap_or(1 << 36) + 64);
        store.set_claims(&turn, &claims).unwrap();
        drop(turn);
        times.push(t.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    println!(
        "draw turn on {}: median {} ns, p90 {} ns over {n}",
        dir.path().display(),
        times[n / 2],
        times[n * 9 / 10],
    );
}
