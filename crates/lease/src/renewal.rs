//! The renewal thread: keeps the lease alive, and stops the generator
//! issuing when it cannot (the fence, at the deadline), when the store's
//! clock and the host's disagree (the skew), or for good when the lease or
//! the record is lost. What it finds goes into the lease's
//! [`Standing`](crate::standing::Standing).

use std::sync::Arc;
use std::time::Instant;

use crate::interface::{Held, Renewed, Trouble};
use crate::restore::restore_then_stop;
use crate::skew::{check_skew, host_time};
use crate::standing::Standing;
use crate::{LeaseConfig, LeaseError};

/// The renewal thread's own state.
pub struct Renewer {
    pub config: LeaseConfig,
    pub held: Arc<dyn Held>,
    pub shard: u32,
    pub standing: Arc<Standing>,
    /// Send time of the last successful renewal (or the acquisition).
    pub last_ok: Instant,
}

impl Renewer {
    pub fn run(mut self) {
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
