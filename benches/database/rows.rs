//! The rows the clients make, and what they made, to check the queries' counts against.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idutil::{Generator, Id};

use crate::Key;

/// What the clients made: the count of rows per Unix second of their
/// `created` value, and of their ID's second (idutil), to check the
/// queries' counts against.
#[derive(Default)]
pub struct Made {
    pub created: BTreeMap<u64, u64>,
    pub id_seconds: BTreeMap<u64, u64>,
}
impl Made {
    pub fn merge(&mut self, other: Made) {
        for (s, n) in other.created {
            *self.created.entry(s).or_default() += n;
        }
        for (s, n) in other.id_seconds {
            *self.id_seconds.entry(s).or_default() += n;
        }
    }

    /// The middle tenth of the run, in whole seconds, at least one.
    pub fn window(&self) -> (u64, u64) {
        let first = *self.created.keys().next().expect("rows were made");
        let last = *self.created.keys().next_back().expect("rows were made");
        let span = last - first;
        let from = first + span * 45 / 100;
        let to = (first + span * 55 / 100).max(from + 1);
        (from, to)
    }

    pub fn count(map: &BTreeMap<u64, u64>, (from, to): (u64, u64)) -> u64 {
        map.range(from..to).map(|(_, n)| n).sum()
    }

    /// Counts IDs by their second, one map entry per run of IDs in the
    /// same second (the check's bookkeeping, not the key's cost, so as
    /// little of it as can be in the timed loop).
    pub fn count_ids(&mut self, ids: &[Id]) {
        let mut run: Option<(u64, u64)> = None;
        for id in ids {
            let second = id.unix_seconds();
            match &mut run {
                Some((s, n)) if *s == second => *n += 1,
                _ => {
                    if let Some((s, n)) = run.replace((second, 1)) {
                        *self.id_seconds.entry(s).or_default() += n;
                    }
                }
            }
        }
        if let Some((s, n)) = run {
            *self.id_seconds.entry(s).or_default() += n;
        }
    }
}

/// The keys of one batch, made by the client (none for `Serial`).
pub enum Keys {
    Serial,
    /// `id` given as NULL: the database numbers the rows.
    Null,
    /// Integer keys: idutil's, or a counter's.
    Int(Vec<i64>),
    Uuid(Vec<uuid::Uuid>),
}

/// Where the clients' integer keys come from.
#[derive(Clone)]
pub enum Source {
    /// No integer keys: the database numbers the rows, or UUIDs.
    None,
    /// `Generator::next_id()` per row, from one generator the clients share.
    Generator(Arc<Generator>),
    /// A counter the clients share: the next key, and the step.
    Counter(Arc<AtomicI64>, i64),
    /// Keys made before the clock started, handed out in order.
    Made(Arc<[i64]>, Arc<AtomicUsize>),
}

/// One batch of rows as the client makes them.
pub struct Batch {
    pub keys: Keys,
    pub bodies: Vec<String>,
    /// Microseconds since the Unix epoch.
    pub created: Vec<i64>,
}

/// Makes batches for one client, and counts what it made.
pub struct Maker {
    key: Key,
    source: Source,
    pub made: Made,
    next_row: u64,
}
impl Maker {
    pub fn new(key: Key, source: Source, first_row: u64) -> Maker {
        Maker {
            key,
            source,
            made: Made::default(),
            next_row: first_row,
        }
    }

    /// `n` rows, made as an application makes them: the key and the time
    /// per row. A counter's or premade keys are taken a batch at a time: a
    /// batch is made without a pause, so its idutil IDs are a run of
    /// consecutive IDs too (the clients take turns between batches).
    pub fn batch(&mut self, n: usize) -> Batch {
        let mut bodies = Vec::with_capacity(n);
        let mut created = Vec::with_capacity(n);
        let mut keys = match (self.key, &self.source) {
            (Key::Serial, _) => Keys::Serial,
            (Key::SerialNull, _) => Keys::Null,
            (Key::UuidV7 | Key::UuidV4, _) => Keys::Uuid(Vec::with_capacity(n)),
            (_, Source::Counter(next, step)) => {
                let first = next.fetch_add(step * n as i64, Ordering::Relaxed);
                Keys::Int((0..n as i64).map(|i| first + step * i).collect())
            }
            (_, Source::Made(ids, next)) => {
                let at = next.fetch_add(n, Ordering::Relaxed);
                Keys::Int(ids[at..at + n].to_vec())
            }
            (_, Source::Generator(_)) => Keys::Int(Vec::with_capacity(n)),
            (key, Source::None) => panic!("no source of keys for {key:?}"),
        };
        let mut ids = Vec::new();
        for _ in 0..n {
            match (&mut keys, &self.source) {
                (Keys::Int(_), Source::Generator(g)) => ids.push(g.next_id().expect("an ID")),
                (Keys::Uuid(ids), _) => ids.push(match self.key {
                    Key::UuidV7 => uuid::Uuid::now_v7(),
                    _ => uuid::Uuid::new_v4(),
                }),
                _ => {}
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("a clock after 1970");
            *self.made.created.entry(now.as_secs()).or_default() += 1;
            created.push(now.as_micros() as i64);
            bodies.push(format!("row {} of the benchmark", self.next_row));
            self.next_row += 1;
        }
        if let Keys::Int(keys) = &mut keys {
            if !ids.is_empty() {
                self.made.count_ids(&ids);
                keys.extend(ids.into_iter().map(i64::from));
            }
        }
        Batch {
            keys,
            bodies,
            created,
        }
    }
}

/// The idutil bounds of a window `[from, to)` of Unix seconds.
pub fn id_bounds((from, to): (u64, u64)) -> (i64, i64) {
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    (
        Id::min_at(at(from)).expect("a time in the ID range").into(),
        Id::max_at(at(to - 1))
            .expect("a time in the ID range")
            .into(),
    )
}
