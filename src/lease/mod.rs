//! Where a leased shard comes from (feature `redis`): a lease on a free
//! shard in Redis, renewed in the background, and the shard's high-water
//! second, kept in Redis so that it travels from holder to holder.
//!
//! Two keys per shard live under the key prefix (`idutil` by default):
//!
//! - `{prefix}:lease:{shard}`: the lease, a string holding the holder's
//!   token (`host:pid:nanos:n`), with a TTL. Taken with `SET NX`, renewed and
//!   deleted only by scripts that check the token.
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted, created
//!   once by the first holder of the shard (after waiting one TTL, see the
//!   crate docs) and never re-created by a holder that finds it gone:
//!   `high_water` (no ID on the shard has a later Unix second; only ever
//!   raised), `last` (`"second sequence"`, the exact last ID after a clean
//!   close, until the next holder reserves), `seen` (the highest wall-clock
//!   second a holder saw) and `layout` (the layout's fingerprint).
//!
//! Every field is read strictly: digits only, within the layout's range,
//! `last` at or before `high_water`. A record that does not pass refuses
//! the shard; it is never taken for an absent one.
//!
//! Every step is one Lua script, so it is atomic on the server. See the
//! crate docs, *The Redis lease*, for the guarantees and the failure modes.

mod config;
mod error;
mod holder;
mod inspect;
mod record;
mod renewal;
mod scripts;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Client, Connection};

pub use config::{LeaseConfig, DEFAULT_PREFIX, DEFAULT_TTL, MIN_TTL, REDIS_URL_ENV};
pub use error::LeaseError;
pub(crate) use holder::Lease;
pub use inspect::{inspect, ShardLease};

static TOKENS: AtomicU64 = AtomicU64::new(0);

/// A token naming this holder: host, pid, time and a counter, so `idutil
/// state` can say who holds a shard.
fn new_token() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = TOKENS.fetch_add(1, Relaxed);
    format!("{host}:{}:{nanos}:{n}", std::process::id())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Opens a connection whose every round trip is bounded by `timeout`.
fn connect(client: &Client, timeout: Duration) -> redis::RedisResult<Connection> {
    let timeout = timeout.max(Duration::from_millis(1));
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// Runs `f` on `slot`'s connection (opening one if needed) with round trips
/// bounded by `timeout`; drops the connection after any error, since a reply
/// that arrives late would answer the next command.
fn with_conn<T>(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
    f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
) -> redis::RedisResult<T> {
    let timeout = timeout.max(Duration::from_millis(1));
    let conn = match slot {
        Some(conn) => {
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            conn
        }
        None => slot.insert(connect(client, timeout)?),
    };
    let result = f(conn);
    if result.is_err() {
        *slot = None;
    }
    result
}
