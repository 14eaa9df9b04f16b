//! How soon a holder issues after a standby is promoted: the time from the
//! promotion to the new holder's first ID, which the history check's raise
//! decides (the lease docs' *Restores and rewound histories*).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil_harness::proxy::Proxy;
use idutil_harness::state_dir;

use crate::{leased, open_when_free, server, wait_until, Driver, Tally};

/// The settings of one promotion.
#[derive(Clone, Copy)]
struct Setup {
    ttl: Duration,
    max_skew: Duration,
    /// The holders' own cap (`Builder::max_lead`, the command's
    /// `--max-lead`); `None`: the lease's cap alone (30 s by default).
    max_lead: Option<Duration>,
    /// A holder with the default caps opened in the ID space (on the shard
    /// the others then lease) and closed before them: its reach is on
    /// record for the ID space, and for the shard until A takes it.
    earlier_default_holder: bool,
}

/// What one promotion took, from the moment `pg_promote` returned.
struct Measured {
    /// Until the new holder's open returned (its first tries find the old
    /// holder's lease not yet expired on the promoted standby).
    opened: Duration,
    /// Until its first ID.
    first_id: Duration,
    /// How far past the promoted server's clock at the promotion the new
    /// holder's first reservation reaches (the raised mark, a second, and
    /// the generator's window, 5 s by default), and the largest reach the
    /// history's space row recorded.
    reserved_ahead: i64,
    largest_reach: String,
}

/// Split brain, as in `standbys.rs`: a primary with a synchronous standby;
/// holder A issues on shard 2; the standby is cut off and promoted while
/// the primary lives; holder B leases shard 2 there. Checks that A stops
/// and that no ID repeats; returns the times.
fn promote_and_time(setup: Setup) -> Option<Measured> {
    let primary = server()?;
    let link = Proxy::start(primary.port());
    let standby = primary.standby(Some(link.port()));
    primary.synchronous(true);
    primary.psql("CREATE TABLE probe (x int); INSERT INTO probe VALUES (1)");
    let config = |url: String, shards| {
        LeaseConfig::new(url)
            .ttl(setup.ttl)
            .max_skew(setup.max_skew)
            .shards(shards)
    };
    let capped = |b: idutil::Builder| match setup.max_lead {
        Some(cap) => b.max_lead(cap),
        None => b,
    };
    if setup.earlier_default_holder {
        let host = state_dir();
        let g = leased(&host, LeaseConfig::new(primary.tcp_url()).shards(2..=2))
            .open()
            .unwrap();
        g.next_id().unwrap();
        g.close().unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let host_a = state_dir();
    let a = Arc::new(
        capped(leased(&host_a, config(primary.tcp_url(), 2..=2)))
            .open()
            .unwrap(),
    );
    let driver_a = Driver::start(a.clone(), stop.clone());
    wait_until("A issues", Duration::from_secs(10), || {
        driver_a.issued() > 2000
    });

    link.cut();
    standby.promote();
    let promoted = Instant::now();
    let clock_at_promotion: i64 = standby
        .psql("SELECT floor(extract(epoch FROM clock_timestamp()))::bigint")
        .parse()
        .unwrap();
    let host_b = state_dir();
    let b = Arc::new(open_when_free(
        &capped(leased(&host_b, config(standby.tcp_url(), 2..=2))),
        Duration::from_secs(120),
    ));
    let opened = promoted.elapsed();
    let first = u64::from(b.next_id().unwrap());
    let first_id = promoted.elapsed();
    let mark: i64 = standby
        .psql("SELECT high_water FROM idutil_lease WHERE shard = 2")
        .parse()
        .unwrap();
    let largest_reach = standby.psql("SELECT max_lead FROM idutil_lease_history WHERE shard = -1");

    let driver_b = Driver::start(b.clone(), stop.clone());
    wait_until("B issues", Duration::from_secs(20), || {
        driver_b.issued() > 3000
    });
    // A has stopped: its renewals cannot commit on the old primary.
    driver_a.assert_stopped("the old holder");
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::new();
    all.add(driver_a.finish().0, "A (old primary)");
    let mut b_ids = driver_b.finish().0;
    b_ids.push(first);
    all.add(b_ids, "B (promoted standby)");
    drop(b);
    drop(a);
    Some(Measured {
        opened,
        first_id,
        reserved_ahead: mark - clock_at_promotion,
        largest_reach,
    })
}

/// Prints what one setup took.
fn report(what: &str, m: &Measured) {
    println!(
        "{what}: open returned {:.1?} after the promotion, first ID {:.1?} after it; \
         first reservation {} s past the promotion; largest reach recorded {} s",
        m.opened, m.first_id, m.reserved_ahead, m.largest_reach
    );
}

/// How long past the history check a new holder waits for its first ID,
/// in whole seconds, by the lease docs' formula: the raise puts the mark
/// at the server's clock (whole seconds) plus the reach in force (the
/// largest lead cap plus fence, rounded up, of the holders the rows name,
/// at least its own) plus twice the skew limit plus one second, and the
/// holder issues past the mark once its clock is within its lead cap of it.
fn wait_after_the_check(reach: u64, max_skew: Duration, max_lead: Duration) -> u64 {
    reach + 2 * whole_seconds(max_skew) + 2 - whole_seconds(max_lead)
}

/// A duration in whole seconds, rounded up, as the lease counts margins.
fn whole_seconds(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000) as u64
}

/// Split brain with capped holders (1 s), a short TTL (2 s) and skew limit
/// (1 s), after a holder with the default caps used the ID space and gave
/// its shard back, which a capped holder then took: the new holder's first
/// ID comes within what its own caps require (6 s past the check here: a reach of 1 s + 2 s, twice the
/// skew limit, one second, and one for the clock's second, less its 1 s
/// lead), not what the earlier holder's reach (30 s + 8 s) or the lease's
/// default cap (30 s) would cost, and no ID repeats.
#[test]
fn a_capped_holder_issues_soon_after_a_standby_is_promoted() {
    let setup = Setup {
        ttl: Duration::from_secs(2),
        max_skew: Duration::from_secs(1),
        max_lead: Some(Duration::from_secs(1)),
        earlier_default_holder: true,
    };
    let cap = setup.max_lead.unwrap();
    // The reach of a holder with these settings: its cap plus its fence
    // (three quarters of the TTL), each rounded up to whole seconds.
    let reach = whole_seconds(cap) + whole_seconds(setup.ttl * 3 / 4);
    let required = Duration::from_secs(wait_after_the_check(reach, setup.max_skew, cap));
    // The slack: the check runs in the new holder's first open, a round
    // trip or a few after the promotion (each within a fifth of the TTL,
    // tried again on a busy machine within the open's deadline), and the
    // first ID is read by a thread that may wait for a core. Ten seconds
    // of it still fail the rule this test holds: the earlier holder's
    // reach on record (38 s) would make the wait 41 s, the lease's default
    // cap in place of the holder's own (32 s of reach) 35 s.
    let slack = Duration::from_secs(10);
    let Some(m) = promote_and_time(setup) else {
        return;
    };
    report("caps 1 s, TTL 2 s, skew limit 1 s", &m);
    assert!(
        m.first_id <= required + slack,
        "the first ID came {:.1?} after the promotion, past the {required:?} the caps \
         require plus {slack:?}",
        m.first_id
    );
}

/// The measurement quoted in BENCHMARKS.md (*Promotion to the first ID*):
/// the default TTL (a minute) and a TTL of 10 s, the default skew limit,
/// with the holders' caps at 1 s and at the default, and with 1 s caps
/// after a holder with the default ones used the ID space (and gave back
/// the shard the capped holders then take). About six minutes.
#[test]
#[ignore = "a measurement: cargo test -p idutil-cli --all-features --test postgres_lease -- --ignored --nocapture promotion_to_the_first_id_is_measured"]
fn promotion_to_the_first_id_is_measured() {
    let one = Some(Duration::from_secs(1));
    for ttl in [idutil::lease::DEFAULT_TTL, Duration::from_secs(10)] {
        let defaults = Setup {
            ttl,
            max_skew: idutil::lease::DEFAULT_MAX_SKEW,
            max_lead: None,
            earlier_default_holder: false,
        };
        for (what, setup) in [
            (
                "caps 1 s",
                Setup {
                    max_lead: one,
                    ..defaults
                },
            ),
            ("default caps", defaults),
            (
                "caps 1 s, a default holder earlier",
                Setup {
                    max_lead: one,
                    earlier_default_holder: true,
                    ..defaults
                },
            ),
        ] {
            let Some(m) = promote_and_time(setup) else {
                return;
            };
            report(&format!("TTL {ttl:?}, {what}"), &m);
        }
    }
}
