//! Every shard's lease and record as Redis holds them, for display.

use std::time::Duration;

use super::conn::{client, connection};
use super::{key, ENGINE};
use crate::layout::Layout;
use idutil_lease::record::RawRecord;
use idutil_lease::LeaseResult as Result;
use idutil_lease::{LeaseConfig, LeaseError, ShardLease};

/// Reads every shard's lease and record from Redis, for display.
pub(crate) fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    let range = config.range(layout, None)?;
    let client = client(config)?;
    let fail = |e| LeaseError::store(ENGINE, "read the leases from", config.get_url(), e);
    let mut conn =
        connection(&client, config.op_timeout().max(Duration::from_secs(2))).map_err(fail)?;
    let mut out = Vec::new();
    for shard in range {
        let (holder, pttl, kind): (Option<String>, i64, String) = ::redis::pipe()
            .get(key(config, "lease", shard))
            .pttl(key(config, "lease", shard))
            .cmd("TYPE")
            .arg(key(config, "mark", shard))
            .query(&mut conn)
            .map_err(fail)?;
        let mut row = ShardLease::empty(shard);
        row.holder = holder;
        row.expires_in = u64::try_from(pttl).ok().map(Duration::from_millis);
        match kind.as_str() {
            "none" => {}
            "hash" => {
                let (high_water, last, seen, recorded) = ::redis::cmd("HMGET")
                    .arg(key(config, "mark", shard))
                    .arg(&["high_water", "last", "seen", "layout"])
                    .query(&mut conn)
                    .map_err(fail)?;
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                row.show_record(&raw, layout);
            }
            other => row
                .invalid
                .push(format!("the key holds a {other}, not a hash")),
        }
        out.push(row);
    }
    Ok(out)
}
