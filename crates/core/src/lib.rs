//! The values every idutil crate shares: an [`Id`] and the [`Layout`] that
//! packs its parts, the [`Clock`] it reads its second from, the
//! environment variables' names ([`env`](mod@env)), and what a shard lease fails
//! with ([`lease_error`]).
//!
//! Applications use [`idutil`](https://docs.rs/idutil), which re-exports
//! everything public here; this crate exists so that the lease crates
//! (`idutil-lease` and its engines) build on these values without the
//! generator, and the generator without any lease crate.
//!
//! # The crates
//!
//! ```text
//! idutil-core            Id, Layout, Clock, env names, LeaseError   (this crate)
//!  ├── idutil-lease      the lease: holder, renewal, the record, the engines' interface
//!  │    ├── idutil-lease-postgres   the PostgreSQL engine
//!  │    └── idutil-lease-redis      the Redis engine
//!  └── idutil            the generator, the state files, the shard; the
//!                        facade whose features bring in the engines
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Unix only, as every idutil crate.
#[cfg(not(unix))]
compile_error!("idutil runs on Unix only (it locks its state files with flock and follows fork)");

// What the idutil crates share among themselves but applications never
// call (the counter arithmetic, the error constructors, the settings the
// engines read) is public, as crates need it, and `#[doc(hidden)]`: it is
// no part of the API that `idutil` re-exports (.ci/api keeps that list).
pub mod clock;
pub mod env;
pub mod error;
mod external;
pub mod id;
pub mod layout;
pub mod lease_error;
pub mod redact;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde;
pub mod sync;

pub use clock::{Clock, ManualClock};
pub use error::{EnvError, IdError};
pub use id::Id;
pub use layout::{Layout, LayoutError, ParseLayoutError, Parts, EPOCH_2000, MAX_TOTAL_BITS};
pub use lease_error::{LeaseError, LeaseResult};
