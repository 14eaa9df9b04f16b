//! What makes a generator's IDs survive it: the state file and, with a
//! lease engine (`postgres-lease`, `redis`), the shard's lease and record in
//! the lease's store, behind one small interface (where to resume, reserve
//! up to, close with the exact last ID, are we fenced).
//!
//! The generator never asks which of the two it runs on, nor which store
//! holds the lease. Every write goes to the state file first and then to
//! the lease, and counts only once both have it.

use std::path::Path;
#[cfg(feature = "lease")]
use std::sync::Arc;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::host_lock;
use crate::layout::Layout;
#[cfg(feature = "lease")]
use crate::lease::{Lease, LeaseConfig};
use crate::shard::{self, ShardSource};
use crate::state::{self, StateFile, Store};

/// Sets (`true`) or clears (`false`) the generator's fence.
pub(crate) type FenceHook = Box<dyn Fn(bool) + Send + Sync>;

/// How the durability layer is set up beyond the state directory: with a
/// lease engine, the lease asked for (if any).
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    #[cfg(feature = "lease")]
    pub(crate) lease: Option<LeaseConfig>,
}

/// Where a generator's state lives, as the builder asked for it.
pub(crate) struct Request<'a> {
    /// Read only with a lease.
    #[cfg_attr(not(feature = "lease"), allow(dead_code))]
    pub(crate) settings: &'a Settings,
    pub(crate) shard: Option<u32>,
    pub(crate) state_dir: Option<&'a Path>,
    pub(crate) id_space: Option<&'a str>,
    pub(crate) layout: &'a Layout,
    /// A shard leased without a record starts at this clock's second.
    #[cfg_attr(not(feature = "lease"), allow(dead_code))]
    pub(crate) time: &'a dyn Clock,
    /// An ephemeral generator (tests): no lease from the environment.
    pub(crate) ephemeral: bool,
}

/// The shard's durable state, owned by the generator's reservation thread:
/// the only writer while the generator runs. Dropping it releases the
/// shard's locks.
pub(crate) struct Durable {
    store: Store,
    #[cfg(feature = "lease")]
    lease: Option<Arc<Lease>>,
}

/// The side of the durability layer the hot path and the close consult:
/// why issuing is fenced, and giving the shard back.
pub(crate) struct Fence {
    #[cfg(feature = "lease")]
    lease: Option<Arc<Lease>>,
}

/// Takes the shard (from the settings, `IDUTIL_SHARD`, the host name, or a
/// lease) and its state file's locks.
pub(crate) fn open(req: &Request<'_>) -> Result<(Durable, u32, ShardSource)> {
    #[cfg(feature = "lease")]
    {
        let config = match &req.settings.lease {
            Some(config) => Some(config.clone()),
            None if req.ephemeral => None,
            None => LeaseConfig::from_env()?,
        };
        if let Some(config) = config {
            return open_leased(req, &config);
        }
    }
    // A lease that was asked for is never silently turned off.
    #[cfg(not(feature = "lease"))]
    for var in ["IDUTIL_LEASE_URL", "IDUTIL_REDIS_URL"] {
        if req.ephemeral {
            break;
        }
        if let Some(url) = std::env::var_os(var) {
            return Err(Error::InvalidEnv {
                var,
                // A URL may hold a password.
                value: if url.is_empty() {
                    String::new()
                } else {
                    "***".into()
                },
                reason: "set, but this build of idutil has no lease engine (features \
                         `postgres-lease`, `redis`); unset it, or build with one",
            });
        }
    }
    let (shard, source) = shard::resolve_shard(req.shard, req.layout)?;
    let dir = state::state_dir(req.state_dir)?;
    let id_space = host_lock::resolve_id_space(req.id_space)?;
    let store = Store::open_for_generator(&dir, shard, &id_space)?;
    Ok((Durable::new(store), shard, source))
}

#[cfg(feature = "lease")]
fn open_leased(req: &Request<'_>, config: &LeaseConfig) -> Result<(Durable, u32, ShardSource)> {
    if req.shard.is_none() && std::env::var_os(crate::env::SHARD).is_some() {
        log::warn!("{} is ignored: the shard is leased", crate::env::SHARD);
    }
    let dir = state::state_dir(req.state_dir)?;
    let id_space = host_lock::resolve_id_space(req.id_space)?;
    let mut skip = Vec::new();
    loop {
        let lease = Lease::acquire(config, req.layout, req.shard, &skip, req.time)?;
        let shard = lease.shard();
        match Store::open_for_generator(&dir, shard, &id_space) {
            Ok(store) => {
                let durable = Durable {
                    store,
                    lease: Some(Arc::new(lease)),
                };
                return Ok((durable, shard, ShardSource::Lease));
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

impl Durable {
    fn new(store: Store) -> Durable {
        Durable {
            store,
            #[cfg(feature = "lease")]
            lease: None,
        }
    }

    /// The state file.
    pub(crate) fn path(&self) -> &Path {
        self.store.path()
    }

    /// The state directory.
    pub(crate) fn dir(&self) -> &Path {
        self.store.dir()
    }

    /// The state file as the last run left it, if there is one.
    pub(crate) fn load(&self) -> Result<Option<StateFile>> {
        self.store.load()
    }

    /// Where to resume: `start` (worked out from this host's state file),
    /// or later if the shard's lease record says a holder elsewhere issued
    /// past it. The record covers every holder of the shard, the state file
    /// only this host: the later of the two wins, and the highest
    /// wall-clock second either saw goes into `file`.
    #[cfg_attr(not(feature = "lease"), allow(unused_variables))]
    pub(crate) fn resume(&self, layout: &Layout, start: u64, file: &mut StateFile) -> u64 {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            let record = lease.record();
            if let Some(seen) = record.seen {
                file.seen_max = file.seen_max.max(seen);
            }
            return start.max(record.resume_at(layout));
        }
        start
    }

    /// Reserves every second up to `until` (Unix seconds): writes `file`
    /// (which records it), then raises the shard's lease record. The
    /// reservation counts only once both have it.
    ///
    /// # Errors
    ///
    /// As [`Store::save`], and a lost or untrustworthy lease.
    #[cfg_attr(not(feature = "lease"), allow(unused_variables))]
    pub(crate) fn reserve(&self, file: &StateFile, until: u64) -> Result<()> {
        self.store.save(file)?;
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            lease.raise(until, file.seen_max)?;
        }
        Ok(())
    }

    /// Closes cleanly: writes `file`, which holds the exact last ID, and
    /// hands it to the lease's record with the lease. If the state
    /// directory gave way ([`Error::StateReplaced`]) nothing goes to the lease's
    /// store: the caller fences.
    ///
    /// # Errors
    ///
    /// As [`Store::save`].
    pub(crate) fn close(&self, file: &StateFile) -> Result<()> {
        let saved = self.store.save(file);
        if let Err(Error::StateReplaced { .. }) = saved {
            return saved;
        }
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            lease.finish(file.last, file.seen_max);
        }
        saved
    }

    /// The handle the generator keeps for fencing and giving the shard
    /// back.
    pub(crate) fn fence(&self) -> Fence {
        Fence {
            #[cfg(feature = "lease")]
            lease: self.lease.clone(),
        }
    }
}

impl Fence {
    /// Calls `hook` whenever the shard's lease is lost (`true`) or
    /// regained (`false`). Without a lease it is never called.
    #[cfg_attr(not(feature = "lease"), allow(unused_variables))]
    pub(crate) fn on_change(&self, hook: FenceHook) {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            lease.set_hook(hook);
        }
    }

    /// Why a fenced generator does not issue: the lease's trouble, or
    /// [`Error::Closed`] without one.
    pub(crate) fn error(&self) -> Error {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            return Error::Lease(lease.fence_error());
        }
        Error::Closed
    }

    /// Gives the shard back without a last ID: every ID issued is below a
    /// reservation already recorded, and `seen` (Unix seconds) is the
    /// highest wall-clock second seen.
    #[cfg_attr(not(feature = "lease"), allow(unused_variables))]
    pub(crate) fn give_up(&self, seen: u64) {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            lease.finish(None, seen);
        }
    }
}

#[cfg(feature = "lease")]
impl<C: Clock> crate::Builder<C> {
    /// Leases the shard from the store `config` names (PostgreSQL with
    /// feature `postgres-lease`, Redis with feature `redis`) instead of
    /// taking it from `IDUTIL_SHARD` or the host name. An explicit
    /// [`shard`](crate::Builder::shard) narrows the lease to that one shard.
    /// Without this call, `IDUTIL_LEASE_URL` (or `IDUTIL_REDIS_URL`) turns
    /// the lease on when it is set (set but empty or blank, opening fails
    /// with [`Error::InvalidEnv`]). See [`lease`](crate::lease).
    pub fn lease(mut self, config: LeaseConfig) -> Self {
        self.durable.lease = Some(config);
        self
    }

    /// The same as [`lease`](crate::Builder::lease), under its older name.
    pub fn redis_lease(self, config: LeaseConfig) -> Self {
        self.lease(config)
    }
}
