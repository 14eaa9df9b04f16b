//! The open's deadline, and the close's: every step that failed in a way
//! that may pass is tried again, on a fresh connection, after a short
//! random pause, until the deadline runs out.
//!
//! A crowd of holders opening at once (a fleet's restart, a thousand
//! threads of one process) queues at the server's locks, at its
//! connection limit, or at a pooler whose pool is far smaller than the
//! crowd. One round trip's deadline is then too short for some of them,
//! and each such failure is an open that would have succeeded a moment
//! later. Retrying on the spot, all at once, would only lengthen the
//! queue: the pause before each try is random (up to a bound that doubles
//! at each try), and each try may wait longer for its answer than the
//! last (the round trip's deadline, doubled at each try, within the time
//! left), so a slow server is waited for rather than flooded.
//!
//! Every step an open retries may run twice: the reads, the history
//! check (its raises never lower a mark, and it records what it found),
//! the acquisition (a retry first looks for a row the open's own token
//! already holds: see [`sql::reclaim`](super::sql::reclaim)) and the
//! first raise (conditioned on the holder's key and never lowering).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::Failure;
use super::ENGINE;
use idutil_lease::{LeaseConfig, LeaseError};

/// Longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// Shortest bound of the first pause.
const FIRST_PAUSE: Duration = Duration::from_millis(20);

/// Why a step stopped.
pub(super) enum Stop {
    /// A round trip failed while doing `.0` (as a [`LeaseError::Store`]
    /// action names it): tried again if the failure may pass.
    Step(&'static str, Failure),
    /// A refusal no retry changes (another layout's ID space, an unsafe
    /// replication setup under the strict rule).
    Refused(LeaseError),
}

impl From<LeaseError> for Stop {
    fn from(e: LeaseError) -> Stop {
        Stop::Refused(e)
    }
}

/// A deadline for an open or a close, and the tries made within it.
pub(super) struct Deadline {
    until: Instant,
    total: Duration,
    /// One round trip's deadline, the first try's.
    round_trip: Duration,
    /// Whether each try may wait twice as long as the one before. Not for
    /// calls on a held lease's connection, which its renewals share.
    grow: bool,
    tries: u32,
    /// `open` or `close`, and the setting that sets the deadline.
    what: &'static str,
    setting: &'static str,
}

impl Deadline {
    /// The open's deadline, `until` ([`LeaseConfig::open_timeout`] from
    /// the open's start), never shorter than one round trip from now.
    pub(super) fn open(config: &LeaseConfig, until: Instant) -> Deadline {
        let round_trip = config.op_timeout().max(Duration::from_secs(2));
        let now = Instant::now();
        let until = until.max(now + round_trip);
        Deadline {
            until,
            total: config.get_open_timeout().max(round_trip),
            round_trip,
            grow: true,
            tries: 0,
            what: "open",
            setting: "LeaseConfig::open_timeout",
        }
    }

    /// An open deadline for calls on the held lease's connection (the
    /// open's first raise): each try waits one round trip at most, so the
    /// renewals get the connection between tries.
    pub(super) fn open_held(config: &LeaseConfig, until: Instant) -> Deadline {
        let mut d = Deadline::open(config, until);
        d.round_trip = config.op_timeout();
        d.grow = false;
        d
    }

    /// The close's deadline: a quarter of the TTL from now, at most 2.5 s
    /// ([`LeaseConfig::close_timeout`]), room for a round trip (a fifth of
    /// it, at most 2 s) and a second try. Past it the lease expires by
    /// itself, within a TTL of its last renewal.
    pub(super) fn close(config: &LeaseConfig) -> Deadline {
        let total = config.close_timeout();
        Deadline {
            until: Instant::now() + total,
            total,
            round_trip: config.op_timeout(),
            grow: false,
            tries: 0,
            what: "close",
            setting: "a quarter of the TTL, at most 2.5 s",
        }
    }

    /// How long the next try may wait for its answer: one round trip's
    /// deadline (doubled at each try where it grows), within the time
    /// left.
    pub(super) fn timeout(&self) -> Duration {
        let round_trip = if self.grow {
            self.round_trip.saturating_mul(1 << self.tries.min(4))
        } else {
            self.round_trip
        };
        let left = self.until.saturating_duration_since(Instant::now());
        round_trip.min(left).max(Duration::from_millis(1))
    }

    /// Runs `step` until it succeeds, is refused, fails in a way that
    /// cannot pass, or the deadline runs out; each try is given
    /// [`timeout`](Deadline::timeout).
    pub(super) fn run<T>(
        &mut self,
        config: &LeaseConfig,
        mut step: impl FnMut(Duration) -> Result<T, Stop>,
    ) -> Result<T, LeaseError> {
        loop {
            match step(self.timeout()) {
                Ok(value) => return Ok(value),
                Err(Stop::Refused(e)) => return Err(e),
                Err(Stop::Step(action, failure)) => self.again(config, action, failure)?,
            }
        }
    }

    /// After `failure` while doing `action`: a random pause, then `Ok` if
    /// the failure may pass and there is time for another try; otherwise
    /// the error to return, which names the deadline if it ran out.
    pub(super) fn again(
        &mut self,
        config: &LeaseConfig,
        action: &'static str,
        failure: Failure,
    ) -> Result<(), LeaseError> {
        self.tries += 1;
        if !failure.may_pass() {
            return Err(failure.into_error(action, config));
        }
        let error = failure.into_error(action, config);
        let pause = self.pause();
        if Instant::now() + pause >= self.until {
            return Err(self.ran_out(error));
        }
        log::debug!("{error}; trying again");
        std::thread::sleep(pause);
        Ok(())
    }

    /// A random pause before the next try: up to 20 ms after the first
    /// failure, twice that after each next one, 1 s at most.
    fn pause(&self) -> Duration {
        let bound = FIRST_PAUSE
            .saturating_mul(1 << self.tries.saturating_sub(1).min(6))
            .min(MAX_PAUSE);
        let micros = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(fastrand::u64(micros / 4..=micros))
    }

    /// `last` (a [`LeaseError::Store`]), saying that the deadline ran out
    /// after this many tries.
    pub(super) fn ran_out(&self, last: LeaseError) -> LeaseError {
        let mut last = last;
        if let LeaseError::Store { engine, source, .. } = &mut last {
            *engine = ENGINE;
            *source = Arc::new(RanOut {
                last: source.clone(),
                tries: self.tries,
                total: self.total,
                what: self.what,
                setting: self.setting,
            });
        }
        last
    }
}

/// The last failure of a step, and the deadline that ran out.
#[derive(Debug)]
struct RanOut {
    last: Arc<dyn std::error::Error + Send + Sync>,
    tries: u32,
    total: Duration,
    what: &'static str,
    setting: &'static str,
}

impl std::fmt::Display for RanOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; the {} deadline of {:?} ({}) ran out after {} {}",
            self.last,
            self.what,
            self.total,
            self.setting,
            self.tries,
            if self.tries == 1 { "try" } else { "tries" }
        )
    }
}

impl std::error::Error for RanOut {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 10 s TTL: a round trip's deadline of 2 s.
    fn config() -> LeaseConfig {
        LeaseConfig::new("postgres://u@127.0.0.1/db")
            .ttl(Duration::from_secs(10))
            .open_timeout(Duration::from_secs(30))
    }

    #[test]
    fn each_try_waits_longer_within_the_time_left() {
        let mut d = Deadline::open(&config(), Instant::now() + Duration::from_secs(30));
        let mut waits = Vec::new();
        for _ in 0..6 {
            waits.push(d.timeout().as_secs());
            d.tries += 1;
        }
        // Doubled at each try, up to 16 round trips, within the time left
        // (a little under 30 s by the fifth).
        assert_eq!(waits, [2, 4, 8, 16, 29, 29]);
        let held = Deadline::open_held(&config(), Instant::now() + Duration::from_secs(30));
        assert_eq!(held.timeout(), config().op_timeout());
    }

    #[test]
    fn an_open_deadline_is_never_shorter_than_a_round_trip() {
        let d = Deadline::open(&config(), Instant::now());
        assert!(
            d.timeout() > Duration::from_millis(1900),
            "{:?}",
            d.timeout()
        );
    }

    #[test]
    fn pauses_are_random_and_bounded() {
        let mut d = Deadline::close(&config());
        for tries in 1..12 {
            d.tries = tries;
            let bound = FIRST_PAUSE
                .saturating_mul(1 << (tries - 1).min(6))
                .min(MAX_PAUSE);
            let p = d.pause();
            assert!(
                p >= bound / 4 && p <= bound,
                "try {tries}: {p:?} of {bound:?}"
            );
        }
    }

    #[test]
    fn a_deadline_that_ran_out_is_named_with_the_last_failure() {
        let c = config();
        let mut d = Deadline::open(&c, Instant::now());
        d.tries = 7;
        let last = Failure::Timeout(Duration::from_secs(8)).into_error("lease a shard from", &c);
        let text = d.ran_out(last).to_string();
        assert_eq!(
            text,
            "cannot lease a shard from PostgreSQL at postgres://***@127.0.0.1/db: no answer \
             within 8s; the open deadline of 30s (LeaseConfig::open_timeout) ran out after 7 \
             tries"
        );
        let c = c.ttl(Duration::from_secs(10));
        let mut d = Deadline::close(&c);
        d.tries = 1;
        let last =
            Failure::Timeout(Duration::from_secs(2)).into_error("give back the lease in", &c);
        assert!(d.ran_out(last).to_string().ends_with(
            "the close deadline of 2.5s (a quarter of the TTL, at most 2.5 s) ran out after \
                 1 try"
        ));
    }

    #[test]
    fn only_failures_that_may_pass_are_tried_again() {
        let c = config();
        let mut d = Deadline::open(&c, Instant::now() + Duration::from_secs(30));
        let answer = Failure::Answer("garbled".to_string());
        assert!(d.again(&c, "lease a shard from", answer).is_err());
        assert!(d
            .again(
                &c,
                "lease a shard from",
                Failure::Timeout(Duration::from_secs(2))
            )
            .is_ok());
        let mut spent = Deadline::open(&c, Instant::now());
        spent.until = Instant::now();
        let e = spent
            .again(
                &c,
                "lease a shard from",
                Failure::Timeout(Duration::from_secs(2)),
            )
            .unwrap_err();
        assert!(e.to_string().contains("ran out after 1 try"), "{e}");
    }
}
