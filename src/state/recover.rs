//! Restarting a shard whose state file cannot be trusted: what was found
//! (`OldState`), the plan (`Recovery`) from everything still certain, and
//! writing it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::format::StateFile;
use super::inspect::peek;
use super::options::RecoverOptions;
use super::paths::state_path;
use super::remedy::Remedy;
use super::salvage::Salvage;
use super::store::Store;
use crate::clock::{wall_now, whole_seconds};
use crate::error::{Error, Result};
use crate::layout::Layout;

/// What [`plan_recovery`] found where the state file should be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OldState {
    /// There is no state file.
    Missing,
    /// A state file a generator can use as it is (replaced only when
    /// forced, [`RecoverOptions::force`]).
    Healthy,
    /// A sound state file written for another layout.
    OtherLayout(Layout),
    /// A state file that cannot be trusted as a whole.
    #[non_exhaustive]
    Damaged {
        /// What is wrong with it (never a quote of its contents).
        reason: String,
    },
}

impl std::fmt::Display for OldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OldState::Missing => write!(f, "there is no state file"),
            OldState::Healthy => write!(f, "the state file is healthy"),
            OldState::OtherLayout(layout) => write!(
                f,
                "the state file was written for layout {}",
                layout.fingerprint()
            ),
            OldState::Damaged { reason } => write!(f, "the state file is damaged: {reason}"),
        }
    }
}

/// A recovery worked out by [`plan_recovery`]: what was found, where the
/// shard will resume, and why. [`Recovery::apply`] carries it out.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery {
    /// The state file.
    pub path: PathBuf,
    /// The shard.
    pub shard: u32,
    /// What was found.
    pub found: OldState,
    /// The latest second (Unix seconds) that anything accounts for: the old
    /// file's legible fields, the wall clock, the vouched-for time.
    pub latest: u64,
    /// Where [`latest`](Recovery::latest) comes from, e.g. `"the high-water
    /// mark"` or `"the wall clock"`.
    pub latest_from: &'static str,
    /// The reservation window added to it (whole seconds).
    pub window: Duration,
    /// The second after which the shard resumes issuing (Unix seconds):
    /// `latest + window`. Every clock value's high-water mark is set to it.
    pub resume_after: u64,
    /// The clock id written: the old one (where legible, else 0) plus one.
    pub clock_id: u64,
    /// The seconds (first, last; Unix seconds) recorded as issued far ahead,
    /// passed over when reached: with [`RecoverOptions::unused`].
    pub skip: Option<(u64, u64)>,
    /// Where the old file is kept (`shard-N.state.bad`), if there is one.
    pub kept_as: Option<PathBuf>,
    dir: PathBuf,
    old: Option<Vec<u8>>,
    new_state: StateFile,
}

impl Recovery {
    /// The state file [`apply`](Recovery::apply) writes.
    pub fn new_state(&self) -> &StateFile {
        &self.new_state
    }

    /// Takes the shard's lock, checks that the state file is still exactly
    /// what the plan was made from, keeps the old file as
    /// `shard-N.state.bad` (replacing whatever is at that path, never
    /// writing through it) and writes the new state.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] if a generator holds the shard;
    /// [`Error::RecoveryRefused`] if the state file changed since the plan
    /// was made; [`Error::Io`] if the directory cannot be written.
    pub fn apply(&self) -> Result<()> {
        let store = Store::open(&self.dir, self.shard)?;
        if store.read_raw()?.map(|(bytes, _)| bytes) != self.old {
            return Err(Error::RecoveryRefused {
                path: self.path.clone(),
                shard: self.shard,
                reason: "the state file changed since the recovery was worked out; \
                         run the recovery again"
                    .into(),
                remedy: Some(Remedy::Retry),
            });
        }
        if let Some(bytes) = &self.old {
            store.keep_bad(bytes)?;
        }
        store.save(&self.new_state)
    }
}

/// Works out how to restart a shard's state conservatively, for when the
/// state file is damaged, written for another layout, or lost. Reads the
/// state file without taking the lock and changes nothing; see
/// [`Recovery::apply`], or [`recover`] for both steps at once.
///
/// The shard resumes after the latest second anything can justify, plus
/// the reservation window: every high-water mark, the last issued second
/// and the seen seconds that are still legible, the wall clock, and the
/// time vouched for with [`RecoverOptions::after`]. The clock id is bumped.
///
/// It never guesses. When the old high-water mark cannot be read with
/// certainty (no state file, a zero-length or truncated one, a missing,
/// garbled, empty or out-of-range `high_water` line, an unknown version,
/// a file for another shard), it refuses unless a time is vouched for.
///
/// # Errors
///
/// [`Error::Locked`] if a generator holds the shard;
/// [`Error::RecoveryRefused`] when the old high-water mark cannot be read
/// with certainty and no time is vouched for, when the state file is
/// healthy and the recovery is not forced, when the vouched-for time is past
/// the layout's last second, or when resuming would leave no second of the
/// layout; with [`RecoverOptions::unused`], when the interval is empty or
/// past the layout's end, when anything the state records lies inside it,
/// or when resuming would not come before it; [`Error::Io`] if the state
/// file or the lock file cannot be read.
pub fn plan_recovery(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
) -> Result<Recovery> {
    let peek = peek(dir, shard)?;
    if let Some(pid) = peek.holder {
        return Err(Error::Locked {
            shard,
            dir: dir.to_path_buf(),
            pid,
        });
    }
    // A garbled mark in the lock file says nothing; the state file's own
    // marks and the other evidence still hold.
    let lock_mark = peek.note.mark.ok().flatten();
    plan_recovery_from(
        dir,
        shard,
        layout,
        options,
        peek.state,
        lock_mark,
        wall_now(),
    )
}

/// Restarts a shard's state conservatively: [`plan_recovery`], then
/// [`Recovery::apply`]. Returns what was done.
///
/// # Errors
///
/// As [`plan_recovery`] and [`Recovery::apply`].
pub fn recover(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
) -> Result<Recovery> {
    let recovery = plan_recovery(dir, shard, layout, options)?;
    recovery.apply()?;
    Ok(recovery)
}

/// The recovery decision, given the old file's bytes and the clock.
pub(super) fn plan_recovery_from(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
    old: Option<Vec<u8>>,
    lock_mark: Option<u64>,
    now: u64,
) -> Result<Recovery> {
    let path = state_path(dir, shard);
    let refuse = |reason: String, remedy: Option<Remedy>| Error::RecoveryRefused {
        path: path.clone(),
        shard,
        reason,
        remedy,
    };
    let vouch =
        format!("if you know a time no ID of shard {shard} is later than, recover after it");
    let last_second = layout.last_unix_second();
    if options.after.is_some_and(|after| after > last_second) {
        return Err(refuse(
            format!(
                "the time vouched for is past the layout's last second ({last_second} s after \
                 the Unix epoch): no ID can be issued after it"
            ),
            None,
        ));
    }
    let mut evidence: Vec<(&'static str, u64)> = vec![("the wall clock", now)];
    if let Some(after) = options.after {
        evidence.push(("the time vouched for", after));
    }
    // The lock file keeps the highest mark any state file of the shard
    // held in this directory: a state file put back from an older copy
    // is below it.
    if let Some(mark) = lock_mark.filter(|m| (layout.epoch()..=last_second).contains(m)) {
        evidence.push(("the mark the lock file keeps", mark));
    }
    let mut old_clock_id = None;
    let found = match &old {
        None => {
            if options.after.is_none() {
                return Err(refuse(
                    format!(
                        "there is no state file, so nothing says how far the shard has \
                         issued; {vouch}"
                    ),
                    Some(Remedy::After),
                ));
            }
            OldState::Missing
        }
        Some(bytes) => {
            let parsed = std::str::from_utf8(bytes)
                .map_err(|_| "it is not text".to_string())
                .and_then(StateFile::parse);
            // A sound file for another shard says nothing about this one.
            let foreign = parsed
                .as_ref()
                .ok()
                .map(|s| s.shard)
                .filter(|&s| s != shard);
            let whole = match (parsed, foreign) {
                (_, Some(other)) => Err(format!("it is for shard {other}")),
                (parsed, None) => parsed,
            };
            match whole {
                Ok(s) => {
                    evidence.extend(s.high_water.values().map(|&m| ("the high-water mark", m)));
                    evidence.extend(s.skip.map(|(_, l)| ("the last second issued far ahead", l)));
                    evidence.extend(s.last.map(|(sec, _)| ("the last issued ID", sec)));
                    evidence.push(("the highest wall clock seen", s.seen_max));
                    evidence.push(("the wall clock of the last run", s.seen_last_run));
                    old_clock_id = Some(s.clock_id);
                    let highest = s.highest_issuable();
                    if let Some(mark) = lock_mark.filter(|&m| m > highest) {
                        OldState::Damaged {
                            reason: format!(
                                "its high-water mark ({highest}) is below the one the lock \
                                 file keeps ({mark}): it is an older copy"
                            ),
                        }
                    } else if s.layout != *layout {
                        OldState::OtherLayout(s.layout)
                    } else if options.force || options.unused.is_some() {
                        OldState::Healthy
                    } else {
                        return Err(refuse(
                            "the state file is healthy: a generator resumes after everything it \
                             records by itself; to replace it anyway, force the recovery"
                                .into(),
                            Some(Remedy::Force),
                        ));
                    }
                }
                Err(reason) => {
                    let mut legible = Salvage::read(&String::from_utf8_lossy(bytes), layout);
                    if foreign.is_some() {
                        legible.marks = Err("its marks are another shard's".into());
                    }
                    match legible.marks {
                        Ok(marks) => {
                            evidence.extend(marks.into_iter().map(|m| ("the high-water mark", m)))
                        }
                        Err(why) if options.after.is_none() => {
                            return Err(refuse(
                                format!(
                                    "the state file is damaged ({reason}) and its high-water \
                                     mark cannot be read with certainty ({why}); {vouch}"
                                ),
                                Some(Remedy::After),
                            ))
                        }
                        Err(_) => {}
                    }
                    evidence.extend(legible.seconds);
                    old_clock_id = legible.clock_id;
                    OldState::Damaged { reason }
                }
            }
        }
    };
    // Brought back from the future: what lies from `to` on is the far-ahead
    // stretch, recorded as issued; nothing may lie in the vouched interval.
    let mut skip = None;
    if let Some((from, to)) = options.unused {
        if from >= to || to > last_second {
            return Err(refuse(
                format!(
                    "the interval vouched unused must start before it ends and end within \
                     the layout's range (its last second is {last_second})"
                ),
                None,
            ));
        }
        if let Some((what, second)) = evidence
            .iter()
            .skip(1)
            .find(|(_, s)| (from..to).contains(s))
        {
            return Err(refuse(
                format!(
                    "{what} ({second}) lies in the interval vouched unused ({from} to {to}): \
                     IDs may have been issued there"
                ),
                None,
            ));
        }
        if let Some(&(_, far)) = evidence
            .iter()
            .filter(|(_, s)| *s >= to)
            .max_by_key(|e| e.1)
        {
            skip = Some((to, far));
        }
        // The wall clock stays: a clock still far ahead leaves no room.
        evidence.retain(|&(what, s)| s < from || what == "the wall clock");
    }
    // Ties go to the first: the wall clock, then the vouched-for time, then
    // the file's fields.
    let (latest_from, latest) = evidence
        .iter()
        .copied()
        .reduce(|best, e| if e.1 > best.1 { e } else { best })
        .unwrap_or(("the wall clock", now));
    let resume_after = latest
        .checked_add(whole_seconds(options.window))
        .filter(|&r| r < last_second && skip.is_none_or(|(first, _)| r < first))
        .ok_or_else(|| {
            refuse(
                format!(
                    "resuming after {latest} ({latest_from}) plus the {} s window would leave \
                     no second of the layout, whose last is {last_second} s after the Unix epoch",
                    whole_seconds(options.window)
                ),
                None,
            )
        })?;
    // Every clock value resumes after the same second, so any clock id is
    // safe; one that cannot be bumped further starts again from 1.
    let clock_id = old_clock_id
        .unwrap_or(0)
        .checked_add(1)
        .filter(|id| id.checked_add(u64::from(layout.clock_values())).is_some())
        .unwrap_or(1);
    let seen = now.clamp(layout.epoch(), resume_after);
    let new_state = StateFile {
        layout: *layout,
        shard,
        clock_id,
        seen_max: seen,
        seen_last_run: seen,
        high_water: (0..layout.clock_values())
            .map(|c| (c, resume_after))
            .collect(),
        last: None,
        skip,
    };
    new_state.check().map_err(|reason| refuse(reason, None))?;
    let kept_as = old
        .is_some()
        .then(|| dir.join(format!("shard-{shard}.state.bad")));
    Ok(Recovery {
        path,
        shard,
        found,
        latest,
        latest_from,
        window: Duration::from_secs(whole_seconds(options.window)),
        resume_after,
        clock_id,
        skip,
        kept_as,
        dir: dir.to_path_buf(),
        old,
        new_state,
    })
}
