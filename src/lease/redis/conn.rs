//! Reaching Redis: the client, connections whose every round trip has a
//! deadline, and what the server is set up to keep.

use std::time::{Duration, Instant};

use ::redis::{Client, Connection};

use super::ENGINE;
use crate::lease::LeaseResult as Result;
use crate::lease::{LeaseConfig, LeaseError};

pub(super) fn fail<'a>(
    action: &'static str,
    config: &'a LeaseConfig,
) -> impl Fn(::redis::RedisError) -> LeaseError + 'a {
    move |e| LeaseError::store(ENGINE, action, &config.url, e)
}

pub(super) fn client(config: &LeaseConfig) -> Result<Client> {
    if config
        .url
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
    Client::open(config.url.as_str()).map_err(fail("connect to", config))
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

/// Refuses a server that may evict the lease's keys; warns when it cannot
/// tell. Returns how many replicas the server has.
pub(super) fn check_server(config: &LeaseConfig, conn: &mut Connection) -> Result<i64> {
    match evicting(config, conn) {
        Ok(Some(e)) => return Err(e),
        Ok(None) => {}
        Err(e) => log::warn!(
            "cannot read the eviction policy of Redis at {} ({e}); the lease is safe only \
             if it is noeviction (or maxmemory is 0)",
            config.url_redacted()
        ),
    }
    replicas(conn).map_err(fail("read the replication state of", config))
}

/// Whether the server may evict the lease's keys (a `maxmemory` limit with
/// a `maxmemory-policy` other than `noeviction`): `Some` names the setting
/// and what to change. Checked at open and at every renewal, so a policy
/// switched on later stops the holders.
pub(super) fn evicting(
    config: &LeaseConfig,
    conn: &mut Connection,
) -> ::redis::RedisResult<Option<LeaseError>> {
    let (policy, maxmemory): (Vec<String>, Vec<String>) = ::redis::pipe()
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(conn)?;
    let policy = policy.get(1).map(String::as_str).unwrap_or("noeviction");
    let limited = maxmemory.get(1).is_some_and(|m| m != "0");
    Ok(
        (limited && policy != "noeviction").then(|| LeaseError::UnsafeStore {
            url: config.url_redacted(),
            reason: format!(
                "maxmemory-policy is {policy} with a maxmemory limit, so Redis may evict the \
             shards' records and IDs would be issued twice; set maxmemory-policy noeviction \
             (or use a Redis of its own for the lease, or the PostgreSQL lease)"
            ),
        }),
    )
}

/// How many replicas are connected to the server.
pub(super) fn replicas(conn: &mut Connection) -> ::redis::RedisResult<i64> {
    let info: String = ::redis::cmd("INFO").arg("replication").query(conn)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

pub(super) fn replicas_of(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
) -> ::redis::RedisResult<i64> {
    with_conn(client, slot, timeout, replicas)
}
