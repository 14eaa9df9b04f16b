//! A held lease, whatever the engine: acquiring a usable shard, raising its
//! high-water second, and finishing with the exact last ID. The rules every
//! engine shares live here and in `renewal.rs`.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use super::renewal::{ahead, check_skew, Renewer, Shared};
use super::restore::restore_then_stop;
use super::{connect, host_time, new_token, Ask, Engine, LeaseConfig, LeaseError, Record, Trouble};
use crate::clock::Clock;
use crate::durable::FenceHook;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// A held lease: the shard, its engine and the renewal thread.
pub(crate) struct Lease {
    engine: Arc<dyn Engine>,
    config: LeaseConfig,
    shard: u32,
    record: Record,
    /// The layout's first and last Unix seconds.
    epoch: u64,
    last_second: u64,
    shared: Arc<Shared>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    finished: AtomicBool,
}

impl Lease {
    /// Leases the first free, usable shard of the allowed range (`only`
    /// narrows it to one shard; `skip` leaves some out) and starts renewing
    /// it. A shard whose record cannot be used (garbled, or at the end of
    /// the layout's range) is given back and skipped with a warning naming
    /// it, unless it was asked for by number; a clock too far from the
    /// store's refuses the lease.
    pub(crate) fn acquire(
        config: &LeaseConfig,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        time: &dyn Clock,
    ) -> Result<Lease> {
        let range = config.range(layout, only)?;
        let token = new_token();
        let mut skip = skip.to_vec();
        let mut skipped = Vec::new();
        loop {
            let ask = Ask {
                config,
                layout,
                range: range.clone(),
                skip: &skip,
                time,
                token: &token,
            };
            let (engine, grant) = match connect(&ask) {
                Ok(granted) => granted,
                Err(Error::Lease(LeaseError::NoFreeShard {
                    first,
                    last,
                    prefix,
                    stuck,
                    ..
                })) => {
                    return Err(LeaseError::NoFreeShard {
                        first,
                        last,
                        prefix,
                        skipped,
                        stuck,
                    }
                    .into())
                }
                Err(e) => return Err(e),
            };
            let engine: Arc<dyn Engine> = Arc::from(engine);
            let shard = grant.shard;
            let give_back = |e: LeaseError| {
                if let Err(trouble) = engine.finish(None, 0) {
                    log::warn!(
                        "cannot give back the lease on shard {shard}: {}",
                        trouble.into_error()
                    );
                }
                e
            };
            if let Some(e) = grant
                .server_time
                .and_then(|server| check_skew(config, None, host_time(), server))
            {
                return Err(give_back(e).into());
            }
            let record = match grant.record {
                Ok(record) if record.resume_at(layout) >= layout.counter_end() => {
                    Err(LeaseError::invalid_record(
                        shard,
                        engine.describe(),
                        "high_water",
                        format!(
                            "= {} is the layout's last second: the shard has no second left",
                            record.high_water.unwrap_or_default()
                        ),
                    ))
                }
                other => other,
            };
            let record = match record {
                Ok(record) => record,
                // One ID space is one layout: a shard of another is refused,
                // not skipped.
                Err(e @ LeaseError::LayoutMismatch { .. }) => return Err(give_back(e).into()),
                // The store failed while the grant was checked: not the
                // shard's fault.
                Err(e @ LeaseError::Store { .. }) => return Err(give_back(e).into()),
                Err(e) if only.is_some() => return Err(give_back(e).into()),
                Err(e) => {
                    let e = give_back(e);
                    log::warn!("skipping shard {shard}: {e}");
                    skipped.push(format!("shard {shard}: {}", short(&e)));
                    skip.push(shard);
                    continue;
                }
            };
            let shared = Arc::new(Shared::new(
                record.high_water.unwrap_or(0),
                record.seen.unwrap_or(0),
            ));
            if let Some(server) = grant.server_time {
                shared.lock().server = Some((server, std::time::Instant::now()));
            }
            let renewer = Renewer {
                config: config.clone(),
                engine: Arc::clone(&engine),
                shard,
                shared: Arc::clone(&shared),
                last_ok: grant.at,
            };
            let lease = Lease {
                engine,
                config: config.clone(),
                shard,
                record,
                epoch: layout.epoch(),
                last_second: layout.last_unix_second(),
                shared,
                renewer: Mutex::new(None),
                finished: false.into(),
            };
            // From here on, dropping `lease` gives the shard back.
            let handle = thread::Builder::new()
                .name(format!("idutil-lease-{shard}"))
                .spawn(move || renewer.run())
                .map_err(|e| {
                    LeaseError::invalid_config(format!("cannot start the renewal thread: {e}"))
                })?;
            *crate::sync::lock(&lease.renewer) = Some(handle);
            return Ok(lease);
        }
    }

    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// The generator's lead cap (whole seconds): `asked`
    /// ([`Builder::max_lead`](crate::Builder::max_lead)), at most
    /// [`LeaseConfig::max_lead`].
    pub(crate) fn max_lead(&self, asked: Option<u64>) -> u64 {
        let cap = self.config.max_lead.as_secs();
        asked.map_or(cap, |asked| asked.min(cap))
    }

    /// The shard's record as found when the lease was granted, or created.
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// Installs the hook that stops and resumes the generator's issuing,
    /// and applies the current state.
    pub(crate) fn set_hook(&self, hook: FenceHook) {
        let state = self.shared.lock();
        *crate::sync::lock(&self.shared.hook) = Some(hook);
        if state.stopped().is_some() {
            self.shared.apply(&state);
        }
    }

    /// Why the generator issues nothing (for its error): the fence, a
    /// skew, or a lost lease.
    pub(crate) fn fence_error(&self) -> LeaseError {
        self.shared
            .lock()
            .stopped()
            .cloned()
            .unwrap_or_else(|| LeaseError::fenced(self.shard, "the lease is being renewed"))
    }

    /// Records in the store that IDs up to `high_water` (Unix seconds) may
    /// be issued, if the lease is still held. Must succeed before any such
    /// ID is issued. A record found gone, garbled, lowered or taken stops
    /// the generator for good, after its mark is restored (`restore.rs`);
    /// the shard is never taken back. So does a
    /// generator whose clock has read further ahead of the store's than the
    /// skew limit: the mark is never raised for such a clock.
    pub(crate) fn raise(&self, high_water: u64, seen: u64) -> Result<()> {
        let server_now = self.shared.lock().server_now();
        if let Some(server) = server_now {
            let limit = self.config.max_skew;
            let ahead = ahead(std::time::Duration::from_secs(seen), server);
            if ahead > limit.as_secs_f64() + 1.0 {
                let e = LeaseError::ClockSkew {
                    shard: Some(self.shard),
                    ahead,
                    limit,
                };
                self.shared.stop_for_good(self.shard, e.clone());
                return Err(e.into());
            }
        }
        let known = self.shared.known_hw.load(Relaxed);
        let seen = self.seen_arg(seen);
        match self.engine.raise(high_water, seen, known) {
            Ok(()) => {
                self.shared.known_hw.fetch_max(high_water, Relaxed);
                self.shared.known_seen.fetch_max(seen, Relaxed);
                Ok(())
            }
            Err(Trouble::Again(e)) => Err(e.into()),
            Err(Trouble::Lost(e)) => {
                restore_then_stop(&*self.engine, &self.shared, self.shard, e.clone());
                Err(e.into())
            }
        }
    }

    /// `seen` for the store: a second outside the layout's range (a clock
    /// past its end) is not recorded (0), so the record stays valid.
    fn seen_arg(&self, seen: u64) -> u64 {
        if (self.epoch..=self.last_second).contains(&seen) {
            seen
        } else {
            0
        }
    }

    /// Clean close: records the exact last ID (Unix second, sequence), if
    /// any, gives the lease back and stops renewing. A last ID past every
    /// mark this holder raised cannot have been issued (the cursor followed
    /// a clock that ran ahead), so it is not recorded: the mark covers
    /// everything issued. Errors are logged: the lease then expires by
    /// itself, and the recorded high-water second still covers every ID.
    pub(crate) fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        self.finished.store(true, Relaxed);
        self.stop_renewing();
        let known = self.shared.known_hw.load(Relaxed);
        let last = last.filter(|(second, _)| *second <= known);
        let lost = self.shared.lock().lost.is_some();
        let seen = if lost { 0 } else { self.seen_arg(seen) };
        match self.engine.finish(last.filter(|_| !lost), seen) {
            Ok(()) => {}
            Err(trouble) => log::warn!(
                "shard {}: the lease was not given back cleanly ({}); it expires within {:?}, \
                 and the recorded high-water second covers every ID issued",
                self.shard,
                trouble.into_error(),
                self.config.ttl
            ),
        }
    }

    fn stop_renewing(&self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        let handle = crate::sync::lock(&self.renewer).take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A lease that was never used for a generator (its open failed):
        // nothing was issued under it, so just give it back.
        if !self.finished.load(Relaxed) {
            self.finish(None, 0);
        }
    }
}

/// Times `n` renewals of a lease taken for the purpose and given back
/// after: what one renewal costs a holder (a round trip and a write on the
/// store). For the crate's benchmarks; not part of the API.
#[doc(hidden)]
pub fn time_renewals(
    config: &LeaseConfig,
    layout: &Layout,
    n: usize,
) -> Result<Vec<std::time::Duration>> {
    let lease = Lease::acquire(config, layout, None, &[], &crate::SystemClock)?;
    let known = lease.shared.known_hw.load(Relaxed);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = std::time::Instant::now();
        lease
            .engine
            .renew(known, config.op_timeout())
            .map_err(Trouble::into_error)?;
        times.push(start.elapsed());
    }
    lease.finish(None, 0);
    Ok(times)
}

/// The first sentence of an error, for the list of skipped shards.
fn short(e: &LeaseError) -> String {
    let text = e.to_string();
    match text.split_once("; ") {
        Some((first, _)) => first.to_string(),
        None => text,
    }
}
