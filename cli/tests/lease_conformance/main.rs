//! The lease's conformance suite: what every engine promises (the `lease`
//! module's *What every engine promises*), written once as cases generic
//! over an [`Engine`], and run against a real server of each engine built
//! in (PostgreSQL with `postgres-lease`, Redis with `redis`).
//!
//! Each case is a `fn case<E: Engine>()` in the file of its promise;
//! [`cases!`] makes one `#[test]` of it per engine (`postgres::NAME`,
//! `redis::NAME`). A promise an engine does not keep is named in its
//! [`Engine::EXCEPTIONS`] with the reason, and the case checks the
//! documented behaviour instead. Without the server's programs a case
//! prints a loud `SKIPPED` line and passes, except under `CI=true`, where
//! it fails.
#![cfg(any(feature = "redis", feature = "postgres-lease"))]

use idutil_harness as harness;

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator};
use idutil_harness::child::ChildProc;
use idutil_harness::threads::wait_until;
use idutil_harness::{unix_second, wall_now, Tally};

mod engines;

mod crowd;
mod exclusive;
mod fence;
mod full_layout;
mod handoff;
mod records;
mod restarts;

pub use engines::{Engine, Promise, Record};

/// The TTL of most cases: short, so that expiries come quickly.
const TTL: Duration = Duration::from_secs(2);
/// The lead cap the cases run under: every ID's second is at most this far
/// ahead of the wall clock (`LeaseConfig::max_lead`).
const LEAD: Duration = Duration::from_secs(2);
/// The skew limit: the servers run on this host, on its clock.
const SKEW: Duration = Duration::from_secs(1);

/// One `#[test]` per engine built in for each case, named after it.
macro_rules! cases {
    ($($file:ident::$case:ident),* $(,)?) => {
        #[cfg(feature = "postgres-lease")]
        mod postgres {
            $(
                #[test]
                fn $case() {
                    crate::$file::$case::<crate::engines::postgres::Postgres>();
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(
                #[test]
                fn $case() {
                    crate::$file::$case::<crate::engines::redis::Redis>();
                }
            )*
        }
    };
}

cases!(
    exclusive::acquire_is_exclusive,
    fence::renewal_and_fence,
    handoff::the_mark_goes_to_the_next_holder_after_a_clean_close,
    handoff::the_mark_goes_to_the_next_holder_after_a_sigkill,
    records::a_record_gone_under_a_holder,
    records::a_mark_lowered_under_a_holder,
    records::a_record_gone_between_holders,
    records::a_mark_lowered_between_holders,
    records::a_store_restored_between_holders,
    restarts::restarts_and_killed_connections,
    crowd::many_holders_at_once,
    full_layout::a_full_layout,
);

/// The case's lease settings on `server`, in the ID space `prefix` (each
/// case its own): the suite's TTL, lead cap and skew limit, through
/// `port` (a proxy's) or straight to the server.
fn config<E: Engine>(server: &E, prefix: &str, port: Option<u16>) -> LeaseConfig {
    LeaseConfig::new(server.url_at(port.unwrap_or_else(|| server.port())))
        .prefix(prefix)
        .ttl(TTL)
        .max_lead(LEAD)
        .max_skew(SKEW)
}

/// A server of engine `E` that cases which leave it running share: the
/// one already running for another case, or a new one (`None` after the
/// harness's loud skip). It stops once the last case holding it is done.
fn shared<E: Engine>() -> Option<Arc<E>> {
    let mut slot = E::slot().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(server) = slot.upgrade() {
        return Some(server);
    }
    let server = Arc::new(E::start()?);
    *slot = Arc::downgrade(&server);
    Some(server)
}

/// The slot of [`shared`], one per engine.
type Slot<E> = Mutex<Weak<E>>;

/// Every ID a case saw, checked as it arrives: by the harness's duplicate
/// check, and each ID's second against the wall clock, which it may lead
/// by the lead cap at most (`LeaseConfig::max_lead`; checked when the ID
/// is read, after it was issued).
struct Seen(Tally);

impl Seen {
    fn new() -> Seen {
        Seen(Tally::new())
    }

    /// Records `ids` (default layout), issued by `who`.
    fn add(&mut self, ids: impl IntoIterator<Item = u64>, who: &str) {
        let ids: Vec<u64> = ids.into_iter().collect();
        let bound = wall_now() + LEAD.as_secs();
        if let Some(&ahead) = ids.iter().find(|&&id| unix_second(id) > bound) {
            panic!(
                "{who}: ID {ahead} is in second {}, past the wall clock plus the lead cap ({bound})",
                unix_second(ahead)
            );
        }
        self.0.add(ids, who);
    }
}

/// How a call to a leased generator failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Fenced,
    Lost,
    RecordLost,
    Other,
}

impl Failure {
    fn of(e: &Error) -> Failure {
        match e {
            Error::Lease(LeaseError::Fenced { .. }) => Failure::Fenced,
            Error::Lease(LeaseError::Lost { .. }) => Failure::Lost,
            Error::Lease(LeaseError::RecordLost { .. }) => Failure::RecordLost,
            _ => Failure::Other,
        }
    }
}

/// What a [`Driver`] saw: each ID with when it was asked for, each failure
/// with its kind and when.
#[derive(Default)]
struct Log {
    ids: Vec<(u64, Instant)>,
    failures: Vec<(Failure, String, Instant)>,
}

/// Asks a generator for 20 IDs a millisecond at most (never ahead of the
/// clock) on a thread until stopped; every result is logged, no failure is
/// fatal. A call asked for after a moment issued after it, however late
/// its answer is read.
struct Driver {
    log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<()>,
}

impl Driver {
    fn start(g: Arc<Generator>) -> Driver {
        let log = Arc::new(Mutex::new(Log::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        let handle = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let result = g.next_ids(20);
                let mut log = l.lock().unwrap();
                match result {
                    Ok(batch) => log.ids.extend(batch.map(|id| (id.as_u64(), asked))),
                    Err(e) => log.failures.push((Failure::of(&e), e.to_string(), asked)),
                }
                drop(log);
                thread::sleep(Duration::from_millis(1));
            }
        });
        Driver { log, stop, handle }
    }

    fn issued(&self) -> usize {
        self.log.lock().unwrap().ids.len()
    }

    /// The first failure of kind `kind` asked for at or after `since`.
    fn failed_since(&self, kind: Failure, since: Instant) -> Option<(String, Instant)> {
        let log = self.log.lock().unwrap();
        log.failures
            .iter()
            .find(|(k, _, at)| *k == kind && *at >= since)
            .map(|(_, text, at)| (text.clone(), *at))
    }

    /// When the last call that issued was asked for.
    fn last_issue(&self) -> Option<Instant> {
        self.log.lock().unwrap().ids.last().map(|(_, at)| *at)
    }

    /// Stops the thread; everything it logged.
    fn finish(self) -> Log {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap();
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// Starts [`lease_child_process`] leasing a shard of `shards` from `url`
/// in the ID space `prefix`, with the suite's TTL, lead cap and skew
/// limit, on a host of its own (`dir`); it issues `count` IDs and closes,
/// or issues until killed (`None`).
fn lease_child(
    url: &str,
    prefix: &str,
    shards: RangeInclusive<u32>,
    count: Option<usize>,
    dir: &std::path::Path,
) -> ChildProc {
    let mut envs = vec![
        (
            "IDUTIL_CHILD_LEASE",
            format!(
                "{url} {} {} {}",
                TTL.as_millis(),
                shards.start(),
                shards.end()
            ),
        ),
        ("IDUTIL_CHILD_PREFIX", prefix.to_string()),
        ("IDUTIL_CHILD_SKEW", SKEW.as_secs().to_string()),
        ("IDUTIL_CHILD_LEAD", LEAD.as_secs().to_string()),
        ("IDUTIL_STATE_DIR", dir.display().to_string()),
        ("IDUTIL_ID_SPACE", harness::space_for(dir)),
    ];
    if let Some(count) = count {
        envs.push(("IDUTIL_CHILD_COUNT", count.to_string()));
    }
    ChildProc::spawn("lease_child_process", &envs)
}

/// The child's side, started by [`lease_child`]: a paced holder
/// (`harness::lease::paced_holder_child`).
#[test]
#[ignore = "run only as a child process by the tests in this crate"]
fn lease_child_process() {
    harness::lease::paced_holder_child();
}
