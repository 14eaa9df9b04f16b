//! Connections to PostgreSQL whose every round trip has a deadline.
//!
//! Each connection runs on a Tokio runtime of its own, on the calling
//! thread (no worker threads): `tokio-postgres` then gives a deadline to
//! every round trip (`tokio::time::timeout`), which the synchronous
//! `postgres` crate cannot, and a renewal that outlasted its deadline would
//! let the fence come late. A call that times out drops its connection and
//! is never cancelled on the server: a cancelled wait for a synchronous
//! standby reports the commit as done although the standby may not have
//! it.

use std::io;
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};
use tokio_postgres::Client;

use super::target::Target;
use super::ENGINE;
use crate::lease::{LeaseConfig, LeaseError};

/// Why a call did not go through.
pub(super) enum Failure {
    Db(tokio_postgres::Error),
    Timeout(Duration),
}

/// A `tokio-postgres` error whose message includes the server's own
/// (`tokio-postgres` says only "db error" and keeps the rest in its source).
#[derive(Debug)]
struct PgError(tokio_postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(
                f,
                "{} ({}): {}",
                db.severity(),
                db.code().code(),
                db.message()
            ),
            None => match std::error::Error::source(&self.0) {
                Some(cause) => write!(f, "{}: {cause}", self.0),
                None => self.0.fmt(f),
            },
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl Failure {
    pub(super) fn into_error(self, action: &'static str, lease: &LeaseConfig) -> LeaseError {
        match self {
            Failure::Db(e) => LeaseError::store(ENGINE, action, &lease.url, PgError(e)),
            Failure::Timeout(d) => LeaseError::store(
                ENGINE,
                action,
                &lease.url,
                io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {d:?}")),
            ),
        }
    }

    /// The server's SQLSTATE, if it answered with an error.
    pub(super) fn code(&self) -> Option<&str> {
        match self {
            Failure::Db(e) => e.code().map(|c| c.code()),
            Failure::Timeout(_) => None,
        }
    }
}

/// One connection, opened when first needed and dropped after any failure,
/// on a runtime of its own.
pub(super) struct Conn {
    rt: Option<Runtime>,
    client: Option<Client>,
}

impl Conn {
    /// A connection to the store `lease` names, not opened yet.
    pub(super) fn open(lease: &LeaseConfig) -> Result<Conn, LeaseError> {
        let rt = Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| LeaseError::store(ENGINE, "start a connection to", &lease.url, e))?;
        Ok(Conn {
            rt: Some(rt),
            client: None,
        })
    }

    /// Runs `op` on the connection (connecting first if needed) within
    /// `timeout`, connection included, off any async caller's thread. A
    /// connection found closed (the server restarted, the session was
    /// terminated) is replaced once within the same deadline: every
    /// operation of the lease is a conditional write that may run twice.
    pub(super) fn run<T: Send>(
        &mut self,
        target: &Target,
        timeout: Duration,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error> + Send + Sync,
    ) -> Result<T, Failure> {
        off_runtime(move || self.run_here(target, timeout, op))
    }

    fn run_here<T>(
        &mut self,
        target: &Target,
        timeout: Duration,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, Failure> {
        let timeout = timeout.max(Duration::from_millis(1));
        let Conn { rt, client } = self;
        let rt = rt
            .as_ref()
            .expect("the runtime lives as long as the connection");
        let result = rt.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            tokio::time::timeout_at(deadline, async {
                if let Some(c) = client.as_mut() {
                    match op(c).await {
                        Err(e) if e.is_closed() => *client = None,
                        done => return done,
                    }
                }
                let c = client.insert(target.connect(deadline).await?);
                op(c).await
            })
            .await
        });
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                // An error inside a transaction leaves it to roll back on
                // the server; a fresh connection starts clean.
                *client = None;
                Err(Failure::Db(e))
            }
            Err(_) => {
                *client = None;
                Err(Failure::Timeout(timeout))
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.client = None;
        // Dropping a runtime may block, which an async caller's thread
        // forbids: let it go in the background.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` where a runtime of our own may block: on this thread, or on a
/// short-lived one when this thread is already inside a Tokio runtime (an
/// async `main` opening a generator).
pub(super) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("idutil-lease-open".into())
            .spawn_scoped(s, f)
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
    .unwrap_or_else(|e| panic!("cannot start a thread for the PostgreSQL lease: {e}"))
}
