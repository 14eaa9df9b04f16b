//! What an engine implements, and the words the lease and its engines
//! share: [`Engine`] (a store that leases shards), [`Held`] (one shard
//! held in it), and what passes between them and the engine-agnostic
//! holder (`holder.rs`, `renewal.rs`, `standing.rs`).
//!
//! # Adding an engine
//!
//! An engine is a crate of its own on this one (`idutil-lease-postgres`,
//! `idutil-lease-redis`). It implements [`Engine`] on a unit type, whose
//! `connect` returns a [`Held`] lease and its [`Grant`]; its URL schemes go
//! into [`schemes`](crate::schemes), and `idutil` gets a feature that
//! brings the crate in and a line in its `src/lease/engines.rs` that maps
//! the schemes to the type (the command's features forward to it). Every
//! rule of the crate page's *What every engine promises* is kept by the
//! holder; an engine only does what a call asks, bounded in time, and says
//! what its store answered.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::layout::Layout;
use crate::record::Record;
use crate::reports::{Finding, Released, ShardLease};
use crate::{LeaseConfig, LeaseError, LeaseResult};

/// A store that leases shards: one per engine, chosen by the URL's scheme
/// (`engines.rs`).
pub trait Engine: Sync {
    /// Leases the first free shard the ask allows and reads its record. A
    /// shard with no record yet starts at `time`'s second (an engine that
    /// needs it). With every shard leased: [`LeaseError::NoFreeShard`].
    fn connect(&self, ask: &Ask<'_>, time: &dyn Clock) -> LeaseResult<(Box<dyn Held>, Grant)>;

    /// Every shard's lease and record, for display ([`idutil::lease::inspect`](https://docs.rs/idutil/latest/idutil/lease/fn.inspect.html)).
    fn inspect(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<ShardLease>>;

    /// Frees a lease that never expires by itself ([`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html)).
    fn release(&self, config: &LeaseConfig, layout: &Layout, shard: u32) -> LeaseResult<Released>;

    /// Audits the store's setup ([`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html)).
    fn check(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<Finding>>;
}

/// What an engine is asked to lease.
pub struct Ask<'a> {
    pub config: &'a LeaseConfig,
    pub layout: &'a Layout,
    /// The shards that may be leased.
    pub range: RangeInclusive<u32>,
    /// Shards to leave out (unusable, or held on this host).
    pub skip: &'a [u32],
    /// Names this holder in the store.
    pub token: &'a str,
    /// When the open gives up ([`LeaseConfig::open_timeout`] from its
    /// start), for the engines that retry within it (PostgreSQL).
    pub deadline: Instant,
}

/// A shard an engine leased, with its record as the store held it.
pub struct Grant {
    pub shard: u32,
    /// `Ok`: the record, read strictly. `Err`: what is wrong with it (the
    /// shard is then given back or refused).
    pub record: Result<Record, LeaseError>,
    /// Send time of the request that granted (or last renewed) the lease:
    /// the fence counts from it.
    pub at: Instant,
    /// The store's clock as the engine hands the grant over (when the
    /// store answered, moved on by the time since), if it tells it.
    pub server_time: Option<Duration>,
}

/// What a renewal found.
pub struct Renewed {
    /// The record's high-water second (Unix seconds), if it has one.
    pub mark: Option<u64>,
    /// The store's clock, if it tells it.
    pub server_time: Option<Duration>,
}

/// Why a store operation did not go through.
#[derive(Debug)]
pub enum Trouble {
    /// The store could not be reached, did not answer in time, or the lease
    /// is not known to be held right now: try again; the fence holds
    /// meanwhile.
    Again(LeaseError),
    /// The lease or the record is gone for good.
    Lost(LeaseError),
}

impl Trouble {
    pub fn into_error(self) -> LeaseError {
        match self {
            Trouble::Again(e) | Trouble::Lost(e) => e,
        }
    }
}

/// A shard held in one store: the operations the rules of *What every
/// engine promises* are built from. Each call is bounded in time by the
/// engine (at most [`LeaseConfig::op_timeout`] per round trip), so a slow
/// store never holds the renewal past the fence.
pub trait Held: Send + Sync {
    /// Keeps the lease; answers the record's mark and the store's clock.
    fn renew(&self, known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble>;
    /// Raises the mark to `high_water` (and `seen`, if it is not 0), never
    /// lowering either, if the lease is still this holder's and the mark is
    /// not below `known_mark` (the highest this holder raised it to: a
    /// lower one was rewritten or lost, and is [`Trouble::Lost`]);
    /// committed (and replicated where the engine waits for replicas)
    /// before it returns.
    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble>;
    /// Raises the record's mark to at least `high_water` (and `seen`, if
    /// it is not 0) whoever holds the shard, re-creating the record if it
    /// is gone and dropping an exact last ID below the new mark: a holder
    /// that lost its record restores what it knows before it stops
    /// (`restore.rs`). Never lowers anything; a record of another layout is
    /// left alone.
    fn restore(&self, high_water: u64, seen: u64) -> Result<(), Trouble>;
    /// Clean close: records the exact last ID (raising the mark to its
    /// second if it were ever below) and gives the lease back. `None`: just
    /// gives it back.
    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble>;
    /// The store, for messages (password hidden).
    fn describe(&self) -> String;
    /// The generator's open is over, its own first raise (if it needed
    /// one) done: an engine that gives that raise a deadline of its own
    /// treats every later one as any raise. A history check that raised
    /// the mark past the first window leaves the open nothing to raise,
    /// and a later raise must not wait out an open's deadline.
    fn opened(&self) {}
}
