//! How a member waits for the shard's short lock while another holds it:
//! as long as the members make progress or the lock changes hands, and
//! past that only as long as the holder may still let go by itself (see
//! [*Processes sharing a shard*](super#processes-sharing-a-shard)).

use std::time::{Duration, Instant};

use super::stalled::ClaimHolder;
use crate::host_lock::{self, FlockHolder, ProcessState};

/// How many times the wait a member gives a holder that is live (a thread
/// running, or waiting on its disk) or that it cannot see, before it calls
/// it stuck.
pub(super) const LIVE_WAITS: u32 = 12;

/// What shows the members making progress: the claim file's text (every
/// draw moves its counter, every write of the state file its mark, each
/// with the writer's pid) and how many turns this generator's threads took.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Progress {
    text: [u8; 256],
    len: usize,
    turns: u64,
}

impl Progress {
    pub(super) fn new(text: [u8; 256], len: usize, turns: u64) -> Progress {
        Progress { text, len, turns }
    }
}

/// Who holds the lock, to tell whether it changed hands: the pid as
/// `/proc` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    ThisGenerator,
    ThisProcess,
    Pid(u32),
    Hidden,
    Unknown,
}

/// A look at the lock's holder.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sighting {
    who: Who,
    holder: ClaimHolder,
    /// How it is; `None` when this process cannot tell.
    state: Option<ProcessState>,
}

/// Who holds the claim file's lock: this generator's own thread when
/// `here` (the generator's own turn was taken), else as `/proc` tells of
/// the holder of `file`'s `flock`.
pub(super) fn sight(file: &std::fs::File, here: bool) -> Sighting {
    if here {
        // A thread of this process: not stopped while this one runs.
        return Sighting {
            who: Who::ThisGenerator,
            holder: ClaimHolder::ThisGenerator,
            state: Some(ProcessState::Live),
        };
    }
    match host_lock::flock_holder_of(file) {
        FlockHolder::ThisProcess => Sighting {
            who: Who::ThisProcess,
            holder: ClaimHolder::ThisProcess,
            state: Some(ProcessState::Live),
        },
        FlockHolder::Process { pid, ours } => {
            // `/proc` tells how the process it numbers `pid` is, in
            // whatever PID namespace it numbers processes.
            let state = host_lock::process_state(pid);
            Sighting {
                who: Who::Pid(pid),
                holder: if ours {
                    ClaimHolder::Process {
                        pid,
                        stopped: state == ProcessState::Stopped,
                    }
                } else {
                    ClaimHolder::OtherNamespace
                },
                state: Some(state),
            }
        }
        // Held, yet `/proc/locks` leaves its holder out: outside the PID
        // namespace `/proc` shows.
        FlockHolder::Hidden => Sighting {
            who: Who::Hidden,
            holder: ClaimHolder::OtherNamespace,
            state: None,
        },
        FlockHolder::Unknown => Sighting {
            who: Who::Unknown,
            holder: ClaimHolder::Unknown,
            state: None,
        },
    }
}

/// What a waiting member saw: since when nothing moved, and who held the
/// lock at its looks since.
pub(super) struct Watch {
    progress: Progress,
    since: Instant,
    /// The holder at the first look after half the wait without progress.
    seen: Option<Who>,
    /// How long without progress at the last look.
    looked: Duration,
}

impl Watch {
    pub(super) fn new(progress: Progress) -> Watch {
        Watch {
            progress,
            since: Instant::now(),
            seen: None,
            looked: Duration::ZERO,
        }
    }

    /// After a failed attempt at the lock: `Some((holder, how long))` when
    /// the member should give up on it. Any progress starts the wait
    /// over. Without progress it looks at the holder every half wait (`/proc`
    /// is read only then): a new holder starts the wait over; the same one
    /// is given up on once the wait has passed if it is stopped or asleep
    /// while it holds the lock (a member's turn never sleeps), and once
    /// [`LIVE_WAITS`] times the wait has passed if it is live (a slow disk
    /// is waited out) or cannot be seen.
    pub(super) fn look(
        &mut self,
        progress: Progress,
        wait: Duration,
        sight: impl FnOnce() -> Sighting,
    ) -> Option<(ClaimHolder, Duration)> {
        let now = Instant::now();
        if progress != self.progress {
            *self = Watch::new(progress);
            return None;
        }
        let idle = now.duration_since(self.since);
        if idle < self.looked + wait / 2 {
            return None;
        }
        self.looked = idle;
        let seen = sight();
        let gone = seen.state == Some(ProcessState::Gone);
        match self.seen {
            // The first look: who holds it from here on.
            None if !gone => {
                self.seen = Some(seen.who);
                return None;
            }
            Some(who) if who == seen.who && !gone => {}
            // Another holder, or the one seen let go: the lock moves.
            _ => {
                *self = Watch::new(progress);
                return None;
            }
        }
        let bound = match seen.state {
            Some(ProcessState::Stopped | ProcessState::Asleep) => wait,
            _ => wait.saturating_mul(LIVE_WAITS),
        };
        (idle >= bound).then_some((seen.holder, idle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::state::claim::ClaimFile;

    fn sighting(who: Who, state: Option<ProcessState>) -> Sighting {
        let holder = match who {
            Who::Pid(pid) => ClaimHolder::Process {
                pid,
                stopped: state == Some(ProcessState::Stopped),
            },
            _ => ClaimHolder::Unknown,
        };
        Sighting { who, holder, state }
    }

    /// As if nothing had moved for `idle` (and a little more, so that a
    /// look due at `idle` is due), without sleeping.
    fn after(watch: &mut Watch, idle: Duration) {
        watch.since = Instant::now() - idle - Duration::from_millis(10);
    }

    #[test]
    fn a_stopped_or_sleeping_holder_is_given_up_on_after_the_wait_a_live_one_much_later() {
        let wait = Duration::from_secs(5);
        let p = Progress::new([0; 256], 0, 0);
        for (state, bound) in [
            (Some(ProcessState::Stopped), wait),
            (Some(ProcessState::Asleep), wait),
            (Some(ProcessState::Live), wait * LIVE_WAITS),
            (None, wait * LIVE_WAITS),
        ] {
            let mut w = Watch::new(p);
            let mut gave_up = None;
            for half in 1..=2 * LIVE_WAITS + 1 {
                after(&mut w, (wait / 2 + Duration::from_millis(10)) * half);
                if let Some((_, idle)) = w.look(p, wait, || sighting(Who::Pid(7), state)) {
                    gave_up = Some(idle);
                    break;
                }
            }
            let idle = gave_up.expect("gave up");
            assert!(idle >= bound && idle < bound + wait, "{state:?}: {idle:?}");
        }
    }

    #[test]
    fn progress_or_a_new_holder_starts_the_wait_over() {
        let wait = Duration::from_secs(5);
        let p = Progress::new([0; 256], 0, 0);
        let mut w = Watch::new(p);
        let asleep = Some(ProcessState::Asleep);
        after(&mut w, wait / 2);
        assert!(w.look(p, wait, || sighting(Who::Pid(7), asleep)).is_none());
        // Another holder at the next look: not given up on.
        after(&mut w, wait + wait / 4);
        assert!(w.look(p, wait, || sighting(Who::Pid(8), asleep)).is_none());
        assert!(w.seen.is_none() && w.since.elapsed() < wait / 2);
        // Progress: the claim file changed.
        after(&mut w, wait * 3);
        let moved = Progress::new([1; 256], 3, 0);
        assert!(w.look(moved, wait, || unreachable!()).is_none());
        assert!(w.since.elapsed() < wait / 2);
        // A turn of this generator's is progress too.
        after(&mut w, wait * 3);
        let turned = Progress::new([1; 256], 3, 1);
        assert!(w.look(turned, wait, || unreachable!()).is_none());
        // The holder gone: the lock moves.
        after(&mut w, wait / 2);
        assert!(w
            .look(turned, wait, || sighting(Who::Pid(7), asleep))
            .is_none());
        after(&mut w, wait + wait / 4);
        let gone = Some(ProcessState::Gone);
        assert!(w
            .look(turned, wait, || sighting(Who::Pid(7), gone))
            .is_none());
        assert!(w.seen.is_none());
    }

    fn claim_file(dir: &std::path::Path) -> ClaimFile {
        let dir_fd = std::os::fd::OwnedFd::from(std::fs::File::open(dir).unwrap());
        ClaimFile::open(&dir_fd, dir, 3).unwrap()
    }

    #[test]
    fn a_turn_this_process_holds_is_named_as_its_own_not_another_process() {
        let tmp = tempfile::tempdir().unwrap();
        let wait = Duration::from_millis(20);
        // Another thread of the same generator holds the turn.
        let claim = claim_file(tmp.path());
        let turn = claim.turn(wait).unwrap();
        let started = Instant::now();
        let err = std::thread::scope(|s| s.spawn(|| claim.turn(wait).err()).join().unwrap());
        assert!(
            started.elapsed() >= wait * LIVE_WAITS,
            "{:?}",
            started.elapsed()
        );
        let err = err.expect("gave up");
        assert!(
            matches!(
                err,
                Error::MemberStalled {
                    holder: ClaimHolder::ThisGenerator,
                    pid: None,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(!text.contains("another process"), "{text}");
        assert!(text.contains("this generator's own turn"), "{text}");
        // Another generator of this process on the same file.
        let other = claim_file(tmp.path());
        match other.turn(wait) {
            Err(err @ Error::MemberStalled { .. }) => {
                let Error::MemberStalled { holder, pid, .. } = &err else {
                    unreachable!()
                };
                assert_eq!((*holder, *pid), (ClaimHolder::ThisProcess, None));
                assert!(!err.to_string().contains("another process"), "{err}");
            }
            other => panic!("expected MemberStalled, got {:?}", other.err()),
        }
        drop(turn);
        assert!(other.turn(wait).is_ok());
    }
}
