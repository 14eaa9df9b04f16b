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

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Client, Connection, Script};

use crate::clock::Clock;
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

    /// A lease from the server named by `IDUTIL_REDIS_URL`, if it is set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnv`] if the variable is set but empty, blank or not
    /// UTF-8: a lease that was meant to be on is never silently turned off
    /// (the shard would then come from `IDUTIL_SHARD` or the host name).
    pub fn from_env() -> Result<Option<Self>> {
        let Some(raw) = std::env::var_os(REDIS_URL_ENV) else {
            return Ok(None);
        };
        let invalid = |reason| Error::InvalidEnv {
            var: REDIS_URL_ENV,
            value: raw.to_string_lossy().into_owned(),
            reason,
        };
        let url = raw
            .to_str()
            .ok_or_else(|| invalid("not valid UTF-8"))?
            .trim();
        if url.is_empty() {
            return Err(invalid(
                "the Redis URL is empty or blank; set it to redis://host:port/db, or unset it \
                 to take the shard from IDUTIL_SHARD or the host name",
            ));
        }
        Ok(Some(LeaseConfig::new(url)))
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
        if self.url.trim().is_empty() {
            return Err(LeaseError::InvalidConfig {
                reason: "the Redis URL is empty or blank".to_string(),
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
    // `unix://` URLs carry the password in the query: `?pass=...`.
    let (url, query) = match url.split_once('?') {
        Some((url, query)) => {
            let shown: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _))
                        if key.eq_ignore_ascii_case("pass")
                            || key.eq_ignore_ascii_case("password") =>
                    {
                        format!("{key}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            (url, format!("?{}", shown.join("&")))
        }
        None => (url, String::new()),
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("{url}{query}");
    };
    let Some((auth, host)) = rest.rsplit_once('@') else {
        return format!("{url}{query}");
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}{query}"),
        None => format!("{scheme}://***@{host}{query}"),
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
    /// The shard's record in Redis vanished while this generator held the
    /// shard (`FLUSHALL`, `FLUSHDB`, `DEL`, or Redis restarted without
    /// persistence): the generator issues nothing more and does not
    /// re-create the record, whose high-water second it cannot vouch for
    /// beyond its own IDs.
    RecordLost {
        /// The shard.
        shard: u32,
        /// The record's key, `{prefix}:mark:{shard}`.
        key: String,
    },
    /// A field of the shard's record in Redis is not a valid value: the
    /// shard is refused (or, while held, issuing stops for good) rather than
    /// the record taken for an absent one.
    InvalidRecord {
        /// The shard.
        shard: u32,
        /// The record's key, `{prefix}:mark:{shard}`.
        key: String,
        /// The field, e.g. `high_water`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
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
            | LeaseError::RecordLost { shard, .. }
            | LeaseError::InvalidRecord { shard, .. }
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
            LeaseError::RecordLost { shard, key } => write!(
                f,
                "Redis lost the record of shard {shard} ({key}: flushed or restarted without \
                 persistence) while this generator held the shard; it issues no more IDs and \
                 does not re-create the record: close it and open a new one (the first \
                 generator on a shard without a record waits one lease TTL)"
            ),
            LeaseError::InvalidRecord {
                shard,
                key,
                field,
                reason,
            } => write!(
                f,
                "the Redis record of shard {shard} cannot be trusted: {key} field {field} \
                 {reason}; the shard is refused rather than risk issuing IDs twice. Find out \
                 what wrote it, then set the field to a valid value at or after every ID \
                 issued on the shard, or use another key prefix"
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
/// and returns it with its record's key type and fields, read as they are:
/// the caller checks them.
const ACQUIRE_LUA: &str = r"
local prefix = ARGV[1]
local skip = {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
for s = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  if not skip[tostring(s)] then
    if redis.call('SET', prefix .. ':lease:' .. s, ARGV[4], 'NX', 'PX', ARGV[5]) then
      local key = prefix .. ':mark:' .. s
      local t = redis.call('TYPE', key).ok
      if t ~= 'hash' then return {s, t, false, false, false, false} end
      local m = redis.call('HMGET', key, 'high_water', 'last', 'seen', 'layout')
      return {s, t, m[1], m[2], m[3], m[4]}
    end
  end
end
return false
";

/// Shared by the scripts that run while a shard is held: `check(key,
/// layout)` is 3 if the record is gone, 4 to 7 if its `high_water`, `seen`,
/// `last` or `layout` is not of the form this crate writes (so that the
/// arithmetic below never runs on garbage), else false. Ranges were checked
/// when the shard was leased; a field rewritten since to another number
/// cannot be told from one this crate wrote.
const CHECK_LUA: &str = r"
local function digits(v)
  return v and #v > 0 and #v <= 16 and not string.find(v, '[^0-9]')
end
local function check(key, layout)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then return 3 end
  if t ~= 'hash' then return 4 end
  local m = redis.call('HMGET', key, 'high_water', 'seen', 'last', 'layout')
  if not digits(m[1]) then return 4 end
  if not digits(m[2]) then return 5 end
  if m[3] and (#m[3] > 32 or not string.match(m[3], '^[0-9]+ [0-9]+$')) then return 6 end
  if m[4] ~= layout then return 7 end
  return false
end
";

/// Renews the lease (1). If it expired, takes it again (2) only if the
/// record's `high_water` is exactly the last one this holder wrote, so
/// nobody reserved since; else 0 (another holder). 3 or more: the record is
/// gone or garbled, and the lease is left alone.
const RENEW_LUA: &str = r"
local bad = check(KEYS[2], ARGV[4])
if bad then return bad end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return 0 end
if redis.call('HGET', KEYS[2], 'high_water') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HDEL', KEYS[2], 'last')
return 2
";

/// Raises the high-water second (and `seen`) while the lease is held; never
/// lowers either, never creates the record. 1: done, 0: the lease is not
/// held, 3 or more: the record is gone or garbled.
const RAISE_LUA: &str = r"
local bad = check(KEYS[2], ARGV[4])
if bad then return bad end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'high_water')) then
  redis.call('HSET', KEYS[2], 'high_water', ARGV[2])
end
if tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[2], 'seen')) then
  redis.call('HSET', KEYS[2], 'seen', ARGV[3])
end
redis.call('HDEL', KEYS[2], 'last')
return 1
";

/// Clean close while the lease is held: records the exact last ID (raising
/// `high_water` to its second if it were ever below, never lowering it) and
/// deletes the lease. 1: done, 0: the lease is not held; 3 or more: the
/// record is gone or garbled, so nothing is written and the lease is
/// deleted.
const FINISH_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local bad = check(KEYS[2], ARGV[5])
if bad then
  redis.call('DEL', KEYS[1])
  return bad
end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'high_water')) then
  redis.call('HSET', KEYS[2], 'high_water', ARGV[2])
end
redis.call('HSET', KEYS[2], 'last', ARGV[2] .. ' ' .. ARGV[3])
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[2], 'seen')) then
  redis.call('HSET', KEYS[2], 'seen', ARGV[4])
end
redis.call('DEL', KEYS[1])
return 1
";

/// Keeps a lease whose shard has no record yet: 1 if it is still this
/// holder's (and renewed), 2 if a record appeared meanwhile, 0 if the lease
/// is not held.
const HOLD_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
return 1
";

/// Creates the record of a shard that had none, if the lease is still this
/// holder's (renewing it) and the record is still absent. Same answers as
/// `HOLD`.
const CREATE_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
redis.call('HSET', KEYS[2], 'high_water', ARGV[3], 'seen', ARGV[3], 'layout', ARGV[4])
return 1
";

/// Deletes the lease if it is still this holder's.
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// Each script is hashed once; `invoke` loads it into a server that does
/// not know it (after a restart, say).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(&[CHECK_LUA, RENEW_LUA].concat()));
static RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(&[CHECK_LUA, RAISE_LUA].concat()));
static FINISH: LazyLock<Script> = LazyLock::new(|| Script::new(&[CHECK_LUA, FINISH_LUA].concat()));
static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD_LUA));
static CREATE: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// What a script that runs while a shard is held found wrong with the
/// record, from its answer (3 to 7).
fn record_trouble(config: &LeaseConfig, shard: u32, answer: i64) -> LeaseError {
    let key = config.mark_key(shard);
    let field = match answer {
        3 => return LeaseError::RecordLost { shard, key },
        5 => "seen",
        6 => "last",
        7 => "layout",
        _ => "high_water",
    };
    LeaseError::InvalidRecord {
        shard,
        key,
        field,
        reason: "was changed in Redis to a value this crate does not write (or the key to \
                 another type) while this generator held the shard"
            .to_string(),
    }
}

/// A shard's record in Redis, as found when the lease was granted (or as
/// created, for a shard that had none). Seconds are Unix seconds.
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
        let at = |unix: u64| layout.counter_at(unix);
        match (self.last, self.high_water) {
            (Some((sec, seq)), _) => at(sec) + u64::from(seq) + 1,
            (None, Some(hw)) => at(hw.saturating_add(1)),
            (None, None) => 0,
        }
    }
}

/// A record's fields as Redis holds them (`None`: absent).
#[derive(Clone, Debug, Default)]
struct RawRecord {
    high_water: Option<String>,
    last: Option<String>,
    seen: Option<String>,
    layout: Option<String>,
}

/// A field that cannot be trusted, and why.
type Problem = (&'static str, String);

/// Reads a record under `layout`, strictly: each field that is valid, and
/// what is wrong with the others (a missing `high_water`, `seen` or
/// `layout` included). The layout's own value is left to the caller to
/// compare.
fn read_record(raw: &RawRecord, layout: &Layout) -> (Record, Vec<Problem>) {
    let mut problems = Vec::new();
    let required = [
        ("high_water", &raw.high_water),
        ("seen", &raw.seen),
        ("layout", &raw.layout),
    ];
    for (name, value) in required {
        if value.is_none() {
            problems.push((name, "is missing".to_string()));
        }
    }
    let mut second = |name, value: &Option<String>| {
        parse_second(value.as_deref()?, layout)
            .map_err(|reason| problems.push((name, reason)))
            .ok()
    };
    let high_water = second("high_water", &raw.high_water);
    let seen = second("seen", &raw.seen);
    let mut record = Record {
        high_water,
        last: None,
        seen,
    };
    if let Some(text) = raw.last.as_deref() {
        match parse_last(text, layout) {
            Ok((sec, _)) if high_water.is_some_and(|hw| sec > hw) => problems.push((
                "last",
                format!(
                    "= {} is after high_water {}, the second reserved",
                    shown(text),
                    high_water.unwrap_or_default()
                ),
            )),
            Ok(last) => record.last = Some(last),
            Err(reason) => problems.push(("last", reason)),
        }
    }
    (record, problems)
}

/// At most 40 characters of a value from Redis, quoted, for a message.
fn shown(text: &str) -> String {
    let mut cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A Unix second within `layout`'s range, written with digits only.
fn parse_second(text: &str, layout: &Layout) -> std::result::Result<u64, String> {
    let (first, last) = (layout.epoch(), layout.last_unix_second());
    // At most 16 digits, as the scripts check while a shard is held.
    if !all_digits(text) || text.len() > 16 {
        return Err(format!(
            "= {} is not a whole number of Unix seconds (digits only)",
            shown(text)
        ));
    }
    match text.parse::<u64>() {
        Ok(v) if (first..=last).contains(&v) => Ok(v),
        _ => Err(format!(
            "= {} is outside the layout's range of Unix seconds {first}..={last}",
            shown(text)
        )),
    }
}

/// `"second sequence"`: the second within `layout`'s range, the sequence
/// within its sequence numbers.
fn parse_last(text: &str, layout: &Layout) -> std::result::Result<(u64, u32), String> {
    let form = || {
        format!(
            "= {} is not \"second sequence\" (two whole numbers, one space between)",
            shown(text)
        )
    };
    let (sec, seq) = text.split_once(' ').ok_or_else(form)?;
    if !all_digits(sec) || !all_digits(seq) {
        return Err(form());
    }
    let sec = parse_second(sec, layout)?;
    let max = layout.max_sequence();
    match seq.parse::<u32>() {
        Ok(seq) if seq <= max => Ok((sec, seq)),
        _ => Err(format!(
            "= {}: the sequence is above the layout's largest, {max}",
            shown(text)
        )),
    }
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
    /// The layout's first and last Unix seconds.
    epoch: u64,
    last_second: u64,
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
        crate::sync::lock(&self.state)
    }

    /// Stops the generator for good: `e` is why, and the renewal thread
    /// stops renewing.
    fn fence_for_good(&self, shard: u32, e: LeaseError) {
        let mut state = self.lock();
        if !state.lost {
            log::warn!("shard {shard}: {e}");
        }
        state.lost = true;
        state.fenced = Some(e);
        self.set_fence(true);
        drop(state);
        self.changed.notify_all();
    }

    fn set_fence(&self, on: bool) {
        if let Some(hook) = &*crate::sync::lock(&self.hook) {
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
    /// to one shard; `skip` leaves some out), checks or creates its record
    /// and starts renewing it. A shard without a record is held for one TTL
    /// before its record is created, with `clock`'s second as its
    /// high-water mark (see [`Lease::wait_and_create`]).
    pub(crate) fn acquire(
        config: &LeaseConfig,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        clock: &dyn Clock,
    ) -> Result<Lease> {
        let range = config.range(layout, only)?;
        let client = config.client()?;
        let token = new_token();
        let mut conn = None;
        type Granted = (
            u32,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let granted: Option<Granted> = with_conn(&client, &mut conn, config.op_timeout(), |c| {
            let mut call = ACQUIRE.prepare_invoke();
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
        // After the reply, not before the request: a holder that lost the
        // record renewed for the last time before the script ran.
        let granted_at = Instant::now();
        let Some((shard, kind, high_water, last, seen, recorded)) = granted else {
            return Err(LeaseError::NoFreeShard {
                first: *range.start(),
                last: *range.end(),
                prefix: config.prefix.clone(),
            }
            .into());
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
            known_hw: AtomicU64::new(0),
        });
        let mut lease = Lease {
            config: config.clone(),
            client: client.clone(),
            shard,
            token: token.clone(),
            record: Record::default(),
            layout: layout.fingerprint().to_string(),
            epoch: layout.epoch(),
            last_second: layout.last_unix_second(),
            conn: Mutex::new(conn),
            shared: Arc::clone(&shared),
            renewer: Mutex::new(None),
            finished: false.into(),
        };
        // From here on, dropping `lease` releases the shard: a record that
        // cannot be trusted refuses it, and opening fails rather than move
        // on to another shard.
        let key = config.mark_key(shard);
        let invalid = |field, reason| LeaseError::InvalidRecord {
            shard,
            key: key.clone(),
            field,
            reason,
        };
        let last_ok = match kind.as_str() {
            "none" => lease.wait_and_create(layout, clock, granted_at)?,
            "hash" => {
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                if let Some(recorded) = raw.layout.as_ref().filter(|r| **r != lease.layout) {
                    return Err(LeaseError::LayoutMismatch {
                        shard,
                        prefix: config.prefix.clone(),
                        recorded: recorded.clone(),
                        ours: lease.layout.clone(),
                    }
                    .into());
                }
                let (record, problems) = read_record(&raw, layout);
                if let Some((field, reason)) = problems.into_iter().next() {
                    return Err(invalid(field, reason).into());
                }
                lease.record = record;
                granted_at
            }
            other => {
                return Err(invalid(
                    "high_water",
                    format!("cannot be read: the key holds a {other}, not a hash"),
                )
                .into())
            }
        };
        shared
            .known_hw
            .store(lease.record.high_water.unwrap_or(0), Relaxed);
        let renewer = Renewer {
            config: config.clone(),
            client,
            shard,
            token,
            layout: lease.layout.clone(),
            shared,
            last_ok,
        };
        let handle = thread::Builder::new()
            .name(format!("idutil-lease-{shard}"))
            .spawn(move || renewer.run())
            .map_err(|e| LeaseError::InvalidConfig {
                reason: format!("cannot start the renewal thread: {e}"),
            })?;
        *crate::sync::lock(&lease.renewer) = Some(handle);
        Ok(lease)
    }

    /// A shard without a record: either nobody used it under this prefix,
    /// or Redis lost the record (a flush, a restart without persistence)
    /// under a holder that may still be issuing. That holder stops at its
    /// next renewal, and at the latest three quarters of a TTL after its
    /// last successful one, which came before this lease was granted. So
    /// the lease is held (renewed) for one whole TTL from `granted_at`
    /// before the record is created, with the clock's second as its
    /// high-water mark: the first ID is then in a later second than any the
    /// old holder issued by the same clock. Returns when the lease was last
    /// renewed.
    fn wait_and_create(
        &mut self,
        layout: &Layout,
        clock: &dyn Clock,
        granted_at: Instant,
    ) -> Result<Instant> {
        let config = &self.config;
        log::warn!(
            "shard {} has no record in Redis ({}): first use of the shard under this key \
             prefix, or Redis lost its data; waiting one lease TTL ({:?}) before the first ID \
             so that a holder that lost its record has stopped",
            self.shard,
            config.mark_key(self.shard),
            config.ttl
        );
        let lost = |reason: &str| LeaseError::Fenced {
            shard: self.shard,
            reason: format!("{reason} while waiting to create the shard's record"),
        };
        let appeared = || LeaseError::InvalidRecord {
            shard: self.shard,
            key: config.mark_key(self.shard),
            field: "high_water",
            reason: "appeared while this generator held the lease and waited to create it: \
                     something else writes these keys"
                .to_string(),
        };
        let ready_at = granted_at + config.ttl;
        let mut slot = crate::sync::lock(&self.conn);
        let mut held_at = granted_at;
        loop {
            let now = Instant::now();
            if now >= ready_at {
                break;
            }
            thread::sleep(
                (held_at + config.renew_every())
                    .min(ready_at)
                    .saturating_duration_since(now),
            );
            if Instant::now() >= ready_at {
                break;
            }
            let sent = Instant::now();
            let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
                HOLD.key(config.lease_key(self.shard))
                    .key(config.mark_key(self.shard))
                    .arg(&self.token)
                    .arg(millis(config.ttl))
                    .invoke(c)
            })
            .map_err(|e| LeaseError::redis("hold the leased shard in", &config.url, e))?;
            match answer {
                1 => held_at = sent,
                2 => return Err(appeared().into()),
                _ => return Err(lost("the lease expired").into()),
            }
        }
        // Clamped into the layout's range, so the record is always valid; a
        // clock outside the range issues nothing anyway.
        let now = clock.now().clamp(layout.epoch(), layout.last_unix_second());
        let sent = Instant::now();
        let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
            CREATE
                .key(config.lease_key(self.shard))
                .key(config.mark_key(self.shard))
                .arg(&self.token)
                .arg(millis(config.ttl))
                .arg(now)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| LeaseError::redis("create the shard's record in", &config.url, e))?;
        match answer {
            1 => {}
            2 => return Err(appeared().into()),
            _ => return Err(lost("the lease expired").into()),
        }
        drop(slot);
        self.record = Record {
            high_water: Some(now),
            last: None,
            seen: Some(now),
        };
        Ok(sent)
    }

    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// The shard's record as found when the lease was granted, or created.
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// Installs the generator's fence and applies the current state.
    pub(crate) fn set_hook(&self, hook: FenceHook) {
        let state = self.shared.lock();
        let fenced = state.fenced.is_some();
        *crate::sync::lock(&self.shared.hook) = Some(hook);
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
    /// is issued. A record found gone or garbled stops the generator for
    /// good; it is never re-created or overwritten.
    pub(crate) fn raise(&self, high_water: u64, seen: u64) -> Result<()> {
        let mut slot = crate::sync::lock(&self.conn);
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
            RAISE
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(high_water)
                .arg(self.seen_arg(seen))
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
        match done {
            1 => {
                self.shared.known_hw.fetch_max(high_water, Relaxed);
                Ok(())
            }
            0 => Err(LeaseError::Fenced {
                shard: self.shard,
                reason: "the lease expired in Redis before the reservation was recorded"
                    .to_string(),
            }
            .into()),
            trouble => {
                let e = record_trouble(&self.config, self.shard, trouble);
                self.shared.fence_for_good(self.shard, e.clone());
                Err(e.into())
            }
        }
    }

    /// `seen` for a script: a second outside the layout's range (a clock
    /// past its end) is not recorded, so the record stays valid.
    fn seen_arg(&self, seen: u64) -> u64 {
        let in_range = seen >= self.epoch && seen <= self.last_second;
        if in_range {
            seen
        } else {
            0
        }
    }

    /// Clean close: records the exact last ID (Unix second, sequence), if
    /// any, releases the lease and stops renewing. Redis errors are logged:
    /// the lease then expires by itself and the recorded high-water second
    /// still covers every ID issued.
    pub(crate) fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        self.finished.store(true, Relaxed);
        self.stop_renewing();
        let mut slot = crate::sync::lock(&self.conn);
        let result: redis::RedisResult<i64> = with_conn(
            &self.client,
            &mut slot,
            self.config.op_timeout(),
            |c| match last {
                Some((sec, seq)) => FINISH
                    .key(self.config.lease_key(self.shard))
                    .key(self.config.mark_key(self.shard))
                    .arg(&self.token)
                    .arg(sec)
                    .arg(seq)
                    .arg(self.seen_arg(seen))
                    .arg(&self.layout)
                    .invoke(c),
                None => RELEASE
                    .key(self.config.lease_key(self.shard))
                    .arg(&self.token)
                    .invoke(c),
            },
        );
        match result {
            Ok(1) => {}
            Ok(0) => log::warn!(
                "the Redis lease on shard {} was no longer held at close, so the exact last \
                 ID was not recorded in Redis",
                self.shard
            ),
            Ok(trouble) => log::warn!(
                "shard {}: {}; the lease was released and the record left as it is",
                self.shard,
                record_trouble(&self.config, self.shard, trouble)
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
        let handle = crate::sync::lock(&self.renewer).take();
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
    /// The layout's fingerprint, which the record must still carry.
    layout: String,
    shared: Arc<Shared>,
    /// Send time of the last successful renewal (or the acquisition).
    last_ok: Instant,
}

enum Renewal {
    Held,
    /// Gone for good: another holder took the shard, or the record vanished
    /// or was garbled.
    Lost(LeaseError),
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
                    state = crate::sync::wait_timeout(&self.shared.changed, state, wait);
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
                Ok(Renewal::Lost(e)) => {
                    drop(state);
                    self.shared.fence_for_good(self.shard, e);
                    continue;
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
            RENEW
                .key(self.config.lease_key(self.shard))
                .key(self.config.mark_key(self.shard))
                .arg(&self.token)
                .arg(millis(self.config.ttl))
                .arg(known)
                .arg(&self.layout)
                .invoke(c)
        })?;
        Ok(match answer {
            1 | 2 => Renewal::Held,
            0 => Renewal::Lost(LeaseError::Lost { shard: self.shard }),
            trouble => Renewal::Lost(record_trouble(&self.config, self.shard, trouble)),
        })
    }
}

/// One shard's lease and record, as [`inspect`] finds them. A field that is
/// not valid is `None` here and named in [`invalid`](ShardLease::invalid).
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
    /// Why the record cannot be trusted, field by field (`"high_water =
    /// \"1795999999.0\" is not a whole number ..."`); empty when it can, or
    /// when there is no record. A generator refuses such a shard.
    pub invalid: Vec<String>,
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
        let (holder, pttl, kind): (Option<String>, i64, String) = redis::pipe()
            .get(config.lease_key(shard))
            .pttl(config.lease_key(shard))
            .cmd("TYPE")
            .arg(config.mark_key(shard))
            .query(&mut conn)
            .map_err(fail)?;
        let mut row = ShardLease {
            shard,
            holder,
            expires_in: u64::try_from(pttl).ok().map(Duration::from_millis),
            high_water: None,
            last: None,
            seen: None,
            layout: None,
            invalid: Vec::new(),
        };
        match kind.as_str() {
            "none" => {}
            "hash" => {
                let (high_water, last, seen, recorded) = redis::cmd("HMGET")
                    .arg(config.mark_key(shard))
                    .arg(&["high_water", "last", "seen", "layout"])
                    .query(&mut conn)
                    .map_err(fail)?;
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                let (record, problems) = read_record(&raw, layout);
                row.high_water = record.high_water;
                row.last = record.last;
                row.seen = record.seen;
                row.layout = raw.layout;
                row.invalid = problems
                    .into_iter()
                    .map(|(field, reason)| format!("{field} {reason}"))
                    .collect();
            }
            other => row
                .invalid
                .push(format!("the key holds a {other}, not a hash")),
        }
        out.push(row);
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

    fn raw(hw: &str, last: Option<&str>, seen: &str) -> RawRecord {
        RawRecord {
            high_water: Some(hw.to_string()),
            last: last.map(str::to_string),
            seen: Some(seen.to_string()),
            layout: Some(Layout::DEFAULT.fingerprint()),
        }
    }

    fn problems(r: &RawRecord) -> Vec<&'static str> {
        read_record(r, &Layout::DEFAULT)
            .1
            .into_iter()
            .map(|p| p.0)
            .collect()
    }

    #[test]
    fn a_valid_record_is_read() {
        let l = Layout::DEFAULT;
        let (record, problems) =
            read_record(&raw("1700000005", Some("1700000000 7"), "1700000001"), &l);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            record,
            Record {
                high_water: Some(1_700_000_005),
                last: Some((1_700_000_000, 7)),
                seen: Some(1_700_000_001),
            }
        );
        let edges = raw(
            &l.last_unix_second().to_string(),
            Some(&format!("{} {}", l.epoch(), l.max_sequence())),
            &l.epoch().to_string(),
        );
        assert!(read_record(&edges, &l).1.is_empty());
    }

    #[test]
    fn every_field_is_read_strictly() {
        let l = Layout::DEFAULT;
        let past_end = (l.last_unix_second() + 1).to_string();
        let before_epoch = (l.epoch() - 1).to_string();
        for bad in [
            "99999999999999999999",
            "00000000000000001795999999",
            "1795999999.0",
            "",
            " 1700000000",
            "1700000000 ",
            "+1700000000",
            "-1",
            "0x10",
            "1e9",
            "١٧٠٠٠٠٠٠٠٠",
            &past_end,
            &before_epoch,
        ] {
            assert_eq!(
                problems(&raw(bad, None, "1700000000")),
                ["high_water"],
                "{bad:?}"
            );
            assert_eq!(problems(&raw("1700000000", None, bad)), ["seen"], "{bad:?}");
        }
        for bad in [
            "1700000000",
            "1700000000  7",
            "1700000000 7 ",
            "1700000000 -7",
            "1700000000 65536",
            "1700000000 99999999999",
            "1700000001 0",
            "x y",
            "",
        ] {
            assert_eq!(
                problems(&raw("1700000000", Some(bad), "1700000000")),
                ["last"],
                "{bad:?}"
            );
        }
        let mut missing = raw("1700000000", None, "1700000000");
        missing.layout = None;
        missing.seen = None;
        assert_eq!(problems(&missing), ["seen", "layout"]);
        assert_eq!(problems(&RawRecord::default()).len(), 3);
    }

    #[test]
    fn messages_name_the_field_and_cut_long_values() {
        let long = "9".repeat(200);
        let (_, p) = read_record(&raw(&long, None, "1700000000"), &Layout::DEFAULT);
        assert_eq!(p[0].0, "high_water");
        assert!(p[0].1.contains("digits only") || p[0].1.contains("outside"));
        assert!(p[0].1.len() < 150, "{}", p[0].1);
        let e = LeaseError::InvalidRecord {
            shard: 3,
            key: "idutil:mark:3".into(),
            field: "high_water",
            reason: p[0].1.clone(),
        };
        let text = e.to_string();
        assert!(text.contains("idutil:mark:3 field high_water"), "{text}");
        assert_eq!(e.shard(), Some(3));
    }

    #[test]
    fn script_answers_name_the_trouble() {
        let c = LeaseConfig::new("redis://127.0.0.1/");
        assert!(matches!(
            record_trouble(&c, 2, 3),
            LeaseError::RecordLost { shard: 2, ref key } if key == "idutil:mark:2"
        ));
        for (answer, field) in [(4, "high_water"), (5, "seen"), (6, "last"), (7, "layout")] {
            match record_trouble(&c, 2, answer) {
                LeaseError::InvalidRecord { field: f, .. } => assert_eq!(f, field),
                other => panic!("{answer}: {other:?}"),
            }
        }
        let text = record_trouble(&c, 2, 3).to_string();
        assert!(
            text.starts_with("Redis lost the record of shard 2"),
            "{text}"
        );
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
        assert!(LeaseConfig::new(" \t").range(&l, None).is_err());
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://:s3cret@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redact("redis://u:s3cret@h/"), "redis://u:***@h/");
        assert_eq!(redact("redis://h:6379/"), "redis://h:6379/");
        assert_eq!(
            redact("unix:///run/redis.sock?db=2&pass=s3cret"),
            "unix:///run/redis.sock?db=2&pass=***"
        );
        assert_eq!(
            redact("redis+unix:///r.sock?password=s3cret"),
            "redis+unix:///r.sock?password=***"
        );
        let shown = format!("{:?}", LeaseConfig::new("redis://u:s3cret@h/"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
