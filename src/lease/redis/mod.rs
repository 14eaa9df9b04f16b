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
//!   [`LeaseError::UnsafeStore`]; where `CONFIG GET` is not allowed, a
//!   warning says the policy could not be checked;
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
//! Two keys per shard live under the key prefix (`idutil` by default):
//!
//! - `{prefix}:lease:{shard}`: the lease, a string holding the holder's
//!   token (`host:pid:nanos:n`), with a TTL. Taken with `SET NX`, renewed and
//!   deleted only by scripts that check the token.
//! - `{prefix}:mark:{shard}`: a hash without a TTL, never deleted, created
//!   once by the first holder of the shard (after waiting one TTL, below)
//!   and never re-created by a holder that finds it gone: `high_water` (no
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

mod inspect;
mod scripts;

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ::redis::{Client, Connection, Value};

use super::record::{read_record, RawRecord, Record};
use super::{millis, Ask, Engine, Grant, LeaseConfig, LeaseError, Renewed, Trouble};
use crate::error::Result;
use crate::layout::Layout;
pub(crate) use inspect::inspect;
use scripts::{record_trouble, ACQUIRE, CREATE, FINISH, HOLD, RAISE, RELEASE, RENEW};

const ENGINE: &str = "Redis";

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

fn fail<'a>(
    action: &'static str,
    config: &'a LeaseConfig,
) -> impl Fn(::redis::RedisError) -> LeaseError + 'a {
    move |e| LeaseError::store(ENGINE, action, &config.url, e)
}

pub(crate) fn key(config: &LeaseConfig, kind: &str, shard: u32) -> String {
    format!("{}:{kind}:{shard}", config.prefix)
}

pub(crate) fn client(config: &LeaseConfig) -> Result<Client> {
    if config
        .url
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("rediss://")
    {
        return Err(LeaseError::InvalidConfig {
            reason: "rediss:// (Redis over TLS) is not supported by this build of idutil: \
                     reach the server through a local TLS tunnel (stunnel, spiped) on a \
                     loopback redis:// URL, or lease from PostgreSQL, which speaks TLS \
                     (sslmode=verify-full)"
                .to_string(),
        }
        .into());
    }
    Client::open(config.url.as_str()).map_err(|e| fail("connect to", config)(e).into())
}

/// Opens a connection whose every round trip is bounded by `timeout`.
pub(crate) fn connection(client: &Client, timeout: Duration) -> ::redis::RedisResult<Connection> {
    let timeout = timeout.max(Duration::from_millis(1));
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// Runs `f` on `slot`'s connection (opening one if needed) with round trips
/// bounded by `timeout`; drops the connection after any error, since a reply
/// that arrives late would answer the next command.
fn with_conn<T>(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
    f: impl FnOnce(&mut Connection) -> ::redis::RedisResult<T>,
) -> ::redis::RedisResult<T> {
    let timeout = timeout.max(Duration::from_millis(1));
    let conn = match slot {
        Some(conn) => {
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            conn
        }
        None => slot.insert(connection(client, timeout)?),
    };
    let result = f(conn);
    if result.is_err() {
        *slot = None;
    }
    result
}

/// Refuses a server that may evict the lease's keys; warns when it cannot
/// tell. Returns how many replicas the server has.
fn check_server(config: &LeaseConfig, conn: &mut Connection) -> Result<i64> {
    let policy: ::redis::RedisResult<(Vec<String>, Vec<String>)> = ::redis::pipe()
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(conn);
    match policy {
        Ok((policy, maxmemory)) => {
            let policy = policy.get(1).map(String::as_str).unwrap_or("noeviction");
            let limited = maxmemory.get(1).is_some_and(|m| m != "0");
            if limited && policy != "noeviction" {
                return Err(LeaseError::UnsafeStore {
                    url: config.url_redacted(),
                    reason: format!(
                        "maxmemory-policy is {policy} with a maxmemory limit, so Redis may \
                         evict the shards' records and IDs would be issued twice; set \
                         maxmemory-policy noeviction (or use a Redis of its own for the \
                         lease, or the PostgreSQL lease)"
                    ),
                }
                .into());
            }
        }
        Err(e) => log::warn!(
            "cannot read the eviction policy of Redis at {} ({e}); the lease is safe only \
             if it is noeviction (or maxmemory is 0)",
            config.url_redacted()
        ),
    }
    replicas(conn).map_err(|e| fail("read the replication state of", config)(e).into())
}

/// How many replicas are connected to the server.
fn replicas(conn: &mut Connection) -> ::redis::RedisResult<i64> {
    let info: String = ::redis::cmd("INFO").arg("replication").query(conn)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
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
        return Err(LeaseError::NoFreeShard {
            first: *ask.range.start(),
            last: *ask.range.end(),
            prefix: config.prefix.clone(),
            skipped: Vec::new(),
        }
        .into());
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
            Err(LeaseError::InvalidRecord {
                shard,
                key: mark_key,
                field: "high_water",
                reason: format!("cannot be read: the key holds a {other}, not a hash"),
            }),
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
            return Err(LeaseError::LayoutMismatch {
                shard,
                prefix: self.config.prefix.clone(),
                recorded: recorded.clone(),
                ours: self.layout.clone(),
            });
        }
        let (record, problems) = read_record(raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(LeaseError::InvalidRecord {
                shard,
                key: key(&self.config, "mark", shard),
                field,
                reason,
            }),
            None => Ok(record),
        }
    }

    /// A shard without a record: either nobody used it under this prefix,
    /// or Redis lost the record under a holder that may still be issuing.
    /// That holder stops at its next renewal, and at the latest three
    /// quarters of a TTL after its last successful one, which came before
    /// this lease was granted. So the lease is held (renewed) for one whole
    /// TTL from `granted_at` before the record is created, with `now` (the
    /// generator's clock) as its high-water mark. Returns the record and
    /// when the lease was last renewed.
    fn wait_and_create(
        &self,
        layout: &Layout,
        now: u64,
        granted_at: Instant,
    ) -> Result<(Record, Instant), LeaseError> {
        let config = &self.config;
        let (lease_key, mark_key) = (
            key(config, "lease", self.shard),
            key(config, "mark", self.shard),
        );
        log::warn!(
            "shard {} has no record in Redis ({mark_key}): first use of the shard under this key \
             prefix, or Redis lost its data; waiting one lease TTL ({:?}) before the first ID \
             so that a holder that lost its record has stopped",
            self.shard,
            config.ttl
        );
        let lost = |reason: &str| LeaseError::Fenced {
            shard: self.shard,
            reason: format!("{reason} while waiting to create the shard's record"),
        };
        let appeared = || LeaseError::InvalidRecord {
            shard: self.shard,
            key: mark_key.clone(),
            field: "high_water",
            reason: "appeared while this generator held the lease and waited to create it: \
                     something else writes these keys"
                .to_string(),
        };
        let ready_at = granted_at + config.ttl;
        let mut slot = crate::sync::lock(&self.conn);
        let mut held_at = granted_at;
        loop {
            let now = Instant::now();
            if now >= ready_at {
                break;
            }
            thread::sleep(
                (held_at + config.renew_every())
                    .min(ready_at)
                    .saturating_duration_since(now),
            );
            if Instant::now() >= ready_at {
                break;
            }
            let sent = Instant::now();
            let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
                HOLD.key(&lease_key)
                    .key(&mark_key)
                    .arg(&self.token)
                    .arg(millis(config.ttl))
                    .invoke(c)
            })
            .map_err(fail("hold the leased shard in", config))?;
            match answer {
                1 => held_at = sent,
                2 => return Err(appeared()),
                _ => return Err(lost("the lease expired")),
            }
        }
        // Clamped into the layout's range, so the record is always valid; a
        // clock outside the range issues nothing anyway.
        let now = now.clamp(layout.epoch(), layout.last_unix_second());
        let sent = Instant::now();
        let answer: i64 = with_conn(&self.client, &mut slot, config.op_timeout(), |c| {
            CREATE
                .key(&lease_key)
                .key(&mark_key)
                .arg(&self.token)
                .arg(millis(config.ttl))
                .arg(now)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(fail("create the shard's record in", config))?;
        match answer {
            1 => {}
            2 => return Err(appeared()),
            _ => return Err(lost("the lease expired")),
        }
        let record = Record {
            high_water: Some(now),
            last: None,
            seen: Some(now),
        };
        Ok((record, sent))
    }

    /// After a raise: waits for every replica the server has had, if any.
    fn wait_replicas(&self, conn: &mut Connection) -> Result<(), Trouble> {
        let seen = replicas(conn).unwrap_or(0);
        let wanted = self.replicas.fetch_max(seen, Relaxed).max(seen);
        if wanted == 0 {
            return Ok(());
        }
        let confirmed: i64 = ::redis::cmd("WAIT")
            .arg(wanted)
            .arg(millis(self.config.op_timeout()))
            .query(conn)
            .map_err(|e| Trouble::Again(fail("wait for the replicas of", &self.config)(e)))?;
        if confirmed < wanted {
            return Err(Trouble::Again(LeaseError::NotReplicated {
                shard: self.shard,
                replicas: wanted,
                confirmed,
            }));
        }
        Ok(())
    }
}

impl Engine for RedisLease {
    fn renew(&self, known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
        let mut slot = crate::sync::lock(&self.renew_conn);
        let answer: Vec<Value> = with_conn(&self.client, &mut slot, timeout, |c| {
            RENEW
                .key(key(&self.config, "lease", self.shard))
                .key(key(&self.config, "mark", self.shard))
                .arg(&self.token)
                .arg(millis(self.config.ttl))
                .arg(known_mark)
                .arg(&self.layout)
                .invoke(c)
        })
        .map_err(|e| Trouble::Again(fail("renew the lease in", &self.config)(e)))?;
        let int = |i: usize| match answer.get(i) {
            Some(Value::Int(n)) => Some(*n),
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        };
        match int(0) {
            Some(1 | 2) => {}
            Some(0) => {
                return Err(Trouble::Lost(LeaseError::Lost {
                    shard: self.shard,
                    reason: "it expired in Redis and another generator took the shard, or \
                             reserved on it"
                        .to_string(),
                }))
            }
            Some(trouble) => {
                return Err(Trouble::Lost(record_trouble(
                    &self.config,
                    self.shard,
                    trouble,
                )))
            }
            None => {
                return Err(Trouble::Again(LeaseError::store(
                    ENGINE,
                    "renew the lease in",
                    &self.config.url,
                    std::io::Error::other("an answer this crate does not send"),
                )))
            }
        }
        let mark = int(1).and_then(|m| u64::try_from(m).ok());
        let server_time = match (int(2), int(3)) {
            (Some(s), Some(us)) => Some(
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(us).unwrap_or(0)),
            ),
            _ => None,
        };
        if let Ok(n) = replicas_of(&self.client, &mut slot, timeout) {
            self.replicas.fetch_max(n, Relaxed);
        }
        Ok(Renewed { mark, server_time })
    }

    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let mut slot = crate::sync::lock(&self.conn);
        let done: i64 = with_conn(&self.client, &mut slot, self.config.op_timeout(), |c| {
            RAISE
                .key(key(&self.config, "lease", self.shard))
                .key(key(&self.config, "mark", self.shard))
                .arg(&self.token)
                .arg(high_water)
                .arg(seen)
                .arg(&self.layout)
                .arg(known_mark)
                .invoke(c)
        })
        .map_err(|e| {
            Trouble::Again(fail(
                "record the high-water second of the leased shard in",
                &self.config,
            )(e))
        })?;
        match done {
            1 => {}
            0 => {
                return Err(Trouble::Again(LeaseError::Fenced {
                    shard: self.shard,
                    reason: "the lease expired in Redis before the reservation was recorded"
                        .to_string(),
                }))
            }
            trouble => {
                return Err(Trouble::Lost(record_trouble(
                    &self.config,
                    self.shard,
                    trouble,
                )))
            }
        }
        let conn = slot.as_mut().expect("the connection the raise used");
        let waited = self.wait_replicas(conn);
        if waited.is_err() {
            *slot = None;
        }
        waited
    }

    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble> {
        let mut slot = crate::sync::lock(&self.conn);
        let (lease_key, mark_key) = (
            key(&self.config, "lease", self.shard),
            key(&self.config, "mark", self.shard),
        );
        let answer: i64 =
            with_conn(
                &self.client,
                &mut slot,
                self.config.op_timeout(),
                |c| match last {
                    Some((sec, seq)) => FINISH
                        .key(&lease_key)
                        .key(&mark_key)
                        .arg(&self.token)
                        .arg(sec)
                        .arg(seq)
                        .arg(seen)
                        .arg(&self.layout)
                        .invoke(c),
                    None => RELEASE.key(&lease_key).arg(&self.token).invoke(c),
                },
            )
            .map_err(|e| Trouble::Again(fail("give back the lease in", &self.config)(e)))?;
        match answer {
            1 => Ok(()),
            0 if last.is_none() => Ok(()),
            0 => Err(Trouble::Lost(LeaseError::Lost {
                shard: self.shard,
                reason: "it was no longer held at close, so the exact last ID was not recorded"
                    .to_string(),
            })),
            trouble => Err(Trouble::Lost(record_trouble(
                &self.config,
                self.shard,
                trouble,
            ))),
        }
    }

    fn describe(&self) -> String {
        key(&self.config, "mark", self.shard)
    }
}

fn replicas_of(
    client: &Client,
    slot: &mut Option<Connection>,
    timeout: Duration,
) -> ::redis::RedisResult<i64> {
    with_conn(client, slot, timeout, replicas)
}
