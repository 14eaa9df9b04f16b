//! The JSON API and the page: routes, handlers, and every error as JSON.

use std::time::{Duration, UNIX_EPOCH};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use idutil::{Generator, Id};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqlitePool;

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
pub struct App {
    pub db: SqlitePool,
    pub ids: &'static Generator,
}

pub fn app(state: App) -> Router {
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
