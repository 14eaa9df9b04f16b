//! The notices a PostgreSQL lease connection's server sends, kept for the
//! statement they came with.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::error::DbError;
use tokio_postgres::{AsyncMessage, Connection};

/// The notices a connection's server sent, kept by the task that drives
/// the connection until the caller takes them. `tokio-postgres` hands
/// notices only to a connection driven with `poll_message` (driven as a
/// plain future it logs and drops them), and it delivers a notice before
/// the messages that follow it, so a statement's notices are here when the
/// statement's answer is.
#[derive(Clone, Default)]
pub(super) struct Notices(Arc<Mutex<Vec<DbError>>>);

impl Notices {
    pub(super) fn take(&self) -> Vec<DbError> {
        std::mem::take(&mut *crate::sync::lock(&self.0))
    }

    /// Drives `connection` until it closes, keeping its notices.
    pub(super) async fn drive<S, T>(self, mut connection: Connection<S, T>)
    where
        S: AsyncRead + AsyncWrite + Unpin,
        T: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    log::debug!(
                        "PostgreSQL lease connection: {}: {}",
                        notice.severity(),
                        notice.message()
                    );
                    crate::sync::lock(&self.0).push(notice);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    log::debug!("PostgreSQL lease connection closed: {e}");
                    return;
                }
                None => return,
            }
        }
    }
}
