//! The lease outside a generator: reading every shard's lease
//! ([`inspect`]), freeing a stuck one ([`release`]) and auditing the
//! store's setup ([`check`]), in whichever store the URL names. What
//! `idutil lease` runs.

use super::engines::engine_for;
use super::{Finding, LeaseConfig, LeaseResult, Released, ShardLease};
use crate::layout::Layout;

/// Reads every shard's lease and record from the store, for display.
///
/// # Errors
///
/// [`LeaseError::Store`](super::LeaseError::Store) if the store cannot be
/// reached, [`LeaseError::InvalidConfig`](super::LeaseError::InvalidConfig)
/// if the settings cannot be used.
pub fn inspect(config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<ShardLease>> {
    config.range(layout, None)?;
    engine_for(config)?.inspect(config, layout)
}

/// Frees `shard`'s lease in the store `config` names if it never expires by
/// itself (a PostgreSQL row whose `expires_at` is more than a day ahead, or
/// `'infinity'`, as a row edited by hand leaves it) or has expired. What
/// `idutil lease release --shard N` runs.
///
/// The shard's mark is never lowered: the next holder resumes after every
/// ID the shard issued, and the fencing epoch is raised, so a holder still
/// writing under the old lease is stopped at its next write. A live lease
/// (one that expires within a day) is refused: it comes free by itself
/// within its TTL once its holder stops.
///
/// # Errors
///
/// [`LeaseError::InvalidConfig`](super::LeaseError::InvalidConfig)
/// for a live lease, a shard without a row, or a Redis lease (whose keys
/// always expire: delete a `PERSIST`ed `PREFIX:lease:N` by hand);
/// [`LeaseError::Store`](super::LeaseError::Store) if the store
/// fails.
pub fn release(config: &LeaseConfig, layout: &Layout, shard: u32) -> LeaseResult<Released> {
    engine_for(config)?.release(config, layout, shard)
}

/// Audits the store `config` names for the lease under `layout`, without
/// leasing anything: what in its setup keeps the lease's promise and what
/// does not, one [`Finding`] per line. `idutil lease check` prints it.
///
/// For PostgreSQL: the durability settings (`fsync`, `full_page_writes`,
/// `synchronous_commit`), the standbys and the synchronous setup (see
/// [replication](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#replication)),
/// a pooler in front
/// and its mode, the schema of the table and any other `idutil_lease` a
/// search path would find, the privileges the lease needs, the clocks, rows
/// that never expire or belong to another layout, and how many shards of
/// the range are free. For Redis: persistence (`appendonly`,
/// `appendfsync`), the eviction policy, the replicas and any replicas of
/// theirs, whether `DEBUG` may load older data, the clocks, which shards'
/// records their next holder settles first (see [Restarts, restores and
/// failovers](https://docs.rs/idutil-lease-redis/latest/idutil_lease_redis/#restarts-restores-and-failovers)),
/// and
/// free shards. A store that cannot be reached is one
/// [`Verdict::Fail`](super::Verdict::Fail) finding, not an error.
///
/// # Errors
///
/// [`LeaseError::InvalidConfig`](super::LeaseError::InvalidConfig) for
/// settings that cannot be used (a bad URL, shard range or TTL, or a
/// `replication=` option that is neither `strict` nor `warn`).
pub fn check(config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<Finding>> {
    config.range(layout, None)?;
    engine_for(config)?.check(config, layout)
}
