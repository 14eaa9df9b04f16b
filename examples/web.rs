//! A single-binary web app whose records are keyed by `IdUtil`: a JSON API
//! and a page whose script shows the records, IDs as exact JSON numbers.
//!
//! ```text
//! cargo run --example web                  # http://127.0.0.1:3000
//! PORT=8080 cargo run --example web        # or: cargo run --example web -- --port 8080
//! ```
//!
//! It prints one line, `listening on http://127.0.0.1:PORT`, and serves
//! until Ctrl-C (or SIGTERM). `--port 0` (or `PORT=0`) picks a free port.
//!
//! Settings, all optional:
//!
//! - `PORT` / `--port N`: the port (default 3000).
//! - `HOST`: the address to bind (default `127.0.0.1`, this machine only).
//! - `IDUTIL_SHARD`, `IDUTIL_STATE_DIR`: the shard and state directory, read
//!   by the library exactly as for any other program using it.
//! - `RUST_LOG`: log filter (default `warn`, which shows the library's
//!   warnings, e.g. a shard taken from a host name without digits).
//!
//! The API:
//!
//! - `GET /`: the page.
//! - `GET /api/records`: every record, oldest first, as a JSON array of
//!   `{"id": 1779653466524995, "text": "...", "created": 1795289701}`
//!   (`created` is the ID's second, Unix time).
//! - `POST /api/records` with `{"text": "..."}`: creates a record; `201` and
//!   the record.
//! - `GET /api/records/{id}`: one record; `400` for something that is not an
//!   ID, `404` for an ID with no record.
//!
//! Errors are JSON too: `{"error": "why"}`.
//!
//! The generator is opened before the server starts, so a bad shard or an
//! unusable state directory stops the app at once with the reason. On
//! Ctrl-C the server stops accepting connections, finishes the requests in
//! flight, then closes the generator (`IdUtil::shutdown()`), so the state
//! file records the exact last ID and a restart continues right after it.
//! Records live in memory only (the latest 10,000): a real app would put the
//! `i64` key in its database.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use idutil::{Id, IdUtil};
use serde::{Deserialize, Serialize};

const DEFAULT_PORT: u16 = 3000;
const USAGE: &str = "usage: web [--port N] (env: PORT, HOST, IDUTIL_SHARD, IDUTIL_STATE_DIR)";
const MAX_RECORDS: usize = 10_000;
const MAX_TEXT: usize = 280;

#[derive(Clone, Serialize)]
struct Record {
    /// The primary key, exactly as `IdUtil` returns it: a JSON number that a
    /// browser reads without loss.
    id: i64,
    text: String,
    /// The second the ID was issued in, Unix time.
    created: u64,
}

#[derive(Deserialize)]
struct NewRecord {
    text: String,
}

type Records = Arc<Mutex<BTreeMap<i64, Record>>>;

fn app(records: Records) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/records", get(list).post(create))
        .route("/api/records/{id}", get(show))
        .with_state(records)
}

fn error(status: StatusCode, reason: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({ "error": reason.to_string() });
    (status, Json(body)).into_response()
}

async fn list(State(records): State<Records>) -> Json<Vec<Record>> {
    let records = records.lock().unwrap_or_else(|p| p.into_inner());
    Json(records.values().cloned().collect())
}

async fn create(
    State(records): State<Records>,
    body: Result<Json<NewRecord>, JsonRejection>,
) -> Response {
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
    // instead. Both are one atomic step: no lock, no I/O in steady state.
    let id = match IdUtil::try_next_id() {
        Ok(id) => id,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let created = Id::try_from(id).map_or(0, Id::unix_seconds);
    let record = Record {
        id,
        text: text.to_string(),
        created,
    };
    let mut records = records.lock().unwrap_or_else(|p| p.into_inner());
    records.insert(id, record.clone());
    while records.len() > MAX_RECORDS {
        records.pop_first();
    }
    (StatusCode::CREATED, Json(record)).into_response()
}

async fn show(State(records): State<Records>, Path(id): Path<String>) -> Response {
    // Parsing through `Id` rejects negatives, junk and values above 2^53 - 1
    // with a reason.
    let id = match id.parse::<Id>() {
        Ok(id) => i64::from(id),
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let records = records.lock().unwrap_or_else(|p| p.into_inner());
    match records.get(&id) {
        Some(record) => Json(record.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no record {id}")),
    }
}

/// The port from `--port N`, else `PORT`, else 3000.
fn port() -> Result<u16, String> {
    let mut args = std::env::args().skip(1);
    let mut from_args = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--port" => from_args = Some(args.next().ok_or("--port needs a value")?),
            _ => match arg.strip_prefix("--port=") {
                Some(v) => from_args = Some(v.to_string()),
                None => return Err(format!("unknown argument {arg:?}; {USAGE}")),
            },
        }
    }
    let (value, name) = match (from_args, std::env::var("PORT")) {
        (Some(v), _) => (v, "--port"),
        (None, Ok(v)) => (v, "PORT"),
        (None, Err(_)) => return Ok(DEFAULT_PORT),
    };
    value
        .parse()
        .map_err(|_| format!("{name}={value:?} is not a port number (0 to 65535)"))
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

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let port = match port() {
        Ok(port) => port,
        Err(e) => {
            eprintln!("web: {e}");
            return ExitCode::from(2);
        }
    };
    let host = std::env::var("HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    // Fail now, with the reason, rather than on the first request.
    let generator = match IdUtil::init() {
        Ok(generator) => generator,
        Err(e) => {
            eprintln!("web: cannot start: {e}");
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
        "shard {} ({}), state file {}",
        generator.shard(),
        generator.shard_source(),
        generator.state_path().display()
    );

    let records = Records::default();
    let served = axum::serve(listener, app(records))
        .with_graceful_shutdown(shutdown_signal())
        .await;
    // Every request has finished: record the exact last ID.
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
