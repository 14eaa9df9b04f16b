//! What the lease tests of every engine do alike: holders that issue at a pace, and closing while the store hangs.

use std::io::Write;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::{Clock, Generator};

use crate::child::MARK;
use crate::space::state_dir;

/// A child holder's loop: issues 20 IDs a millisecond at most, so that it
/// never borrows seconds ahead of the clock, printing each (`@id N`) and
/// each failed call (`@error REASON`, not fatal); returns once `count` IDs
/// were issued, never without one.
pub fn issue_paced<C: Clock>(generator: &Generator<C>, count: Option<usize>) {
    let mut out = std::io::stdout().lock();
    let mut issued = 0;
    loop {
        match generator.next_ids(20) {
            Ok(batch) => {
                for id in batch {
                    writeln!(out, "{MARK}id {id}").unwrap();
                    issued += 1;
                }
            }
            Err(e) => writeln!(out, "{MARK}error {e}").unwrap(),
        }
        out.flush().unwrap();
        if count.is_some_and(|c| issued >= c) {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// A store that stops answering under a holder, once a round: `open`
/// opens a holder (in the round's own state directory) through a proxy
/// that `cut` then cuts off from the store. Closing it (explicitly in the
/// rounds that say so, else by dropping it) must return within `limit`,
/// even in the middle of a burst that waits on a raise; `heal` undoes the
/// round.
pub fn assert_closing_while_the_store_hangs_is_quick(
    rounds: &[(u32, bool)],
    limit: Duration,
    open: impl Fn(u32, &tempfile::TempDir) -> Generator,
    cut: impl Fn(),
    heal: impl Fn(),
) {
    for &(round, explicit) in rounds {
        let host = state_dir();
        let g = Arc::new(open(round, &host));
        g.next_ids(1000).unwrap();
        cut();
        // A burst far past the reservation, waiting on a raise that hangs.
        let burst = {
            let g = g.clone();
            thread::spawn(move || g.next_ids(3_000_000).map(|b| b.count()))
        };
        thread::sleep(Duration::from_millis(300));
        let closing = Instant::now();
        if explicit {
            g.close().ok();
        }
        let result = burst.join().unwrap();
        drop(Arc::try_unwrap(g).ok().unwrap());
        let took = closing.elapsed();
        assert!(
            took < limit,
            "round {round}: closing took {took:?} ({result:?})"
        );
        heal();
    }
}
