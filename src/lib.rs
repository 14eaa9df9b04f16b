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
//! [`Generator`]:
//!
//! - its **shard** (5 bits, 0–31: which generator made the ID) comes from
//!   `IDUTIL_SHARD`, or else from the number that ends the host name
//!   (`web-7` → 7; see [The shard](#the-shard) for the names refused);
//! - its **state directory** (an absolute path) comes from
//!   `IDUTIL_STATE_DIR`, or else `$XDG_STATE_HOME/idutil` or
//!   `~/.local/state/idutil`;
//! - its **ID space** comes from `IDUTIL_ID_SPACE`, or else is `default`.
//!   One generator per shard and ID space may run on a host. Generators
//!   whose IDs go into the same table must share an ID space; the default
//!   puts every generator on a host in one (see *Security*).
//!
//! Apps that prefer to fail at start-up rather than on the first ID call
//! [`IdUtil::init`] (or [`IdUtil::init_with`] and a [`Builder`]) first. Tests,
//! hot loops and custom layouts use a [`Generator`] of their own:
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap(); // this example writes a state file
//! # std::env::set_var("IDUTIL_ID_SPACE", "doc-crate-builder"); // its own, beside other tests
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
//! The `idutil` command (`cargo install idutil-cli`) issues, decodes and
//! inspects IDs from a shell:
//! `idutil next -n 5`, `idutil decode 1452736581206048`, `idutil state`.
//!
//! # In tests
//!
//! An application's tests and doctests run in many processes at once
//! (rustdoc runs each doctest as a process, nextest each test), while on a
//! host only one generator holds a shard. So tests that reach `IdUtil`
//! call [`IdUtil::init_ephemeral`] first (in a doctest, as a hidden `# `
//! line, as this crate's own examples do): each process then has an
//! ephemeral generator of its own, in a temporary directory and an ID
//! space of its own, with no setup. Its IDs are unique within the process
//! only; nothing it issues may reach a shared database.
//!
//! ```
//! # fn main() -> Result<(), idutil::Error> {
//! // In a test, or hidden at the top of a doctest:
//! idutil::IdUtil::init_ephemeral()?;
//! let first = idutil::IdUtil::next_id(); // the code under test, unchanged
//! assert!(idutil::IdUtil::next_id() > first);
//! # Ok(())
//! # }
//! ```
//!
//! Tests that need several generators, or a clock they drive, build
//! their own ([`Builder::ephemeral`], or [`Generator::builder`] with a
//! [`ManualClock`], as above).
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
//! - `serde`: `Serialize`/`Deserialize` for [`Id`]: a JSON number, or a
//!   string with `#[serde(with = "idutil::serde::string")]`; reading
//!   accepts either and rejects negatives, values above 2<sup>53</sup> − 1,
//!   fractions and junk (module `idutil::serde`).
//! - `postgres-lease`: a shard lease from PostgreSQL, for fleets whose host
//!   names are not unique numbers, on the database the application already
//!   runs (`Builder::lease`, `IDUTIL_LEASE_URL=postgres://...`,
//!   `idutil --lease URL`; see *Beyond one host* below). The recommended
//!   lease.
//! - `redis`: the same lease from Redis, for one primary with
//!   `appendfsync always` and `noeviction` (`IDUTIL_LEASE_URL=redis://...`,
//!   or the older `IDUTIL_REDIS_URL` and `--redis`).
//! - `lease`: the lease interface alone, turned on by the two above.
//! - `sqlx`: [`Id`] is a sqlx column type (`Type`, `Encode`, `Decode`):
//!   `BIGINT` in PostgreSQL and MySQL, `INTEGER` in SQLite, for any
//!   driver the application enables (this crate enables none). Reading a
//!   value that is not an ID is an error.
//! - `diesel`: [`Id`] is a diesel `BigInt` (`AsExpression`, `FromSqlRow`,
//!   `ToSql`, `FromSql`) on any backend, usable as a table's primary key.
//! - `schemars`: `JsonSchema` for [`Id`], an integer of format `int64` from
//!   0 to 9007199254740991, and `idutil::serde::string::json_schema` for
//!   the string form (a pattern that admits exactly 0 to 9007199254740991).
//! - `utoipa`: `ToSchema` for [`Id`] (named `Id`, the same integer), and
//!   `idutil::serde::string::openapi_schema` for the string form. For
//!   utoipa 6 (`utoipa = "6"`): a `ToSchema` of utoipa 5 is another trait,
//!   which `Id` does not implement.
//! - `rusqlite`: `ToSql`/`FromSql` for [`Id`] in rusqlite (any of 0.32 to
//!   0.37, whichever the application uses; the tests run 0.32),
//!   an `INTEGER`; reading a value that is not an ID is an error.
//! - `postgres-types`: `ToSql`/`FromSql` for [`Id`] as an `INT8`
//!   (`BIGINT`), for tokio-postgres and postgres; reading a value that is
//!   not an ID is an error.
//! - `jiff`, `chrono`, `time`: `From<Id>` for `jiff::Timestamp`,
//!   `chrono::DateTime<Utc>` and `time::OffsetDateTime`: the second the ID
//!   was issued in, like [`Id::time`] gives a `SystemTime`.
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
//! When threads call at once, a call whose compare-and-swap loses waits 32
//! spin-loop hints (under a microsecond) before trying again, so that the
//! winning core keeps the counter's cache line and issues a run of IDs:
//! two threads together then issue about as fast as one, where retrying at
//! once made the cores trade the line on every attempt and cost several
//! times as much (BENCHMARKS.md, *Sustained burst*).
//!
//! The wall clock is read through the C library, as `std` does (so tools
//! such as `faketime` move it), but not once per ID: [`SystemClock`] caches
//! the current second in an atomic that a small background thread refreshes
//! at each second boundary. A clock step shows up within 250 ms; until then
//! IDs carry the previous second, unique and increasing either way.
//!
//! ## `fork()`
//!
//! A child created by `fork()` gets a copy of every generator its parent
//! had open: the same position, the same state file, but not its
//! reservation thread. Issuing from that copy would repeat the parent's
//! IDs, so a child never does: a `pthread_atfork` hook, installed when the
//! first generator opens, counts forks in the child, and every call on a
//! generator opened before the fork returns [`Error::Forked`]. The hot
//! path pays one load of a static and a compare per call, no system call.
//! Closing or dropping the copy in the child stops only the copy (nothing
//! is written, the parent's thread is not waited for), and the cached wall
//! clock starts its own thread in the child. The child keeps the parent's
//! locks through the descriptors it inherited (closed at `exec`), so it
//! opens a generator on another shard: for [`IdUtil`],
//! [`IdUtil::init_with`]. IDs already taken before the fork, in an
//! [`IdBatch`] not yet read, are in both processes' memory: read a batch
//! before forking, not after. The hook is the crate's only `unsafe` code.
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
//! ## Three things called clock
//!
//! The word has three meanings here, each with its own name:
//!
//! - the **time source**: the [`Clock`] trait, which [`SystemClock`] (the
//!   wall clock) and [`ManualClock`] (a clock a test drives) implement, and
//!   [`Builder::clock`] sets. Inside the crate, a time source is called
//!   `time`;
//! - the **clock id**: the persistent counter in the state file, bumped
//!   when a rollback across a restart is found (`clock_id`, shown by
//!   `idutil state`);
//! - the **clock value**: the clock id modulo 2<sup>k</sup>, carried in the
//!   layout's `k` clock bits ([`Layout::clock_bits`], [`Parts::clock`]);
//!   high-water marks are kept per clock value.
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
//! issued until the file says so. A clean close ([`Generator::close`] or
//! drop) writes the exact last second and sequence, so a restart within the
//! same second continues right after it. After a crash the next generator
//! starts after the high-water second instead: a little ahead, never behind.
//!
//! ## What a crash costs
//!
//! Each reservation reaches a **window** (5 s by default,
//! [`Builder::window`]) plus a **headroom** past the second it is asked
//! for. The headroom is what the generator issues in a quarter second
//! ([`HEADROOM`]) at its recent rate: nothing for a generator that follows
//! the clock, about 380 borrowed seconds for one thread issuing flat out
//! (100 million IDs a second). A background thread asks for the next
//! reservation when half the room is used (half the window, while the
//! generator follows the clock), so the hot path does not wait on the disk
//! unless the disk cannot write a small file in an eighth of a second.
//!
//! So after a crash the next run's first ID is at most a window plus a
//! headroom past the last ID issued. The headroom is measured from the
//! IDs the generator really issued (at most twice what it issued in the
//! last three quarters of a second, and never more than
//! [`MAX_HEADROOM`]), never from how far ahead it already runs. A
//! restarted generator starts with no rate at all, so crashes cannot
//! compound: N crashes in a row cost at most N such skips. The reservation
//! kept in Redis under a lease is the same one.
//!
//! A reservation write that fails (a full disk, an I/O error) is answered
//! to every call waiting on it, each with the error; none waits for ever,
//! and the next call that needs the reservation asks for it again, so a
//! disk that recovers lets issuing go on after everything before.
//!
//! A signal is not a crash: the `idutil` command stops issuing on SIGTERM,
//! SIGINT or SIGHUP, flushes what it printed, closes the generator (which
//! records the exact last ID) and exits with 128 + the signal number, so
//! the next run continues right after it.
//!
//! ## A clock outside the layout's range
//!
//! A wall clock that reads a second before the layout's epoch or after its
//! last second (a dead RTC battery, a clock set to 2140) says nothing about
//! which IDs are free. Opening a generator under such a clock fails with
//! [`Error::ClockOutOfRange`] before anything is read, created, locked or
//! written; a running
//! generator returns that error from every call while the clock reads so,
//! records nothing of the reading, and issues normally once the clock is
//! sane again.
//!
//! ## A clock far ahead
//!
//! A clock that jumps far ahead for a moment (a bad NTP answer, an RTC read
//! wrongly at boot, a 32-bit `time_t` that wraps in 2106) could push a
//! shard decades ahead, where its IDs no longer sort or query by time, or
//! to the end of the layout's range, where it issues nothing ever again.
//! Two settings keep that from happening silently:
//!
//! - **The end margin** ([`Builder::end_margin`], default one day,
//!   [`DEFAULT_END_MARGIN`]): the last day of the layout's range is kept
//!   clear. A clock that reads there is treated as outside the range
//!   ([`Error::ClockOutOfRange`]: nothing issued, nothing recorded), and a
//!   shard that reaches it, by borrowing or from its state file, stops with
//!   [`Error::EndMarginReached`], which opening reports before it writes
//!   anything. So a clock at 2136-02-07T06:28:10 for a moment costs the
//!   shard nothing. A deployment that really runs in 2136 sets a smaller
//!   margin (`Duration::ZERO` issues up to [`Id::MAX`]).
//! - **The forward-step limit** ([`Builder::max_clock_step`], default one
//!   day, [`DEFAULT_MAX_CLOCK_STEP`]): a running generator keeps where the
//!   clock should be (the last reading it acted on plus the time elapsed
//!   since, by the monotonic clock). A reading further ahead than the limit
//!   is logged and not followed: IDs go on at the time before the step.
//!   Once the new time has held for [`Builder::clock_step_confirm`]
//!   (default five minutes, [`DEFAULT_CLOCK_STEP_CONFIRM`]) the generator
//!   follows it and logs that it did; a clock that comes back first was
//!   never followed. Smaller steps, and every step of a generator opened
//!   with `max_clock_step(None)`, are followed at once. The monotonic clock
//!   stops while the machine sleeps, so after a suspend of more than a
//!   day the generator follows the clock five minutes late, issuing
//!   meanwhile at the time it went to sleep, unique and increasing.
//!
//! What these do not cover: a generator *opened* while the clock is far
//! ahead has no earlier reading of its own to compare with (a run of the
//! `idutil` command at that moment, say), so it starts there, and the
//! shard stays that far ahead, since a generator never resumes before
//! anything the state file says may have been issued. IDs stay unique and
//! increasing, with times in the future.
//!
//! **The way back** is a recovery in which the operator vouches for the
//! time the clock skipped: `idutil state recover --unused-from A
//! --unused-to B` ([`state::RecoverOptions::unused`]) says that no ID of
//! the shard has a second from `A` up to `B` (for a clock that jumped to
//! 2100 for a moment: `A` a little after the last real ID, `B` the wrong
//! time). The shard then resumes after the latest second anything accounts
//! for before `A` (and after the wall clock), and the state file records
//! the seconds from `B` to the latest it accounts for, where IDs were
//! issued while the clock was wrong, in a `skip` line. A generator never
//! reserves into those seconds and, when it reaches them (by the clock in
//! 2100, or by borrowing), passes over them; a generator that opens
//! inside them starts after them. So the IDs issued far ahead stay unique,
//! and the shard issues at the real time again. The recovery refuses when
//! anything the state file records (a mark, the last ID, a clock reading,
//! the lock file's mark) lies inside the interval, or when the wall clock
//! is still past its start.
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
//! **An older copy of the state file is refused.** The lock file, never
//! replaced, keeps the highest high-water mark any state file of the shard
//! held in the directory (a line `high_water N`, written after each state
//! file lands). A state file whose marks are all below it is an older copy
//! put back (from a backup, a snapshot, a careless `cp`): opening fails
//! with [`Error::BadState`] naming both marks, `idutil state` says so, and
//! `idutil state recover` resumes after the lock file's mark. It catches a
//! state file restored alone; **it cannot catch a whole directory
//! restored**, lock file included, nor a file system rolled back: the copy
//! and the mark then agree. The lock file's mark is not `fsync`ed on every
//! write (that would double the disk's work), so after a power loss it may
//! lag the state file by a write: that can only let an older copy pass,
//! never refuse a current one. A garbled mark line is refused too, and a
//! recovery rewrites it. A read of the lock file that fails (EIO, say) is
//! an error naming the file, never taken for "no state file was ever
//! written".
//!
//! A state file that is unreadable, truncated, from an unknown version or
//! for another layout, or that holds any value its layout rules out (a
//! second outside the layout's range, a high-water mark below the last
//! issued second or the last run's clock, a clock value listed twice, an
//! empty `high_water`), is never reset or repaired silently. Opening fails
//! with [`Error::BadState`], which names the file and says to recover the
//! shard: [`state::recover`] (the command `idutil state recover --shard N
//! --state-dir DIR`, which the command's message spells out) restarts it
//! conservatively. Every stored value is checked with checked
//! arithmetic, so no file can make a generator wrap around and start over.
//!
//! ## Recovery
//!
//! `idutil state recover` never resumes before anything that may have been
//! issued, save the interval an operator vouches unused with
//! `--unused-from`/`--unused-to` (see *A clock far ahead*):
//!
//! - When the old file's high-water mark can be read with certainty (a
//!   complete, legible `high_water` line of a version-1 file for this shard,
//!   every mark within the layout's range), the shard resumes after the
//!   latest second anything accounts for: every mark, the last issued
//!   second and the seen seconds still legible, the wall clock, and
//!   `--after` if given, plus the reservation window.
//! - When it cannot (no state file, a zero-length or truncated one, a
//!   missing, garbled, empty or out-of-range `high_water` line, an unknown
//!   version, another shard's file), it refuses with
//!   [`state::Remedy::After`], and the command says to pass `--after
//!   TIME`: a time you vouch for, no ID of the shard being later. It accepts
//!   Unix seconds or RFC 3339 with any offset, and refuses a time that
//!   would leave no second of the layout: a dead shard is never created.
//! - A healthy file is replaced only with `--force`
//!   ([`state::Remedy::Force`] otherwise).
//!
//! It prints what it will do before doing it (`--dry-run` prints only),
//! bumps the clock id, and keeps the old file as `shard-N.state.bad`
//! (written through a temporary file and a rename, so a link at that path is
//! replaced, never written through). The file's modification time is not
//! evidence: a copy or a restore changes it.
//!
//! **The state directory must persist.** In a container it must be a
//! persistent volume that outlives the container, not its writable layer,
//! and one shard's state must live in exactly one directory: two state
//! directories for one shard are two independent histories. On one host
//! (one mount namespace) the per-host lock refuses a second live
//! generator for a shard whatever its directory (see *Security*), but
//! nothing can tell that a directory used yesterday is not the one used
//! today, and containers with a `/run/lock` of their own do not see each
//! other's locks.
//!
//! ## The shard
//!
//! The shard comes from the explicit setting, else `IDUTIL_SHARD`, else the
//! number that ends the short host name (the part before the first `.`),
//! where that number numbers the host. Host-name shards are safe only
//! where names are unique and numbered (Kubernetes StatefulSets, numbered
//! VMs); two hosts that end in the same number issue duplicate IDs. Fleets
//! with random names need an explicit shard per instance, or a
//! lease. So the host name is read strictly, and a name that cannot be
//! trusted is refused rather than given a shard that may collide:
//!
//! - The short name is split at `-` and `_`. Its last part must be a
//!   number, either alone (`web-7`, `node-007`) or after letters (`db3`);
//!   leading zeros are ignored. That number is the shard, and a number
//!   beyond the layout's range is an error, never a fallback to another
//!   shard.
//! - Endings that look random are refused
//!   ([`Error::UnusableHostname`]): a last part with letters after a
//!   digit (`web-7a`, Windows' `DESKTOP-7H3K2LQ`); a short name of 12 or
//!   more hex digits (a container id); a Kubernetes Deployment pod name
//!   `name-<hash>-<suffix>`, recognised by a hash of 5 or more characters
//!   with letters after a digit, or by a 5–10 and a 5 character ending
//!   drawn only from the characters Kubernetes generates names from
//!   (consonants and the digits 2, 4–9); and EC2's default `ip-A-B-C-D`,
//!   whose last number is the last byte of a private address and repeats
//!   in every subnet (and is mostly above 31).
//! - A short name that does not end in a number (`host`, `win10-desktop`)
//!   gets shard 0 with a `log::warn!`, since several such hosts collide.
//!   [`Generator::shard_source`] says which case applied.
//!
//! With the default layout (shards 0 to 31):
//!
//! | host name                     | shard                  | why                                              |
//! |-------------------------------|------------------------|--------------------------------------------------|
//! | `web-7`                       | 7                      | the last part is a number                        |
//! | `web-0`                       | 0                      | a StatefulSet ordinal                            |
//! | `web-31`                      | 31                     | the largest shard                                |
//! | `node-007`                    | 7                      | leading zeros are ignored                        |
//! | `db3`                         | 3                      | letters, then a number                           |
//! | `api-2.prod`                  | 2                      | the short name is `api-2`                        |
//! | `web-32`                      | refused: out of range  | beyond 0..=31                                    |
//! | `web-99999999999999999999999` | refused: out of range  | reported with the digits as written              |
//! | `host`                        | 0, with a warning      | no number                                        |
//! | `web.42`                      | 0, with a warning      | the short name `web` has no number               |
//! | `win10-desktop`               | 0, with a warning      | the number is not at the end                     |
//! | `a1b2c3d4e5f6`                | refused                | a container id                                   |
//! | `deadbeefcafe`                | refused                | a container id, even without digits              |
//! | `web-5f7c9-abc1`              | refused                | a Deployment pod: `5f7c9` is a hash              |
//! | `api-6c8d9-xyz1`              | refused                | a Deployment pod                                 |
//! | `web-bcdfg-24567`             | refused                | a Deployment pod: generated characters           |
//! | `web-7a`                      | refused                | letters after the digits                         |
//! | `desktop-7h3k2lq`             | refused                | letters and digits mixed                         |
//! | `ip-10-0-3-17`                | refused                | 17 is an address byte, repeated in every subnet  |
//!
//! Letters may be in either case. A name that is
//! refused, or that warns, is fixed by `IDUTIL_SHARD` (or `--shard`, or
//! [`Builder::shard`]), a StatefulSet, or a lease.
//!
//! ## Beyond one host: the lease
//!
//! With a lease engine, a generator leases its shard from a store the
//! fleet shares instead (`Builder::lease`; `IDUTIL_LEASE_URL`, which
//! [`IdUtil`] also reads; `idutil --lease URL`). Use it when instances
//! come and go under names that are not unique numbers: Kubernetes
//! Deployments, autoscaling groups, containers without persistent
//! volumes. The shard's high-water second travels with the lease, so each
//! holder resumes after everything the shard's previous holders issued,
//! and a container needs no persistent state directory. Where names are
//! numbered and stable (StatefulSets, numbered VMs), the host-name shard
//! needs no extra moving part and is the better choice.
//!
//! - **PostgreSQL** (feature `postgres-lease`, `postgres://`): the
//!   recommended engine. One table, a fencing epoch, expiry by the
//!   server's clock; with a synchronous standby no duplicate through
//!   failover or split brain. See `lease::postgres`.
//! - **Redis** (feature `redis`, `redis://`): for one primary with
//!   `appendfsync always` and `noeviction`; replicas are waited for
//!   (`WAIT`). See `lease::redis` for which deployments keep the promise.
//!
//! The rules both follow (a mark never lowered, records read strictly, a
//! local monotonic fence, the host's clock compared with the store's,
//! unusable shards skipped) are in the `lease` module's docs. A fleet
//! larger than 32 chooses a layout with more shard bits without code
//! (`IDUTIL_LAYOUT`, `idutil --layout`; ready layouts under [`Layout`]'s
//! `FromStr`); the store remembers each ID space's layout and refuses
//! another.
//!
//! **Kubernetes, stateless (a Deployment with a lease).** Point every
//! replica at the application's own PostgreSQL; no volume is needed:
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
//!               value: /tmp/idutil   # an emptyDir or the container's own /tmp: the lease carries the marks
//! ```
//!
//! Size the shard range to the largest number of replicas plus those that
//! may be dead but still leased (one TTL, 10 s by default).
//!
//! # Security
//!
//! The state directory is a trust boundary, treated the way `sshd` treats
//! `~/.ssh`. **Only the user that runs the generator may write it**: anyone
//! who can delete or replace its files can make a generator re-issue IDs.
//!
//! **What is checked.**
//!
//! - The state directory must be an absolute path (a relative one names a
//!   different directory in each working directory); otherwise
//!   [`Error::RelativeStateDir`], and the command exits 2.
//! - A missing state directory is created with mode 0700, missing parents
//!   too, whatever the umask; lock, state and temporary files are created
//!   0600.
//! - The state directory itself must not be a symbolic link (its parents
//!   may be; a trailing `/` or `/.` does not hide a link). It, and every
//!   file the generator opens in it, must belong to the effective user and
//!   must not be writable by others, nor by a group other than the
//!   process's own; every directory above it must belong to that user or
//!   to root and be writable by no one else unless it is sticky (like
//!   `/tmp`), since whoever may rename entries there could move the state
//!   away. Files must have a single name (no hard links: writing one would
//!   write its other names). Otherwise [`Error::Untrusted`], with the
//!   `chmod` or `chown` that fixes it.
//! - **Group write: the process's own group only.** Write access for a
//!   group counts as "no one else" when the group is the process's
//!   effective (primary) group, and never for a supplementary group. sshd's
//!   `StrictModes` accepts a group-writable `~/.ssh` only when the group
//!   has exactly one member, the owner, which it reads in `/etc/group`;
//!   in a container the group a volume is shared with (Kubernetes'
//!   `fsGroup`) has no entry there, and kubelet makes every file of the
//!   volume group-writable at each mount. So idutil trusts the group the
//!   process runs with, as the administrator who chose it does: do not run
//!   the generator with a primary group that untrusted users share. Write
//!   access for everyone is trusted only on a sticky directory above the
//!   state directory, never on the state directory or its files. This
//!   accepts a Kubernetes volume prepared for `fsGroup` (its root owned by
//!   root, setgid, mode 2775; the pod's files group-writable) when the pod
//!   runs with `runAsGroup` equal to `fsGroup`, and OpenShift's volumes
//!   (group 0, group-writable) for its random uids, whose primary group is
//!   0. It refuses an `emptyDir` (mode 0777, not sticky): any process in
//!   the pod could move the state away; it is not persistent either. The
//!   README has a StatefulSet recipe.
//! - A failure with the platform's default directory (no
//!   `IDUTIL_STATE_DIR`; `HOME=/` in a container gives `/.local/...`) is
//!   [`Error::DefaultStateDir`], whose message says to set
//!   `IDUTIL_STATE_DIR`.
//! - A shard that opens with no state file in its directory starts at the
//!   clock and logs a warning saying so: if the shard issued IDs before from
//!   another directory (a container restarted without its volume), those
//!   IDs can come again. The `idutil` command prints it.
//! - Files in the directory are opened relative to the directory's
//!   descriptor, without following symbolic links and without blocking,
//!   and must be regular files of at most 64 KiB: a symbolic link, a FIFO, a
//!   device or a huge file is refused at once, never followed, waited on or
//!   read to exhaustion. Errors never quote a file's contents beyond
//!   idutil's own format. The state file and `shard-N.state.bad` are
//!   replaced by renaming a new file over them, which replaces a symbolic
//!   link itself, never its target.
//! - **Deleted state is not a fresh start.** Once a shard has written a state
//!   file in a directory, its lock file records it (a line `state`). A
//!   missing state file is then [`Error::BadState`], never a restart at the
//!   clock; `idutil state recover --after TIME` (the latest time IDs of the
//!   shard may have reached, or now if none were issued ahead of the
//!   clock) is the way out. Deleting the lock file too
//!   (or the whole directory) does make a fresh start: that is data loss
//!   idutil cannot see.
//!
//! **A live generator notices when its ground is pulled away.** It holds the
//! state directory and the lock file open. Before each write of the state
//! file it checks that the directory's path still names the directory it
//! opened, and the lock file's path the file it locked (same device and
//! inode). If not, because someone deleted or replaced either, it fences
//! itself: it issues no further ID, writes nothing more (not even at close),
//! and every later call returns [`Error::StateReplaced`]. Writes go through the
//! directory's descriptor, so a generator never writes into a directory
//! someone recreated at the same path. IDs issued before the fence are
//! within the reservation the old state file recorded, and a new generator
//! on a recreated, empty directory knows nothing of them, starting at the
//! clock. So a fenced generator keeps its shard on the host (see below)
//! until the wall clock has passed every second it reserved, for at most a
//! minute; closing or dropping it waits for that (a few seconds for a
//! generator that follows the clock). A generator that had borrowed more
//! than a minute ahead, or a fenced process killed with SIGKILL before its
//! wait is over, gives the shard up early, and a generator that starts
//! over in the recreated directory can then issue its last IDs again: do
//! not delete a live generator's state.
//!
//! **One shard, one generator per host.** Besides the lock file, a
//! generator holds its shard on the host through an exclusive `flock` on a
//! file in a host-wide directory: `/run/lock/idutil.<ID space>.shard-<N>.lock`
//! (or in `/dev/shm`, else `/tmp`, where there is no `/run/lock`). The
//! kernel drops the lock when the process exits, however it exits. A second
//! generator for the shard in the same ID space, in this process or
//! another, with any state directory, gets [`Error::HostLocked`] naming the
//! holder's pid (from `/proc/locks`). The holder removes the file when it
//! lets go (every taker checks, after locking, that the file it locked is
//! still the one at the path). The scope is the mount namespace: processes
//! in other network namespaces share the lock, while containers with a
//! `/run/lock` of their own are separate hosts to it, so give them distinct
//! shards (or a lease). Outside Linux only the lock file in the state
//! directory applies.
//!
//! **Another local user and the per-host lock.** A lock that must stop two
//! users' generators (an application's, and an administrator's `sudo
//! idutil next`) from sharing a shard needs a name every user can take,
//! and a name every user can take can be taken first by a hostile one:
//! no shared mechanism prevents that, and a per-user one would let two
//! users issue the same IDs. idutil keeps the shared name and makes the
//! cost of hostility small and visible:
//!
//! - Nothing is served: the generator never reads or answers anything on
//!   the lock file after taking it, so another user who opens, probes or
//!   floods it, or the directory, costs a generator nothing, and cannot
//!   stall an ID, a save or a SIGTERM. (Earlier versions listened on an
//!   abstract Unix socket, which another user could flood to stall every
//!   reservation write.)
//! - A name held by a process of another user is refused as
//!   [`Error::HostLocked`] naming the holder's pid, its user and the file,
//!   and saying that if it is not an idutil generator of that user it took
//!   the name to block the shard, which an administrator can end (root can
//!   remove the file; `/run/lock` is sticky, so its owner and root are the
//!   only ones who can). A file idutil never makes (a FIFO, a symbolic
//!   link, another user's file this user may not open) is
//!   [`Error::HostLockUnusable`], refused at once, never followed or
//!   waited on.
//! - Meanwhile another shard, or an ID space of its own for IDs that never
//!   share a table, goes on. A hostile user can take every name of an ID
//!   space it knows: that is a denial of service an administrator ends, not
//!   a duplicate ID.
//!
//! **ID spaces.** The per-host lock is per ID space
//! ([`Builder::id_space`], `IDUTIL_ID_SPACE`, `idutil --id-space NAME`;
//! 1 to 64 characters of `A-Z a-z 0-9 . _ -`; default `default`), so that
//! independent ID spaces, such as two apps with separate databases on one
//! host, can use the same shard numbers. **Generators whose IDs go into the
//! same table must share an ID space**: in two spaces, the same shard
//! issues the same IDs. The default puts every generator on a host in one
//! space, which is always safe.
//! //!
// `unsafe` only in `fork` (one call to `pthread_atfork`), allowed there.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod durable;
pub mod env;
mod error;
mod external;
mod fork;
mod generator;
mod global;
pub mod host_lock;
mod id;
mod layout;
#[cfg(feature = "lease")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres-lease", feature = "redis"))))]
pub mod lease;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde;
pub mod shard;
pub mod state;
mod sync;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, IdError, Result};
pub use generator::{
    Builder, Generator, IdBatch, DEFAULT_CLOCK_STEP_CONFIRM, DEFAULT_END_MARGIN,
    DEFAULT_MAX_CLOCK_STEP, DEFAULT_WINDOW, HEADROOM, MAX_HEADROOM, MAX_WINDOW,
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
