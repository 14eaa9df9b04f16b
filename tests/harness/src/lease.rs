//! What the lease tests of every engine share: leased builders, child holders, paced issuing, hanging stores, 2136.

use std::io::Write;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Builder, Clock, Error, Generator, Layout, ManualClock};

use crate::child::{child_var, ChildProc, MARK};
use crate::space::{space_for, state_dir, wall_now};

/// A layout of 1,024 shards of 2,048 IDs a second, for tests that lease
/// many shards at once.
pub const WIDE: &str = "seconds:32 clock:0 sequence:11 shard:10 epoch:946684800";

/// A generator on `host` (its own state directory and ID space) that
/// leases its shard with `config`.
pub fn leased(host: &tempfile::TempDir, config: LeaseConfig) -> Builder {
    Generator::builder()
        .id_space(space_for(host.path()))
        .state_dir(host.path())
        .lease(config)
}

/// Whether opening failed because every shard that may be leased is.
pub fn is_no_free_shard(e: &Error) -> bool {
    matches!(e, Error::Lease(LeaseError::NoFreeShard { .. }))
}

/// Opens `builder`, retrying while every allowed shard is leased, until
/// `within` has passed; the generator and when it opened.
pub fn open_when_free<C: Clock + Clone>(
    builder: &Builder<C>,
    within: Duration,
) -> (Generator<C>, Instant) {
    let deadline = Instant::now() + within;
    loop {
        match builder.clone().open() {
            Ok(g) => return (g, Instant::now()),
            Err(e) if is_no_free_shard(&e) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("could not lease a shard within {within:?}: {e}"),
        }
    }
}

/// The shard a child holder ([`open_child_holder`]) reports it leased;
/// panics, naming `who`, on anything else.
pub fn leased_shard(child: &mut ChildProc, who: &str) -> u32 {
    let line = child.next().unwrap_or_else(|| panic!("{who} said nothing"));
    line.strip_prefix("leased ")
        .unwrap_or_else(|| panic!("{who}: {line}"))
        .parse()
        .unwrap()
}

/// A child holder's start: the lease `IDUTIL_CHILD_LEASE` names (`URL
/// TTL_MS FIRST LAST`, then the fields of the test's own, returned; the
/// skew limit and the lead cap from `IDUTIL_CHILD_SKEW` and
/// `IDUTIL_CHILD_LEAD`, in seconds, and the ID space from
/// `IDUTIL_CHILD_PREFIX`, if set),
/// opened with `lease` (the engine's builder method). Prints `@leased N`,
/// or `@failed REASON` and returns `None`.
pub fn open_child_holder(
    lease: impl FnOnce(Builder, LeaseConfig) -> Builder,
) -> Option<(Generator, Vec<String>)> {
    let setting = child_var("IDUTIL_CHILD_LEASE");
    let f: Vec<&str> = setting.split_whitespace().collect();
    let mut config = LeaseConfig::new(f[0])
        .ttl(Duration::from_millis(f[1].parse().unwrap()))
        .shards(f[2].parse().unwrap()..=f[3].parse().unwrap());
    // The skew limit and the lead cap, in seconds, where the test sets them.
    if let Ok(skew) = std::env::var("IDUTIL_CHILD_SKEW") {
        config = config.max_skew(Duration::from_secs(skew.parse().unwrap()));
    }
    if let Ok(lead) = std::env::var("IDUTIL_CHILD_LEAD") {
        config = config.max_lead(Duration::from_secs(lead.parse().unwrap()));
    }
    if let Ok(prefix) = std::env::var("IDUTIL_CHILD_PREFIX") {
        config = config.prefix(prefix);
    }
    let rest = f[4..].iter().map(|s| s.to_string()).collect();
    let mut out = std::io::stdout().lock();
    let generator = match lease(Generator::builder(), config).open() {
        Ok(g) => g,
        Err(e) => {
            writeln!(out, "{MARK}failed {e}").unwrap();
            return None;
        }
    };
    writeln!(out, "{MARK}leased {}", generator.shard()).unwrap();
    out.flush().unwrap();
    Some((generator, rest))
}

/// A child holder from start to end, the entry point's whole body:
/// leases as [`open_child_holder`] says, then issues as [`issue_paced`]
/// does until killed or, with `IDUTIL_CHILD_COUNT`, that many IDs, then
/// closes cleanly and prints `@done`. Does nothing outside a child.
pub fn paced_holder_child() {
    if !crate::child::is_child() {
        return;
    }
    let count: Option<usize> = std::env::var("IDUTIL_CHILD_COUNT")
        .ok()
        .map(|c| c.parse().unwrap());
    let Some((generator, _)) = open_child_holder(|b, c| b.lease(c)) else {
        return;
    };
    issue_paced(&generator, count);
    generator.close().unwrap();
    println!("{MARK}done");
}

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
        // A burst far past the reservation, waiting on a raise that hangs:
        // closed once it is seen waiting, not after a guess at how long
        // it takes to get there.
        let burst = {
            let g = g.clone();
            thread::Builder::new()
                .name("burst".to_string())
                .spawn(move || g.next_ids(1_500_000).map(|b| b.count()))
                .unwrap()
        };
        let finished = || burst.is_finished();
        if !crate::threads::wait_until_asleep(burst.thread(), finished, Duration::from_secs(30)) {
            panic!(
                "round {round}: the burst returned without waiting: {:?}",
                burst.join().unwrap()
            );
        }
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

/// A host clock that reads the end of the layout's range (2136) for a
/// moment right after a holder opened, ten holders in turn on one shard:
/// each (`open` on a host of its own, its clock given here, with only the
/// lease's defence: no end margin, no forward-step limit) issues `first`
/// IDs, then refuses naming the skew, and stops for good; every ID goes to
/// `record` with the holder's name. The shard's mark (`mark`) never moves
/// to 2136, and the next holder opens on the shard.
pub fn assert_a_moment_at_2136_neither_ends_nor_shifts_the_shard(
    first: u64,
    open: impl Fn(&tempfile::TempDir) -> Builder,
    mut record: impl FnMut(Vec<u64>, &str),
    mark: impl Fn() -> u64,
) {
    for round in 0..10 {
        let host = state_dir();
        let clock = ManualClock::new(wall_now());
        let g = open(&host)
            .clock(clock.clone())
            // The lease's own defence, with the generator's (the end margin,
            // the forward-step limit) out of the way.
            .end_margin(Duration::ZERO)
            .max_clock_step(None)
            .open()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let who = format!("holder {round}");
        record(g.next_ids(first).unwrap().map(u64::from).collect(), &who);
        clock.set(Layout::DEFAULT.last_unix_second() - 1);
        let during = g.next_ids(10);
        clock.set(wall_now());
        // The holder refuses, naming the skew, and stops for good: its
        // cursor followed the clock, and the mark never will.
        for (when, result) in [("at 2136", during), ("back", g.next_ids(10))] {
            match result {
                Err(Error::Lease(LeaseError::ClockSkew { .. })) => {}
                Err(e) => panic!("round {round}, {when}: unclear refusal: {e}"),
                Ok(ids) => panic!("round {round}, {when}: issued {ids:?} instead of refusing"),
            }
        }
        g.close().ok();
        drop(g);
        let mark = mark();
        assert!(
            mark < wall_now() + 3600,
            "round {round}: the shard's mark moved to {mark}"
        );
    }
}
