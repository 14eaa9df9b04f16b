//! What can go wrong with a shard lease: [`LeaseError`].

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use super::redact::redact;
use crate::env;

/// `Result` with [`LeaseError`]: what the lease's functions return.
pub type LeaseResult<T, E = LeaseError> = std::result::Result<T, E>;

/// What went wrong with a shard lease.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every shard that may be leased is leased by a live holder (or was
    /// skipped as unusable, see `skipped`).
    #[non_exhaustive]
    NoFreeShard {
        /// The first shard that may be leased.
        first: u32,
        /// The last shard that may be leased.
        last: u32,
        /// The ID space (key prefix).
        prefix: String,
        /// Shards passed over because their record cannot be used, each
        /// with why (named in the warnings logged when they were skipped).
        skipped: Vec<String>,
        /// Shards whose lease never expires by itself (PostgreSQL:
        /// `expires_at` more than a day ahead, or `'infinity'`: a row
        /// edited by hand), each with its expiry. `idutil lease release`
        /// ([`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html)) frees them.
        stuck: Vec<(u32, String)>,
    },
    /// The lease could not be renewed in time, or expired: the generator
    /// issues nothing until it holds the lease again.
    #[non_exhaustive]
    Fenced {
        /// The shard.
        shard: u32,
        /// Why the lease is not known to be held.
        reason: String,
    },
    /// Another holder took the shard after this lease expired, or the
    /// record was rewritten under this holder (its mark lowered, its
    /// fencing epoch moved): the generator issues nothing more.
    #[non_exhaustive]
    Lost {
        /// The shard.
        shard: u32,
        /// What was found.
        reason: String,
    },
    /// The shard's record vanished while this generator held the shard
    /// (Redis `FLUSHALL`, `DEL`, a restart without persistence; a deleted
    /// or truncated PostgreSQL row): the generator issues nothing more, and
    /// re-creates the record with its own mark first, so that the next
    /// holder starts after every ID it issued.
    #[non_exhaustive]
    RecordLost {
        /// The shard.
        shard: u32,
        /// The record: its Redis key, or its PostgreSQL table and row.
        key: String,
    },
    /// A field of the shard's record is not a valid value: the shard is
    /// refused (or, while held, issuing stops for good) rather than the
    /// record taken for an absent one.
    #[non_exhaustive]
    InvalidRecord {
        /// The shard.
        shard: u32,
        /// The record: its Redis key, or its PostgreSQL table and row.
        key: String,
        /// The field, e.g. `high_water`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The shard's record was written under another layout.
    #[non_exhaustive]
    LayoutMismatch {
        /// The shard.
        shard: u32,
        /// The ID space (key prefix).
        prefix: String,
        /// The layout recorded in the store.
        recorded: String,
        /// This generator's layout.
        ours: String,
    },
    /// The host's wall clock and the store's differ by more than the
    /// configured limit ([`idutil::lease::LeaseConfig::max_skew`](https://docs.rs/idutil/latest/idutil/lease/struct.LeaseConfig.html#method.max_skew)):
    /// opening is refused, and a running generator issues nothing until
    /// they agree again.
    #[non_exhaustive]
    ClockSkew {
        /// The shard, if one is held.
        shard: Option<u32>,
        /// How far the host's clock is ahead of the store's (negative:
        /// behind), in seconds.
        ahead: f64,
        /// The limit.
        limit: Duration,
    },
    /// A raise of the high-water second was not confirmed by the store's
    /// replicas in time (Redis `WAIT`): it is not used, and the generator
    /// issues nothing past the mark it had until a raise is confirmed.
    #[non_exhaustive]
    NotReplicated {
        /// The shard.
        shard: u32,
        /// Replicas the server had.
        replicas: i64,
        /// Replicas that confirmed.
        confirmed: i64,
    },
    /// The store is set up in a way that can lose the lease's records,
    /// such as a Redis server that evicts keys under memory pressure, runs
    /// without an append-only file (`appendonly no`), or has a replica of a
    /// replica; or a PostgreSQL server whose setup lets a standby lacking a
    /// raise be promoted, under `replication=strict`.
    #[non_exhaustive]
    UnsafeStore {
        /// The store, with any password hidden.
        url: String,
        /// What is unsafe and what to change.
        reason: String,
    },
    /// The store could not be reached or answered with an error.
    #[non_exhaustive]
    Store {
        /// The engine: `"Redis"`, `"PostgreSQL"`.
        engine: &'static str,
        /// What was being done, e.g. `"lease a shard from"`.
        action: &'static str,
        /// The store, with any password hidden.
        url: String,
        /// The underlying error.
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The lease settings cannot be used.
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

impl LeaseError {
    /// [`LeaseError::InvalidConfig`].
    #[doc(hidden)]
    pub fn invalid_config(reason: impl Into<String>) -> LeaseError {
        LeaseError::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// [`LeaseError::NoFreeShard`] over `range`, before any shard is
    /// skipped.
    #[doc(hidden)]
    pub fn no_free_shard(range: &RangeInclusive<u32>, prefix: &str) -> LeaseError {
        LeaseError::NoFreeShard {
            first: *range.start(),
            last: *range.end(),
            prefix: prefix.to_string(),
            skipped: Vec::new(),
            stuck: Vec::new(),
        }
    }

    /// [`LeaseError::ClockSkew`]: the host's clock is `ahead` seconds of
    /// the store's (negative: behind), beyond `limit`.
    #[doc(hidden)]
    pub fn clock_skew(shard: Option<u32>, ahead: f64, limit: Duration) -> LeaseError {
        LeaseError::ClockSkew {
            shard,
            ahead,
            limit,
        }
    }

    /// [`LeaseError::Fenced`]: the lease is not known to be held for now.
    #[doc(hidden)]
    pub fn fenced(shard: u32, reason: impl Into<String>) -> LeaseError {
        LeaseError::Fenced {
            shard,
            reason: reason.into(),
        }
    }

    /// [`LeaseError::Lost`]: gone for good.
    #[doc(hidden)]
    pub fn lost(shard: u32, reason: impl Into<String>) -> LeaseError {
        LeaseError::Lost {
            shard,
            reason: reason.into(),
        }
    }

    /// The lease was gone when the holder closed with the exact last ID.
    #[doc(hidden)]
    pub fn lost_at_close(shard: u32) -> LeaseError {
        LeaseError::lost(
            shard,
            "it was no longer held at close, so the exact last ID was not recorded",
        )
    }

    /// A record whose mark is below what this holder raised it to:
    /// rewritten, restored from an older copy, or an acknowledged write
    /// lost.
    #[doc(hidden)]
    pub fn mark_lowered(shard: u32, record: &str) -> LeaseError {
        LeaseError::lost(
            shard,
            format!(
                "the high-water second of {record} is below what this holder raised it to: \
                 the record was rewritten or restored from an older copy, or the store lost \
                 acknowledged writes"
            ),
        )
    }

    /// [`LeaseError::InvalidRecord`] for `field` of the record at `key`.
    #[doc(hidden)]
    pub fn invalid_record(
        shard: u32,
        key: impl Into<String>,
        field: &'static str,
        reason: impl Into<String>,
    ) -> LeaseError {
        LeaseError::InvalidRecord {
            shard,
            key: key.into(),
            field,
            reason: reason.into(),
        }
    }

    /// [`LeaseError::LayoutMismatch`]: the record was written under
    /// `recorded`, not `ours`.
    #[doc(hidden)]
    pub fn layout_mismatch(
        shard: u32,
        prefix: &str,
        recorded: impl Into<String>,
        ours: impl Into<String>,
    ) -> LeaseError {
        LeaseError::LayoutMismatch {
            shard,
            prefix: prefix.to_string(),
            recorded: recorded.into(),
            ours: ours.into(),
        }
    }

    /// [`LeaseError::Store`]: `engine` could not `action` at `url` (its
    /// password hidden in the message).
    #[doc(hidden)]
    pub fn store(
        engine: &'static str,
        action: &'static str,
        url: &str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> LeaseError {
        LeaseError::Store {
            engine,
            action,
            url: redact(url),
            source: Arc::new(e),
        }
    }

    /// [`LeaseError::RecordLost`]: the shard's record, `key`, is gone.
    #[doc(hidden)]
    pub fn record_lost(shard: u32, key: impl Into<String>) -> LeaseError {
        LeaseError::RecordLost {
            shard,
            key: key.into(),
        }
    }

    /// [`LeaseError::NotReplicated`]: `confirmed` of the `replicas` waited
    /// for confirmed a raise in time.
    #[doc(hidden)]
    pub fn not_replicated(shard: u32, replicas: i64, confirmed: i64) -> LeaseError {
        LeaseError::NotReplicated {
            shard,
            replicas,
            confirmed,
        }
    }

    /// [`LeaseError::UnsafeStore`]: the store at `url` (password already
    /// hidden) is set up so that it may lose a raise, and the lease refuses it.
    #[doc(hidden)]
    pub fn unsafe_store(url: impl Into<String>, reason: impl Into<String>) -> LeaseError {
        LeaseError::UnsafeStore {
            url: url.into(),
            reason: reason.into(),
        }
    }

    /// The shard involved, if any.
    pub fn shard(&self) -> Option<u32> {
        match self {
            LeaseError::Fenced { shard, .. }
            | LeaseError::Lost { shard, .. }
            | LeaseError::RecordLost { shard, .. }
            | LeaseError::InvalidRecord { shard, .. }
            | LeaseError::LayoutMismatch { shard, .. }
            | LeaseError::NotReplicated { shard, .. } => Some(*shard),
            LeaseError::ClockSkew { shard, .. } => *shard,
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
                skipped,
                stuck,
            } => {
                write!(
                    f,
                    "no free shard: all {} shards ({first}..={last}) of ID space {prefix:?} are \
                     leased by live generators",
                    last - first + 1
                )?;
                if !skipped.is_empty() {
                    write!(f, " or unusable ({})", skipped.join("; "))?;
                }
                if !stuck.is_empty() {
                    let list: Vec<String> = stuck
                        .iter()
                        .map(|(shard, until)| format!("shard {shard} until {until}"))
                        .collect();
                    write!(
                        f,
                        " or stuck: leases that never expire by themselves ({}), which a row \
                         edited by hand leaves; free each with `idutil lease release --shard N` \
                         (it never lowers a mark)",
                        list.join(", ")
                    )?;
                }
                write!(
                    f,
                    ", and a leased shard is never shared: every process leases one of its \
                     own, so N hosts running M processes each need N x M shards. Close idle \
                     generators, wait for a crashed holder's lease to expire, or use a layout \
                     with more shard bits ({}, --layout)",
                    env::LAYOUT
                )
            }
            LeaseError::Fenced { shard, reason } => write!(
                f,
                "the lease on shard {shard} is not known to be held ({reason}), so this \
                 generator issues no IDs until it renews the lease; check that the lease's \
                 store is reachable"
            ),
            LeaseError::Lost { shard, reason } => write!(
                f,
                "the lease on shard {shard} is lost ({reason}); this generator issues no more \
                 IDs: close it and open a new one"
            ),
            LeaseError::RecordLost { shard, key } => write!(
                f,
                "the lease's store lost the record of shard {shard} ({key}: flushed, deleted \
                 or restarted without persistence) while this generator held the shard; it \
                 issues no more IDs, and wrote its own mark back so that the next holder \
                 starts after it: close it and open a new one"
            ),
            LeaseError::InvalidRecord {
                shard,
                key,
                field,
                reason,
            } => write!(
                f,
                "the lease record of shard {shard} cannot be trusted: {key} field {field} \
                 {reason}; the shard is refused rather than risk issuing IDs twice. Find out \
                 what wrote it, then set the field to a valid value at or after every ID \
                 issued on the shard (another ID space starts from nothing: it suits only \
                 tables that never held this one's IDs)"
            ),
            LeaseError::LayoutMismatch {
                shard,
                prefix,
                recorded,
                ours,
            } => write!(
                f,
                "shard {shard} of ID space {prefix:?} was used with layout {recorded}, not \
                 {ours}; IDs of two layouts can collide, so keep layout {recorded} for this \
                 ID space. Another ID space (key prefix or schema) for the new layout starts \
                 from nothing and can issue IDs this one issued: give it only tables that \
                 never held this ID space's IDs"
            ),
            LeaseError::ClockSkew {
                shard,
                ahead,
                limit,
            } => {
                let side = if *ahead >= 0.0 { "ahead of" } else { "behind" };
                if let Some(s) = shard {
                    write!(f, "shard {s}: ")?;
                }
                write!(
                    f,
                    "this host's clock is {:.1} s {side} the lease store's, more than the \
                     {:.1} s allowed, so no IDs are issued until they agree; fix the host's \
                     clock (NTP), or raise the limit (LeaseConfig::max_skew)",
                    ahead.abs(),
                    limit.as_secs_f64()
                )
            }
            LeaseError::NotReplicated {
                shard,
                replicas,
                confirmed,
            } => write!(
                f,
                "shard {shard}: the raise of the high-water second reached {confirmed} of the \
                 server's {replicas} replicas in time, so it is not used (a failover could \
                 lose it); IDs past the mark stop until a raise is confirmed"
            ),
            LeaseError::UnsafeStore { url, reason } => {
                write!(
                    f,
                    "the lease store at {url} cannot keep the promise: {reason}"
                )
            }
            LeaseError::Store {
                engine,
                action,
                url,
                source,
            } => write!(f, "cannot {action} {engine} at {url}: {source}"),
            LeaseError::InvalidConfig { reason } => write!(f, "invalid lease: {reason}"),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Store { source, .. } => Some(&**source),
            _ => None,
        }
    }
}
