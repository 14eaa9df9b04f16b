//! The renewal thread: keeps the lease alive, and stops the generator
//! issuing when it cannot (the fence, at the deadline), when the store's
//! clock and the host's disagree (the skew), or for good when the lease or
//! the record is lost. What it finds goes into the lease's
//! [`Standing`](super::standing::Standing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::interface::{host_time, Held, Renewed, Trouble};
use super::restore::restore_then_stop;
use super::standing::Standing;
use super::{LeaseConfig, LeaseError};

/// How far `host` is ahead of `server` (negative: behind), in seconds.
pub(super) fn ahead(host: Duration, server: Duration) -> f64 {
    host.as_secs_f64() - server.as_secs_f64()
}

/// The skew rule ([`LeaseConfig::max_skew`]), the one every check of the
/// host's clock against the store's keeps: whether a clock `ahead`
/// seconds of the store's (negative: behind) is beyond the limit.
pub(super) fn beyond_skew(config: &LeaseConfig, ahead: f64) -> bool {
    ahead.abs() > config.max_skew.as_secs_f64()
}

/// The skew error, if `host` and `server` differ by more than the limit
/// ([`beyond_skew`]).
pub(super) fn check_skew(
    config: &LeaseConfig,
    shard: Option<u32>,
    host: Duration,
    server: Duration,
) -> Option<LeaseError> {
    let ahead = ahead(host, server);
    beyond_skew(config, ahead).then_some(LeaseError::ClockSkew {
        shard,
        ahead,
        limit: config.max_skew,
    })
}

/// The skew error for a clock ahead of the store's only, as the mark's
/// raise judges it: a clock behind raises no mark too far (the renewal
/// judges it). No leeway past the limit: the raises a recovery reckons
/// with (`max_skew` plus one second past a holder's lead cap, in either
/// engine's docs) come from clocks within it.
pub(super) fn check_ahead(
    config: &LeaseConfig,
    shard: Option<u32>,
    host: Duration,
    server: Duration,
) -> Option<LeaseError> {
    check_skew(config, shard, host, server).filter(|_| host > server)
}

/// The renewal thread's own state.
pub(super) struct Renewer {
    pub(super) config: LeaseConfig,
    pub(super) held: Arc<dyn Held>,
    pub(super) shard: u32,
    pub(super) standing: Arc<Standing>,
    /// Send time of the last successful renewal (or the acquisition).
    pub(super) last_ok: Instant,
}

impl Renewer {
    pub(super) fn run(mut self) {
        let mut next = self.last_ok + self.config.renew_every();
        loop {
            let fence_at = self.last_ok + self.config.fence_after();
            if !self.standing.wait_until_due(self.last_ok, fence_at, next) {
                return;
            }
            let sent = Instant::now();
            // A renewal must not outlast the fence, or the fence would come late.
            let timeout = if sent < fence_at {
                (fence_at - sent).min(self.config.op_timeout())
            } else {
                self.config.op_timeout()
            };
            let known = self.standing.known_mark();
            match self.held.renew(known, timeout) {
                Ok(renewed) => {
                    if let Err(e) = self.check(renewed, known) {
                        restore_then_stop(&*self.held, &self.standing, e);
                        continue;
                    }
                    self.last_ok = sent;
                    next = sent + self.config.renew_every();
                }
                Err(Trouble::Lost(e)) => {
                    restore_then_stop(&*self.held, &self.standing, e);
                    continue;
                }
                Err(Trouble::Again(e)) => {
                    self.standing.renewal_failed(&e);
                    next = sent + self.config.retry_every();
                }
            }
        }
    }

    /// A renewal went through: check the record's mark and the clocks, and
    /// lift the deadline's fence. `Err`: the lease is lost for good.
    fn check(&self, renewed: Renewed, known: u64) -> Result<(), LeaseError> {
        if renewed.mark.unwrap_or(0) < known {
            return Err(LeaseError::mark_lowered(self.shard, &self.held.describe()));
        }
        let skew = renewed
            .server_time
            .and_then(|server| check_skew(&self.config, Some(self.shard), host_time(), server));
        self.standing.renewed(renewed.server_time, skew);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{check_ahead, check_skew};
    use crate::lease::{LeaseConfig, LeaseError};

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
