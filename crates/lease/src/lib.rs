//! Where a leased shard comes from: a lease on a free shard in a shared
//! store, renewed in the background, with the shard's high-water second
//! kept in the store so that it travels from holder to holder.
//!
//! A generator leases its shard instead of taking it from the host name
//! when it is given a lease: [`idutil::Builder::lease`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.lease) in
//! code, [`env::LEASE_URL`] (which
//! [`idutil::IdUtil`](https://docs.rs/idutil/latest/idutil/struct.IdUtil.html) also reads), or `idutil --lease URL`. Use it
//! when instances come and go under names that are not unique numbers:
//! Kubernetes Deployments, autoscaling groups, containers without
//! persistent volumes. The shard's high-water second travels with the
//! lease, so each holder resumes after everything the shard's previous
//! holders issued, and a container needs no persistent state directory.
//! Where names are numbered and stable (StatefulSets, numbered VMs), the
//! host-name shard ([`idutil::shard`](https://docs.rs/idutil/latest/idutil/shard/)) needs no extra moving part and
//! is the better choice.
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
//!
//! Two engines implement it, each behind its own feature and in its own
//! folder, chosen by the URL's scheme ([`LeaseConfig::new`]):
//!
//! - [PostgreSQL](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/) (feature `postgres-lease`; `postgres://`,
//!   `postgresql://`): the recommended engine, on the database the
//!   application already runs. One table, a fencing epoch, expiry by the
//!   server's clock; with a synchronous standby no duplicate through
//!   failover or split brain.
//! - [Redis](https://docs.rs/idutil-lease-redis/latest/idutil_lease_redis/) (feature `redis`; `redis://`): for one primary with
//!   `appendfsync always` and `noeviction`, checked at open (`appendonly
//!   no`, eviction and a replica of a replica refused); replicas are
//!   waited for (`WAIT`); a restart of Redis is told apart. Its docs say
//!   which deployments keep the promise.
//!
//! A fleet larger than the layout's shards chooses a layout with more
//! shard bits without code ([`env::LAYOUT`],
//! `idutil --layout`; ready layouts under [`Layout`](idutil_core::Layout)'s
//! `FromStr`); the store remembers each ID space's layout and refuses
//! another.
//!
//! # Kubernetes: a Deployment with a lease
//!
//! Point every replica at the application's own PostgreSQL; no volume is
//! needed:
//!
//! ```yaml
//! apiVersion: apps/v1
//! kind: Deployment
//! metadata: { name: api }
//! spec:
//!   replicas: 12
//!   selector: { matchLabels: { app: api } }
//!   template:
//!     metadata: { labels: { app: api } }
//!     spec:
//!       containers:
//!         - name: api
//!           image: registry.example/api:1.4
//!           env:
//!             - name: IDUTIL_LEASE_URL
//!               valueFrom: { secretKeyRef: { name: db, key: url } } # postgres://app:...@db/app?sslmode=verify-full
//!             - name: IDUTIL_STATE_DIR
//!               value: /tmp/idutil   # the container's own /tmp (sticky): the lease carries the marks
//! ```
//!
//! Size the shard range as [*The TTL trade-off*](#the-ttl-trade-off)
//! says: replicas that may be dead but still leased count too.
//!
//! # What every engine promises
//!
//! The rules below hold whatever the store; they live in this module
//! (`holder.rs`, `renewal.rs`, `standing.rs`, `restore.rs`, `record.rs`),
//! and an engine only says what its store answered (`interface.rs` is what
//! an engine implements):
//!
//! - **A free shard is taken atomically**, by one statement or script, and
//!   never shared: with every shard leased, opening fails with
//!   [`LeaseError::NoFreeShard`].
//! - **The mark travels with the shard.** Before the generator issues an ID
//!   in a second past the shard's high-water second, the new mark is
//!   committed in the store, conditioned on the lease still being this
//!   holder's. The next holder resumes after the mark, or right after the
//!   exact last ID that a clean close records beside it. The mark is kept
//!   after release and **never lowered**: a renewal that finds it below
//!   what this holder raised stops the holder for good.
//! - **A record is read strictly**: every field parsed and checked against
//!   the layout; a field that does not pass is never taken for an absent
//!   one ([`LeaseError::InvalidRecord`]). Opening skips such a shard, and a
//!   shard whose mark is at the end of the layout's range, naming its
//!   record in a warning, and leases the next one; a shard asked for by
//!   number is refused instead.
//! - **The fence is a local monotonic deadline.** A renewal thread renews
//!   every third of the TTL; if none has succeeded for three quarters of
//!   it, counted on this host's monotonic clock from the *send* time of the
//!   last successful one, issuing stops ([`LeaseError::Fenced`]) until a
//!   renewal succeeds. The store expires the lease only after the full TTL.
//!   Issuing stops when the renewal thread, woken at that deadline, raises
//!   the fence: late by the time the thread takes to be scheduled (4.6 ms
//!   was seen at a load average of 80 on 2 cores); the quarter of the TTL
//!   between the fence and the store's expiry is the margin for that.
//! - **A lost record stops the holder for good, and a mark known anywhere
//!   is never lost.** A record that is gone, rewritten, below the holder's
//!   mark or held by another holder stops the generator for good
//!   ([`LeaseError::Lost`], [`LeaseError::RecordLost`]); it never takes the
//!   shard back. But first it raises the record back to the highest mark
//!   it raised, re-creating it if it is gone: raising a mark is always
//!   safe, and the next holder then starts after every ID this one issued.
//!   A host's state file keeps the marks of the shards it leased too, and a
//!   holder on that host never starts below them, whatever the store says.
//! - **The lead is capped** ([`LeaseConfig::max_lead`], 30 s by default):
//!   what a store restored from a backup, or rewound by a failover, can have
//!   forgotten has a bound, and a holder that detects such a history starts
//!   past it (PostgreSQL: [*Restores and rewound
//!   histories*](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#restores-and-rewound-histories); Redis:
//!   [*Restarts, restores and
//!   failovers*](https://docs.rs/idutil-lease-redis/latest/idutil_lease_redis/#restarts-restores-and-failovers)).
//! - **A lease that never expires by itself** (a PostgreSQL row whose
//!   `expires_at` was set to `'infinity'` by hand) is named when no shard
//!   is free, and [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html) (`idutil lease release --shard N`) frees it,
//!   keeping the mark.
//! - **The host's clock is compared with the store's** at acquisition and
//!   at every renewal, where the store tells its time: beyond
//!   [`LeaseConfig::max_skew`] opening is refused and a running holder
//!   stops issuing ([`LeaseError::ClockSkew`]) until the clocks agree
//!   again. A generator whose clock has read further ahead of the store's
//!   than that never raises the mark to it, so one bad clock cannot push a
//!   shard into the future (to 2136, say) for the whole fleet.
//!
//! What an engine does not keep of these, and why:
//!
//! - **Redis: a mark lowered by hand while nobody holds the shard** (an
//!   `HSET` of an older `high_water`, a `RESTORE` of the record, data
//!   loaded without a restart) is not told apart: the record still carries
//!   the server's current run ID, and nothing else in Redis says who wrote
//!   it, so the next holder on another host resumes after the lowered mark
//!   ([*Restarts, restores and
//!   failovers*](https://docs.rs/idutil-lease-redis/latest/idutil_lease_redis/#restarts-restores-and-failovers), *Not detected*).
//!   A mark lowered under a live holder, a record deleted, and a copy put
//!   back by a restart are told apart as on PostgreSQL.
//!
//! The repository's conformance suite, `cli/tests/lease_conformance/`,
//! checks each of these promises against every engine, and each exception
//! as documented.
//!
//! # The TTL trade-off
//!
//! A short TTL ([`LeaseConfig::ttl`]) frees a crashed holder's shard
//! sooner, but a store outage or network stall longer than three quarters
//! of it stops issuing, and renewals are more frequent: each holder renews
//! every third of it, one write on the store each time. A long TTL rides
//! out longer stalls and costs the store less, but keeps a dead holder's
//! shard for longer and, on PostgreSQL, makes the jump after a restore or
//! a failover longer (the fence is part of it). The PostgreSQL default,
//! 60 s ([`DEFAULT_TTL`]), keeps a thousand holders' renewals under 5 % of
//! one database core; its docs give the arithmetic and the costs. Redis
//! keeps 10 s ([`DEFAULT_REDIS_TTL`]). Size the shard range to the largest
//! fleet plus the instances that may be dead but still leased: with the
//! default, a crashed holder's shard stays taken for a minute.
//!
//! # Many processes on one host
//!
//! Each process that opens a leased generator leases a shard of its own
//! and renews it, also when processes share a state directory (which then
//! keeps a state file for each of their shards). Threads of one process
//! share its one generator, and so its one lease. A fleet of *N* hosts
//! running *M* leased processes each holds *N* × *M* leases: it needs that
//! many shards, plus those of holders that may be dead but still leased
//! (see the TTL trade-off above), and it costs the store *N* × *M*
//! renewals every [`LeaseConfig::renew_every`]. BENCHMARKS.md measures
//! what a renewal costs a PostgreSQL server.
//!
//! Processes of a host do not share one leased shard and one renewal,
//! although they share a host-name shard: a shared lease would need the
//! renewing process to hand the renewal to another before it exits,
//! within the fence, and every process to stop issuing when the renewer
//! stops without one, across unrelated processes (a web server, its
//! workers, a cron job). One lease per process keeps each fence in the
//! process that issues under it. Where a host runs many short-lived
//! processes, lease from a long-lived one and hand IDs out from it, or
//! give the host a numbered name and use the host-name shard, which its
//! processes share (*Processes sharing a shard* ([`idutil::state`](https://docs.rs/idutil/latest/idutil/state/))).
//!
//! # When the store fails
//!
//! - Unreachable or too busy at open: with PostgreSQL, opening tries again
//!   until its deadline ([`LeaseConfig::open_timeout`], 30 s by default),
//!   then fails with [`LeaseError::Store`] naming the step, its last
//!   failure and the deadline (see [the open's
//!   deadline](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#opening-and-closing-the-deadlines)); with Redis it
//!   fails at once. While running: IDs continue within the reservation
//!   already recorded; past it, or past the fence, calls fail until the
//!   store answers again, and the holder takes its lease back if nobody
//!   else leased the shard.
//! - A connection cut (a restarted server, a terminated session): the call
//!   that finds it closed opens a new one and runs once more within its
//!   deadline (a renewal or a raise may run twice; an acquisition or a
//!   close whose answer may have been lost is tried again the way [the
//!   open's deadline](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#opening-and-closing-the-deadlines) says), so
//!   a routine restart of the store costs no caller an error.
//! - Closing never waits longer than a bounded time: with PostgreSQL, a
//!   quarter of the TTL, at most 2.5 s, after any call in flight (a round
//!   trip's deadline, a fifth of the TTL, at most 2 s); past it, a warning says the lease was not given back, and
//!   it expires by itself within a TTL.
//! - All shards leased: opening fails; dead holders' shards come free
//!   within one TTL.
//! - An empty or blank URL (`IDUTIL_LEASE_URL=" "`, `--lease ''`) is an
//!   error ([`idutil::Error::InvalidEnv`](https://docs.rs/idutil/latest/idutil/enum.Error.html#variant.InvalidEnv); exit status
//!   2), never a lease silently turned off.
//! - One ID space is one layout: a shard recorded under another layout is
//!   refused ([`LeaseError::LayoutMismatch`]); fleets that share a store
//!   use different ID spaces ([`LeaseConfig::prefix`]). A new ID space
//!   knows nothing of another's marks: its IDs can equal the other's, so
//!   a fleet that changes its layout under a new ID space writes its IDs
//!   to tables the old one never wrote. Shards given to
//!   hosts by other means must be kept out of the leased range
//!   ([`LeaseConfig::shards`]).

// Unix only, as every idutil crate.
#[cfg(not(unix))]
compile_error!("idutil runs on Unix only (it locks its state files with flock and follows fork)");

// What the idutil crates share among themselves but applications never
// call (the counter arithmetic, the error constructors, the settings the
// engines read) is public, as crates need it, and `#[doc(hidden)]`: it is
// no part of the API that `idutil` re-exports (.ci/api keeps that list).
mod config;
mod holder;
pub mod interface;
pub mod record;
mod renewal;
mod reports;
mod restore;
pub mod schemes;
pub mod skew;
mod standing;

// The values this crate shares with the generator, by the paths the
// generator's crate uses for them.
use idutil_core::{clock, env, layout, redact, sync};

pub use config::{
    LeaseConfig, DEFAULT_MAX_LEAD, DEFAULT_MAX_SKEW, DEFAULT_OPEN_TIMEOUT, DEFAULT_PREFIX,
    DEFAULT_REDIS_TTL, DEFAULT_TTL, MIN_TTL,
};
pub use holder::{time_renewals, Lease};
pub use idutil_core::lease_error::{LeaseError, LeaseResult};
pub use reports::{Finding, Released, ShardLease, Verdict};
