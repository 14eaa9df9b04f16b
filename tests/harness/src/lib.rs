//! The integration tests' harness, shared by every test crate of the
//! workspace (`tests/` and `cli/tests/`): temporary state directories in
//! their own ID spaces, the `idutil` command, child processes running
//! library code, damaged state files, a ledger that checks every ID ever
//! seen, and the servers some tests start (Redis, PostgreSQL, the web
//! example) or need (Node, `faketime`).
//!
//! The helpers most tests use are re-exported here; the fixtures for one
//! kind of test are reached through their module (`harness::postgres`,
//! `harness::web`, ...).

pub mod child;
pub mod command;
pub mod damage;
pub mod ids;
#[cfg(any(feature = "redis", feature = "postgres-lease"))]
pub mod lease;
pub mod ledger;
pub mod node;
pub mod pgbouncer;
pub mod postgres;
pub mod proxy;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod rng;
pub mod skip;
pub mod space;
pub mod tally;
pub mod threads;
pub mod web;

pub use child::{
    child_ids, child_var, hold_flocks_child, hold_shard_child, is_child, issue_until_killed_child,
    read_rest, read_until_issuing, read_until_ready, send, sigkill, spawn_child, wait_within,
    CHILD_ENV, ID_MARK, READY_MARK,
};
pub use command::{
    bin, copy_bin_to, idutil, kill_after_lines, next, next_under_faketime, output_within,
    printed_ids, run, run_input, run_to, spawn_next, state_json, Run,
};
pub use damage::{reseal, Damage};
pub use ids::{
    assert_increasing, assert_unique_set, first_duplicate, parse_complete_ids, parse_id, parse_ids,
    parts, unix_second, MAX_SAFE,
};
pub use ledger::Ledger;
pub use rng::Rng;
pub use skip::{faketime, skipped, tool, Faketime};
pub use space::{
    builder, ids_from_shards, issued_between, on_disk, space_for, state_dir, state_file, wall_now,
};
pub use tally::Tally;
