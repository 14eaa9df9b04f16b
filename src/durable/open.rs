//! Opening a generator's durable state: which shard (given, from
//! `IDUTIL_SHARD` or the host name, or leased), which state file, and with
//! a lease the retry over shards whose state file this host still holds.

use std::path::Path;

use std::sync::Arc;

use super::port::LeaseSource;
use super::Durable;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::host_lock;
use crate::layout::Layout;
use crate::shard::{self, ShardSource};
use crate::state::{self, Store};

/// How the durability layer is set up beyond the state directory: with a
/// lease engine, the lease asked for (if any).
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    pub(crate) lease: Option<Arc<dyn LeaseSource>>,
}

/// Where a generator's state lives, as the builder asked for it.
pub(crate) struct Request<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) shard: Option<u32>,
    pub(crate) state_dir: Option<&'a Path>,
    pub(crate) id_space: Option<&'a str>,
    pub(crate) layout: &'a Layout,
    /// A shard leased without a record starts at this clock's second.
    pub(crate) time: &'a dyn Clock,
    /// An ephemeral generator (tests): no lease from the environment, and
    /// a shard of its own in its scratch directory.
    pub(crate) ephemeral: bool,
    /// How long a generator sharing its shard waits for another that holds
    /// a lock.
    pub(crate) member_wait: std::time::Duration,
    /// The generator's own lead cap (whole seconds), if it has one: with a
    /// lease, the smaller of it and the lease's is the cap in force.
    pub(crate) max_lead: Option<u64>,
}

/// Takes the shard (from the settings, `IDUTIL_SHARD`, the host name, or a
/// lease) and its state file's locks.
pub(crate) fn open(req: &Request<'_>) -> Result<(Durable, u32, ShardSource)> {
    // A lease that was asked for is never silently turned off (a build
    // without an engine refuses one from the environment).
    let from_env;
    let config = match &req.settings.lease {
        Some(config) => Some(config),
        None if req.ephemeral => None,
        None => {
            from_env = lease_from_env()?;
            from_env.as_ref()
        }
    };
    if let Some(config) = config {
        return open_leased(req, config);
    }
    let (shard, source) = shard::resolve_shard(req.shard, req.layout)?;
    let dir = state::state_dir(req.state_dir)?;
    if req.ephemeral {
        // Its own directory and ID space: nobody to share with, nothing to
        // take on the host.
        return Ok((Durable::new(Store::open(&dir, shard)?), shard, source));
    }
    let id_space = host_lock::resolve_id_space(req.id_space)?;
    let store = if cfg!(target_os = "linux") && state::boot_known() {
        Store::join(&dir, shard, &id_space, req.member_wait)?
    } else {
        Store::open_for_generator(&dir, shard, &id_space)?
    };
    Ok((Durable::new(store), shard, source))
}

fn open_leased(
    req: &Request<'_>,
    config: &Arc<dyn LeaseSource>,
) -> Result<(Durable, u32, ShardSource)> {
    if req.shard.is_none() && std::env::var_os(crate::env::SHARD).is_some() {
        log::warn!("{} is ignored: the shard is leased", crate::env::SHARD);
    }
    let dir = state::state_dir(req.state_dir)?;
    let id_space = host_lock::resolve_id_space(req.id_space)?;
    // A holder can lead no further than its generator's cap: the history
    // check's raise counts from the reach it records (lease::postgres,
    // *Restores and rewound histories*).
    let config = config.capped(req.max_lead);
    let mut skip = Vec::new();
    loop {
        let lease = config.acquire(req.layout, req.shard, &skip, req.time)?;
        let shard = lease.shard();
        match Store::open_for_generator(&dir, shard, &id_space) {
            Ok(store) => {
                return Ok((Durable::leased(store, lease), shard, ShardSource::Lease));
            }
            // A generator on this host still holds the shard's state
            // file although its lease expired: lease another shard.
            Err(Error::Locked { .. } | Error::HostLocked { .. }) if req.shard.is_none() => {
                skip.push(shard)
            }
            Err(e) => return Err(e),
        }
    }
}

/// The lease [`IDUTIL_LEASE_URL`](crate::env::LEASE_URL) asks for, if it
/// is set. A build without a lease engine refuses a set URL rather than
/// silently not leasing: [`Error::InvalidEnv`].
fn lease_from_env() -> Result<Option<Arc<dyn LeaseSource>>> {
    #[cfg(any(feature = "postgres-lease", feature = "redis"))]
    return crate::lease::from_env();
    #[cfg(not(any(feature = "postgres-lease", feature = "redis")))]
    match std::env::var_os(crate::env::LEASE_URL) {
        None => Ok(None),
        Some(url) => Err(Error::InvalidEnv {
            var: crate::env::LEASE_URL,
            // A URL may hold a password.
            value: if url.is_empty() {
                String::new()
            } else {
                "***".into()
            },
            reason: "set, but this build of idutil has no lease engine (features \
                     `postgres-lease`, `redis`); unset it, or build with one",
        }),
    }
}
