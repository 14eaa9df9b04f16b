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
//! - `serde`: `Serialize`/`Deserialize` for [`Id`], as a JSON number.
//! - `redis`: a shard lease from Redis, for fleets whose host names are not
//!   unique numbers.
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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod error;
mod generator;
mod global;
mod id;
mod layout;
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
