//! The engine a lease URL names, as this build has it: the one place that
//! knows every engine (their schemes and features are `schemes.rs`'s).

use super::interface::Engine;
use super::redact::redact;
use super::schemes::{scheme, SCHEMES};
use super::{LeaseConfig, LeaseError, LeaseResult};

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
