//! Unique, time-ordered integer IDs that fit in 53 bits, so a browser reads
//! them as exact JSON numbers, and that are never issued twice: not across
//! threads, processes, restarts, crashes or wall-clock rollbacks.
//!
//! ```
//! # idutil::IdUtil::init_ephemeral()?; // a doctest: see "In tests" below
//! use idutil::{Id, IdUtil};
//!
//! let id: i64 = IdUtil::next_id();
//! assert!(id > 0 && id <= 9_007_199_254_740_991); // JavaScript's Number.MAX_SAFE_INTEGER
//! assert!(IdUtil::next_id() > id);
//! let typed: Id = IdUtil::next(); // the same, as the `Id` type
//! assert!(typed.as_i64() > id);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Getting started
//!
//! Add `idutil` to `Cargo.toml`, then call [`IdUtil::next_id`] wherever a
//! new primary key is needed. The first call opens a process-wide
//! [`Generator`], which takes three things from its environment:
//!
//! - its **shard** (which generator made the ID): `IDUTIL_SHARD`, else the
//!   number that ends the host name (`web-7` → 7); names that look random
//!   are refused ([`shard`] has the rule), and fleets without numbered
//!   names [`lease`] their shards;
//! - its **state directory**, where each shard's state file lives:
//!   `IDUTIL_STATE_DIR` (an absolute path), else `$XDG_STATE_HOME/idutil`
//!   or `~/.local/state/idutil` ([`state`]);
//! - its **ID space**: `IDUTIL_ID_SPACE`, else `default`. On a host, one
//!   state directory serves each shard of an ID space ([`host_lock`]); the
//!   processes that open it share the shard ([`state`], *Processes
//!   sharing a shard*).
//!
//! [`env`](mod@env) lists every variable. Apps that prefer to fail at start-up
//! rather than on the first ID call [`IdUtil::init`] (or
//! [`IdUtil::init_with`] and a [`Builder`]) first. Hot loops, custom
//! layouts and tests that drive the clock use a [`Generator`] of their own:
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
//! # std::env::set_var("IDUTIL_ID_SPACE", "doc-crate-builder"); // its own, beside other tests
//! use idutil::{Generator, ManualClock};
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
//! The `idutil` command (`cargo install idutil-cli`) issues, decodes and
//! inspects IDs from a shell: `idutil next -n 5`, `idutil decode
//! 1452736581206048`, `idutil state`.
//!
//! # Which API to use
//!
//! | you want                                     | use                                                      |
//! |----------------------------------------------|----------------------------------------------------------|
//! | a primary key, anywhere in an app            | [`IdUtil::next_id`] (`i64`), [`IdUtil::next`] ([`Id`])   |
//! | to fail at start-up, or set things in code   | [`IdUtil::init`], [`IdUtil::init_with`]                  |
//! | errors as values instead of a panic          | [`IdUtil::try_next_id`], [`Generator::next_id`]          |
//! | many IDs at once                             | [`Generator::next_ids`] ([`IdBatch`])                    |
//! | a generator of your own, a clock you drive   | [`Generator::builder`], [`ManualClock`]                  |
//! | IDs in tests that must not touch the disk    | [`IdUtil::init_ephemeral`], [`Builder::ephemeral`]       |
//! | a shard per instance across a fleet          | [`lease`] (features `postgres-lease`, `redis`)           |
//! | another split of the bits                    | [`Layout`]                                               |
//! | to read an ID, or an ID range for a time     | [`Id`] ([`Id::min_at`], [`Id::max_at`])                  |
//! | to inspect or repair a shard's state         | [`state`] (the command `idutil state`)                   |
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
//! with the classic 53-bit formula. When a second's sequence numbers run
//! out, the generator borrows the next second. The last representable
//! second is 2136-02-07T06:28:15Z; past it generators return
//! [`Error::EndOfRange`] and never wrap. Other splits, with optional clock
//! bits, are a [`Layout`]. In a database an ID is a `BIGINT` column
//! (SQLite: `INTEGER`) and the natural primary key: sorting by it sorts by
//! time, and [`Id::min_at`] turns a time range into an ID range.
//!
//! # How it stays unique
//!
//! Each part of the promise is documented where it is kept:
//!
//! - [`Generator`]: how an ID is issued, clock rollbacks, what a crash
//!   costs, a clock outside the layout's range or far ahead, `fork()`;
//! - [`state`]: the state file and its rules, processes sharing a shard,
//!   older copies and deleted files, recovery, and the state directory as
//!   a trust boundary;
//! - [`shard`]: which host names choose a shard, and which are refused;
//! - [`host_lock`]: one state directory per shard on a host, ID spaces,
//!   and other local users;
//! - [`lease`]: shards for a fleet, what every lease engine promises, and
//!   each engine's deployments.
//!
//! # The crates
//!
//! `idutil` is the crate an application names; its features bring in the
//! rest. Each crate is a folder of the repository:
//!
//! ```text
//! idutil-core             crates/core            Id, Layout, the Clock trait, env names,
//!  │                                              LeaseError, the ID's integrations
//!  ├── idutil-lease       crates/lease           the lease, whatever the store: holder,
//!  │    │                                         renewal (renewal.rs), the record, and
//!  │    │                                         what an engine implements (interface.rs)
//!  │    ├── idutil-lease-postgres  crates/lease-postgres   the PostgreSQL engine
//!  │    └── idutil-lease-redis     crates/lease-redis      the Redis engine
//!  └── idutil             src/                   the generator (src/generator/, where an
//!                                                 ID is built), the state files (src/state/,
//!                                                 where the disk is touched), the shard
//!                                                 (src/shard/), and the lease module that
//!                                                 knows the engines (src/lease/)
//! ```
//!
//! Without a lease feature no lease crate is built. The generator knows a
//! lease only as two crate-private traits (`src/durable/port.rs`); the
//! engines are chosen by URL scheme in one file, `src/lease/engines.rs`.
//!
//! # In tests
//!
//! An application's tests call `IdUtil` as production does, with no
//! setup: [`IdUtil`'s *In tests*](IdUtil#in-tests) says why, and when
//! [`IdUtil::init_ephemeral`] is the better choice.
//!
//! # Features
//!
//! - `serde`: [`Id`] as a JSON number, or a string with
//!   `#[serde(with = "idutil::serde::string")]`; reading accepts either and
//!   rejects negatives, values above 2<sup>53</sup> − 1, fractions and junk.
//! - `postgres-lease`: the shard leased from PostgreSQL ([`lease`]). The
//!   recommended lease.
//! - `redis`: the same lease from Redis.
//! - `sqlx`: [`Id`] as a column type (`BIGINT` in PostgreSQL and MySQL,
//!   `INTEGER` in SQLite) for any driver the application enables, in sqlx
//!   0.9; `sqlx-0_8` the same in sqlx 0.8 (from 0.8.6).
//! - `diesel`: [`Id`] as a `BigInt` on any backend, usable as a primary
//!   key, in diesel 2.3.
//! - `sea-orm`: [`Id`] as a SeaORM 2 column type and primary key
//!   (`auto_increment = false`).
//! - `rusqlite`: [`Id`] as an `INTEGER` in rusqlite 0.32 to 0.43.
//! - `postgres-types`: [`Id`] as an `INT8` for tokio-postgres and postgres
//!   (postgres-types 0.2).
//! - `schemars`: `JsonSchema` for [`Id`] (an `int64` from 0 to
//!   9007199254740991) and `idutil::serde::string::json_schema` for the
//!   string form, in schemars 1.
//! - `utoipa`: `ToSchema` for [`Id`] and
//!   `idutil::serde::string::openapi_schema` for the string form, in utoipa
//!   6; `utoipa-5` the same in utoipa 5 (`openapi_schema_utoipa5`).
//! - `ts-rs`: the TypeScript type of [`Id`] in ts-rs 12: `number`, declared
//!   as `Id` with a doc comment saying it is at most 2<sup>53</sup> − 1.
//! - `jiff`, `chrono`, `time`: `From<Id>` for `jiff::Timestamp` (jiff 1),
//!   `chrono::DateTime<Utc>` (chrono 0.4 from 0.4.35) and
//!   `time::OffsetDateTime` (time 0.3); `jiff-0_2` the same for jiff 0.2.
//!
//! A feature without a version in its name follows the newest release of
//! its crate; the previous major still in wide use has a feature of its own
//! (`sqlx-0_8`, `utoipa-5`, `jiff-0_2`), which can be on beside the newer
//! one. Both ends of every range above are checked in CI. sqlx 0.9 and
//! SeaORM 2 need Rust 1.94, newer than this crate's own minimum (1.89,
//! `rust-version`, with every other feature).
//!
//! Every feature builds alone, and a database integration that reads a
//! value that is not an ID returns an error.

#![doc = ""]
#![doc = include_str!("checked.md")]
// Where `unsafe` lives, said here only: three modules allow it, each with
// a `// SAFETY:` comment at every use. `fork` (the fork hook, the page the
// kernel empties in a child, and `ForkMutex`, the lock a child can always
// take), `exit` (the exit hook) and `host_lock::marks` (`fcntl` on a byte
// range, which neither std nor rustix offers).
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Unix only (`flock`, `fork`, the `std::os::unix` file calls), said at
// once rather than deep in a dependency: no module has a branch for
// anything else.
#[cfg(not(unix))]
compile_error!("idutil runs on Unix only (it locks its state files with flock and follows fork)");

mod clock;
mod durable;
mod error;
mod exit;
mod flock;
mod fork;
mod generator;
mod global;
pub mod host_lock;
#[cfg(any(feature = "postgres-lease", feature = "redis"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres-lease", feature = "redis"))))]
pub mod lease;
pub mod shard;
pub mod state;

// The values every idutil crate shares (`idutil-core`), by the paths this
// crate's modules use for them.
pub use idutil_core::env;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use idutil_core::serde;
use idutil_core::{id, layout, sync};

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, IdError, Result};
pub use generator::{
    Builder, Generator, IdBatch, DEFAULT_CLOCK_STEP_CONFIRM, DEFAULT_END_MARGIN,
    DEFAULT_MAX_CLOCK_STEP, DEFAULT_MEMBER_WAIT, DEFAULT_WINDOW, HEADROOM, MAX_HEADROOM,
    MAX_WINDOW,
};
pub use global::IdUtil;
pub use id::Id;
pub use layout::{Layout, LayoutError, ParseLayoutError, Parts, EPOCH_2000, MAX_TOTAL_BITS};

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
