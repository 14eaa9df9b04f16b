//! `DEFAULT idutil_next_id()` in PostgreSQL: rows inserted per second into
//! a table `(id <key> PRIMARY KEY, body text)` whose key the server makes,
//! for four keys side by side in the same run:
//!
//! - `bigint DEFAULT idutil_next_id()`, installed by
//!   `DatabaseHolder::new(&LeaseConfig::new(url), 31).install()`;
//! - `bigserial`;
//! - `uuid DEFAULT uuid_generate_v7()`: PostgreSQL 15 has no `uuidv7()`, so
//!   the widely copied PL/pgSQL function (a `gen_random_uuid()` with the
//!   first 48 bits overlaid by the milliseconds of `clock_timestamp()` and
//!   the version set to 7);
//! - `uuid DEFAULT gen_random_uuid()`.
//!
//! The load is `pgbench` (the one beside the server's `postgres`), with
//! prepared statements over the Unix socket: 1 and 8 clients, one row per
//! transaction (`INSERT ... VALUES`) and 100 rows per transaction
//! (`INSERT ... SELECT ... FROM generate_series(1, 100)`). The server is
//! the database benchmark's (`Postgres::start_for_benchmark`: `fsync` and
//! `synchronous_commit` on, 128 MB of `shared_buffers`, no autovacuum).
//! Each run empties its table and checkpoints first, so every run starts
//! from the same state. Every key runs once per load and round, the order
//! rotating, so that noise from the machine's other work falls on every
//! key; the figures are medians over the rounds, and each run's row count
//! is checked against the transactions pgbench says it committed.
//!
//! One shard issues 65,536 IDs a second and may borrow ahead of the clock
//! up to its lead cap (`LeaseConfig::max_lead`, 30 s); past it
//! `idutil_next_id()` waits, as a Rust holder does. The rounds measure every
//! key within the cap. A run of one row per transaction lasts a fixed time
//! (it stays far below 65,536 rows a second, so the lead only shrinks). A
//! run of 100 rows per transaction inserts a fixed number of rows, the same
//! for every key: what the fastest key would insert in that time at its
//! rate in an untimed 1 s warm-up run, at most 1,572,864 (24 seconds of
//! one shard's IDs); its idutil run starts only once the counter's lead
//! over the clock is back to 0 (it waits, and says so), so it stays within
//! the cap however fast the server goes. Every idutil run reports the lead
//! before and after. The sustained rate is measured apart, at the cap: for
//! each load of 100 rows per transaction, `bigserial` for a longer run,
//! then the counter's lead pushed to the cap and idutil for as long.
//!
//! Before the inserts, what a call costs on its own, for each key's
//! function and for functions that each add one step of
//! `idutil_next_id()`'s fast path: in one session (`SELECT count(f()) FROM
//! generate_series(1, 60000)`, timed here), and in 8 sessions at once
//! (pgbench runs the same query over 1,000 calls; core time per call).
//!
//! `cargo bench -p idutil-benches --features postgres-lease --bench
//! sql_default`, about 7 minutes on 2 cores. `IDUTIL_SQL_BENCH_SECONDS` (a
//! timed run, default 5), `IDUTIL_SQL_BENCH_ROUNDS` (default 3) and
//! `IDUTIL_SQL_BENCH_SUSTAINED` (seconds, default 15; 0 leaves it out)
//! shorten it: `=1`, `=1` and `=0` take about a minute and a half.
//! BENCHMARKS.md quotes the output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use idutil::lease::postgres::DatabaseHolder;
use idutil::lease::LeaseConfig;
use idutil_harness::postgres::Postgres;
use postgres::{Client, NoTls};

/// The shard the database holds.
const SHARD: u32 = 31;
/// The layout's epoch, 2000-01-01, in Unix seconds.
const EPOCH: i64 = 946_684_800;
/// IDs a shard issues in a second (its 16 sequence bits).
const PER_SECOND: f64 = 65_536.0;
/// The target: idutil at least this share of `bigserial`'s rows a
/// second.
const TARGET: f64 = 0.8;
/// Calls per query in the per-call measurement: under a second's IDs.
const CALLS: u32 = 60_000;
/// Repetitions of each per-call query; the median is reported.
const CALL_RUNS: usize = 7;
/// Transactions of 1,000 calls each of 8 sessions commits in a run of the
/// shared per-call measurement.
const SHARED_CALLS: u64 = 100;
/// Runs of the shared per-call measurement; the median is reported.
const SHARED_RUNS: usize = 3;
/// The machine's cores, for core time per call.
fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}
const BODY: &str = "a short body, about as long as a title";

/// The primary key of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Idutil,
    Serial,
    UuidV7,
    UuidV4,
}

impl Key {
    const ALL: [Key; 4] = [Key::Idutil, Key::Serial, Key::UuidV7, Key::UuidV4];

    fn name(self) -> &'static str {
        match self {
            Key::Idutil => "bigint DEFAULT idutil_next_id()",
            Key::Serial => "bigserial",
            Key::UuidV7 => "uuid DEFAULT uuid_generate_v7()",
            Key::UuidV4 => "uuid DEFAULT gen_random_uuid()",
        }
    }

    fn table(self) -> &'static str {
        match self {
            Key::Idutil => "k_idutil",
            Key::Serial => "k_serial",
            Key::UuidV7 => "k_uuid7",
            Key::UuidV4 => "k_uuid4",
        }
    }
}

/// Clients and rows per transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Load {
    clients: u32,
    rows: u32,
}

const LOADS: [Load; 4] = [
    Load {
        clients: 1,
        rows: 1,
    },
    Load {
        clients: 1,
        rows: 100,
    },
    Load {
        clients: 8,
        rows: 1,
    },
    Load {
        clients: 8,
        rows: 100,
    },
];

/// Rows inserted by a run of 100 rows per transaction: 24 seconds of one
/// shard's IDs, within the 30 s lead cap from a lead of 0 however fast
/// the inserts go (rounded down to whole transactions of each client).
const BATCH_ROWS: u64 = 24 * 65_536;

/// How long a run lasts.
#[derive(Clone, Copy, Debug)]
enum Work {
    Seconds(u64),
    /// Transactions each client commits.
    Transactions(u64),
}

impl Load {
    /// A run of the rounds: a fixed time for one row per transaction; for
    /// more, a fixed number of rows, the same for every key: what the
    /// fastest key would insert in `seconds` at its warm-up rate
    /// (`warm_up` rows a second), at most [`BATCH_ROWS`].
    fn work(self, seconds: u64, warm_up: f64) -> Work {
        if self.rows == 1 {
            return Work::Seconds(seconds);
        }
        let rows = (warm_up * seconds as f64).min(BATCH_ROWS as f64) as u64;
        Work::Transactions((rows / u64::from(self.clients * self.rows)).max(1))
    }

    /// Whether it may draw IDs faster than one shard's 65,536 a second, so
    /// that an idutil run waits for the lead to return to 0 first.
    fn may_borrow(self) -> bool {
        self.rows > 1
    }
}

/// How long the run takes.
struct Plan {
    seconds: u64,
    rounds: usize,
    sustained: u64,
}

fn plan() -> Plan {
    let var = |name: &str, default: u64| -> u64 {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
            Err(_) => default,
        }
    };
    Plan {
        seconds: var("IDUTIL_SQL_BENCH_SECONDS", 5).max(1),
        rounds: var("IDUTIL_SQL_BENCH_ROUNDS", 3).max(1) as usize,
        sustained: var("IDUTIL_SQL_BENCH_SUSTAINED", 15),
    }
}

/// The common PL/pgSQL `uuid_generate_v7()`: a version 4 UUID's random
/// bytes, the first 48 bits replaced by Unix milliseconds, the version
/// nibble turned from 4 into 7 (bits 52 and 53 set).
const UUID_V7: &str = "
CREATE OR REPLACE FUNCTION uuid_generate_v7() RETURNS uuid
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN encode(
        set_bit(
            set_bit(
                overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send(floor(extract(epoch FROM clock_timestamp())
                        * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
                52, 1),
            53, 1),
        'hex')::uuid;
END
$$;";

/// Functions that each add one step of `idutil_next_id()`'s fast path
/// (as installed for shard 31) to a PL/pgSQL `nextval` of a plain
/// sequence: the clock's second, the session's mark (a setting compared),
/// the counter's and the fence's last values read, `SECURITY DEFINER`.
/// What each step costs.
const FAST_PATH_PARTS: &str = "
CREATE SEQUENCE part_seq;
CREATE OR REPLACE FUNCTION part_1_nextval() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN nextval('part_seq'::regclass);
END $$;
CREATE OR REPLACE FUNCTION part_2_clock() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_floor bigint := (floor(date_part('epoch', clock_timestamp()))::bigint - 946684800) << 16;
BEGIN
    IF v_floor >= 0 THEN
        RETURN nextval('part_seq'::regclass);
    END IF;
    RETURN 0;
END $$;
CREATE OR REPLACE FUNCTION part_3_setting() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_floor bigint := (floor(date_part('epoch', clock_timestamp()))::bigint - 946684800) << 16;
BEGIN
    IF current_setting('part.checked', true) = 'idutil_counter'::regclass::oid::text
       AND v_floor >= 0 THEN
        RETURN nextval('part_seq'::regclass);
    END IF;
    RETURN 0;
END $$;
CREATE OR REPLACE FUNCTION part_4_last_values() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_floor bigint := (floor(date_part('epoch', clock_timestamp()))::bigint - 946684800) << 16;
    v_counter bigint;
    v_fence bigint;
    v_top bigint;
BEGIN
    IF current_setting('part.checked', true) = 'idutil_counter'::regclass::oid::text
       AND v_floor >= 0 THEN
        v_counter := pg_sequence_last_value('idutil_counter'::regclass);
        v_fence := pg_sequence_last_value('idutil_fence'::regclass);
        v_top := LEAST(v_fence | 65535, v_floor + 2031615);
        IF v_counter >= 0 AND v_top >= 0 THEN
            RETURN nextval('part_seq'::regclass);
        END IF;
    END IF;
    RETURN 0;
END $$;
CREATE OR REPLACE FUNCTION part_5_definer() RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    v_floor bigint := (floor(date_part('epoch', clock_timestamp()))::bigint - 946684800) << 16;
    v_counter bigint;
    v_fence bigint;
    v_top bigint;
BEGIN
    IF current_setting('part.checked', true) = 'idutil_counter'::regclass::oid::text
       AND v_floor >= 0 THEN
        v_counter := pg_sequence_last_value('idutil_counter'::regclass);
        v_fence := pg_sequence_last_value('idutil_fence'::regclass);
        v_top := LEAST(v_fence | 65535, v_floor + 2031615);
        IF v_counter >= 0 AND v_top >= 0 THEN
            RETURN nextval('part_seq'::regclass);
        END IF;
    END IF;
    RETURN 0;
END $$;";

/// One pgbench run.
struct Run {
    rows_per_second: f64,
    /// The counter's lead over the clock before and after (idutil only).
    lead: Option<(i64, i64)>,
    /// Seconds waited before the run for the lead to return to 0.
    waited: u64,
    /// Rows per second in each second of the run, when asked for.
    per_second: Vec<f64>,
}

struct Bench {
    client: Client,
    pgbench: PathBuf,
    socket: PathBuf,
    port: u16,
    scripts: tempfile::TempDir,
    max_lead: i64,
    // Last, so the connection closes before the server stops.
    _server: Postgres,
}

impl Bench {
    fn start() -> Option<Bench> {
        let server = Postgres::start_for_benchmark()?;
        let config = LeaseConfig::new(server.tcp_url());
        let max_lead = config.get_max_lead().as_secs() as i64;
        DatabaseHolder::new(&config, SHARD)
            .install()
            .expect("install idutil_next_id()");
        let mut client = Client::connect(&server.tcp_url(), NoTls).expect("connect");
        client.batch_execute(UUID_V7).expect("uuid_generate_v7()");
        client
            .batch_execute(FAST_PATH_PARTS)
            .expect("the fast path's parts");
        for key in Key::ALL {
            client
                .batch_execute(&format!(
                    "CREATE TABLE {} (id {} PRIMARY KEY, body text)",
                    key.table(),
                    key.name()
                ))
                .expect("create the tables");
        }
        let pgbench = server.program("pgbench");
        assert!(
            pgbench.is_file(),
            "{} is missing: install PostgreSQL's client programs",
            pgbench.display()
        );
        Some(Bench {
            client,
            pgbench,
            socket: server.socket_dir().to_path_buf(),
            port: server.port(),
            scripts: tempfile::tempdir().expect("a temporary directory"),
            max_lead,
            _server: server,
        })
    }

    fn sql(&mut self, sql: &str) {
        self.client
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn scalar(&mut self, sql: &str) -> i64 {
        self.client
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// The counter's lead over the server's clock, in seconds.
    fn lead(&mut self) -> i64 {
        self.scalar(&format!(
            "SELECT coalesce(pg_sequence_last_value('idutil_counter') >> 16, 0) \
             - (floor(extract(epoch FROM clock_timestamp()))::bigint - {EPOCH})"
        ))
    }

    /// Waits until the counter is no longer ahead of the clock; the
    /// seconds waited.
    fn wait_for_no_lead(&mut self) -> u64 {
        let start = Instant::now();
        loop {
            let lead = self.lead();
            if lead <= 0 {
                return start.elapsed().as_secs_f64().round() as u64;
            }
            std::thread::sleep(Duration::from_millis(lead as u64 * 1000 + 100));
        }
    }

    /// Pushes the counter's lead to the cap, drawing IDs as fast as one
    /// session can.
    fn push_lead_to_cap(&mut self) -> (i64, f64) {
        let start = Instant::now();
        loop {
            let lead = self.lead();
            if lead >= self.max_lead {
                return (lead, start.elapsed().as_secs_f64());
            }
            let calls = ((self.max_lead - lead + 1) as u32 * PER_SECOND as u32).min(1 << 20);
            self.scalar(&format!(
                "SELECT count(idutil_next_id()) FROM generate_series(1, {calls})"
            ));
        }
    }

    /// `f`'s cost per call, in microseconds: the median over the runs of
    /// `SELECT count(f) FROM generate_series(1, CALLS)`, timed here.
    fn per_call(&mut self, calls: &[&str]) -> Vec<f64> {
        // Each session's first idutil call checks the server's history and
        // sets the session's mark; the parts compare a mark of their own.
        self.sql(
            "SELECT idutil_next_id(), \
             set_config('part.checked', 'idutil_counter'::regclass::oid::text, false)",
        );
        let mut times = vec![Vec::new(); calls.len()];
        for _ in 0..CALL_RUNS {
            for (i, call) in calls.iter().enumerate() {
                if call.contains("idutil") {
                    self.wait_for_no_lead();
                }
                let sql = format!("SELECT count({call}) FROM generate_series(1, {CALLS})");
                let start = Instant::now();
                let n = self.scalar(&sql);
                times[i].push(start.elapsed().as_secs_f64());
                assert_eq!(n, i64::from(CALLS));
            }
        }
        times
            .into_iter()
            .map(|t| median(t) * 1e6 / f64::from(CALLS))
            .collect()
    }

    /// `f`'s cost per call with 8 sessions calling it at once: core time
    /// (the machine's cores × the run's wall time) per call, the median
    /// over the runs of 8 pgbench clients each running `SELECT count(f)
    /// FROM generate_series(1, 1000)` [`SHARED_CALLS`] times. 800,000
    /// calls are 12 seconds of one shard's IDs: within the lead cap.
    fn per_call_shared(&mut self, calls: &[&str]) -> Vec<f64> {
        let mark: String = self
            .client
            .query_one("SELECT 'idutil_counter'::regclass::oid::text", &[])
            .expect("the counter's oid")
            .get(0);
        let options = format!("-c part.checked={mark}");
        let load = Load {
            clients: 8,
            rows: 1000,
        };
        let mut rates = vec![Vec::new(); calls.len()];
        for _ in 0..SHARED_RUNS {
            for (i, call) in calls.iter().enumerate() {
                if call.contains("idutil") {
                    self.wait_for_no_lead();
                }
                let script = self.scripts.path().join("call.sql");
                std::fs::write(
                    &script,
                    format!("SELECT count({call}) FROM generate_series(1, 1000);\n"),
                )
                .expect("write the pgbench script");
                let work = Work::Transactions(SHARED_CALLS);
                let out = self.pgbench(&script, load, work, false, Some(&options));
                let committed =
                    number_after(&out.stdout, "number of transactions actually processed:");
                assert_eq!(
                    committed,
                    (SHARED_CALLS * 8) as f64,
                    "{call}: {}",
                    out.stdout
                );
                rates[i].push(number_after(&out.stdout, "tps =") * 1000.0);
            }
        }
        rates
            .into_iter()
            .map(|r| cores() * 1e6 / median(r))
            .collect()
    }

    fn script(&self, key: Key, load: Load) -> PathBuf {
        let path = self
            .scripts
            .path()
            .join(format!("{}-{}.sql", key.table(), load.rows));
        let t = key.table();
        let sql = if load.rows == 1 {
            format!("INSERT INTO {t} (body) VALUES ('{BODY}');\n")
        } else {
            format!(
                "INSERT INTO {t} (body) SELECT '{BODY}' FROM generate_series(1, {});\n",
                load.rows
            )
        };
        std::fs::write(&path, sql).expect("write the pgbench script");
        path
    }

    /// One run, from an empty table after a checkpoint; an idutil run that
    /// [may borrow](Load::may_borrow) starts with no lead unless `at_cap`.
    fn run(&mut self, key: Key, load: Load, work: Work, at_cap: bool) -> Run {
        let t = key.table();
        self.sql(&format!("TRUNCATE {t}"));
        self.sql("CHECKPOINT");
        let waited = if key == Key::Idutil && load.may_borrow() && !at_cap {
            self.wait_for_no_lead()
        } else {
            0
        };
        let before = (key == Key::Idutil).then(|| self.lead());
        let script = self.script(key, load);
        let out = self.pgbench(&script, load, work, at_cap, None);
        let lead = before.map(|b| (b, self.lead()));
        let committed = number_after(&out.stdout, "number of transactions actually processed:");
        let tps = number_after(&out.stdout, "tps =");
        let rows = self.scalar(&format!("SELECT count(*) FROM {t}"));
        assert_eq!(
            rows as f64,
            committed * f64::from(load.rows),
            "{t}: the rows in the table, against pgbench's committed transactions"
        );
        let per_second = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("progress:"))
            .map(|l| number_after(l, "s,") * f64::from(load.rows))
            .collect();
        Run {
            rows_per_second: tps * f64::from(load.rows),
            lead,
            waited,
            per_second,
        }
    }

    /// Runs pgbench: `load.clients` clients (on up to 2 threads) run
    /// `script` for `work`; `options` go to each session (`PGOPTIONS`).
    fn pgbench(
        &self,
        script: &Path,
        load: Load,
        work: Work,
        progress: bool,
        options: Option<&str>,
    ) -> Output {
        let mut cmd = Command::new(&self.pgbench);
        if let Some(options) = options {
            cmd.env("PGOPTIONS", options);
        }
        cmd.arg("-h")
            .arg(&self.socket)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-n", "-M", "prepared"])
            .args(["-c", &load.clients.to_string()])
            .args(["-j", &load.clients.min(2).to_string()])
            .arg("-f")
            .arg(script);
        match work {
            Work::Seconds(s) => cmd.args(["-T", &s.to_string()]),
            Work::Transactions(t) => cmd.args(["-t", &t.to_string()]),
        };
        if progress {
            cmd.args(["-P", "1"]);
        }
        let out = cmd.arg("postgres").output().expect("run pgbench");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "pgbench failed ({}): {stdout}{stderr}",
            out.status
        );
        Output { stdout, stderr }
    }
}

struct Output {
    stdout: String,
    stderr: String,
}

/// The number that follows `label` in `text`.
fn number_after(text: &str, label: &str) -> f64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in pgbench's output: {text}"));
    text[at + label.len()..]
        .split_whitespace()
        .next()
        // `15728/15728` for a run of a fixed number of transactions.
        .and_then(|w| w.trim_end_matches(',').split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in pgbench's output: {text}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The smallest and the largest of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn main() {
    let plan = plan();
    let started = Instant::now();
    println!("load average at start: {}", load_average());
    let Some(mut bench) = Bench::start() else {
        eprintln!("PostgreSQL is not installed: nothing to measure");
        return;
    };
    println!(
        "{} s per run, {} rounds, sustained run {} s; lead cap {} s",
        plan.seconds, plan.rounds, plan.sustained, bench.max_lead
    );

    // What one call costs, alone in one session.
    let calls = [
        "nextval('part_seq')",
        "idutil_next_id()",
        "gen_random_uuid()",
        "uuid_generate_v7()",
        "part_1_nextval()",
        "part_2_clock()",
        "part_3_setting()",
        "part_4_last_values()",
        "part_5_definer()",
    ];
    let costs = bench.per_call(&calls);
    let shared = bench.per_call_shared(&calls);
    println!(
        "\nPer call: one session (median of {CALL_RUNS} × {} calls, wall time), and 8 \
         sessions at once (median of {SHARED_RUNS} runs of {} calls, core time: {} \
         cores × wall time):\n",
        thousands(f64::from(CALLS)),
        thousands((SHARED_CALLS * 8 * 1000) as f64),
        cores()
    );
    println!("| call | µs per call, one session | µs per call, 8 sessions |");
    println!("| --- | ---: | ---: |");
    for ((call, cost), shared) in calls.iter().zip(&costs).zip(&shared) {
        println!("| `{call}` | {cost:.2} | {shared:.2} |");
    }

    // Untimed: the server's caches, pgbench's first connections; and the
    // size of the runs of 100 rows per transaction.
    let mut works = Vec::new();
    for load in LOADS {
        let fastest = Key::ALL
            .iter()
            .map(|&key| {
                bench
                    .run(key, load, Work::Seconds(1), false)
                    .rows_per_second
            })
            .fold(0f64, f64::max);
        let work = load.work(plan.seconds, fastest);
        eprintln!("{} × {} rows: {work:?}", load.clients, load.rows);
        works.push(work);
    }

    // The rounds, within the lead cap.
    let mut runs: Vec<(Load, Key, Run)> = Vec::new();
    for round in 0..plan.rounds {
        eprintln!("round {}: load average {}", round + 1, load_average());
        for (l, (&load, &work)) in LOADS.iter().zip(&works).enumerate() {
            for k in 0..Key::ALL.len() {
                let key = Key::ALL[(round + l + k) % Key::ALL.len()];
                let run = bench.run(key, load, work, false);
                eprintln!(
                    "  {} × {} rows, {}: {:.0} rows/s{}",
                    load.clients,
                    load.rows,
                    key.name(),
                    run.rows_per_second,
                    match run.lead {
                        Some((b, a)) => format!(" (lead {b} → {a} s, waited {} s)", run.waited),
                        None => String::new(),
                    }
                );
                runs.push((load, key, run));
            }
        }
    }

    // Sustained, at the cap, for the loads that go past 65,536 rows a
    // second.
    let mut sustained = Vec::new();
    if plan.sustained > 0 {
        for load in LOADS.into_iter().filter(|l| l.rows > 1) {
            eprintln!(
                "sustained, {} × {} rows: load average {}",
                load.clients,
                load.rows,
                load_average()
            );
            let work = Work::Seconds(plan.sustained);
            let serial = bench.run(Key::Serial, load, work, false);
            let (lead, took) = bench.push_lead_to_cap();
            eprintln!("  lead pushed to {lead} s in {took:.1} s");
            let idutil = bench.run(Key::Idutil, load, work, true);
            eprintln!(
                "  bigserial {:.0} rows/s, idutil {:.0} rows/s",
                serial.rows_per_second, idutil.rows_per_second
            );
            sustained.push((load, serial, idutil));
        }
    }
    let end_load = load_average();

    println!(
        "\nRows a second within the lead cap, median of {} runs (min–max); a run of one \
         row per transaction lasts {} s; of 100 rows: {}:\n",
        plan.rounds,
        plan.seconds,
        LOADS
            .iter()
            .zip(&works)
            .filter_map(|(load, work)| match work {
                Work::Transactions(t) => Some(format!(
                    "{} × {} rows, {} rows a run",
                    load.clients,
                    load.rows,
                    thousands((t * u64::from(load.clients * load.rows)) as f64)
                )),
                Work::Seconds(_) => None,
            })
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!(
        "| clients | rows per transaction | key | rows/s | min–max | × bigserial | × bigserial \
         in each round (median) |"
    );
    println!("| ---: | ---: | --- | ---: | ---: | ---: | ---: |");
    let mut verdicts = Vec::new();
    for load in LOADS {
        // In round order: the i-th of each key ran in the same round.
        let of = |key: Key| -> Vec<f64> {
            runs.iter()
                .filter(|(l, k, _)| *l == load && *k == key)
                .map(|(_, _, r)| r.rows_per_second)
                .collect()
        };
        let base = of(Key::Serial);
        let base_median = median(base.clone());
        for key in [Key::Serial, Key::Idutil, Key::UuidV7, Key::UuidV4] {
            let v = of(key);
            let (lo, hi) = range(&v);
            let per_round: Vec<f64> = v.iter().zip(&base).map(|(x, b)| x / b).collect();
            let shown: Vec<String> = per_round.iter().map(|r| format!("{r:.2}")).collect();
            let round_median = median(per_round);
            let m = median(v);
            println!(
                "| {} | {} | `{}` | {} | {}–{} | {:.2} | {} ({round_median:.2}) |",
                load.clients,
                load.rows,
                key.name(),
                thousands(m),
                thousands(lo),
                thousands(hi),
                m / base_median,
                shown.join(", ")
            );
            if key == Key::Idutil {
                verdicts.push((load, m, m / base_median, round_median));
            }
        }
    }
    println!(
        "\nidutil against the target ({TARGET}× bigserial), within the lead cap (met when \
         both the ratio of the medians and the median of the rounds' ratios reach it):\n"
    );
    for (load, rate, ratio, round_ratio) in verdicts {
        let leads: Vec<String> = runs
            .iter()
            .filter(|(l, k, _)| *l == load && *k == Key::Idutil)
            .filter_map(|(_, _, r)| r.lead.map(|(b, a)| format!("{b}→{a}")))
            .collect();
        let lasts = if rate > PER_SECOND {
            format!(
                "; at this rate the cap is reached after {:.1} s",
                bench.max_lead as f64 * PER_SECOND / (rate - PER_SECOND)
            )
        } else {
            "; below one shard's 65,536 a second, the cap is never reached".into()
        };
        println!(
            "- {} × {} rows: {ratio:.2} ({round_ratio:.2}), {} (lead in s, before→after each \
             run: {}){lasts}",
            load.clients,
            load.rows,
            if ratio.min(round_ratio) >= TARGET {
                "met"
            } else {
                "NOT met"
            },
            leads.join(", ")
        );
    }
    if !sustained.is_empty() {
        println!(
            "\nSustained: runs of {} s, idutil's starting at the lead cap; idutil's rows \
             in each second of its run (pgbench -P 1):\n",
            plan.sustained
        );
        println!(
            "| clients | rows per transaction | bigserial rows/s | idutil rows/s | × bigserial \
             | idutil lead before→after | idutil per second min–median–max |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (load, serial, idutil) in &sustained {
            let (b, a) = idutil.lead.unwrap_or_default();
            let (lo, hi) = range(&idutil.per_second);
            println!(
                "| {} | {} | {} | {} | {:.2} | {b}→{a} s | {}–{}–{} |",
                load.clients,
                load.rows,
                thousands(serial.rows_per_second),
                thousands(idutil.rows_per_second),
                idutil.rows_per_second / serial.rows_per_second,
                thousands(lo),
                thousands(median(idutil.per_second.clone())),
                thousands(hi),
            );
        }
    }
    println!("\nload average at end: {end_load}");
    println!("took {:.0} s", started.elapsed().as_secs_f64());
}
