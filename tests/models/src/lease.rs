//! The leased shard (the `lease` module's *What every engine promises*,
//! and `lease::postgres`) as a timed state machine: holders acquire the
//! shard when its lease has expired by the store's clock
//! (`postgres/acquire.rs`, `sql::acquire`: the fencing epoch rises), renew
//! it (`renewal.rs` `Renewer::run`, `sql::renew`: conditioned on the epoch
//! and the holder, the mark checked against what the holder raised), stop
//! issuing at the fence, three quarters of the TTL after the send time of
//! the last renewal (`standing.rs` `wait_until_due`), raise the mark before
//! they issue past it (`holder.rs` `Lease::raise`, `sql::raise`), and on a
//! lost lease write their mark back and stop (`restore.rs`). The next
//! holder resumes after the mark (`Record::resume_at`). Around them: a
//! crash, a holder cut off from the store (a renewal that does not come),
//! a failover to a synchronous standby that has every acknowledged write,
//! and the table restored from an earlier backup (with the history's
//! record of the shard, as a point-in-time recovery takes both back); after
//! either, the first acquisition's history check raises the mark to the
//! store's clock plus the reach in force plus twice the skew limit plus one
//! second (`postgres/history.rs`, `sql::history::space`).
//!
//! Each holder issues as much as the generator lets it, as soon as it may
//! (the worst case): every second from its cursor up to the lower of its
//! reservation and its clock plus its lead cap (`publish_limit`), while its
//! fence is down. Holders share the fleet's lead cap, but one that leased
//! before the backup may have had a larger one
//! ([`LeasedShard::earlier_lead`]). Its clock is the store's plus an
//! offset within the skew limit. The invariant: no second (and so no ID)
//! is issued by two holders. Time runs in steps of a quarter second; the
//! renewal period and the fence are the code's rules at a TTL of 10 s
//! ([`MODEL_TTL`]), the skew limit and the lead cap the code's defaults
//! ([`Timing::code`]).

use std::time::Duration;

use idutil::lease::{LeaseConfig, DEFAULT_MAX_LEAD, DEFAULT_MAX_SKEW};

use crate::explore::Model;

/// The TTL the model runs at: 10 s, the PostgreSQL lease's default
/// before it became 60 s. The code's rules are fractions of the TTL (a
/// renewal every third, the fence at three quarters), so a longer TTL
/// stretches the same schedule; the tests' horizons (6 to 14 s of the
/// store's time) are chosen for a 10 s lease to expire and be taken again
/// within them, and a 60 s lease would need horizons six times as long.
pub const MODEL_TTL: Duration = Duration::from_secs(10);

/// The model's step of time, in milliseconds.
pub const TICK: u32 = 500;
/// When the model starts, by the store's clock (milliseconds): late
/// enough that every host's clock reads after the epoch.
pub const START: u32 = 100_000;

/// The lease's timing, in milliseconds (seconds for the lead cap and the
/// window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub ttl: u32,
    pub renew_every: u32,
    pub fence_after: u32,
    pub max_skew: u32,
    /// Seconds.
    pub max_lead: u32,
    /// Seconds: how far past the second it needs a generator reserves.
    pub window: u32,
}

impl Timing {
    /// The code's timing at [`MODEL_TTL`]: [`LeaseConfig::renew_every`],
    /// [`LeaseConfig::fence_after`], and the defaults
    /// [`DEFAULT_MAX_SKEW`], [`DEFAULT_MAX_LEAD`] and the generator's
    /// [`DEFAULT_WINDOW`](idutil::DEFAULT_WINDOW).
    pub fn code() -> Timing {
        let config = LeaseConfig::new("postgres://model@localhost/model").ttl(MODEL_TTL);
        let ms = |d: std::time::Duration| u32::try_from(d.as_millis()).expect("small");
        Timing {
            ttl: ms(config.get_ttl()),
            renew_every: ms(config.renew_every()),
            fence_after: ms(config.fence_after()),
            max_skew: ms(DEFAULT_MAX_SKEW),
            max_lead: DEFAULT_MAX_LEAD.as_secs() as u32,
            window: idutil::DEFAULT_WINDOW.as_secs() as u32,
        }
    }
}

/// Which rules the holders and the store follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Every write of a holder (renew, raise, give back) is conditioned on
    /// its fencing epoch and token.
    pub fencing: bool,
    /// What the history check raises the mark to after a restore or a
    /// failover.
    pub floor: Floor,
    /// Whether the table may be restored from a backup.
    pub restores: bool,
    /// Whether a holder's renewal and raise also fail (as a lost lease)
    /// once the server or the table is not the one it leased from (a
    /// restore, a failover): not the code's rule, which checks the
    /// history only when a shard is leased.
    pub holder_checks_history: bool,
}

/// The history check's raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// None: the restored marks are taken as they are.
    None,
    /// An earlier rule, known wrong: the store's clock (whole seconds)
    /// plus the lead cap plus the skew limit plus one second. A holder
    /// that has not learned of the restore goes on past it.
    WithoutFence,
    /// Known wrong: the code's sum, but with the reach of the holder that
    /// leases (its own lead cap) alone. A holder the row names, with a
    /// larger cap, that has not learned of the restore issued past it.
    OwnReach,
    /// The code's (`postgres::history`'s `caps`, `sql::history`'s `past`
    /// and `space_statement`): the store's clock plus the reach in force
    /// (the larger of the leasing holder's and that recorded for the
    /// holder that last took the row, held or given back; a reach is the
    /// lead cap plus the fence, three quarters of the TTL rounded up: how
    /// long a holder that has not learned of the restore may go on
    /// issuing) plus twice the skew limit plus one second.
    Code,
}

impl Rules {
    /// The code's rules.
    pub const CODE: Rules = Rules {
        fencing: true,
        floor: Floor::Code,
        restores: true,
        holder_checks_history: false,
    };
}

/// The shard's row in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    pub epoch: u8,
    pub holder: Option<u8>,
    /// Milliseconds, by the store's clock.
    pub expires_at: u32,
    /// The high-water second.
    pub high_water: u32,
    /// The reach (seconds) the history recorded for the holder the row
    /// names, when it leased.
    pub reach: u32,
}

/// A holder: a generator with a lease, from acquisition on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub running: bool,
    pub epoch: u8,
    /// Its lead cap, in seconds.
    pub max_lead: u32,
    /// The identity of the server and table it leased from.
    pub generation: u8,
    /// Its clock's offset from the store's, in milliseconds.
    pub offset: i32,
    /// The send time of its last successful renewal (or the grant).
    pub last_ok: u32,
    pub next_renew: u32,
    /// The highest mark it raised (or found at the grant).
    pub known_mark: u32,
    /// The highest second its raises reserved: it issues nothing later.
    pub reserved: u32,
    /// The next second it may issue in.
    pub cursor: u32,
    /// The seconds it issued, as half-open ranges.
    pub issued: Vec<(u32, u32)>,
}

/// The store, the holders, and what is left of the run's rarer events.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Milliseconds, by the store's clock.
    pub now: u32,
    pub row: Row,
    /// The history table's verdict pending: the server or the table is
    /// not the one the history recorded (a failover, a restore).
    pub forgotten: bool,
    pub backup: Option<Row>,
    pub restores: u8,
    /// The server's and the table's identity: a new one at each restore
    /// and failover.
    pub generation: u8,
    pub holders: Vec<Holder>,
    /// Holders that may still acquire.
    pub newcomers: u8,
    pub failovers: u8,
    pub crashes: u8,
    /// A second issued twice.
    pub twice: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Wait,
    Acquire { offset: i32, lead: u32 },
    Raise(usize, u32),
    Renew(usize),
    Crash(usize),
    Backup,
    Restore,
    Failover,
}

/// The lease model: `rules`, `timing`, run for `horizon` milliseconds
/// from [`START`].
pub struct LeasedShard {
    pub rules: Rules,
    pub timing: Timing,
    pub horizon: u32,
    pub newcomers: u8,
    pub failovers: u8,
    pub crashes: u8,
    /// The offsets a new holder's clock may have from the store's
    /// (milliseconds): behind by the skew limit, right, ahead by it.
    pub offsets: Vec<i32>,
    /// A lead cap (seconds) other than the fleet's ([`Timing::max_lead`])
    /// that a holder leasing before the backup is taken may have: a
    /// holder of an earlier configuration, on record in the history.
    pub earlier_lead: Option<u32>,
}

impl LeasedShard {
    pub fn new(rules: Rules, horizon: u32) -> LeasedShard {
        LeasedShard {
            rules,
            timing: Timing::code(),
            horizon,
            newcomers: 2,
            failovers: 1,
            crashes: 1,
            offsets: {
                let skew = Timing::code().max_skew as i32;
                vec![-skew, 0, skew]
            },
            earlier_lead: None,
        }
    }

    /// A holder's reach, as the history records it (`caps`): its lead cap
    /// plus the fence in whole seconds, rounded up.
    fn reach(&self, lead: u32) -> u32 {
        lead + self.timing.fence_after.div_ceil(1000)
    }

    fn host_second(&self, now: u32, offset: i32) -> u32 {
        ((i64::from(now) + i64::from(offset)).max(0) / 1000) as u32
    }

    /// Whether the row is still `h`'s (the condition of every write).
    fn holds(&self, s: &State, i: usize, h: &Holder) -> bool {
        let row = &s.row;
        (!self.rules.fencing || (row.epoch == h.epoch && row.holder == Some(i as u8)))
            && (!self.rules.holder_checks_history || s.generation == h.generation)
    }

    /// `restore_then_stop`: the mark written back, the holder stopped.
    fn lost(s: &mut State, i: usize) {
        let known = s.holders[i].known_mark;
        s.row.high_water = s.row.high_water.max(known);
        s.holders[i].running = false;
    }

    /// The history check's floor at store time `now`, for a holder with
    /// lead cap `lead` leasing `row`.
    fn floor(&self, now: u32, lead: u32, row: &Row) -> Option<u32> {
        let t = &self.timing;
        let skew = t.max_skew.div_ceil(1000);
        let own = self.reach(lead);
        match self.rules.floor {
            Floor::None => None,
            Floor::WithoutFence => Some(now / 1000 + lead + skew + 1),
            Floor::OwnReach => Some(now / 1000 + own + 2 * skew + 1),
            Floor::Code => Some(now / 1000 + own.max(row.reach) + 2 * skew + 1),
        }
    }

    fn acquire(&self, s: &State, offset: i32, lead: u32) -> Option<State> {
        if s.newcomers == 0 || (s.row.holder.is_some() && s.row.expires_at > s.now) {
            return None;
        }
        let mut n = s.clone();
        n.newcomers -= 1;
        if n.forgotten {
            if let Some(floor) = self.floor(n.now, lead, &n.row) {
                n.row.high_water = n.row.high_water.max(floor);
            }
            n.forgotten = false;
        }
        let i = n.holders.len();
        n.row.epoch += 1;
        n.row.holder = Some(i as u8);
        n.row.reach = self.reach(lead);
        n.row.expires_at = n.now + self.timing.ttl;
        let host = self.host_second(n.now, offset);
        n.holders.push(Holder {
            running: true,
            epoch: n.row.epoch,
            max_lead: lead,
            generation: n.generation,
            offset,
            last_ok: n.now,
            next_renew: n.now + self.timing.renew_every,
            known_mark: n.row.high_water,
            reserved: 0,
            // `Record::resume_at`: after the mark, and not before the clock.
            cursor: (n.row.high_water + 1).max(host),
            issued: Vec::new(),
        });
        Some(n)
    }

    /// Every holder issues every second the generator lets it issue now:
    /// done after each step, as issuing as much as soon as possible is
    /// the worst case (what a holder may issue later does not depend on
    /// what it issued before, only on its clock, its fence and its
    /// reservation, which it asks for once its cursor needs it).
    fn issue_all(&self, s: &mut State) {
        for i in 0..s.holders.len() {
            self.issue(s, i);
        }
    }

    fn issue(&self, n: &mut State, i: usize) {
        let h = &n.holders[i];
        if !h.running || n.now >= h.last_ok + self.timing.fence_after {
            return;
        }
        let host = self.host_second(n.now, h.offset);
        // `tick`: the cursor up to the clock; `publish_limit`: at most the
        // reservation and the clock plus the lead cap.
        let from = h.cursor.max(host);
        let to = h.reserved.min(host + h.max_lead);
        if from > to {
            return;
        }
        let clash = n
            .holders
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, other)| other.issued.iter())
            .find(|(a, b)| *a <= to && from < *b)
            .copied();
        if let Some((a, b)) = clash {
            n.twice = Some(from.max(a).min(b - 1));
        }
        let h = &mut n.holders[i];
        match h.issued.last_mut() {
            Some(last) if last.1 == from => last.1 = to + 1,
            _ => h.issued.push((from, to + 1)),
        }
        h.cursor = to + 1;
    }

    /// The shard thread's raise to `target` (`Lease::raise`).
    fn raise(&self, s: &State, i: usize, target: u32) -> Option<State> {
        let h = &s.holders[i];
        if !h.running || target <= h.reserved {
            return None;
        }
        let mut n = s.clone();
        let still =
            self.holds(s, i, h) && (!self.rules.fencing || s.row.high_water >= h.known_mark);
        if still {
            n.row.high_water = n.row.high_water.max(target);
            let h = &mut n.holders[i];
            h.reserved = target;
            h.known_mark = h.known_mark.max(target);
        } else {
            Self::lost(&mut n, i);
        }
        Some(n)
    }

    /// A renewal that goes through (`Renewer::run`, `check`).
    fn renew(&self, s: &State, i: usize) -> Option<State> {
        let h = &s.holders[i];
        if !h.running || s.now < h.next_renew {
            return None;
        }
        let mut n = s.clone();
        if !self.holds(s, i, h) {
            Self::lost(&mut n, i);
            return Some(n);
        }
        n.row.expires_at = n.now + self.timing.ttl;
        if n.row.high_water < h.known_mark {
            Self::lost(&mut n, i);
            return Some(n);
        }
        let h = &mut n.holders[i];
        h.last_ok = n.now;
        h.next_renew = n.now + self.timing.renew_every;
        Some(n)
    }
}

impl Model for LeasedShard {
    type State = State;
    type Action = Action;

    fn init(&self) -> Vec<State> {
        vec![State {
            now: START,
            row: Row {
                epoch: 0,
                holder: None,
                expires_at: 0,
                high_water: 0,
                reach: 0,
            },
            forgotten: false,
            backup: None,
            restores: 1,
            generation: 0,
            holders: Vec::new(),
            newcomers: self.newcomers,
            failovers: self.failovers,
            crashes: self.crashes,
            twice: None,
        }]
    }

    fn steps(&self, s: &State, out: &mut Vec<(Action, State)>) {
        if s.twice.is_some() {
            return;
        }
        let first = out.len();
        self.moves(s, out);
        for (_, n) in &mut out[first..] {
            self.issue_all(n);
        }
    }

    fn check(&self, s: &State) -> Result<(), String> {
        match s.twice {
            Some(second) => Err(format!("second {second} was issued by two holders")),
            None => Ok(()),
        }
    }
}

impl LeasedShard {
    /// The steps of `s`, before the holders issue.
    fn moves(&self, s: &State, out: &mut Vec<(Action, State)>) {
        if s.now + TICK <= START + self.horizon {
            let mut n = s.clone();
            n.now += TICK;
            out.push((Action::Wait, n));
        }
        let earlier = self.earlier_lead.filter(|_| s.backup.is_none());
        for lead in std::iter::once(self.timing.max_lead).chain(earlier) {
            for &offset in &self.offsets {
                if let Some(n) = self.acquire(s, offset, lead) {
                    out.push((Action::Acquire { offset, lead }, n));
                }
            }
        }
        for i in 0..s.holders.len() {
            // The reservation asked when the cursor needs a second past
            // the reservation: that second plus the window.
            let h = &s.holders[i];
            if h.cursor > h.reserved {
                let target = h.cursor + self.timing.window;
                if let Some(n) = self.raise(s, i, target) {
                    out.push((Action::Raise(i, target), n));
                }
            }
            if let Some(n) = self.renew(s, i) {
                out.push((Action::Renew(i), n));
            }
            if h.running && s.crashes > 0 {
                let mut n = s.clone();
                n.crashes -= 1;
                n.holders[i].running = false;
                out.push((Action::Crash(i), n));
            }
        }
        if self.rules.restores {
            if s.backup.is_none() {
                let mut n = s.clone();
                n.backup = Some(s.row);
                out.push((Action::Backup, n));
            }
            if let (Some(backup), true) = (s.backup, s.restores > 0) {
                if backup != s.row {
                    let mut n = s.clone();
                    n.row = backup;
                    n.restores -= 1;
                    n.forgotten = true;
                    n.generation += 1;
                    out.push((Action::Restore, n));
                }
            }
        }
        if s.failovers > 0 {
            // A synchronous standby has every acknowledged write: the row
            // as it is, on a new timeline.
            let mut n = s.clone();
            n.failovers -= 1;
            n.forgotten = true;
            n.generation += 1;
            out.push((Action::Failover, n));
        }
    }
}
