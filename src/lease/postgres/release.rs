//! Stuck rows: leases that never expire by themselves (`expires_at` more
//! than a day ahead, or `'infinity'`: a row edited by hand), named when no
//! shard is free and freed on request, never lowering a mark.

use std::time::Duration;

use tokio_postgres::types::Type;

use super::conn::{off_runtime, Conn};
use super::sql::table;
use super::target::Target;
use super::{EPOCH_MAX, UNDEFINED_TABLE};
use crate::error::Result;
use crate::layout::Layout;
use crate::lease::{LeaseConfig, LeaseError, Released};

/// A lease that expires further ahead than this never expires by itself
/// as far as a fleet is concerned: no TTL is that long.
const STUCK: &str = "interval '1 day'";

/// The shards of the range whose lease is stuck, each with its expiry (as
/// PostgreSQL writes it). Errors count as none: this only adds to a
/// message.
pub(super) fn stuck_shards(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    table: &str,
    range: (i64, i64),
    timeout: Duration,
) -> Vec<(u32, String)> {
    let sql = format!(
        "SELECT shard, expires_at::text FROM {table} \
         WHERE space = $1 AND shard BETWEEN $2 AND $3 \
             AND expires_at > clock_timestamp() + {STUCK} \
         ORDER BY shard LIMIT 32"
    );
    let rows = conn.run(target, timeout, async |c| {
        c.query_typed(
            &sql,
            &[
                (&config.prefix, Type::TEXT),
                (&range.0, Type::INT8),
                (&range.1, Type::INT8),
            ],
        )
        .await
    });
    rows.map(|rows| {
        rows.iter()
            .map(|r| {
                let shard = u32::try_from(r.get::<_, i64>(0)).unwrap_or(u32::MAX);
                (shard, r.get::<_, String>(1))
            })
            .collect()
    })
    .unwrap_or_default()
}

/// [`release`](crate::lease::release) in PostgreSQL.
pub(crate) fn release(config: &LeaseConfig, layout: &Layout, shard: u32) -> Result<Released> {
    off_runtime(|| release_here(config, layout, shard))
}

fn release_here(config: &LeaseConfig, layout: &Layout, shard: u32) -> Result<Released> {
    config.range(layout, Some(shard))?;
    let target = Target::parse(config)?;
    let table = table(config);
    let mut conn = Conn::open(config)?;
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    // The holder and expiry before, and whether the lease is stuck or
    // expired (and so was freed) rather than live.
    let sql = format!(
        "WITH old AS (SELECT holder, expires_at, \
                 expires_at > clock_timestamp() + {STUCK} \
                     OR expires_at <= clock_timestamp() AS free_it \
             FROM {table} WHERE space = $1 AND shard = $2 FOR UPDATE), \
         freed AS (UPDATE {table} AS t SET holder = NULL, expires_at = '-infinity', \
                 epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int \
             FROM old WHERE t.space = $1 AND t.shard = $2 AND old.free_it \
             RETURNING 1) \
         SELECT old.holder, old.expires_at::text, old.free_it, \
             (extract(epoch FROM old.expires_at) - extract(epoch FROM clock_timestamp()))::float8 \
             FROM old"
    );
    let number = i64::from(shard);
    let found = conn.run(&target, timeout, async |c| {
        c.query_typed_opt(&sql, &[(&config.prefix, Type::TEXT), (&number, Type::INT8)])
            .await
    });
    let row = match found {
        Ok(row) => row,
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => None,
        Err(f) => return Err(f.into_error("release a lease in", config).into()),
    };
    let Some(row) = row else {
        return Err(LeaseError::invalid_config(format!(
            "shard {shard} of ID space {:?} has no row in {table}: nothing to release",
            config.prefix
        ))
        .into());
    };
    let holder: Option<String> = row.get(0);
    let expires_at: String = row.get(1);
    if !row.get::<_, bool>(2) {
        let left: f64 = row.get(3);
        return Err(LeaseError::invalid_config(format!(
            "shard {shard} is leased by a live holder ({}) until {expires_at}, {left:.1} s from \
             now: it comes free by itself when its holder stops renewing; only a lease that \
             never expires by itself (more than a day ahead, or 'infinity') is released",
            holder.as_deref().unwrap_or("no holder named")
        ))
        .into());
    }
    Ok(Released {
        shard,
        holder,
        expires_at,
    })
}
