//! Every shard's lease and record as PostgreSQL holds them, for display.

use std::time::Duration;

use super::conn::{off_runtime, Conn, Target};
use super::{table, ENGINE, UNDEFINED_TABLE};
use crate::error::Result;
use crate::layout::Layout;
use crate::lease::record::{read_record, RawRecord};
use crate::lease::{LeaseConfig, LeaseError, ShardLease};

/// Reads the rows of every shard of the range, for display. A shard
/// without a row (or a database without the table) shows as never used.
pub(crate) fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    off_runtime(|| inspect_here(config, layout))
}

fn inspect_here(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    let range = config.range(layout, None)?;
    let target = Target::parse(config)?;
    let mut conn = Conn::new()
        .map_err(|e| LeaseError::store(ENGINE, "start a connection to", &config.url, e))?;
    let sql = format!(
        "SELECT shard, holder, \
             CASE WHEN expires_at > clock_timestamp() \
                  THEN extract(epoch FROM expires_at - clock_timestamp())::float8 END, \
             high_water, last_second, last_sequence, seen, layout, epoch \
         FROM {} WHERE space = $1 AND shard BETWEEN $2::bigint AND $3::bigint ORDER BY shard",
        table(config)
    );
    let (first, last) = (i64::from(*range.start()), i64::from(*range.end()));
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    let rows = match conn.run(&target, timeout, async |c| {
        c.query(&sql, &[&config.prefix, &first, &last]).await
    }) {
        Ok(rows) => rows,
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => Vec::new(),
        Err(f) => return Err(f.into_error("read the leases from", config).into()),
    };
    let start = *range.start();
    let mut out: Vec<ShardLease> = range
        .map(|shard| ShardLease {
            shard,
            holder: None,
            expires_in: None,
            high_water: None,
            last: None,
            seen: None,
            layout: None,
            epoch: None,
            invalid: Vec::new(),
        })
        .collect();
    for row in rows {
        let index = u32::try_from(row.get::<_, i64>(0))
            .ok()
            .and_then(|s| s.checked_sub(start));
        let Some(entry) = index.and_then(|i| out.get_mut(i as usize)) else {
            continue;
        };
        let left: Option<f64> = row.get(2);
        entry.holder = row.get(1);
        entry.expires_in = left
            .filter(|s| s.is_finite() && *s > 0.0 && entry.holder.is_some())
            .map(Duration::from_secs_f64);
        entry.epoch = u64::try_from(row.get::<_, i64>(8)).ok();
        let recorded: String = row.get(7);
        entry.layout = Some(recorded.clone());
        let high_water: Option<i64> = row.get(3);
        if high_water.is_none() {
            continue;
        }
        let last = match (row.get::<_, Option<i64>>(4), row.get::<_, Option<i64>>(5)) {
            (Some(sec), Some(seq)) => Some(format!("{sec} {seq}")),
            _ => None,
        };
        let raw = RawRecord {
            high_water: high_water.map(|v| v.to_string()),
            last,
            seen: row.get::<_, Option<i64>>(6).map(|v| v.to_string()),
            layout: Some(recorded),
        };
        let (record, problems) = read_record(&raw, layout);
        entry.high_water = record.high_water;
        entry.last = record.last;
        entry.seen = record.seen;
        entry.invalid = problems
            .into_iter()
            .map(|(field, reason)| format!("{field} {reason}"))
            .collect();
    }
    Ok(out)
}
