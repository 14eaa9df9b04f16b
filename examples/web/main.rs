//! A single-binary web app whose records are keyed by idutil IDs and kept
//! in SQLite through sqlx: a JSON API and a page whose script shows the
//! records, IDs as exact JSON numbers.
//!
//! ```text
//! cargo run -p idutil-example-web            # http://127.0.0.1:3000
//! PORT=8080 cargo run -p idutil-example-web  # or: ... -- --port 8080
//! cargo run -p idutil-example-web --features redis -- --lease redis://...
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
//! [`Id`](idutil::Id) there directly (feature `sqlx`), and reading
//! refuses a value that is not an ID. The time a record was created is its
//! ID's second, so it needs no column of its own, and a time range is an
//! ID range ([`Id::min_at`](idutil::Id::min_at),
//! [`Id::max_at`](idutil::Id::max_at)).
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

use idutil::{Generator, IdUtil};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};

mod api;

use api::{app, App};

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
    #[cfg(any(feature = "postgres-lease", feature = "redis"))]
    {
        IdUtil::init_with(Generator::builder().lease(idutil::lease::LeaseConfig::new(url)))
    }
    #[cfg(not(any(feature = "postgres-lease", feature = "redis")))]
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
