//! Where the shard comes from: an explicit setting,
//! [`IDUTIL_SHARD`](env::SHARD), or the number that ends the host name;
//! with a lease engine, a lease instead ([`lease`](crate::lease)).
//!
//! [`resolve_shard`] applies the rule and [`shard_from_hostname`] reads a
//! host name; generators call them when they open, and
//! [`Generator::shard_source`](crate::Generator::shard_source) says which
//! case applied. The shard comes from [`Builder::shard`](crate::Builder::shard)
//! (the command's `--shard`), else [`env::SHARD`], else
//! the number that ends the short host name (the part before the first
//! `.`), where that number numbers the host.
//!
//! # The host-name rule
//!
//! Host-name shards are safe only where names are unique and numbered
//! (Kubernetes StatefulSets, numbered VMs); two hosts that end in the same
//! number issue duplicate IDs. Fleets with random names need an explicit
//! shard per instance, or a lease. So the host name is read strictly, and
//! a name that cannot be trusted is refused rather than given a shard that
//! may collide:
//!
//! - The short name is split at `-` and `_`. Its last part must be a
//!   number, either alone (`web-7`, `node-007`) or after letters (`db3`);
//!   leading zeros are ignored. That number is the shard, and a number
//!   beyond the layout's range is an error, never a fallback to another
//!   shard.
//! - Endings that look random are refused
//!   ([`Error::UnusableHostname`], with a [`HostnameProblem`]): a last
//!   part with letters after a digit (`web-7a`, Windows'
//!   `DESKTOP-7H3K2LQ`); a short name of 12 or more hex digits (a
//!   container id); a Kubernetes Deployment pod name
//!   `name-<hash>-<suffix>`, recognised by a hash of 5 or more characters
//!   with letters after a digit, or by a 5–10 and a 5 character ending
//!   drawn only from the characters Kubernetes generates names from
//!   (consonants and the digits 2, 4–9); and EC2's default `ip-A-B-C-D`,
//!   whose last number is the last byte of a private address and repeats
//!   in every subnet (and is mostly above 31).
//! - A short name that does not end in a number (`host`, `win10-desktop`)
//!   gets shard 0 with a `log::warn!`, since several such hosts collide.
//!
//! With the default layout (shards 0 to 31):
//!
//! | host name                     | shard                  | why                                              |
//! |-------------------------------|------------------------|--------------------------------------------------|
//! | `web-7`                       | 7                      | the last part is a number                        |
//! | `web-0`                       | 0                      | a StatefulSet ordinal                            |
//! | `web-31`                      | 31                     | the largest shard                                |
//! | `node-007`                    | 7                      | leading zeros are ignored                        |
//! | `db3`                         | 3                      | letters, then a number                           |
//! | `api-2.prod`                  | 2                      | the short name is `api-2`                        |
//! | `web-32`                      | refused: out of range  | beyond 0..=31                                    |
//! | `web-99999999999999999999999` | refused: out of range  | reported with the digits as written              |
//! | `host`                        | 0, with a warning      | no number                                        |
//! | `web.42`                      | 0, with a warning      | the short name `web` has no number               |
//! | `win10-desktop`               | 0, with a warning      | the number is not at the end                     |
//! | `a1b2c3d4e5f6`                | refused                | a container id                                   |
//! | `deadbeefcafe`                | refused                | a container id, even without digits              |
//! | `web-5f7c9-abc1`              | refused                | a Deployment pod: `5f7c9` is a hash              |
//! | `api-6c8d9-xyz1`              | refused                | a Deployment pod                                 |
//! | `web-bcdfg-24567`             | refused                | a Deployment pod: generated characters           |
//! | `web-7a`                      | refused                | letters after the digits                         |
//! | `desktop-7h3k2lq`             | refused                | letters and digits mixed                         |
//! | `ip-10-0-3-17`                | refused                | 17 is an address byte, repeated in every subnet  |
//!
//! Letters may be in either case. A name that is refused, or that warns,
//! is fixed by `IDUTIL_SHARD` (or `--shard`, or
//! [`Builder::shard`](crate::Builder::shard)), a StatefulSet, or a lease.

mod source;

use std::ffi::OsString;
use std::sync::OnceLock;

use regex::Regex;

use crate::env;
use crate::error::{Error, Result};
use crate::layout::Layout;
use source::{short_name, unnumbered};
pub use source::{HostnameProblem, ShardSource};

/// Chooses the shard: `explicit` if given, else `IDUTIL_SHARD`, else the
/// number that ends the short host name (see [`shard_from_hostname`]; shard
/// 0, with a `log::warn!`, if it ends in no number).
///
/// # Errors
///
/// [`Error::ShardOutOfRange`] if the shard does not fit the layout,
/// [`Error::InvalidEnv`] if [`IDUTIL_SHARD`](env::SHARD) is not a number,
/// [`Error::Hostname`] if the host name cannot be read,
/// [`Error::UnusableHostname`] if it cannot choose a shard.
pub fn resolve_shard(explicit: Option<u32>, layout: &Layout) -> Result<(u32, ShardSource)> {
    if let Some(shard) = explicit {
        return in_range(shard.into(), layout, ShardSource::Explicit);
    }
    if let Some(value) = std::env::var_os(env::SHARD) {
        let shard = parse_env(value)?;
        return in_range(shard, layout, ShardSource::Env);
    }
    let host = hostname::get().map_err(|e| Error::Hostname(e.into()))?;
    let host = host.to_string_lossy().into_owned();
    match shard_from_hostname(&host, layout)? {
        Some(shard) => Ok((shard, ShardSource::Hostname(host))),
        None => {
            log::warn!(
                "{}, so this generator uses shard 0; every such host uses shard 0 \
                 and they will issue duplicate IDs. Set {} or use numbered \
                 host names.",
                unnumbered(&host),
                env::SHARD
            );
            Ok((0, ShardSource::UnnumberedHostname(host)))
        }
    }
}

fn parse_env(value: OsString) -> Result<u64> {
    let text = value.to_string_lossy().into_owned();
    let invalid = |reason| Error::InvalidEnv {
        var: env::SHARD,
        value: text.clone(),
        reason,
    };
    let digits = value
        .to_str()
        .ok_or_else(|| invalid("not valid UTF-8"))?
        .trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("expected a shard number such as 7"));
    }
    digits
        .parse::<u64>()
        .map_err(|_| invalid("out of range: far too large for any shard"))
}

/// The shard named by the host name, under [the host-name
/// rule](self#the-host-name-rule): the number that ends the short host name (the part
/// before the first `.`) when that number numbers the host: `web-7` → 7,
/// `node-007.example.com` → 7, `db3` → 3. `Ok(None)` if the short name does
/// not end in a number (`db`, `web.42`).
///
/// # Errors
///
/// [`Error::UnusableHostname`] when the name cannot choose a shard safely:
/// its number is beyond the layout's shard range (`web-45` with 5 shard
/// bits; never a silent fallback to another shard), or its ending looks
/// random (a container id `a1b2c3d4e5f6`, a Kubernetes Deployment pod
/// `web-5f7c9-abc1`, an ending like `7a`) or repeats across subnets
/// (`ip-10-0-3-17`), so that a fleet of such hosts would collide.
///
/// ```
/// use idutil::shard::shard_from_hostname;
/// use idutil::Layout;
/// let l = Layout::DEFAULT;
/// assert_eq!(shard_from_hostname("web-7", &l)?, Some(7));
/// assert_eq!(shard_from_hostname("node-007.prod.example.com", &l)?, Some(7));
/// assert_eq!(shard_from_hostname("db3", &l)?, Some(3));
/// assert_eq!(shard_from_hostname("db", &l)?, None);
/// assert!(shard_from_hostname("web-45", &l).is_err());
/// assert!(shard_from_hostname("web-5f7c9-abc1", &l).is_err());
/// # Ok::<(), idutil::Error>(())
/// ```
pub fn shard_from_hostname(host: &str, layout: &Layout) -> Result<Option<u32>> {
    let refuse = |problem| Error::UnusableHostname {
        host: host.to_string(),
        problem,
    };
    let Some(digits) = host_number(host).map_err(refuse)? else {
        return Ok(None);
    };
    let max = layout.max_shard();
    match digits.parse::<u64>() {
        Ok(shard) if shard <= u64::from(max) => Ok(Some(shard as u32)),
        // Too many digits for u64 is out of range too; the message shows
        // the digits as written, not a saturated number.
        _ => Err(refuse(HostnameProblem::OutOfRange {
            digits: digits.to_string(),
            max,
        })),
    }
}

/// The digits that end the short host name, `None` if it ends in none, or
/// why its ending cannot number the host.
fn host_number(host: &str) -> Result<Option<&str>, HostnameProblem> {
    static PATTERNS: OnceLock<[Regex; 5]> = OnceLock::new();
    let [container_id, ip_address, hash, pod_hash, pod_suffix] = PATTERNS.get_or_init(|| {
        let re = |p: &str| Regex::new(p).expect("valid regex");
        [
            // Docker's short (12) or full (64) hex id.
            re(r"^[0-9a-fA-F]{12,}$"),
            // EC2's default name for 10.0.3.17.
            re(r"^ip(?:-[0-9]{1,3}){4}$"),
            // Letters after digits, at least 5 characters: a hash.
            re(r"^[0-9A-Za-z]*[0-9][A-Za-z][0-9A-Za-z]*$"),
            // The characters Kubernetes draws random names from (no vowels,
            // no 0, 1 or 3): a pod-template hash, then a 5-character suffix.
            re(r"^[bcdfghjklmnpqrstvwxzBCDFGHJKLMNPQRSTVWXZ2456789]{5,10}$"),
            re(r"^[bcdfghjklmnpqrstvwxzBCDFGHJKLMNPQRSTVWXZ2456789]{5}$"),
        ]
    });
    let short = short_name(host);
    if container_id.is_match(short) {
        return Err(HostnameProblem::ContainerId);
    }
    if ip_address.is_match(short) {
        return Err(HostnameProblem::IpAddress);
    }
    let parts: Vec<&str> = short.split(['-', '_']).collect();
    if let [_, .., prev, last] = parts[..] {
        let hashed = prev.len() >= 5 && hash.is_match(prev);
        let generated = pod_hash.is_match(prev) && pod_suffix.is_match(last);
        if !last.is_empty() && (hashed || generated) {
            return Err(HostnameProblem::PodName {
                hash: prev.to_string(),
                suffix: last.to_string(),
            });
        }
    }
    let last = parts.last().copied().unwrap_or_default();
    let before = last.trim_end_matches(|c: char| c.is_ascii_digit());
    if before.contains(|c: char| c.is_ascii_digit()) {
        return Err(HostnameProblem::MixedEnding {
            part: last.to_string(),
        });
    }
    let digits = &last[before.len()..];
    Ok((!digits.is_empty()).then_some(digits))
}

fn in_range(shard: u64, layout: &Layout, source: ShardSource) -> Result<(u32, ShardSource)> {
    let max = layout.max_shard();
    if shard > u64::from(max) {
        return Err(Error::ShardOutOfRange {
            shard,
            max: max.into(),
            source,
        });
    }
    Ok((shard as u32, source))
}

#[cfg(test)]
mod tests;
