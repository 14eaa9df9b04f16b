//! Stuck rows: leases that never expire by themselves (`expires_at` more
//! than a day ahead, or `'infinity'`: a row edited by hand), named when no
//! shard is free and freed on request, never lowering a mark.

use std::time::Duration;

use super::conn::{number, off_runtime, Conn};
use super::database::is_database;
use super::sql;
use super::target::Target;
use super::UNDEFINED_TABLE;
use crate::layout::Layout;
use idutil_lease::LeaseResult as Result;
use idutil_lease::{LeaseConfig, LeaseError, Released};

/// The shards of the range whose lease is stuck, each with its expiry (as
/// PostgreSQL writes it), and apart from them the shards the database
/// holds ([`DatabaseHolder`](super::DatabaseHolder)), each with its holder.
/// Errors count as none: this only adds to a message.
pub(super) fn stuck_shards(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    range: (u32, u32),
    timeout: Duration,
) -> (Vec<(u32, String)>, Vec<String>) {
    let statement = sql::release::stuck(&target.table(), config.get_prefix(), range);
    let rows = conn
        .write(target, timeout, &[statement])
        .map(|mut answers| answers.pop().map(|a| a.rows).unwrap_or_default())
        .unwrap_or_default();
    let (mut stuck, mut database) = (Vec::new(), Vec::new());
    for row in rows {
        let Some(Ok(Some(shard))) = row.first().map(|c| number::<u32>(c, "shard")) else {
            continue;
        };
        let holder = row.get(2).cloned().flatten();
        match row.get(1).cloned().flatten() {
            _ if is_database(holder.as_deref()) => database.push(format!(
                "shard {shard}: held by the {}, which never gives it back while installed \
                 (idutil lease sql --uninstall removes it)",
                holder.unwrap_or_default()
            )),
            Some(until) => stuck.push((shard, until)),
            None => {}
        }
    }
    (stuck, database)
}

/// [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html) in PostgreSQL.
pub(crate) fn release(config: &LeaseConfig, layout: &Layout, shard: u32) -> Result<Released> {
    off_runtime(|| release_here(config, layout, shard))
}

fn release_here(config: &LeaseConfig, layout: &Layout, shard: u32) -> Result<Released> {
    config.range(layout, Some(shard))?;
    let target = Target::parse(config)?;
    let table = target.table();
    let mut conn = Conn::open(config)?;
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    // The holder and expiry before, and whether the lease is stuck or
    // expired (and so was freed) rather than live.
    let statement = sql::release::release(&table, config.get_prefix(), shard);
    let row = match conn.write(&target, timeout, &[statement]) {
        Ok(mut answers) => answers.pop().and_then(|a| a.rows.into_iter().next()),
        Err(f) if f.code() == Some(UNDEFINED_TABLE) => None,
        Err(f) => return Err(f.into_error("release a lease in", config)),
    };
    let Some(row) = row else {
        return Err(LeaseError::invalid_config(format!(
            "shard {shard} of ID space {:?} has no row in {table}: nothing to release",
            config.get_prefix()
        )));
    };
    let cell = |i: usize| row.get(i).cloned().flatten();
    let holder = cell(0);
    let expires_at = cell(1).unwrap_or_default();
    if is_database(holder.as_deref()) {
        // The statement left it as it was.
        return Err(LeaseError::invalid_config(format!(
            "shard {shard} is held by the {}, not by a stuck lease: it is the database's for as \
             long as the function is installed; give it back with idutil lease sql --uninstall \
             (which records its last ID first)",
            holder.unwrap_or_default()
        )));
    }
    if cell(2).as_deref() != Some("t") {
        let left = number::<f64>(&cell(3), "the time left")
            .map_err(|f| f.into_error("release a lease in", config))?
            .unwrap_or(0.0);
        return Err(LeaseError::invalid_config(format!(
            "shard {shard} is leased by a live holder ({}) until {expires_at}, {left:.1} s from \
             now: it comes free by itself when its holder stops renewing; only a lease that \
             never expires by itself (more than a day ahead, or 'infinity') is released",
            holder.as_deref().unwrap_or("no holder named")
        )));
    }
    Ok(Released::new(shard, holder, expires_at))
}
