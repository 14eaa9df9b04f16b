//! Every shard's lease and record as PostgreSQL holds them, for display.

use std::time::Duration;

use super::conn::{literal, number, off_runtime, Conn, Failure};
use super::row::raw_record;
use super::target::Target;
use super::UNDEFINED_TABLE;
use crate::layout::Layout;
use idutil_lease::LeaseResult as Result;
use idutil_lease::{LeaseConfig, ShardLease};

/// Reads the rows of every shard of the range, for display. A shard
/// without a row (or a database without the table) shows as never used.
pub(crate) fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    off_runtime(|| inspect_here(config, layout))
}

fn inspect_here(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    let range = config.range(layout, None)?;
    let target = Target::parse(config)?;
    let mut conn = Conn::open(config)?;
    let sql = format!(
        "SELECT shard, holder, \
             CASE WHEN expires_at > clock_timestamp() \
                  THEN extract(epoch FROM expires_at)::float8 \
                       - extract(epoch FROM clock_timestamp())::float8 END, \
             high_water, last_second, last_sequence, seen, layout, epoch \
         FROM {} WHERE space = {} AND shard BETWEEN {} AND {} ORDER BY shard",
        target.table(),
        literal(config.get_prefix()),
        range.start(),
        range.end()
    );
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    let rows = match conn.write(&target, timeout, &[sql]) {
        Ok(mut answers) => answers.pop().map(|a| a.rows).unwrap_or_default(),
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => Vec::new(),
        Err(f) => return Err(f.into_error("read the leases from", config)),
    };
    let start = *range.start();
    let mut out: Vec<ShardLease> = range.map(ShardLease::empty).collect();
    let unreadable = |f: Failure| f.into_error("read the leases from", config);
    for row in rows {
        let cell = |i: usize| row.get(i).cloned().flatten();
        let index = number::<u32>(&cell(0), "shard")
            .map_err(unreadable)?
            .and_then(|s| s.checked_sub(start));
        let Some(entry) = index.and_then(|i| out.get_mut(i as usize)) else {
            continue;
        };
        let left = number::<f64>(&cell(2), "expiry").map_err(unreadable)?;
        entry.holder = cell(1);
        entry.expires_in = left
            .filter(|s| s.is_finite() && *s > 0.0 && entry.holder.is_some())
            .map(Duration::from_secs_f64);
        entry.epoch = number::<u64>(&cell(8), "epoch").map_err(unreadable)?;
        let recorded = cell(7).unwrap_or_default();
        entry.layout = Some(recorded.clone());
        let int = |i: usize, what| number::<i64>(&cell(i), what).map_err(unreadable);
        let last = (int(4, "last_second")?, int(5, "last_sequence")?);
        match raw_record(int(3, "high_water")?, last, int(6, "seen")?, recorded) {
            Ok(Some(raw)) => entry.show_record(&raw, layout),
            Ok(None) => {}
            Err((field, reason)) => entry.invalid.push(format!("{field} {reason}")),
        }
    }
    Ok(out)
}
