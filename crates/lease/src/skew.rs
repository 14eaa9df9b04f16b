//! This host's clock against the store's: the one skew rule, how far apart
//! they may read ([`LeaseConfig::max_skew`]), judged the same at
//! acquisition, at every renewal, at a raise of the mark and in the audit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{LeaseConfig, LeaseError};

/// The host's wall clock, to the nanosecond (through the C library, so
/// `faketime` moves it as it moves [`idutil::SystemClock`](https://docs.rs/idutil/latest/idutil/struct.SystemClock.html)).
pub fn host_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// How far `host` is ahead of `server` (negative: behind), in seconds.
fn ahead(host: Duration, server: Duration) -> f64 {
    host.as_secs_f64() - server.as_secs_f64()
}

/// The skew rule ([`LeaseConfig::max_skew`]), the one every check of the
/// host's clock against the store's keeps: whether a clock `ahead`
/// seconds of the store's (negative: behind) is beyond the limit.
pub fn beyond_skew(config: &LeaseConfig, ahead: f64) -> bool {
    ahead.abs() > config.max_skew.as_secs_f64()
}

/// The skew error, if `host` and `server` differ by more than the limit
/// ([`beyond_skew`]).
pub fn check_skew(
    config: &LeaseConfig,
    shard: Option<u32>,
    host: Duration,
    server: Duration,
) -> Option<LeaseError> {
    let ahead = ahead(host, server);
    beyond_skew(config, ahead).then(|| LeaseError::clock_skew(shard, ahead, config.max_skew))
}

/// The skew error for a clock ahead of the store's only, as the mark's
/// raise judges it: a clock behind raises no mark too far (the renewal
/// judges it). No leeway past the limit: the raises a recovery reckons
/// with (`max_skew` plus one second past a holder's lead cap, in either
/// engine's docs) come from clocks within it.
pub fn check_ahead(
    config: &LeaseConfig,
    shard: Option<u32>,
    host: Duration,
    server: Duration,
) -> Option<LeaseError> {
    check_skew(config, shard, host, server).filter(|_| host > server)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{check_ahead, check_skew};
    use crate::{LeaseConfig, LeaseError};

    fn config() -> LeaseConfig {
        LeaseConfig::new("redis://localhost").max_skew(Duration::from_secs(5))
    }

    fn skew(host_ms: u64, server_ms: u64) -> Option<f64> {
        check_skew(
            &config(),
            Some(3),
            Duration::from_millis(host_ms),
            Duration::from_millis(server_ms),
        )
        .map(|e| match e {
            LeaseError::ClockSkew {
                ahead,
                shard,
                limit,
                ..
            } => {
                assert_eq!((shard, limit), (Some(3), Duration::from_secs(5)));
                ahead
            }
            other => panic!("not a skew: {other:?}"),
        })
    }

    #[test]
    fn a_clock_at_the_limit_either_way_is_within_it() {
        assert_eq!(skew(105_000, 100_000), None);
        assert_eq!(skew(100_000, 105_000), None);
        assert_eq!(skew(100_000, 100_000), None);
    }

    #[test]
    fn a_clock_past_the_limit_either_way_is_skewed() {
        assert!(skew(105_001, 100_000).is_some_and(|a| a > 5.0));
        assert!(skew(100_000, 105_001).is_some_and(|a| a < -5.0));
    }

    #[test]
    fn the_raise_refuses_a_clock_ahead_past_the_limit_only() {
        let ahead = |host_s: u64, server_ms: u64| {
            check_ahead(
                &config(),
                Some(3),
                Duration::from_secs(host_s),
                Duration::from_millis(server_ms),
            )
            .is_some()
        };
        assert!(!ahead(105, 100_000));
        // Half a second past the limit: refused, not let through by a
        // second of leeway.
        assert!(ahead(106, 100_500));
        assert!(ahead(106, 100_999));
        // Behind, however far: the renewal's to judge, not the raise's.
        assert!(!ahead(90, 100_000));
    }
}
