//! Reaching Redis: the client, connections whose every round trip has a
//! deadline, and the check at open of what the server is set up to keep
//! (read and judged in `setup.rs`).

use std::time::{Duration, Instant};

use ::redis::{Client, Connection};

use super::setup::{self, Setup};
use super::ENGINE;
use idutil_lease::LeaseResult as Result;
use idutil_lease::{LeaseConfig, LeaseError};

pub(super) fn fail<'a>(
    action: &'static str,
    config: &'a LeaseConfig,
) -> impl Fn(::redis::RedisError) -> LeaseError + 'a {
    move |e| LeaseError::store(ENGINE, action, config.get_url(), e)
}

/// A client for the URL `config` names (its `replication=` option, which
/// the client ignores, checked too).
pub(super) fn client(config: &LeaseConfig) -> Result<Client> {
    setup::strict(config)?;
    if config
        .get_url()
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("rediss://")
    {
        return Err(LeaseError::invalid_config(
            "rediss:// (Redis over TLS) is not supported by this build of idutil: reach the \
             server through a local TLS tunnel (stunnel, spiped) on a loopback redis:// URL, \
             or lease from PostgreSQL, which speaks TLS (sslmode=verify-full)",
        ));
    }
    Client::open(config.get_url()).map_err(fail("connect to", config))
}

/// Opens a connection within `timeout`, and bounds its every round trip
/// by `timeout`. Setting a connection up (its first pipeline) can wait out
/// the timeout it is given twice against a server that accepts and never
/// answers, so it is given half.
pub(super) fn connection(client: &Client, timeout: Duration) -> ::redis::RedisResult<Connection> {
    let timeout = timeout.max(Duration::from_millis(2));
    let conn = client.get_connection_with_timeout(timeout / 2)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// Runs `f` on `slot`'s connection (opening one if needed) within
/// `timeout`, connecting included; drops the connection after any error,
/// since a reply that arrives late would answer the next command.
pub(super) fn with_conn<T>(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
    f: impl FnOnce(&mut Connection) -> ::redis::RedisResult<T>,
) -> ::redis::RedisResult<T> {
    let timeout = timeout.max(Duration::from_millis(1));
    let deadline = Instant::now() + timeout;
    let conn = match slot {
        Some(conn) => conn,
        None => slot.insert(connection(client, timeout)?),
    };
    // Connecting and the call together stay within `timeout`.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    if let Err(e) = conn
        .set_read_timeout(Some(left))
        .and_then(|()| conn.set_write_timeout(Some(left)))
    {
        *slot = None;
        return Err(e);
    }
    let result = f(conn);
    if result.is_err() {
        *slot = None;
    }
    result
}

/// As [`with_conn`], for a held lease's writes, each of which may run twice
/// (raising a mark, restoring it, recording the last ID, the first use's
/// record): if the connection opened by an earlier call turns out to be
/// closed (Redis restarted, or dropped the client), `f` runs once more on a
/// new connection within what is left of `timeout`, so that a restart of
/// the server costs no caller an error. A timeout is not retried, nor is
/// a renewal (its thread tries again on its own schedule).
pub(super) fn with_conn_again<T>(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
    mut f: impl FnMut(&mut Connection) -> ::redis::RedisResult<T>,
) -> ::redis::RedisResult<T> {
    let start = Instant::now();
    let reused = slot.is_some();
    match with_conn(client, slot, timeout, &mut f) {
        Err(e) if reused && e.is_connection_dropped() => {
            match timeout.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => with_conn(client, slot, left, f),
                _ => Err(e),
            }
        }
        done => done,
    }
}

/// Reads the server's setup at open, its replicas asked for replicas of
/// their own: refuses what the lease cannot keep its promise on
/// ([`Setup::refusal`]; under the strict rule, a replica it cannot ask),
/// and warns about the rest ([`Setup::cautions`]). Returns how many
/// replicas the server has.
pub(super) fn check_server(
    config: &LeaseConfig,
    client: &Client,
    conn: &mut Connection,
) -> ::redis::RedisResult<Result<i64>> {
    let strict = match setup::strict(config) {
        Ok(strict) => strict,
        Err(e) => return Ok(Err(e)),
    };
    let mut setup = Setup::read(conn)?;
    setup.ask_replicas(client.get_connection_info(), config.op_timeout());
    if let Some(e) = setup.refusal(config) {
        return Ok(Err(e));
    }
    let (warnings, refused) = setup.cautions(strict);
    if let Some(reason) = refused {
        return Ok(Err(LeaseError::unsafe_store(config.url_redacted(), reason)));
    }
    for warning in warnings {
        log::warn!("the Redis lease at {}: {warning}", config.url_redacted());
    }
    Ok(Ok(i64::try_from(setup.replicas.len()).unwrap_or(i64::MAX)))
}

/// How many replicas are connected to the server.
pub(super) fn replicas(conn: &mut Connection) -> ::redis::RedisResult<i64> {
    let info: String = ::redis::cmd("INFO").arg("replication").query(conn)?;
    Ok(i64::from(setup::connected(&info)))
}
