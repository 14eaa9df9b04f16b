//! A lease row as read: the acquiring statement's row ([`Granted`]), and
//! its record columns read as strictly as Redis's fields.

use super::conn::{number, Failure};
use idutil_lease::record::RawRecord;

/// A row's record columns as the strict reader takes them: `Ok(None)` for
/// a shard never used (`high_water` NULL and nothing else set), `Err` for
/// columns that cannot go together. The engine and `inspect` both read rows
/// through it, so they never disagree on what is valid.
pub(super) fn raw_record(
    high_water: Option<i64>,
    last: (Option<i64>, Option<i64>),
    seen: Option<i64>,
    layout: String,
) -> Result<Option<RawRecord>, (&'static str, &'static str)> {
    if high_water.is_none() {
        if last != (None, None) || seen.is_some() {
            return Err((
                "high_water",
                "is NULL while last_second, last_sequence or seen is set",
            ));
        }
        return Ok(None);
    }
    let last = match last {
        (Some(sec), Some(seq)) => Some(format!("{sec} {seq}")),
        (None, None) => None,
        _ => return Err(("last", "has only one of last_second and last_sequence")),
    };
    Ok(Some(RawRecord {
        high_water: high_water.map(|v| v.to_string()),
        last,
        seen: seen.map(|v| v.to_string()),
        layout: Some(layout),
    }))
}

/// The row the acquiring statement returned, its columns read.
pub(super) struct Granted {
    pub(super) shard: i64,
    pub(super) epoch: i64,
    pub(super) high_water: Option<i64>,
    pub(super) last: (Option<i64>, Option<i64>),
    pub(super) seen: Option<i64>,
    pub(super) layout: String,
    pub(super) server: Option<f64>,
}

impl Granted {
    pub(super) fn read(row: &[Option<String>]) -> std::result::Result<Granted, Failure> {
        let cell = |i: usize| row.get(i).cloned().flatten();
        let required = |v: Option<i64>, what: &str| {
            v.ok_or_else(|| Failure::Answer(format!("{what} is NULL")))
        };
        Ok(Granted {
            shard: required(number(&cell(0), "shard")?, "shard")?,
            epoch: required(number(&cell(1), "epoch")?, "epoch")?,
            high_water: number(&cell(2), "high_water")?,
            last: (
                number(&cell(3), "last_second")?,
                number(&cell(4), "last_sequence")?,
            ),
            seen: number(&cell(5), "seen")?,
            layout: cell(6).unwrap_or_default(),
            server: number(&cell(7), "the server's clock")?,
        })
    }
}
