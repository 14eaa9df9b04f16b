//! A shard shared by the processes of a host (see the `state` module,
//! *Processes sharing a shard*): what a member does during its turn on the
//! claim file. Drawing a block of the shard's counter, writing the state
//! file over what the other members wrote, and leaving.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::state::{Claims, StateFile, Store};

/// A block drawn from the shard's counter: `start..end`, counter values
/// no other member was or will be given. Empty (`start == end`) when the
/// durable mark leaves no room for `min` values: reserve further, then
/// draw again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The highest second reserved for this clock id, as the members left
    /// it in the claim file (at least the `reserved` asked with).
    pub(crate) reserved: u64,
}

/// What a member asks a draw for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    /// The first counter value the block may start at: the member's cursor.
    pub(crate) from: u64,
    /// How many values it would like.
    pub(crate) size: u64,
    /// How many it needs at least (a batch is taken in one step).
    pub(crate) min: u64,
    /// The members' clock id, and the highest second the member knows to
    /// be reserved for it.
    pub(crate) clock_id: u64,
    pub(crate) reserved: u64,
    /// The wall-clock second the member acts on, recorded for the
    /// processes that join ([`Claims::clock`]).
    pub(crate) now: u64,
}

/// Draws a block during a turn on the claim file.
pub(crate) fn draw(store: &Store, layout: &Layout, ask: Ask) -> Result<Block> {
    let Some(turn) = store.turn()? else {
        return Ok(Block {
            start: ask.from,
            end: u64::MAX,
            reserved: ask.reserved,
        });
    };
    let mut claims = store.claims(&turn)?;
    let mut reserved = match claims.reserved {
        Some((id, second)) if id == ask.clock_id => second.max(ask.reserved),
        _ => ask.reserved,
    };
    if claims.next.is_none() {
        // Nothing this boot vouches for (a new claim file, one garbled,
        // an older copy put back): other members may have drawn blocks up
        // to their own reservations, beyond this one's. The state file's
        // mark bounds them all.
        reserved = reserved.max(disk_mark(store, ask.clock_id)?);
    }
    let reserved = reserved.min(layout.last_unix_second());
    let limit = layout.counter_at(reserved.saturating_add(1));
    // Without a claim this boot can vouch for, nothing below the mark: it
    // counts as handed out.
    let next = claims.next.unwrap_or(limit);
    if claims.next.is_none() {
        claims.next = Some(next);
        store.set_claims(&turn, &claims)?;
    }
    let start = next.max(ask.from);
    let end = start.saturating_add(ask.size.max(ask.min)).min(limit);
    if end.saturating_sub(start) < ask.min.max(1) {
        return Ok(Block {
            start,
            end: start,
            reserved,
        });
    }
    claims.next = Some(end);
    record_time(&mut claims, ask.now);
    store.set_claims(&turn, &claims)?;
    Ok(Block {
        start,
        end,
        reserved,
    })
}

/// How a clock reading stands against the time the processes sharing the
/// shard keep (see [`judge_clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockVerdict {
    /// Within the forward-step limit of the members' time, or nothing to
    /// judge it by: act on the reading.
    Follow,
    /// A step this far ahead of the members' time that has held for the
    /// confirmation time since a process first saw it: act on the reading.
    Confirmed { ahead: u64 },
    /// Further ahead of the members' time than the limit: act on
    /// `members`, the step having held for `held` so far.
    Hold {
        members: u64,
        ahead: u64,
        held: Duration,
    },
}

/// Judges `reading`, the clock of a process that opens the shard, against
/// the time the processes sharing it keep: the second the last of them to
/// draw acted on, plus the time elapsed since on the boot's clock (which
/// a wall-clock step does not move). A reading more than `max_step`
/// ahead of it is a step a running generator would not follow yet
/// either: it is recorded in the claim file with when it was first seen,
/// so that processes opening later follow it once it has held for
/// `confirm`, however short-lived each of them is.
pub(crate) fn judge_clock(
    store: &Store,
    reading: u64,
    seen_max: u64,
    max_step: u64,
    confirm: Duration,
) -> Result<ClockVerdict> {
    // Within the step limit of the highest clock reading any run of the
    // shard recorded: no step to hold back.
    if reading <= seen_max.saturating_add(max_step) {
        return Ok(ClockVerdict::Follow);
    }
    let Some(turn) = store.turn()? else {
        return Ok(ClockVerdict::Follow);
    };
    let mut claims = store.claims(&turn)?;
    let (Some((second, then)), Some(boot)) = (claims.clock, boot_millis()) else {
        return Ok(ClockVerdict::Follow);
    };
    // A record from the future of this boot's clock is not one to judge by.
    let Some(elapsed) = boot.checked_sub(then) else {
        return Ok(ClockVerdict::Follow);
    };
    let members = second.saturating_add(elapsed / 1000);
    if reading <= members.saturating_add(max_step) {
        return Ok(ClockVerdict::Follow);
    }
    let ahead = reading - members;
    if let Some((seen, at)) = claims.step {
        if let Some(held) = boot.checked_sub(at) {
            // The same step, give or take the clock's own ticks.
            if reading.abs_diff(seen.saturating_add(held / 1000)) <= 2 {
                let held = Duration::from_millis(held);
                if held >= confirm {
                    return Ok(ClockVerdict::Confirmed { ahead });
                }
                return Ok(ClockVerdict::Hold {
                    members,
                    ahead,
                    held,
                });
            }
        }
    }
    claims.step = Some((reading, boot));
    store.set_claims(&turn, &claims)?;
    Ok(ClockVerdict::Hold {
        members,
        ahead,
        held: Duration::ZERO,
    })
}

/// The time since boot, in milliseconds.
fn boot_millis() -> Option<u64> {
    u64::try_from(crate::clock::since_boot()?.as_millis()).ok()
}

/// The members' time as the claim file records it: the second `now` the
/// member acts on, with the time since boot. A recorded step the member
/// now acts on (it followed it) is done with.
fn record_time(claims: &mut Claims, now: u64) {
    let Some(boot) = boot_millis() else {
        return;
    };
    // Never back: a process whose clock is behind the others' does not
    // become the time they are judged by.
    let kept = claims.clock.and_then(|(second, then)| {
        let elapsed = boot.checked_sub(then)?;
        Some(second.saturating_add(elapsed / 1000))
    });
    claims.clock = Some((kept.map_or(now, |kept| kept.max(now)), boot));
    if let Some((seen, at)) = claims.step {
        let stepped = seen.saturating_add(boot.saturating_sub(at) / 1000);
        if now.saturating_add(2) >= stepped {
            claims.step = None;
        }
    }
}

/// The first member writes its plan, `file` (whose mark it reserves),
/// starts the counter at `start`, and lets the others join.
pub(crate) fn begin(store: &Store, file: &StateFile, start: u64, now: u64) -> Result<()> {
    let Some(turn) = store.turn()? else {
        return store.save(file);
    };
    store.save(file)?;
    let mut claims = store.claims(&turn)?;
    claims.next = Some(start);
    claims.reserved = mark(file).map(|m| (file.clock_id, m));
    record_time(&mut claims, now);
    store.set_claims(&turn, &claims)?;
    drop(turn);
    store.share()
}

/// Where the first process to open the shard again in this boot, every
/// member before it gone (killed, say), may start: the claim file's
/// counter, the exact frontier of every block any member drew, when it
/// can be trusted; `None` otherwise, and the restart starts after the
/// state file's mark, as after any crash.
///
/// Trusted only when the claim file was written in this boot and read
/// whole, is no older copy put back (see
/// [`Store::claims`](crate::state::Store::claims)), and the lock file's note
/// holds the same counter (a member killed between the two writes of a
/// turn leaves them apart); when the mark it records for the members is
/// `prev`'s own, clock id and second (a generator that held the shard
/// alone, a recovery or an older idutil wrote the state file without
/// drawing from the claim file, so the mark differs, as it does after a
/// member killed between writing the state file and the claim file);
/// when `prev` holds no exact last ID, no seconds issued far ahead and the
/// same layout; and when the counter lies within the mark.
pub(crate) fn frontier(store: &Store, layout: &Layout, prev: &StateFile) -> Result<Option<u64>> {
    let Some(turn) = store.turn()? else {
        return Ok(None);
    };
    let claims = store.claims(&turn)?;
    let noted = store.noted_claim();
    drop(turn);
    let (Some(next), Some(mark)) = (claims.next, mark(prev)) else {
        return Ok(None);
    };
    let trusted = noted == Some(next)
        && claims.reserved == Some((prev.clock_id, mark))
        && prev.last.is_none()
        && prev.skip.is_none()
        && prev.layout == *layout
        && next <= layout.counter_at(mark.saturating_add(1));
    Ok(trusted.then_some(next))
}

/// The lowest counter value a first member may start at in this boot,
/// whatever the state file says: every value below what the claim file or
/// the lock file's note says the members drew may have been issued. A
/// state file put back from an older copy whose mark is still the
/// current one (a run in between stayed within it) carries an older exact
/// last ID; this floor keeps the next run after the IDs issued since.
/// Values past the state file's mark are not a floor (blocks never pass
/// the mark): a claim that says so is not believed.
pub(crate) fn claim_floor(store: &Store, layout: &Layout, prev: &StateFile) -> Result<Option<u64>> {
    let Some(turn) = store.turn()? else {
        return Ok(None);
    };
    let claims = store.claims(&turn)?;
    let noted = store.noted_claim();
    drop(turn);
    let Some(mark) = mark(prev) else {
        return Ok(None);
    };
    let limit = layout.counter_at(mark.saturating_add(1));
    let ours = |reserved: Option<(u64, u64)>| reserved.is_none_or(|(id, _)| id == prev.clock_id);
    let from_claim = claims.next.filter(|_| ours(claims.reserved));
    Ok([from_claim, noted]
        .into_iter()
        .flatten()
        .filter(|&next| next <= limit)
        .max())
}

/// Writes `ours` over what the other members wrote since (marks and clock
/// readings only ever go up), during a turn, and tells the others the new
/// mark: the state as written.
pub(crate) fn save(store: &Store, ours: &StateFile) -> Result<StateFile> {
    let Some(turn) = store.turn()? else {
        store.save(ours)?;
        return Ok(ours.clone());
    };
    let mut claims = store.claims(&turn)?;
    let merged = match store.load() {
        Ok(Some(disk)) => merge(store, disk, ours)?,
        // Gone, damaged or replaced under the members: as a generator
        // alone does, the members write what they know, the mark the
        // others last wrote included.
        Ok(None) | Err(_) => {
            let mut ours = ours.clone();
            if let Some((id, second)) = claims.reserved {
                if id == ours.clock_id {
                    let mark = ours.high_water.entry(ours.clock_value()).or_insert(second);
                    *mark = (*mark).max(second);
                }
            }
            ours
        }
    };
    store.save(&merged)?;
    claims.reserved = mark(&merged).map(|m| (merged.clock_id, m));
    store.set_claims(&turn, &claims)?;
    Ok(merged)
}

/// Leaves the shard cleanly. `ours` holds this member's exact last ID,
/// `cursor` is the first counter value it did not issue and `block` its
/// last block. Gives back what is left of the block when nobody drew
/// after it; the last member to leave writes the state file with the last
/// ID any member may have issued, so that the next run continues right
/// after it. Other members leave the state file as it is.
pub(crate) fn leave(
    store: &Store,
    layout: &Layout,
    ours: &StateFile,
    cursor: u64,
    block: (u64, u64),
) -> Result<()> {
    let Some(turn) = store.turn()? else {
        return store.save(ours);
    };
    let mut claims = store.claims(&turn)?;
    if claims.next == Some(block.1) && block.0 < block.1 {
        claims.next = Some(cursor.clamp(block.0, block.1));
        store.set_claims(&turn, &claims)?;
    }
    if !store.is_last() {
        return Ok(());
    }
    let Some(disk) = store.load()? else {
        return store.save(ours);
    };
    let mut merged = merge(store, disk, ours)?;
    // Every value below the claim may have been issued, by any member;
    // none at or above it was. Without a claim to trust, the next run
    // starts after the mark, as after a crash.
    merged.last = match claims.next.and_then(|next| next.checked_sub(1)) {
        Some(last) if last >= layout.counter_at(layout.epoch()) => {
            let theirs = (layout.counter_second(last), layout.counter_sequence(last));
            Some(match ours.last {
                Some(mine) => mine.max(theirs),
                None => theirs,
            })
        }
        _ => None,
    };
    if let Some((second, _)) = merged.last {
        let mark = merged
            .high_water
            .entry(merged.clock_value())
            .or_insert(second);
        *mark = (*mark).max(second);
    }
    store.save(&merged)
}

/// The mark the state file holds for the members' clock id, read during a
/// turn: 0 without a state file.
fn disk_mark(store: &Store, clock_id: u64) -> Result<u64> {
    let Some(disk) = store.load()? else {
        return Ok(0);
    };
    if disk.clock_id != clock_id {
        return Err(restarted(store, disk.clock_id, clock_id, disk.shard));
    }
    Ok(mark(&disk).unwrap_or(0))
}

/// The state file was restarted under the members by another generator.
fn restarted(store: &Store, disk: u64, ours: u64, shard: u32) -> Error {
    Error::StateReplaced {
        shard,
        reason: format!(
            "the state file {} was restarted by another generator (clock id {disk} where \
             this one runs on {ours})",
            store.path().display(),
        ),
    }
}

/// The current clock value's mark.
fn mark(file: &StateFile) -> Option<u64> {
    file.high_water.get(&file.clock_value()).copied()
}

/// `disk` with `ours` written over it: each mark and clock reading the
/// higher of the two, no exact last ID (members are issuing), and the
/// seconds issued far ahead kept until a member has passed them.
fn merge(store: &Store, disk: StateFile, ours: &StateFile) -> Result<StateFile> {
    if disk.clock_id != ours.clock_id || disk.layout != ours.layout {
        return Err(restarted(store, disk.clock_id, ours.clock_id, ours.shard));
    }
    let mut merged = disk;
    for (value, mark) in &ours.high_water {
        let entry = merged.high_water.entry(*value).or_insert(*mark);
        *entry = (*entry).max(*mark);
    }
    merged.seen_max = merged.seen_max.max(ours.seen_max);
    merged.seen_last_run = merged.seen_last_run.max(ours.seen_last_run);
    merged.last = None;
    if ours.skip.is_none() {
        if let Some((_, last)) = merged.skip {
            // A member passed the seconds issued far ahead once its mark
            // went beyond them.
            if mark(&merged).is_some_and(|m| m > last) {
                merged.skip = None;
            }
        }
    }
    Ok(merged)
}
