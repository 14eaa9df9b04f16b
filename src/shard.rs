//! Where the shard comes from: an explicit setting, `IDUTIL_SHARD`, or the
//! trailing digits of the host name.

use std::ffi::OsString;
use std::fmt;
use std::sync::OnceLock;

use regex::Regex;

use crate::error::{Error, Result};
use crate::layout::Layout;

/// Environment variable that sets the shard.
pub const SHARD_ENV: &str = "IDUTIL_SHARD";

/// Where a generator's shard came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardSource {
    /// Set in code or with `--shard`.
    Explicit,
    /// From the `IDUTIL_SHARD` environment variable.
    Env,
    /// From the trailing digits of this host name.
    Hostname(String),
    /// Leased from Redis.
    Lease,
}

impl fmt::Display for ShardSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardSource::Explicit => write!(f, "set explicitly"),
            ShardSource::Env => write!(f, "from {SHARD_ENV}"),
            ShardSource::Hostname(h) => write!(f, "from the digits of host name {h:?}"),
            ShardSource::Lease => write!(f, "leased from Redis"),
        }
    }
}

/// Chooses the shard: `explicit` if given, else `IDUTIL_SHARD`, else the
/// trailing digits of the host name (shard 0, with a `log::warn!`, if it
/// ends in no digit).
///
/// # Errors
///
/// [`Error::ShardOutOfRange`] if the shard does not fit the layout,
/// [`Error::InvalidEnv`] if `IDUTIL_SHARD` is not a number,
/// [`Error::Hostname`] if the host name cannot be read.
pub fn resolve_shard(explicit: Option<u32>, layout: &Layout) -> Result<(u32, ShardSource)> {
    if let Some(shard) = explicit {
        return in_range(shard.into(), layout, ShardSource::Explicit);
    }
    if let Some(value) = std::env::var_os(SHARD_ENV) {
        let shard = parse_env(value)?;
        return in_range(shard, layout, ShardSource::Env);
    }
    let host = hostname::get().map_err(Error::Hostname)?;
    let host = host.to_string_lossy().into_owned();
    match shard_from_hostname(&host, layout)? {
        Some(shard) => Ok((shard, ShardSource::Hostname(host))),
        None => {
            log::warn!(
                "host name {host:?} ends in no digits, so this generator uses shard 0; \
                 every such host uses shard 0 and they will issue duplicate IDs. \
                 Set {SHARD_ENV} or use numbered host names."
            );
            Ok((0, ShardSource::Hostname(host)))
        }
    }
}

fn parse_env(value: OsString) -> Result<u64> {
    let text = value.to_string_lossy().into_owned();
    let invalid = |reason| Error::InvalidEnv {
        var: SHARD_ENV,
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
    // Too many digits for u64 is still a number, just out of any range.
    Ok(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// The shard named by the trailing decimal digits of the short host name
/// (the part before the first `.`): `web-7` → 7, `node-007.example.com` → 7.
/// `Ok(None)` if the short name ends in no digit.
///
/// # Errors
///
/// [`Error::ShardOutOfRange`] if the digits name a shard the layout cannot
/// hold (`web-45` with 5 shard bits): never a silent fallback to another
/// shard, which would collide with the host that has it.
///
/// ```
/// use idutil::{shard_from_hostname, Layout};
/// let l = Layout::DEFAULT;
/// assert_eq!(shard_from_hostname("web-7", &l)?, Some(7));
/// assert_eq!(shard_from_hostname("node-007.prod.example.com", &l)?, Some(7));
/// assert_eq!(shard_from_hostname("db", &l)?, None);
/// assert!(shard_from_hostname("web-45", &l).is_err());
/// # Ok::<(), idutil::Error>(())
/// ```
pub fn shard_from_hostname(host: &str, layout: &Layout) -> Result<Option<u32>> {
    static TRAILING_DIGITS: OnceLock<Regex> = OnceLock::new();
    let re = TRAILING_DIGITS.get_or_init(|| Regex::new(r"([0-9]+)$").expect("valid regex"));
    let short = host.split('.').next().unwrap_or_default();
    let Some(digits) = re.captures(short).and_then(|c| c.get(1)) else {
        return Ok(None);
    };
    let shard = digits.as_str().parse::<u64>().unwrap_or(u64::MAX);
    in_range(shard, layout, ShardSource::Hostname(host.to_string())).map(|(s, _)| Some(s))
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
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        let l = Layout::DEFAULT;
        let cases: &[(&str, Option<u32>)] = &[
            ("web-7", Some(7)),
            ("node-007", Some(7)),
            ("web-31", Some(31)),
            ("web-0", Some(0)),
            ("api3", Some(3)),
            ("db", None),
            ("", None),
            ("web-7a", None),
            ("web-7.example.com", Some(7)),
            ("db.us-east-2", None),
            ("web.42", None),
        ];
        for (host, want) in cases {
            assert_eq!(shard_from_hostname(host, &l).unwrap(), *want, "{host}");
        }
    }

    #[test]
    fn out_of_range_digits_are_an_error() {
        let l = Layout::DEFAULT;
        for host in ["web-45", "web-32", "x99999999999999999999999999"] {
            let err = shard_from_hostname(host, &l).unwrap_err();
            assert!(
                matches!(err, Error::ShardOutOfRange { .. }),
                "{host}: {err}"
            );
            assert!(err.to_string().contains(host), "{err}");
        }
        let wide = Layout::new(30, 0, 13, 10, 0).unwrap();
        assert_eq!(shard_from_hostname("web-45", &wide).unwrap(), Some(45));
    }

    #[test]
    fn env_values() {
        assert_eq!(parse_env(" 12 ".into()).unwrap(), 12);
        for bad in ["", "x", "-1", "7a", "3.0"] {
            let err = parse_env(bad.into()).unwrap_err();
            assert!(err.to_string().contains(SHARD_ENV), "{err}");
        }
    }

    #[test]
    fn explicit_shard_is_checked() {
        let l = Layout::DEFAULT;
        assert_eq!(resolve_shard(Some(31), &l).unwrap().0, 31);
        assert!(resolve_shard(Some(32), &l).is_err());
    }
}
