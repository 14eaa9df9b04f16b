//! The environment variables the crate reads, by name: everything a
//! deployment can set without code.
//!
//! Each is read where the setting it stands for is decided; an explicit
//! setting in code ([`idutil::Builder`](https://docs.rs/idutil/latest/idutil/struct.Builder.html), the command's flags)
//! always wins over the environment.
//!
//! ```
//! assert_eq!(idutil::env::STATE_DIR, "IDUTIL_STATE_DIR");
//! ```

/// The state directory ([`idutil::state::state_dir`](https://docs.rs/idutil/latest/idutil/state/fn.state_dir.html)); an
/// absolute path whose parent exists ([`idutil::state`](https://docs.rs/idutil/latest/idutil/state/), *Security:
/// the directory is a trust boundary*).
pub const STATE_DIR: &str = "IDUTIL_STATE_DIR";

/// The shard, when no shard is set in code
/// ([`idutil::shard::resolve_shard`](https://docs.rs/idutil/latest/idutil/shard/fn.resolve_shard.html)); it overrides the host
/// name.
pub const SHARD: &str = "IDUTIL_SHARD";

/// The host's ID space ([`idutil::host_lock::resolve_id_space`](https://docs.rs/idutil/latest/idutil/host_lock/fn.resolve_id_space.html);
/// default `default`): generators in different ID spaces on one host do not
/// exclude each other. Not the lease's ID space in its store: see
/// [`idutil::host_lock`](https://docs.rs/idutil/latest/idutil/host_lock/), *ID spaces*.
pub const ID_SPACE: &str = "IDUTIL_ID_SPACE";

/// The layout, in the text form of
/// [`Layout::fingerprint`](crate::Layout::fingerprint) (see
/// [`Layout`](crate::Layout)'s `FromStr`).
pub const LAYOUT: &str = "IDUTIL_LAYOUT";

/// The store to lease the shard from (`postgres://...`, `redis://...`),
/// read by `lease::LeaseConfig::from_env` (features `postgres-lease`,
/// `redis`). A build without a lease engine refuses to open a generator
/// while it is set, rather than silently not leasing.
pub const LEASE_URL: &str = "IDUTIL_LEASE_URL";
