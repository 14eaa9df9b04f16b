//! Hundreds of holders opening and closing at once while other work keeps
//! every core busy: through PgBouncer in transaction mode with a pool far
//! smaller than the crowd, and with a server connection each. An open on
//! a busy machine or server is slower, never failed, within the lease's
//! open deadline (`LeaseConfig::open_timeout`); so is a close.
//!
//! A test binary of its own: the load these tests make on purpose (threads
//! spinning on every core) would otherwise fall on the other lease tests
//! running beside them, and starve their servers' starts.
#![cfg(feature = "postgres-lease")]

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil::{Error, Generator, Layout};
use idutil_harness::pgbouncer::{PgBouncer, Pool};
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::state_dir;

use idutil_harness::lease::{leased, WIDE};
use idutil_harness::threads::{wait_until, SetOnDrop};
use idutil_harness::Tally;

/// Threads that spin until dropped, three for each core: the other work
/// of an overloaded machine (a build beside a test suite).
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Spinning threads for each core.
const BUSY_PER_CORE: usize = 3;

impl Busy {
    fn start() -> Busy {
        let cores = thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cores * BUSY_PER_CORE)
            .map(|_| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One crowd at a time: two at once would each be the other's load, and
/// the measured one would measure both.
static ONE_CROWD: Mutex<()> = Mutex::new(());

fn one_crowd() -> MutexGuard<'static, ()> {
    ONE_CROWD.lock().unwrap_or_else(|p| p.into_inner())
}

/// A server with room for `holders` connections of their own.
fn server_for(holders: u32) -> Option<Postgres> {
    Postgres::start_tcp(&Options {
        max_connections: Some(holders + 50),
        ..Options::default()
    })
}

/// PgBouncer in transaction mode with `size` server connections.
fn bouncer(server: &Postgres, size: u32) -> Option<PgBouncer> {
    PgBouncer::start(
        server,
        &Pool {
            mode: "transaction",
            size,
            users: vec!["postgres".to_string()],
        },
    )
}

/// What a crowd's open and close came to.
struct Crowd {
    opened: Vec<Generator>,
    /// Each failed open's error.
    failed: Vec<String>,
    /// Each open's time, failed or not, sorted.
    open_times: Vec<Duration>,
    /// The whole crowd's open, first start to last end.
    open_wall: Duration,
}

impl Crowd {
    /// Every one of the `n` opened with `config`, each on a shard of its
    /// own, and each issues 50 IDs at once, none of them twice; except a
    /// few whose shard starts past their lead cap.
    ///
    /// Those few: an open whose acquisition's answer was lost (no answer
    /// in time, from a queue at the pooler) takes its row back at its next
    /// try, and a fresh row that the history knows (because the lost
    /// acquisition recorded it) is raised by the history's jump, since the
    /// holder cannot tell it from a row that forgot its marks (the
    /// PostgreSQL lease's docs, *Restored tables and rewound histories*).
    /// Such a holder waits for its lead cap before its first ID, about a
    /// minute with the default settings: it is checked to refuse with
    /// `LeadCapReached`, its lead within the jump, not waited for.
    ///
    /// A failure names each kind of error once, with its count, and the
    /// warnings and errors `logs` (the server's and the pooler's) hold.
    /// Returns how many started past their lead cap.
    fn assert_all_opened_and_issue(
        &self,
        n: usize,
        config: &LeaseConfig,
        logs: &[String],
    ) -> usize {
        if !self.failed.is_empty() {
            let mut why: BTreeMap<String, usize> = BTreeMap::new();
            for e in &self.failed {
                *why.entry(shape(e)).or_default() += 1;
            }
            let why: Vec<String> = why.iter().map(|(e, c)| format!("{c} × {e}")).collect();
            panic!(
                "{} of {n} opens failed (open times {:?} to {:?}):\n{}\nwhat the logs \
                 warned of:\n{}",
                self.failed.len(),
                self.open_times[0],
                self.open_times[self.open_times.len() - 1],
                why.join("\n"),
                trouble(logs)
            );
        }
        let shards: HashSet<u32> = self.opened.iter().map(Generator::shard).collect();
        assert_eq!(shards.len(), n, "every holder has its own shard");
        // The history's jump: the store's clock plus the lead cap, the
        // fence and twice the skew limit, plus one second.
        let jump = (config.get_max_lead() + config.fence_after() + config.get_max_skew() * 2)
            .as_secs()
            + 1;
        let mut all = Tally::new();
        let mut ahead = 0;
        for (i, g) in self.opened.iter().enumerate() {
            match g.next_ids_nowait(50) {
                Ok(ids) => all.add(ids.map(u64::from), &format!("holder {i}")),
                Err(Error::LeadCapReached { lead, max_lead, .. }) => {
                    assert!(
                        lead <= jump && max_lead == config.get_max_lead().as_secs(),
                        "holder {i}: lead {lead} s, cap {max_lead} s, jump {jump} s"
                    );
                    ahead += 1;
                }
                Err(e) => panic!("holder {i}: {e}"),
            }
        }
        assert!(
            ahead <= n / 4,
            "{ahead} of {n} holders start past their lead cap"
        );
        ahead
    }
}

/// `text` with each figure (a run of digits, points, hexadecimal letters
/// and `x` that holds a digit: a time, a count, an address) as one `#`, so
/// that messages alike but for their figures read as one.
fn shape(text: &str) -> String {
    let figure = |c: char| c.is_ascii_hexdigit() || c == '.' || c == 'x';
    let mut out = String::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if figure(c) {
            run.push(c);
            continue;
        }
        if run.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// The lines of `logs` that warn or say an error, each shape (figures
/// left out) once with its count and its first line.
fn trouble(logs: &[String]) -> String {
    let mut seen: BTreeMap<String, (usize, &str)> = BTreeMap::new();
    for line in logs.iter().flat_map(|l| l.lines()) {
        if !["WARNING", "ERROR", "FATAL", "LOG: C-", "LOG: S-"]
            .iter()
            .any(|w| line.contains(w))
        {
            continue;
        }
        // From the level on: the time and the process before it differ.
        let from = ["WARNING", "ERROR", "FATAL", "LOG"]
            .iter()
            .filter_map(|w| line.find(w))
            .min()
            .unwrap_or(0);
        seen.entry(shape(&line[from..])).or_insert((0, line)).0 += 1;
    }
    let mut lines: Vec<_> = seen.into_values().collect();
    lines.sort_by_key(|l| std::cmp::Reverse(l.0));
    lines
        .iter()
        .take(40)
        .map(|(count, line)| format!("{count} × {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `n` holders (each on a host of its own, kept in `hosts`) open at once
/// with `config`.
fn open_crowd(hosts: &[tempfile::TempDir], config: &LeaseConfig) -> Crowd {
    let layout: Layout = WIDE.parse().unwrap();
    let start = Arc::new(Barrier::new(hosts.len()));
    let began = Instant::now();
    let results: Vec<(Result<Generator, String>, Duration)> = thread::scope(|s| {
        let opening: Vec<_> = hosts
            .iter()
            .map(|h| {
                let (config, start) = (config.clone(), start.clone());
                thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        start.wait();
                        let t = Instant::now();
                        let opened = leased(h, config).layout(layout).open();
                        (opened.map_err(|e| e.to_string()), t.elapsed())
                    })
                    .unwrap()
            })
            .collect();
        opening.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let open_wall = began.elapsed();
    let mut crowd = Crowd {
        opened: Vec::new(),
        failed: Vec::new(),
        open_times: Vec::new(),
        open_wall,
    };
    for (result, took) in results {
        crowd.open_times.push(took);
        match result {
            Ok(g) => crowd.opened.push(g),
            Err(e) => crowd.failed.push(e),
        }
    }
    crowd.open_times.sort();
    crowd
}

/// Closes every generator at once; returns the longest close and the
/// whole crowd's close time.
fn close_crowd(generators: Vec<Generator>) -> (Duration, Duration) {
    let start = Arc::new(Barrier::new(generators.len().max(1)));
    let began = Instant::now();
    let longest = thread::scope(|s| {
        let closing: Vec<_> = generators
            .into_iter()
            .map(|g| {
                let start = start.clone();
                thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        start.wait();
                        let t = Instant::now();
                        g.close().unwrap();
                        drop(g);
                        t.elapsed()
                    })
                    .unwrap()
            })
            .collect();
        closing
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default()
    });
    (longest, began.elapsed())
}

/// The rows whose lease is live.
fn held_rows(pg: &Postgres) -> u64 {
    pg.psql(
        "SELECT count(*) FROM idutil_lease \
         WHERE holder IS NOT NULL AND expires_at > clock_timestamp()",
    )
    .parse()
    .unwrap()
}

/// `n` holders open at once through `url` on an overloaded machine: every one
/// opens, each on its own shard, no ID repeats, and all close, leaving no
/// row held.
fn every_one_opens_and_closes(pg: &Postgres, pooler: Option<&PgBouncer>, n: usize) {
    let url = match pooler {
        Some(p) => p.url("postgres"),
        None => pg.tcp_url(),
    };
    let _one = one_crowd();
    let hosts: Vec<_> = (0..n).map(|_| state_dir()).collect();
    let busy = Busy::start();
    let config = LeaseConfig::new(url);
    let crowd = open_crowd(&hosts, &config);
    let logs = [
        pg.log_text(),
        pooler.map(PgBouncer::log_text).unwrap_or_default(),
    ];
    let ahead = crowd.assert_all_opened_and_issue(n, &config, &logs);
    assert_eq!(held_rows(pg), n as u64);
    let (longest, _) = close_crowd(crowd.opened);
    drop(busy);
    assert_eq!(held_rows(pg), 0, "every lease is given back at close");
    eprintln!(
        "{n} holders: opened in {:?} (slowest {:?}), {ahead} past their lead cap, closed \
         within {longest:?}",
        crowd.open_wall,
        crowd.open_times.last().unwrap()
    );
}

/// 500 holders open at once through PgBouncer in transaction mode with a
/// pool of 4, on an overloaded machine.
#[test]
fn five_hundred_open_at_once_through_a_pool_of_four_on_an_overloaded_machine() {
    let Some(pg) = server_for(50) else { return };
    let Some(pooler) = bouncer(&pg, 4) else {
        return;
    };
    every_one_opens_and_closes(&pg, Some(&pooler), 500);
}

/// 400 holders open at once, each with its own server connection, on an
/// overloaded machine.
#[test]
fn four_hundred_open_at_once_each_on_its_own_connection_on_an_overloaded_machine() {
    let Some(pg) = server_for(400) else { return };
    every_one_opens_and_closes(&pg, None, 400);
}

/// The measurement quoted in BENCHMARKS.md (*Many holders opening at
/// once*): 1,000 holders open at once through PgBouncer in transaction
/// mode with a pool of 10, then with a connection each, while every core
/// is busy; prints how many opened, why the others failed, the open
/// times, and the close.
///
/// `cargo test -p idutil-cli --all-features --test postgres_crowds -- --ignored --nocapture a_thousand`
#[test]
#[ignore = "a measurement, about a minute or two: run by hand"]
fn a_thousand_open_at_once_measured() {
    let _one = one_crowd();
    let n: usize = std::env::var("IDUTIL_CROWD")
        .ok()
        .map_or(1000, |v| v.parse().unwrap());
    for pooled in [true, false] {
        let Some(pg) = server_for(n as u32) else {
            return;
        };
        let pooler = if pooled { bouncer(&pg, 10) } else { None };
        if pooled && pooler.is_none() {
            return;
        }
        let url = match &pooler {
            Some(p) => p.url("postgres"),
            None => pg.tcp_url(),
        };
        let hosts: Vec<_> = (0..n).map(|_| state_dir()).collect();
        let busy = Busy::start();
        let crowd = open_crowd(&hosts, &LeaseConfig::new(&url));
        let opened = crowd.opened.len();
        let shards: HashSet<u32> = crowd.opened.iter().map(Generator::shard).collect();
        assert_eq!(shards.len(), opened, "a shard leased twice");
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        for e in &crowd.failed {
            *why.entry(e.replace(&url, "URL")).or_default() += 1;
        }
        let pct = |p: usize| crowd.open_times[(crowd.open_times.len() - 1) * p / 100];
        let (longest, close_wall) = close_crowd(crowd.opened);
        drop(busy);
        let held = held_rows(&pg);
        println!(
            "{}: {opened} of {n} opened in {:.1?}; open p50 {:.1?}, p90 {:.1?}, max {:.1?}; \
             closed in {close_wall:.1?} (slowest {longest:.1?}), rows still held {held}",
            if pooled {
                "PgBouncer, transaction mode, pool 10"
            } else {
                "a connection each"
            },
            crowd.open_wall,
            pct(50),
            pct(90),
            pct(100),
        );
        for (e, count) in why {
            println!("  {count} failed: {e}");
        }
        // The lease's part alone: each leases a shard and gives it back
        // at once, with no state directory and no first mark.
        let busy = Busy::start();
        let (leased, times) = lease_alone(n, &LeaseConfig::new(&url));
        drop(busy);
        println!(
            "  the lease alone: {leased} of {n} leased; p50 {:.1?}, p90 {:.1?}, max {:.1?}",
            times[n / 2],
            times[n * 9 / 10],
            times[n - 1]
        );
    }
}

/// `n` threads at once lease a shard with `config` and give it back
/// (the crate's renewal timer, with no renewal): how many leased, and
/// each one's time, sorted.
fn lease_alone(n: usize, config: &LeaseConfig) -> (usize, Vec<Duration>) {
    let layout: Layout = WIDE.parse().unwrap();
    let start = Arc::new(Barrier::new(n));
    let mut results: Vec<(bool, Duration)> = thread::scope(|s| {
        let leasing: Vec<_> = (0..n)
            .map(|_| {
                let start = start.clone();
                thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        start.wait();
                        let t = Instant::now();
                        let ok = idutil::lease::time_renewals(config, &layout, 0).is_ok();
                        (ok, t.elapsed())
                    })
                    .unwrap()
            })
            .collect();
        leasing.into_iter().map(|h| h.join().unwrap()).collect()
    });
    results.sort_by_key(|r| r.1);
    let leased = results.iter().filter(|r| r.0).count();
    (leased, results.into_iter().map(|r| r.1).collect())
}

/// 100 holders open at once while the server is killed (crash, no
/// checkpoint) and started again, then while their statements are
/// cancelled (`pg_cancel_backend`) over and over: every one opens, on its
/// own shard, within the open deadline. An acquisition whose answer the
/// crash cut off is found again by the next try once the server is back,
/// so no row is left held beyond the holders' own; after they close, none
/// is.
#[test]
fn a_crowd_opens_through_a_server_crash_and_cancelled_statements() {
    let _one = one_crowd();
    let Some(mut pg) = server_for(150) else {
        return;
    };
    let url = pg.tcp_url();
    let n = 100;
    let hosts: Vec<_> = (0..n).map(|_| state_dir()).collect();
    let config = LeaseConfig::new(url).ttl(Duration::from_secs(3));
    // The table and the rows first, so the crash meets acquisitions.
    let layout: Layout = WIDE.parse().unwrap();
    drop(
        leased(&hosts[0], config.clone())
            .layout(layout)
            .open()
            .unwrap(),
    );
    let stop = AtomicBool::new(false);
    let crowd = thread::scope(|s| {
        let opening = s.spawn(|| open_crowd(&hosts, &config));
        // The crash once the first of them has leased: the others are
        // between their steps.
        wait_until("a first lease", Duration::from_secs(20), || {
            held_rows(&pg) > 1
        });
        pg.kill_immediate();
        thread::sleep(Duration::from_millis(500));
        pg.restart();
        let _stop = SetOnDrop(&stop);
        let cancelling = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = pg.try_psql(
                    "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = 'idutil-lease' AND state = 'active'",
                );
                thread::sleep(Duration::from_millis(5));
            }
        });
        let crowd = opening.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        cancelling.join().unwrap();
        crowd
    });
    crowd.assert_all_opened_and_issue(n, &config, &[pg.log_text()]);
    assert_eq!(held_rows(&pg), n as u64, "rows held beyond the holders'");
    eprintln!(
        "{n} holders through a crash and {} cancelled statements: opened in {:?} (slowest {:?})",
        pg.log_text()
            .matches("canceling statement due to user request")
            .count(),
        crowd.open_wall,
        crowd.open_times.last().unwrap()
    );
    close_crowd(crowd.opened);
    assert_eq!(held_rows(&pg), 0, "every lease is given back at close");
}

/// PgBouncer paused (`PAUSE` on its console) for longer than the open
/// deadline: an open fails when its deadline runs out, saying so and what
/// it was waiting for; a holder that closes meanwhile returns within the
/// close's bound (a quarter of the TTL, after a round trip in flight) and its
/// lease expires by itself. Once the pooler resumes, no row is held and a
/// new holder opens.
#[test]
fn a_pooler_paused_past_the_open_deadline_fails_the_open_naming_the_deadline() {
    // Timed: not beside a crowd's load.
    let _one = one_crowd();
    let Some(pg) = server_for(20) else { return };
    let Some(pooler) = bouncer(&pg, 2) else {
        return;
    };
    let url = pooler.url("postgres");
    let ttl = Duration::from_secs(2);
    let config = LeaseConfig::new(&url)
        .ttl(ttl)
        .open_timeout(Duration::from_secs(3));
    let live_host = state_dir();
    let live = leased(&live_host, config.clone()).open().unwrap();
    live.next_ids(100).unwrap();
    pooler.admin("PAUSE");
    let host = state_dir();
    let start = Instant::now();
    let err = leased(&host, config.clone()).open().unwrap_err();
    let took = start.elapsed();
    let closing = Instant::now();
    live.close().unwrap();
    drop(live);
    let close_took = closing.elapsed();
    pooler.admin("RESUME");
    let text = err.to_string();
    assert!(
        text.contains("the open deadline of 3s (LeaseConfig::open_timeout) ran out after")
            && text.contains("no answer within"),
        "{text}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "the open failed after {took:?}, not at its 3 s deadline"
    );
    // The lease's part is a quarter of the TTL after a round trip in
    // flight; the rest is the generator's own close (its threads, its
    // state file) on a busy machine. Without a deadline it would wait for
    // the pooler for ever.
    assert!(
        close_took < ttl * 2,
        "closing took {close_took:?}, more than twice the TTL"
    );
    wait_until("no row held", ttl * 3, || held_rows(&pg) == 0);
    let after = state_dir();
    let g = leased(&after, config).open().unwrap();
    g.next_ids(100).unwrap();
}
