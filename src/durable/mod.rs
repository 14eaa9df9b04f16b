//! What makes a generator's IDs survive it: the state file and, with a
//! lease engine (`postgres-lease`, `redis`), the shard's lease and record in
//! the lease's store, behind one small interface (where to resume, reserve
//! up to, close with the exact last ID, is issuing paused). Which shard and
//! which store a generator opens is decided in `open`.
//!
//! The generator never asks which of the two it runs on, nor which store
//! holds the lease. Every write goes to the state file first and then to
//! the lease, and counts only once both have it.

mod open;

use std::path::Path;
#[cfg(feature = "lease")]
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::layout::Layout;
#[cfg(feature = "lease")]
use crate::lease::Lease;
use crate::state::{StateFile, Store};

pub(crate) use open::{open, Request, Settings};

/// Called when the lease's fence goes up (`true`: the lease is not known
/// to be held, issuing pauses) or down (`false`: issuing may go on).
pub(crate) type FenceHook = Box<dyn Fn(bool) + Send + Sync>;

/// The shard's durable state, owned by the generator's reservation thread:
/// the only writer while the generator runs. Dropping it releases the
/// shard's locks.
pub(crate) struct Durable {
    store: Store,
    #[cfg(feature = "lease")]
    lease: Option<Arc<Lease>>,
}

/// The generator's hold on its shard beyond the state file, which the
/// hot path and the close consult: with a lease, when and why issuing
/// pauses (the lease's fence), and giving the shard back. Without a lease
/// issuing never pauses and there is nothing to give back.
pub(crate) struct ShardHold {
    #[cfg(feature = "lease")]
    lease: Option<Arc<Lease>>,
}

impl Durable {
    fn new(store: Store) -> Durable {
        Durable {
            store,
            #[cfg(feature = "lease")]
            lease: None,
        }
    }

    #[cfg(feature = "lease")]
    fn leased(store: Store, lease: Lease) -> Durable {
        Durable {
            store,
            lease: Some(Arc::new(lease)),
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

    /// The generator's lead cap: `asked`, or with a lease at most the
    /// lease's ([`LeaseConfig::max_lead`](crate::lease::LeaseConfig::max_lead)).
    pub(crate) fn max_lead(&self, asked: Option<u64>) -> Option<u64> {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            return Some(lease.max_lead(asked));
        }
        asked
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
    /// store: the caller stops for good.
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

    /// What the generator keeps to learn when issuing pauses, and to give
    /// the shard back.
    pub(crate) fn hold(&self) -> ShardHold {
        ShardHold {
            #[cfg(feature = "lease")]
            lease: self.lease.clone(),
        }
    }
}

impl ShardHold {
    /// Calls `hook` whenever the lease's fence goes up (`true`) or down
    /// (`false`). Without a lease it is never called.
    #[cfg_attr(not(feature = "lease"), allow(unused_variables))]
    pub(crate) fn on_fence(&self, hook: FenceHook) {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            lease.set_hook(hook);
        }
    }

    /// Why issuing is paused: the lease's trouble behind its fence.
    /// `None` without a lease, which never pauses issuing.
    pub(crate) fn why_paused(&self) -> Option<Error> {
        #[cfg(feature = "lease")]
        if let Some(lease) = &self.lease {
            return Some(Error::Lease(lease.fence_error()));
        }
        None
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
