//! Where a generator's shard came from, and why a host name cannot give
//! one: the values [`Error`](crate::Error) carries about a shard, kept in a
//! file that imports nothing of the crate's errors.

use std::fmt;

use crate::env;

/// Where a generator's shard came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardSource {
    /// Set in code or with `--shard`.
    Explicit,
    /// From the [`IDUTIL_SHARD`](env::SHARD) environment variable.
    Env,
    /// From the number that ends this host name (`web-7`, `db3`).
    Hostname(String),
    /// Shard 0 by default, because this host name does not end in a
    /// number (`db`, `web.42`); a warning was logged.
    UnnumberedHostname(String),
    /// Leased from the store a lease engine names ([`lease`](crate::lease)).
    Lease,
}

impl fmt::Display for ShardSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardSource::Explicit => write!(f, "set explicitly"),
            ShardSource::Env => write!(f, "from {}", env::SHARD),
            ShardSource::Hostname(h) => {
                write!(f, "from the number at the end of host name {h:?}")?;
                let short = short_name(h);
                if short != h {
                    write!(f, " (short name {short:?})")?;
                }
                Ok(())
            }
            ShardSource::UnnumberedHostname(h) => {
                write!(f, "the default: {}", unnumbered(h))
            }
            ShardSource::Lease => write!(f, "leased"),
        }
    }
}

/// Why a host name cannot choose the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostnameProblem {
    /// The host name ends in a number beyond the layout's shard range
    /// (`web-32` with 5 shard bits).
    OutOfRange {
        /// The digits, as they appear in the host name.
        digits: String,
        /// The largest shard the layout holds.
        max: u32,
    },
    /// The short name is a hex container id (`a1b2c3d4e5f6`): random, so a
    /// fleet of containers would share shards.
    ContainerId,
    /// An EC2-style default name (`ip-10-0-3-17`): its last number is one
    /// byte of a private IP address, repeated in every subnet.
    IpAddress,
    /// A Kubernetes Deployment (ReplicaSet) pod name `name-<hash>-<suffix>`
    /// (`web-5f7c9-abc1`): the ending is random, not a number for the host.
    PodName {
        /// The pod-template hash.
        hash: String,
        /// The random suffix.
        suffix: String,
    },
    /// The last `-`/`_`-separated part has letters after digits (`web-7a`,
    /// `desktop-7h3k2lq`): it looks random, not like a number for the host.
    MixedEnding {
        /// That part.
        part: String,
    },
}

impl fmt::Display for HostnameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostnameProblem::OutOfRange { digits, max } => {
                write!(f, "its number {digits} is out of range 0..={max}")
            }
            HostnameProblem::ContainerId => write!(f, "it looks like a random container id"),
            HostnameProblem::IpAddress => write!(
                f,
                "it is an IP address, whose last byte repeats in every subnet"
            ),
            HostnameProblem::PodName { hash, suffix } => write!(
                f,
                "it looks like a Kubernetes Deployment pod (hash {hash:?}, random suffix {suffix:?})"
            ),
            HostnameProblem::MixedEnding { part } => write!(
                f,
                "it ends in {part:?}, which mixes digits and letters like a random id"
            ),
        }
    }
}

impl HostnameProblem {
    /// What to do about it, for the error message.
    pub(crate) fn advice(&self) -> &'static str {
        match self {
            HostnameProblem::OutOfRange { .. } => "set IDUTIL_SHARD to a shard in range",
            _ => {
                "hosts named like this would share shards and issue duplicate IDs. \
                 Set IDUTIL_SHARD per instance, use a StatefulSet ordinal \
                 (web-0, web-1, ...), or lease the shard from PostgreSQL or Redis (IDUTIL_LEASE_URL, features `postgres-lease`, `redis`)"
            }
        }
    }
}

/// The short host name: the part before the first `.`.
pub(super) fn short_name(host: &str) -> &str {
    host.split('.').next().unwrap_or_default()
}

/// "host name "db" does not end in a number", with the short name where it
/// differs (`web.42`).
pub(super) fn unnumbered(host: &str) -> String {
    let short = short_name(host);
    if short == host {
        format!("host name {host:?} does not end in a number")
    } else {
        format!(
            "host name {host:?} does not end in a number (its short name {short:?}, \
             before the first '.', does not)"
        )
    }
}
