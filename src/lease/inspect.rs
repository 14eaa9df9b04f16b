//! Every shard's lease and record as the store holds them, for display.

use std::time::Duration;

use super::config::Kind;
use super::record::{read_record, RawRecord};
use super::LeaseConfig;
use crate::error::Result;
use crate::layout::Layout;

/// One shard's lease and record, as [`inspect`] finds them. A field that is
/// not valid is `None` here and named in [`invalid`](ShardLease::invalid).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardLease {
    /// The shard.
    pub shard: u32,
    /// The holder's token (`host:pid:nanos:n`), if the shard is leased.
    pub holder: Option<String>,
    /// Time left before the lease expires unless renewed.
    pub expires_in: Option<Duration>,
    /// No ID on the shard has a later second (Unix seconds).
    pub high_water: Option<u64>,
    /// The exact last ID's second (Unix seconds) and sequence, after a
    /// clean close.
    pub last: Option<(u64, u32)>,
    /// The highest wall-clock second a holder saw (Unix seconds).
    pub seen: Option<u64>,
    /// The layout fingerprint recorded with the shard.
    pub layout: Option<String>,
    /// The fencing epoch: how many times the shard was leased
    /// (PostgreSQL; Redis has none).
    pub epoch: Option<u64>,
    /// Why the record cannot be trusted, field by field (`"high_water =
    /// \"1795999999.0\" is not a whole number ..."`); empty when it can, or
    /// when there is no record. A generator refuses such a shard.
    pub invalid: Vec<String>,
}

impl ShardLease {
    /// A shard with no lease and no record found yet.
    pub(crate) fn empty(shard: u32) -> ShardLease {
        ShardLease {
            shard,
            holder: None,
            expires_in: None,
            high_water: None,
            last: None,
            seen: None,
            layout: None,
            epoch: None,
            invalid: Vec::new(),
        }
    }

    /// Fills the record's fields from `raw`, read as a generator reads it:
    /// a field that does not pass is left `None` and named in `invalid`.
    pub(crate) fn show_record(&mut self, raw: &RawRecord, layout: &Layout) {
        let (record, problems) = read_record(raw, layout);
        self.high_water = record.high_water;
        self.last = record.last;
        self.seen = record.seen;
        self.layout.clone_from(&raw.layout);
        self.invalid.extend(
            problems
                .into_iter()
                .map(|(field, reason)| format!("{field} {reason}")),
        );
    }
}

/// Reads every shard's lease and record from the store, for display.
///
/// # Errors
///
/// [`Error::Lease`](crate::Error::Lease) if the store cannot be reached or
/// the settings are invalid.
pub fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    config.range(layout, None)?;
    match config.kind()? {
        #[cfg(feature = "redis")]
        Kind::Redis => super::redis::inspect(config, layout),
        #[cfg(feature = "postgres-lease")]
        Kind::Postgres => super::postgres::inspect(config, layout),
    }
}
