//! The Redis shard lease against a real `redis-server` on a free loopback
//! port, started and stopped by each test.
//!
//! Without `redis-server` on `PATH` these tests print a loud `SKIPPED` line
//! and pass, except under `CI=true`, where its absence fails them.
#![cfg(feature = "redis")]

use idutil_harness as harness;

use std::io::Write;
use std::path::Path;

use idutil::lease::LeaseConfig;
use idutil::{Error, Generator};
use idutil_harness::child::{self, ChildProc, MARK};
use idutil_harness::lease::{is_no_free_shard, leased, open_when_free};

mod command;
mod edges;
mod failover;
mod holders;
mod outages;
mod records;
mod restarts;

/// The child's side. `IDUTIL_CHILD_LEASE` holds `URL TTL_MS FIRST LAST
/// MODE`. It leases a shard (printing `@leased N` or `@failed REASON`),
/// waits for a line on stdin, then issues IDs (`@id N`): a fixed number in
/// mode `batch` (then `@done` and a clean close), or forever in mode
/// `stream`. Mode `paced` issues 20 IDs a millisecond at most, so it never
/// borrows seconds ahead of the clock, and reports each failed call as
/// `@error REASON` instead of stopping.
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn child_process() {
    if !child::is_child() {
        return;
    }
    let Some((generator, rest)) = harness::lease::open_child_holder(|b, c| b.lease(c)) else {
        return;
    };
    let mode = rest[0].as_str();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    if mode == "paced" {
        return harness::lease::issue_paced(&generator, None);
    }
    let mut out = std::io::stdout().lock();
    loop {
        for id in generator.next_ids(500).unwrap() {
            writeln!(out, "{MARK}id {id}").unwrap();
        }
        for _ in 0..20 {
            writeln!(out, "{MARK}id {}", generator.next_id().unwrap()).unwrap();
        }
        out.flush().unwrap();
        if mode == "batch" {
            break;
        }
    }
    generator.close().unwrap();
    writeln!(out, "{MARK}done").unwrap();
}

/// The other child: reports what `LeaseConfig::from_env` and opening a
/// generator make of the environment (`@from_env ...`, `@open ...`).
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn env_child_process() {
    if !child::is_child() {
        return;
    }
    let dir = harness::state_dir();
    let from_env = match LeaseConfig::from_env() {
        Ok(c) => format!("ok {}", c.is_some()),
        Err(e) => format!("err {}", matches!(Error::from(e), Error::InvalidEnv { .. })),
    };
    let open = match Generator::builder().shard(1).state_dir(dir.path()).open() {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("err {}: {e}", matches!(e, Error::InvalidEnv { .. })),
    };
    println!("{MARK}from_env {from_env}");
    println!("{MARK}open {open}");
}

/// Starts [`child_process`] leasing a shard of `shards` from `url`, in
/// `mode`, with its state in `dir`.
fn lease_child(url: &str, ttl_ms: u64, shards: (u32, u32), mode: &str, dir: &Path) -> ChildProc {
    ChildProc::spawn(
        "child_process",
        &[
            (
                "IDUTIL_CHILD_LEASE",
                format!("{url} {ttl_ms} {} {} {mode}", shards.0, shards.1),
            ),
            ("IDUTIL_STATE_DIR", dir.display().to_string()),
            ("IDUTIL_ID_SPACE", harness::space_for(dir)),
        ],
    )
}
