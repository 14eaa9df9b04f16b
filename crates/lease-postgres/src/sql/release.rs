//! The statements of stuck leases (see [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html)):
//! naming them, and freeing one.

use super::super::conn::literal;
use super::super::EPOCH_MAX;
use super::{WRITER, WRITTEN_BY};

/// A lease that expires further ahead than this never expires by itself
/// as far as a fleet is concerned: no TTL is that long.
const STUCK: &str = "interval '1 day'";

/// The shards of `first..=last` whose lease is stuck, each with its
/// expiry as PostgreSQL writes it and its holder (32 at most).
pub(in super::super) fn stuck(table: &str, space: &str, (first, last): (u32, u32)) -> String {
    format!(
        "SELECT shard, expires_at::text, holder FROM {table} \
         WHERE space = {} AND shard BETWEEN {first} AND {last} \
             AND expires_at > clock_timestamp() + {STUCK} \
         ORDER BY shard LIMIT 32",
        literal(space)
    )
}

/// Frees the shard's lease if it is stuck (or expired), keeping its mark
/// and raising its fencing epoch; never a shard the database holds
/// ([`DatabaseHolder`](super::super::DatabaseHolder)). Returns the holder
/// and expiry before, whether the lease was freed, and how many seconds it
/// had left.
pub(in super::super) fn release(table: &str, space: &str, shard: u32) -> String {
    let space = literal(space);
    let database = literal(&format!("{}%", super::HOLDER_PREFIX));
    format!(
        "WITH old AS (SELECT holder, expires_at, \
                 (expires_at > clock_timestamp() + {STUCK} \
                     OR expires_at <= clock_timestamp()) \
                 AND NOT COALESCE(holder LIKE {database}, false) AS free_it \
             FROM {table} WHERE space = {space} AND shard = {shard} FOR UPDATE), \
         freed AS (UPDATE {table} AS t SET holder = NULL, expires_at = '-infinity', \
                 epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int, {WRITTEN_BY} = {WRITER} \
             FROM old WHERE t.space = {space} AND t.shard = {shard} AND old.free_it \
             RETURNING 1) \
         SELECT old.holder, old.expires_at::text, old.free_it, \
             (extract(epoch FROM old.expires_at) - extract(epoch FROM clock_timestamp()))::float8 \
             FROM old"
    )
}
