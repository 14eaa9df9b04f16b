//! What a lease costs a holder: the time from opening a generator to its
//! first ID with a PostgreSQL lease and with a Redis lease (both on
//! loopback, servers started here the way the tests start them), against
//! a plain state directory; and one renewal's round trip.
//!
//! `cargo bench -p idutil-benches --features postgres-lease,redis --bench
//! lease`; BENCHMARKS.md quotes the medians.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use idutil::lease::{time_renewals, LeaseConfig};
use idutil::{Generator, Layout};
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::redis_server::{seed_records, RedisServer};

/// Makes the builder a case opens.
type MakeBuilder<'a> = Box<dyn Fn() -> idutil::Builder + 'a>;
fn main() {
    let mut c = Criterion::default().configure_from_args();
    let Some(pg) = Postgres::start_tcp(&Options::default()) else {
        eprintln!("PostgreSQL is not installed: nothing to measure");
        return;
    };
    let Some(redis) = RedisServer::start() else {
        eprintln!("redis-server is not installed: nothing to measure");
        return;
    };
    seed_records(&redis, 0..=0);
    let dir = tempfile::tempdir().unwrap();
    let space = idutil_harness::space_for(dir.path());
    let builder = || {
        Generator::builder()
            .state_dir(dir.path())
            .id_space(space.clone())
    };
    let mut g = c.benchmark_group("lease");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat);
    let cases: [(&str, MakeBuilder<'_>); 3] = [
        (
            "open + first ID: state directory",
            Box::new(|| builder().shard(0)),
        ),
        (
            "open + first ID: PostgreSQL lease",
            Box::new(|| builder().lease(LeaseConfig::new(pg.tcp_url()).shards(0..=0))),
        ),
        (
            "open + first ID: Redis lease",
            Box::new(|| builder().lease(LeaseConfig::new(redis.url()).shards(0..=0))),
        ),
    ];
    for (name, make) in &cases {
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let generator = make().open().unwrap();
                    black_box(generator.next_id().unwrap());
                    spent += start.elapsed();
                    generator.close().unwrap();
                }
                spent
            })
        });
    }
    for (name, url) in [
        ("one renewal: PostgreSQL lease", pg.tcp_url()),
        ("one renewal: Redis lease", redis.url()),
    ] {
        let config = LeaseConfig::new(url).shards(0..=0);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let times = time_renewals(&config, &Layout::DEFAULT, iters as usize).unwrap();
                times.iter().sum()
            })
        });
    }
    g.finish();
    c.final_summary();
}
