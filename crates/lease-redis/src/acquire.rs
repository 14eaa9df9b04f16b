//! Leasing a shard from Redis: the server's setup checked, then one script
//! takes the first free shard of the range and reads its record; a shard
//! whose history is unknown (no record, or one written before Redis last
//! started) waits a TTL, then starts past what a holder can have issued.

use std::sync::atomic::AtomicI64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::{check_server, client, fail, with_conn};
use super::held::{RedisLease, Unknown};
use super::scripts::ACQUIRE;
use super::{key, millis};
use crate::clock::Clock;
use idutil_lease::interface::{Ask, Grant, Held};
use idutil_lease::record::RawRecord;
use idutil_lease::LeaseError;
use idutil_lease::LeaseResult as Result;

/// Takes the first free shard of the range and reads its record; settles
/// (after one TTL) a shard whose history is unknown.
pub(super) fn connect(ask: &Ask<'_>, time: &dyn Clock) -> Result<(Box<dyn Held>, Grant)> {
    let config = ask.config;
    let client = client(config)?;
    let mut conn = None;
    let replicas = with_conn(&client, &mut conn, config.op_timeout(), |c| {
        check_server(config, &client, c)
    })
    .map_err(fail("connect to", config))??;
    type Granted = (
        u32,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        u64,
        u64,
        u8,
    );
    let sent = Instant::now();
    let granted: Option<Granted> = with_conn(&client, &mut conn, config.op_timeout(), |c| {
        let mut call = ACQUIRE.prepare_invoke();
        call.arg(config.get_prefix())
            .arg(ask.range.start())
            .arg(ask.range.end())
            .arg(ask.token)
            .arg(millis(config.get_ttl()));
        for s in ask.skip {
            call.arg(s);
        }
        call.invoke(c)
    })
    .map_err(fail("lease a shard from", config))?;
    let answered = Instant::now();
    let Some((shard, kind, high_water, last, seen, recorded, secs, micros, current)) = granted
    else {
        return Err(LeaseError::no_free_shard(&ask.range, config.get_prefix()));
    };
    let lease = RedisLease {
        config: config.clone(),
        client,
        shard,
        token: ask.token.to_string(),
        layout: ask.layout.fingerprint(),
        conn: Mutex::new(conn),
        renew_conn: Mutex::new(None),
        replicas: AtomicI64::new(replicas),
    };
    let mark_key = key(config, "mark", shard);
    let settle = |unknown| match lease.wait_and_settle(ask.layout, time.now(), sent, unknown) {
        Ok((record, at)) => Ok((Ok(record), at)),
        // A record found garbled meanwhile: the shard is given back and
        // skipped (or refused), as one found so at once.
        Err(e @ (LeaseError::InvalidRecord { .. } | LeaseError::LayoutMismatch { .. })) => {
            Ok((Err(e), sent))
        }
        Err(e) => {
            let _ = lease.finish(None, 0);
            Err(e)
        }
    };
    let (record, at) = match kind.as_str() {
        "none" => settle(Unknown::NoRecord)?,
        "hash" => {
            let raw = RawRecord {
                high_water,
                last,
                seen,
                layout: recorded,
            };
            match lease.check_record(&raw, ask.layout) {
                // Not confirmed since Redis last started: what it holds
                // may be older than what its holders issued.
                Ok(_) if current != 1 => settle(Unknown::Restarted)?,
                read => (read, sent),
            }
        }
        other => (
            Err(LeaseError::invalid_record(
                shard,
                mark_key,
                "high_water",
                format!("cannot be read: the key holds a {other}, not a hash"),
            )),
            sent,
        ),
    };
    // Redis's clock now (when it granted, moved on by the time since, which
    // includes a first use's wait): the first raise, before any renewal,
    // is checked against it too.
    let server_time =
        Duration::from_secs(secs) + Duration::from_micros(micros) + answered.elapsed();
    let grant = Grant {
        shard,
        record,
        at,
        server_time: Some(server_time),
    };
    Ok((Box::new(lease), grant))
}
