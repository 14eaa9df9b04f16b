//! The Redis engine (feature `redis`): a lease on a free shard in Redis,
//! for the deployments where Redis keeps what it acknowledged.
//!
//! # Which deployments keep the promise
//!
//! Redis acknowledges writes it can later lose: an append-only file synced
//! once a second, asynchronous replication, eviction under memory
//! pressure. A lost raise of a shard's mark lets the next holder re-issue
//! IDs. The lease keeps its promise on:
//!
//! - **one primary**, with `appendonly yes` and **`appendfsync always`**;
//! - **`maxmemory-policy noeviction`** (or no `maxmemory`): a server that
//!   may evict keys is refused at open with
//!   [`LeaseError::UnsafeStore`], and checked again at every renewal: a
//!   policy switched on later stops the holder for good with that error;
//!   where `CONFIG GET` is not allowed, a warning at open says the policy
//!   could not be checked;
//! - **no automatic failover**, or replicas that every raise waits for: when
//!   the server has replicas, every raise of the mark is followed by
//!   `WAIT` for all of them (the most the server has had while this holder
//!   held the shard), and a raise that they do not all confirm within the
//!   round-trip timeout is not used ([`LeaseError::NotReplicated`]); a
//!   replica that goes away stops the holder from raising further.
//!
//! For anything else (Sentinel or managed failover, Redis as a cache, a
//! fleet that must survive losing its store), use the
//! [PostgreSQL engine](crate::lease::postgres). Redis Cluster is not
//! supported (the acquisition script reads the keys of every shard).
//!
//! # Keys
//!
//! Two keys per shard live under the ID space's name
//! ([`LeaseConfig::prefix`], `idutil` by default):
//!
//! - `{prefix}:lease:{shard}`: the lease, a string holding the holder's
//!   token (`host:pid:nanos:n`), with a TTL. Taken with `SET NX`, renewed and
//!   deleted only by scripts that check the token.
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted, created
//!   once by the first holder of the shard (after waiting one TTL, below);
//!   a holder that finds it gone or lowered restores its own mark before
//!   it stops ([the rule](crate::lease)): `high_water` (no
//!   ID on the shard has a later Unix second; only ever raised), `last`
//!   (`"second sequence"`, the exact last ID after a clean close, until the
//!   next holder reserves), `seen` (the highest wall-clock second a holder
//!   saw) and `layout` (the layout's fingerprint).
//!
//! Every step is one Lua script, atomic on the server. The acquisition and
//! renewals also read the server's clock (`TIME`) for the skew check, so a
//! holder's very first raise is checked against Redis's clock too.
//!
//! # A record is created once, after one TTL
//!
//! Redis cannot tell a shard never used from one whose record it lost (a
//! flush, a restart without persistence). So the first generator on a shard
//! that has no record holds the lease, renewing it, for one whole TTL
//! before it creates the record (with its clock's second as the mark) and
//! issues its first ID: by then a holder whose record vanished under it
//! has stopped. IDs that holder borrowed beyond the new holder's clock are
//! not covered: persistence is what keeps a restart from being a flush.
//!
//! # TLS
//!
//! `rediss://` URLs are refused with a message: this build talks plain
//! Redis protocol. Reach a TLS-only server through a local tunnel (stunnel,
//! spiped) on a loopback `redis://` URL, or use the PostgreSQL engine.

mod conn;
mod engine;
mod first_use;
mod inspect;
mod scripts;

use std::sync::atomic::AtomicI64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::redis::{Client, Connection};

use super::record::{read_record, RawRecord, Record};
use super::{Ask, Engine, Grant, LeaseConfig, LeaseError};
use crate::error::Result;
use crate::layout::Layout;
use conn::{check_server, client, fail, with_conn};
pub(crate) use inspect::inspect;
use scripts::ACQUIRE;

const ENGINE: &str = "Redis";

/// Whole milliseconds, at least 1: a TTL or a wait as Redis takes it.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A shard held in Redis.
struct RedisLease {
    config: LeaseConfig,
    client: Client,
    shard: u32,
    token: String,
    layout: String,
    /// For raises and the close.
    conn: Mutex<Option<Connection>>,
    /// The renewal thread's own, so a slow write never delays a renewal.
    renew_conn: Mutex<Option<Connection>>,
    /// The most replicas the server has had since the shard was leased:
    /// every raise waits for that many.
    replicas: AtomicI64,
}

pub(crate) fn key(config: &LeaseConfig, kind: &str, shard: u32) -> String {
    format!("{}:{kind}:{shard}", config.prefix)
}

/// Takes the first free shard of the range and reads its record; creates
/// the record (after one TTL) for a shard that has none.
pub(super) fn connect(ask: &Ask<'_>) -> Result<(Box<dyn Engine>, Grant)> {
    let config = ask.config;
    let client = client(config)?;
    let mut conn = None;
    let replicas = with_conn(&client, &mut conn, config.op_timeout(), |c| {
        Ok(check_server(config, c))
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
    );
    let sent = Instant::now();
    let granted: Option<Granted> = with_conn(&client, &mut conn, config.op_timeout(), |c| {
        let mut call = ACQUIRE.prepare_invoke();
        call.arg(&config.prefix)
            .arg(ask.range.start())
            .arg(ask.range.end())
            .arg(ask.token)
            .arg(millis(config.ttl));
        for s in ask.skip {
            call.arg(s);
        }
        call.invoke(c)
    })
    .map_err(fail("lease a shard from", config))?;
    let answered = Instant::now();
    let Some((shard, kind, high_water, last, seen, recorded, secs, micros)) = granted else {
        return Err(LeaseError::no_free_shard(&ask.range, &config.prefix).into());
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
    let (record, at) = match kind.as_str() {
        "none" => match lease.wait_and_create(ask.layout, ask.time.now(), sent) {
            Ok((record, at)) => (Ok(record), at),
            Err(e) => {
                let _ = lease.finish(None, 0);
                return Err(e.into());
            }
        },
        "hash" => {
            let raw = RawRecord {
                high_water,
                last,
                seen,
                layout: recorded,
            };
            (lease.check_record(&raw, ask.layout), sent)
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

impl RedisLease {
    fn check_record(&self, raw: &RawRecord, layout: &Layout) -> Result<Record, LeaseError> {
        let shard = self.shard;
        if let Some(recorded) = raw.layout.as_ref().filter(|r| **r != self.layout) {
            return Err(LeaseError::layout_mismatch(
                shard,
                &self.config.prefix,
                recorded,
                &self.layout,
            ));
        }
        let (record, problems) = read_record(raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(LeaseError::invalid_record(
                shard,
                key(&self.config, "mark", shard),
                field,
                reason,
            )),
            None => Ok(record),
        }
    }
}
