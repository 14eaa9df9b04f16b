//! Every shard's lease and record as Redis holds them, for display.

use std::time::Duration;

use super::record::{read_record, RawRecord};
use super::{connect, LeaseConfig, LeaseError};
use crate::error::{Error, Result};
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
    /// The exact last ID's second and sequence, after a clean close.
    pub last: Option<(u64, u32)>,
    /// The highest wall-clock second a holder saw.
    pub seen: Option<u64>,
    /// The layout fingerprint recorded with the shard.
    pub layout: Option<String>,
    /// Why the record cannot be trusted, field by field (`"high_water =
    /// \"1795999999.0\" is not a whole number ..."`); empty when it can, or
    /// when there is no record. A generator refuses such a shard.
    pub invalid: Vec<String>,
}

/// Reads every shard's lease and record from Redis, for display.
///
/// # Errors
///
/// [`Error::Lease`] if Redis cannot be reached or the settings are invalid.
pub fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    let range = config.range(layout, None)?;
    let client = config.client()?;
    let fail = |e| Error::from(LeaseError::redis("read the leases from", &config.url, e));
    let mut conn =
        connect(&client, config.op_timeout().max(Duration::from_secs(2))).map_err(fail)?;
    let mut out = Vec::new();
    for shard in range {
        let (holder, pttl, kind): (Option<String>, i64, String) = redis::pipe()
            .get(config.lease_key(shard))
            .pttl(config.lease_key(shard))
            .cmd("TYPE")
            .arg(config.mark_key(shard))
            .query(&mut conn)
            .map_err(fail)?;
        let mut row = ShardLease {
            shard,
            holder,
            expires_in: u64::try_from(pttl).ok().map(Duration::from_millis),
            high_water: None,
            last: None,
            seen: None,
            layout: None,
            invalid: Vec::new(),
        };
        match kind.as_str() {
            "none" => {}
            "hash" => {
                let (high_water, last, seen, recorded) = redis::cmd("HMGET")
                    .arg(config.mark_key(shard))
                    .arg(&["high_water", "last", "seen", "layout"])
                    .query(&mut conn)
                    .map_err(fail)?;
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                let (record, problems) = read_record(&raw, layout);
                row.high_water = record.high_water;
                row.last = record.last;
                row.seen = record.seen;
                row.layout = raw.layout;
                row.invalid = problems
                    .into_iter()
                    .map(|(field, reason)| format!("{field} {reason}"))
                    .collect();
            }
            other => row
                .invalid
                .push(format!("the key holds a {other}, not a hash")),
        }
        out.push(row);
    }
    Ok(out)
}
