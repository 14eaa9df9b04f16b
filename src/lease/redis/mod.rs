//! The Redis engine (feature `redis`): a lease on a free shard in Redis,
//! for the deployments where Redis keeps what it acknowledged.
//!
//! # Which deployments keep the promise
//!
//! Redis acknowledges writes it can later lose: an append-only file synced
//! once a second, asynchronous replication, eviction under memory
//! pressure. A lost raise of a shard's mark lets the next holder re-issue
//! IDs. The lease keeps its promise on:
//!
//! - **one primary**, with `appendonly yes` and **`appendfsync always`**;
//! - **`maxmemory-policy noeviction`** (or no `maxmemory`): a server that
//!   may evict keys is refused at open with
//!   [`LeaseError::UnsafeStore`], and checked again at every renewal: a
//!   policy switched on later stops the holder for good with that error;
//!   where `CONFIG GET` is not allowed, a warning at open says the policy
//!   could not be checked;
//! - **no automatic failover**, or replicas that every raise waits for: when
//!   the server has replicas, every raise of the mark is followed by
//!   `WAIT` for all of them (the most the server has had while this holder
//!   held the shard), and a raise that they do not all confirm within the
//!   round-trip timeout is not used ([`LeaseError::NotReplicated`]); a
//!   replica that goes away stops the holder from raising further.
//!
//! For anything else (Sentinel or managed failover, Redis as a cache, a
//! fleet that must survive losing its store), use the
//! [PostgreSQL engine](crate::lease::postgres). Redis Cluster is not
//! supported (the acquisition script reads the keys of every shard).
//!
//! # Keys
//!
//! Two keys per shard live under the ID space's name
//! ([`LeaseConfig::prefix`], `idutil` by default):
//!
//! - `{prefix}:lease:{shard}`: the lease, a string holding the holder's
//!   token (`host:pid:nanos:n`), with a TTL. Taken with `SET NX`, renewed and
//!   deleted only by scripts that check the token.
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted, created
//!   once by the first holder of the shard (after waiting one TTL, below);
//!   a holder that finds it gone or lowered restores its own mark before
//!   it stops ([the rule](crate::lease)): `high_water` (no
//!   ID on the shard has a later Unix second; only ever raised), `last`
//!   (`"second sequence"`, the exact last ID after a clean close, until the
//!   next holder reserves), `seen` (the highest wall-clock second a holder
//!   saw) and `layout` (the layout's fingerprint).
//!
//! Every step is one Lua script, atomic on the server. The acquisition and
//! renewals also read the server's clock (`TIME`) for the skew check, so a
//! holder's very first raise is checked against Redis's clock too.
//!
//! # A record is created once, after one TTL
//!
//! Redis cannot tell a shard never used from one whose record it lost (a
//! flush, a restart without persistence). So the first generator on a shard
//! that has no record holds the lease, renewing it, for one whole TTL
//! before it creates the record (with its clock's second as the mark) and
//! issues its first ID: by then a holder whose record vanished under it
//! has stopped. IDs that holder borrowed beyond the new holder's clock are
//! not covered: persistence is what keeps a restart from being a flush.
//!
//! # TLS
//!
//! `rediss://` URLs are refused with a message: this build talks plain
//! Redis protocol. Reach a TLS-only server through a local tunnel (stunnel,
//! spiped) on a loopback `redis://` URL, or use the PostgreSQL engine.

mod acquire;
mod conn;
mod held;
mod inspect;
mod scripts;

use std::time::Duration;

use crate::clock::Clock;
use crate::layout::Layout;
use crate::lease::interface::{Ask, Engine, Grant, Held};
use crate::lease::{Finding, LeaseConfig, LeaseError, LeaseResult, Released, ShardLease};

const ENGINE: &str = "Redis";

/// Whole milliseconds, at least 1: a TTL or a wait as Redis takes it.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn key(config: &LeaseConfig, kind: &str, shard: u32) -> String {
    format!("{}:{kind}:{shard}", config.prefix)
}

/// The Redis engine ([`LeaseConfig::new`] with `redis://`).
pub(crate) struct Redis;

impl Engine for Redis {
    fn connect(&self, ask: &Ask<'_>, time: &dyn Clock) -> LeaseResult<(Box<dyn Held>, Grant)> {
        acquire::connect(ask, time)
    }

    fn inspect(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<ShardLease>> {
        inspect::inspect(config, layout)
    }

    fn release(&self, _: &LeaseConfig, _: &Layout, _: u32) -> LeaseResult<Released> {
        Err(LeaseError::invalid_config(
            "a Redis lease key always carries an expiry unless changed by hand (PERSIST); \
             delete such a key (PREFIX:lease:N) with DEL: the mark (PREFIX:mark:N) stays",
        ))
    }

    fn check(&self, _: &LeaseConfig, _: &Layout) -> LeaseResult<Vec<Finding>> {
        Err(LeaseError::invalid_config(
            "the lease check audits PostgreSQL leases; for Redis, see the redis module's \
             deployment rules",
        ))
    }
}
