//! Where a leased shard comes from: a lease on a free shard in a shared
//! store, renewed in the background, with the shard's high-water second
//! kept in the store so that it travels from holder to holder (features
//! `postgres-lease`, `redis`).
//!
//! The guide to the lease is the crate page of [`idutil_lease`], whose
//! items this module re-exports: when to lease a shard, a Kubernetes
//! Deployment with a lease, [*What every engine
//! promises*](idutil_lease#what-every-engine-promises), [*The TTL
//! trade-off*](idutil_lease#the-ttl-trade-off), [*Many processes on one
//! host*](idutil_lease#many-processes-on-one-host) and [*When the store
//! fails*](idutil_lease#when-the-store-fails). Each engine's own guide is
//! its module here, as this build has it: [`postgres`]
//! (`idutil-lease-postgres`, feature `postgres-lease`) and [`redis`]
//! (`idutil-lease-redis`, feature `redis`). What needs to know every
//! engine lives here: which engine a URL names, the commands that run in
//! any store ([`inspect`], [`release`], [`check`]), and
//! [`IDUTIL_LEASE_URL`](crate::env::LEASE_URL).
//!
//! ```no_run
//! use idutil::lease::LeaseConfig;
//! use idutil::Generator;
//!
//! let generator = Generator::builder()
//!     .lease(LeaseConfig::new("postgres://app@db.internal/app?sslmode=verify-full"))
//!     .open()?;
//! println!("leased shard {}", generator.shard());
//! # Ok::<(), idutil::Error>(())
//! ```
// In a build without one of the engines, its name links to its crate's docs.
#![cfg_attr(
    not(feature = "postgres-lease"),
    doc = "[`postgres`]: https://docs.rs/idutil-lease-postgres"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`redis`]: https://docs.rs/idutil-lease-redis"
)]

mod commands;
mod engines;

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::durable::port::{HeldShard, LeaseSource};
use crate::layout::Layout;

pub use commands::{check, inspect, release};
#[doc(inline)]
pub use idutil_lease::{
    Finding, LeaseConfig, LeaseError, LeaseResult, Released, ShardLease, Verdict, DEFAULT_MAX_LEAD,
    DEFAULT_MAX_SKEW, DEFAULT_OPEN_TIMEOUT, DEFAULT_PREFIX, DEFAULT_REDIS_TTL, DEFAULT_TTL,
    MIN_TTL,
};
#[cfg(feature = "postgres-lease")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres-lease")))]
#[doc(inline)]
pub use idutil_lease_postgres as postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[doc(inline)]
pub use idutil_lease_redis as redis;

/// Measures what renewing a lease costs against the store `config` names:
/// takes a lease on a free shard for `layout` as a generator would (the
/// shard's mark is kept, nothing is issued), times `n` renewals of it one
/// after the other (each a round trip and a write on the store), and gives
/// it back. The times, in order. With `n` of 0, it only takes the lease and
/// gives it back.
///
/// The times say how much of the fence ([`LeaseConfig::fence_after`]) a
/// renewal uses on this store (BENCHMARKS.md, *A lease holder's cold
/// start*, quotes one).
///
/// # Errors
///
/// What taking the lease can return (see [`LeaseError`]: no free shard,
/// the store unreachable, the clocks too far apart, unusable settings),
/// and the error of a renewal that fails.
pub fn time_renewals(
    config: &LeaseConfig,
    layout: &Layout,
    n: usize,
) -> LeaseResult<Vec<Duration>> {
    let engine = engines::engine_for(config)?;
    idutil_lease::time_renewals(engine, config, layout, n, &SystemClock)
}

/// The lease `IDUTIL_LEASE_URL` names, if it is set.
pub(crate) fn from_env() -> crate::Result<Option<Arc<dyn LeaseSource>>> {
    Ok(LeaseConfig::from_env()?.map(|config| Arc::new(config) as Arc<dyn LeaseSource>))
}

impl LeaseSource for LeaseConfig {
    fn capped(&self, max_lead: Option<u64>) -> Arc<dyn LeaseSource> {
        Arc::new(LeaseConfig::capped(self, max_lead))
    }

    fn acquire(
        &self,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        time: &dyn Clock,
    ) -> LeaseResult<Arc<dyn HeldShard>> {
        let engine = engines::engine_for(self)?;
        let lease = idutil_lease::Lease::acquire(engine, self, layout, only, skip, time)?;
        Ok(lease)
    }
}

impl HeldShard for idutil_lease::Lease {
    fn shard(&self) -> u32 {
        idutil_lease::Lease::shard(self)
    }

    fn resume(&self, layout: &Layout, start: u64, seen: &mut u64) -> u64 {
        idutil_lease::Lease::resume(self, layout, start, seen)
    }

    fn max_lead(&self, asked: Option<u64>) -> u64 {
        idutil_lease::Lease::max_lead(self, asked)
    }

    fn raise(&self, until: u64, seen: u64) -> LeaseResult<()> {
        idutil_lease::Lease::raise(self, until, seen)
    }

    fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        idutil_lease::Lease::finish(self, last, seen)
    }

    fn set_hook(&self, hook: Box<dyn Fn(bool) + Send + Sync>) {
        idutil_lease::Lease::set_hook(self, hook)
    }

    fn fence_error(&self) -> LeaseError {
        idutil_lease::Lease::fence_error(self)
    }
}
