//! The PostgreSQL shard lease against real PostgreSQL servers that the
//! tests start themselves (Debian's `postgresql`: `initdb`, `postgres`,
//! `pg_basebackup`): holders in processes and threads, kills, restarts,
//! cut connections, skewed clocks, failover to a standby and split brain.
//! Every test checks every ID every holder printed for duplicates.
//!
//! Without PostgreSQL these tests print a loud `SKIPPED` line and pass,
//! except under `CI=true`, where its absence fails them.
#![cfg(feature = "postgres-lease")]

use idutil_harness as harness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use idutil::lease::LeaseConfig;
use idutil::Generator;
use idutil_harness::child::{self, MARK};
use idutil_harness::lease::{is_no_free_shard, leased, WIDE};
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::threads::wait_until;
use idutil_harness::{state_dir, Tally};

mod answers;
mod check;
mod command;
mod database;
mod database_faults;
mod fleet;
mod marks;
mod outages;
mod poolers;
mod promotion;
mod replication;
mod restores;
mod rows;
mod settings;
mod standbys;
mod stuck;
mod waiters;

/// A server for the lease tests: TCP, room for many holders.
fn server() -> Option<Postgres> {
    Postgres::start_tcp(&Options {
        max_connections: Some(300),
        ..Options::default()
    })
}

/// Opens `builder`, retrying while no shard is free, until `within`.
fn open_when_free(builder: &idutil::Builder, within: Duration) -> Generator {
    harness::lease::open_when_free(builder, within).0
}

/// Issues 20 IDs a millisecond at most (never ahead of the clock) from
/// `g` on a thread until `stop`; every error is counted, not fatal.
struct Driver {
    ids: Arc<Mutex<Vec<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
    handle: Option<thread::JoinHandle<()>>,
}
impl Driver {
    fn start(g: Arc<Generator>, stop: Arc<AtomicBool>) -> Driver {
        let ids = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (i, e) = (ids.clone(), errors.clone());
        let handle = thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match g.next_ids(20) {
                    Ok(batch) => i.lock().unwrap().extend(batch.map(u64::from)),
                    Err(err) => e.lock().unwrap().push(err.to_string()),
                }
                thread::sleep(Duration::from_millis(1));
            }
        });
        Driver {
            ids,
            errors,
            handle: Some(handle),
        }
    }

    fn issued(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    /// Asserts that the holder issues nothing more for half a second: it
    /// has stopped (`who` names it in the failure).
    fn assert_stopped(&self, who: &str) {
        let now = self.issued();
        thread::sleep(Duration::from_millis(500));
        assert_eq!(self.issued(), now, "{who} still issues");
    }

    fn finish(mut self) -> (Vec<u64>, Vec<String>) {
        self.handle.take().unwrap().join().unwrap();
        let ids = std::mem::take(&mut *self.ids.lock().unwrap());
        let errors = std::mem::take(&mut *self.errors.lock().unwrap());
        (ids, errors)
    }
}

/// `n` holders leasing with `config`, each on a host of its own (kept
/// here, as they outlive the holders) and, once all are open, each driven
/// by a [`Driver`] until `stop`.
fn driven(
    n: usize,
    config: &LeaseConfig,
    stop: &Arc<AtomicBool>,
) -> (Vec<tempfile::TempDir>, Vec<Arc<Generator>>, Vec<Driver>) {
    let hosts: Vec<tempfile::TempDir> = (0..n).map(|_| state_dir()).collect();
    let holders: Vec<Arc<Generator>> = hosts
        .iter()
        .map(|h| Arc::new(leased(h, config.clone()).open().unwrap()))
        .collect();
    let drivers = holders
        .iter()
        .map(|g| Driver::start(g.clone(), stop.clone()))
        .collect();
    (hosts, holders, drivers)
}

/// One holder of [`driven`]: its host, the holder, its driver.
fn driven_one(
    config: &LeaseConfig,
    stop: &Arc<AtomicBool>,
) -> (tempfile::TempDir, Arc<Generator>, Driver) {
    let (mut hosts, mut holders, mut drivers) = driven(1, config, stop);
    (hosts.remove(0), holders.remove(0), drivers.remove(0))
}

/// Waits until every driver has issued `more` IDs beyond what it had
/// issued when called.
fn wait_for_each_to_issue(drivers: &[Driver], more: usize, what: &str, within: Duration) {
    let issued: Vec<usize> = drivers.iter().map(Driver::issued).collect();
    wait_until(what, within, || {
        drivers
            .iter()
            .zip(&issued)
            .all(|(d, before)| d.issued() > before + more)
    });
}

/// The child's side: a paced holder
/// (`harness::lease::paced_holder_child`), its layout from `IDUTIL_LAYOUT`.
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn lease_child_process() {
    harness::lease::paced_holder_child();
}

/// A holder that bursts ahead of the clock, then hangs until killed: it
/// leases as `lease_child_process` does, issues `IDUTIL_CHILD_BURST` IDs at
/// once and prints the first and the last (`@burst FIRST LAST`).
#[test]
#[ignore = "run only as a child process by the tests in this file"]
fn lease_burst_child_process() {
    if !child::is_child() {
        return;
    }
    let n: u64 = child::child_var("IDUTIL_CHILD_BURST").parse().unwrap();
    let Some((generator, _)) = harness::lease::open_child_holder(|b, c| b.lease(c)) else {
        return;
    };
    let ids: Vec<u64> = generator.next_ids(n).unwrap().map(u64::from).collect();
    println!("{MARK}burst {} {}", ids[0], ids[ids.len() - 1]);
    loop {
        thread::sleep(Duration::from_secs(60));
    }
}
