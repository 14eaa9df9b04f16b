//! How to reach Redis and which shards to lease: [`LeaseConfig`].

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use redis::Client;

use super::LeaseError;
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
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) ttl: Duration,
    pub(super) shards: Option<RangeInclusive<u32>>,
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

    pub(super) fn margin(&self) -> Duration {
        self.ttl / 4
    }

    /// Pause between retries after a failed renewal.
    pub(super) fn retry_every(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(10))
    }

    /// Longest wait for one Redis round trip.
    pub(super) fn op_timeout(&self) -> Duration {
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

    pub(super) fn lease_key(&self, shard: u32) -> String {
        format!("{}:lease:{shard}", self.prefix)
    }

    pub(super) fn mark_key(&self, shard: u32) -> String {
        format!("{}:mark:{shard}", self.prefix)
    }

    pub(super) fn client(&self) -> Result<Client> {
        Client::open(self.url.as_str())
            .map_err(|e| LeaseError::redis("connect to", &self.url, e).into())
    }
}

/// Hides the password of a `redis://user:password@host` URL.
pub(super) fn redact(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
