//! Answers lost after the server committed: the acquisition's, the open's
//! first raise's, the close's. A proxy lets the statement through and
//! closes the connection once the server has committed it, instead of
//! passing the commit's answer on. The open and
//! the close try again and recognise what went through: the holder holds
//! one row, the one it issues on, and gives it back at close with its
//! exact last ID (see `LeaseConfig::open_timeout`).

use std::sync::atomic::Ordering;

use idutil::lease::LeaseConfig;
use idutil_harness::proxy::reply_dropping_proxy_after;
use idutil_harness::state_dir;

use crate::{leased, server, Tally};

/// The held rows' shards.
fn held(pg: &idutil_harness::postgres::Postgres) -> String {
    pg.psql("SELECT string_agg(shard::text, ',' ORDER BY shard) FROM idutil_lease WHERE holder IS NOT NULL")
}

#[test]
fn a_lost_answer_at_open_or_close_neither_takes_a_second_shard_nor_keeps_one() {
    let Some(pg) = server() else { return };
    let mut all = Tally::new();
    // The table and the rows, made by a first holder, so that what the
    // proxy drops is an acquisition that takes a row.
    let first = state_dir();
    let g = leased(&first, LeaseConfig::new(pg.tcp_url()).shards(0..=3))
        .open()
        .unwrap();
    all.add(g.next_ids(1000).unwrap().map(u64::from), "the first holder");
    drop(g);
    // The acquisition, the open's raise and the close, by a piece of
    // their text.
    for (round, (what, marker)) in [
        ("the acquisition", "SKIP LOCKED"),
        ("the open's raise", "last_sequence = NULL WHERE"),
        ("the close", "expires_at = '-infinity' WHERE"),
    ]
    .into_iter()
    .enumerate()
    {
        let (port, armed) = reply_dropping_proxy_after(
            pg.port(),
            marker.as_bytes().to_vec(),
            Some(b"COMMIT\0".to_vec()),
        );
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
        let host = state_dir();
        let g = leased(&host, LeaseConfig::new(url).shards(0..=3))
            .open()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        all.add(
            g.next_ids(1000).unwrap().map(u64::from),
            &format!("holder {round}"),
        );
        assert_eq!(
            held(&pg),
            g.shard().to_string(),
            "{what}: the holder holds one row, its own"
        );
        let shard = g.shard();
        g.close().unwrap();
        drop(g);
        assert!(!armed.load(Ordering::SeqCst), "{what}: no answer was lost");
        assert_eq!(held(&pg), "", "{what}: a row is still held after close");
        let exact = pg.psql(&format!(
            "SELECT last_second IS NOT NULL FROM idutil_lease WHERE shard = {shard}"
        ));
        assert_eq!(exact, "t", "{what}: the close recorded no exact last ID");
    }
    // The next holder resumes after all of them.
    let host = state_dir();
    let g = leased(&host, LeaseConfig::new(pg.tcp_url()).shards(0..=3))
        .open()
        .unwrap();
    all.add(g.next_ids(1000).unwrap().map(u64::from), "the next holder");
}
