//! What a case needs from an engine: its server, and the hand of an
//! operator (or an accident) on the store.

#[cfg(feature = "postgres-lease")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

use crate::Slot;

/// The promises of the `lease` module's *What every engine promises* that
/// a case checks, for an engine to name the ones it does not keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promise {
    /// A shard's mark lowered in the store while nobody held the shard:
    /// the next holder starts after every ID the shard's holders issued.
    MarkLoweredBetweenHolders,
}

/// A shard's record as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The high-water second; `None`: no record, or one never raised.
    pub mark: Option<u64>,
    /// The token of the holder whose lease has not expired, if any.
    pub holder: Option<String>,
}

/// A lease engine under test: a real server of it, started by the harness,
/// and what a case does to it.
pub trait Engine: Sized + Send + Sync + 'static {
    /// Its name in failure messages.
    const NAME: &'static str;

    /// The promises it does not keep, each with why: a case of such a
    /// promise checks what the engine's docs say happens instead. The
    /// `lease` module's docs list the same.
    const EXCEPTIONS: &'static [(Promise, &'static str)];

    /// A taken copy of the store's data ([`Engine::dump`]).
    type Dump;

    /// A new server, or `None` after the harness's loud skip (a failure
    /// under `CI=true`).
    fn start() -> Option<Self>;

    /// Where [`crate::shared`] keeps the server the cases share.
    fn slot() -> &'static Slot<Self>;

    /// The server's loopback port.
    fn port(&self) -> u16;

    /// The lease URL of the server reached at `port` (its own, or a
    /// proxy's in front of it).
    fn url_at(&self, port: u16) -> String;

    /// Makes `shards` of the ID space `prefix` ready for a first holder
    /// that does not wait: the record a previous holder would have left
    /// where the engine makes a shard's first use wait (Redis).
    fn prepare(&self, prefix: &str, shards: std::ops::RangeInclusive<u32>);

    /// Kills the server (no shutdown), its data kept.
    fn kill(&mut self);

    /// Starts a killed server again on its data and port.
    fn start_again(&mut self);

    /// Closes every connection of the lease's holders from the server's
    /// side; how many it closed.
    fn kill_connections(&self) -> usize;

    /// Deletes `shard`'s record in the ID space `prefix`.
    fn drop_record(&self, prefix: &str, shard: u32);

    /// Lowers `shard`'s mark to the Unix second `second` (and forgets the
    /// exact last ID a clean close kept), as a hand on the store would.
    fn lower_mark(&self, prefix: &str, shard: u32, second: u64);

    /// Takes a copy of the store's data, as a backup would.
    fn dump(&self) -> Self::Dump;

    /// Puts `dump` back in place of the store's data, as restoring a
    /// backup would.
    fn restore(&mut self, dump: &Self::Dump);

    /// `shard`'s record in the ID space `prefix`.
    fn record(&self, prefix: &str, shard: u32) -> Record;

    /// Why this engine does not keep `promise`, if it does not.
    fn exception(promise: Promise) -> Option<&'static str> {
        Self::EXCEPTIONS
            .iter()
            .find(|(p, _)| *p == promise)
            .map(|(_, why)| *why)
    }
}
