//! Opening a generator from its [`Builder`]: the clock checked against the
//! layout, the shard and its state file taken, the restart planned, the
//! first window reserved and the shard thread started.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::builder::Builder;
use super::inner::{Inner, Start};
use super::plan::{cover_seen, plan, Plan};
use super::Generator;
use crate::clock::Clock;
use crate::durable::{self, ClockVerdict, Durable};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shard::ShardSource;
use crate::state::{self, Remedy, StateFile};

impl<C: Clock> Builder<C> {
    /// Takes the shard's lock, reads its state and reserves the first
    /// window durably.
    ///
    /// # Errors
    ///
    /// [`Error::ClockOutOfRange`] if the clock reads outside the layout's
    /// range or in its end margin (then nothing is created or locked),
    /// [`Error::EndMarginReached`] if the shard already issued into its end
    /// margin, [`Error::ShardOutOfRange`], [`Error::InvalidEnv`] or
    /// [`Error::UnusableHostname`] for a bad shard,
    /// [`Error::InvalidIdSpace`] for a bad ID space name,
    /// [`Error::Locked`] if another generator holds the shard in the state
    /// directory, [`Error::HostLocked`] if one on this host holds it in the
    /// same ID space, [`Error::RelativeStateDir`], [`Error::UnusableStateDir`]
    /// or [`Error::Untrusted`] if the state directory or a file in it fails [the trust
    /// checks](crate::state#security-the-directory-is-a-trust-boundary),
    /// [`Error::BadState`] if the state file cannot be trusted,
    /// [`Error::Io`] if the state directory cannot be used,
    /// [`Error::InvalidEnv`] if `IDUTIL_LAYOUT` cannot be read; with a
    /// lease, [`Error::Lease`] if no shard is free, the store cannot be
    /// reached, its clock and this host's disagree or the shard's record
    /// cannot be trusted, and [`Error::InvalidEnv`] if `IDUTIL_LEASE_URL`
    /// is set but blank.
    pub fn open(self) -> Result<Generator<C>> {
        open(self)
    }
}

/// What [`Builder::open`] does.
fn open<C: Clock>(b: Builder<C>) -> Result<Generator<C>> {
    let recipe = b.clone();
    let ephemeral = b.ephemeral;
    // An ephemeral generator reads nothing from the environment.
    let layout = match b.layout {
        Some(layout) => layout,
        None if ephemeral => Layout::DEFAULT,
        None => Layout::from_env()?.unwrap_or_default(),
    };
    // Before anything is read, created or locked: a later run must not
    // mistake such a reading for issued IDs, and a clock this wrong
    // leaves no trace.
    let bounds = Bounds::of(layout, b.end_margin);
    check_clock(&layout, b.time.now(), bounds.usable_last)?;
    let (shard, state_dir, id_space) = if ephemeral {
        (
            Some(b.shard.unwrap_or(0)),
            Some(state::scratch_dir()?),
            None,
        )
    } else {
        (b.shard, b.state_dir.clone(), b.id_space.clone())
    };
    let (durable, shard, source) = durable::open(&durable::Request {
        settings: &b.durable,
        shard,
        state_dir: state_dir.as_deref(),
        id_space: id_space.as_deref(),
        layout: &layout,
        time: &*b.time,
        ephemeral,
        member_wait: b.member_wait,
        max_lead: b.max_lead,
    })?;
    start(b, recipe, bounds, durable, shard, source)
}

/// The layout a generator issues in and the end of its range, worked out
/// once when it opens from [`Builder::end_margin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bounds {
    layout: Layout,
    /// The end margin it keeps: at most half the layout's range, so that a
    /// layout of a few minutes (in tests, say) keeps a usable range.
    margin: u64,
    /// The last Unix second it issues in: the layout's last second less the
    /// margin.
    usable_last: u64,
}

impl Bounds {
    fn of(layout: Layout, margin: u64) -> Self {
        let margin = margin.min(layout.max_seconds() / 2);
        Bounds {
            layout,
            margin,
            usable_last: layout.last_unix_second() - margin,
        }
    }
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
/// window and starts the shard thread.
fn start<C: Clock>(
    b: Builder<C>,
    recipe: Builder<C>,
    bounds: Bounds,
    durable: Durable,
    shard: u32,
    source: ShardSource,
) -> Result<Generator<C>> {
    let forks = crate::fork::install();
    let now_unix = b.time.now();
    let layout = bounds.layout;
    // The clock moved since `open` looked: still nothing written.
    check_clock(&layout, now_unix, bounds.usable_last)?;
    let prev = durable.load()?;
    if let Some(prev) = &prev {
        state::check_layout(durable.path(), prev, &layout)?;
    }
    // A process sharing the shard judges its clock by the members' time:
    // the running members', or the last ones' of this boot.
    let (now, step) = if durable.is_shared() {
        let seen_max = prev.as_ref().map_or(0, |p| p.seen_max);
        members_time(&durable, b.max_step, shard, now_unix, seen_max)?
    } else {
        (now_unix, None)
    };
    let (file, start, reserved) = if durable.plans() {
        plan_restart(&b, bounds, &durable, prev, shard, source.clone(), now)?
    } else {
        join(&layout, &durable, prev, now)?
    };
    let inner = Inner::new(Start {
        time: b.time,
        layout,
        shard,
        shard_source: source,
        file,
        counter: start,
        now,
        step,
        reserved,
        usable_last: bounds.usable_last,
        end_margin: bounds.margin,
        window: b.window,
        max_lead: durable.max_lead(b.max_lead),
        max_step: b.max_step,
        expected: b.expected,
        hold: durable.hold(),
        path: durable.path().to_path_buf(),
        dir: durable.dir().to_path_buf(),
        forks,
    });
    let worker = Arc::clone(&inner);
    let shard_thread = thread::Builder::new()
        .name(shard_thread_name(shard))
        .spawn(move || worker.shard_thread(durable))
        .map_err(|e| {
            inner.give_up_unissued();
            Error::io("start the shard thread for", inner.path(), e)
        })?;
    Ok(Generator {
        inner,
        shard_thread: Mutex::new(Some(shard_thread)),
        ephemeral: b.ephemeral,
        recipe,
        child: Default::default(),
    })
}

/// The shard thread's name, as [`Generator`]'s docs give it.
fn shard_thread_name(shard: u32) -> String {
    format!("idutil-shard-{shard}")
}

/// Where a generator that holds the shard alone, or first of the processes
/// sharing it, starts: the restart planned from the state file and the
/// clock, the first window reserved. The state as written, the first
/// counter value and the second reserved.
fn plan_restart<C: Clock>(
    b: &Builder<C>,
    bounds: Bounds,
    durable: &Durable,
    prev: Option<StateFile>,
    shard: u32,
    source: ShardSource,
    now_unix: u64,
) -> Result<(StateFile, u64, u64)> {
    let Bounds {
        layout,
        margin: end_margin,
        usable_last,
    } = bounds;
    if prev.is_none() && !b.ephemeral && source != ShardSource::Lease {
        log::warn!(
            "shard {shard} has no state file in {}, so it starts afresh at the clock: \
             if this shard issued IDs before from another state directory (a container \
             restarted without a persistent volume, another host with the same shard), \
             it may issue the same IDs again",
            durable.dir().display()
        );
    }
    // The first of the processes sharing the shard, the ones before it all
    // gone within this boot: the claim file may say exactly how far they
    // drew (see `Generator`, *What a crash costs*).
    let (frontier, floor) = match &prev {
        Some(prev) if durable.is_shared() => (
            durable.frontier(&layout, prev)?,
            durable.claim_floor(&layout, prev)?,
        ),
        _ => (None, None),
    };
    let Plan {
        mut file,
        mut start,
        rollback,
    } = plan(prev, &layout, shard, now_unix)
        .map_err(|reason| Error::bad_state(durable.path(), shard, reason, Remedy::Recover))?;
    if let (Some(next), None) = (frontier, rollback) {
        // Never later than the plan's start, after the mark (which the
        // frontier is within) or at the clock.
        start = next.max(layout.counter_at(now_unix)).min(start);
    }
    if let (Some(floor), None) = (floor, rollback) {
        // After everything the members drew in this boot, whatever the
        // state file says (an older copy put back with the same mark
        // holds an older exact last ID).
        start = start.max(floor);
    }
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
        // Refused before the reservation is written (see `Generator`, *A
        // clock outside the layout's range, or far ahead*). Past the very
        // end, the generator opens and answers `EndOfRange`, as it always has.
        return Err(Error::EndMarginReached {
            shard,
            from: usable_last + 1,
            margin: end_margin,
            last_unix_second: layout.last_unix_second(),
        });
    }
    // Seconds issued far ahead: the reservation stops short of them until
    // the generator passes over them.
    let mut reserved = start_sec.saturating_add(b.window).min(usable_last);
    if let Some((first, _)) = file.skip {
        reserved = reserved.min(first.saturating_sub(1)).max(start_sec);
    }
    let value = file.clock_value();
    let mark = file.high_water.get(&value).copied().unwrap_or(0);
    file.high_water.insert(value, mark.max(reserved));
    cover_seen(&mut file);

    let file = if durable.is_shared() {
        // Written as planned, not over the last run's file.
        durable.begin(&file, start, now_unix)?;
        file
    } else {
        durable.reserve(&file, reserved)?
    };
    Ok((file, start, reserved))
}

/// The second a generator that shares its shard acts on, and the forward
/// step of its clock it does not follow yet (how far ahead, held for how
/// long): its clock's `now_unix`, unless that is further ahead of the
/// time the processes sharing the shard keep (the running members', or
/// the last ones' of this boot) than a running generator follows at once
/// (see [`Builder::max_clock_step`]). Then it acts on the members' time,
/// and follows its own clock once the step has held for the confirmation
/// time, counted from when the first process saw it, as a running
/// generator does: one process's far clock never drags the others' IDs
/// ahead at once, and a real step of the host's clock is followed however
/// short-lived its processes are.
fn members_time(
    durable: &Durable,
    max_step: Option<(u64, Duration)>,
    shard: u32,
    now_unix: u64,
    seen_max: u64,
) -> Result<(u64, Option<(u64, Duration)>)> {
    let Some((max_step, confirm)) = max_step else {
        return Ok((now_unix, None));
    };
    match durable.judge_clock(now_unix, seen_max, max_step, confirm)? {
        ClockVerdict::Follow => Ok((now_unix, None)),
        ClockVerdict::Confirmed { ahead } => {
            log::warn!(
                "the wall clock of shard {shard} has held {ahead} s ahead of the time the \
                 processes sharing it kept for {} s: following it",
                confirm.as_secs()
            );
            Ok((now_unix, None))
        }
        ClockVerdict::Hold {
            members,
            ahead,
            held,
        } => {
            log::warn!(
                "the wall clock of this process reads {ahead} s ahead of the time the \
                 processes sharing shard {shard} keep (more than the {max_step} s a generator \
                 follows at once); its IDs go on at their time until the clock has held there \
                 for {} s ({} s so far)",
                confirm.as_secs(),
                held.as_secs()
            );
            Ok((members, Some((ahead, held))))
        }
    }
}

/// Where a generator that joins the processes sharing its shard starts:
/// the state as they left it, the clock's second (its first call draws a
/// block from the shard's counter, after everything handed out), and the
/// second they reserved.
fn join(
    layout: &Layout,
    durable: &Durable,
    prev: Option<StateFile>,
    now_unix: u64,
) -> Result<(StateFile, u64, u64)> {
    let Some(mut file) = prev else {
        // The member that let this one in writes its state first.
        return Err(Error::io(
            "join the generators sharing",
            durable.path(),
            std::io::Error::other("the shard has no state file yet; try again"),
        ));
    };
    file.seen_max = file.seen_max.max(now_unix);
    file.seen_last_run = file.seen_last_run.max(now_unix);
    let reserved = file
        .high_water
        .get(&file.clock_value())
        .copied()
        .unwrap_or(0);
    Ok((file, layout.counter_at(now_unix), reserved))
}

#[cfg(test)]
mod tests {
    use super::Bounds;
    use crate::layout::Layout;

    #[test]
    fn the_shard_thread_is_named_after_its_shard() {
        let generator = crate::Builder::ephemeral().shard(7).open().unwrap();
        let name = crate::sync::lock(&generator.shard_thread)
            .as_ref()
            .and_then(|handle| handle.thread().name().map(str::to_owned));
        assert_eq!(name.as_deref(), Some("idutil-shard-7"));
        generator.close().unwrap();
    }

    #[test]
    fn the_end_margin_is_kept_whole_up_to_half_the_range() {
        let layout = Layout::DEFAULT;
        let day = 86_400;
        let bounds = Bounds::of(layout, day);
        assert_eq!(bounds.margin, day);
        assert_eq!(bounds.usable_last, layout.last_unix_second() - day);
    }

    #[test]
    fn a_short_layout_keeps_half_its_range() {
        // 8 bits of seconds: 255 s, less than the day asked for.
        let layout = Layout::new(8, 0, 16, 5, 1_000).unwrap();
        let bounds = Bounds::of(layout, 86_400);
        assert_eq!(bounds.margin, 127);
        assert_eq!(bounds.usable_last, 1_000 + 255 - 127);
    }
}
