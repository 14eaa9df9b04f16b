//! Lease rows: other layouts, garbled rows, epochs and clocks at the range's end.

use idutil_harness as harness;

use std::time::Duration;

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator, Layout};
use idutil_harness::state_dir;

use crate::{leased, server, Tally, WIDE};

/// One ID space is one layout: a generator with another layout is refused
/// once the space's rows exist; a row whose mark is at the end of the
/// layout's range is skipped with its key named, and a garbled one too;
/// asked for by number, either is refused.
#[test]
fn layout_mismatch_is_refused_and_unusable_rows_are_skipped() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let host = state_dir();
    let g = leased(&host, LeaseConfig::new(url.clone()).shards(0..=2))
        .open()
        .unwrap();
    assert_eq!(g.shard(), 0);
    drop(g);
    let wide: Layout = WIDE.parse().unwrap();
    let err = leased(&host, LeaseConfig::new(url.clone()).shards(0..=2))
        .layout(wide)
        .open()
        .unwrap_err();
    assert!(
        matches!(err, Error::Lease(LeaseError::LayoutMismatch { .. })),
        "{err}"
    );
    pg.psql(&format!(
        "UPDATE idutil_lease SET high_water = {}, last_second = NULL, last_sequence = NULL \
         WHERE shard = 0",
        Layout::DEFAULT.last_unix_second()
    ));
    pg.psql("UPDATE idutil_lease SET high_water = -5 WHERE shard = 1");
    let g = leased(&host, LeaseConfig::new(url.clone()).shards(0..=2))
        .open()
        .unwrap();
    assert_eq!(g.shard(), 2, "shards 0 and 1 are skipped");
    drop(g);
    let err = leased(&host, LeaseConfig::new(url.clone()).shards(0..=1))
        .open()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no free shard") && text.contains("shard 0") && text.contains("shard 1"),
        "{text}"
    );
    let err = leased(&host, LeaseConfig::new(url).shards(0..=2))
        .shard(0)
        .open()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Lease(LeaseError::InvalidRecord { shard: 0, .. })
        ),
        "{err}"
    );
    assert_eq!(
        pg.psql("SELECT high_water FROM idutil_lease WHERE shard = 0"),
        Layout::DEFAULT.last_unix_second().to_string(),
        "the row is left as it is"
    );
}

/// A host clock that reads the end of the layout's range (2136) for a
/// moment, ten times over, on one shard: each holder refuses to follow it,
/// the shard's mark never moves there, and the next holder resumes near
/// real time. Nothing is issued twice.
#[test]
fn clock_at_2136_for_a_moment_neither_ends_nor_shifts_the_shard() {
    let Some(pg) = server() else { return };
    // Each round's clock stands still while each holder's reservation
    // pushes the mark on: no lead cap in the way.
    let config = LeaseConfig::new(pg.tcp_url())
        .ttl(Duration::from_secs(2))
        .shards(6..=6)
        .max_lead(Duration::from_secs(3600));
    let mut all = Tally::new();
    harness::lease::assert_a_moment_at_2136_neither_ends_nor_shifts_the_shard(
        1000,
        |host| leased(host, config.clone()),
        |ids, who| all.add(ids, who),
        || {
            pg.psql("SELECT high_water FROM idutil_lease WHERE shard = 6")
                .parse()
                .unwrap()
        },
    );
}

/// A row garbled where the acquiring statement itself would fail on it (a
/// fencing epoch at the top of `bigint`, which no holder can raise) does
/// not stop the fleet: the other shards are leased, and the row, asked for
/// by number, is refused naming it.
#[test]
fn a_row_whose_epoch_cannot_rise_does_not_stop_the_fleet() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let host = state_dir();
    let config = LeaseConfig::new(url).shards(0..=2);
    drop(leased(&host, config.clone()).open().unwrap());
    pg.psql("UPDATE idutil_lease SET epoch = 9223372036854775807 WHERE shard = 0");
    let hosts = [state_dir(), state_dir()];
    let fleet: Vec<Generator> = hosts
        .iter()
        .map(|h| {
            leased(h, config.clone())
                .open()
                .unwrap_or_else(|e| panic!("one garbled row stopped the fleet: {e}"))
        })
        .collect();
    let mut shards: Vec<u32> = fleet.iter().map(Generator::shard).collect();
    shards.sort_unstable();
    assert_eq!(shards, [1, 2]);
    drop(fleet);
    let err = leased(&state_dir(), config).shard(0).open().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("shard 0") && text.contains("epoch"), "{text}");
}

/// `inspect` (and `idutil state`) reads a row as a generator does: a row
/// with only one of `last_second` and `last_sequence` is shown as invalid,
/// and a generator asked for that shard refuses it.
#[test]
fn inspect_and_the_generator_read_a_row_the_same_way() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let host = state_dir();
    let g = leased(&host, LeaseConfig::new(url.clone()).shards(4..=4))
        .open()
        .unwrap();
    g.next_ids(10).unwrap();
    g.close().unwrap();
    drop(g);
    pg.psql("UPDATE idutil_lease SET last_sequence = NULL WHERE shard = 4");
    let rows = idutil::lease::inspect(&LeaseConfig::new(url.clone()), &Layout::DEFAULT).unwrap();
    assert!(
        rows[4].invalid.iter().any(|p| p.starts_with("last")),
        "{:?}",
        rows[4]
    );
    assert!(rows[3].invalid.is_empty() && rows[3].high_water.is_none());
    let err = leased(&host, LeaseConfig::new(url).shards(4..=4))
        .shard(4)
        .open()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Lease(LeaseError::InvalidRecord { field: "last", .. })
        ),
        "{err}"
    );
}
