//! How to reach the lease's store and which shards to lease:
//! [`LeaseConfig`].

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::layout::Layout;
use crate::redact::redact;
use crate::LeaseError;
use crate::LeaseResult as Result;
use idutil_core::EnvError;

/// Default name of the lease's ID space, the fleet's in the store: the
/// Redis key prefix, the `space` column in PostgreSQL. Not the host's ID
/// space's default ([`idutil::host_lock::DEFAULT_ID_SPACE`](https://docs.rs/idutil/latest/idutil/host_lock/constant.DEFAULT_ID_SPACE.html),
/// `default`): see [`idutil::host_lock`](https://docs.rs/idutil/latest/idutil/host_lock/), *ID spaces*.
pub const DEFAULT_PREFIX: &str = "idutil";
/// Default limit on the difference between the host's clock and the
/// store's.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);
/// Default cap on a leased generator's lead: see
/// [`LeaseConfig::max_lead`].
pub const DEFAULT_MAX_LEAD: Duration = Duration::from_secs(30);
/// Default lease TTL of a PostgreSQL lease: 60 s, renewed every 20 s.
///
/// Each renewal is one write on the server, so the TTL sets what a fleet
/// costs the database: renewals a second are three times the holders
/// over the TTL. Measured through PgBouncer (transaction mode, a pool of
/// 10), a renewal takes 0.6 to 0.8 ms of server CPU, 0.9 to 1.3 times a
/// minimal one-row write on the same path (BENCHMARKS.md, *What renewals
/// cost the server*). A thousand holders at 5 % of one database core
/// leave 50 ms of CPU a second: at 0.8 ms a renewal, 62 renewals a
/// second, one per holder every 16 s, so a TTL of at least 48 s. At 60 s
/// they renew 50 times a second, measured at 3 % of a core (at the
/// earlier default of 10 s, 300 times a second and 28 to 31 %).
///
/// What the longer TTL costs:
///
/// - a crashed holder's shard stays taken for one TTL (60 s) before
///   another holder may lease it (new holders take another free shard at
///   once: size the shard range for the instances that may be dead but
///   still leased);
/// - the fence, three quarters of the TTL (45 s), is part of what a
///   holder can issue before it learns of a restore or a failover: a
///   holder that finds the lease's history rewound raises the shard past
///   the lead cap plus the fence plus twice the skew limit plus a second,
///   86 s by default (49 s with a 10 s TTL), and its first ID waits until
///   the clock is within the lead cap of that, up to 57 s (20 s) (see
///   [`idutil::lease::postgres`](https://docs.rs/idutil/latest/idutil/lease/postgres/), *Restores and rewound
///   histories*);
/// - none on closing: a round trip's deadline is a fifth of the TTL and
///   the close's a quarter, but at most 2 s and 2.5 s whatever the TTL, so
///   a generator closed while the store does not answer returns within
///   4.5 s; the lease it could not give back expires by itself within the
///   TTL, a minute.
///
/// In return a stall of the store shorter than the fence less a renewal
/// period (25 s; 4 s with a 10 s TTL) never stops issuing. A fleet that
/// wants dead holders' shards back sooner, or smaller jumps after a
/// restore, sets a shorter [`LeaseConfig::ttl`] and pays in renewals.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// Default lease TTL of a Redis lease: 10 s. A Redis renewal costs the
/// server little, and the first lease of a shard with no known history
/// waits one whole TTL (see [`idutil::lease::redis`](https://docs.rs/idutil/latest/idutil/lease/redis/)), so
/// the Redis lease keeps the shorter TTL.
pub const DEFAULT_REDIS_TTL: Duration = Duration::from_secs(10);
/// Longest wait for one round trip to the store, whatever the TTL: a
/// call on a store that does not answer fails (and is tried again where it
/// may be) within it.
const MAX_ROUND_TRIP: Duration = Duration::from_secs(2);
/// Shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Default open deadline: see [`LeaseConfig::open_timeout`].
pub const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

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
    pub(crate) max_lead: Duration,
    pub(crate) schema: Option<String>,
    pub(crate) strict_replication: bool,
    pub(crate) open_timeout: Duration,
}

impl fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("shards", &self.shards)
            .field("max_skew", &self.max_skew)
            .field("max_lead", &self.max_lead)
            .field("schema", &self.schema)
            .field("strict_replication", &self.strict_replication)
            .field("open_timeout", &self.open_timeout)
            .finish()
    }
}

impl LeaseConfig {
    /// A lease from the store at `url`, whose scheme names the engine:
    /// `postgres://` or `postgresql://` (feature `postgres-lease`; see
    /// [`idutil::lease::postgres`](https://docs.rs/idutil/latest/idutil/lease/postgres/) for the URL's options),
    /// `redis://` (feature `redis`). A string of PostgreSQL `key=value`
    /// options (`host=a,b dbname=app`) is a PostgreSQL lease too. Every
    /// other setting at its default:
    /// ID space `idutil`, TTL 60 s ([`DEFAULT_TTL`]; 10 s for Redis,
    /// [`DEFAULT_REDIS_TTL`]), every shard of the layout, clock skew up to
    /// 5 s, a lead of up to 30 s, an open deadline of 30 s. The URL is
    /// checked when the lease is taken.
    pub fn new(url: impl Into<String>) -> Self {
        let url = url.into();
        LeaseConfig {
            ttl: default_ttl(&url),
            url,
            prefix: DEFAULT_PREFIX.to_string(),
            shards: None,
            max_skew: DEFAULT_MAX_SKEW,
            max_lead: DEFAULT_MAX_LEAD,
            schema: None,
            strict_replication: false,
            open_timeout: DEFAULT_OPEN_TIMEOUT,
        }
    }

    /// A lease from the store named by
    /// [`IDUTIL_LEASE_URL`](idutil_core::env::LEASE_URL), if it is set.
    ///
    /// # Errors
    ///
    /// [`EnvError`] ([`idutil::Error::InvalidEnv`](https://docs.rs/idutil/latest/idutil/enum.Error.html#variant.InvalidEnv) once converted) if the variable is set but empty, blank or not
    /// UTF-8: a lease that was meant to be on is never silently turned off
    /// (the shard would then come from `IDUTIL_SHARD` or the host name).
    pub fn from_env() -> std::result::Result<Option<Self>, EnvError> {
        let var = crate::env::LEASE_URL;
        let Some(raw) = std::env::var_os(var) else {
            return Ok(None);
        };
        let invalid = |reason| EnvError {
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

    /// Names the lease's ID space, the fleet's in the store, instead of
    /// `idutil`: the Redis key prefix, the `space` column of PostgreSQL's
    /// table. Fleets that share a store but not an ID space (or not a
    /// layout) use different names. "ID space" in the lease's docs means
    /// this one.
    ///
    /// It is not the host's ID space
    /// ([`idutil::Builder::id_space`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.id_space), default
    /// `default`), which only scopes the per-host lock: a leased generator
    /// has both, and the two names need not match (see
    /// [`idutil::host_lock`](https://docs.rs/idutil/latest/idutil/host_lock/), *ID spaces*).
    #[doc(alias = "lease ID space", alias = "key prefix", alias = "space")]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a lease lives without renewal (default 60 s,
    /// [`DEFAULT_TTL`], which says what the choice trades; 10 s for Redis;
    /// at least 1 s). It is renewed every third of it; the generator stops
    /// issuing when a quarter of it is left without a successful renewal.
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

    /// Caps how far a leased generator's second may run ahead of its
    /// clock by borrowing (whole seconds; default 30 s,
    /// [`DEFAULT_MAX_LEAD`]), whatever [`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead)
    /// says (the smaller of the two applies).
    ///
    /// It bounds what a store that forgot its history can cost. Every
    /// holder commits its mark before it issues past it, so a store that
    /// keeps its commits needs no cap. But a store restored from a backup,
    /// or rewound by a failover, may hold marks older than what its
    /// holders issued; a holder that finds such a history starts this
    /// lead, plus the fence, plus twice [`max_skew`](LeaseConfig::max_skew),
    /// past the store's clock, after every ID a holder can have issued (see
    /// [`idutil::lease::postgres`](https://docs.rs/idutil/latest/idutil/lease/postgres/), *Restores and rewound
    /// histories*, and [`idutil::lease::redis`](https://docs.rs/idutil/latest/idutil/lease/redis/), *Restarts,
    /// restores and failovers*). The lead counted is the cap in force: the
    /// generator's own ([`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead))
    /// where it is lower. Give every holder of an ID space the same cap:
    /// the new holder's first ID then waits the fence plus twice the skew
    /// limit plus two seconds whatever the cap (20 s with the defaults),
    /// and a holder capped lower than another the store names waits the
    /// difference too.
    ///
    /// What it costs: a burst may run this far ahead of the clock at full
    /// speed (31 s are about 2 million IDs of the default layout's shard),
    /// then follows the clock at the layout's rate; a larger cap lets a
    /// larger burst through and skips more seconds after a restore (seconds
    /// of the layout's range, not waiting).
    pub fn max_lead(mut self, max_lead: Duration) -> Self {
        self.max_lead = max_lead;
        self
    }

    /// The cap set by [`max_lead`](LeaseConfig::max_lead).
    pub fn get_max_lead(&self) -> Duration {
        self.max_lead
    }

    /// This configuration with its lead cap lowered to `max_lead` (whole
    /// seconds), if that is lower: the cap a generator asked for
    /// ([`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead)) is the one in
    /// force, and the lease records and counts the holder's reach from it.
    #[doc(hidden)]
    pub fn capped(&self, max_lead: Option<u64>) -> LeaseConfig {
        let mut config = self.clone();
        if let Some(cap) = max_lead {
            config.max_lead = config.max_lead.min(Duration::from_secs(cap));
        }
        config
    }

    /// The PostgreSQL schema of the lease table (default `public`, or the
    /// URL's `schema=` option), whatever the connection's `search_path`:
    /// see [the
    /// table](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#the-table).
    /// It must exist;
    /// the table in it is created on first use. Redis ignores it.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Refuses to lease from a PostgreSQL server whose replication setup
    /// lets a standby that may lack a raise be promoted, instead of the
    /// loud warning (default `false`; the URL's `replication=strict` sets
    /// it too): see
    /// [replication](https://docs.rs/idutil-lease-postgres/latest/idutil_lease_postgres/#replication).
    /// For Redis, refuses a server with a replica the lease cannot ask
    /// whether it has replicas of its own (a chain it sees is refused
    /// either way): see [the Redis lease's
    /// deployments](https://docs.rs/idutil-lease-redis/latest/idutil_lease_redis/#which-deployments-keep-the-promise).
    pub fn strict_replication(mut self, strict: bool) -> Self {
        self.strict_replication = strict;
        self
    }

    /// How long each of the lease's two parts of opening a generator may
    /// take: leasing a shard (from the first request to the store), then,
    /// once the state directory is open, recording the shard's first mark
    /// (default 30 s each, [`DEFAULT_OPEN_TIMEOUT`]; never less than one
    /// round trip's deadline, a fifth of the TTL and at least 2 s). The
    /// state directory's part in between is not counted. PostgreSQL only;
    /// Redis ignores it.
    ///
    /// Within it, a busy store or machine makes an open slower, never
    /// failed: every step that failed in a way that may pass (no answer in
    /// time, a connection refused or cut, a lock or serialization
    /// conflict, a statement cancelled, a pooler's queue or restart, a
    /// commit the synchronous standby did not confirm) is tried again on a
    /// fresh connection after a short random pause, each try given longer
    /// to answer than the last. Past it, opening fails with
    /// [`LeaseError::Store`] naming the step, its last failure and the
    /// deadline. A shard whose acquisition was answered too late to be
    /// known is either found again by the next try or comes free by
    /// itself within one TTL (see [the lease
    /// rules](crate#when-the-store-fails)).
    ///
    /// The default is long enough for a thousand holders to open at once
    /// through a pool of ten server connections on a loaded two-core
    /// machine, and short enough for a start-up probe to report a store
    /// that is down. An application that would rather fail fast and retry
    /// by itself sets it shorter.
    pub fn open_timeout(mut self, open_timeout: Duration) -> Self {
        self.open_timeout = open_timeout;
        self
    }

    /// The deadline set by [`open_timeout`](LeaseConfig::open_timeout).
    pub fn get_open_timeout(&self) -> Duration {
        self.open_timeout
    }

    /// The rule set by
    /// [`strict_replication`](LeaseConfig::strict_replication).
    pub fn get_strict_replication(&self) -> bool {
        self.strict_replication
    }

    /// The limit set by [`max_skew`](LeaseConfig::max_skew).
    pub fn get_max_skew(&self) -> Duration {
        self.max_skew
    }

    /// The URL, with any password replaced by `***`.
    pub fn url_redacted(&self) -> String {
        redact(&self.url)
    }

    /// The URL as given, password and all: for an engine to connect with,
    /// never for a message ([`url_redacted`](Self::url_redacted)).
    #[doc(hidden)]
    pub fn get_url(&self) -> &str {
        &self.url
    }

    /// The lease's ID space's name set by [`prefix`](LeaseConfig::prefix):
    /// the key prefix (Redis), the `space` column (PostgreSQL).
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

    /// Longest wait for one round trip to the store: a fifth of the TTL,
    /// at most `MAX_ROUND_TRIP` (2 s) (a long TTL is for fewer renewals, not
    /// for calls that wait longer on a store that does not answer).
    #[doc(hidden)]
    pub fn op_timeout(&self) -> Duration {
        (self.ttl / 5).min(MAX_ROUND_TRIP)
    }

    /// The close's deadline: a quarter of the TTL, at most
    /// `MAX_ROUND_TRIP` (2 s) and a half (room for a round trip and a second
    /// try); past it the lease expires by itself within a TTL.
    #[doc(hidden)]
    pub fn close_timeout(&self) -> Duration {
        (self.ttl / 4).min(MAX_ROUND_TRIP * 5 / 4)
    }

    /// The shards that may be leased under `layout`, narrowed to `only`.
    #[doc(hidden)]
    pub fn range(&self, layout: &Layout, only: Option<u32>) -> Result<RangeInclusive<u32>> {
        let max = layout.max_shard();
        let range = match (only, &self.shards) {
            (Some(s), _) => s..=s,
            (None, Some(r)) => r.clone(),
            (None, None) => 0..=max,
        };
        if range.is_empty() || *range.end() > max {
            return Err(LeaseError::invalid_config(format!(
                "shards {}..={} are not a non-empty range within the layout's 0..={max}",
                range.start(),
                range.end()
            )));
        }
        if self.ttl < MIN_TTL {
            return Err(LeaseError::invalid_config(format!(
                "the lease TTL {:?} is below the minimum of 1 s",
                self.ttl
            )));
        }
        if self.url.trim().is_empty() {
            return Err(LeaseError::invalid_config(
                "the lease URL is empty or blank",
            ));
        }
        if self.prefix.is_empty() || self.prefix.len() > 64 {
            return Err(LeaseError::invalid_config(
                "the ID space name (key prefix) must be 1 to 64 bytes",
            ));
        }
        Ok(range)
    }
}

/// The default TTL of the engine `url` names: [`DEFAULT_REDIS_TTL`] for
/// Redis, [`DEFAULT_TTL`] for PostgreSQL and for a URL that names no
/// engine (refused when the lease is taken).
fn default_ttl(url: &str) -> Duration {
    match crate::schemes::feature_of(url) {
        Some("redis") => DEFAULT_REDIS_TTL,
        _ => DEFAULT_TTL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_never_show_a_password() {
        for url in [
            "redis://u:s3cret@h/",
            "host=h password='it is s3cret' dbname=app",
            "postgres://u:pa#s3cret@h/app",
            "postgres://h/app?password=s3cret&sslmode=disable",
        ] {
            let shown = format!("{:?}", LeaseConfig::new(url));
            assert!(!shown.contains("s3cret"), "{url} shown as {shown}");
        }
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
    fn the_generator_s_lower_cap_is_the_one_in_force() {
        let c = LeaseConfig::new("postgres://app@localhost/app");
        assert_eq!(c.capped(Some(1)).get_max_lead(), Duration::from_secs(1));
        assert_eq!(c.capped(Some(60)).get_max_lead(), DEFAULT_MAX_LEAD);
        assert_eq!(c.capped(None).get_max_lead(), DEFAULT_MAX_LEAD);
    }

    #[test]
    fn the_default_ttl_is_the_engines() {
        for url in [
            "postgres://app@db/app",
            "postgresql://db/app",
            "host=db dbname=app",
        ] {
            assert_eq!(LeaseConfig::new(url).get_ttl(), DEFAULT_TTL, "{url}");
        }
        for url in [
            "redis://127.0.0.1/",
            "REDISS://cache/",
            "unix:///run/redis.sock",
        ] {
            assert_eq!(LeaseConfig::new(url).get_ttl(), DEFAULT_REDIS_TTL, "{url}");
        }
        let c = LeaseConfig::new("postgres://db/app");
        assert_eq!(c.renew_every(), Duration::from_secs(20));
        assert_eq!(c.fence_after(), Duration::from_secs(45));
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
}
