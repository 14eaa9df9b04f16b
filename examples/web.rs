//! A single-binary web app whose records are keyed by idutil IDs and kept
//! in SQLite through sqlx: a JSON API and a page whose script shows the
//! records, IDs as exact JSON numbers.
//!
//! ```text
//! cargo run --example web --features sqlx,serde            # http://127.0.0.1:3000
//! PORT=8080 cargo run --example web --features sqlx,serde  # or: ... -- --port 8080
//! ```
//!
//! It prints one line, `listening on http://127.0.0.1:PORT`, and serves
//! until Ctrl-C (or SIGTERM). `--port 0` (or `PORT=0`) picks a free port.
//!
//! Settings, all optional (`--help` lists them):
//!
//! - `--port N` / `PORT`: the port (default 3000).
//! - `--host ADDR` / `HOST`: the address to bind (default `127.0.0.1`, this
//!   machine only).
//! - `IDUTIL_SHARD`, `IDUTIL_STATE_DIR`: the shard and state directory, read
//!   by the library exactly as for any other program using it.
//! - `RUST_LOG`: log filter (default `warn`, which shows the library's
//!   warnings, e.g. a shard taken from a host name without digits).
//!
//! The records live in a SQLite file next to the state directory, named
//! after it: `~/.local/state/idutil-web.sqlite3` for the default
//! `~/.local/state/idutil`, `/srv/ids/state-web.sqlite3` for
//! `IDUTIL_STATE_DIR=/srv/ids/state`. It is created on the first run; a
//! restart finds its records, and new IDs continue after them. Its table:
//!
//! ```sql
//! CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)
//! ```
//!
//! The `id` column is a plain 64-bit integer: sqlx binds and reads an
//! [`Id`] there directly (feature `sqlx`), and reading refuses a value that
//! is not an ID. The time a record was created is its ID's second, so it
//! needs no column of its own, and a time range is an ID range
//! ([`Id::min_at`], [`Id::max_at`]).
//!
//! The API:
//!
//! - `GET /`: the page.
//! - `GET /api/records`: the latest 10,000 records, oldest first, as a JSON
//!   array of `{"id": 1779653466524995, "text": "...", "created": 1795289701}`
//!   (`created` is the ID's second, Unix time). `?from=T&to=T` (Unix
//!   seconds, both included, either optional) keeps those created in that
//!   time.
//! - `POST /api/records` with `{"text": "..."}`: creates a record; `201` and
//!   the record.
//! - `GET /api/records/{id}`: one record; `400` for something that is not an
//!   ID, `404` for an ID with no record.
//!
//! Every error is JSON too, `{"error": "why"}`: a path that is not one of
//! these (404), another method (405, with `Allow`), a body that is not
//! JSON (415 without `Content-Type: application/json`, 400 for bad syntax,
//! 422 for a missing or mistyped `text`) or not a usable text (400).
//!
//! The generator is opened before the server starts, so a bad shard or an
//! unusable state directory stops the app at once with the reason, and so
//! does a database file that cannot be opened. On Ctrl-C the server stops
//! accepting connections, finishes the requests in flight, closes the
//! database, then closes the generator (`IdUtil::shutdown()`), so the state
//! file records the exact last ID and a restart continues right after it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use idutil::{Generator, Id, IdUtil};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};

/// The example web app of idutil: records keyed by IDs, kept in SQLite.
///
/// The shard and state directory come from IDUTIL_SHARD and
/// IDUTIL_STATE_DIR, as for any program using idutil; the database is a
/// file next to the state directory.
#[derive(clap::Parser)]
#[command(name = "web")]
struct Args {
    /// The port to listen on; 0 picks a free one.
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    /// The address to bind.
    #[arg(long, env = "HOST", default_value = "127.0.0.1")]
    host: String,
    /// Lease the shard from this store (postgres://..., redis://...) instead
    /// of taking it from IDUTIL_SHARD or the host name; IDUTIL_LEASE_URL
    /// does the same without the flag. Needs a lease engine's feature
    /// (`postgres-lease`, `redis`).
    #[arg(long, value_name = "URL")]
    lease: Option<String>,
}
const MAX_LISTED: i64 = 10_000;
const MAX_TEXT: usize = 280;

/// A row of the `records` table.
#[derive(sqlx::FromRow)]
struct Row {
    id: Id,
    text: String,
}

/// A record as the API writes it.
#[derive(Serialize)]
struct Record {
    /// The primary key: a JSON number that a browser reads without loss.
    id: Id,
    text: String,
    /// The second the ID was issued in, Unix time.
    created: u64,
}

impl From<Row> for Record {
    fn from(row: Row) -> Record {
        Record {
            id: row.id,
            text: row.text,
            created: row.id.unix_seconds(),
        }
    }
}

#[derive(Deserialize)]
struct NewRecord {
    text: String,
}

/// `?from=T&to=T`, Unix seconds.
#[derive(Deserialize)]
struct Range {
    from: Option<u64>,
    to: Option<u64>,
}

#[derive(Clone)]
struct App {
    db: SqlitePool,
    ids: &'static Generator,
}

fn app(state: App) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/records", get(list).post(create))
        .route("/api/records/{id}", get(show))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no such page: {method} {}", uri.path()),
    )
}

/// Axum adds the `Allow` header to this response.
async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

fn error(status: StatusCode, reason: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({ "error": reason.to_string() });
    (status, Json(body)).into_response()
}

fn database_error(e: sqlx::Error) -> Response {
    log::error!("database: {e}");
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("database: {e}"))
}

/// The ID bounding a `from` or `to` time, or why there is none.
fn bound(
    name: &str,
    unix: Option<u64>,
    at: fn(std::time::SystemTime) -> Option<Id>,
    default: Id,
) -> Result<Id, String> {
    let Some(unix) = unix else {
        return Ok(default);
    };
    UNIX_EPOCH
        .checked_add(Duration::from_secs(unix))
        .and_then(at)
        .ok_or_else(|| {
            format!(
                "{name}={unix} is outside the IDs' time range \
                 (2000-01-01T00:00:00Z to 2136-02-07T06:28:15Z)"
            )
        })
}

async fn list(State(app): State<App>, range: Result<Query<Range>, QueryRejection>) -> Response {
    let Query(range) = match range {
        Ok(range) => range,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let bounds = bound("from", range.from, Id::min_at, Id::MIN)
        .and_then(|low| Ok((low, bound("to", range.to, Id::max_at, Id::MAX)?)));
    let (low, high) = match bounds {
        Ok(bounds) => bounds,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    // The newest ones in the range, then oldest first.
    let rows: Result<Vec<Row>, _> = sqlx::query_as(
        "SELECT id, text FROM (SELECT id, text FROM records \
         WHERE id BETWEEN $1 AND $2 ORDER BY id DESC LIMIT $3) ORDER BY id",
    )
    .bind(low)
    .bind(high)
    .bind(MAX_LISTED)
    .fetch_all(&app.db)
    .await;
    match rows {
        Ok(rows) => Json(rows.into_iter().map(Record::from).collect::<Vec<_>>()).into_response(),
        Err(e) => database_error(e),
    }
}

async fn create(State(app): State<App>, body: Result<Json<NewRecord>, JsonRejection>) -> Response {
    let Json(new) = match body {
        Ok(body) => body,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let text = new.text.trim();
    if text.is_empty() {
        return error(StatusCode::BAD_REQUEST, "text is empty");
    }
    if text.chars().count() > MAX_TEXT {
        return error(
            StatusCode::BAD_REQUEST,
            format!("text is longer than {MAX_TEXT} characters"),
        );
    }
    // `IdUtil::next_id()` would panic on the rare failure (the layout's last
    // second, a state file that cannot be written); this handler answers 503
    // instead. Either is one atomic step: no lock, no I/O in steady state.
    let id = match app.ids.next_id() {
        Ok(id) => id,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let inserted = sqlx::query("INSERT INTO records (id, text) VALUES ($1, $2)")
        .bind(id)
        .bind(text)
        .execute(&app.db)
        .await;
    if let Err(e) = inserted {
        return database_error(e);
    }
    let record = Record::from(Row {
        id,
        text: text.to_string(),
    });
    (StatusCode::CREATED, Json(record)).into_response()
}

async fn show(State(app): State<App>, UrlPath(id): UrlPath<String>) -> Response {
    // Parsing through `Id` rejects negatives, junk and values above 2^53 - 1
    // with a reason.
    let id = match id.parse::<Id>() {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let row: Result<Option<Row>, _> = sqlx::query_as("SELECT id, text FROM records WHERE id = $1")
        .bind(id)
        .fetch_optional(&app.db)
        .await;
    match row {
        Ok(Some(row)) => Json(Record::from(row)).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no record {id}")),
        Err(e) => database_error(e),
    }
}

/// The database file: next to the state directory, named after it.
fn database_path(state_dir: &Path) -> Result<PathBuf, String> {
    match (state_dir.parent(), state_dir.file_name()) {
        (Some(parent), Some(name)) => {
            let mut file = name.to_os_string();
            file.push("-web.sqlite3");
            Ok(parent.join(file))
        }
        _ => Err(format!(
            "no place next to the state directory {} for the database",
            state_dir.display()
        )),
    }
}

/// Opens (and on the first run creates) the database and its table.
async fn open_database(path: &Path) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    let db = SqlitePool::connect_with(options).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
        .execute(&db)
        .await?;
    Ok(db)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// The process-wide generator, on a leased shard when `lease` names a store.
fn init(lease: Option<String>) -> idutil::Result<&'static Generator> {
    let Some(url) = lease else {
        return IdUtil::init();
    };
    #[cfg(feature = "lease")]
    {
        IdUtil::init_with(Generator::builder().lease(idutil::lease::LeaseConfig::new(url)))
    }
    #[cfg(not(feature = "lease"))]
    {
        eprintln!("web: --lease {url:?} needs a lease engine's feature (postgres-lease, redis)");
        std::process::exit(2)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // Bad arguments exit 2 with clap's message; --help exits 0.
    let Args { port, host, lease } = clap::Parser::parse();
    // Fail now, with the reason, rather than on the first request.
    let generator = match init(lease) {
        Ok(generator) => generator,
        Err(e) => {
            eprintln!("web: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let db_path = match database_path(generator.state_dir()) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("web: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let db = match open_database(&db_path).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("web: cannot open the database {}: {e}", db_path.display());
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind((host.as_str(), port)).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("web: cannot listen on {host}:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr: SocketAddr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("web: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on http://{addr}");
    log::info!(
        "shard {} ({}), state file {}, database {}",
        generator.shard(),
        generator.shard_source(),
        generator.state_path().display(),
        db_path.display()
    );

    let state = App {
        db: db.clone(),
        ids: generator,
    };
    let served = axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await;
    // Every request has finished: close the database, then record the exact
    // last ID.
    db.close().await;
    let closed = IdUtil::shutdown();
    match (served, closed) {
        (Ok(()), Ok(())) => {
            eprintln!("web: stopped; the state file records the last ID");
            ExitCode::SUCCESS
        }
        (Err(e), _) => {
            eprintln!("web: server error: {e}");
            ExitCode::FAILURE
        }
        (_, Err(e)) => {
            eprintln!("web: closing the generator: {e}");
            ExitCode::FAILURE
        }
    }
}

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>idutil records</title>
<style>
  body { font: 16px/1.4 system-ui, sans-serif; max-width: 50rem; margin: 2rem auto; padding: 0 1rem; }
  form { display: flex; gap: .5rem; margin-bottom: 1rem; }
  input { flex: 1; padding: .4rem; font: inherit; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #ddd; }
  td.id { font-family: ui-monospace, monospace; }
  #status { color: #555; }
  #status.bad { color: #b00; font-weight: bold; }
</style>
</head>
<body>
<h1>Records</h1>
<form id="add">
  <input id="text" name="text" maxlength="280" placeholder="Write something and press Enter" required autofocus>
  <button>Add</button>
</form>
<p id="status">Loading…</p>
<table>
  <thead><tr><th>ID</th><th>Created (UTC)</th><th>Text</th></tr></thead>
  <tbody id="rows"></tbody>
</table>
<script>
"use strict";
const rows = document.getElementById("rows");
const statusLine = document.getElementById("status");

function show(records) {
  rows.replaceChildren();
  for (const r of records.slice().reverse()) {
    const tr = document.createElement("tr");
    const cells = [String(r.id), new Date(r.created * 1000).toISOString().replace(".000Z", "Z"), r.text];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 0) td.className = "id";
      tr.appendChild(td);
    });
    rows.appendChild(tr);
  }
  // IDs stay below 2^53, so JSON.parse reads every one exactly.
  const unsafe = records.filter(r => !Number.isSafeInteger(r.id));
  statusLine.className = unsafe.length ? "bad" : "";
  statusLine.textContent = unsafe.length
    ? unsafe.length + " IDs are not exact JavaScript numbers!"
    : records.length + " records; every ID is an exact JavaScript number.";
}

async function load() {
  const res = await fetch("/api/records");
  if (!res.ok) throw new Error((await res.json()).error);
  show(await res.json());
}

document.getElementById("add").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("text");
  try {
    const res = await fetch("/api/records", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text: input.value }),
    });
    if (!res.ok) throw new Error((await res.json()).error);
    input.value = "";
    await load();
  } catch (e) {
    statusLine.className = "bad";
    statusLine.textContent = "Error: " + e.message;
  }
});

load().catch(e => { statusLine.className = "bad"; statusLine.textContent = "Error: " + e.message; });
</script>
</body>
</html>
"#;
