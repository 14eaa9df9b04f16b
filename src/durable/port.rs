//! What the durable layer needs from a lease, whatever crate provides it:
//! a [`LeaseSource`] that leases a shard, and the [`HeldShard`] it hands
//! back. The lease crates (`idutil-lease` and its engines) implement them
//! in `crate::lease`, built only with a lease engine; this file is all the
//! generator knows of a lease, so a build without one has no lease code
//! and no stand-in for it. Which lease the environment asks for is
//! `open.rs`'s question to `crate::lease`.

use std::fmt::Debug;
use std::sync::Arc;

use crate::clock::Clock;
use crate::layout::Layout;
use idutil_core::LeaseError;

/// A store to lease a shard from, as settings: nothing is connected until
/// [`acquire`](LeaseSource::acquire).
pub(crate) trait LeaseSource: Debug + Send + Sync {
    /// The same settings with the lease's lead cap no larger than the
    /// generator's own, `max_lead` (whole seconds), if it has one.
    fn capped(&self, max_lead: Option<u64>) -> Arc<dyn LeaseSource>;

    /// Leases the first free, usable shard of the allowed range (`only`
    /// narrows it to one shard; `skip` leaves some out) and starts renewing
    /// it. A shard with no record yet starts at `time`'s second.
    fn acquire(
        &self,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        time: &dyn Clock,
    ) -> std::result::Result<Arc<dyn HeldShard>, LeaseError>;
}

/// A leased shard, renewed in the background until [`finish`](HeldShard::finish).
pub(crate) trait HeldShard: Send + Sync {
    /// The shard.
    fn shard(&self) -> u32;

    /// Where to resume: `start`, or later if the lease's record says a
    /// holder elsewhere issued past it; raises `seen` to the highest
    /// wall-clock second the record saw.
    fn resume(&self, layout: &Layout, start: u64, seen: &mut u64) -> u64;

    /// The lead cap in force: `asked`, at most the lease's.
    fn max_lead(&self, asked: Option<u64>) -> u64;

    /// Raises the record's high-water second to `until` (Unix seconds),
    /// committed before it returns.
    fn raise(&self, until: u64, seen: u64) -> std::result::Result<(), LeaseError>;

    /// Gives the lease back, recording the exact last ID if there is one.
    fn finish(&self, last: Option<(u64, u32)>, seen: u64);

    /// Calls `hook` whenever the lease's fence goes up (`true`) or down.
    fn set_hook(&self, hook: Box<dyn Fn(bool) + Send + Sync>);

    /// The lease's trouble behind its fence.
    fn fence_error(&self) -> LeaseError;
}
