//! Connections to PostgreSQL whose every round trip has a deadline, which
//! keep the server's notices and use no prepared statement.
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
use tokio::task::JoinHandle;
use tokio_postgres::error::{DbError, Severity, SqlState};
use tokio_postgres::{Client, SimpleQueryMessage};

use super::notices::Notices;
use super::target::Target;
use super::ENGINE;
use idutil_lease::{LeaseConfig, LeaseError};

/// How every transaction of the lease begins: at `read committed`, whatever
/// the role's `default_transaction_isolation` (under `serializable`
/// concurrent acquisitions would fail with serialization errors, and the
/// statements are written for the snapshot of each statement). Each
/// transaction is sent in one round trip, so a role's
/// `idle_in_transaction_session_timeout` never finds it idle.
pub(super) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Why a call did not go through.
pub(super) enum Failure {
    Db(tokio_postgres::Error),
    Timeout(Duration),
    /// The commit went through on the primary, but the wait for the
    /// synchronous standby was cancelled (the server's warning).
    Unreplicated(String),
    /// An answer this crate cannot read.
    Answer(String),
}

/// PgBouncer's refusal of a transaction block in `pool_mode = statement`.
fn is_statement_pooling(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| db.message().contains("statement pooling mode"))
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
            Failure::Db(e) if is_statement_pooling(&e) => LeaseError::invalid_config(format!(
                "{} is a pooler in statement mode, which runs no transaction of more than one \
                 statement: the lease needs transactions; connect through a pool in \
                 transaction or session mode, or to the server itself",
                lease.url_redacted()
            )),
            Failure::Db(e) => LeaseError::store(ENGINE, action, lease.get_url(), PgError(e)),
            Failure::Unreplicated(notice) => LeaseError::store(
                ENGINE,
                action,
                lease.get_url(),
                io::Error::other(format!(
                    "the commit is not known to be on the synchronous standby, so it does not \
                     count (the server said: {notice})"
                )),
            ),
            Failure::Answer(what) => LeaseError::store(
                ENGINE,
                action,
                lease.get_url(),
                io::Error::new(io::ErrorKind::InvalidData, what),
            ),
            Failure::Timeout(d) => LeaseError::store(
                ENGINE,
                action,
                lease.get_url(),
                io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {d:?}")),
            ),
        }
    }

    /// The server's SQLSTATE, if it answered with an error.
    pub(super) fn code(&self) -> Option<&str> {
        match self {
            Failure::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// Whether the same call may succeed if tried again a moment later, on
    /// a fresh connection: no answer in time, a connection refused, cut or
    /// ended by the server, a server starting, stopping or out of
    /// connections, a lock or serialization conflict, a statement
    /// cancelled, a pooler's error (PgBouncer's are `08P01`: its queue's
    /// timeout, a server it cannot reach, a pool being reconfigured), a
    /// read-only server during a failover, a commit the synchronous
    /// standby did not confirm. Not: a refused login, a missing database
    /// or table, a TLS certificate that does not verify, a statement-mode
    /// pooler, an answer this crate cannot read.
    pub(super) fn may_pass(&self) -> bool {
        match self {
            Failure::Timeout(_) | Failure::Unreplicated(_) => true,
            Failure::Answer(_) => false,
            Failure::Db(e) if is_statement_pooling(e) => false,
            Failure::Db(e) => match e.as_db_error() {
                Some(db) => passing_state(db.code().code()),
                None => e.is_closed() || io_in_chain(e),
            },
        }
    }
}

/// SQLSTATEs that say "not now" rather than "never".
fn passing_state(code: &str) -> bool {
    // Class 08: connection exceptions (and PgBouncer's errors).
    code.starts_with("08")
        || matches!(
            code,
            // serialization_failure, deadlock_detected
            "40001" | "40P01"
            // lock_not_available (the lease's `lock_timeout`)
            | "55P03"
            // query_canceled (`statement_timeout`, `pg_cancel_backend`)
            | "57014"
            // admin_shutdown, crash_shutdown, cannot_connect_now
            | "57P01" | "57P02" | "57P03"
            // too_many_connections, insufficient_resources
            | "53300" | "53000"
            // read_only_sql_transaction: a standby, before a promotion
            | "25006"
        )
}

/// Whether an error that is not the server's has an I/O error among its
/// causes (a connection refused, reset or timed out), rather than, say, a
/// TLS certificate that does not verify.
fn io_in_chain(e: &tokio_postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.is::<io::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// One connection, opened when first needed and dropped after any failure,
/// on a runtime of its own. A holder has one, for everything it does, so
/// it takes one server connection of a pooler's pool at a time.
pub(super) struct Conn {
    rt: Option<Runtime>,
    session: Option<Session>,
}

/// An open connection, the notices its server sent, and the task that
/// drives it.
struct Session {
    client: Client,
    notices: Notices,
    task: JoinHandle<()>,
}

/// Ends `session` at once: its socket closed now rather than at the
/// runtime's next turn (the next call, after a pause), so that the
/// connections a crowd of holders gives up on do not pile up on the
/// server or on a pooler, which counts them against its client limit.
fn end(rt: &Runtime, session: &mut Option<Session>) {
    if let Some(s) = session.take() {
        drop(s.client);
        s.task.abort();
        let _ = rt.block_on(s.task);
    }
}

/// What one statement of a [`Conn::write`] answered: its rows, each column
/// as the server's text (`None` for NULL), and how many rows it changed or
/// returned.
pub(super) struct Answer {
    pub(super) rows: Vec<Vec<Option<String>>>,
    pub(super) count: u64,
}

impl Conn {
    /// A connection to the store `lease` names, not opened yet.
    pub(super) fn open(lease: &LeaseConfig) -> Result<Conn, LeaseError> {
        let rt = Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| LeaseError::store(ENGINE, "start a connection to", lease.get_url(), e))?;
        Ok(Conn {
            rt: Some(rt),
            session: None,
        })
    }

    /// Runs `statements` as one transaction in one round trip, with the
    /// lease's settings made for that transaction only (`SET LOCAL`, so a
    /// transaction-mode pooler that hands the next transaction another
    /// server connection loses nothing): `synchronous_commit` at least
    /// `on`, and a `lock_timeout` of the round trip's deadline. Returns
    /// each statement's [`Answer`].
    ///
    /// Uses the simple query protocol only: no prepared statement, named or
    /// not, which poolers in transaction mode cannot keep. The statements
    /// carry their values as literals ([`literal`]).
    ///
    /// A commit the server reports with the warning that it cancelled the
    /// wait for the synchronous standby (an operator's `pg_cancel_backend`,
    /// a client's cancel request) is committed on the primary only: it is a
    /// [`Failure::Unreplicated`], never an acknowledgment, and the caller
    /// writes again (a later commit that the standby confirms covers it) or
    /// stops.
    pub(super) fn write(
        &mut self,
        target: &Target,
        timeout: Duration,
        statements: &[String],
    ) -> Result<Vec<Answer>, Failure> {
        self.write_then(target, timeout, statements, true)
    }

    /// [`write`](Conn::write) for a transaction that must not run twice
    /// unseen: a connection found closed fails the call, even when it
    /// closed before the request reached the server, rather than running
    /// it again on a new one. The caller, which knows whether it may run
    /// twice, tries again as it sees fit (the acquisition first looks for
    /// a row it may have taken; the close reads whether it went through).
    pub(super) fn write_once(
        &mut self,
        target: &Target,
        timeout: Duration,
        statements: &[String],
    ) -> Result<Vec<Answer>, Failure> {
        self.write_then(target, timeout, statements, false)
    }

    fn write_then(
        &mut self,
        target: &Target,
        timeout: Duration,
        statements: &[String],
        rerun: bool,
    ) -> Result<Vec<Answer>, Failure> {
        let mut sql = format!(
            "{BEGIN}; SELECT set_config('synchronous_commit', \
             CASE current_setting('synchronous_commit') \
             WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, true), \
             set_config('lock_timeout', '{}ms', true); ",
            target.lock_timeout().as_millis()
        );
        for statement in statements {
            sql.push_str(statement);
            sql.push_str("; ");
        }
        sql.push_str("COMMIT");
        let messages = self.run(target, timeout, rerun, async |c| c.simple_query(&sql).await)?;
        let mut answers = Vec::new();
        let mut rows = Vec::new();
        for message in messages {
            match message {
                SimpleQueryMessage::Row(row) => rows.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                ),
                SimpleQueryMessage::CommandComplete(count) => answers.push(Answer {
                    rows: std::mem::take(&mut rows),
                    count,
                }),
                _ => {}
            }
        }
        // BEGIN, the settings, the statements, COMMIT.
        if answers.len() != statements.len() + 3 {
            return Err(Failure::Answer(format!(
                "{} statements answered of {}",
                answers.len(),
                statements.len() + 3
            )));
        }
        answers.pop();
        Ok(answers.drain(2..).collect())
    }

    /// Runs a script of statements (an install, see
    /// [`DatabaseHolder`](super::DatabaseHolder)) as one transaction,
    /// answers ignored; never twice unseen.
    pub(super) fn script(
        &mut self,
        target: &Target,
        timeout: Duration,
        script: &str,
    ) -> Result<(), Failure> {
        let sql = format!("{BEGIN};\n{script}\nCOMMIT");
        self.run(target, timeout, false, async |c| c.simple_query(&sql).await)
            .map(drop)
    }

    /// Opens a transaction block and rolls it back: a pooler in statement
    /// mode refuses the block (it hands each statement any server
    /// connection), and would break the lease's transactions as soon as one
    /// statement in them failed, so it is refused up front.
    pub(super) fn transaction_block(
        &mut self,
        target: &Target,
        timeout: Duration,
    ) -> Result<(), Failure> {
        // The block waits idle between the two round trips: a role's
        // `idle_in_transaction_session_timeout` must not end it there.
        let begin =
            format!("{BEGIN}; SELECT set_config('idle_in_transaction_session_timeout', '0', true)");
        self.run(target, timeout, true, async |c| {
            c.simple_query(&begin).await?;
            c.simple_query("ROLLBACK").await.map(drop)
        })
    }

    /// Runs `op` on the connection (connecting first if needed) within
    /// `timeout`, connection included, off any async caller's thread. A
    /// connection found closed or ended by the server while idle (the
    /// server restarted, the session was terminated: a `FATAL` error that
    /// the next request reads) is replaced once within the same deadline:
    /// a renewal, a raise or a read may run twice, and a commit that may
    /// have gone through without the standby is confirmed by the second
    /// one. Not with `rerun` false (the acquisition, the close): an
    /// operation that must not run twice unseen fails instead.
    fn run<T: Send>(
        &mut self,
        target: &Target,
        timeout: Duration,
        rerun: bool,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error> + Send + Sync,
    ) -> Result<T, Failure> {
        off_runtime(move || self.run_here(target, timeout, rerun, op))
    }

    fn run_here<T>(
        &mut self,
        target: &Target,
        timeout: Duration,
        rerun: bool,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, Failure> {
        let timeout = timeout.max(Duration::from_millis(1));
        let Conn { rt, session } = self;
        let rt = rt
            .as_ref()
            .expect("the runtime lives as long as the connection");
        let result = rt.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            tokio::time::timeout_at(deadline, async {
                if let Some(s) = session.as_mut() {
                    s.notices.take();
                    match op(&mut s.client).await {
                        Err(e) if rerun && ended(&e) => *session = None,
                        done => return done.map(|v| (v, s.notices.take())),
                    }
                }
                let (client, notices, task) = target.connect(deadline).await?;
                let s = session.insert(Session {
                    client,
                    notices,
                    task,
                });
                let value = op(&mut s.client).await?;
                Ok((value, s.notices.take()))
            })
            .await
        });
        match result {
            Ok(Ok((value, notices))) => match notices.iter().find(|n| is_cancelled_sync_wait(n)) {
                None => Ok(value),
                Some(notice) => Err(Failure::Unreplicated(format!(
                    "{}: {}",
                    notice.message(),
                    notice.detail().unwrap_or("")
                ))),
            },
            Ok(Err(e)) => {
                // An error inside a transaction leaves it to roll back on
                // the server; a fresh connection starts clean.
                end(rt, session);
                Err(Failure::Db(e))
            }
            Err(_) => {
                end(rt, session);
                Err(Failure::Timeout(timeout))
            }
        }
    }
}

/// The session is over: closed, or ended by the server (`FATAL`, as
/// `pg_terminate_backend` and a restart send).
fn ended(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error().is_some_and(|db| {
            matches!(
                db.parsed_severity(),
                Some(Severity::Fatal | Severity::Panic)
            )
        })
}

/// PostgreSQL's warning that a commit did not wait for the synchronous
/// standby: SQLSTATE `01000`, "canceling wait for synchronous replication
/// ...", sent as a notice before the commit's normal completion.
fn is_cancelled_sync_wait(notice: &DbError) -> bool {
    notice.code() == &SqlState::WARNING && notice.message().contains("synchronous replication")
}

/// `text` as an SQL string literal that means the same whatever
/// `standard_conforming_strings` is (`E'...'`, with `\` and `'` escaped).
pub(super) fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// A column's text as a number, where the server's type is a number.
pub(super) fn number<T: std::str::FromStr>(
    cell: &Option<String>,
    what: &str,
) -> Result<Option<T>, Failure> {
    match cell {
        None => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|_| Failure::Answer(format!("{what} = {text:?} is not a number"))),
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.task.abort();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_that_say_not_now_are_told_from_those_that_say_never() {
        for code in [
            "40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03", "53300", "08006",
            "08P01", "25006",
        ] {
            assert!(passing_state(code), "{code}");
        }
        // A refused login, a missing database, table or function, a
        // syntax error, a unique violation.
        for code in [
            "28P01", "28000", "3D000", "42P01", "42883", "42601", "23505",
        ] {
            assert!(!passing_state(code), "{code}");
        }
        assert!(Failure::Timeout(Duration::from_secs(2)).may_pass());
        assert!(Failure::Unreplicated(String::new()).may_pass());
        assert!(!Failure::Answer(String::new()).may_pass());
    }
}
