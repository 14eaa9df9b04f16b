//! Unique, time-ordered integer IDs that fit in 53 bits, so a browser reads
//! them as exact JSON numbers, and that are never issued twice: not across
//! threads, processes, restarts, crashes or wall-clock rollbacks.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
//! # std::env::set_var("IDUTIL_STATE_DIR", dir.path());
//! # std::env::set_var("IDUTIL_SHARD", "7");
//! use idutil::IdUtil;
//!
//! let id: i64 = IdUtil::next_id();
//! assert!(id > 0 && id <= 9_007_199_254_740_991); // JavaScript's Number.MAX_SAFE_INTEGER
//! assert!(IdUtil::next_id() > id);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Getting started
//!
//! Add `idutil` to `Cargo.toml` (with `default-features = false` if you do
//! not want the `idutil` command's dependencies), then call
//! [`IdUtil::next_id`] wherever a new primary key is needed. The first call
//! opens a process-wide [`Generator`]:
//!
//! - its **shard** (5 bits, 0–31: which generator made the ID) comes from
//!   `IDUTIL_SHARD`, or else from the trailing digits of the host name
//!   (`web-7` → 7);
//! - its **state directory** comes from `IDUTIL_STATE_DIR`, or else
//!   `$XDG_STATE_HOME/idutil` or `~/.local/state/idutil`.
//!
//! Apps that prefer to fail at start-up rather than on the first ID call
//! [`IdUtil::init`] (or [`IdUtil::init_with`] and a [`Builder`]) first. Tests,
//! hot loops and custom layouts use a [`Generator`] of their own:
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
//! use idutil::{Generator, Layout, ManualClock};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new(1_700_000_000);
//! let generator = Generator::builder()
//!     .shard(5)
//!     .state_dir(dir.path())
//!     .clock(clock.clone())
//!     .max_lead(Duration::from_secs(10))
//!     .open()?;
//! let id = generator.next_id()?;
//! assert_eq!(id.unix_seconds(), 1_700_000_000);
//! assert_eq!(id.shard(), 5);
//! # Ok::<(), idutil::Error>(())
//! ```
//!
//! The `idutil` command issues, decodes and inspects IDs from a shell:
//! `idutil next -n 5`, `idutil decode 1452736581206048`, `idutil state`.
//!
//! # The ID
//!
//! | bits     | field    | width | meaning                                    |
//! |----------|----------|-------|--------------------------------------------|
//! | 52 .. 21 | seconds  | 32    | whole seconds since 2000-01-01T00:00:00Z   |
//! | 20 .. 5  | sequence | 16    | 0 ..= 65535 within that second             |
//! | 4 .. 0   | shard    | 5     | 0 ..= 31, which generator made it          |
//!
//! That is `((sec − 2000-01-01) << 21) | (seq << 5) | shard`, bit-compatible
//! with the classic 53-bit formula. The last representable second is
//! 2136-02-07T06:28:15Z; past it generators return [`Error::EndOfRange`]
//! and never wrap. Other splits, with optional clock bits, are a
//! [`Layout`].
//!
//! # Features
//!
//! - `cli` (default): the `idutil` command.
//! - `serde`: `Serialize`/`Deserialize` for [`Id`]: a JSON number, or a
//!   string with `#[serde(with = "idutil::serde::string")]`; reading
//!   accepts either and rejects negatives, values above 2<sup>53</sup> − 1,
//!   fractions and junk (module `idutil::serde`).
//! - `redis`: a shard lease from Redis, for fleets whose host names are not
//!   unique numbers (`Builder::redis_lease`, `IDUTIL_REDIS_URL`,
//!   `idutil --redis URL`; see *The Redis lease* below).
//! - `sqlx`: [`Id`] is a sqlx column type (`Type`, `Encode`, `Decode`):
//!   `BIGINT` in PostgreSQL and MySQL, `INTEGER` in SQLite, for any
//!   driver the application enables (this crate enables none). Reading a
//!   value that is not an ID is an error.
//! - `diesel`: [`Id`] is a diesel `BigInt` (`AsExpression`, `FromSqlRow`,
//!   `ToSql`, `FromSql`) on any backend, usable as a table's primary key.
//! - `schemars`: `JsonSchema` for [`Id`], an integer of format `int64` from
//!   0 to 9007199254740991, and `idutil::serde::string::json_schema` for
//!   the string form (1 to 16 digits).
//! - `utoipa`: `ToSchema` for [`Id`] (named `Id`, the same integer), and
//!   `idutil::serde::string::openapi_schema` for the string form.
//!
//! # In a database
//!
//! An ID is a signed 64-bit integer column, `BIGINT` (SQLite: `INTEGER`), and
//! the natural primary key: it is unique, and sorting by it sorts by time.
//! With feature `sqlx` or `diesel` an [`Id`] binds and reads directly (their
//! docs show both); otherwise bind [`Id::as_i64`] or the `i64` from
//! [`IdUtil::next_id`]. Because the time is the high bits, a time range is an
//! ID range, which the primary key's index answers without a `created`
//! column: [`Id::min_at`] and [`Id::max_at`] give the first and last ID of a
//! second on any shard.
//!
//! ```
//! use idutil::Id;
//! use std::time::{Duration, SystemTime};
//!
//! // The last hour, bound as $1 and $2 of
//! // SELECT id, text FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id
//! let now = SystemTime::now();
//! let from = Id::min_at(now - Duration::from_secs(3600)).unwrap();
//! let to = Id::max_at(now).unwrap();
//! assert!(from < to);
//! ```
//!
//! # Design
//!
//! ## Generating
//!
//! A generator keeps one atomic counter, `(second << 16) | sequence`. Each ID
//! is one compare-and-swap on it; there is no lock on the hot path and no
//! allocation. The second used is `max(now, last second used)`: when the
//! clock moves on, the counter jumps up to it; when a second's 65,536
//! sequence numbers are used, incrementing carries into the next second.
//! That is *borrowing*: the generator runs ahead of the clock, and the
//! clock's next seconds are already taken. How far ahead it runs is the
//! [`Generator::lead`]; [`Builder::max_lead`] caps it.
//!
//! The wall clock is read through the C library, as `std` does (so tools
//! such as `faketime` move it), but not once per ID: [`SystemClock`] caches
//! the current second in an atomic that a small background thread refreshes
//! at each second boundary. A clock step shows up within 250 ms; until then
//! IDs carry the previous second, unique and increasing either way.
//!
//! ## Clock rollbacks
//!
//! While running, a clock that goes back (an NTP step, a VM restore) changes
//! nothing: IDs continue after the last second used, ahead of the clock,
//! until it catches up. It is logged once with `log::warn!`, and it does not
//! count as lead.
//!
//! Across a restart the state file remembers the highest second the
//! previous run saw. A generator that opens with the clock behind that
//! bumps the persistent **clock id**, logs a warning, and resumes after
//! everything the previous runs may have issued. With clock bits in the
//! layout (`k > 0`), the clock id modulo 2<sup>k</sup> is part of every ID,
//! and the state file keeps a high-water mark per clock value: after a
//! rollback the generator moves to the next clock value whose mark is behind
//! the clock and runs on real time; if there is none, it resumes after the
//! lowest mark.
//!
//! ## The state file
//!
//! Each shard has a lock file and a state file in the state directory
//! ([`state`] documents the format). The generator holds an exclusive lock
//! on the lock file for its whole life. The lock file is never renamed,
//! because a lock on a file that gets replaced protects nothing. A second
//! generator for the same shard, in this process or another, gets
//! [`Error::Locked`] naming the holder's pid.
//!
//! The state file records the layout, the clock id, the highest wall-clock
//! second seen, and a **high-water second**: no ID with a later second is
//! issued until the file says so. The generator reserves a window ahead
//! (5 s by default, [`Builder::window`]). A background thread extends it
//! when half is used, so the hot path does not wait on the disk in steady
//! state. When borrowing, each extension reaches as far ahead again as the
//! generator already leads, so even millions of IDs a second need only a
//! handful of writes. A clean close ([`Generator::close`] or drop) writes
//! the exact last second and sequence, so a restart within the same second
//! continues right after it. After a crash the next generator starts after
//! the high-water second instead: a few seconds ahead, never behind.
//!
//! Every write goes to a temporary file in the same directory, is `fsync`ed,
//! renamed over the old file, and the directory is `fsync`ed. A crash at
//! any instant leaves the old state or the new one. `fsync` is a promise from
//! the operating system and the disk. A disk that acknowledges writes it has
//! not stored (some consumer drives, some virtual disks configured for
//! speed) can lose the latest reservation on power loss. A file system
//! restored from a snapshot or backup travels back in time with its state
//! files. Both can lead to reissued IDs; neither can be detected from
//! inside.
//!
//! A state file that is unreadable, truncated, from an unknown version or
//! for another layout is never reset silently. Opening fails with
//! [`Error::BadState`], which names the file and the command that restarts
//! it conservatively: `idutil state recover --shard N --state-dir DIR`
//! ([`state::recover`]).
//!
//! **The state directory must persist.** In a container it must be a
//! persistent volume that outlives the container, not its writable layer,
//! and one shard's state must live in exactly one directory: two state
//! directories for one shard (two containers with the same `IDUTIL_SHARD`,
//! two volumes) are two independent generators, and nothing on one host
//! can detect that.
//!
//! ## The shard
//!
//! The shard comes from the explicit setting, else `IDUTIL_SHARD`, else the
//! trailing decimal digits of the short host name (before the first `.`):
//! `web-7` → 7, `node-007` → 7. A host name without digits gets shard 0 with
//! a warning. Digits beyond the shard range (`web-45` with 5 shard bits) are
//! an error, never a silent fallback. Host-name shards are safe only where
//! names are unique and numbered (Kubernetes StatefulSets, numbered VMs).
//! Fleets with random names need an explicit shard per instance, or the
//! Redis lease.
//!
//! ## The Redis lease
//!
//! With feature `redis`, a generator can lease its shard from a Redis
//! server instead (`Builder::redis_lease`; `IDUTIL_REDIS_URL`, which
//! [`IdUtil`] also reads; `idutil --redis URL`). Use it when instances come
//! and go under names that are not unique numbers: Kubernetes Deployments,
//! autoscaling groups, containers without persistent volumes. Where names
//! are numbered and stable (StatefulSets, numbered VMs), the host-name shard
//! needs no extra moving part and is the better choice.
//!
//! **How it works.** Opening takes the first free shard with one Lua script
//! (`SET NX` with a TTL and a token naming the holder, returning the
//! shard's record), so two generators never get the same shard. With every
//! shard leased, opening fails with `lease::LeaseError::NoFreeShard`; a
//! shard is never shared. The record (a hash with no TTL, kept after release) holds the
//! shard's **high-water second**: before issuing any ID with a later second,
//! the generator raises it in Redis, with a script that checks the lease is
//! still its own, as well as in its state file. A new holder resumes after
//! the high-water second (or right after the exact last ID, which a clean
//! close records), and after its own state file where it has one, whichever
//! is later. So a holder whose clock is behind the previous holder's, or a
//! previous holder that borrowed ahead, cannot lead to a duplicate, and
//! neither can a holder that crashed or was killed.
//!
//! **Renewal and fencing.** A background thread renews the lease every
//! third of its TTL (default 10 s, `lease::LeaseConfig::ttl`). If no
//! renewal has succeeded for three quarters of the TTL, counted on the
//! monotonic clock from the *send* time of the last successful one, the
//! generator stops issuing: calls return `lease::LeaseError::Fenced`
//! (no waiting) until a renewal succeeds again. If the lease expired
//! meanwhile and nobody reserved anything on the shard since, the same
//! holder takes it back; if another generator took it, this one stays
//! stopped with `lease::LeaseError::Lost` and must be reopened. The fence
//! comes before Redis can expire the lease on one assumption: **over one
//! TTL, this host's monotonic clock and the Redis server's clock differ in
//! rate by less than the quarter-TTL margin** (Redis expires keys by its own
//! clock). Real clocks differ by parts per million, but a Redis host whose
//! wall clock is stepped forward expires leases early. Uniqueness does not
//! rest on that assumption: a holder that keeps issuing after its lease is
//! gone (a process paused for longer than the TTL, a stepped clock) still
//! issues only seconds it recorded in Redis while it held the lease, and
//! the next holder starts after them. What the fence buys is that two live
//! generators do not issue on one shard at once.
//!
//! **The TTL trade-off.** A short TTL frees a crashed holder's shard
//! sooner, but a Redis outage or network stall longer than three quarters
//! of it stops issuing, and renewals are more frequent. A long TTL rides out
//! longer stalls but keeps a dead holder's shard (one of only 32 by
//! default) for longer. 10 s suits most fleets; size the shard range to the
//! largest fleet plus the instances that may be dead but still leased.
//!
//! **Failure modes.**
//!
//! - Redis unreachable at open: opening fails with
//!   `lease::LeaseError::Redis`. While running: IDs continue within the
//!   reservation already recorded; past it, or past the fence, calls fail
//!   until Redis answers again.
//! - Redis restarted: leases and records survive only if Redis persists
//!   them. **Run it with the append-only file on (`appendonly yes`,
//!   ideally `appendfsync always`)**; with `everysec` a Redis crash can lose
//!   the last second of raises. A Redis that loses its data forgets the
//!   high-water seconds: a holder with a state file still resumes after it,
//!   but a new host with an empty state directory starts at its clock, and
//!   IDs issued ahead of that clock can be issued again.
//! - Replication: a failover to a replica that had not yet received the
//!   latest raise has the same effect. Use a single primary with
//!   persistence, not Redis Cluster (the keys of all shards are read by one
//!   script) or a failover setup without `WAIT`.
//! - All shards leased: opening fails; dead holders' shards come free
//!   within one TTL.
//! - One key prefix is one ID space under one layout. A shard's record
//!   remembers the layout, and a generator with another layout is refused
//!   (`lease::LeaseError::LayoutMismatch`); fleets that share a server
//!   use different prefixes (`lease::LeaseConfig::prefix`). Shards given
//!   to hosts by other means must be kept out of the leased range
//!   (`lease::LeaseConfig::shards`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod error;
mod external;
mod generator;
mod global;
mod id;
mod layout;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod lease;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde;
mod shard;
pub mod state;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Result};
pub use generator::{Builder, Generator, IdBatch, DEFAULT_WINDOW};
pub use global::IdUtil;
pub use id::Id;
pub use layout::{Layout, LayoutError, Parts, EPOCH_2000, MAX_TOTAL_BITS};
pub use shard::{resolve_shard, shard_from_hostname, ShardSource, SHARD_ENV};
pub use state::STATE_DIR_ENV;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn generator_is_send_and_sync() {
        assert_send_sync::<crate::Generator>();
        assert_send_sync::<crate::Generator<crate::ManualClock>>();
        assert_send_sync::<crate::Id>();
        assert_send_sync::<crate::Error>();
    }
}
