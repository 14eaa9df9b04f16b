//! The database as a holder (`DEFAULT idutil_next_id()`): SQL sessions
//! (direct, through PgBouncer in transaction mode, in transactions rolled
//! back) insert beside Rust holders issuing flat out, through a server
//! crash, a promoted synchronous standby, a dump restored, a server clock
//! set back; every ID of every writer goes through one tally, and the
//! primary key counts what the database refused.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idutil::lease::postgres::DatabaseHolder;
use idutil::lease::LeaseConfig;
use idutil::{Id, Layout};
use idutil_harness::command::{idutil, run};
use idutil_harness::pgbouncer::{PgBouncer, Pool};
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::{state_dir, wall_now, Tally};

use crate::{driven, server, wait_until};

/// The shard the database holds in these tests.
pub(crate) const DB_SHARD: u32 = 31;

/// A table whose key comes from the database's function.
const NOTES: &str = "CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT idutil_next_id(), \
     session int, body text)";

/// The lease settings of these tests: short limits, so that a raise
/// (2 s lead cap + 2 × 1 s skew + 1 s) costs seconds, not a minute.
pub(crate) fn config(url: &str) -> LeaseConfig {
    LeaseConfig::new(url)
        .shards(0..=30)
        .max_lead(Duration::from_secs(2))
        .max_skew(Duration::from_secs(1))
        .ttl(Duration::from_secs(4))
}

/// Installs the database's holder of [`DB_SHARD`] and the `notes` table.
pub(crate) fn install(pg: &Postgres, config: &LeaseConfig) {
    DatabaseHolder::new(config, DB_SHARD).install().unwrap();
    pg.psql(NOTES);
}

/// What the SQL writers saw: every ID they were given (inserted, or
/// returned by a transaction rolled back), by session, and how many
/// inserts the primary key refused.
#[derive(Default)]
struct Written {
    sessions: Vec<Vec<u64>>,
    refused: usize,
    failed_runs: usize,
    errors: Vec<String>,
}

/// Runs `psql` on `url` with a script of `rounds` transactions of `rows`
/// rows each (every `rollback_every`th one rolled back after `RETURNING`
/// its IDs), once; the IDs it printed, in order, and its error text.
fn psql_session(
    url: &str,
    session: usize,
    rounds: usize,
    rows: usize,
    rollback_every: usize,
) -> (Vec<u64>, String) {
    let mut script = String::new();
    for round in 0..rounds {
        let insert = format!(
            "INSERT INTO notes (session, body) SELECT {session}, 'w' \
             FROM generate_series(1, {rows}) RETURNING id;\n"
        );
        if rollback_every > 0 && round % rollback_every == rollback_every - 1 {
            script.push_str(&format!("BEGIN;\n{insert}ROLLBACK;\n"));
        } else {
            script.push_str(&insert);
        }
    }
    let out = Command::new("psql")
        .arg(url)
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            &script,
        ])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .output()
        .expect("psql runs");
    let ids = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    (ids, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs the SQL file `path` on `url` with `psql`, in one transaction,
/// stopping at the first error; panics with its error text if it fails.
fn psql_file(url: &str, path: &std::path::Path) {
    let out = Command::new("psql")
        .arg(url)
        .args(["-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `n` writers, each running [`psql_session`] against `url` again and
/// again until `stop` (a failed run, a server down, is tried again after
/// 100 ms), into `written`.
fn sql_writers(
    n: usize,
    url: &str,
    stop: &Arc<AtomicBool>,
    written: &Arc<Mutex<Written>>,
) -> Vec<thread::JoinHandle<()>> {
    let runs = Arc::new(AtomicUsize::new(0));
    (0..n)
        .map(|w| {
            let (url, stop, written, runs) =
                (url.to_string(), stop.clone(), written.clone(), runs.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let session = runs.fetch_add(1, Ordering::Relaxed);
                    let (ids, err) = psql_session(&url, session, 20, 50, 4 + w % 3);
                    let failed = !err.trim().is_empty();
                    let mut written = written.lock().unwrap();
                    if err.contains("duplicate key") {
                        written.refused += 1;
                    }
                    if failed {
                        written.failed_runs += 1;
                        written.errors.push(err);
                    }
                    written.sessions.push(ids);
                    drop(written);
                    if failed {
                        thread::sleep(Duration::from_millis(100));
                    }
                }
            })
        })
        .collect()
}

/// Checks what the SQL writers saw: no insert refused by the primary key,
/// each session's IDs increasing, every ID the database's shard's, and
/// all of them (with `more`) unique within 2^53 − 1. Returns the IDs.
fn check_written(written: &Written, tally: &mut Tally) -> usize {
    assert_eq!(
        written.refused,
        0,
        "the primary key refused an insert: {:?}",
        written.errors.iter().find(|e| e.contains("duplicate key"))
    );
    let mut count = 0;
    for (s, ids) in written.sessions.iter().enumerate() {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "session {s}'s IDs do not increase"
        );
        for &id in ids {
            assert_eq!(
                id & 31,
                u64::from(DB_SHARD),
                "{id} is not the database's shard's"
            );
        }
        tally.add(ids.iter().copied(), &format!("SQL session {s}"));
        count += ids.len();
    }
    count
}

/// The second an ID was made in (default layout), Unix.
fn unix_second(id: u64) -> u64 {
    Layout::DEFAULT
        .decode(Id::try_from(id).unwrap())
        .map(|p| Layout::DEFAULT.time(&p))
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Rust holders issue flat out while SQL sessions insert with the default,
/// directly and through PgBouncer in transaction mode, some of their
/// transactions rolled back, and the server is killed (`-m immediate`)
/// and started again in the middle: no ID twice across all writers, none
/// refused by the primary key, every session's IDs increasing, every ID
/// within 2^53 − 1, and the database's IDs in the second they were made.
#[test]
fn sql_sessions_and_rust_holders_share_one_id_space_through_a_crash() {
    let Some(mut pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let Some(bouncer) = PgBouncer::start(
        &pg,
        &Pool {
            mode: "transaction",
            size: 3,
            users: vec!["postgres".to_string()],
        },
    ) else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(Mutex::new(Written::default()));
    let started = now_unix();
    let mut writers = sql_writers(3, &url, &stop, &written);
    writers.extend(sql_writers(3, &bouncer.url("postgres"), &stop, &written));
    let (_hosts, holders, drivers) = driven(2, &config, &stop);

    let sessions = |w: &Arc<Mutex<Written>>| w.lock().unwrap().sessions.len();
    wait_until(
        "SQL sessions before the crash",
        Duration::from_secs(60),
        || sessions(&written) >= 12,
    );
    pg.kill_immediate();
    thread::sleep(Duration::from_millis(500));
    pg.restart();
    let after = sessions(&written);
    wait_until(
        "SQL sessions after the crash",
        Duration::from_secs(60),
        || sessions(&written) >= after + 12,
    );
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let mut tally = Tally::new();
    let mut rust = 0;
    for (i, d) in drivers.into_iter().enumerate() {
        let (ids, _errors) = d.finish();
        rust += ids.len();
        tally.add(ids, &format!("Rust holder {i}"));
    }
    drop(holders);
    let written = written.lock().unwrap();
    let sql = check_written(&written, &mut tally);
    assert!(
        sql > 10_000 && rust > 1_000,
        "too few IDs: {sql} from SQL, {rust} from Rust"
    );
    let newest = written
        .sessions
        .iter()
        .flatten()
        .map(|&id| unix_second(id))
        .max()
        .unwrap();
    let oldest = written
        .sessions
        .iter()
        .flatten()
        .map(|&id| unix_second(id))
        .min()
        .unwrap();
    assert!(
        oldest + 1 >= started && newest <= now_unix() + 2,
        "the database's IDs are not in the seconds they were made in: {oldest}..={newest}, \
         run {started}..={}",
        now_unix()
    );
    // The table holds exactly the committed IDs.
    let in_table: usize = pg.psql("SELECT count(*) FROM notes").parse().unwrap();
    assert!(in_table <= sql && in_table > 0);
}

/// The counter's jump made without its lock, by every call (as each
/// second's first calls jump it), to just past where it was read:
/// concurrent sessions are handed the same value, and the primary key
/// refuses inserts. The checks above would catch it.
#[test]
fn without_its_lock_the_counter_repeats_values() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    let script = DatabaseHolder::new(&config, DB_SHARD)
        .install_sql()
        .unwrap();
    let lock = "PERFORM pg_catalog.pg_advisory_lock(";
    let unlock = "PERFORM pg_catalog.pg_advisory_unlock(";
    assert!(script.contains(lock) && script.contains(unlock));
    // Every call takes the catch-up, and every catch-up sets the counter
    // just past where it read it.
    let (draw, behind, jump) = (
        "    v := pg_catalog.nextval(",
        "    IF v < v_target THEN\n",
        "IF v + (pg_catalog.current_setting(",
    );
    let advance = script
        .find("_advance(p_first boolean) RETURNS bigint")
        .unwrap();
    let (head, tail) = script.split_at(advance);
    assert!(tail.contains(draw) && tail.contains(behind) && tail.contains(jump));
    let tail = tail
        .replacen(draw, "    v := 1 + pg_catalog.pg_sequence_last_value(", 1)
        .replacen(
            behind,
            "    v_target := GREATEST(v_target, v);\n    IF true THEN\n",
            1,
        )
        .replacen(jump, "IF true OR v + (pg_catalog.current_setting(", 1);
    let broken = format!("{head}{tail}")
        .replace(lock, "PERFORM pg_catalog.num_nonnulls(")
        .replace(unlock, "PERFORM pg_catalog.num_nonnulls(")
        .replace(
            "IF pg_catalog.current_setting(",
            "IF false AND pg_catalog.current_setting(",
        );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), broken).unwrap();
    psql_file(&url, file.path());
    pg.psql(NOTES);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(Mutex::new(Written::default()));
    let writers = sql_writers(6, &url, &stop, &written);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (repeated, errors) = loop {
        thread::sleep(Duration::from_millis(200));
        let w = written.lock().unwrap();
        let ids: Vec<u64> = w.sessions.iter().flatten().copied().collect();
        let repeats = Tally::new().count_duplicates(ids, "a session");
        if w.refused > 0 || repeats > 0 || Instant::now() > deadline {
            break ((w.refused, repeats), w.errors.first().cloned());
        }
    };
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(
        repeated.0 > 0 || repeated.1 > 0,
        "the counter moved without its lock repeated nothing in 60 s (first error: {errors:?})"
    );
}

/// A synchronous standby promoted while SQL sessions insert: the new
/// primary's first call finds a new timeline and raises the counter (and
/// every row of the ID space) past everything the old one can have
/// handed out, so no ID repeats; then it goes on inserting.
#[test]
fn a_promoted_synchronous_standby_repeats_no_id() {
    let Some(primary) = Postgres::start_tcp(&Options {
        max_connections: Some(100),
        settings: vec!["wal_level=replica".to_string()],
    }) else {
        return;
    };
    let url = primary.tcp_url();
    let config = config(&url);
    install(&primary, &config);
    let standby = primary.standby(None);
    primary.synchronous(true);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(Mutex::new(Written::default()));
    let writers = sql_writers(4, &url, &stop, &written);
    wait_until(
        "SQL sessions on the primary",
        Duration::from_secs(60),
        || written.lock().unwrap().sessions.len() >= 8,
    );
    drop(primary);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    standby.promote();
    // The first call after the promotion raises the counter past what the
    // old primary can have handed out, in a transaction that then rolls
    // back; the next session's first call raises again, from the second
    // the first one raised from, not from its own: the counter is not
    // pushed a raise further (and every call made to wait for it) each
    // time a first call rolls back, whatever the sessions' settings (the
    // second runs in another time zone and date style).
    let first_call = |sql: &str| -> u64 {
        let out = standby.psql(sql);
        let id = out.lines().find_map(|l| l.trim().parse().ok());
        id.unwrap_or_else(|| panic!("no ID from {sql:?}: {out}"))
    };
    let rolled_back = first_call("BEGIN; SELECT idutil_next_id(); ROLLBACK;");
    thread::sleep(Duration::from_secs(3));
    let next = first_call(
        "SET TimeZone = 'Pacific/Chatham'; SET DateStyle = 'SQL, DMY'; \
         SET extra_float_digits = 3; SELECT idutil_next_id()",
    );
    assert!(
        unix_second(next) <= unix_second(rolled_back) + 1,
        "a rolled-back first call's raise was made again from a later clock: \
         {rolled_back} (second {}) then {next} (second {})",
        unix_second(rolled_back),
        unix_second(next)
    );
    // Not so once the recorded history changed: a first call rolled back,
    // the history's row deleted by hand, and the next first call raises
    // from its own clock.
    let rolled_back = first_call("BEGIN; SELECT idutil_next_id(); ROLLBACK;");
    standby.psql("DELETE FROM idutil_lease_history WHERE shard = -1");
    thread::sleep(Duration::from_secs(3));
    let called = wall_now();
    let next = first_call("SELECT idutil_next_id()");
    // Raised past the clock by the lead cap, twice the skew limit and a
    // second (5 s here), and one second more for the counter.
    assert!(
        unix_second(next) >= called + 4,
        "a raise was made again from an earlier second though the history changed: \
         {rolled_back} (second {}) then {next} (second {}, called at {called})",
        unix_second(rolled_back),
        unix_second(next)
    );
    let new_url = standby.tcp_url();
    let stop = Arc::new(AtomicBool::new(false));
    let after = Arc::new(Mutex::new(Written::default()));
    let writers = sql_writers(4, &new_url, &stop, &after);
    wait_until(
        "SQL sessions on the promoted standby",
        // Beside the crowd tests, which overload the machine on purpose,
        // 8 sessions after the promotion's raise took more than 60 s once.
        Duration::from_secs(180),
        || after.lock().unwrap().sessions.len() >= 4,
    );
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let mut tally = Tally::new();
    let before_max = {
        let w = written.lock().unwrap();
        // The primary's last sessions may have died with it.
        let mut w2 = Written {
            sessions: w.sessions.clone(),
            ..Written::default()
        };
        w2.refused = w.refused;
        check_written(&w2, &mut tally);
        w.sessions.iter().flatten().copied().max().unwrap()
    };
    let after = after.lock().unwrap();
    check_written(&after, &mut tally);
    let first_after = after.sessions.iter().flatten().copied().min().unwrap();
    assert!(
        unix_second(first_after) > unix_second(before_max),
        "the promoted standby's first ID {first_after} is not past the primary's {before_max}"
    );
    let raised = standby.psql(&format!(
        "SELECT high_water FROM idutil_lease WHERE shard = {DB_SHARD}"
    ));
    assert!(!raised.is_empty(), "the database's row was not raised");
}

/// The memo of a rolled-back raise holds for one run of the server: the
/// same data started again (a crash and restart here; a physical backup
/// restored, or a standby's copy started on its timeline, alike) keeps the
/// identity the memo was made for, but what the server that ran before
/// handed out since is bounded by the new start's clock, not the memo's.
/// Its first call raises the rows from its own clock.
#[test]
fn a_rolled_back_raise_is_made_again_from_the_clock_after_the_server_starts_anew() {
    let Some(mut pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let first_call = |pg: &Postgres, sql: &str| -> u64 {
        let out = pg.psql(sql);
        let id = out.lines().find_map(|l| l.trim().parse().ok());
        id.unwrap_or_else(|| panic!("no ID from {sql:?}: {out}"))
    };
    first_call(&pg, "SELECT idutil_next_id()");
    // The table rewritten: a new file node, so the history no longer
    // matches and the next first call raises the rows; it rolls back.
    pg.psql("VACUUM FULL idutil_lease");
    first_call(&pg, "BEGIN; SELECT idutil_next_id(); ROLLBACK;");
    thread::sleep(Duration::from_secs(8));
    pg.kill_immediate();
    pg.restart();
    let called = wall_now();
    let next = first_call(&pg, "SELECT idutil_next_id()");
    // Raised past the clock by the lead cap, twice the skew limit and a
    // second (5 s here): the database's row resumes a second past that.
    assert!(
        unix_second(next) >= called + 6,
        "the first call after a new start raised from the memo of a raise rolled back \
         before it: {next} (second {}, called at {called})",
        unix_second(next)
    );
}

/// The whole database dumped, more rows inserted, then the dump restored
/// into a new database: its first session finds the lease table's new OID
/// and raises the counter past every ID handed out since the dump.
#[test]
fn a_restored_dump_repeats_no_id() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let mut tally = Tally::new();
    let (before, err) = psql_session(&url, 0, 5, 100, 0);
    assert!(err.is_empty(), "{err}");
    tally.add(before, "before the dump");
    let dump = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new("pg_dump")
        .arg(&url)
        .arg("-f")
        .arg(dump.path())
        .status()
        .unwrap();
    assert!(status.success());
    let (since, err) = psql_session(&url, 1, 20, 100, 0);
    assert!(err.is_empty(), "{err}");
    let newest = *since.last().unwrap();
    tally.add(since, "after the dump");
    pg.psql("CREATE DATABASE restored");
    let restored = url.replace("/postgres?", "/restored?");
    psql_file(&restored, dump.path());
    let (again, err) = psql_session(&restored, 2, 5, 100, 0);
    assert!(err.is_empty(), "{err}");
    assert!(
        again[0] > newest,
        "the restored counter went on from the dump: {} <= {newest}",
        again[0]
    );
    tally.add(again, "from the restored dump");
}

/// The server restarted with its clock an hour behind: the counter never
/// goes back, the IDs go on increasing, and calls are not held up (a
/// clock set back is not lead).
#[test]
fn a_server_clock_set_back_repeats_no_id() {
    let Some(mut pg) = server() else { return };
    let url = pg.tcp_url();
    let config = config(&url);
    install(&pg, &config);
    let mut tally = Tally::new();
    let (before, err) = psql_session(&url, 0, 10, 100, 0);
    assert!(err.is_empty(), "{err}");
    let last = *before.last().unwrap();
    tally.add(before, "before the clock went back");
    if !pg.restart_with_clock(Some("-1h")) {
        return;
    }
    let started = Instant::now();
    let (after, err) = psql_session(&url, 1, 10, 100, 0);
    assert!(err.is_empty(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(after[0] > last);
    tally.add(after, "with the clock an hour back");
}

/// `idutil lease sql` prints the script and `--apply` runs it; the lease
/// commands know the database's shard: `lease check` names it, `lease
/// release` refuses it, Rust holders never take it (even as the only
/// shard of their range); the uninstall records the counter's last ID, and
/// the next Rust holder of the shard resumes after it. The SQL helpers
/// agree with the crate's.
#[test]
fn the_lease_commands_know_the_database_shard_and_the_uninstall_gives_it_back() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let dir = state_dir();
    let printed = run(idutil(0, dir.path()).args(["lease", "sql", "--shard", "31", &url]))
        .expect_code(0, "lease sql");
    assert!(printed
        .stdout
        .contains("CREATE OR REPLACE FUNCTION \"public\".idutil_next_id()"));
    run(idutil(0, dir.path()).args(["--lease", &url, "lease", "sql", "--shard", "31", "--apply"]))
        .expect_code(0, "lease sql --apply");
    // Idempotent.
    run(idutil(0, dir.path()).args(["--lease", &url, "lease", "sql", "--shard", "31", "--apply"]))
        .expect_code(0, "lease sql --apply again");
    pg.psql(NOTES);
    let ids: Vec<u64> = pg
        .psql("INSERT INTO notes (body) SELECT 'x' FROM generate_series(1, 1000) RETURNING id")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(ids.len(), 1000);
    let last = *ids.last().unwrap();

    let check = run(Command::new(idutil_harness::command::bin()).args(["lease", "check", &url]));
    assert!(
        check
            .stdout
            .contains("database function public.idutil_next_id()"),
        "{}",
        check.stdout
    );
    let state = run(Command::new(idutil_harness::command::bin())
        .env("IDUTIL_STATE_DIR", dir.path())
        .args(["--lease", &url, "state"]))
    .expect_code(0, "state");
    assert!(
        state.stdout.contains(
            "shard 31:     leased by database function public.idutil_next_id(), no expiry"
        ),
        "{}",
        state.stdout
    );
    let release =
        run(idutil(0, dir.path()).args(["--lease", &url, "lease", "release", "--shard", "31"]));
    let release = release.expect_code(1, "release of the database's shard");
    assert!(
        release.stderr.contains("lease sql --uninstall"),
        "{}",
        release.stderr
    );

    let only = LeaseConfig::new(url.clone()).shards(31..=31);
    let host = state_dir();
    let err = crate::leased(&host, only.clone()).open().unwrap_err();
    assert!(crate::is_no_free_shard(&err), "{err}");
    assert!(err.to_string().contains("database function"), "{err}");

    // The helpers, against the crate's own.
    let id = Id::try_from(last).unwrap();
    let time: u64 = pg
        .psql(&format!(
            "SELECT extract(epoch FROM idutil_time({last}))::bigint"
        ))
        .parse()
        .unwrap();
    assert_eq!(time, unix_second(last));
    let at = UNIX_EPOCH + Duration::from_secs(time);
    let bounds = pg.psql(&format!(
        "SELECT idutil_min_at(to_timestamp({time})), idutil_max_at(to_timestamp({time})), \
                idutil_min_at('1999-12-31 23:59:59+00')"
    ));
    assert_eq!(
        bounds,
        format!(
            "{}|{}|",
            u64::from(Id::min_at(at).unwrap()),
            u64::from(Id::max_at(at).unwrap())
        )
    );
    assert!(u64::from(Id::min_at(at).unwrap()) <= u64::from(id));
    let too_big = pg
        .try_psql("SELECT idutil_time(9007199254740992)")
        .unwrap_err();
    assert!(too_big.contains("is not an ID"), "{too_big}");

    // The uninstall is refused while a column's default calls the function.
    let uninstall = |dir: &tempfile::TempDir| {
        run(idutil(0, dir.path()).args(["--lease", &url, "lease", "sql", "--uninstall", "--apply"]))
    };
    uninstall(&dir).expect_code(1, "uninstall with the default in use");
    pg.psql("ALTER TABLE notes ALTER COLUMN id DROP DEFAULT");
    uninstall(&dir).expect_code(0, "uninstall");
    uninstall(&dir).expect_code(0, "uninstall again");
    let g = crate::leased(&host, only).open().unwrap();
    assert_eq!(g.shard(), 31);
    let next = u64::from(g.next_id().unwrap());
    assert!(
        next > last,
        "the Rust holder of shard 31 went back: {next} <= {last}"
    );
}
