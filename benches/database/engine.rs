//! SQLite's own cost of each key shape (`--engine`): the benchmark's table
//! and statements, through rusqlite on this thread (no sqlx, no runtime,
//! one connection), so what is left is SQLite's work and the binding.
//!
//! The same file settings as `sqlite.rs` (WAL, `synchronous=NORMAL`, a new
//! file per measurement), 1,000-row `INSERT`s, each its own transaction,
//! for four shapes of key: SQLite numbers the rows (`(body, created)`, two
//! binds a row); SQLite numbers them, but `id` is bound NULL (the given
//! keys' statement, three binds); explicit keys from 1 (1 to 3 bytes);
//! explicit keys with an idutil ID's values (now's first ID on shard
//! `SHARD`, steps of 32: 8 bytes, as idutil's). Once with every row made
//! before the clock starts (SQLite alone), once with the rows made in the
//! loop as the benchmark's clients make theirs (a clock read and a
//! formatted body per row). Rounds rotate the order; medians.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use idutil::Id;
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection};

use crate::{BATCH, ID_STEP, SHARD};

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Auto,
    AutoNull,
    Small,
    IdLike,
}
impl Shape {
    const ALL: [Shape; 4] = [Shape::Auto, Shape::AutoNull, Shape::Small, Shape::IdLike];

    fn name(self) -> &'static str {
        match self {
            Shape::Auto => "INTEGER PRIMARY KEY, `(body, created)`",
            Shape::AutoNull => "INTEGER PRIMARY KEY, `(id, body, created)`, id NULL",
            Shape::Small => "explicit, from 1",
            Shape::IdLike => "explicit, idutil's values (the counter)",
        }
    }
}

/// The values of rows `first..first + n` for `shape`, made now.
fn make(shape: Shape, first: u64, n: usize, id_base: i64) -> Vec<Value> {
    let mut v = Vec::with_capacity(3 * n);
    for row in first..first + n as u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970");
        match shape {
            Shape::Auto => {}
            Shape::AutoNull => v.push(Value::Null),
            Shape::Small => v.push(Value::Integer(row as i64 + 1)),
            Shape::IdLike => v.push(Value::Integer(id_base + ID_STEP * row as i64)),
        }
        v.push(Value::Text(format!("row {row} of the benchmark")));
        v.push(Value::Integer(now.as_micros() as i64));
    }
    v
}

/// Rows per second inserting `rows` rows of `shape` into a new file.
fn measure(work: &Path, shape: Shape, rows: u64, made_before: bool) -> f64 {
    let file = work.join("engine.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.clone().into_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
    let c = Connection::open(&file).expect("open the SQLite file");
    c.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL mode");
    c.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous=NORMAL");
    c.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL, created INTEGER NOT NULL);
         CREATE INDEX t_created ON t (created);",
    )
    .expect("the table");
    let id_base =
        i64::from(Id::min_at(SystemTime::now()).expect("now in the ID range")) + i64::from(SHARD);
    let batches: Vec<(u64, usize)> = (0..rows)
        .step_by(BATCH)
        .map(|first| (first, (rows - first).min(BATCH as u64) as usize))
        .collect();
    let mut made: Vec<Vec<Value>> = if made_before {
        batches
            .iter()
            .map(|&(first, n)| make(shape, first, n, id_base))
            .collect()
    } else {
        Vec::new()
    };
    made.reverse();
    let (columns, row) = match shape {
        Shape::Auto => ("(body, created)", "(?, ?)"),
        _ => ("(id, body, created)", "(?, ?, ?)"),
    };
    let sql = |n: usize| format!("INSERT INTO t {columns} VALUES {}", vec![row; n].join(", "));
    let began = Instant::now();
    for &(first, n) in &batches {
        let values = match made.pop() {
            Some(v) => v,
            None => make(shape, first, n, id_base),
        };
        c.execute_batch("BEGIN").expect("BEGIN");
        c.prepare_cached(&sql(n))
            .and_then(|mut s| s.execute(params_from_iter(values)))
            .expect("insert a batch");
        c.execute_batch("COMMIT").expect("COMMIT");
    }
    let seconds = began.elapsed().as_secs_f64();
    let count: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .expect("count the rows");
    assert_eq!(count as u64, rows, "rows in the table");
    drop(c);
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.clone().into_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
    rows as f64 / seconds
}

/// Measures every shape, `rounds` rounds, and prints a Markdown table.
pub fn run(rows: u64, rounds: usize, work: &Path) {
    let version: String = Connection::open_in_memory()
        .and_then(|c| c.query_row("SELECT sqlite_version()", [], |r| r.get(0)))
        .expect("SQLite's version");
    println!(
        "\nSQLite {version} alone: {rows} rows, {rounds} round(s), load average {}\n",
        crate::load_average()
    );
    println!("| rows made | key | rows/s | ÷ INTEGER PRIMARY KEY |");
    println!("|---|---|---:|---:|");
    for made_before in [true, false] {
        let mut all: Vec<Vec<f64>> = vec![Vec::new(); Shape::ALL.len()];
        for round in 0..rounds {
            for k in 0..Shape::ALL.len() {
                let i = (round + k) % Shape::ALL.len();
                all[i].push(measure(work, Shape::ALL[i], rows, made_before));
            }
        }
        let medians: Vec<f64> = all
            .into_iter()
            .map(|mut v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect();
        for (shape, rate) in Shape::ALL.iter().zip(&medians) {
            println!(
                "| {} | {} | {rate:.0} | {:.2} |",
                if made_before { "before" } else { "in the loop" },
                shape.name(),
                rate / medians[0]
            );
        }
    }
    println!("\nload average at end: {}", crate::load_average());
}
