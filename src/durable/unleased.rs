//! A build without a lease engine: a lease that cannot exist, with the
//! methods the durable layer calls on a real one, so that the layer reads
//! the same in every build. Only the environment is looked at: a lease URL
//! set for a build that cannot honour it is refused, never ignored.

use std::sync::Arc;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// A lease's settings: none can be made without an engine.
#[derive(Clone, Debug)]
pub(crate) enum LeaseConfig {}

/// A held lease: none can be held without an engine.
pub(crate) enum Lease {}

/// What a lease fails with: nothing, without an engine.
pub(crate) enum LeaseError {}

impl From<LeaseError> for Error {
    fn from(e: LeaseError) -> Error {
        match e {}
    }
}

impl LeaseConfig {
    /// No lease, unless [`IDUTIL_LEASE_URL`](crate::env::LEASE_URL) asks
    /// for one: then [`Error::InvalidEnv`], since this build has no engine
    /// to take it.
    pub(crate) fn from_env() -> Result<Option<LeaseConfig>> {
        let Some(url) = std::env::var_os(crate::env::LEASE_URL) else {
            return Ok(None);
        };
        Err(Error::InvalidEnv {
            var: crate::env::LEASE_URL,
            // A URL may hold a password.
            value: if url.is_empty() {
                String::new()
            } else {
                "***".into()
            },
            reason: "set, but this build of idutil has no lease engine (features \
                     `postgres-lease`, `redis`); unset it, or build with one",
        })
    }
}

impl Lease {
    pub(crate) fn acquire(
        config: &LeaseConfig,
        _layout: &Layout,
        _only: Option<u32>,
        _skip: &[u32],
        _time: &dyn Clock,
    ) -> std::result::Result<Arc<Lease>, LeaseError> {
        match *config {}
    }

    pub(crate) fn shard(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn resume(&self, _layout: &Layout, _start: u64, _seen: &mut u64) -> u64 {
        match *self {}
    }

    pub(crate) fn max_lead(&self, _asked: Option<u64>) -> u64 {
        match *self {}
    }

    pub(crate) fn raise(&self, _until: u64, _seen: u64) -> std::result::Result<(), LeaseError> {
        match *self {}
    }

    pub(crate) fn finish(&self, _last: Option<(u64, u32)>, _seen: u64) {
        match *self {}
    }

    pub(crate) fn set_hook(&self, _hook: impl Fn(bool) + Send + Sync + 'static) {
        match *self {}
    }

    pub(crate) fn fence_error(&self) -> LeaseError {
        match *self {}
    }
}
