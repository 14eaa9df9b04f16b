//! The only place the disk is touched: the state directory, the per-shard
//! lock file, and the state file with its atomic replacement.
//!
//! Two files per shard live in the state directory:
//!
//! - `shard-N.lock`: never renamed or removed. A generator holds an
//!   exclusive `flock` on it (through `fs2`) for its whole life and writes
//!   its pid into it, so a second generator for the shard is refused with
//!   the holder's pid. Below the pid, a line `state` once the shard has
//!   had a state file here (a missing one is then refused, not a fresh
//!   start), and a line `high_water N`: the highest mark any state file of
//!   the shard held here, so that an older copy of the state file put back
//!   is refused (see the crate docs, *The state file*).
//! - `shard-N.state`: a small text file, replaced atomically (a temporary
//!   file in the same directory, `fsync`, `rename`, `fsync` of the directory).
//!
//! The state file looks like this (seconds are Unix seconds):
//!
//! ```text
//! # idutil state file for shard 7. ...
//! version = 2
//! layout = seconds:32 clock:0 sequence:16 shard:5 epoch:946684800
//! shard = 7
//! clock_id = 0
//! seen_max = 1763751234
//! seen_last_run = 1763751234
//! high_water = 0:1763751239
//! last = 1763751236 17
//! checksum = 5d1c0e0a
//! end
//! ```
//!
//! `high_water` lists, per clock value, the highest second an ID may have
//! been issued in; `last` (present only after a clean close) is the exact
//! last second and sequence issued. After a recovery that brought the shard
//! back from a clock far ahead, a line `skip = FIRST LAST` (then `version =
//! 3`) names the seconds issued far ahead, above every mark: generators
//! pass over them, and drop the line once past. `checksum` is the CRC-32 of every byte
//! before its line, so a changed digit that leaves the values plausible is
//! still caught. `end` marks a complete file. Version 1 files (the same
//! fields, no checksum) are still read; version 2 is this format without
//! a `skip` line, version 3 with one.
//!
//! Every value is checked when the file is read, and a file that breaks any
//! rule is refused ([`Error::BadState`](crate::Error::BadState)), never repaired: every second lies
//! within the layout's range (its epoch to its last second); `high_water`
//! lists each clock value at most once and has a mark for the current one
//! (`clock_id` modulo the clock values), at or above `seen_last_run` and
//! `last`'s second; `seen_last_run` is at most `seen_max`, which is at most
//! the highest mark; `last`'s sequence fits the layout; `clock_id` can
//! still be bumped. Reasons name lines and fields, never the file's text.
//!
//! A file that cannot be trusted is restarted with [`recover`] (the command
//! `idutil state recover`), which resumes after everything the old file
//! still says for certain, and refuses when it cannot know. In a version 2
//! file whose checksum fails nothing is certain (the changed byte may be a
//! digit of the mark); in a version 1 file, a legible mark is certain only
//! if no legible second of the file lies above it.
//!
//! This module is public for tools that look after state directories, the
//! `idutil state` command among them: [`inspect`] reads a shard's state
//! without disturbing its generator, and [`recover`] (or
//! [`plan_recovery`], to look before writing) restarts a shard whose file
//! cannot be trusted. Applications that only issue IDs never need it. Its
//! report types are `#[non_exhaustive]`: their fields are there to be
//! read, and a minor release may add more.

mod format;
mod inspect;
mod lock_file;
mod options;
mod paths;
mod recover;
mod rules;
mod salvage;
mod scratch;
mod store;
#[cfg(test)]
mod tests;
mod trust;

pub(crate) use format::check_layout;
#[doc(hidden)]
pub use format::checksum;
pub use format::{StateFile, STATE_VERSION};
pub use inspect::{inspect, StateReport};
pub use options::RecoverOptions;
pub use paths::{state_dir, state_path};
pub use recover::{plan_recovery, recover, OldState, Recovery, Remedy};
pub(crate) use scratch::scratch_dir;
pub(crate) use store::Store;
pub use trust::MAX_FILE_SIZE;
