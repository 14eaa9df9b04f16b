//! The Redis engine (feature `redis`): a lease on a free shard in Redis,
//! for the deployments where Redis keeps what it acknowledged.
//!
//! # Which deployments keep the promise
//!
//! Redis acknowledges writes it can later lose: an append-only file synced
//! once a second, a restart from a snapshot, asynchronous replication,
//! eviction under memory pressure. A lost raise of a shard's mark lets the
//! next holder re-issue IDs. The lease keeps its promise on **one primary**
//! with **`appendonly yes`** and **`appendfsync always`**,
//! **`maxmemory-policy noeviction`** (or no `maxmemory`), and **no
//! automatic failover**. The server's setup is read at open, and again at
//! every renewal; `idutil lease check` ([`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html))
//! names each setting below:
//!
//! - **Refused** at open with [`LeaseError::UnsafeStore`], naming the
//!   setting (and, switched on later, stopping a holder for good at its
//!   next renewal with that error):
//!   - `appendonly no`: every restart rolls the data back to the last
//!     snapshot, or empties it, with every lease and record;
//!   - an evicting policy (`maxmemory` with a `maxmemory-policy` other
//!     than `noeviction`): Redis may evict a record;
//!   - a replica with replicas of its own (below);
//!   - a URL that names a replica, not the primary.
//! - **Warned about** at open (`log::warn!`): `appendfsync everysec` or
//!   `no` (a crash of Redis or its machine can lose the last raises it
//!   acknowledged: the restart is told apart, below, so nothing is issued
//!   twice, but it costs each shard a wait and stops a holder whose raise
//!   was lost); a server that refuses `CONFIG GET` (as managed services
//!   do: `appendfsync` and the eviction policy are then not checked;
//!   `appendonly` is read from `INFO`); a replica that cannot be asked
//!   (below).
//!
//! **Replicas.** When the server has replicas, every raise of the mark is
//! followed by `WAIT` for all of them (the most the server has had while
//! this holder held the shard), and a raise that they do not all confirm
//! within the round-trip timeout is not used ([`LeaseError::NotReplicated`]);
//! a replica that goes away stops the holder from raising further. `WAIT`
//! counts only the server's own replicas, so a replica of a replica could
//! lack a raise and be promoted: the lease asks each replica the server
//! lists (at the address `INFO replication` gives, with the URL's
//! credentials and database) whether it has replicas of its own, and
//! refuses such a chain. A replica it cannot ask (another network, other
//! credentials) is warned about, since a chain behind it cannot be seen;
//! `replication=strict` in the URL (or
//! [`LeaseConfig::strict_replication`]) refuses it instead.
//!
//! **Failover.** A replica promoted while the old primary still serves
//! makes two primaries, and each side's holders see only their own server.
//! A holder that held its shard on the old primary stops raising once a
//! replica it waited for stops confirming, and a holder on the promoted
//! one starts past what a holder can have issued (it is another server:
//! below); but a holder that *opens* on the old primary afterwards, which
//! no longer lists that replica, is not stopped, and the two sides can
//! then issue the same IDs. Promote a replica only once the old primary is
//! stopped for good.
//!
//! For anything else (Sentinel or managed failover, Redis as a cache, a
//! fleet that must survive losing its store), use the
//! PostgreSQL engine ([`idutil::lease::postgres`](https://docs.rs/idutil/latest/idutil/lease/postgres/)). Redis Cluster is not
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
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted by the
//!   lease, created by the first holder of the shard (below); a holder
//!   that finds it gone or lowered restores its own mark before it stops
//!   ([the rule](idutil_lease)): `high_water` (no ID on the shard has a
//!   later Unix second; only ever raised), `last` (`"second sequence"`, the
//!   exact last ID after a clean close, until the next holder reserves),
//!   `seen` (the highest wall-clock second a holder saw), `layout` (the
//!   layout's fingerprint), `run` (the run ID of the server under which a
//!   holder last found the record covering every ID of the shard, below)
//!   and `lead` (the largest lead cap a holder raised under).
//!
//! Every step is one Lua script, atomic on the server. The acquisition and
//! renewals also read the server's clock (`TIME`) for the skew check, so a
//! holder's very first raise is checked against Redis's clock too.
//!
//! # Restarts, restores and failovers
//!
//! A restarted Redis holds what its files held: everything it acknowledged,
//! from an intact append-only file with `appendfsync always`; less, from a
//! file synced once a second, an older copy put back (a backup, an older
//! snapshot), or nothing at all. A promoted replica holds what it had
//! received. The records cannot tell. What can: Redis's **run ID**
//! (`INFO server`), new at every start of the server, and another on every
//! other server. Each raise, each renewal that finds the record's mark at
//! least the holder's own, and each clean close stamps the record with the
//! current run ID (its `run`): the holder, which has held the shard since
//! it was granted, knows the record covers every ID issued on it.
//!
//! A shard whose record is **not stamped with the current run ID** (Redis
//! has started since, or this is another server), and a shard with **no
//! record** (never used under this prefix, or lost: `FLUSHALL`, a server
//! emptied, which Redis cannot tell apart), has a history the lease cannot
//! know. Its next holder:
//!
//! 1. holds the lease, renewing it, for one whole TTL before anything
//!    else: by then any holder still issuing under the old history has
//!    stopped (at its next renewal, and at the latest three quarters of a
//!    TTL after its last successful one, which came before this lease was
//!    granted);
//! 2. raises `high_water` (or creates the record) to Redis's clock plus the
//!    lead cap ([`LeaseConfig::max_lead`], 30 s by default, or the largest
//!    the record kept in `lead`) plus [`LeaseConfig::max_skew`] plus one
//!    second, past every ID any holder can have issued (each runs at most
//!    its lead cap ahead of a clock within the skew limit of Redis's),
//!    drops the exact last ID, stamps the record, and logs why.
//!
//! The cost: the TTL's wait, then a few seconds (the skew limit and two)
//! before the first ID while the lead falls back under the cap, and a jump
//! of about the lead cap in the shard's IDs; never a re-issued ID. It is
//! paid once per shard, at its first use and at its first lease after each
//! start of Redis, by the holder that leases it then. A holder that holds
//! its shard across a restart of Redis:
//!
//! - goes on, and stamps the record, when its lease outlived the restart
//!   (the append-only file keeps it, and the restart took less than the
//!   TTL) and the mark is at least its own;
//! - writes its mark back and stops for good ([`LeaseError::Lost`]) when
//!   the mark is below its own (an older copy);
//! - stops for good too when its lease lapsed meanwhile: taking it back
//!   would need the record to hold every other holder's raises, which
//!   after a restart it cannot know. Such a generator is reopened.
//!
//! **Not detected**: data loaded into the running server without a restart
//! (`DEBUG RELOAD NOSAVE`, `DEBUG LOADAOF` of an older file: Redis 7 runs
//! `DEBUG` only with `enable-debug-command`, and `idutil lease check` warns
//! when it is on), and a record rewritten by hand (`RESTORE`, an `HSET` of
//! an older `high_water`) while nobody holds the shard. A holder holding
//! the shard finds a lowered mark at its next renewal, as after any loss;
//! between runs, nothing in Redis is left to tell. The bound rests on the
//! holders' lead caps: give every holder of an ID space the same cap in
//! force, [`LeaseConfig::max_lead`] or a generator's own
//! ([`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead)) where it is lower (the
//! record keeps the largest, but a copy put back keeps the one of its
//! time).
//!
//! # TLS
//!
//! `rediss://` URLs are refused with a message: this build talks plain
//! Redis protocol. Reach a TLS-only server through a local tunnel (stunnel,
//! spiped) on a loopback `redis://` URL, or use the PostgreSQL engine.

mod acquire;
mod audit;
mod conn;
mod held;
mod inspect;
mod scripts;
mod setup;

use std::time::Duration;

// The values shared with the generator, by the paths its crate uses.
use idutil_core::{clock, layout, sync};

use clock::Clock;
use idutil_lease::interface::{Ask, Engine, Grant, Held};
use idutil_lease::{Finding, LeaseConfig, LeaseError, LeaseResult, Released, ShardLease};
use layout::Layout;

const ENGINE: &str = "Redis";

/// Whole milliseconds, at least 1: a TTL or a wait as Redis takes it.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn key(config: &LeaseConfig, kind: &str, shard: u32) -> String {
    format!("{}:{kind}:{shard}", config.get_prefix())
}

/// The Redis engine ([`LeaseConfig::new`] with `redis://`).
///
/// Public only so that `idutil` can choose it for a URL; applications
/// name a store by its URL, never by this type, and `idutil` re-exports
/// this crate as `idutil::lease::redis`, so it is hidden from
/// the docs there and here.
#[doc(hidden)]
pub struct Redis;

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

    fn check(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<Finding>> {
        audit::audit(config, layout)
    }
}
