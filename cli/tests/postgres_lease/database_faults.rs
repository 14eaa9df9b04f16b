//! The database as a holder under faults found by attacking it: clocks
//! past the layout or ahead for a moment, timeouts racing the counter's
//! lock, a crash after a rolled-back transaction, a second ID space under
//! one name, cancelled catch-ups, infinite timestamps, a role without
//! privileges. Each failed before its fix.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::postgres::DatabaseHolder;
use idutil::lease::LeaseConfig;
use idutil::Layout;
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::Tally;

use crate::database::{config, install, DB_SHARD};
use crate::server;

/// The session setting that marks a session as checked
/// (`idutil.db_XXXXXXXX`), read from the install script: reset, it sends
/// every call through the catch-up.
fn checked_setting(config: &LeaseConfig) -> String {
    let script = DatabaseHolder::new(config, DB_SHARD).install_sql().unwrap();
    let at = script.find("idutil.db_").unwrap();
    script[at..at + "idutil.db_".len() + 8].to_string()
}

/// A server clock past the layout's last second (2136) for one call: the
/// call is refused before anything moves, and once the clock is right the
/// shard issues again.
#[test]
fn a_moment_past_2136_does_not_brick_the_shard() {
    let Some(mut pg) = server() else { return };
    let config = config(&pg.tcp_url());
    install(&pg, &config);
    pg.psql("SELECT idutil_next_id()");
    if !pg.restart_with_clock(Some("+43830d")) {
        return;
    }
    let far = pg.try_psql("SELECT now()::text || ' ' || idutil_next_id()");
    eprintln!("with the clock in 2146: {far:?}");
    pg.psql("CHECKPOINT");
    assert!(pg.restart_with_clock(None));
    let after = pg.try_psql("SELECT idutil_next_id()");
    assert!(
        after.is_ok(),
        "the clock is right again, but the shard stays bricked: {after:?}; counter {}",
        pg.psql("SELECT last_value FROM idutil_counter")
    );
}

/// A server clock an hour ahead for one call, then right again: the
/// counter followed it, and the lead is counted from the highest second
/// seen, so calls go on (their waits, under the lead cap, are counted the
/// same way: never an hour of sleep inside an INSERT). A layout of 4 IDs a
/// second reaches the cap after a dozen IDs.
#[test]
fn a_clock_ahead_for_a_moment_does_not_make_calls_sleep_for_an_hour() {
    let Some(mut pg) = server() else { return };
    let config = config(&pg.tcp_url());
    let layout: Layout = "seconds:32 clock:0 sequence:2 shard:5 epoch:946684800"
        .parse()
        .unwrap();
    DatabaseHolder::new(&config, DB_SHARD)
        .layout(layout)
        .install()
        .unwrap();
    pg.psql("SELECT idutil_next_id()");
    if !pg.restart_with_clock(Some("+1h")) {
        return;
    }
    pg.psql("SELECT idutil_next_id()");
    pg.psql("CHECKPOINT");
    assert!(pg.restart_with_clock(None));
    let started = Instant::now();
    // The harness's statement timeout is 20 s; the wait should be at most
    // the lead cap (2 s), or an error that names the lead.
    let r = pg.try_psql("SELECT count(idutil_next_id()) FROM generate_series(1, 40)");
    match r {
        Ok(_) => {}
        Err(e) => assert!(
            !e.contains("statement timeout"),
            "a call slept past the 20 s statement timeout (after {:?}): {e}",
            started.elapsed()
        ),
    }
}

/// Sessions calling with `lock_timeout = 1ms` while others hold the
/// counter's lock: a lock granted just as the timeout fires is held though
/// the wait failed, and the catch-up's handler releases it; no session is
/// left holding the lock.
#[test]
fn a_lock_timeout_does_not_leave_the_counter_locked() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let setting = checked_setting(&config);
    let mut script = String::from("SET lock_timeout = '1ms';\n");
    for _ in 0..1500 {
        script.push_str(&format!(
            "SELECT set_config('{setting}', '', false); SELECT idutil_next_id();\n"
        ));
    }
    script.push_str(
        "SELECT 'LEAK ' || pg_backend_pid() FROM pg_locks \
         WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted;\n",
    );
    let sessions: Vec<_> = (0..6)
        .map(|_| {
            let (url, script) = (url.clone(), script.clone());
            thread::spawn(move || {
                // On stdin, not `-c`: each statement on its own, the
                // timeouts not stopping the rest.
                let mut child = Command::new("psql")
                    .arg(&url)
                    .args(["-X", "-q", "-A", "-t", "-f", "-"])
                    .env("PGCONNECT_TIMEOUT", "5")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("psql runs");
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(script.as_bytes())
                    .unwrap();
                let out = child.wait_with_output().expect("psql runs");
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| l.starts_with("LEAK"))
                    .count()
            })
        })
        .collect();
    let leaked: usize = sessions.into_iter().map(|s| s.join().unwrap()).sum();
    assert_eq!(
        leaked, 0,
        "{leaked} of 6 sessions still held the counter's advisory lock after their calls"
    );
}

/// IDs returned in a transaction rolled back, then a crash (`-m
/// immediate`) before the WAL writer flushed their draws (`wal_writer_delay`
/// of 10 s makes it certain): after the restart the first call jumps the
/// counter past the lead cap of the highest second seen, and none of them
/// is handed out again.
#[test]
fn ids_of_a_rolled_back_transaction_are_not_handed_out_again_after_a_crash() {
    let Some(mut pg) = Postgres::start_tcp(&Options {
        max_connections: Some(300),
        settings: vec!["wal_writer_delay=10s".to_string()],
    }) else {
        return;
    };
    let config = config(&pg.tcp_url());
    install(&pg, &config);
    pg.psql("CHECKPOINT");
    let ids = |sql: &str, pg: &Postgres| -> Vec<u64> {
        pg.psql(sql)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let before = ids(
        "BEGIN; SELECT idutil_next_id() FROM generate_series(1, 300000); ROLLBACK",
        &pg,
    );
    assert_eq!(before.len(), 300_000);
    pg.kill_immediate();
    pg.restart();
    let after = ids(
        "SELECT idutil_next_id() FROM generate_series(1, 300000)",
        &pg,
    );
    let mut tally = Tally::new();
    tally.add(before, "in a transaction rolled back before the crash");
    tally.add(after, "after the crash");
}

/// A second ID space installed under the same name in one schema is
/// refused (it would take over the first one's functions and counter).
#[test]
fn a_second_id_space_under_the_same_name_is_refused() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let a = config(&url).prefix("space_a");
    let b = config(&url).prefix("space_b");
    DatabaseHolder::new(&a, DB_SHARD).install().unwrap();
    let first = pg.psql("SELECT idutil_next_id()");
    let second = DatabaseHolder::new(&b, DB_SHARD).install();
    let rows = pg.psql("SELECT space || ' ' || coalesce(holder, '-') FROM idutil_lease ORDER BY 1");
    // Given back, space_a takes space_b's functions and counter with it
    // (space_b's row still held by them).
    let _ = first;
    DatabaseHolder::new(&a, DB_SHARD).uninstall().unwrap();
    let after = pg.try_psql("SELECT idutil_next_id()");
    let rows_after =
        pg.psql("SELECT space || ' ' || coalesce(holder, '-') FROM idutil_lease ORDER BY 1");
    eprintln!("after space_a's uninstall: {after:?}; rows {rows_after:?}");
    assert!(
        second.is_err(),
        "space_b was installed over space_a's functions: rows {rows:?}"
    );
}

/// Calls cancelled inside the catch-up, between the fence's raise and the
/// counter's draw (made certain by holding a lock on the `seen` sequence,
/// which the catch-up writes in between): the next call is in the clock's
/// second, at once.
#[test]
fn cancelled_catch_ups_do_not_push_the_counter_ahead() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    pg.psql("SELECT idutil_next_id()");
    thread::sleep(Duration::from_millis(1100));
    let holder = {
        let url = url.clone();
        thread::spawn(move || {
            Command::new("psql")
                .arg(&url)
                .args(["-X", "-q", "-A", "-t", "-f", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(
                        b"BEGIN;\nALTER SEQUENCE idutil_seen OWNED BY NONE;\n\
                          SELECT pg_sleep(7);\nCOMMIT;\n",
                    )?;
                    c.wait()
                })
                .unwrap();
        })
    };
    thread::sleep(Duration::from_millis(500));
    let mut cancelled = 0;
    for _ in 0..30 {
        let out = Command::new("psql")
            .arg(&url)
            .args(["-X", "-A", "-t", "-c", "SELECT idutil_next_id()"])
            .env("PGOPTIONS", "-c statement_timeout=100")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stderr).contains("statement timeout") {
            cancelled += 1;
        }
    }
    holder.join().unwrap();
    assert!(cancelled > 0);
    let started = Instant::now();
    let r = pg.try_psql(
        "SELECT (idutil_next_id() >> 21) - (floor(extract(epoch FROM clock_timestamp()))::bigint \
         - 946684800)",
    );
    assert!(
        matches!(r.as_deref().map(str::trim), Ok("0" | "1" | "2"))
            && started.elapsed() < Duration::from_secs(3),
        "after {cancelled} cancelled calls, the next call took {:?}: {r:?}",
        started.elapsed()
    );
}

/// `NAME_min_at` and `NAME_max_at` of `'-infinity'` and `'infinity'` are
/// NULL, as outside the layout's range.
#[test]
fn min_at_and_max_at_of_infinity_are_null() {
    let Some(pg) = server() else { return };
    let config = config(&pg.tcp_url());
    install(&pg, &config);
    let r = pg.try_psql(
        "SELECT coalesce(idutil_min_at('-infinity')::text, 'null') || ' ' || \
         coalesce(idutil_max_at('infinity')::text, 'null')",
    );
    assert_eq!(r.as_deref().map(str::trim), Ok("null null"), "{r:?}");
}

/// A role without privileges cannot draw from the counter or the fence
/// (only the functions, which run as the installing role, do), so it
/// cannot push the shard ahead of the clock.
#[test]
fn a_role_without_privileges_cannot_move_the_fence() {
    let Some(pg) = server() else { return };
    let config = config(&pg.tcp_url());
    install(&pg, &config);
    pg.psql("SELECT idutil_next_id()");
    pg.psql("CREATE ROLE nobody");
    let pushed = pg.try_psql(
        "SET ROLE nobody; SELECT (max(nextval('idutil_fence')) >> 16) \
         - (floor(extract(epoch FROM clock_timestamp()))::bigint - 946684800) \
         FROM generate_series(1, 65536 * 20)",
    );
    let after = pg.try_psql("INSERT INTO notes (body) VALUES ('x') RETURNING id");
    assert!(
        pushed.is_err(),
        "a role with no privileges moved the fence {pushed:?} s ahead; then an insert: {after:?}"
    );
}

/// A session that holds the counter's lock while idle (a lock leaked by
/// hand): `idutil lease check` fails naming it, since every catch-up
/// waits for it.
#[test]
fn lease_check_names_a_session_idle_with_the_counters_lock() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let script = DatabaseHolder::new(&config, DB_SHARD)
        .install_sql()
        .unwrap();
    let at =
        script.find("pg_catalog.pg_advisory_lock(").unwrap() + "pg_catalog.pg_advisory_lock(".len();
    let keys = &script[at..at + script[at..].find(')').unwrap()];
    let mut idle = Command::new("psql")
        .arg(&url)
        .args(["-X", "-q", "-A", "-t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = idle.stdin.take().unwrap();
    stdin
        .write_all(format!("SELECT pg_advisory_lock({keys});\n").as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    let held =
        || pg.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == "1";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !held() {
        assert!(Instant::now() < deadline, "the lock was not taken");
        thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new(idutil_harness::command::bin())
        .args(["lease", "check", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    drop(stdin);
    let _ = idle.wait();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("counter's lock while idle"), "{text}");
}
