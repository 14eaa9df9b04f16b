//! Deployments as they are: PgBouncer in transaction and session mode, and
//! services whose roles have different search paths.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use idutil::lease::LeaseConfig;
use idutil::Error;
use idutil_harness::pgbouncer::{PgBouncer, Pool};
use idutil_harness::postgres::Postgres;
use idutil_harness::state_dir;

use crate::check::{lease_check, line};
use crate::fleet::{lease_child, read_ids};
use crate::{
    driven, is_no_free_shard, leased, open_when_free, server, wait_for_each_to_issue, Tally,
};

/// The most server connections a pool of 4 may show: a connection the
/// pooler replaced is still listed while its backend exits, which on a
/// loaded machine is seen (5 for 4, beside 8 holders, at load 100).
const POOL_SEEN: usize = 5;

/// A pooler in front of `server` for `users`.
fn pooler(server: &Postgres, mode: &'static str, size: u32, users: &[&str]) -> Option<PgBouncer> {
    PgBouncer::start(
        server,
        &Pool {
            mode,
            size,
            users: users.iter().map(|u| u.to_string()).collect(),
        },
    )
}

/// Server connections open from loopback TCP clients (the pooler's; `psql`
/// uses the socket).
fn server_connections(server: &Postgres) -> usize {
    server
        .psql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND client_addr IS NOT NULL",
        )
        .parse()
        .unwrap()
}

/// `n` holders through `url` issue for three TTLs at once, every renewal
/// and raise going through the pooler; then they close cleanly and `n` new
/// holders resume after them. Returns the most server connections seen
/// while they ran. No duplicate, and no error but a fence the machine's
/// stalls may cause.
fn holders_through(server: &Postgres, url: &str, n: usize, ttl: Duration) -> usize {
    let stop = Arc::new(AtomicBool::new(false));
    let config = LeaseConfig::new(url).ttl(ttl).shards(0..=15);
    let (_hosts, holders, drivers) = driven(n, &config, &stop);
    let mut most = 0;
    let until = std::time::Instant::now() + ttl * 3;
    while std::time::Instant::now() < until {
        most = most.max(server_connections(server));
        thread::sleep(Duration::from_millis(100));
    }
    wait_for_each_to_issue(&drivers, 1000, "issuing", Duration::from_secs(20));
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::new();
    for (i, d) in drivers.into_iter().enumerate() {
        let (ids, errors) = d.finish();
        // A machine stalled past the fence (these tests run beside crowds
        // that overload it on purpose) leaves a holder unsure of its lease
        // for a while: it refuses, as it must, and issues again once a
        // renewal goes through (the wait above). Any other error fails.
        let other = errors
            .iter()
            .find(|e| !e.contains("is not known to be held"));
        assert!(other.is_none(), "holder {i}: {other:?}");
        all.add(ids, &format!("holder {i}"));
    }
    for g in holders {
        Arc::try_unwrap(g).ok().unwrap().close().unwrap();
    }
    // The next holders resume after the marks and exact last IDs recorded
    // through the pooler.
    let hosts: Vec<_> = (0..n).map(|_| state_dir()).collect();
    let next: Vec<_> = hosts
        .iter()
        .map(|h| open_when_free(&leased(h, config.clone()), Duration::from_secs(10)))
        .collect();
    for (i, g) in next.iter().enumerate() {
        all.add(
            g.next_ids(50_000).unwrap().map(u64::from),
            &format!("next {i}"),
        );
    }
    println!(
        "{n} holders through {url}: {} IDs, no duplicate, at most {most} server connections",
        all.len()
    );
    most
}

/// PgBouncer in transaction mode (what most managed poolers run), a pool
/// of 4 server connections and 8 holders at once, then 6 holder processes
/// at once: no prepared statement and no session setting is needed, so
/// every holder leases, renews, raises and closes through it.
#[test]
fn through_pgbouncer_in_transaction_mode() {
    let Some(pg) = server() else { return };
    let Some(bouncer) = pooler(&pg, "transaction", 4, &["postgres"]) else {
        return;
    };
    let most = holders_through(&pg, &bouncer.url("postgres"), 8, Duration::from_secs(4));
    assert!(
        most <= POOL_SEEN,
        "{most} server connections for a pool of 4"
    );
    let (_, lines) = lease_check(&bouncer.url("postgres"), &[]);
    line(&lines, "ok", "pooler", "transaction mode");
    // Holders in processes of their own, as a fleet's are: each process
    // would name its prepared statements alike, and one would find
    // another's on a shared server connection.
    pg.psql("CREATE DATABASE fleet");
    let url = bouncer.url("postgres").replace("/postgres?", "/fleet?");
    let mut children: Vec<_> = (0..6)
        .map(|_| lease_child(&url, 3000, (0, 15), Some(5000), None))
        .collect();
    let mut all = Tally::new();
    for (i, c) in children.iter_mut().enumerate() {
        let leased = c.next().expect("the child reports its lease");
        assert!(leased.starts_with("leased "), "child {i}: {leased}");
        let (ids, other) = read_ids(c, usize::MAX);
        assert_eq!(ids.len(), 5000, "child {i}: {other:?}");
        assert_eq!(other, ["done"], "child {i}");
        all.add(ids, &format!("child {i}"));
    }
}

/// PgBouncer in session mode with a pool of 4 and 4 holders: each holder
/// takes one server connection, so none waits for one and none is fenced.
#[test]
fn through_pgbouncer_in_session_mode() {
    let Some(pg) = server() else { return };
    let Some(bouncer) = pooler(&pg, "session", 4, &["postgres"]) else {
        return;
    };
    let most = holders_through(&pg, &bouncer.url("postgres"), 4, Duration::from_secs(4));
    assert!(
        most <= POOL_SEEN,
        "{most} server connections for a pool of 4"
    );
    let (_, lines) = lease_check(&bouncer.url("postgres"), &[]);
    line(&lines, "ok", "pooler", "session mode or a proxy");
}

/// Statement mode runs no transaction of two statements: refused, named.
#[test]
fn pgbouncer_in_statement_mode_is_refused_by_name() {
    let Some(pg) = server() else { return };
    let Some(bouncer) = pooler(&pg, "statement", 2, &["postgres"]) else {
        return;
    };
    let host = state_dir();
    let e = leased(&host, LeaseConfig::new(bouncer.url("postgres")))
        .open()
        .map(drop)
        .expect_err("statement mode refused");
    assert!(e.to_string().contains("statement mode"), "{e}");
    let (ok, lines) = lease_check(&bouncer.url("postgres"), &[]);
    assert!(!ok);
    line(&lines, "fail", "connection", "statement mode");
}

/// Two services of one fleet: role `api`, which has a schema of its own
/// name (first on its default search path, with a stray `idutil_lease` and
/// `idutil_lease_history` in it), and role `worker`, whose search path is
/// `public`. Both lease from `public.idutil_lease` and keep its history in
/// `public.idutil_lease_history`: while one holds the only shard the other
/// finds none free, and the second resumes after the first. No duplicate.
#[test]
fn roles_with_different_search_paths_share_one_table() {
    let Some(pg) = server() else { return };
    let ttl = Duration::from_secs(3);
    // The table made by a migration (here the superuser's first holder),
    // then granted to both services.
    let setup = state_dir();
    let url = |user: &str| {
        format!(
            "postgres://{user}@127.0.0.1:{}/postgres?sslmode=disable",
            pg.port()
        )
    };
    let config = |user: &str| LeaseConfig::new(url(user)).ttl(ttl).shards(0..=0);
    leased(&setup, config("postgres"))
        .open()
        .unwrap()
        .close()
        .unwrap();
    pg.psql(
        "CREATE ROLE api LOGIN; CREATE ROLE worker LOGIN; \
         CREATE SCHEMA api AUTHORIZATION api; ALTER ROLE worker SET search_path = public; \
         GRANT SELECT, INSERT, UPDATE ON public.idutil_lease, public.idutil_lease_history \
             TO api, worker; \
         CREATE TABLE api.idutil_lease (LIKE public.idutil_lease INCLUDING ALL); \
         CREATE TABLE api.idutil_lease_history (LIKE public.idutil_lease_history INCLUDING ALL); \
         ALTER TABLE api.idutil_lease OWNER TO api; \
         ALTER TABLE api.idutil_lease_history OWNER TO api",
    );
    let host_api = state_dir();
    let api = leased(&host_api, config("api")).open().unwrap();
    let mut all = Tally::new();
    // Ahead of the clock: the mark is what keeps the next holder clear.
    all.add(api.next_ids(300_000).unwrap().map(u64::from), "api");
    let host_worker = state_dir();
    match leased(&host_worker, config("worker")).open() {
        Err(e) if is_no_free_shard(&e) => {}
        Err(e) => panic!("worker: {e}"),
        Ok(_) => panic!("worker leased the shard api holds: two tables"),
    }
    drop(api);
    thread::sleep(ttl);
    let worker = open_when_free(&leased(&host_worker, config("worker")), ttl * 4);
    all.add(worker.next_ids(300_000).unwrap().map(u64::from), "worker");
    assert_eq!(pg.psql("SELECT count(*) FROM api.idutil_lease"), "0");
    assert_eq!(
        pg.psql("SELECT count(*) FROM api.idutil_lease_history"),
        "0"
    );
    let (_, lines) = lease_check(&url("api"), &[]);
    line(&lines, "warn", "schema", "finds \"api\".idutil_lease first");
    line(&lines, "ok", "privileges", "SELECT, INSERT, UPDATE");
    let (_, lines) = lease_check(&url("worker"), &[]);
    line(
        &lines,
        "warn",
        "schema",
        "other idutil_lease tables exist in schema(s) api:",
    );
    // A schema named in the URL or the configuration, and a conflict
    // between them, refused.
    for config in [
        config("postgres").schema("api").prefix("other"),
        LeaseConfig::new(format!("{}&schema=api", url("postgres"))).prefix("more"),
    ] {
        leased(&state_dir(), config)
            .open()
            .unwrap()
            .close()
            .unwrap();
    }
    assert_eq!(
        pg.psql("SELECT string_agg(DISTINCT space, ',' ORDER BY space) FROM api.idutil_lease"),
        "more,other"
    );
    // A role that may not read the standbys: leases, but not strictly.
    pg.psql("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_stat_get_wal_senders() FROM PUBLIC");
    drop(worker);
    let worker = open_when_free(&leased(&host_worker, config("worker")), ttl * 4);
    worker.next_id().unwrap();
    drop(worker);
    let e = leased(&state_dir(), config("worker").strict_replication(true))
        .open()
        .map(drop)
        .expect_err("strict without the replication setup");
    assert!(e.to_string().contains("cannot be read"), "{e}");
    let named = LeaseConfig::new(format!("{}&schema=elsewhere", url("postgres"))).schema("api");
    let e: Error = leased(&state_dir(), named).open().err().unwrap();
    assert!(e.to_string().contains("name one"), "{e}");
}
