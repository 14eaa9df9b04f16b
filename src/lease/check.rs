//! Auditing a lease's store: [`check`] and what it finds, line by line.

use std::fmt;

use super::config::Kind;
use super::LeaseConfig;
use crate::error::Result;
use crate::layout::Layout;

/// How one finding of [`check`] bears on the lease's promise.
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

/// One line of [`check`]'s audit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// Safe, risky, or broken.
    pub verdict: Verdict,
    /// What was checked: `durability`, `replication`, `pooler`, `schema`,
    /// `privileges`, `clock`, `rows`, `shards`, `connection`.
    pub topic: &'static str,
    /// What was found, and what to change when it is not [`Verdict::Ok`].
    pub text: String,
}

impl Finding {
    #[cfg_attr(not(feature = "postgres-lease"), allow(dead_code))]
    pub(crate) fn new(verdict: Verdict, topic: &'static str, text: impl Into<String>) -> Finding {
        Finding {
            verdict,
            topic,
            text: text.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.verdict, self.topic, self.text)
    }
}

/// Audits the store `config` names for the lease under `layout`, without
/// leasing anything: what in its setup keeps the lease's promise and what
/// does not, one [`Finding`] per line. `idutil lease check` prints it.
///
/// For PostgreSQL: the durability settings (`fsync`, `full_page_writes`,
/// `synchronous_commit`), the standbys and the synchronous setup (see
/// [replication](crate::lease::postgres#replication)), a pooler in front
/// and its mode, the schema of the table and any other `idutil_lease` a
/// search path would find, the privileges the lease needs, the clocks, rows
/// that never expire or belong to another layout, and how many shards of
/// the range are free. A store that cannot be reached is one
/// [`Verdict::Fail`] finding, not an error.
///
/// # Errors
///
/// [`Error::Lease`](crate::Error::Lease) for settings that cannot be used (a bad URL, shard
/// range or TTL), or an engine without an audit (Redis).
pub fn check(config: &LeaseConfig, layout: &Layout) -> Result<Vec<Finding>> {
    config.range(layout, None)?;
    match config.kind()? {
        #[cfg(feature = "redis")]
        Kind::Redis => Err(super::LeaseError::invalid_config(
            "the lease check audits PostgreSQL leases; for Redis, see the redis module's \
             deployment rules",
        )
        .into()),
        #[cfg(feature = "postgres-lease")]
        Kind::Postgres => super::postgres::audit(config, layout),
    }
}
