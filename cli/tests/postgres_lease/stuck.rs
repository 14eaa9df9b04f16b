//! Stuck rows: leases that never expire by themselves, named when no shard
//! is free and freed by `idutil lease release`, which keeps the mark.

use idutil_harness as harness;

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::Error;
use idutil_harness::command::{idutil, run};
use idutil_harness::state_dir;

use crate::{leased, server};

/// Two rows whose `expires_at` was set to `'infinity'` by hand: a generator
/// that finds no free shard names them and the command that frees them;
/// `idutil lease release --shard 0` frees one, keeping its mark and raising
/// its epoch, and the next holder resumes after the mark. A live lease is
/// refused, and so is a release without `--shard`.
#[test]
fn stuck_rows_are_named_and_released_without_lowering_the_mark() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = LeaseConfig::new(url.clone()).shards(0..=1);
    let host = state_dir();
    let g = leased(&host, config.clone()).open().unwrap();
    let last = u64::from(g.next_ids(1000).unwrap().last().unwrap());
    drop(g);
    pg.psql("UPDATE idutil_lease SET expires_at = 'infinity', holder = 'ghost'");

    // Rows edited by hand: the open raises them before it finds none free.
    let err = leased(&host, config.clone()).open().unwrap_err();
    match &err {
        Error::Lease(LeaseError::NoFreeShard { stuck, .. }) => {
            let shards: Vec<u32> = stuck.iter().map(|(s, _)| *s).collect();
            assert_eq!(shards, [0, 1], "{err}");
            assert!(stuck.iter().all(|(_, until)| until == "infinity"), "{err}");
        }
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("shard 0 until infinity") && text.contains("idutil lease release"),
        "{text}"
    );

    let mark: u64 = pg
        .psql("SELECT high_water FROM idutil_lease WHERE shard = 0")
        .parse()
        .unwrap();
    let epoch: i64 = pg
        .psql("SELECT epoch FROM idutil_lease WHERE shard = 0")
        .parse()
        .unwrap();
    let dir = state_dir();
    let release = |shard: Option<u32>| {
        let mut cmd = idutil(shard.unwrap_or(0), dir.path());
        if shard.is_none() {
            cmd = std::process::Command::new(harness::command::bin());
        }
        run(cmd.args(["--lease", &url, "lease", "release"]))
    };
    let out = release(Some(0)).expect_code(0, "release shard 0");
    assert!(
        out.stdout.contains("released shard 0") && out.stdout.contains("ghost"),
        "{}",
        out.stdout
    );
    assert_eq!(
        pg.psql(&format!(
            "SELECT holder IS NULL, expires_at = '-infinity', high_water = {mark}, epoch > {epoch} \
             FROM idutil_lease WHERE shard = 0"
        )),
        "t|t|t|t"
    );
    let g = leased(&host, config.clone()).open().unwrap();
    assert_eq!(g.shard(), 0);
    let first = u64::from(g.next_id().unwrap());
    assert!(
        first > last,
        "the next holder started at {first}, not after {last}"
    );

    let out = release(Some(0)).expect_code(1, "release a live lease");
    assert!(out.stderr.contains("live holder"), "{}", out.stderr);
    drop(g);
    let out = release(None).expect_code(2, "release without --shard");
    assert!(out.stderr.contains("--shard"), "{}", out.stderr);
}
