//! The figures: medians over the rounds, the tables with ratios to `bigserial`, the chart's check.

use std::path::Path;

use crate::{Db, Key, Measurement, QueryTime, Setup};

/// One measurement per key, setup and row count: the median of each figure
/// over the rounds (rows per second as the median round's time).
pub fn medians(results: &[Measurement]) -> Vec<Measurement> {
    let mut cases: Vec<(Setup, u64, Key)> =
        results.iter().map(|m| (m.setup, m.rows, m.key)).collect();
    cases.sort();
    cases.dedup();
    cases
        .into_iter()
        .map(|(setup, rows, key)| {
            let all: Vec<&Measurement> = results
                .iter()
                .filter(|m| m.setup == setup && m.rows == rows && m.key == key)
                .collect();
            fn mid<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
                v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
                v[v.len() / 2]
            }
            // The rounds' windows hold different numbers of rows: the
            // round with the median time per row found.
            let query = |mut q: Vec<QueryTime>| {
                q.sort_by(|a, b| a.per_row().total_cmp(&b.per_row()));
                q[q.len() / 2]
            };
            let by_id: Vec<QueryTime> = all.iter().filter_map(|m| m.by_id).collect();
            Measurement {
                setup,
                rows,
                key,
                seconds: mid(all.iter().map(|m| m.seconds).collect()),
                table_bytes: mid(all.iter().map(|m| m.table_bytes).collect()),
                pk_bytes: mid(all.iter().map(|m| m.pk_bytes).collect()),
                created_bytes: mid(all.iter().map(|m| m.created_bytes).collect()),
                wal_bytes: all
                    .iter()
                    .map(|m| m.wal_bytes)
                    .collect::<Option<Vec<u64>>>()
                    .map(mid),
                window: all[0].window,
                by_created: query(all.iter().map(|m| m.by_created).collect()),
                by_id: (!by_id.is_empty()).then(|| query(by_id)),
            }
        })
        .collect()
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1_048_576.0)
}

/// `value / base`, or a dash when there is no base.
fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}", value / base)
    } else {
        "–".into()
    }
}

/// The serial-key measurement of the same setup and row count.
pub fn base_of<'a>(results: &'a [Measurement], m: &Measurement) -> Option<&'a Measurement> {
    results
        .iter()
        .find(|b| b.key == Key::Serial && b.setup == m.setup && b.rows == m.rows)
}

/// A Markdown table per setup and row count, ratios to the serial key.
pub fn print_tables(results: &[Measurement]) {
    let mut cases: Vec<(Setup, u64)> = results.iter().map(|m| (m.setup, m.rows)).collect();
    cases.dedup();
    for (setup, rows) in cases {
        let db = setup.db;
        println!(
            "\n{}, {} client{}, {rows} rows (ratios: ÷ {})\n",
            db.name(),
            setup.clients,
            if setup.clients == 1 { "" } else { "s" },
            db.serial_name()
        );
        println!(
            "| key | rows/s | ratio | table MB | ratio | PK index MB | ratio | all MB | ratio | WAL MB | ratio | by `created` | by `id` | by `created`, per 100k rows | by `id`, per 100k rows |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for m in results
            .iter()
            .filter(|m| m.setup == setup && m.rows == rows)
        {
            let Some(b) = base_of(results, m) else {
                continue;
            };
            let wal = |m: &Measurement| m.wal_bytes.map(|w| w as f64).unwrap_or(0.0);
            let key = match (m.key, db) {
                (Key::Serial, _) => db.serial_name().to_string(),
                (k, _) => k.name().to_string(),
            };
            println!(
                "| {key} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} ms ({} rows) | {} | {:.1} ms | {} |",
                m.rows_per_second(),
                ratio(m.rows_per_second(), b.rows_per_second()),
                mb(m.table_bytes),
                ratio(m.table_bytes as f64, b.table_bytes as f64),
                mb(m.pk_bytes),
                ratio(m.pk_bytes as f64, b.pk_bytes as f64),
                mb(m.total_bytes()),
                ratio(m.total_bytes() as f64, b.total_bytes() as f64),
                m.wal_bytes.map(mb).unwrap_or_else(|| "–".into()),
                ratio(wal(m), wal(b)),
                m.by_created.millis,
                m.by_created.rows,
                m.by_id
                    .map(|q| format!("{:.1} ms ({} rows)", q.millis, q.rows))
                    .unwrap_or_else(|| "–".into()),
                m.by_created.per_row() * 1e5,
                m.by_id
                    .map(|q| format!("{:.1} ms", q.per_row() * 1e5))
                    .unwrap_or_else(|| "–".into()),
            );
        }
    }
}

/// The smoke run's check of the chart: an SVG that names every key.
pub fn check_chart(path: &Path, results: &[Measurement]) {
    let svg = std::fs::read_to_string(path).expect("read the chart");
    assert!(svg.starts_with("<svg"), "the chart is not an SVG");
    for key in Key::ALL {
        if results.iter().any(|m| m.key == key) {
            assert!(svg.contains(key.name()), "the chart does not name {key:?}");
        }
    }
    let setups: Vec<Setup> = results.iter().map(|m| m.setup).collect();
    assert!(
        setups.iter().any(|s| s.db == Db::Sqlite),
        "the smoke run measured no SQLite setup"
    );
}
