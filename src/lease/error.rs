//! What can go wrong with the Redis lease: [`LeaseError`].

use std::fmt;
use std::sync::Arc;

use super::config::redact;
use crate::error::Error;

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
    pub(super) fn redis(action: &'static str, url: &str, e: redis::RedisError) -> LeaseError {
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
