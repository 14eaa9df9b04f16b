//! What the key does to the database: rows inserted per second, the size
//! of the table and of its primary-key index, the write-ahead log written,
//! and a time-range query, for an idutil ID against `bigserial` (SQLite:
//! `INTEGER PRIMARY KEY`), UUID v7 and UUID v4, in PostgreSQL and SQLite,
//! from one client and from 8 concurrent clients; in SQLite also against
//! the floor for any key the client gives, a plain counter bound as the
//! idutil keys are. Every figure is also given as a ratio to `bigserial`
//! in the same run; the runner prints a Markdown table, saves the results
//! as JSON and draws them as an SVG chart (`benches/database.svg`).
//!
//! The table is what an application would make: `id` (the key), `body` (a
//! short text) and `created` (a timestamp with an index of its own). Rows go
//! in as batched transactions, 1,000 rows per `INSERT` statement, each its
//! own transaction, the keys made by the client (`Generator::next_id`,
//! the counter, `Uuid::now_v7`, `Uuid::new_v4`; `bigserial` by the
//! server). PostgreSQL is
//! a fresh cluster started the way the tests start theirs, but with
//! `fsync` on and the default 128 MB of `shared_buffers`
//! (`Postgres::start_for_benchmark`); SQLite is a file in WAL mode with
//! `synchronous=NORMAL`, a new file per measurement. Between measurements
//! PostgreSQL drops the table and checkpoints, so each starts from the same
//! state. Each setup and row count starts with an untimed warm-up, then
//! runs every key once per round, the order rotating (3 rounds for the
//! first row count, 1 for the larger ones); the figures are the medians
//! over the rounds.
//!
//! The time-range query asks for a tenth of the rows by time: once through
//! the `created` index, and for the idutil table through the primary key
//! (`id BETWEEN Id::min_at(from) AND Id::max_at(to)`), which needs no index
//! of its own. Both counts are checked against what the client inserted.
//!
//! `cargo bench -p idutil-benches --bench database` runs the full plan (1
//! million rows for every database and client count, 10 million for
//! PostgreSQL with one client); `-- --rows 1000000,10000000 --big-setups
//! all` runs 10 million everywhere, `--setups pg-1,sqlite-8` picks setups,
//! `--keys serial,counter,idutil` picks keys (and adds the diagnostic ones,
//! see [`Key`]), `--chart-from FILE` redraws the chart from saved results;
//! `--engine` measures SQLite's own cost of each key shape instead
//! (`engine.rs`). Under `cargo test` it runs a few thousand rows through
//! every setup and the engine measurement as a smoke test, checks the
//! counts, and draws the chart into a temporary directory.

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use idutil::{Generator, Id};
use serde::{Deserialize, Serialize};

mod chart;
mod engine;
mod options;
mod pg;
mod report;
mod rows;
mod sqlite;

use options::{options, Options};
use report::{base_of, check_chart, load_average, medians, print_tables};
use rows::{id_bounds, Batch, Keys, Made, Maker, Source};

/// Rows per `INSERT` (and per transaction).
const BATCH: usize = 1_000;
/// Executions of each query; the median is reported.
const QUERY_RUNS: usize = 5;
const SHARD: u32 = 3;
/// How far apart one shard's consecutive IDs are: one sequence step, above
/// the shard's bits.
const ID_STEP: i64 = 32;

/// The primary key of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Key {
    /// `bigserial` (PostgreSQL) or `INTEGER PRIMARY KEY` without a value
    /// (SQLite): the database numbers the rows.
    Serial,
    /// SQLite only: the floor for a key the client gives. Increasing
    /// integers from a plain counter the clients share (no idutil call),
    /// with the values of one shard's IDs (now's first ID, then steps of
    /// 32), bound as the idutil keys are: the same SQL, binds and types.
    Counter,
    /// An idutil ID in a `BIGINT` (SQLite: `INTEGER PRIMARY KEY`).
    Idutil,
    /// `Uuid::now_v7`, in a `uuid` (SQLite: a 16-byte `BLOB`).
    UuidV7,
    /// `Uuid::new_v4`, likewise.
    UuidV4,
    // Diagnostics, SQLite only, measured when `--keys` names them: what
    // the gap between `Serial` and `Counter` is made of, and what the ID
    // call costs.
    /// `INTEGER PRIMARY KEY` numbered by SQLite, but inserted as the given
    /// keys are: `(id, body, created)`, three binds a row, `id` NULL.
    SerialNull,
    /// The counter from 1 in steps of 1: a key of 1 to 3 bytes where the
    /// counter's and idutil's take 8.
    CounterSmall,
    /// idutil IDs from `next_id()`, all made before the clock starts and
    /// the generator closed, handed out as the counter's are.
    IdutilBefore,
}
impl Key {
    const ALL: [Key; 8] = [
        Key::Serial,
        Key::Counter,
        Key::Idutil,
        Key::UuidV7,
        Key::UuidV4,
        Key::SerialNull,
        Key::CounterSmall,
        Key::IdutilBefore,
    ];
    /// What runs unless `--keys` says otherwise.
    const DEFAULT: [Key; 5] = [
        Key::Serial,
        Key::Counter,
        Key::Idutil,
        Key::UuidV7,
        Key::UuidV4,
    ];

    fn name(self) -> &'static str {
        match self {
            Key::Serial => "bigserial",
            Key::Counter => "counter",
            Key::Idutil => "idutil",
            Key::UuidV7 => "uuid v7",
            Key::UuidV4 => "uuid v4",
            Key::SerialNull => "INTEGER PRIMARY KEY, id NULL",
            Key::CounterSmall => "counter from 1",
            Key::IdutilBefore => "idutil, made before",
        }
    }

    /// `serial`, `counter`, `idutil-before`: the names `--keys` takes.
    fn code(self) -> &'static str {
        match self {
            Key::Serial => "serial",
            Key::Counter => "counter",
            Key::Idutil => "idutil",
            Key::UuidV7 => "uuid-v7",
            Key::UuidV4 => "uuid-v4",
            Key::SerialNull => "serial-null",
            Key::CounterSmall => "counter-small",
            Key::IdutilBefore => "idutil-before",
        }
    }

    fn parse(code: &str) -> Result<Key, String> {
        Key::ALL
            .into_iter()
            .find(|k| k.code() == code)
            .ok_or_else(|| {
                let all: Vec<&str> = Key::ALL.iter().map(|k| k.code()).collect();
                format!("unknown key `{code}` ({})", all.join(", "))
            })
    }

    fn table(self) -> &'static str {
        match self {
            Key::Serial => "keys_serial",
            Key::Counter => "keys_counter",
            Key::Idutil => "keys_idutil",
            Key::UuidV7 => "keys_uuid7",
            Key::UuidV4 => "keys_uuid4",
            Key::SerialNull => "keys_serial_null",
            Key::CounterSmall => "keys_counter_small",
            Key::IdutilBefore => "keys_idutil_before",
        }
    }

    /// Whether `db` can measure this key.
    fn runs_in(self, db: Db) -> bool {
        db == Db::Sqlite || matches!(self, Key::Serial | Key::Idutil | Key::UuidV7 | Key::UuidV4)
    }

    /// Keyed by idutil IDs: the table answers a time range by `id`.
    fn is_idutil(self) -> bool {
        matches!(self, Key::Idutil | Key::IdutilBefore)
    }
}

/// Which database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Db {
    Postgres,
    Sqlite,
}
impl Db {
    fn name(self) -> &'static str {
        match self {
            Db::Postgres => "PostgreSQL",
            Db::Sqlite => "SQLite",
        }
    }

    fn serial_name(self) -> &'static str {
        match self {
            Db::Postgres => "bigserial",
            Db::Sqlite => "INTEGER PRIMARY KEY",
        }
    }
}

/// A database and a number of concurrent clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Setup {
    pub db: Db,
    pub clients: usize,
}
impl Setup {
    const ALL: [Setup; 4] = [
        Setup {
            db: Db::Postgres,
            clients: 1,
        },
        Setup {
            db: Db::Postgres,
            clients: 8,
        },
        Setup {
            db: Db::Sqlite,
            clients: 1,
        },
        Setup {
            db: Db::Sqlite,
            clients: 8,
        },
    ];

    /// `pg-1`, `sqlite-8`: the names the command line takes.
    fn code(self) -> String {
        let db = match self.db {
            Db::Postgres => "pg",
            Db::Sqlite => "sqlite",
        };
        format!("{db}-{}", self.clients)
    }

    fn parse(code: &str) -> Result<Setup, String> {
        Setup::ALL
            .into_iter()
            .find(|s| s.code() == code)
            .ok_or_else(|| format!("unknown setup `{code}` (pg-1, pg-8, sqlite-1, sqlite-8)"))
    }
}

/// A time-range query's result: rows found and the median time.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct QueryTime {
    pub rows: u64,
    pub millis: f64,
}
impl QueryTime {
    fn per_row(&self) -> f64 {
        self.millis / self.rows.max(1) as f64
    }
}

/// One measurement: one key, one setup, one row count.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub setup: Setup,
    pub rows: u64,
    pub key: Key,
    /// Wall time of all the inserts.
    pub seconds: f64,
    /// The table's heap (PostgreSQL `pg_table_size`; SQLite the table's
    /// b-tree, which holds a rowid key too).
    pub table_bytes: u64,
    /// The primary key's own index (0 in SQLite for an `INTEGER PRIMARY
    /// KEY`, which is the table's b-tree key).
    pub pk_bytes: u64,
    /// The `created` index.
    pub created_bytes: u64,
    /// Write-ahead log written by the inserts (PostgreSQL).
    pub wal_bytes: Option<u64>,
    /// The query window, Unix seconds `[from, to)`.
    pub window: (u64, u64),
    pub by_created: QueryTime,
    /// Through the primary key, idutil only.
    pub by_id: Option<QueryTime>,
}
impl Measurement {
    fn rows_per_second(&self) -> f64 {
        self.rows as f64 / self.seconds
    }

    fn total_bytes(&self) -> u64 {
        self.table_bytes + self.pk_bytes + self.created_bytes
    }
}

/// A database the runner can measure in.
trait Database {
    /// Makes the table for `key` (dropping any left over) and makes the
    /// database ready for a measurement.
    async fn prepare(&mut self, key: Key, clients: usize);
    /// Where the write-ahead log is now, in bytes (PostgreSQL).
    async fn wal_position(&mut self) -> Option<u64>;
    /// Inserts one batch through client `client`.
    async fn insert(&self, client: usize, key: Key, batch: Batch);
    /// Table, primary-key index and `created` index sizes, in bytes.
    async fn sizes(&mut self, key: Key) -> (u64, u64, u64);
    /// Rows in the table.
    async fn count(&mut self, key: Key) -> u64;
    /// Makes the table ready to query (statistics).
    async fn analyze(&mut self, key: Key);
    /// Rows with `created` in `[from, to)` (Unix seconds), through the
    /// `created` index.
    async fn query_created(&mut self, key: Key, window: (u64, u64)) -> u64;
    /// Rows with `id` in the bounds, through the primary key.
    async fn query_id(&mut self, key: Key, bounds: (i64, i64)) -> u64;
    /// Drops the table and frees what it used.
    async fn finish(&mut self, key: Key);
}

/// Median time of [`QUERY_RUNS`] executions of `run`, which returns the
/// row count (the same each time).
async fn time_query<D, F>(db: &mut D, mut run: F) -> QueryTime
where
    F: AsyncFnMut(&mut D) -> u64,
{
    let mut times = Vec::new();
    let mut rows = None;
    for _ in 0..QUERY_RUNS {
        let began = Instant::now();
        let n = run(db).await;
        times.push(began.elapsed().as_secs_f64() * 1e3);
        assert!(rows.is_none_or(|r| r == n), "a query's count changed");
        rows = Some(n);
    }
    times.sort_by(f64::total_cmp);
    QueryTime {
        rows: rows.expect("at least one run"),
        millis: times[times.len() / 2],
    }
}

/// Inserts `rows` rows keyed by `key` from `setup.clients` clients, then
/// measures sizes and queries.
async fn measure<D: Database + Sync>(
    db: &mut D,
    setup: Setup,
    rows: u64,
    key: Key,
    state_root: &Path,
) -> Measurement {
    db.prepare(key, setup.clients).await;
    // A fresh generator in a fresh state directory, as a new service
    // starts; shared by the clients, as one process's threads share one.
    let state = tempfile::Builder::new()
        .prefix("idutil-db-bench")
        .tempdir_in(state_root)
        .expect("a state directory");
    let open = || {
        Generator::builder()
            .shard(SHARD)
            .state_dir(state.path())
            .open()
            .expect("open a generator")
    };
    let mut made = Made::default();
    let mut generator = None;
    let source = match key {
        Key::Idutil => {
            let g = Arc::new(open());
            generator = Some(g.clone());
            Source::Generator(g)
        }
        Key::Counter => {
            let now = Id::min_at(SystemTime::now()).expect("now in the ID range");
            let first = i64::from(now) + i64::from(SHARD);
            Source::Counter(Arc::new(AtomicI64::new(first)), ID_STEP)
        }
        Key::CounterSmall => Source::Counter(Arc::new(AtomicI64::new(1)), 1),
        Key::IdutilBefore => {
            let g = open();
            let ids: Vec<Id> = (0..rows).map(|_| g.next_id().expect("an ID")).collect();
            g.close().expect("close the generator");
            made.count_ids(&ids);
            let ids: Arc<[i64]> = ids.into_iter().map(i64::from).collect();
            Source::Made(ids, Arc::new(AtomicUsize::new(0)))
        }
        Key::Serial | Key::SerialNull | Key::UuidV7 | Key::UuidV4 => Source::None,
    };
    let wal_before = db.wal_position().await;
    let clients = setup.clients as u64;
    let began = Instant::now();
    let made = {
        let db = &*db;
        let work = (0..clients).map(|c| {
            let share = rows / clients + u64::from(c < rows % clients);
            let first_row = c * (rows / clients) + c.min(rows % clients);
            let mut maker = Maker::new(key, source.clone(), first_row);
            async move {
                let mut left = share;
                while left > 0 {
                    let n = left.min(BATCH as u64) as usize;
                    let batch = maker.batch(n);
                    db.insert(c as usize, key, batch).await;
                    left -= n as u64;
                }
                maker.made
            }
        });
        for m in futures_util::future::join_all(work).await {
            made.merge(m);
        }
        made
    };
    let seconds = began.elapsed().as_secs_f64();
    let wal_after = db.wal_position().await;
    drop(source);
    if let Some(g) = generator {
        Arc::try_unwrap(g)
            .map_err(|_| "the clients are done")
            .unwrap()
            .close()
            .expect("close the generator");
    }

    let count = db.count(key).await;
    assert_eq!(count, rows, "{key:?}: rows in the table");
    let (table_bytes, pk_bytes, created_bytes) = db.sizes(key).await;
    db.analyze(key).await;
    let window = made.window();
    let by_created = time_query(db, async |db: &mut D| db.query_created(key, window).await).await;
    assert_eq!(
        by_created.rows,
        Made::count(&made.created, window),
        "{key:?}: rows created in {window:?}"
    );
    let by_id = if key.is_idutil() {
        let bounds = id_bounds(window);
        let t = time_query(db, async |db: &mut D| db.query_id(key, bounds).await).await;
        assert_eq!(
            t.rows,
            Made::count(&made.id_seconds, window),
            "rows whose ID is in {window:?}"
        );
        Some(t)
    } else {
        None
    };
    db.finish(key).await;
    Measurement {
        setup,
        rows,
        key,
        seconds,
        table_bytes,
        pk_bytes,
        created_bytes,
        wal_bytes: wal_before.zip(wal_after).map(|(b, a)| a - b),
        window,
        by_created,
        by_id,
    }
}

fn main() {
    let mut o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("database bench: {e}");
            std::process::exit(2);
        }
    };
    let work = tempfile::Builder::new()
        .prefix("idutil-db-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a working directory");
    if o.smoke {
        o.results = work.path().join("results.json");
        o.chart = work.path().join("database.svg");
        engine::run(o.rows[0], 1, work.path());
    } else if o.engine {
        engine::run(o.rows[0], o.rounds, work.path());
        return;
    }
    let results = match &o.chart_from {
        Some(path) => {
            let saved = std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()));
            match saved {
                Ok(results) => results,
                Err(e) => {
                    eprintln!("database bench: --chart-from {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        }
        None => run(&o, work.path()),
    };
    let results = medians(&results);
    print_tables(&results);
    chart::draw(&results, &o.chart).expect("draw the chart");
    println!("chart: {}", o.chart.display());
    if o.smoke {
        check_chart(&o.chart, &results);
    }
}

/// Every measurement of the plan, saved to `o.results` after each one.
fn run(o: &Options, work: &Path) -> Vec<Measurement> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut results: Vec<Measurement> = Vec::new();
    println!("load average at start: {}", load_average());
    let save = |results: &Vec<Measurement>| {
        let text = serde_json::to_string_pretty(results).expect("results as JSON");
        std::fs::write(&o.results, text).expect("save the results");
    };
    for (i, &rows) in o.rows.iter().enumerate() {
        // Fewer rounds for the long runs: their figures move less.
        let rounds = if i == 0 { o.rounds } else { 1 };
        let setups: Vec<Setup> = o
            .setups
            .iter()
            .copied()
            .filter(|s| i == 0 || o.big_setups.contains(s))
            .collect();
        for setup in setups {
            let done = runtime.block_on(async {
                match setup.db {
                    Db::Postgres => {
                        let Some(mut db) = pg::Pg::start(setup.clients).await else {
                            return Vec::new();
                        };
                        measure_all(&mut db, setup, rows, rounds, &o.keys, work).await
                    }
                    Db::Sqlite => {
                        let mut db = sqlite::Lite::new(work, setup.clients);
                        measure_all(&mut db, setup, rows, rounds, &o.keys, work).await
                    }
                }
            });
            results.extend(done);
            save(&results);
        }
    }
    println!("load average at end: {}", load_average());
    println!("results: {}", o.results.display());
    results
}

/// Every key of `keys` the setup's database runs, for one setup and row
/// count: an untimed warm-up (a tenth of
/// the rows, at most 200,000, with the serial key: the server's caches and
/// the disk's first writes), then `rounds` rounds, each key once per round,
/// the order rotating so that each key goes first in turn.
async fn measure_all<D: Database + Sync>(
    db: &mut D,
    setup: Setup,
    rows: u64,
    rounds: usize,
    keys: &[Key],
    work: &Path,
) -> Vec<Measurement> {
    let keys: Vec<Key> = keys
        .iter()
        .copied()
        .filter(|k| k.runs_in(setup.db))
        .collect();
    measure(db, setup, (rows / 10).clamp(1, 200_000), Key::Serial, work).await;
    let mut out = Vec::new();
    for round in 0..rounds {
        for k in 0..keys.len() {
            let key = keys[(round + k) % keys.len()];
            let m = measure(db, setup, rows, key, work).await;
            eprintln!(
                "{} × {}, {rows} rows, round {}, {}: {:.0} rows/s",
                setup.db.name(),
                setup.clients,
                round + 1,
                key.name(),
                m.rows_per_second()
            );
            out.push(m);
        }
    }
    out
}
