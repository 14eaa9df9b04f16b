//! Opening a generator from its [`Builder`]: the clock checked against the
//! layout, the shard and its state file taken, the restart planned, the
//! first window reserved and the reservation thread started.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

use super::builder::Builder;
use super::hot::{Cold, Hot, Inner, Padded};
use super::plan::{cover_seen, plan, Plan};
use super::{Generator, PAUSED};
use crate::clock::Clock;
use crate::durable::{self, Durable};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shard::ShardSource;
use crate::state::{self, Remedy};

/// What [`Builder::open`] does.
pub(super) fn open<C: Clock>(mut b: Builder<C>) -> Result<Generator<C>> {
    let ephemeral = b.ephemeral;
    // An ephemeral generator reads nothing from the environment.
    let layout = match b.layout {
        Some(layout) => layout,
        None if ephemeral => Layout::DEFAULT,
        None => Layout::from_env()?.unwrap_or_default(),
    };
    b.layout = Some(layout);
    // Before anything is read, created or locked: a later run must not
    // mistake such a reading for issued IDs, and a clock this wrong
    // leaves no trace.
    let usable_last = layout.last_unix_second() - effective_margin(&layout, b.end_margin);
    check_clock(&layout, b.time.now(), usable_last)?;
    if ephemeral {
        b.state_dir = Some(state::scratch_dir()?);
        b.id_space = Some(format!("ephemeral-{}", std::process::id()));
        b.shard = Some(b.shard.unwrap_or(0));
    }
    let (durable, shard, source) = durable::open(&durable::Request {
        settings: &b.durable,
        shard: b.shard,
        state_dir: b.state_dir.as_deref(),
        id_space: b.id_space.as_deref(),
        layout: &layout,
        time: &b.time,
        ephemeral,
    })?;
    let mut generator = start(b, durable, shard, source)?;
    generator.ephemeral = ephemeral;
    Ok(generator)
}

/// The end margin a generator keeps: at most half the layout's range, so
/// that a layout of a few minutes (in tests, say) keeps a usable range.
fn effective_margin(layout: &Layout, margin: u64) -> u64 {
    margin.min(layout.max_seconds() / 2)
}

/// A clock reading outside the layout's range or in its end margin (up to
/// `usable_last`) is refused before anything is written.
fn check_clock(layout: &Layout, now_unix: u64, usable_last: u64) -> Result<()> {
    if (layout.epoch()..=usable_last).contains(&now_unix) {
        return Ok(());
    }
    Err(Error::ClockOutOfRange {
        unix_second: now_unix,
        first: layout.epoch(),
        last: usable_last,
    })
}

/// Plans the restart of the shard `durable` holds, reserves the first
/// window and starts the reservation thread.
fn start<C: Clock>(
    b: Builder<C>,
    durable: Durable,
    shard: u32,
    source: ShardSource,
) -> Result<Generator<C>> {
    let forks = crate::fork::install();
    let layout = b.layout.unwrap_or_default();
    let now_unix = b.time.now();
    let end_margin = effective_margin(&layout, b.end_margin);
    let usable_last = layout.last_unix_second() - end_margin;
    // The clock moved since `open` looked: still nothing written.
    check_clock(&layout, now_unix, usable_last)?;
    let prev = durable.load()?;
    if prev.is_none() && !b.ephemeral && source != ShardSource::Lease {
        log::warn!(
            "shard {shard} has no state file in {}, so it starts afresh at the clock: \
             if this shard issued IDs before from another state directory (a container \
             restarted without a persistent volume, another host with the same shard), \
             it may issue the same IDs again",
            durable.dir().display()
        );
    }
    if let Some(prev) = &prev {
        state::check_layout(durable.path(), prev, &layout)?;
    }
    let Plan {
        mut file,
        mut start,
        rollback,
    } = plan(prev, &layout, shard, now_unix)
        .map_err(|reason| Error::bad_state(durable.path(), shard, reason, Remedy::Recover))?;
    if let Some(back) = rollback {
        log::warn!(
            "the wall clock is {back} s behind the last run of shard {shard} \
             (state file {}); clock id bumped to {}, IDs continue after everything \
             issued before",
            durable.path().display(),
            file.clock_id
        );
    }
    // The lease's record covers every holder of the shard, this host's
    // state file only this host: resume after the later of the two.
    start = durable.resume(&layout, start, &mut file);
    let start_sec = layout.counter_second(start);
    if start_sec > usable_last && start_sec <= layout.last_unix_second() {
        // Refused before the reservation is written (see the crate
        // docs, *A clock far ahead*). Past the very end, the generator
        // opens and answers `EndOfRange`, as it always has.
        return Err(Error::EndMarginReached {
            shard,
            from: usable_last + 1,
            margin: end_margin,
            last_unix_second: layout.last_unix_second(),
        });
    }
    // Seconds issued far ahead: the reservation stops short of them until
    // the generator passes over them.
    let island = file.skip;
    let mut reserved = start_sec.saturating_add(b.window).min(usable_last);
    if let Some((first, _)) = island {
        reserved = reserved.min(first.saturating_sub(1)).max(start_sec);
    }
    let value = file.clock_value();
    let mark = file.high_water.get(&value).copied().unwrap_or(0);
    file.high_water.insert(value, mark.max(reserved));
    cover_seen(&mut file);
    durable.reserve(&file, reserved)?;

    let inner = Arc::new(Inner {
        cursor: Padded(AtomicU64::new(start)),
        hot: Padded(Hot {
            limit: AtomicU64::new(0),
            last_now: AtomicU64::new(now_unix),
            time: b.time,
            layout,
            base: layout.base(value, shard),
            usable_last,
            forks,
        }),
        shard,
        shard_source: source,
        clock_id: file.clock_id,
        clock_value: value,
        window: b.window,
        max_lead: b.max_lead,
        end_margin,
        max_step: b.max_step,
        path: durable.path().to_path_buf(),
        dir: durable.dir().to_path_buf(),
        hold: durable.hold(),
        cold: Padded(Mutex::new(Cold {
            seen_max: file.seen_max,
            seen_run: now_unix,
            in_rollback: false,
            reserved,
            wanted: reserved,
            // The first new second (by the clock or by borrowing) asks
            // for the next window: a burst right after opening then has
            // the whole first window to outrun the write.
            trigger: start_sec,
            rate_from: start,
            rate_since: Instant::now(),
            recent: 0,
            warned_out_of_range: false,
            trusted: (now_unix, Instant::now()),
            step: None,
            island,
            failure: None,
            failures: 0,
            replaced: None,
            closing: false,
            file,
        })),
        changed: Condvar::new(),
    });
    inner.publish_limit(&inner.lock(), 0);
    let weak = Arc::downgrade(&inner);
    inner.hold.on_fence(Box::new(move |up| {
        if let Some(inner) = weak.upgrade() {
            if up {
                inner.cursor.0.fetch_or(PAUSED, Relaxed);
            } else {
                inner.cursor.0.fetch_and(!PAUSED, Relaxed);
            }
        }
    }));
    let worker = Arc::clone(&inner);
    let extender = thread::Builder::new()
        .name(format!("idutil-shard-{shard}"))
        .spawn(move || worker.extend_until_closed(durable))
        .map_err(|e| {
            // Nothing was issued: give the lease back (and stop its
            // renewal thread) before the generator goes away.
            inner.hold.give_up(0);
            Error::io("start the reservation thread for", &inner.path, e)
        })?;
    Ok(Generator {
        inner,
        extender: Mutex::new(Some(extender)),
        ephemeral: false,
    })
}
