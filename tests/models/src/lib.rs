//! Model checks of idutil's protocols (see `src/checked.md` in the
//! library for what is checked, how far, and how to run it).
//!
//! - [`hot`]: the generator's lock-free hot path, run under loom.
//! - [`shared`]: the processes sharing a shard, explored exhaustively to a
//!   bound.
//! - [`lease`]: the leased shard's holders and store, explored the same
//!   way.
//! - [`database`]: the database's own counter (`DEFAULT idutil_next_id()`)
//!   under concurrent sessions, explored the same way.
//!
//! Each model names the functions of the code it follows; its tests also
//! run a known-wrong variant and assert that the check catches it.

pub mod database;
pub mod explore;
pub mod hot;
pub mod lease;
pub mod shared;
