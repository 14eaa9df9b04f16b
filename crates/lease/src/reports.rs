//! What the lease's commands report: every shard's lease and record
//! ([`ShardLease`], from [`idutil::lease::inspect`](https://docs.rs/idutil/latest/idutil/lease/fn.inspect.html)), a freed lease
//! ([`Released`], from [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html)) and an audit's findings
//! ([`Finding`], from [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html)). Engines fill them in.

use std::fmt;
use std::time::Duration;

use crate::layout::Layout;
use crate::record::{read_record, RawRecord};

/// One shard's lease and record, as [`idutil::lease::inspect`](https://docs.rs/idutil/latest/idutil/lease/fn.inspect.html) finds them. A field that is
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
    /// The exact last ID's second (Unix seconds) and sequence, after a
    /// clean close.
    pub last: Option<(u64, u32)>,
    /// The highest wall-clock second a holder saw (Unix seconds).
    pub seen: Option<u64>,
    /// The layout fingerprint recorded with the shard.
    pub layout: Option<String>,
    /// The fencing epoch: how many times the shard was leased
    /// (PostgreSQL; Redis has none).
    pub epoch: Option<u64>,
    /// Why the record cannot be trusted, field by field (`"high_water =
    /// \"1795999999.0\" is not a whole number ..."`); empty when it can, or
    /// when there is no record. A generator refuses such a shard.
    pub invalid: Vec<String>,
}

impl ShardLease {
    /// A shard with no lease and no record found yet.
    #[doc(hidden)]
    pub fn empty(shard: u32) -> ShardLease {
        ShardLease {
            shard,
            holder: None,
            expires_in: None,
            high_water: None,
            last: None,
            seen: None,
            layout: None,
            epoch: None,
            invalid: Vec::new(),
        }
    }

    /// Fills the record's fields from `raw`, read as a generator reads it:
    /// a field that does not pass is left `None` and named in `invalid`.
    #[doc(hidden)]
    pub fn show_record(&mut self, raw: &RawRecord, layout: &Layout) {
        let (record, problems) = read_record(raw, layout);
        self.high_water = record.high_water;
        self.last = record.last;
        self.seen = record.seen;
        self.layout.clone_from(&raw.layout);
        self.invalid.extend(
            problems
                .into_iter()
                .map(|(field, reason)| format!("{field} {reason}")),
        );
    }
}

/// A lease [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html) freed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// The shard.
    pub shard: u32,
    /// The holder's token the lease named, if any.
    pub holder: Option<String>,
    /// When the lease would have expired, as the store wrote it
    /// (`infinity`, say).
    pub expires_at: String,
}

impl Released {
    /// What an engine's release freed.
    #[doc(hidden)]
    pub fn new(shard: u32, holder: Option<String>, expires_at: impl Into<String>) -> Released {
        Released {
            shard,
            holder,
            expires_at: expires_at.into(),
        }
    }
}

/// How one finding of [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html) bears on the lease's promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Safe as it is.
    Ok,
    /// Works, but a fault of the kind named can issue an ID twice, or
    /// stop the fleet.
    Warn,
    /// Cannot work, or can issue an ID twice without any fault.
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        })
    }
}

/// One line of [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html)'s audit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// Safe, risky, or broken.
    pub verdict: Verdict,
    /// What was checked: `durability`, `session`, `replication`, `pooler`,
    /// `schema`, `privileges`, `clock`, `rows`, `shards`, `connection`; for Redis
    /// also `eviction`, `debugging`, `records`.
    pub topic: &'static str,
    /// What was found, and what to change when it is not [`Verdict::Ok`].
    pub text: String,
}

impl Finding {
    /// A finding of an engine's audit.
    #[doc(hidden)]
    pub fn new(verdict: Verdict, topic: &'static str, text: impl Into<String>) -> Finding {
        Finding {
            verdict,
            topic,
            text: text.into(),
        }
    }

    /// The `clock` line of either engine's audit: this host's clock against
    /// the store's (`server`, since 1970), failing beyond the skew limit
    /// and warning beyond half of it.
    #[doc(hidden)]
    pub fn clock(config: &crate::LeaseConfig, server: Duration) -> Finding {
        let ahead = crate::skew::host_time().as_secs_f64() - server.as_secs_f64();
        let limit = config.max_skew.as_secs_f64();
        let verdict = if crate::skew::beyond_skew(config, ahead) {
            Verdict::Fail
        } else if ahead.abs() > limit / 2.0 {
            Verdict::Warn
        } else {
            Verdict::Ok
        };
        Finding {
            verdict,
            topic: "clock",
            text: format!("this host's clock is {ahead:+.3} s from the server's (limit {limit} s)"),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.verdict, self.topic, self.text)
    }
}
