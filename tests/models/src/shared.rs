//! The shared-shard protocol (the `state` module's *Processes sharing a
//! shard*) as a state machine: processes that open the shard (the first
//! plans the restart, `generator/open.rs` `plan_restart`: after the state
//! file's mark, or where the members' blocks ended when the claim file can
//! be trusted, `shared::frontier`, and never below what the claim file and
//! the lock file's note say was drawn, `shared::claim_floor`; then
//! `shared::begin`; the others join, `join`),
//! draw blocks of the counter from the claim file (`shared::draw`), write
//! the state file over the others' (`shared::save`, with the lock file's
//! note, `Store::save` and `note_in_lock_file`), issue from their blocks,
//! and leave (`shared::leave`); the claim file's trust rules
//! (`state/claim.rs` `parse`: another boot, a garbled file; `Store::claims`:
//! a `next` below the lock file's note of it or below what the process
//! itself wrote last is an older copy; `Store::set_claims`: the note beside
//! each claim write, the lowering write first). Around them,
//! everything the disk and the host may do: `SIGKILL` between any two
//! writes and in the middle of a claim write (the file is then garbled), a
//! new boot, and an older copy of the claim file (alone, or with the lock
//! file's note) or of the state file put back. The invariant: no counter value is handed out twice, across every
//! crash and restart.
//!
//! The model's numbers are small (a second of two counter values, blocks
//! of at most two, a window of one second, four seconds in all): the rules
//! compare counters and seconds, and none of them depends on how many
//! values a second or a block holds.

use crate::explore::Model;

/// Counter values in a second (the layout's 2^16, scaled down).
pub const PER_SECOND: u8 = 2;
/// The seconds of the model's range: 0 to `SECONDS - 1`.
pub const SECONDS: u8 = 4;
/// The last second.
pub const LAST: u8 = SECONDS - 1;
/// The reservation window, in seconds (the code's
/// [`DEFAULT_WINDOW`](idutil::DEFAULT_WINDOW), scaled down).
pub const WINDOW: u8 = 1;
/// The most values a block holds (the code sizes blocks by the process's
/// rate, at least `MIN_BLOCK`).
pub const BLOCK: u8 = 2;

/// `Layout::counter_at`: the first counter value of `second`, clamped one
/// past the range.
pub fn counter_at(second: u8) -> u8 {
    second.min(SECONDS) * PER_SECOND
}

/// `Layout::counter_second`.
pub fn counter_second(counter: u8) -> u8 {
    counter / PER_SECOND
}

/// The state file: the high-water second, and the exact last counter
/// value after a clean close.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateFile {
    pub mark: u8,
    pub last: Option<u8>,
}

/// The claim file as it lies on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimFile {
    Empty,
    /// Left by a process killed while writing it: `parse` reads nothing.
    Garbled,
    Written {
        boot: u8,
        next: Option<u8>,
        reserved: Option<u8>,
    },
}

/// What a turn reads in the claim file (`Claims`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Claims {
    pub next: Option<u8>,
    pub reserved: Option<u8>,
}

/// Which rules the model's processes follow: [`Rules::CHECKED`] is the
/// code's, with a claim whose `next` went back refused; the code without
/// that check is [`OlderClaim::Trusted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// An older copy of the claim file put back: how a process tells.
    pub older_claim: OlderClaim,
    /// A draw from a claim nobody vouches for starts after the state
    /// file's mark (`disk_mark` in `shared::draw`), not after what the
    /// drawing process itself reserved.
    pub untrusted_after_disk_mark: bool,
    /// Leaving reads the claim file with the same older-claim check as a
    /// draw (the last process to leave records the last value from it).
    pub older_claim_on_leave: bool,
    /// The first process starts where the members' blocks ended when the
    /// claim file can be trusted (`shared::frontier`).
    pub frontier: bool,
    /// The first process starts no lower than what the claim file and the
    /// lock file's note say was drawn (`shared::claim_floor`).
    pub claim_floor: bool,
    /// A claim written without a `next` (after the turn found an older
    /// copy, which reads as nothing) leaves the lock file's note as it
    /// was, and goes first, as the code (`Store::set_claims`) does. The
    /// other way (counting it as lowering: the note loses its `claim` line
    /// first), a process killed before the claim write leaves the older
    /// copy with nothing to refute it.
    pub keep_note_without_next: bool,
}

/// How a claim whose `next` went back is told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OlderClaim {
    /// Not at all: a claim of this boot is trusted whatever its `next`.
    Trusted,
    /// A claim whose `next` is below what the process itself wrote last
    /// is not trusted.
    BelowOwn,
    /// Below that, or below the lock file's note of the claim file's
    /// `next` (written in the same turn as the claim file, the lowering
    /// write first).
    BelowRecorded,
}

impl Rules {
    /// The code's rules: an older claim told apart by the lock file's note
    /// and by what each process wrote last; the first process starts at a
    /// trusted claim's `next`, never below what was drawn.
    pub const CHECKED: Rules = Rules {
        older_claim: OlderClaim::BelowRecorded,
        untrusted_after_disk_mark: true,
        older_claim_on_leave: true,
        frontier: true,
        claim_floor: true,
        keep_note_without_next: true,
    };

    /// [`Rules::CHECKED`] with the note's `claim` line dropped first when
    /// a claim without a `next` is written: known wrong.
    pub const DROPPING_THE_NOTE: Rules = Rules {
        keep_note_without_next: false,
        ..Rules::CHECKED
    };
}

/// One process: down, planning the restart (first to open), or running.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Member {
    Down,
    Planning,
    Running {
        cursor: u8,
        block: (u8, u8),
        /// The highest second it knows to be reserved.
        reserved: u8,
        /// The claim file's `next` as it wrote it last (0: never).
        wrote: u8,
    },
    /// Closing: it issues nothing more (`begin_close` set the cursor's
    /// flag) and leaves during its turn.
    Leaving,
}

/// A write or a step of a process's turn, done one at a time: a process
/// may be killed between any two.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// The claim file written (a kill during it garbles the file).
    Claim(ClaimFile),
    /// The state file replaced (a temporary file renamed over it: whole).
    State(StateFile),
    /// The lock file's note of the highest mark written (after the state).
    Note(u8),
    /// The lock file's note of the claim file's `next`
    /// ([`OlderClaim::BelowRecorded`]).
    Noted(Option<u8>),
    /// The process remembers the `next` it wrote.
    Wrote(u8),
    /// The turn's draw hands the block to the process.
    Block { start: u8, end: u8, reserved: u8 },
    /// The process learns what is reserved.
    Reserved(u8),
    /// The first process's plan is written: it starts, others may join.
    Share { start: u8, reserved: u8 },
    /// Leaving: the last process writes the state file with the last
    /// value any member may have issued.
    LeaveTail { next: Option<u8>, ours: StateFile },
    /// Leaving is done.
    Gone,
}

/// The whole system: the files, the processes, and what was handed out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub boot: u8,
    pub state_file: Option<StateFile>,
    /// The lock file's note: the highest mark a state file held.
    pub note: Option<u8>,
    /// The lock file's note of the claim file's `next`.
    pub noted: Option<u8>,
    pub claim: ClaimFile,
    pub members: Vec<Member>,
    /// The process in a turn on the claim file, and what its turn still
    /// has to do.
    pub turn: Option<(usize, Vec<Effect>)>,
    /// Every counter value handed out, one bit each.
    pub issued: u32,
    /// A value handed out a second time.
    pub twice: Option<u8>,
    /// The wall clock (second).
    pub now: u8,
    /// A copy of the claim file, with the lock file's note beside it.
    pub claim_copy: Option<(ClaimFile, Option<u8>)>,
    pub state_copy: Option<StateFile>,
    pub budget: Budget,
}

/// How many of the rarer events a run may still have.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    pub opens: u8,
    pub kills: u8,
    pub boots: u8,
    pub ticks: u8,
    pub claim_copies: u8,
    pub claim_restores: u8,
    /// Of the claim file's copies put back, how many come with the lock
    /// file's note of that time (the documented limit: caught only by a
    /// process that drew after the copy was taken).
    pub note_restores: u8,
    pub state_copies: u8,
    pub state_restores: u8,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Open(usize),
    Issue(usize, u8),
    Draw(usize),
    Reserve(usize, u8),
    Leave(usize),
    /// The next step of the process's turn.
    Step(usize, Effect),
    /// Killed while writing the claim file: it is left garbled.
    KilledWriting(usize),
    Kill(usize),
    Reboot,
    Tick,
    CopyClaim,
    PutBackClaim,
    /// The claim file and the lock file's note put back together.
    PutBackClaimAndNote,
    CopyState,
    PutBackState,
}

/// The shared shard with `processes` processes and `rules`.
pub struct SharedShard {
    pub processes: usize,
    pub rules: Rules,
    pub budget: Budget,
}

impl SharedShard {
    /// The bounds CI runs: two processes, each event a few times.
    pub fn new(rules: Rules) -> SharedShard {
        SharedShard {
            processes: 2,
            rules,
            budget: Budget {
                opens: 4,
                kills: 2,
                boots: 1,
                ticks: 1,
                claim_copies: 1,
                claim_restores: 1,
                note_restores: 0,
                state_copies: 1,
                state_restores: 1,
            },
        }
    }

    /// `Store::load`: the state file, refused (`Err`) when it is an older
    /// copy than the lock file's note, or gone although the shard had one.
    fn load(s: &State) -> Result<Option<StateFile>, ()> {
        match (s.state_file, s.note) {
            (None, Some(_)) => Err(()),
            (None, None) => Ok(None),
            (Some(f), Some(note)) if f.mark < note => Err(()),
            (Some(f), _) => Ok(Some(f)),
        }
    }

    /// `ClaimFile::read` (`parse`), then the older-claim rule.
    fn claims(&self, s: &State, member: usize) -> Claims {
        self.claims_checked(s, member, self.rules.older_claim)
    }

    fn claims_checked(&self, s: &State, member: usize, rule: OlderClaim) -> Claims {
        let claims = match s.claim {
            ClaimFile::Written {
                boot,
                next,
                reserved,
            } if boot == s.boot => Claims { next, reserved },
            _ => Claims::default(),
        };
        let own = match s.members[member] {
            Member::Running { wrote, .. } => wrote,
            _ => 0,
        };
        let known = match rule {
            OlderClaim::Trusted => 0,
            OlderClaim::BelowOwn => own,
            OlderClaim::BelowRecorded => own.max(s.noted.unwrap_or(0)),
        };
        if claims.next.is_some_and(|next| next < known) {
            // Nothing this boot vouches for: after the mark, as a garbled
            // file.
            return Claims::default();
        }
        claims
    }

    /// `Store::set_claims`: the claim file and the lock file's note of
    /// it, the one that lowers the value first; then the process
    /// remembers what it wrote.
    ///
    /// `noted` is the note as the turn left it so far.
    fn claim_write(
        &self,
        noted: &mut Option<u8>,
        effects: &mut Vec<Effect>,
        boot: u8,
        claims: Claims,
    ) {
        let file = written(boot, claims);
        if self.rules.older_claim != OlderClaim::BelowRecorded {
            effects.push(Effect::Claim(file));
        } else {
            let lowers = match (*noted, claims.next) {
                (Some(noted), Some(next)) => next < noted,
                (Some(_), None) => !self.rules.keep_note_without_next,
                _ => false,
            };
            if claims.next.is_none() && self.rules.keep_note_without_next {
                effects.push(Effect::Claim(file));
                effects.push(Effect::Wrote(0));
                return;
            }
            if lowers {
                effects.push(Effect::Noted(claims.next));
                effects.push(Effect::Claim(file));
            } else {
                effects.push(Effect::Claim(file));
                effects.push(Effect::Noted(claims.next));
            }
            *noted = claims.next;
        }
        effects.push(Effect::Wrote(claims.next.unwrap_or(0)));
    }

    fn alive_others(s: &State, i: usize) -> bool {
        s.members
            .iter()
            .enumerate()
            .any(|(j, m)| j != i && *m != Member::Down)
    }

    /// Opening: the first process plans (`plan_restart`, `begin`), the
    /// others join (`join`). `None`: refused (an older or missing state
    /// file), nothing written.
    fn open(&self, s: &State, i: usize) -> Option<State> {
        let mut n = s.clone();
        n.budget.opens -= 1;
        let prev = Self::load(s).ok()?;
        if Self::alive_others(s, i) {
            // Joins: the members' state, its first call draws a block.
            let prev = prev?;
            n.members[i] = Member::Running {
                cursor: counter_at(s.now),
                block: (0, 0),
                reserved: prev.mark,
                wrote: 0,
            };
            return Some(n);
        }
        // A new process: it wrote no claim yet.
        n.members[i] = Member::Planning;
        let mut start = match prev {
            None => counter_at(s.now),
            Some(f) => match f.last {
                Some(last) => last + 1,
                None => counter_at(f.mark + 1),
            }
            .max(counter_at(s.now)),
        };
        if let Some(f) = prev {
            let claims = self.claims(&n, i);
            let limit = counter_at(f.mark + 1);
            // `shared::frontier`: where the members' blocks ended, when
            // the claim file can be trusted.
            if self.rules.frontier {
                if let Some(next) = claims.next {
                    let trusted = s.noted == Some(next)
                        && claims.reserved == Some(f.mark)
                        && f.last.is_none()
                        && next <= limit;
                    if trusted {
                        start = next.max(counter_at(s.now)).min(start);
                    }
                }
            }
            // `shared::claim_floor`: never below what was drawn.
            if self.rules.claim_floor {
                let floor = [claims.next, s.noted]
                    .into_iter()
                    .flatten()
                    .filter(|&next| next <= limit)
                    .max();
                if let Some(floor) = floor {
                    start = start.max(floor);
                }
            }
        }
        let reserved = counter_second(start) + WINDOW;
        if reserved > LAST {
            // The end of the model's range: refused before anything is
            // written.
            return None;
        }
        let file = StateFile {
            mark: prev.map_or(reserved, |f| f.mark.max(reserved)),
            last: None,
        };
        // `begin`: the plan written, then the claims as read, from `start`.
        let mut effects = vec![Effect::State(file), Effect::Note(file.mark)];
        let mut claims = self.claims(&n, i);
        claims.next = Some(start);
        claims.reserved = Some(file.mark);
        let mut noted = s.noted;
        self.claim_write(&mut noted, &mut effects, s.boot, claims);
        effects.push(Effect::Share {
            start,
            reserved: file.mark,
        });
        n.turn = Some((i, effects));
        Some(n)
    }

    /// `shared::draw`, its reads now and its writes as the turn's steps.
    fn draw(&self, s: &State, i: usize) -> Option<State> {
        let Member::Running {
            cursor, reserved, ..
        } = s.members[i]
        else {
            return None;
        };
        let mut claims = self.claims(s, i);
        let mut reserved = match claims.reserved {
            Some(r) => r.max(reserved),
            None => reserved,
        };
        if claims.next.is_none() && self.rules.untrusted_after_disk_mark {
            // The state file's mark bounds every member's blocks; a
            // refused state file fails the draw.
            let disk = Self::load(s).ok()?;
            reserved = reserved.max(disk.map_or(0, |f| f.mark));
        }
        let reserved = reserved.min(LAST);
        let limit = counter_at(reserved + 1);
        let next = claims.next.unwrap_or(limit);
        let mut effects = Vec::new();
        let mut noted = s.noted;
        if claims.next.is_none() {
            claims.next = Some(next);
            self.claim_write(&mut noted, &mut effects, s.boot, claims);
        }
        let start = next.max(cursor);
        let end = (start + BLOCK).min(limit);
        if end <= start {
            // No room below the mark: reserve further, then draw again.
            effects.push(Effect::Reserved(reserved));
        } else {
            claims.next = Some(end);
            self.claim_write(&mut noted, &mut effects, s.boot, claims);
            effects.push(Effect::Block {
                start,
                end,
                reserved,
            });
        }
        let mut n = s.clone();
        n.turn = Some((i, effects));
        Some(n)
    }

    /// The shard thread's write: `shared::save` of a mark at
    /// `target`.
    fn reserve(&self, s: &State, i: usize, target: u8) -> Option<State> {
        let mut claims = self.claims(s, i);
        let merged = match Self::load(s) {
            Ok(Some(disk)) => StateFile {
                mark: disk.mark.max(target),
                last: None,
            },
            // Gone or refused: what the members know, the mark the others
            // last wrote included.
            Ok(None) | Err(()) => StateFile {
                mark: target.max(claims.reserved.unwrap_or(0)),
                last: None,
            },
        };
        claims.reserved = Some(merged.mark);
        let mut effects = vec![Effect::State(merged), Effect::Note(merged.mark)];
        // The claims as read, with the new mark (`next` as read too).
        self.claim_write(&mut s.noted.clone(), &mut effects, s.boot, claims);
        effects.push(Effect::Reserved(merged.mark.max(target)));
        let mut n = s.clone();
        n.turn = Some((i, effects));
        Some(n)
    }

    /// `shared::leave`: gives back the rest of the block if nobody drew
    /// after it; the last to leave writes the last value any member may
    /// have issued.
    fn leave(&self, s: &State, i: usize) -> Option<State> {
        let Member::Running {
            cursor,
            block,
            reserved,
            ..
        } = s.members[i]
        else {
            return None;
        };
        let rule = if self.rules.older_claim_on_leave {
            self.rules.older_claim
        } else {
            OlderClaim::Trusted
        };
        let mut claims = self.claims_checked(s, i, rule);
        let mut effects = Vec::new();
        if claims.next == Some(block.1) && block.0 < block.1 {
            claims.next = Some(cursor.clamp(block.0, block.1));
            self.claim_write(&mut s.noted.clone(), &mut effects, s.boot, claims);
        }
        let ours = StateFile {
            mark: reserved,
            last: cursor.checked_sub(1),
        };
        effects.push(Effect::LeaveTail {
            next: claims.next,
            ours,
        });
        let mut n = s.clone();
        n.members[i] = Member::Leaving;
        n.turn = Some((i, effects));
        Some(n)
    }

    /// The next step of a turn.
    fn step(&self, s: &State, i: usize, effect: &Effect) -> Option<State> {
        let mut n = s.clone();
        let (_, effects) = n.turn.as_mut()?;
        effects.remove(0);
        let mut more = Vec::new();
        match *effect {
            Effect::Claim(file) => n.claim = file,
            Effect::State(file) => n.state_file = Some(file),
            Effect::Note(mark) => n.note = Some(n.note.map_or(mark, |m| m.max(mark))),
            Effect::Noted(next) => n.noted = next,
            Effect::Wrote(next) => {
                if let Member::Running { wrote, .. } = &mut n.members[i] {
                    *wrote = next;
                }
            }
            Effect::Block {
                start,
                end,
                reserved,
            } => {
                if let Member::Running {
                    cursor,
                    block,
                    reserved: r,
                    ..
                } = &mut n.members[i]
                {
                    *block = (start, end);
                    *cursor = (*cursor).max(start);
                    *r = (*r).max(reserved);
                }
            }
            Effect::Reserved(reserved) => {
                if let Member::Running { reserved: r, .. } = &mut n.members[i] {
                    *r = (*r).max(reserved);
                }
            }
            Effect::Share { start, reserved } => {
                n.members[i] = Member::Running {
                    cursor: start,
                    block: (0, 0),
                    reserved,
                    wrote: start,
                };
            }
            Effect::LeaveTail { next, ours } => {
                if !Self::alive_others(s, i) {
                    match Self::load(s) {
                        // A close that cannot read the state fails: as a
                        // crash, nothing more is written.
                        Err(()) => {}
                        Ok(disk) => {
                            let mut merged = match disk {
                                None => ours,
                                Some(d) => StateFile {
                                    mark: d.mark.max(ours.mark),
                                    last: None,
                                },
                            };
                            if disk.is_some() {
                                // Without a claim to trust, after the mark.
                                merged.last = next.and_then(|v| v.checked_sub(1)).map(|theirs| {
                                    ours.last.map_or(theirs, |mine| mine.max(theirs))
                                });
                            }
                            if let Some(last) = merged.last {
                                merged.mark = merged.mark.max(counter_second(last));
                            }
                            more.push(Effect::State(merged));
                            more.push(Effect::Note(merged.mark));
                        }
                    }
                }
                more.push(Effect::Gone);
            }
            Effect::Gone => n.members[i] = Member::Down,
        }
        let (_, effects) = n.turn.as_mut()?;
        effects.extend(more);
        if effects.is_empty() {
            n.turn = None;
        }
        Some(n)
    }
}

fn written(boot: u8, claims: Claims) -> ClaimFile {
    ClaimFile::Written {
        boot,
        next: claims.next,
        reserved: claims.reserved,
    }
}

impl Model for SharedShard {
    type State = State;
    type Action = Action;

    fn init(&self) -> Vec<State> {
        vec![State {
            boot: 0,
            state_file: None,
            note: None,
            noted: None,
            claim: ClaimFile::Empty,
            members: vec![Member::Down; self.processes],
            turn: None,
            issued: 0,
            twice: None,
            now: 0,
            claim_copy: None,
            state_copy: None,
            budget: self.budget.clone(),
        }]
    }

    fn steps(&self, s: &State, out: &mut Vec<(Action, State)>) {
        if s.twice.is_some() {
            return;
        }
        let free = s.turn.is_none();
        for i in 0..s.members.len() {
            match &s.members[i] {
                Member::Down => {
                    let planning = s.members.contains(&Member::Planning);
                    if free && !planning && s.budget.opens > 0 {
                        if let Some(n) = self.open(s, i) {
                            out.push((Action::Open(i), n));
                        }
                    }
                    continue;
                }
                Member::Planning | Member::Leaving => {}
                Member::Running {
                    cursor,
                    block,
                    reserved,
                    ..
                } => {
                    let (cursor, block, reserved) = (*cursor, *block, *reserved);
                    if block.0 <= cursor && cursor < block.1 {
                        let mut n = s.clone();
                        if n.issued & (1 << cursor) != 0 {
                            n.twice = Some(cursor);
                        }
                        n.issued |= 1 << cursor;
                        if let Member::Running { cursor: c, .. } = &mut n.members[i] {
                            *c += 1;
                        }
                        out.push((Action::Issue(i, cursor), n));
                    }
                    if free {
                        if cursor >= block.1 {
                            if let Some(n) = self.draw(s, i) {
                                out.push((Action::Draw(i), n));
                            }
                        }
                        if reserved < LAST {
                            if let Some(n) = self.reserve(s, i, reserved + 1) {
                                out.push((Action::Reserve(i, reserved + 1), n));
                            }
                        }
                        if let Some(n) = self.leave(s, i) {
                            out.push((Action::Leave(i), n));
                        }
                    }
                }
            }
            if let Some((j, effects)) = &s.turn {
                if *j == i {
                    let effect = effects[0].clone();
                    if let Some(n) = self.step(s, i, &effect) {
                        out.push((Action::Step(i, effect.clone()), n));
                    }
                    if matches!(effect, Effect::Claim(_)) && s.budget.kills > 0 {
                        let mut n = kill(s, i);
                        n.claim = ClaimFile::Garbled;
                        out.push((Action::KilledWriting(i), n));
                    }
                }
            }
            if s.budget.kills > 0 {
                out.push((Action::Kill(i), kill(s, i)));
            }
        }
        if s.budget.boots > 0 {
            let mut n = s.clone();
            n.budget.boots -= 1;
            n.boot += 1;
            n.turn = None;
            n.members.iter_mut().for_each(|m| *m = Member::Down);
            out.push((Action::Reboot, n));
        }
        if s.budget.ticks > 0 && s.now < LAST {
            let mut n = s.clone();
            n.budget.ticks -= 1;
            n.now += 1;
            // Each running process moves its cursor up to the clock
            // (`tick`, `jump_to`).
            for m in &mut n.members {
                if let Member::Running { cursor, .. } = m {
                    *cursor = (*cursor).max(counter_at(n.now));
                }
            }
            out.push((Action::Tick, n));
        }
        if s.budget.claim_copies > 0 {
            let mut n = s.clone();
            n.budget.claim_copies -= 1;
            n.claim_copy = Some((s.claim, s.noted));
            out.push((Action::CopyClaim, n));
        }
        if let (Some((claim, noted)), true) = (s.claim_copy, s.budget.claim_restores > 0) {
            let mut n = s.clone();
            n.budget.claim_restores -= 1;
            n.claim = claim;
            out.push((Action::PutBackClaim, n.clone()));
            if self.rules.older_claim == OlderClaim::BelowRecorded && s.budget.note_restores > 0 {
                n.budget.note_restores -= 1;
                n.noted = noted;
                out.push((Action::PutBackClaimAndNote, n));
            }
        }
        if s.budget.state_copies > 0 && s.state_file.is_some() {
            let mut n = s.clone();
            n.budget.state_copies -= 1;
            n.state_copy = s.state_file;
            out.push((Action::CopyState, n));
        }
        if let (Some(copy), true) = (s.state_copy, s.budget.state_restores > 0) {
            let mut n = s.clone();
            n.budget.state_restores -= 1;
            n.state_file = Some(copy);
            out.push((Action::PutBackState, n));
        }
    }

    fn check(&self, s: &State) -> Result<(), String> {
        match s.twice {
            Some(v) => Err(format!("counter value {v} was handed out twice")),
            None => Ok(()),
        }
    }
}

/// `SIGKILL`: the process is gone, its turn with it (the kernel lets go
/// of its locks).
fn kill(s: &State, i: usize) -> State {
    let mut n = s.clone();
    n.budget.kills -= 1;
    n.members[i] = Member::Down;
    if n.turn.as_ref().is_some_and(|(j, _)| *j == i) {
        n.turn = None;
    }
    n
}
