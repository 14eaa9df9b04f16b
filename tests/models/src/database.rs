//! The database as a holder (`lease::postgres`, *The database as a
//! holder*; `sql/database.sql`): sessions calling `NAME_next_id()` at
//! once, each step of theirs one read or write of the shared sequences, in
//! any order.
//!
//! The fast path (`NAME_next_id`) reads the clock, then the counter
//! (`pg_sequence_last_value`), then the fence, then draws (`nextval`) if
//! the counter was in the window (at or past the clock's second and the
//! fence, before the end of the fence's second and of the lead cap), and
//! hands the value out if it is in the window too; otherwise it takes the
//! slow path (`NAME_catch_up`, `NAME_advance`): the lock, the target (the
//! clock's second, the row's mark, the fence), the fence raised to it,
//! a draw, then a jump with `setval` when the value drawn is more than the
//! number of sessions behind the target, else a walk with `nextval`; the
//! fence raised to the value; the lock released. A call may be cancelled
//! (a `statement_timeout`, a `lock_timeout` while it waits for the lock)
//! at any step, and the session calls again: the values it drew are lost,
//! never handed out. The clock moves on, or is set back; the row's mark
//! may be raised (a holder's history check).
//!
//! The invariant: no value handed out twice, and each session's values
//! increasing. Known-wrong variants: the draw without the read first, a
//! jump whatever the gap, and the catch-up without the lock.

use crate::explore::Model;

/// Counter values in a second (the sequence field, scaled down).
pub const SECOND: u8 = 4;

/// Which rules the function follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The fast path reads the counter before it draws, and draws only if
    /// it was in the window.
    pub read_first: bool,
    /// A jump needs the value drawn to be more than the number of sessions
    /// behind the target (else the catch-up walks).
    pub jump_margin: bool,
    /// The catch-up holds the lock.
    pub lock: bool,
}

impl Rules {
    /// The code's rules.
    pub const CODE: Rules = Rules {
        read_first: true,
        jump_margin: true,
        lock: true,
    };
}

/// Where a session is in its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pc {
    /// Between calls.
    Idle,
    /// Fast path: the clock read (`floor`); the counter next.
    ReadCounter,
    /// The counter read (`seen`); the fence next.
    ReadFence,
    /// The fence read (`fence`); the draw next (or the slow path).
    Draw,
    /// Slow path: waiting for the lock.
    Lock,
    /// Holding it: the target next (clock, mark, fence).
    Target,
    /// The fence raised to the target next.
    Publish,
    /// The draw next.
    SlowDraw,
    /// The jump (`setval(target, false)`) next.
    Jump,
    /// A draw after the jump or while walking.
    Walk,
    /// The fence raised to the value, the lock released and the value
    /// handed out next.
    Finish,
}

/// A session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    pc: Pc,
    /// The clock's second's first value, as read.
    floor: u8,
    /// The counter as read.
    seen: u8,
    /// The fence as read.
    fence: u8,
    /// The slow path's target.
    target: u8,
    /// The value drawn.
    v: u8,
    /// The last value this session handed out.
    last: Option<u8>,
}

/// The shared state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The sequence's next value (`nextval` returns it and adds one).
    next: u8,
    /// The fence sequence.
    fence: u8,
    /// The clock's second's first value.
    clock: u8,
    /// Clock steps back left.
    backs: u8,
    /// The row's mark (the first value it lets the counter hand out).
    mark: u8,
    /// Raises of the mark left.
    raises: u8,
    /// The session holding the lock.
    lock: Option<u8>,
    /// Cancels left.
    cancels: u8,
    sessions: Vec<Session>,
    /// Every value handed out (bit `v`).
    out: u64,
    /// A value handed out twice, or a session's value not above its last.
    bad: Option<String>,
}

/// The model: sessions, the clock's range, and the faults allowed.
pub struct DatabaseCounter {
    pub rules: Rules,
    pub sessions: u8,
    /// The clock runs to this second.
    pub seconds: u8,
    /// The lead cap, in seconds.
    pub lead: u8,
    pub cancels: u8,
    pub backs: u8,
    pub raises: u8,
    /// Where the counter starts (its next value, with the fence at its
    /// second's first value): a run begun mid-second, as after calls.
    pub start: u8,
}

impl DatabaseCounter {
    /// The last value the window allows, for a fence and a clock floor.
    fn top(&self, fence: u8, floor: u8) -> u8 {
        (fence | (SECOND - 1)).min(floor + SECOND * (self.lead + 1) - 1)
    }

    fn hand_out(&self, s: &mut State, i: usize, v: u8) {
        if v >= 64 {
            return;
        }
        if s.out & (1 << v) != 0 {
            s.bad = Some(format!("value {v} handed out twice (session {i})"));
        }
        if let Some(last) = s.sessions[i].last {
            if v <= last {
                s.bad = Some(format!("session {i} handed out {v} after {last}"));
            }
        }
        s.out |= 1 << v;
        s.sessions[i].last = Some(v);
    }
}

/// Ends a session's call: only its last value is kept (fewer states).
fn idle(s: &mut State, i: usize) {
    let last = s.sessions[i].last;
    s.sessions[i] = Session {
        pc: Pc::Idle,
        floor: 0,
        seen: 0,
        fence: 0,
        target: 0,
        v: 0,
        last,
    };
}

fn draw(s: &mut State) -> u8 {
    let v = s.next;
    s.next = s.next.saturating_add(1);
    v
}

impl Model for DatabaseCounter {
    type State = State;
    type Action = String;

    fn init(&self) -> Vec<State> {
        let idle = Session {
            pc: Pc::Idle,
            floor: 0,
            seen: 0,
            fence: 0,
            target: 0,
            v: 0,
            last: None,
        };
        vec![State {
            next: self.start,
            fence: self.start - self.start % SECOND,
            clock: SECOND,
            backs: self.backs,
            mark: 0,
            raises: self.raises,
            lock: None,
            cancels: self.cancels,
            sessions: vec![idle; usize::from(self.sessions)],
            out: 0,
            bad: None,
        }]
    }

    fn steps(&self, state: &State, out: &mut Vec<(String, State)>) {
        if state.bad.is_some() || state.next >= 60 {
            return;
        }
        if state.clock < self.seconds * SECOND {
            let mut s = state.clone();
            s.clock += SECOND;
            out.push(("the clock moves on".into(), s));
        }
        if state.backs > 0 && state.clock >= SECOND {
            let mut s = state.clone();
            s.clock -= SECOND;
            s.backs -= 1;
            out.push(("the clock is set back".into(), s));
        }
        if state.raises > 0 {
            let mut s = state.clone();
            s.mark = s.clock + 2 * SECOND;
            s.raises -= 1;
            out.push(("the row's mark is raised".into(), s));
        }
        for i in 0..state.sessions.len() {
            let me = state.sessions[i];
            let n = i as u8;
            if me.pc != Pc::Idle && state.cancels > 0 {
                let mut s = state.clone();
                s.cancels -= 1;
                idle(&mut s, i);
                if s.lock == Some(n) {
                    s.lock = None;
                }
                out.push((format!("s{i} is cancelled"), s));
            }
            let mut s = state.clone();
            let step = match me.pc {
                Pc::Idle => {
                    s.sessions[i].floor = s.clock;
                    s.sessions[i].pc = Pc::ReadCounter;
                    "reads the clock"
                }
                Pc::ReadCounter => {
                    // `pg_sequence_last_value`: the last value drawn.
                    s.sessions[i].seen = s.next.wrapping_sub(1);
                    s.sessions[i].pc = Pc::ReadFence;
                    "reads the counter"
                }
                Pc::ReadFence => {
                    s.sessions[i].fence = s.fence;
                    s.sessions[i].pc = Pc::Draw;
                    "reads the fence"
                }
                Pc::Draw => {
                    let top = self.top(me.fence, me.floor);
                    let in_window =
                        s.next >= 1 && me.seen >= me.floor && me.seen >= me.fence && me.seen < top;
                    if in_window || !self.rules.read_first {
                        let v = draw(&mut s);
                        if v <= top && v >= me.fence {
                            idle(&mut s, i);
                            self.hand_out(&mut s, i, v);
                            "draws and hands out"
                        } else {
                            s.sessions[i].pc = Pc::Lock;
                            "draws, out of the window: the slow path"
                        }
                    } else {
                        s.sessions[i].pc = Pc::Lock;
                        "the slow path"
                    }
                }
                Pc::Lock => {
                    if self.rules.lock {
                        if s.lock.is_some() {
                            continue;
                        }
                        s.lock = Some(n);
                    }
                    s.sessions[i].pc = Pc::Target;
                    "takes the lock"
                }
                Pc::Target => {
                    s.sessions[i].target = s.clock.max(s.mark).max(s.fence);
                    s.sessions[i].pc = Pc::Publish;
                    "reads the clock, the mark and the fence"
                }
                Pc::Publish => {
                    s.fence = s.fence.max(me.target);
                    s.sessions[i].pc = Pc::SlowDraw;
                    "raises the fence to the target"
                }
                Pc::SlowDraw | Pc::Walk => {
                    let v = draw(&mut s);
                    s.sessions[i].v = v;
                    let margin = if self.rules.jump_margin {
                        self.sessions
                    } else {
                        0
                    };
                    s.sessions[i].pc = if v >= me.target {
                        Pc::Finish
                    } else if me.pc == Pc::SlowDraw && v + margin < me.target {
                        Pc::Jump
                    } else {
                        Pc::Walk
                    };
                    "draws under the lock"
                }
                Pc::Jump => {
                    s.next = me.target;
                    s.sessions[i].pc = Pc::Walk;
                    "jumps (setval)"
                }
                Pc::Finish => {
                    s.fence = s.fence.max(me.v);
                    if s.lock == Some(n) {
                        s.lock = None;
                    }
                    idle(&mut s, i);
                    self.hand_out(&mut s, i, me.v);
                    "raises the fence, unlocks and hands out"
                }
            };
            out.push((format!("s{i} {step}"), s));
        }
    }

    fn check(&self, state: &State) -> Result<(), String> {
        match &state.bad {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }
}
