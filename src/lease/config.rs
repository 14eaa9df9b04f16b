//! How to reach the lease's store and which shards to lease:
//! [`LeaseConfig`].

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::LeaseError;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// Default name of the fleet's ID space in the store: the Redis key prefix,
/// the `space` column in PostgreSQL.
pub const DEFAULT_PREFIX: &str = "idutil";
/// Default limit on the difference between the host's clock and the
/// store's.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);
/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// Which engine a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "postgres-lease")]
    Postgres,
}

/// Each engine's URL schemes, and the feature that builds it.
const SCHEMES: &[(&str, &str)] = &[
    ("postgres", "postgres-lease"),
    ("postgresql", "postgres-lease"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redis+unix", "redis"),
    ("unix", "redis"),
];

/// How to lease a shard: the store (its URL names the engine), the fleet's
/// ID space in it, the TTL, which shards may be leased and how far the
/// host's clock may be from the store's.
///
/// ```
/// use idutil::lease::LeaseConfig;
/// use std::time::Duration;
///
/// let config = LeaseConfig::new("postgres://app@db.internal/app")
///     .prefix("orders")
///     .ttl(Duration::from_secs(15));
/// assert_eq!(config.renew_every(), Duration::from_secs(5));
/// assert_eq!(config.get_prefix(), "orders");
/// ```
///
/// Each setting's getter is its setter's name with `get_` in front, as on
/// [`std::process::Command`].
#[derive(Clone)]
pub struct LeaseConfig {
    pub(crate) url: String,
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) shards: Option<RangeInclusive<u32>>,
    pub(crate) max_skew: Duration,
    pub(crate) schema: Option<String>,
}

impl fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("shards", &self.shards)
            .field("max_skew", &self.max_skew)
            .field("schema", &self.schema)
            .finish()
    }
}

impl LeaseConfig {
    /// A lease from the store at `url`, whose scheme names the engine:
    /// `postgres://` or `postgresql://` (feature `postgres-lease`; see
    /// [`lease::postgres`](crate::lease::postgres) for the URL's options),
    /// `redis://` (feature `redis`). A string of PostgreSQL `key=value`
    /// options (`host=a,b dbname=app`) is a PostgreSQL lease too. Every
    /// other setting at its default:
    /// ID space `idutil`, TTL 10 s, every shard of the layout, clock skew
    /// up to 5 s. The URL is checked when the lease is taken.
    pub fn new(url: impl Into<String>) -> Self {
        LeaseConfig {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: DEFAULT_TTL,
            shards: None,
            max_skew: DEFAULT_MAX_SKEW,
            schema: None,
        }
    }

    /// A lease from the store named by `IDUTIL_LEASE_URL` (or, when that is
    /// not set, its older name `IDUTIL_REDIS_URL`), if it is set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnv`] if the variable is set but empty, blank or not
    /// UTF-8: a lease that was meant to be on is never silently turned off
    /// (the shard would then come from `IDUTIL_SHARD` or the host name).
    pub fn from_env() -> Result<Option<Self>> {
        let (var, raw) = match std::env::var_os(crate::env::LEASE_URL) {
            Some(raw) => (crate::env::LEASE_URL, raw),
            None => match std::env::var_os(crate::env::REDIS_URL) {
                Some(raw) => (crate::env::REDIS_URL, raw),
                None => return Ok(None),
            },
        };
        let invalid = |reason| Error::InvalidEnv {
            var,
            value: redact(&raw.to_string_lossy()),
            reason,
        };
        let url = raw
            .to_str()
            .ok_or_else(|| invalid("not valid UTF-8"))?
            .trim();
        if url.is_empty() {
            return Err(invalid(
                "the lease URL is empty or blank; set it to postgres://... or redis://..., or \
                 unset it to take the shard from IDUTIL_SHARD or the host name",
            ));
        }
        Ok(Some(LeaseConfig::new(url)))
    }

    /// Names the fleet's ID space in the store instead of `idutil`: the
    /// Redis key prefix, the `space` column of PostgreSQL's table. Fleets
    /// that share a store but not an ID space (or not a layout) use
    /// different names.
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

    /// How far the host's wall clock may be from the store's (default
    /// 5 s), where the store tells its time (PostgreSQL and Redis both
    /// do). Beyond it, opening is refused and a running generator stops
    /// issuing until the clocks agree again; a generator never raises the
    /// shard's mark for a clock further ahead of the store's than this.
    pub fn max_skew(mut self, max_skew: Duration) -> Self {
        self.max_skew = max_skew;
        self
    }

    /// The PostgreSQL schema of the lease table (default: the first schema
    /// of the connection's `search_path`, usually `public`). It must exist;
    /// the table in it is created on first use. Redis ignores it.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The limit set by [`max_skew`](LeaseConfig::max_skew).
    pub fn get_max_skew(&self) -> Duration {
        self.max_skew
    }

    /// The URL, with any password replaced by `***`.
    pub fn url_redacted(&self) -> String {
        redact(&self.url)
    }

    /// The ID space's name set by [`prefix`](LeaseConfig::prefix): the key
    /// prefix (Redis), the `space` column (PostgreSQL).
    pub fn get_prefix(&self) -> &str {
        &self.prefix
    }

    /// The TTL set by [`ttl`](LeaseConfig::ttl).
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The shards set by [`shards`](LeaseConfig::shards), if any.
    pub fn get_shards(&self) -> Option<RangeInclusive<u32>> {
        self.shards.clone()
    }

    /// The schema set by [`schema`](LeaseConfig::schema), if any.
    pub fn get_schema(&self) -> Option<&str> {
        self.schema.as_deref()
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

    pub(crate) fn margin(&self) -> Duration {
        self.ttl / 4
    }

    /// Pause between retries after a failed renewal.
    pub(crate) fn retry_every(&self) -> Duration {
        (self.ttl / 20).max(Duration::from_millis(10))
    }

    /// Longest wait for one round trip to the store.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.ttl / 5
    }

    /// The engine the URL's scheme names.
    pub(crate) fn kind(&self) -> Result<Kind> {
        let url = self.url.trim();
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let invalid = |reason: String| Error::from(LeaseError::InvalidConfig { reason });
        // A PostgreSQL key-value string: `host=a,b dbname=app ...`.
        let scheme = scheme.or_else(|| url.contains('=').then(|| "postgres".to_string()));
        let Some(scheme) = scheme else {
            return Err(invalid(format!(
                "the lease URL {} has no scheme; give postgres://... or redis://...",
                redact(url)
            )));
        };
        let Some((_, feature)) = SCHEMES.iter().find(|(s, _)| *s == scheme) else {
            return Err(invalid(format!(
                "the lease URL's scheme {scheme}:// names no lease engine; give postgres://, \
                 postgresql:// or redis://"
            )));
        };
        match *feature {
            #[cfg(feature = "redis")]
            "redis" => Ok(Kind::Redis),
            #[cfg(feature = "postgres-lease")]
            "postgres-lease" => Ok(Kind::Postgres),
            _ => Err(invalid(format!(
                "a {scheme}:// lease needs idutil built with the feature `{feature}`"
            ))),
        }
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
                reason: "the lease URL is empty or blank".to_string(),
            }
            .into());
        }
        if self.prefix.is_empty() || self.prefix.len() > 64 {
            return Err(LeaseError::InvalidConfig {
                reason: "the ID space name (key prefix) must be 1 to 64 bytes".to_string(),
            }
            .into());
        }
        Ok(range)
    }
}

/// Hides the password of a `scheme://user:password@host` URL, of a
/// `password=` or `pass=` option in its query, and of a `password=` pair
/// of a PostgreSQL key-value string, read as loosely as the clients read
/// them: a password written with an unescaped `?`, `/`, `#` or `@` in it,
/// or a quoted one with spaces, is hidden whole.
pub(crate) fn redact(url: &str) -> String {
    let url_scheme = url.split_once("://").filter(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let Some((scheme, rest)) = url_scheme else {
        return redact_pairs(url);
    };
    // `tokio-postgres` takes the credentials up to the first `@` anywhere,
    // the `url` crate up to the last one before the path: hiding up to the
    // last `@` covers both (a URL with an `@` in its query shows less).
    let (auth, tail) = match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => (format!("{user}:***@"), &rest[at + 1..]),
            None => ("***@".to_string(), &rest[at + 1..]),
        },
        None => (String::new(), rest),
    };
    // Options: `?pass=...` (`unix://` Redis URLs), `&password=...`.
    let mut shown = String::with_capacity(tail.len());
    for piece in tail.split_inclusive(['?', '&']) {
        let (part, sep) = match piece.strip_suffix(['?', '&']) {
            Some(part) => (part, &piece[part.len()..]),
            None => (piece, ""),
        };
        match part.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                shown.push_str(key);
                shown.push_str("=***");
            }
            _ => shown.push_str(part),
        }
        shown.push_str(sep);
    }
    format!("{scheme}://{auth}{shown}")
}

/// A PostgreSQL key-value string (`host=a password='b c'`) with the
/// password's value hidden, read as `tokio-postgres` reads it: spaces
/// around `=`, quoted values with `\` escapes. What cannot be read after a
/// `password` key is hidden too.
fn redact_pairs(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        shown.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            return shown;
        }
        let key_len = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let key = &rest[..key_len];
        let after_key = &rest[key_len..];
        let after_eq = after_key.trim_start().strip_prefix('=');
        let Some(after_eq) = after_eq else {
            // Not a pair: shown as it is, unless it may be a password.
            if key.eq_ignore_ascii_case("password") {
                shown.push_str(key);
                shown.push_str("=***");
                return shown;
            }
            shown.push_str(key);
            rest = after_key;
            continue;
        };
        let value = after_eq.trim_start();
        let end = value_len(value);
        let pair = &rest[..rest.len() - value.len() + end];
        if key.eq_ignore_ascii_case("password") {
            shown.push_str(key);
            shown.push_str("=***");
        } else {
            shown.push_str(pair);
        }
        rest = &value[end..];
    }
}

/// The length of a key-value string's value at the start of `text`: up to
/// the closing quote of a quoted one, else up to white space; `\` escapes
/// the next character.
fn value_len(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if c.is_whitespace() && !quoted => return i,
            _ => {}
        }
    }
    text.len()
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

    #[test]
    fn passwords_are_hidden_however_they_are_written() {
        // Each is read by tokio-postgres (or libpq) with the password
        // `s3cret` in it; none of it may be shown.
        for url in [
            "host=h password = s3cret dbname=app",
            "host=h password='it is s3cret' dbname=app",
            "host=h password='a\\'s3cret' dbname=app",
            "host=h PASSWORD=s3cret",
            "host=h password=a://s3cret@h",
            "host=h password",
            "postgres://u:pa?s3cret@h/app",
            "postgres://u:pa/s3cret@h/app",
            "postgres://u:pa#s3cret@h/app",
            "postgres://u:pa@s3cret@h/app",
            "postgres://u:p?x=s3cret@h/app?password=s3cret",
            "postgres://h/app?sslmode=disable&password=s3cret",
            "postgres://h/app?password=s3cret&sslmode=disable",
        ] {
            let shown = redact(url);
            assert!(!shown.contains("s3cret"), "{url} shown as {shown}");
            let shown = format!("{:?}", LeaseConfig::new(url));
            assert!(!shown.contains("s3cret"), "{url} shown as {shown}");
        }
        assert_eq!(
            redact("host=h password='x y' dbname=app"),
            "host=h password=*** dbname=app"
        );
        assert_eq!(
            redact("postgres://u:pw@h1:5432,h2:5432/app?target_session_attrs=read-write"),
            "postgres://u:***@h1:5432,h2:5432/app?target_session_attrs=read-write"
        );
    }
}
