//! The engine a lease URL names, as this build has it: the one place that
//! knows every engine (their schemes and features are `idutil_lease::schemes`').

use idutil_core::redact::redact;
use idutil_lease::interface::Engine;
use idutil_lease::schemes::{scheme, SCHEMES};
use idutil_lease::{LeaseConfig, LeaseError, LeaseResult};

/// The engine `config`'s URL names, if this build has it.
pub(crate) fn engine_for(config: &LeaseConfig) -> LeaseResult<&'static dyn Engine> {
    let url = config.get_url().trim();
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
        "postgres-lease" => Ok(&idutil_lease_postgres::Postgres),
        #[cfg(feature = "redis")]
        "redis" => Ok(&idutil_lease_redis::Redis),
        _ => Err(invalid(format!(
            "a {scheme}:// lease needs idutil built with the feature `{feature}`"
        ))),
    }
}
