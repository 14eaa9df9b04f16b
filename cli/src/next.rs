//! `idutil next`: issuing IDs, and stopping cleanly on a signal.

use std::io::Write;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use idutil::Generator;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::args::Common;
use crate::report::{one_line, say};
use crate::BoxError;

/// IDs per batch that `next` issues and prints: a signal or an error stops
/// it within one batch.
const CHUNK: u64 = 1024;
/// How often `next --max-lead` looks at the clock again while waiting.
const LEAD_POLL: Duration = Duration::from_millis(5);
/// How long after a signal `next` may take to stop on its own before the
/// signal thread closes the generator itself: a write blocked on a pipe
/// that nobody reads never returns.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// The main thread is taking IDs from the generator (which may wait for a
/// reservation to be written).
const ISSUING: u8 = 0;
/// The main thread is writing IDs to the output.
const WRITING: u8 = 1;
/// A run warns when it ends further than this ahead of the wall clock.
const LEAD_WARNING: u64 = 60;
/// How often the signal thread looks for a caught signal. The handler
/// only stores the signal's number: no pipe or socket is written in it or
/// read after it, so no failing system call can lose a signal, hang the
/// end of a run or panic.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// The number of the last signal caught (0: none).
static CAUGHT: AtomicUsize = AtomicUsize::new(0);

/// `next` was stopped by a signal after saving its state.
#[derive(Debug)]
pub(crate) struct Interrupted(i32);

impl Interrupted {
    pub(crate) fn exit_status(&self) -> u8 {
        u8::try_from(128 + self.0).unwrap_or(1)
    }
}

impl Interrupted {
    fn name(&self) -> &'static str {
        match self.0 {
            SIGTERM => "SIGTERM",
            SIGINT => "SIGINT",
            SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.name();
        write!(
            f,
            "stopped by {name}: the IDs printed are complete lines, the exact last ID \
             issued is saved, and the next run continues right after it"
        )
    }
}

impl std::error::Error for Interrupted {}

pub(crate) fn next(
    common: &Common,
    n: u64,
    json: bool,
    max_lead: Option<Duration>,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let mut builder = Generator::builder();
    if let Some(shard) = common.shard {
        builder = builder.shard(shard);
    }
    if let Some(dir) = &common.state_dir {
        builder = builder.state_dir(dir);
    }
    if let Some(space) = &common.id_space {
        builder = builder.id_space(space);
    }
    if let Some(max_lead) = max_lead {
        builder = builder.max_lead(max_lead);
    }
    builder = builder.layout(common.layout()).expected_ids(n);
    #[cfg(lease)]
    if let Some(lease) = common.lease() {
        builder = builder.lease(lease);
    }
    // Caught from before the generator opens: a signal during the opening
    // waits in `CAUGHT` and stops the run before its first ID, with a
    // clean close.
    let mut handlers = Vec::new();
    for sig in [SIGTERM, SIGINT, SIGHUP] {
        let value = usize::try_from(sig).unwrap_or(usize::MAX);
        handlers.push(signal_hook::flag::register_usize(sig, &CAUGHT, value)?);
    }
    let generator = builder.open();
    let generator = match generator {
        Ok(generator) => generator,
        Err(e) => {
            unregister(handlers);
            return Err(e.into());
        }
    };
    let signal = AtomicI32::new(0);
    let (done, finished) = mpsc::channel::<()>();
    // What the main thread is doing, for the message of a stop that had
    // to wait: issuing (which may wait on the disk) or writing the output.
    let phase = AtomicU8::new(ISSUING);
    let started = std::time::Instant::now();
    let issued = thread::scope(|scope| {
        let (signal, generator, phase) = (&signal, &generator, &phase);
        let watcher = thread::Builder::new()
            .name("idutil-signals".into())
            .spawn_scoped(scope, move || loop {
                match finished.recv_timeout(SIGNAL_POLL) {
                    Err(RecvTimeoutError::Timeout) => {}
                    // The run ended.
                    _ => return,
                }
                let Ok(sig) = i32::try_from(CAUGHT.load(SeqCst)) else {
                    continue;
                };
                if sig == 0 {
                    continue;
                }
                signal.store(sig, SeqCst);
                if finished.recv_timeout(STOP_GRACE) == Err(RecvTimeoutError::Timeout) {
                    // Still stuck: every ID taken so far counts as
                    // issued, and the output may end mid-line.
                    let waiting_on = match phase.load(SeqCst) {
                        ISSUING => "waiting for the state file to be written (a slow disk)",
                        _ => "stuck writing the output, which may end in a cut line",
                    };
                    let saved = generator.close();
                    say!(
                        "idutil: stopped by {} while {waiting_on}; every ID taken is saved \
                         as issued, and the next run continues after them",
                        Interrupted(sig).name()
                    );
                    if let Err(e) = saved {
                        say!("idutil: error: {}", one_line(&e.to_string()));
                    }
                    std::process::exit(i32::from(Interrupted(sig).exit_status()));
                }
                return;
            });
        if let Err(e) = watcher {
            // Without the thread a signal could not stop the run cleanly.
            return Err(format!("cannot start a thread to catch signals: {e}").into());
        }
        // A signal caught while the generator opened stops the run at once.
        if let Ok(sig @ 1..) = i32::try_from(CAUGHT.load(SeqCst)) {
            signal.store(sig, SeqCst);
        }
        let issued = issue(generator, n, json, signal, phase, out).and_then(|()| Ok(out.flush()?));
        let _ = done.send(());
        issued
    });
    unregister(handlers);
    let lead = generator.lead();
    let closed = generator.close();
    issued?;
    closed?;
    if lead > LEAD_WARNING {
        warn_lead(generator.shard(), lead, n, started.elapsed());
    }
    match signal.load(SeqCst) {
        0 => Ok(()),
        sig => Err(Interrupted(sig).into()),
    }
}

/// Says why the shard runs `lead` seconds ahead of the wall clock after a
/// run that issued `n` IDs in `took`, and what to do: the cause is this
/// run's own demand only when it issued more than the shard's 65,536 IDs
/// a second.
fn warn_lead(shard: u32, lead: u64, n: u64, took: Duration) {
    let shown = jiff::SignedDuration::from_secs(i64::try_from(lead).unwrap_or(i64::MAX));
    let capacity = u64::from(u16::MAX) + 1;
    let seconds = took.as_secs_f64().max(1.0);
    if n as f64 > capacity as f64 * seconds {
        log::warn!(
            "shard {shard} now runs {shown:#} ahead of the wall clock: this run issued {n} IDs \
             in {:.1} s, and a shard holds 65,536 a second, so it borrowed later seconds. \
             Spread the load over more shards, or cap the lead with --max-lead",
            took.as_secs_f64()
        );
    } else {
        log::warn!(
            "shard {shard} now runs {shown:#} ahead of the wall clock, more than this run's \
             {n} IDs account for: other processes sharing the shard issued more than 65,536 \
             IDs a second, a clock on this host ran ahead, or the state was restored or \
             recovered from ahead. `idutil state` shows the shard's marks; the IDs stay \
             unique either way, and the shard comes back to the clock as it catches up"
        );
    }
}

/// Puts the signals' default actions back.
fn unregister(handlers: Vec<signal_hook::SigId>) {
    for id in handlers {
        signal_hook::low_level::unregister(id);
    }
}

/// Issues and prints `n` IDs, [`CHUNK`] at a time, until done or a signal
/// arrives.
fn issue(
    generator: &Generator,
    n: u64,
    json: bool,
    signal: &AtomicI32,
    phase: &AtomicU8,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    if json {
        out.write_all(b"[")?;
    }
    let mut left = n;
    let mut first = true;
    while left > 0 {
        if signal.load(SeqCst) != 0 {
            // Whatever was printed is flushed by the caller; a JSON array
            // stays open, so it cannot pass for a complete one.
            return Ok(());
        }
        let k = left.min(CHUNK);
        phase.store(ISSUING, SeqCst);
        let batch = generator.next_ids_nowait(k);
        phase.store(WRITING, SeqCst);
        let batch = match batch {
            Ok(batch) => batch,
            Err(idutil::Error::LeadCapReached { .. }) => {
                thread::sleep(LEAD_POLL);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for id in batch {
            if !json {
                writeln!(out, "{id}")?;
            } else if first {
                write!(out, "{id}")?;
                first = false;
            } else {
                write!(out, ",{id}")?;
            }
        }
        left -= k;
    }
    if json {
        out.write_all(b"]\n")?;
    }
    Ok(())
}
