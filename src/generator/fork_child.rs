//! The generator a child of `fork()` opens in place of its parent's copy
//! (see [`Generator`], *`fork()`*).

use std::sync::Arc;

use super::Generator;
use crate::clock::Clock;
use crate::error::{Error, Result};

/// The generator a child of `fork()` opened in place of its parent's copy,
/// once per process: tagged with the fork count it was opened at, so that
/// a grandchild opens one of its own again.
///
/// Behind a [`ForkMutex`](crate::fork::ForkMutex), held only to look or
/// to record, never while opening: a thread of the child may be opening
/// when the child forks again, and the grandchild must not wait for it.
pub(super) struct ForkChild<C: Clock> {
    opened: crate::fork::ForkMutex<Option<(u64, Arc<Generator<C>>)>>,
}

impl<C: Clock> Default for ForkChild<C> {
    fn default() -> Self {
        ForkChild {
            opened: crate::fork::ForkMutex::new(None),
        }
    }
}

impl<C: Clock> Generator<C> {
    /// In a child of `fork()`, the generator the child opened from the
    /// same settings, opening it on first use.
    #[cold]
    pub(super) fn in_child(&self) -> Result<Arc<Generator<C>>> {
        if crate::fork::raw() {
            // Made without the fork hook: see `Generator`, *`fork()`*.
            return Err(Error::Forked {
                shard: self.inner.shard(),
            });
        }
        let forks = crate::fork::current();
        if let Some(child) = self.opened_in_child() {
            return Ok(child);
        }
        let child = Arc::new(self.recipe.clone().open()?);
        let mut opened = self.child.opened.lock();
        match &*opened {
            // Another thread opened one meanwhile: that one is used, this
            // one closes when dropped (after the lock is let go).
            Some((at, theirs)) if *at == forks => {
                let theirs = Arc::clone(theirs);
                drop(opened);
                drop(child);
                Ok(theirs)
            }
            _ => {
                let old = opened.replace((forks, Arc::clone(&child)));
                drop(opened);
                drop(old);
                Ok(child)
            }
        }
    }

    /// The generator this process opened after a `fork()`, if it did.
    pub(super) fn opened_in_child(&self) -> Option<Arc<Generator<C>>> {
        if !self.inner.forked() {
            return None;
        }
        let opened = self.child.opened.lock();
        match &*opened {
            Some((at, child)) if *at == crate::fork::current() => Some(Arc::clone(child)),
            _ => None,
        }
    }
}
