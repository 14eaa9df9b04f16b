//! Where a leased shard comes from (feature `redis`): a lease on a free
//! shard in Redis, renewed in the background, and the shard's high-water
//! second, kept in Redis so that it travels from holder to holder.
//!
//! Two keys per shard live under the key prefix (`idutil` by default):
//!
//! - `{prefix}:lease:{shard}`: the lease, a string holding the holder's
//!   token (`host:pid:nanos:n`), with a TTL. Taken with `SET NX`, renewed and
//!   deleted only by scripts that check the token.
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted:
//!   `high_water` (no ID on the shard has a later Unix second),
//!   `last` (`"second sequence"`, the exact last ID after a clean close, until
//!   the next holder reserves), `seen` (the highest wall-clock second a
//!   holder saw) and `layout` (the layout's fingerprint).
//!
//! Every step is one Lua script, so it is atomic on the server. See the
//! crate docs, *The Redis lease*, for the guarantees and the failure modes.

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Client, Connection, Script};

use crate::error::{Error, Result};
use crate::layout::Layout;

/// Environment variable that names the Redis server to lease the shard from.
pub const REDIS_URL_ENV: &str = "IDUTIL_REDIS_URL";
/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "idutil";
/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// How to lease a shard from Redis: the server, the key prefix, the TTL and
/// which shards may be leased.
///
/// ```
/// use idutil::lease::LeaseConfig;
/// use std::time::Duration;
///
/// let config = LeaseConfig::new("redis://127.0.0.1:6379/")
///     .prefix("orders")
///     .ttl(Duration::from_secs(15));
/// assert_eq!(config.renew_every(), Duration::from_secs(5));
/// ```
#[derive(Clone)]
pub struct LeaseConfig {
    url: String,
    prefix: String,
    ttl: Duration,
    shards: Option<RangeInclusive<u32>>,
}

impl fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("shards", &self.shards)
            .finish()
    }
}

impl LeaseConfig {
    /// A lease from the Redis server at `url` (`redis://[:password@]host[:port][/db]`),
    /// with the default prefix (`idutil`), TTL (10 s) and every shard of the
    /// layout.
    pub fn new(url: impl Into<String>) -> Self {
        LeaseConfig {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: DEFAULT_TTL,
            shards: None,
        }
    }

    /// A lease from the server named by `IDUTIL_REDIS_URL`, if it is set and
    /// not empty.
    pub fn from_env() -> Option<Self> {
        let url = std::env::var(REDIS_URL_ENV).ok()?;
        let url = url.trim();
        (!url.is_empty()).then(|| LeaseConfig::new(url))
    }

    /// Keeps the keys under `prefix` instead of `idutil`. Fleets that share
    /// a Redis server but not an ID space (or not a layout) use different
    /// prefixes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a lease lives without renewal (default 10 s, at least 1 s).
    /// It is renewed every third of it; the generator stops issuing when a
    /// quarter of it is left without a successful renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Leases only shards in `range` (default: every shard of the layout),
    /// for fleets that keep other shards for hosts with fixed ones.
    pub fn shards(mut self, range: RangeInclusive<u32>) -> Self {
        self.shards = Some(range);
        self
    }

    /// The Redis URL, with any password replaced by `***`.
    pub fn url_redacted(&self) -> String {
        redact(&self.url)
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the lease is renewed: a third of the TTL.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// How long after the send time of the last successful renewal the
    /// generator stops issuing: three quarters of the TTL. The quarter left
    /// is the margin for clock-rate differences and scheduling delays.
    pub fn fence_after(&self) -> Duration {
        self.ttl - self.margin()
    }

    fn margin(&self) -> Duration {
        self.ttl / 4
    }

    /// Pause between retries after a failed renewal.
    fn retry_every(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(10))
    }

    /// Longest wait for one Redis round trip.
    fn op_timeout(&self) -> Duration {
        self.ttl / 5
    }

    /// The shards that may be leased under `layout`, narrowed to `only`.
    pub(crate) fn range(&self, layout: &Layout, only: Option<u32>) -> Result<RangeInclusive<u32>> {
        let max = layout.max_shard();
        let range = match (only, &self.shards) {
            (Some(s), _) => s..=s,
            (None, Some(r)) => r.clone(),
            (None, None) => 0..=max,
        };
        if range.is_empty() || *range.end() > max {
            return Err(LeaseError::InvalidConfig {
                reason: format!(
                    "shards {}..={} are not a non-empty range within the layout's 0..={max}",
                    range.start(),
                    range.end()
                ),
            }
            .into());
        }
        if self.ttl < MIN_TTL {
            return Err(LeaseError::InvalidConfig {
                reason: format!("the lease TTL {:?} is below the minimum of 1 s", self.ttl),
            }
            .into());
        }
        if self.prefix.is_empty() {
            return Err(LeaseError::InvalidConfig {
                reason: "the key prefix is empty".to_string(),
            }
            .into());
        }
        Ok(range)
    }

    fn lease_key(&self, shard: u32) -> String {
        format!("{}:lease:{shard}", self.prefix)
    }

    fn mark_key(&self, shard: u32) -> String {
        format!("{}:mark:{shard}", self.prefix)
    }

    fn client(&self) -> Result<Client> {
        Client::open(self.url.as_str())
            .map_err(|e| LeaseError::redis("connect to", &self.url, e).into())
    }
}

/// Hides the password of a `redis://user:password@host` URL.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// What went wrong with the Redis lease.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every shard that may be leased is leased by a live holder.
    NoFreeShard {
        /// The first shard that may be leased.
        first: u32,
        /// The last shard that may be leased.
        last: u32,
        /// The key prefix.
        prefix: String,
    },
    /// The lease could not be renewed in time, or expired: the generator
    /// issues nothing until it holds the lease again.
    Fenced {
        /// The shard.
        shard: u32,
        /// Why the lease is not known to be held.
        reason: String,
    },
    /// Another holder took the shard after this lease expired: the generator
    /// issues nothing more.
    Lost {
        /// The shard.
        shard: u32,
    },
    /// The shard's record in Redis was written under another layout.
    LayoutMismatch {
        /// The shard.
        shard: u32,
        /// The key prefix.
        prefix: String,
        /// The layout recorded in Redis.
        recorded: String,
        /// This generator's layout.
        ours: String,
    },
    /// Redis could not be reached or answered with an error.
    Redis {
        /// What was being done, e.g. `"lease a shard from"`.
        action: &'static str,
        /// The server, with any password hidden.
        url: String,
        /// The underlying error.
        source: Arc<redis::RedisError>,
    },
    /// The lease settings cannot be used.
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

impl LeaseError {
    fn redis(action: &'static str, url: &str, e: redis::RedisError) -> LeaseError {
        LeaseError::Redis {
            action,
            url: redact(url),
            source: Arc::new(e),
        }
    }

    /// The shard involved, if any.
    pub fn shard(&self) -> Option<u32> {
        match self {
            LeaseError::Fenced { shard, .. }
            | LeaseError::Lost { shard }
            | LeaseError::LayoutMismatch { shard, .. } => Some(*shard),
            _ => None,
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::NoFreeShard {
                first,
                last,
                prefix,
            } => write!(
                f,
                "no free shard: all {} shards ({first}..={last}) under Redis key prefix {prefix:?} \
                 are leased by live generators, and a shard is never shared. Close idle \
                 generators, wait for a crashed holder's lease to expire, or use a layout with \
                 more shard bits",
                last - first + 1
            ),
            LeaseError::Fenced { shard, reason } => write!(
                f,
                "the Redis lease on shard {shard} is not known to be held ({reason}), so this \
                 generator issues no IDs until it renews the lease; check that Redis is reachable"
            ),
            LeaseError::Lost { shard } => write!(
                f,
                "the Redis lease on shard {shard} expired and another generator took the shard; \
                 this generator issues no more IDs: close it and open a new one"
            ),
            LeaseError::LayoutMismatch {
                shard,
                prefix,
                recorded,
                ours,
            } => write!(
                f,
                "shard {shard} under Redis key prefix {prefix:?} was used with layout {recorded}, \
                 not {ours}; IDs of two layouts can collide, so use another key prefix for this \
                 layout"
            ),
            LeaseError::Redis {
                action,
                url,
                source,
            } => write!(f, "cannot {action} Redis at {url}: {source}"),
            LeaseError::InvalidConfig { reason } => write!(f, "invalid Redis lease: {reason}"),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Redis { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

impl From<LeaseError> for Error {
    fn from(e: LeaseError) -> Self {
        Error::Lease(e)
    }
}

/// Takes the first free shard of `ARGV[2]..=ARGV[3]` (skipping `ARGV[6..]`)
/// and returns it with its record.
const ACQUIRE: &str = r"
local prefix = ARGV[1]
local skip = {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
for s = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  if not skip[tostring(s)] then
    if redis.call('SET', prefix .. ':lease:' .. s, ARGV[4], 'NX', 'PX', ARGV[5]) then
      local m = redis.call('HMGET', prefix .. ':mark:' .. s, 'high_water', 'last', 'seen', 'layout')
      return {s, m[1] or '', m[2] or '', m[3] or '', m[4] or ''}
    end
  end
end
return false
";

/// Renews the lease; if it expired and nobody reserved past what this holder
/// reserved since, takes it again. 1: renewed, 2: taken again, 0: lost.
const RENEW: &str = r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return 0 end
local hw = tonumber(redis.call('HGET', KEYS[2], 'high_water') or '-1')
if hw > tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if hw < tonumber(ARGV[3]) then redis.call('HSET', KEYS[2], 'high_water', ARGV[3]) end
redis.call('HDEL', KEYS[2], 'last')
return 2
";

/// Raises the high-water second (and `seen`) while the lease is held.
const RAISE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local hw = tonumber(redis.call('HGET', KEYS[2], 'high_water') or '-1')
if tonumber(ARGV[2]) > hw then redis.call('HSET', KEYS[2], 'high_water', ARGV[2]) end
local seen = tonumber(redis.call('HGET', KEYS[2], 'seen') or '-1')
if tonumber(ARGV[3]) > seen then redis.call('HSET', KEYS[2], 'seen', ARGV[3]) end
redis.call('HSET', KEYS[2], 'layout', ARGV[4])
redis.call('HDEL', KEYS[2], 'last')
return 1
";

/// Clean close while the lease is held: records the exact last ID and
/// deletes the lease.
const FINISH: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'high_water', ARGV[2], 'last', ARGV[2] .. ' ' .. ARGV[3], 'layout', ARGV[5])
local seen = tonumber(redis.call('HGET', KEYS[2], 'seen') or '-1')
if tonumber(ARGV[4]) > seen then redis.call('HSET', KEYS[2], 'seen', ARGV[4]) end
redis.call('DEL', KEYS[1])
return 1
";

/// Deletes the lease if it is still this holder's.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// A shard's record in Redis, as found when the lease was granted. Seconds
/// are Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) high_water: Option<u64>,
    pub(crate) last: Option<(u64, u32)>,
    pub(crate) seen: Option<u64>,
}

impl Record {
    /// The first counter value under `layout` after everything the record
    /// says may have been issued: right after the exact last ID of a clean
    /// close, else after the high-water second.
    pub(crate) fn resume_at(&self, layout: &Layout) -> u64 {
        // Clamped one past the range: an absurd record ends the range
        // rather than wrapping the counter.
        let at = |unix: u64| {
            unix.saturating_sub(layout.epoch())
                .min(layout.max_seconds() + 1)
                << layout.sequence_bits()
        };
        match (self.last, self.high_water) {
            (Some((sec, seq)), _) => at(sec) + u64::from(seq) + 1,
            (None, Some(hw)) => at(hw.saturating_add(1)),
            (None, None) => 0,
        }
    }
}

fn parse_last(text: &str) -> Option<(u64, u32)> {
    let (sec, seq) = text.trim().split_once(' ')?;
    Some((sec.parse().ok()?, seq.parse().ok()?))
}

fn parse_num(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Sets or clears the fence on the generator.
pub(crate) type FenceHook = Box<dyn Fn(bool) + Send + Sync>;

/// A held lease: the shard, the renewal thread and the connection for
/// writing the high-water second.
pub(crate) struct Lease {
    config: LeaseConfig,
    client: Client,
    shard: u32,
    token: String,
    record: Record,
    layout: String,
    /// For the reservation thread and the close; the renewal thread has its
    /// own, so a slow write never delays a renewal.
    conn: Mutex<Option<Connection>>,
    shared: Arc<Shared>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    finished: std::sync::atomic::AtomicBool,
}

struct Shared {
    state: Mutex<RenewState>,
    changed: Condvar,
    hook: Mutex<Option<FenceHook>>,
    /// The highest high-water second this holder wrote (Unix seconds).
    known_hw: AtomicU64,
}

struct RenewState {
    stop: bool,
    /// Why the generator is fenced, while it is.
    fenced: Option<LeaseError>,
    lost: bool,
    last_error: Option<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, RenewState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_fence(&self, on: bool) {
        if let Some(hook) = &*self.hook.lock().unwrap_or_else(|p| p.into_inner()) {
            hook(on);
        }
    }
}

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

impl Lease {
    /// Leases the first free shard of the allowed range (`only` narrows it
    /// to one shard; `skip` leaves some out) and starts renewing it.
    pub(crate) fn acquire(
        config: &LeaseConfig,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
    ) -> Result<Lease> {
        let range = config.range(layout, only)?;
        let client = config.client()?;
        let token = new_token();
        let mut conn = None;
        let sent = Instant::now();
        let granted: Option<(u32, String, String, String, String)> =
            with_conn(&client, &mut conn, config.op_timeout(), |c| {
                let script = Script::new(ACQUIRE);
                let mut call = script.prepare_invoke();
                call.arg(&config.prefix)
                    .arg(range.start())
                    .arg(range.end())
                    .arg(&token)
                    .arg(millis(config.ttl));
                for s in skip {
                    call.arg(s);
                }
                call.invoke(c)
            })
            .map_err(|e| LeaseError::redis("lease a shard from", &config.url, e))?;
        let Some((shard, hw, last, seen, recorded)) = granted else {
            return Err(LeaseError::NoFreeShard {
                first: *range.start(),
                last: *range.end(),
                prefix: config.prefix.clone(),
            }
            .into());
        };
        let record = Record {
            high_water: parse_num(&hw),
            last: parse_last(&last),
            seen: parse_num(&seen),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(RenewState {
                stop: false,
                fenced: None,
                lost: false,
                last_error: None,
            }),
            changed: Condvar::new(),
            hook: Mutex::new(None),
            known_hw: AtomicU64::new(record.high_water.unwrap_or(0)),
        });
        let lease = Lease {
            config: config.clone(),
            client: client.clone(),
            shard,
            token: token.clone(),
            record,
            layout: layout.fingerprint().to_string(),
            conn: Mutex::new(conn),
            shared: Arc::clone(&shared),
            renewer: Mutex::new(None),
            finished: false.into(),
        };
        // From here on, dropping `lease` releases the shard.
        if !recorded.is_empty() && recorded != lease.layout {
            return Err(LeaseError::LayoutMismatch {
                shard,
                prefix: config.prefix.clone(),
                recorded,
                ours: lease.layout.clone(),
            }
            .into());
        }
        let renewer = Renewer {
            config: config.clone(),
            client,
            shard,
            token,
            shared,
            last_ok: sent,
        };
        let handle = thread::Builder::new()
            .name(format!("idutil-lease-{shard}"))
            .spawn(move || renewer.run())
            .map_err(|e| LeaseError::InvalidConfig {
                reason: format!("cannot start the renewal thread: {e}"),
            })?;
        *lease.renewer.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        Ok(lease)
    }

    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// The shard's record as found when the lease was granted.
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// Installs the generator's fence and applies the current state.
    pub(crate) fn set_hook(&self, hook: FenceHook) {
        let state = self.shared.lock();
        let fenced = state.fenced.is_some();
        *self.shared.hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
        if fenced {
            self.shared.set_fence(true);
        }
    }

    /// Why the generator is fenced (for its error).
    pub(crate) fn fence_error(&self) -> LeaseError {
        self.shared
            .lock()
            .fenced
            .clone()
            .unwrap_or_else(|| LeaseError::Fenced {
                shard: self.shard,
                reason: "the lease is being renewed".to_string(),
            })
    }

    /// Records in Redis that IDs up to `high_water` (Unix seconds) may be
    /// issued, if the lease is still held. Must succeed before any such ID
    /// is issued.
    pub(crate) fn raise(&self, high_water: u64, seen: u64) -> Result<()> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
            Script::new(RAISE)
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(high_water)
                .arg(seen)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| {
            LeaseError::redis(
                "record the high-water second of the leased shard in",
                &self.config.url,
                e,
            )
        })?;
        if done != 1 {
            return Err(LeaseError::Fenced {
                shard: self.shard,
                reason: "the lease expired in Redis before the reservation was recorded"
                    .to_string(),
            }
            .into());
        }
        self.shared.known_hw.fetch_max(high_water, Relaxed);
        Ok(())
    }

    /// Clean close: records the exact last ID (Unix second, sequence), if
    /// any, releases the lease and stops renewing. Redis errors are logged:
    /// the lease then expires by itself and the recorded high-water second
    /// still covers every ID issued.
    pub(crate) fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        self.finished.store(true, Relaxed);
        self.stop_renewing();
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let result: redis::RedisResult<i64> = with_conn(
            &self.client,
            &mut slot,
            self.config.op_timeout(),
            |c| match last {
                Some((sec, seq)) => Script::new(FINISH)
                    .key(self.config.lease_key(self.shard))
                    .key(self.config.mark_key(self.shard))
                    .arg(&self.token)
                    .arg(sec)
                    .arg(seq)
                    .arg(seen)
                    .arg(&self.layout)
                    .invoke(c),
                None => Script::new(RELEASE)
                    .key(self.config.lease_key(self.shard))
                    .arg(&self.token)
                    .invoke(c),
            },
        );
        match result {
            Ok(1) => {}
            Ok(_) => log::warn!(
                "the Redis lease on shard {} was no longer held at close; the shard's \
                 high-water second in Redis still covers every ID issued",
                self.shard
            ),
            Err(e) => log::warn!(
                "cannot release the Redis lease on shard {} at {}: {e}; it expires within {:?}",
                self.shard,
                self.config.url_redacted(),
                self.config.ttl
            ),
        }
    }

    fn stop_renewing(&self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        let handle = self
            .renewer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A lease that was never used for a generator (its open failed):
        // nothing was issued under it, so just give it back.
        if !self.finished.load(Relaxed) {
            self.finish(None, 0);
        }
    }
}

/// The renewal thread's own state.
struct Renewer {
    config: LeaseConfig,
    client: Client,
    shard: u32,
    token: String,
    shared: Arc<Shared>,
    /// Send time of the last successful renewal (or the acquisition).
    last_ok: Instant,
}

enum Renewal {
    Held,
    Lost,
}

impl Renewer {
    fn run(mut self) {
        let mut conn: Option<Connection> = None;
        let mut next = self.last_ok + self.config.renew_every();
        loop {
            let fence_at = self.last_ok + self.config.fence_after();
            {
                let mut state = self.shared.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    let now = Instant::now();
                    if state.fenced.is_none() && now >= fence_at {
                        let reason = match &state.last_error {
                            Some(e) => format!(
                                "no renewal succeeded for {:?}; last error: {e}",
                                now - self.last_ok
                            ),
                            None => format!("no renewal succeeded for {:?}", now - self.last_ok),
                        };
                        log::warn!(
                            "shard {}: the Redis lease could not be renewed in time ({reason}); \
                             issuing stops until it is",
                            self.shard
                        );
                        state.fenced = Some(LeaseError::Fenced {
                            shard: self.shard,
                            reason,
                        });
                        self.shared.set_fence(true);
                    }
                    if now >= next && !state.lost {
                        break;
                    }
                    let wake = if state.fenced.is_some() {
                        next
                    } else {
                        next.min(fence_at)
                    };
                    let wait = if state.lost {
                        Duration::from_secs(3600)
                    } else {
                        wake.saturating_duration_since(now)
                    };
                    state = self
                        .shared
                        .changed
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
            let sent = Instant::now();
            // A renewal must not outlast the fence, or the fence would come late.
            let timeout = if sent < fence_at {
                (fence_at - sent).min(self.config.op_timeout())
            } else {
                self.config.op_timeout()
            };
            let result = self.renew(&mut conn, timeout);
            let mut state = self.shared.lock();
            match result {
                Ok(Renewal::Held) => {
                    self.last_ok = sent;
                    next = sent + self.config.renew_every();
                    state.last_error = None;
                    if state.fenced.take().is_some() {
                        log::warn!(
                            "shard {}: the Redis lease is held again; issuing resumes",
                            self.shard
                        );
                        self.shared.set_fence(false);
                    }
                }
                Ok(Renewal::Lost) => {
                    log::warn!(
                        "shard {}: the Redis lease expired and another generator took the \
                         shard; this generator issues no more IDs",
                        self.shard
                    );
                    state.lost = true;
                    state.fenced = Some(LeaseError::Lost { shard: self.shard });
                    self.shared.set_fence(true);
                }
                Err(e) => {
                    state.last_error = Some(e.to_string());
                    next = sent + self.config.retry_every();
                }
            }
        }
    }

    fn renew(
        &self,
        conn: &mut Option<Connection>,
        timeout: Duration,
    ) -> redis::RedisResult<Renewal> {
        let known = self.shared.known_hw.load(Relaxed);
        let answer: i64 = with_conn(&self.client, conn, timeout, |c| {
            Script::new(RENEW)
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(millis(self.config.ttl))
                .arg(known)
                .invoke(c)
        })?;
        Ok(match answer {
            1 | 2 => Renewal::Held,
            _ => Renewal::Lost,
        })
    }
}

/// One shard's lease and record, as [`inspect`] finds them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardLease {
    /// The shard.
    pub shard: u32,
    /// The holder's token (`host:pid:nanos:n`), if the shard is leased.
    pub holder: Option<String>,
    /// Time left before the lease expires unless renewed.
    pub expires_in: Option<Duration>,
    /// No ID on the shard has a later second (Unix seconds).
    pub high_water: Option<u64>,
    /// The exact last ID's second and sequence, after a clean close.
    pub last: Option<(u64, u32)>,
    /// The highest wall-clock second a holder saw.
    pub seen: Option<u64>,
    /// The layout fingerprint recorded with the shard.
    pub layout: Option<String>,
}

/// Reads every shard's lease and record from Redis, for display.
///
/// # Errors
///
/// [`Error::Lease`] if Redis cannot be reached or the settings are invalid.
pub fn inspect(config: &LeaseConfig, layout: &Layout) -> Result<Vec<ShardLease>> {
    let range = config.range(layout, None)?;
    let client = config.client()?;
    let fail = |e| Error::from(LeaseError::redis("read the leases from", &config.url, e));
    let mut conn =
        connect(&client, config.op_timeout().max(Duration::from_secs(2))).map_err(fail)?;
    let mut out = Vec::new();
    for shard in range {
        let (holder, pttl, fields): (Option<String>, i64, Vec<Option<String>>) = redis::pipe()
            .get(config.lease_key(shard))
            .pttl(config.lease_key(shard))
            .cmd("HMGET")
            .arg(config.mark_key(shard))
            .arg(&["high_water", "last", "seen", "layout"])
            .query(&mut conn)
            .map_err(fail)?;
        let field = |i: usize| fields.get(i).cloned().flatten();
        out.push(ShardLease {
            shard,
            holder,
            expires_in: u64::try_from(pttl).ok().map(Duration::from_millis),
            high_water: field(0).as_deref().and_then(parse_num),
            last: field(1).as_deref().and_then(parse_last),
            seen: field(2).as_deref().and_then(parse_num),
            layout: field(3),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_points() {
        let l = Layout::DEFAULT;
        let t = 1_700_000_000;
        let at = |s: u64| (s - l.epoch()) << l.sequence_bits();
        assert_eq!(Record::default().resume_at(&l), 0);
        let crashed = Record {
            high_water: Some(t + 5),
            ..Record::default()
        };
        assert_eq!(crashed.resume_at(&l), at(t + 6));
        let closed = Record {
            high_water: Some(t),
            last: Some((t, 41)),
            seen: Some(t),
        };
        assert_eq!(closed.resume_at(&l), at(t) + 42);
        let full = Record {
            last: Some((t, 65535)),
            ..closed
        };
        assert_eq!(full.resume_at(&l), at(t + 1));
        let absurd = Record {
            high_water: Some(u64::MAX),
            ..Record::default()
        };
        assert_eq!(
            absurd.resume_at(&l),
            (l.max_seconds() + 1) << l.sequence_bits()
        );
    }

    #[test]
    fn parsing_the_record() {
        assert_eq!(parse_last("1700000000 7"), Some((1_700_000_000, 7)));
        assert_eq!(parse_last(""), None);
        assert_eq!(parse_last("x y"), None);
        assert_eq!(parse_num(" 12 "), Some(12));
        assert_eq!(parse_num(""), None);
    }

    #[test]
    fn timing_follows_the_ttl() {
        let c = LeaseConfig::new("redis://127.0.0.1/").ttl(Duration::from_secs(12));
        assert_eq!(c.renew_every(), Duration::from_secs(4));
        assert_eq!(c.fence_after(), Duration::from_secs(9));
        assert!(c.op_timeout() < c.margin());
        assert!(c.renew_every() < c.fence_after());
    }

    #[test]
    fn settings_are_checked() {
        let l = Layout::DEFAULT;
        let c = LeaseConfig::new("redis://127.0.0.1/");
        assert_eq!(c.range(&l, None).unwrap(), 0..=31);
        assert_eq!(c.range(&l, Some(7)).unwrap(), 7..=7);
        assert!(c.range(&l, Some(32)).is_err());
        assert!(c.clone().shards(3..=40).range(&l, None).is_err());
        assert!(c
            .clone()
            .ttl(Duration::from_millis(500))
            .range(&l, None)
            .is_err());
        assert!(c.clone().prefix("").range(&l, None).is_err());
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://:s3cret@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redact("redis://u:s3cret@h/"), "redis://u:***@h/");
        assert_eq!(redact("redis://h:6379/"), "redis://h:6379/");
        let shown = format!("{:?}", LeaseConfig::new("redis://u:s3cret@h/"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
