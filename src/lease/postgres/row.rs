//! A row's record columns, read as strictly as Redis's fields.

use super::{Granted, PgLease, EPOCH_MAX};
use crate::layout::Layout;
use crate::lease::record::{read_record, RawRecord, Record};
use crate::lease::{Engine, LeaseError};

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

impl PgLease {
    /// The granted row's record, read strictly.
    pub(super) fn read(&self, row: Granted, layout: &Layout) -> Result<Record, LeaseError> {
        let Granted {
            high_water,
            last,
            seen,
            layout: recorded,
            ..
        } = row;
        let invalid = |field, reason: &str| {
            LeaseError::invalid_record(self.shard, self.describe(), field, reason)
        };
        if self.epoch == EPOCH_MAX {
            return Err(invalid(
                "epoch",
                "is the largest bigint, which no acquisition can raise, so holders could not \
                 be told apart (set it to 0 while no generator holds the shard)",
            ));
        }
        if recorded != self.layout {
            return Err(LeaseError::layout_mismatch(
                self.shard,
                &self.config.prefix,
                recorded,
                &self.layout,
            ));
        }
        let Some(raw) = raw_record(high_water, last, seen, recorded)
            .map_err(|(field, reason)| invalid(field, reason))?
        else {
            return Ok(Record::default());
        };
        let (record, problems) = read_record(&raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(invalid(field, &reason)),
            None => Ok(record),
        }
    }
}
