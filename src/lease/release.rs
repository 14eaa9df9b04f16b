//! Freeing a stuck lease: [`release`].

use super::config::Kind;
use super::LeaseConfig;
use crate::error::Result;
use crate::layout::Layout;

/// A lease [`release`] freed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// The shard.
    pub shard: u32,
    /// The holder's token the lease named, if any.
    pub holder: Option<String>,
    /// When the lease would have expired, as the store wrote it
    /// (`infinity`, say).
    pub expires_at: String,
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
/// [`LeaseError::InvalidConfig`](crate::lease::LeaseError::InvalidConfig)
/// for a live lease, a shard without a row, or a Redis lease (whose keys
/// always expire: delete a `PERSIST`ed `PREFIX:lease:N` by hand);
/// [`LeaseError::Store`](crate::lease::LeaseError::Store) if the store
/// fails.
#[cfg_attr(not(feature = "postgres-lease"), allow(unused_variables))]
pub fn release(config: &LeaseConfig, layout: &Layout, shard: u32) -> Result<Released> {
    match config.kind()? {
        #[cfg(feature = "redis")]
        Kind::Redis => Err(super::LeaseError::invalid_config(
            "a Redis lease key always carries an expiry unless changed by hand (PERSIST); \
             delete such a key (PREFIX:lease:N) with DEL: the mark (PREFIX:mark:N) stays",
        )
        .into()),
        #[cfg(feature = "postgres-lease")]
        Kind::Postgres => super::postgres::release(config, layout, shard),
    }
}
