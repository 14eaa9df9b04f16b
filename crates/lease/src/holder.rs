//! A held lease, whatever the engine: acquiring a usable shard, raising its
//! high-water second, and finishing with the exact last ID. The rules every
//! engine shares live here, in `renewal.rs` and in `standing.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clock::Clock;
use crate::interface::{Ask, Engine, Held, Trouble};
use crate::layout::Layout;
use crate::record::Record;
use crate::renewal::Renewer;
use crate::restore::restore_then_stop;
use crate::skew::{check_ahead, check_skew, host_time};
use crate::standing::{FenceHook, Standing};
use crate::{LeaseConfig, LeaseError, LeaseResult as Result};

/// A held lease: the shard, its engine and the renewal thread.
pub struct Lease {
    held: Arc<dyn Held>,
    config: LeaseConfig,
    shard: u32,
    record: Record,
    /// The layout's first and last Unix seconds.
    epoch: u64,
    last_second: u64,
    standing: Arc<Standing>,
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
    pub fn acquire(
        engine: &dyn Engine,
        config: &LeaseConfig,
        layout: &Layout,
        only: Option<u32>,
        skip: &[u32],
        time: &dyn Clock,
    ) -> Result<Arc<Lease>> {
        let range = config.range(layout, only)?;
        let deadline = Instant::now() + config.open_timeout;
        let token = new_token();
        let mut skip = skip.to_vec();
        let mut skipped = Vec::new();
        loop {
            let ask = Ask {
                config,
                layout,
                range: range.clone(),
                skip: &skip,
                token: &token,
                deadline,
            };
            let (held, grant) = match engine.connect(&ask, time) {
                Ok(granted) => granted,
                Err(mut e @ LeaseError::NoFreeShard { .. }) => {
                    // This open's skipped shards, then the engine's (the
                    // shards it passes over by itself, as the database's).
                    if let LeaseError::NoFreeShard {
                        skipped: passed_over,
                        ..
                    } = &mut e
                    {
                        skipped.append(passed_over);
                        *passed_over = skipped;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let held: Arc<dyn Held> = Arc::from(held);
            let shard = grant.shard;
            let give_back = |e: LeaseError| {
                if let Err(trouble) = held.finish(None, 0) {
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
                return Err(give_back(e));
            }
            let record = match grant.record {
                Ok(record) if record.resume_at(layout) >= layout.counter_end() => {
                    Err(LeaseError::invalid_record(
                        shard,
                        held.describe(),
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
                Err(e @ LeaseError::LayoutMismatch { .. }) => return Err(give_back(e)),
                // The store failed while the grant was checked: not the
                // shard's fault.
                Err(e @ LeaseError::Store { .. }) => return Err(give_back(e)),
                Err(e) if only.is_some() => return Err(give_back(e)),
                Err(e) => {
                    let e = give_back(e);
                    log::warn!("skipping shard {shard}: {e}");
                    skipped.push(format!("shard {shard}: {}", short(&e)));
                    skip.push(shard);
                    continue;
                }
            };
            let standing = Arc::new(Standing::new(
                shard,
                record.high_water.unwrap_or(0),
                record.seen.unwrap_or(0),
                grant.server_time,
            ));
            let renewer = Renewer {
                config: config.clone(),
                held: Arc::clone(&held),
                shard,
                standing: Arc::clone(&standing),
                last_ok: grant.at,
            };
            let lease = Lease {
                held,
                config: config.clone(),
                shard,
                record,
                epoch: layout.epoch(),
                last_second: layout.last_unix_second(),
                standing,
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
            return Ok(Arc::new(lease));
        }
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// The generator's lead cap (whole seconds): `asked`
    /// ([`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead)), at most
    /// [`LeaseConfig::max_lead`].
    pub fn max_lead(&self, asked: Option<u64>) -> u64 {
        let cap = self.config.max_lead.as_secs();
        asked.map_or(cap, |asked| asked.min(cap))
    }

    /// Where the shard resumes: at `start` (worked out from this host's
    /// state file), or later if the record says a holder elsewhere issued
    /// past it. The record covers every holder of the shard, the state file
    /// only this host: the later of the two wins, and the highest wall-clock
    /// second either saw goes into `seen`.
    pub fn resume(&self, layout: &Layout, start: u64, seen: &mut u64) -> u64 {
        if let Some(recorded) = self.record.seen {
            *seen = (*seen).max(recorded);
        }
        start.max(self.record.resume_at(layout))
    }

    /// Installs the hook that stops and resumes the generator's issuing,
    /// and applies the current state.
    /// The generator installs it as the last step of its open, after the
    /// open's own raise: from here on a raise is any raise.
    pub fn set_hook(&self, hook: impl Fn(bool) + Send + Sync + 'static) {
        self.held.opened();
        self.standing.set_hook(Box::new(hook) as FenceHook);
    }

    /// Why the generator issues nothing (for its error): the fence, a
    /// skew, or a lost lease.
    pub fn fence_error(&self) -> LeaseError {
        self.standing
            .stopped()
            .unwrap_or_else(|| LeaseError::fenced(self.shard, "the lease is being renewed"))
    }

    /// Records in the store that IDs up to `high_water` (Unix seconds) may
    /// be issued, if the lease is still held. Must succeed before any such
    /// ID is issued. A record found gone, garbled, lowered or taken stops
    /// the generator for good, after its mark is restored (`restore.rs`);
    /// the shard is never taken back. So does a
    /// generator whose clock has read further ahead of the store's than the
    /// skew limit: the mark is never raised for such a clock.
    pub fn raise(&self, high_water: u64, seen: u64) -> Result<()> {
        if let Some(e) = self.standing.server_now().and_then(|server| {
            check_ahead(
                &self.config,
                Some(self.shard),
                Duration::from_secs(seen),
                server,
            )
        }) {
            self.standing.stop_for_good(e.clone());
            return Err(e);
        }
        let seen = self.seen_arg(seen);
        match self
            .held
            .raise(high_water, seen, self.standing.known_mark())
        {
            Ok(()) => {
                self.standing.raised(high_water, seen);
                Ok(())
            }
            Err(Trouble::Again(e)) => Err(e),
            Err(Trouble::Lost(e)) => {
                restore_then_stop(&*self.held, &self.standing, e.clone());
                Err(e)
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
    pub fn finish(&self, last: Option<(u64, u32)>, seen: u64) {
        self.finished.store(true, Relaxed);
        self.stop_renewing();
        let known = self.standing.known_mark();
        let last = last.filter(|(second, _)| *second <= known);
        let lost = self.standing.is_lost();
        let seen = if lost { 0 } else { self.seen_arg(seen) };
        match self.held.finish(last.filter(|_| !lost), seen) {
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
        self.standing.close();
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

/// Measures what renewing a lease costs against the store `config` names:
/// takes a lease on a free shard for `layout` as a generator would (the
/// shard's mark is kept, nothing is issued), times `n` renewals of it one
/// after the other (each a round trip and a write on the store), and gives
/// it back. The times, in order. With `n` of 0, it only takes the lease and
/// gives it back.
///
/// The times say how much of the fence ([`LeaseConfig::fence_after`]) a
/// renewal uses on this store (BENCHMARKS.md, *A lease holder's cold
/// start*, quotes one).
///
/// # Errors
///
/// What taking the lease can return (see [`LeaseError`]: no free shard,
/// the store unreachable, the clocks too far apart, unusable settings),
/// and the error of a renewal that fails.
pub fn time_renewals(
    engine: &dyn Engine,
    config: &LeaseConfig,
    layout: &Layout,
    n: usize,
    time: &dyn Clock,
) -> Result<Vec<Duration>> {
    let lease = Lease::acquire(engine, config, layout, None, &[], time)?;
    let known = lease.standing.known_mark();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        lease
            .held
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

static TOKENS: AtomicU64 = AtomicU64::new(0);

/// A token naming this holder: host, pid, time and a counter, so `idutil
/// state` can say who holds a shard.
fn new_token() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = TOKENS.fetch_add(1, Relaxed);
    format!("{host}:{}:{nanos}:{n}", std::process::id())
}
