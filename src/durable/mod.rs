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
pub(crate) mod port;
mod shared;

use std::path::Path;
use std::sync::{Arc, Weak};

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::state::{StateFile, Store};

pub(crate) use open::{open, Request, Settings};
pub(crate) use shared::{Ask, Block, ClockVerdict};

/// The shard's durable state, owned by the generator's shard thread:
/// the only writer while the generator runs. Dropping it releases the
/// shard's locks.
pub(crate) struct Durable {
    store: Arc<Store>,
    lease: Option<Arc<dyn port::HeldShard>>,
}

/// The generator's hold on its shard beyond the state file, which the
/// hot path and the close consult: with a lease, when and why issuing
/// pauses (the lease's fence), and giving the shard back. Without a lease
/// issuing never pauses and there is nothing to give back.
pub(crate) struct ShardHold {
    lease: Option<Arc<dyn port::HeldShard>>,
    /// A member's store, to draw blocks from; `None` for an exclusive
    /// holder, which never draws. Owned by the shard thread: gone,
    /// with the shard's locks, once the generator closed.
    shared: Option<Weak<Store>>,
}

impl Durable {
    fn new(store: Store) -> Durable {
        Durable {
            store: Arc::new(store),
            lease: None,
        }
    }

    fn leased(store: Store, lease: Arc<dyn port::HeldShard>) -> Durable {
        Durable {
            store: Arc::new(store),
            lease: Some(lease),
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

    /// The state file as the last run (or, for a member that joins, the
    /// members) left it, if there is one.
    pub(crate) fn load(&self) -> Result<Option<StateFile>> {
        let turn = self.store.turn()?;
        let state = self.store.load();
        drop(turn);
        state
    }

    /// Whether this generator plans the restart: it holds the shard alone
    /// (exclusively, or first of the processes that share it).
    pub(crate) fn plans(&self) -> bool {
        self.store.is_first()
    }

    /// Whether other processes may share the shard: the generator then
    /// draws blocks of the counter ([`ShardHold::draw`]).
    pub(crate) fn is_shared(&self) -> bool {
        self.store.is_shared()
    }

    /// The first member has written its plan, starting at the counter value
    /// `start`: other processes may join.
    pub(crate) fn begin(&self, file: &StateFile, start: u64, now: u64) -> Result<()> {
        shared::begin(&self.store, file, start, now)
    }

    /// Where the first process to open a shared shard again may start, by
    /// the claim file, when it can be trusted ([`shared::frontier`]).
    pub(crate) fn frontier(&self, layout: &Layout, prev: &StateFile) -> Result<Option<u64>> {
        shared::frontier(&self.store, layout, prev)
    }

    /// The lowest counter value the first process to open a shared shard
    /// may start at, by what the members drew ([`shared::claim_floor`]).
    pub(crate) fn claim_floor(&self, layout: &Layout, prev: &StateFile) -> Result<Option<u64>> {
        shared::claim_floor(&self.store, layout, prev)
    }

    /// How `reading`, this process's clock, stands against the time the
    /// processes sharing the shard keep ([`shared::judge_clock`]).
    pub(crate) fn judge_clock(
        &self,
        reading: u64,
        seen_max: u64,
        max_step: u64,
        confirm: std::time::Duration,
    ) -> Result<ClockVerdict> {
        shared::judge_clock(&self.store, reading, seen_max, max_step, confirm)
    }

    /// Where to resume: `start` (worked out from this host's state file),
    /// or later if the shard's lease record says a holder elsewhere issued
    /// past it. The record covers every holder of the shard, the state file
    /// only this host: the later of the two wins, and the highest
    /// wall-clock second either saw goes into `file`.
    pub(crate) fn resume(&self, layout: &Layout, start: u64, file: &mut StateFile) -> u64 {
        match &self.lease {
            Some(lease) => lease.resume(layout, start, &mut file.seen_max),
            None => start,
        }
    }

    /// The generator's lead cap: `asked`, or with a lease at most the
    /// lease's (the lease settings' `max_lead`).
    pub(crate) fn max_lead(&self, asked: Option<u64>) -> Option<u64> {
        match &self.lease {
            Some(lease) => Some(lease.max_lead(asked)),
            None => asked,
        }
    }

    /// Reserves every second up to `until` (Unix seconds): writes `file`
    /// (which records it), then raises the shard's lease record. The
    /// reservation counts only once both have it.
    ///
    /// # Errors
    ///
    /// As [`Store::save`], and a lost or untrustworthy lease.
    ///
    /// The state as written: with other processes sharing the shard, `file`
    /// written over what they wrote.
    pub(crate) fn reserve(&self, file: &StateFile, until: u64) -> Result<StateFile> {
        let written = shared::save(&self.store, file)?;
        if let Some(lease) = &self.lease {
            lease.raise(until, written.seen_max)?;
        }
        Ok(written)
    }

    /// Closes cleanly: writes `file`, which holds the exact last ID, and
    /// hands it to the lease's record with the lease. If the state
    /// directory gave way ([`Error::StateReplaced`]) nothing goes to the lease's
    /// store: the caller stops for good.
    ///
    /// # Errors
    ///
    /// As [`Store::save`].
    ///
    /// A member of a shared shard passes its `cursor` (the first counter
    /// value it did not issue) and last `block`, and writes the state file
    /// only if it is the last to leave (see `shared::leave`).
    pub(crate) fn close(
        &self,
        layout: &Layout,
        file: &StateFile,
        cursor: u64,
        block: (u64, u64),
    ) -> Result<()> {
        let saved = shared::leave(&self.store, layout, file, cursor, block);
        if let Err(Error::StateReplaced { .. }) = saved {
            return saved;
        }
        if let Some(lease) = &self.lease {
            lease.finish(file.last, file.seen_max);
        }
        saved
    }

    /// What the generator keeps to learn when issuing pauses, and to give
    /// the shard back.
    pub(crate) fn hold(&self) -> ShardHold {
        ShardHold {
            lease: self.lease.clone(),
            shared: self.store.is_shared().then(|| Arc::downgrade(&self.store)),
        }
    }
}

impl ShardHold {
    /// Whether the generator draws blocks from a shared counter.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Draws a block of the shard's counter (see `shared::draw`). An
    /// exclusive holder's block is everything from `ask.from`.
    pub(crate) fn draw(&self, layout: &Layout, ask: Ask) -> Result<Block> {
        match &self.shared {
            Some(store) => match store.upgrade() {
                Some(store) => shared::draw(&store, layout, ask),
                None => Err(Error::Closed),
            },
            None => Ok(Block {
                start: ask.from,
                end: u64::MAX,
                reserved: ask.reserved,
            }),
        }
    }

    /// Calls `hook` whenever the lease's fence goes up (`true`) or down
    /// (`false`). Without a lease it is never called.
    pub(crate) fn on_fence(&self, hook: impl Fn(bool) + Send + Sync + 'static) {
        if let Some(lease) = &self.lease {
            lease.set_hook(Box::new(hook));
        }
    }

    /// Why issuing is paused: the lease's trouble behind its fence.
    /// `None` without a lease, which never pauses issuing.
    pub(crate) fn why_paused(&self) -> Option<Error> {
        self.lease.as_ref().map(|lease| lease.fence_error().into())
    }

    /// Gives the shard back without a last ID: every ID issued is below a
    /// reservation already recorded, and `seen` (Unix seconds) is the
    /// highest wall-clock second seen.
    pub(crate) fn give_up(&self, seen: u64) {
        if let Some(lease) = &self.lease {
            lease.finish(None, seen);
        }
    }
}
