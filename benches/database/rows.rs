//! The rows the clients make, and what they made, to check the queries' counts against.

use std::collections::BTreeMap;
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
}

/// The keys of one batch, made by the client (none for `Serial`).
pub enum Keys {
    Serial,
    Idutil(Vec<i64>),
    Uuid(Vec<uuid::Uuid>),
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
    generator: Option<Arc<Generator>>,
    pub made: Made,
    next_row: u64,
}
impl Maker {
    pub fn new(key: Key, generator: Option<Arc<Generator>>, first_row: u64) -> Maker {
        Maker {
            key,
            generator,
            made: Made::default(),
            next_row: first_row,
        }
    }

    /// `n` rows, made as an application makes them: the key and the time
    /// per row.
    pub fn batch(&mut self, n: usize) -> Batch {
        let mut bodies = Vec::with_capacity(n);
        let mut created = Vec::with_capacity(n);
        let mut keys = match self.key {
            Key::Serial => Keys::Serial,
            Key::Idutil => Keys::Idutil(Vec::with_capacity(n)),
            Key::UuidV7 | Key::UuidV4 => Keys::Uuid(Vec::with_capacity(n)),
        };
        for _ in 0..n {
            match &mut keys {
                Keys::Serial => {}
                Keys::Idutil(ids) => {
                    let id = self
                        .generator
                        .as_ref()
                        .expect("a generator for idutil keys")
                        .next_id()
                        .expect("an ID");
                    *self.made.id_seconds.entry(id.unix_seconds()).or_default() += 1;
                    ids.push(id.into());
                }
                Keys::Uuid(ids) => ids.push(match self.key {
                    Key::UuidV7 => uuid::Uuid::now_v7(),
                    _ => uuid::Uuid::new_v4(),
                }),
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("a clock after 1970");
            *self.made.created.entry(now.as_secs()).or_default() += 1;
            created.push(now.as_micros() as i64);
            bodies.push(format!("row {} of the benchmark", self.next_row));
            self.next_row += 1;
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
