//! The web example end to end: started as a real process on a loopback
//! port, its page and JSON API checked over HTTP, its SQLite file read
//! directly, stopped with SIGTERM, its state file checked for the exact
//! last ID, and restarted on the same file.

#![cfg(all(feature = "sqlx", feature = "serde"))]

use idutil_harness as harness;

use harness::web::WebApp;
use idutil::Id;
use serde_json::Value;

const SHARD: u32 = 9;

/// The `id` of a record as the server wrote it: a JSON integer, in range.
fn id_of(record: &Value) -> Id {
    let n = record["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("id is not a non-negative JSON integer: {record}"));
    Id::from_u64(n).unwrap_or_else(|| panic!("id {n} is above 2^53 - 1"))
}

#[test]
fn serves_records_keyed_by_ids_and_records_the_last_one_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    let app = WebApp::start(dir.path(), SHARD);

    let page = app.get("/");
    assert_eq!(page.status, 200);
    assert!(page.content_type.starts_with("text/html"), "{page:?}");
    assert!(page.body.contains("<script>") && page.body.contains("fetch(\"/api/records\")"));

    let empty = app.get("/api/records");
    assert_eq!((empty.status, empty.body.as_str()), (200, "[]"));

    let mut ids = Vec::new();
    for text in ["first", "second \u{1F600}", "  third  "] {
        let r = app.post_json(
            "/api/records",
            &serde_json::json!({ "text": text }).to_string(),
        );
        assert_eq!(r.status, 201, "{r:?}");
        assert!(r.content_type.starts_with("application/json"), "{r:?}");
        let record: Value = serde_json::from_str(&r.body).unwrap();
        let id = id_of(&record);
        assert_eq!(record["text"], text.trim());
        assert_eq!(id.shard(), SHARD, "the shard comes from IDUTIL_SHARD");
        assert_eq!(record["created"].as_u64(), Some(id.unix_seconds()));
        // The JSON text holds the ID as a bare integer, not a string or float.
        assert!(r.body.contains(&format!("\"id\":{id},")), "{}", r.body);
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    let list = app.get("/api/records");
    assert_eq!(list.status, 200);
    let records: Vec<Value> = serde_json::from_str(&list.body).unwrap();
    assert_eq!(records.iter().map(id_of).collect::<Vec<_>>(), ids);

    // They are in the SQLite file next to the state directory, keyed by
    // the same IDs.
    assert_eq!(stored(&app.database()), ids);
    assert!(app.state_dir().is_dir());

    let one = app.get(&format!("/api/records/{}", ids[1]));
    assert_eq!(one.status, 200);
    assert_eq!(id_of(&serde_json::from_str(&one.body).unwrap()), ids[1]);

    // Bad input answers with a status and a JSON reason.
    for (method, path, body, status, why) in [
        (
            "GET",
            "/api/records/abc",
            None,
            400,
            "not a decimal integer",
        ),
        ("GET", "/api/records/-5", None, 400, "negative"),
        ("GET", "/api/records/9007199254740992", None, 400, "2^53"),
        ("GET", "/api/records/1", None, 404, "no record 1"),
        (
            "POST",
            "/api/records",
            Some(r#"{"text":"   "}"#),
            400,
            "empty",
        ),
        ("POST", "/api/records", Some(r#"{"txt":"x"}"#), 422, "text"),
        ("POST", "/api/records", Some("{not json"), 400, ""),
        ("POST", "/api/records", Some(r#"{"text":5}"#), 422, "text"),
        ("GET", "/nowhere", None, 404, "no such page: GET /nowhere"),
        ("GET", "/api/records/1/x", None, 404, "no such page"),
        ("POST", "/", None, 405, "POST is not allowed on /"),
        ("DELETE", "/api/records", None, 405, "DELETE is not allowed"),
        (
            "PUT",
            "/api/records/1",
            Some("{}"),
            405,
            "PUT is not allowed",
        ),
    ] {
        let r = app.request(method, path, body);
        assert_eq!(r.status, status, "{method} {path}: {r:?}");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        let e = e["error"].as_str().unwrap_or_else(|| panic!("{r:?}"));
        assert!(e.contains(why), "{method} {path}: {e:?} lacks {why:?}");
    }
    // Only JSON is accepted: 415 without its content type, as JSON too.
    for content_type in [None, Some("text/plain")] {
        let r = app.request_typed(
            "POST",
            "/api/records",
            content_type,
            Some(r#"{"text":"x"}"#),
        );
        assert_eq!(r.status, 415, "{content_type:?}: {r:?}");
        assert!(r.content_type.starts_with("application/json"), "{r:?}");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        assert!(
            e["error"].as_str().unwrap().contains("Content-Type"),
            "{r:?}"
        );
    }
    // 405 says what is allowed.
    let r = app.request("DELETE", "/api/records", None);
    let allow = r
        .header("allow")
        .unwrap_or_else(|| panic!("no Allow: {r:?}"));
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    let long = "x".repeat(281);
    let r = app.post_json(
        "/api/records",
        &serde_json::json!({ "text": long }).to_string(),
    );
    assert_eq!(r.status, 400, "{r:?}");

    // A graceful stop closes the generator: the state file holds the exact
    // last ID, not just the reserved window.
    let (status, stderr) = app.stop();
    assert!(status.success(), "{status}; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report = idutil::state::inspect(&WebApp::state_dir_in(dir.path()), SHARD).unwrap();
    assert!(!report.locked, "the lock was released");
    let state = report.state.expect("a state file");
    let last = *ids.last().unwrap();
    assert_eq!(
        state.last,
        Some((last.unix_seconds(), last.sequence())),
        "the clean close records the last ID"
    );

    // A restart on the same state directory and database finds the
    // records, and its new IDs are strictly larger.
    let again = WebApp::start(dir.path(), SHARD);
    let list = again.get("/api/records");
    assert_eq!(list.status, 200, "{list:?}");
    let records: Vec<Value> = serde_json::from_str(&list.body).unwrap();
    assert_eq!(records.iter().map(id_of).collect::<Vec<_>>(), ids);
    assert_eq!(records[1]["text"], "second \u{1F600}");
    let one = again.get(&format!("/api/records/{}", ids[0]));
    assert_eq!(one.status, 200, "{one:?}");
    for text in ["after restart", "and another"] {
        let r = again.post_json(
            "/api/records",
            &serde_json::json!({ "text": text }).to_string(),
        );
        assert_eq!(r.status, 201, "{r:?}");
        let next = id_of(&serde_json::from_str(&r.body).unwrap());
        assert!(next > *ids.last().unwrap(), "{next} after {ids:?}");
        ids.push(next);
    }
    let (status, stderr) = again.stop();
    assert!(status.success(), "{status}; stderr: {stderr}");
    assert_eq!(stored(&WebApp::database_in(dir.path())), ids);
}

/// The IDs in the example's SQLite file, read with sqlx as `Id`s, in key
/// order.
fn stored(file: &std::path::Path) -> Vec<Id> {
    assert!(file.is_file(), "{} is missing", file.display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(file)
            .read_only(true);
        let db = sqlx::SqlitePool::connect_with(options).await.unwrap();
        let ids = sqlx::query_scalar("SELECT id FROM records ORDER BY id")
            .fetch_all(&db)
            .await
            .unwrap();
        db.close().await;
        ids
    })
}

#[test]
fn lists_records_created_between_two_times() {
    let dir = tempfile::tempdir().unwrap();
    let app = WebApp::start(dir.path(), SHARD);
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = app.post_json("/api/records", &format!(r#"{{"text":"r{i}"}}"#));
        assert_eq!(r.status, 201, "{r:?}");
        ids.push(id_of(&serde_json::from_str(&r.body).unwrap()));
    }
    let (first, last) = (ids[0].unix_seconds(), ids[2].unix_seconds());
    let listed = |query: &str| -> Vec<Id> {
        let r = app.get(&format!("/api/records{query}"));
        assert_eq!(r.status, 200, "{query}: {r:?}");
        let records: Vec<Value> = serde_json::from_str(&r.body).unwrap();
        records.iter().map(id_of).collect()
    };
    assert_eq!(listed(&format!("?from={first}&to={last}")), ids);
    assert_eq!(listed(&format!("?from={first}")), ids);
    assert_eq!(listed(&format!("?to={last}")), ids);
    assert_eq!(listed(&format!("?to={}", first - 1)), vec![]);
    assert_eq!(listed(&format!("?from={}", last + 1)), vec![]);
    assert_eq!(listed("?from=946684800&to=5000000000"), ids);

    for (query, why) in [
        ("?from=946684799", "outside the IDs' time range"),
        ("?to=5000000000000", "outside the IDs' time range"),
        ("?from=yesterday", "from"),
        ("?to=-1", "to"),
    ] {
        let r = app.get(&format!("/api/records{query}"));
        assert_eq!(r.status, 400, "{query}: {r:?}");
        let e: Value = serde_json::from_str(&r.body).unwrap();
        let e = e["error"].as_str().unwrap_or_else(|| panic!("{r:?}"));
        assert!(e.contains(why), "{query}: {e:?} lacks {why:?}");
    }
    let (status, stderr) = app.stop();
    assert!(status.success(), "{status}; stderr: {stderr}");
}

#[test]
fn bad_arguments_exit_2_with_the_reason_and_help_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = std::process::Command::new(harness::web::binary());
        command
            .args(args)
            .env("IDUTIL_STATE_DIR", dir.path().join("state"))
            .env("IDUTIL_SHARD", "1")
            .env_remove("PORT")
            .env_remove("HOST");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    };
    for (args, env, why) in [
        (
            &["--port", "x"][..],
            &[][..],
            "invalid value 'x' for '--port <PORT>'",
        ),
        (&["--port", "65536"][..], &[][..], "65536"),
        (&[][..], &[("PORT", "-1")][..], "-1"),
        (&["--prot", "80"][..], &[][..], "--port"),
    ] {
        let out = run(args, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: it must not claim to listen"
        );
        assert!(stderr.contains(why), "{args:?} {env:?}: {stderr}");
    }
    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--port") && help.contains("[env: PORT="),
        "{help}"
    );
    assert!(
        !dir.path().join("state-web.sqlite3").exists(),
        "no database for bad arguments"
    );
}

#[test]
fn refuses_to_start_with_a_bad_shard() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(harness::web::binary())
        .env("IDUTIL_STATE_DIR", dir.path())
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .env("IDUTIL_SHARD", "99")
        .env("PORT", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "it must not claim to listen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot start") && stderr.contains("shard 99"),
        "{stderr}"
    );
}

/// The web example with `--lease postgres://...`: its shard comes from a
/// PostgreSQL lease (IDUTIL_SHARD is ignored with a warning), it serves
/// records, gives the lease back on SIGTERM with the exact last ID, and a
/// restart resumes after it.
#[cfg(feature = "postgres-lease")]
#[test]
fn serves_records_on_a_shard_leased_from_postgres() {
    let Some(pg) = harness::postgres::Postgres::start_tcp(&Default::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.tcp_url();
    let mut last = None;
    for run in 0..2 {
        let app = WebApp::start_with(dir.path(), SHARD, &["--lease", &url]);
        let r = app.post_json("/api/records", r#"{"text":"leased"}"#);
        assert_eq!(r.status, 201, "{r:?}");
        let id = id_of(&serde_json::from_str(&r.body).unwrap());
        assert_eq!(
            id.shard(),
            0,
            "the first free leased shard, not IDUTIL_SHARD"
        );
        assert!(
            last.is_none_or(|l| id > l),
            "run {run} resumes after the last"
        );
        let held = pg.psql("SELECT holder IS NOT NULL FROM idutil_lease WHERE shard = 0");
        assert_eq!(held, "t");
        let (status, stderr) = app.stop();
        assert!(status.success(), "{stderr}");
        let row = pg.psql(
            "SELECT holder IS NULL, last_second IS NOT NULL FROM idutil_lease WHERE shard = 0",
        );
        assert_eq!(row, "t|t", "given back with the exact last ID");
        last = Some(id);
    }
}
