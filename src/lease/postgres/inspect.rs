//! Every shard's lease and record as PostgreSQL holds them, for display.

use std::time::Duration;

use super::conn::{off_runtime, Conn};
use super::row::raw_record;
use super::sql::table;
use super::target::Target;
use super::UNDEFINED_TABLE;
use crate::error::Result;
use crate::layout::Layout;
use crate::lease::{LeaseConfig, ShardLease};

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
    let mut out: Vec<ShardLease> = range.map(ShardLease::empty).collect();
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
        let last = (row.get(4), row.get(5));
        match raw_record(row.get(3), last, row.get(6), recorded) {
            Ok(Some(raw)) => entry.show_record(&raw, layout),
            Ok(None) => {}
            Err((field, reason)) => entry.invalid.push(format!("{field} {reason}")),
        }
    }
    Ok(out)
}
