//! The runner's command line: row counts, setups, keys, rounds, where results and the chart go.

use std::path::{Path, PathBuf};

use crate::{Key, Setup};

pub struct Options {
    pub smoke: bool,
    pub rows: Vec<u64>,
    pub setups: Vec<Setup>,
    /// Keys to measure, in this order (each setup runs those its
    /// database can).
    pub keys: Vec<Key>,
    /// Setups that run the row counts after the first.
    pub big_setups: Vec<Setup>,
    pub results: PathBuf,
    pub chart: PathBuf,
    pub chart_from: Option<PathBuf>,
    /// Rounds for the first row count.
    pub rounds: usize,
    /// SQLite's own cost of each key shape (`engine.rs`), for the first
    /// row count, instead of the plan.
    pub engine: bool,
}

pub fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench");
    let mut o = Options {
        smoke,
        rows: if smoke {
            vec![3_000]
        } else {
            vec![1_000_000, 10_000_000]
        },
        setups: Setup::ALL.to_vec(),
        keys: Key::DEFAULT.to_vec(),
        big_setups: vec![Setup::ALL[0]],
        results: Path::new(env!("CARGO_TARGET_TMPDIR")).join("database-bench.json"),
        chart: Path::new(env!("CARGO_MANIFEST_DIR")).join("database.svg"),
        chart_from: None,
        rounds: if smoke { 2 } else { 3 },
        engine: false,
    };
    let setups = |v: &str| -> Result<Vec<Setup>, String> {
        if v == "all" {
            return Ok(Setup::ALL.to_vec());
        }
        v.split(',').map(Setup::parse).collect()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--bench" => {}
            "--rows" => {
                o.rows = value()?
                    .split(',')
                    .map(|n| {
                        n.replace('_', "")
                            .parse()
                            .map_err(|e| format!("--rows {n}: {e}"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--setups" => o.setups = setups(value()?)?,
            "--keys" => {
                o.keys = value()?
                    .split(',')
                    .map(Key::parse)
                    .collect::<Result<_, _>>()?
            }
            "--engine" => o.engine = true,
            "--big-setups" => o.big_setups = setups(value()?)?,
            "--results" => o.results = value()?.into(),
            "--chart" => o.chart = value()?.into(),
            "--chart-from" => o.chart_from = Some(value()?.into()),
            "--rounds" => o.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if o.rounds == 0 {
        return Err("--rounds needs at least 1".into());
    }
    if o.rows.is_empty() || o.rows.contains(&0) {
        return Err("--rows needs counts above 0".into());
    }
    if !o.keys.contains(&Key::Serial) {
        // The ratios are to it.
        o.keys.insert(0, Key::Serial);
    }
    Ok(o)
}
