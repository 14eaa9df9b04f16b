//! Which engine a lease URL names: each engine's URL schemes and the
//! feature that builds it, read by the settings (an engine's default TTL)
//! and by `engines.rs`, which builds the engine.

/// Each engine's URL schemes, and the feature that builds it.
pub const SCHEMES: &[(&str, &str)] = &[
    ("postgres", "postgres-lease"),
    ("postgresql", "postgres-lease"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redis+unix", "redis"),
    ("unix", "redis"),
];

/// A lease URL's scheme, lower-case (`postgres` for a PostgreSQL
/// key-value string, `host=a,b dbname=app ...`), if it has one.
pub fn scheme(url: &str) -> Option<String> {
    let url = url.trim();
    match url.split_once("://") {
        Some((s, _)) => Some(s.to_ascii_lowercase()),
        None => url.contains('=').then(|| "postgres".to_string()),
    }
}

/// The feature that builds the engine `url` names, if it names one.
pub fn feature_of(url: &str) -> Option<&'static str> {
    let scheme = scheme(url)?;
    SCHEMES
        .iter()
        .find(|(s, _)| *s == scheme)
        .map(|(_, feature)| *feature)
}
