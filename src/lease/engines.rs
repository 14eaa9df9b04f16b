//! Which engine a lease URL names: the one place that knows every engine
//! and the feature that builds it.

use std::time::Duration;

use super::interface::Engine;
use super::redact::redact;
use super::{LeaseConfig, LeaseError, LeaseResult, DEFAULT_REDIS_TTL, DEFAULT_TTL};

/// Each engine's URL schemes, and the feature that builds it.
const SCHEMES: &[(&str, &str)] = &[
    ("postgres", "postgres-lease"),
    ("postgresql", "postgres-lease"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redis+unix", "redis"),
    ("unix", "redis"),
];

/// A lease URL's scheme, lower-case (`postgres` for a PostgreSQL
/// key-value string, `host=a,b dbname=app ...`), if it has one.
pub(crate) fn scheme(url: &str) -> Option<String> {
    let url = url.trim();
    match url.split_once("://") {
        Some((s, _)) => Some(s.to_ascii_lowercase()),
        None => url.contains('=').then(|| "postgres".to_string()),
    }
}

/// The default TTL of the engine `url` names: [`DEFAULT_REDIS_TTL`] for
/// Redis, [`DEFAULT_TTL`] for PostgreSQL and for a URL that names no
/// engine (refused when the lease is taken).
pub(crate) fn default_ttl(url: &str) -> Duration {
    let redis = scheme(url).is_some_and(|scheme| {
        SCHEMES
            .iter()
            .any(|(s, feature)| *s == scheme && *feature == "redis")
    });
    if redis {
        DEFAULT_REDIS_TTL
    } else {
        DEFAULT_TTL
    }
}

/// The engine `config`'s URL names, if this build has it.
pub(crate) fn engine_for(config: &LeaseConfig) -> LeaseResult<&'static dyn Engine> {
    let url = config.url.trim();
    let invalid = LeaseError::invalid_config;
    let Some(scheme) = scheme(url) else {
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
        #[cfg(feature = "postgres-lease")]
        "postgres-lease" => Ok(&super::postgres::Postgres),
        #[cfg(feature = "redis")]
        "redis" => Ok(&super::redis::Redis),
        _ => Err(invalid(format!(
            "a {scheme}:// lease needs idutil built with the feature `{feature}`"
        ))),
    }
}
