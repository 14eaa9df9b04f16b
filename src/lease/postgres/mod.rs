//! The PostgreSQL engine (feature `postgres-lease`): shards leased from
//! the database the application already runs. The recommended engine.
//!
//! ```no_run
//! use idutil::{lease::LeaseConfig, Generator};
//!
//! let generator = Generator::builder()
//!     .lease(LeaseConfig::new("postgres://app@db.internal/app?sslmode=verify-full"))
//!     .open()?;
//! let id = generator.next_id()?;
//! # Ok::<(), idutil::Error>(())
//! ```
//!
//! Or without code: `IDUTIL_LEASE_URL=postgres://...` (which
//! [`IdUtil`](crate::IdUtil) reads), `idutil --lease postgres://... next`.
//!
//! # The table
//!
//! One table, `idutil_lease`, created on first use (`CREATE TABLE IF NOT
//! EXISTS`) in [`LeaseConfig::schema`], or else the first schema of the
//! connection's `search_path` (set it in the URL with
//! `options=-csearch_path%3Dmyschema`). One row per ID space
//! ([`LeaseConfig::prefix`]) and shard:
//!
//! | column | meaning |
//! |---|---|
//! | `space`, `shard` | the key |
//! | `layout` | the layout's fingerprint: one ID space is one layout, and a generator with another is refused |
//! | `holder` | the holder's token (`host:pid:nanos:n`), while leased |
//! | `epoch` | the **fencing epoch**: raised by every acquisition; every write of a holder is conditioned on its own |
//! | `expires_at` | when the lease expires, by the **server's clock** |
//! | `high_water` | no ID on the shard has a later Unix second; only ever raised; `NULL`: never used |
//! | `last_second`, `last_sequence` | the exact last ID after a clean close, until the next holder reserves |
//! | `seen` | the highest wall-clock second a holder saw |
//!
//! The rows of an ID space are created together, the first time a holder
//! finds none in its range (under an advisory lock, so two layouts cannot
//! mix); a row is never deleted. A row whose `high_water` is `NULL` is a
//! shard never used: with a database that keeps what it commits, there is
//! no first-use wait (Redis needs one). Acquiring a free shard is one
//! `UPDATE ... FOR UPDATE SKIP LOCKED` on an index of `(space,
//! expires_at)`, whatever the number of shards.
//!
//! # What it promises, and on which deployment
//!
//! - **A raise is committed before an ID past it is issued**, with
//!   `synchronous_commit` at least `on` for the lease's sessions whatever
//!   the database's default. With a **synchronous standby**
//!   (`synchronous_standby_names`), a committed raise is on the standby
//!   too, so a failover to it loses no mark, and an old primary cut off
//!   from its standby cannot commit: its holders can neither renew nor
//!   raise, and fence themselves within three quarters of the TTL while the
//!   promoted standby grants the shard to a new holder that resumes after
//!   every mark. **No duplicate through failover or split brain.**
//! - With an **asynchronous standby**, a failover can lose the last raises
//!   before it, as any asynchronous replica loses the last commits: a new
//!   holder on the promoted standby can re-issue IDs in the seconds the lost
//!   raises covered. Use a synchronous standby for a fleet that must
//!   survive failover (BENCHMARKS.md measures it).
//! - A single server: a mark committed is a mark kept (with `fsync` on),
//!   through crashes and restarts.
//! - The **server's clock** decides expiry, and every renewal compares it
//!   with this host's: beyond [`LeaseConfig::max_skew`] the holder stops
//!   issuing (see [the lease's rules](crate::lease)).
//!
//! # URLs, TLS and failover
//!
//! `postgres://user:password@host:port/db?option=value`, or libpq's
//! `key=value` form, as `tokio-postgres` reads them, plus libpq's TLS
//! options:
//!
//! - `sslmode=disable`, `prefer` (the default), `require` (encrypted, the
//!   certificate unchecked unless `sslrootcert` is given), `verify-ca`,
//!   `verify-full` (chain and host name: what managed databases advise);
//!   the system's root certificates, or `sslrootcert=/path/ca.pem`.
//! - Several hosts, `postgres://u@a:5432,b:5432/db?target_session_attrs=read-write`
//!   (or `host=a,b`): each connection goes to the first that accepts
//!   writes, so a fleet follows a failover to the promoted standby.
//!   `target_session_attrs=read-write` is implied, whatever the URL says
//!   (the lease only ever writes), and each host but the last gets its
//!   share of the round trip's deadline, so a host that drops packets or
//!   never answers does not keep a connection from the next.
//!
//! The client is `tokio-postgres` on a runtime of its own per connection,
//! on the calling thread, rather than the synchronous `postgres` crate: it
//! gives every round trip a deadline, so a renewal can never outlast the
//! fence. Opening a generator from async code is fine: the lease then
//! connects from a short-lived thread of its own.

mod conn;
mod inspect;
mod target;
mod tls;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_postgres::Row;

use super::record::{read_record, RawRecord, Record};
use super::{Ask, Engine, Grant, LeaseConfig, LeaseError, Renewed, Trouble};
use crate::error::Result;
use crate::layout::Layout;
use conn::{off_runtime, Conn, Failure};
pub(crate) use inspect::inspect;
use target::Target;

const ENGINE: &str = "PostgreSQL";
/// The table's name.
const TABLE: &str = "idutil_lease";
/// The advisory lock taken while the table or an ID space's rows are
/// created ("idut").
const LOCK_KEY: i64 = 0x6964_7574;
/// How many times an acquisition is tried before every shard counts as
/// leased.
const MAX_TRIES: u64 = 6;
/// A fencing epoch no acquisition can raise (a row rewritten by hand): the
/// shard is granted with it unchanged, read as invalid and given back.
const EPOCH_MAX: i64 = i64::MAX;
/// `undefined_table`: the table is not there yet.
const UNDEFINED_TABLE: &str = "42P01";

/// The table, qualified with the schema when one is set.
fn table(config: &LeaseConfig) -> String {
    match &config.schema {
        Some(schema) => format!("{}.{TABLE}", quote(schema)),
        None => TABLE.to_string(),
    }
}

/// An identifier, quoted.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The store's clock from `extract(epoch FROM clock_timestamp())`.
fn server_time(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// A shard held in PostgreSQL.
struct PgLease {
    config: LeaseConfig,
    target: Target,
    table: String,
    shard: u32,
    token: String,
    epoch: i64,
    layout: String,
    /// For raises and the close.
    conn: Mutex<Conn>,
    /// The renewal thread's own, so a slow write never delays a renewal.
    renew_conn: Mutex<Conn>,
}

/// Takes the first free shard of the range, creating the table and the ID
/// space's rows on first use.
pub(super) fn connect(ask: &Ask<'_>) -> Result<(Box<dyn Engine>, Grant)> {
    off_runtime(|| connect_here(ask))
}

fn connect_here(ask: &Ask<'_>) -> Result<(Box<dyn Engine>, Grant)> {
    let config = ask.config;
    let target = Target::parse(config)?;
    let table = table(config);
    let mut conn = Conn::open(config)?;
    let layout = ask.layout.fingerprint();
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    let (first, last) = (i64::from(*ask.range.start()), i64::from(*ask.range.end()));
    let skip: Vec<i64> = ask.skip.iter().map(|s| i64::from(*s)).collect();
    let acquire = format!(
        "UPDATE {table} AS t SET holder = $3, \
             epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int, \
             expires_at = clock_timestamp() + make_interval(secs => $4::float8) \
         FROM (SELECT shard FROM {table} \
               WHERE space = $1 AND layout = $2 AND shard BETWEEN $5::bigint AND $6::bigint \
                 AND shard <> ALL($7::bigint[]) AND expires_at <= clock_timestamp() \
               ORDER BY expires_at, shard LIMIT 1 FOR UPDATE SKIP LOCKED) AS free \
         WHERE t.space = $1 AND t.shard = free.shard \
         RETURNING t.shard, t.epoch, t.high_water, t.last_second, t.last_sequence, t.seen, \
             t.layout, extract(epoch FROM clock_timestamp())::float8"
    );
    let ttl = config.ttl.as_secs_f64();
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = Instant::now();
        let granted = conn.run(&target, timeout, async |c| {
            c.query_opt(
                &acquire,
                &[
                    &config.prefix,
                    &layout,
                    &ask.token,
                    &ttl,
                    &first,
                    &last,
                    &skip,
                ],
            )
            .await
        });
        let row = match granted {
            Ok(row) => row,
            Err(f) if f.code() == Some(UNDEFINED_TABLE) && tries < MAX_TRIES => {
                create_table(&mut conn, &target, config, &table, timeout)?;
                continue;
            }
            Err(f) => return Err(f.into_error("lease a shard from", config).into()),
        };
        if let Some(row) = row {
            return granted_row(ask, target, table, conn, &row, sent, layout);
        }
        // Nothing free: another layout's ID space, rows not created yet,
        // or every shard leased. Or a race: the row the statement chose was
        // taken by a concurrent acquisition after its snapshot, and
        // `LIMIT 1` then yields nothing rather than the next free row; a
        // new statement (a new snapshot) finds it.
        if prepare_space(&mut conn, &target, ask, &table, &layout, timeout)? {
            continue;
        }
        if tries >= MAX_TRIES {
            return Err(LeaseError::NoFreeShard {
                first: *ask.range.start(),
                last: *ask.range.end(),
                prefix: config.prefix.clone(),
                skipped: Vec::new(),
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(2 * tries));
    }
}

/// Creates the table and its index, once, under an advisory lock (two
/// `CREATE TABLE IF NOT EXISTS` at once can fail).
fn create_table(
    conn: &mut Conn,
    target: &Target,
    config: &LeaseConfig,
    table: &str,
    timeout: Duration,
) -> Result<()> {
    let index = quote(&format!("{TABLE}_free"));
    let sql = format!(
        "BEGIN; SET LOCAL lock_timeout = '{}ms'; SELECT pg_advisory_xact_lock({LOCK_KEY}); \
         CREATE TABLE IF NOT EXISTS {table} ( \
             space text NOT NULL, \
             shard bigint NOT NULL CHECK (shard >= 0), \
             layout text NOT NULL, \
             holder text, \
             epoch bigint NOT NULL DEFAULT 0, \
             expires_at timestamptz NOT NULL DEFAULT '-infinity', \
             high_water bigint, \
             last_second bigint, \
             last_sequence bigint, \
             seen bigint, \
             PRIMARY KEY (space, shard)); \
         CREATE INDEX IF NOT EXISTS {index} ON {table} (space, expires_at); \
         COMMIT;",
        timeout.as_millis()
    );
    conn.run(target, timeout, async |c| c.batch_execute(&sql).await)
        .map_err(|f| f.into_error("create the lease table in", config).into())
}

/// After an acquisition found nothing: refuses an ID space of another
/// layout, and creates the range's missing rows. `true` if rows were
/// created (so acquiring again may find one).
fn prepare_space(
    conn: &mut Conn,
    target: &Target,
    ask: &Ask<'_>,
    table: &str,
    layout: &str,
    timeout: Duration,
) -> Result<bool> {
    let config = ask.config;
    let (first, last) = (i64::from(*ask.range.start()), i64::from(*ask.range.end()));
    let other = format!(
        "SELECT shard, layout FROM {table} WHERE space = $1 AND layout <> $2 \
         ORDER BY shard LIMIT 1"
    );
    let insert = format!(
        "INSERT INTO {table} (space, shard, layout) \
         SELECT $1, s, $2 FROM generate_series($3::bigint, $4::bigint) AS s \
         ON CONFLICT DO NOTHING"
    );
    let outcome = conn.run(target, timeout, async |c| {
        let tx = c.transaction().await?;
        // Creators of one ID space queue here for as long as this call may
        // take, not only the lease's shorter lock timeout.
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{}ms'",
            timeout.as_millis()
        ))
        .await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))",
            &[&(LOCK_KEY as i32), &config.prefix],
        )
        .await?;
        if let Some(row) = tx.query_opt(&other, &[&config.prefix, &layout]).await? {
            return Ok(Err((row.get::<_, i64>(0), row.get::<_, String>(1))));
        }
        let added = tx
            .execute(&insert, &[&config.prefix, &layout, &first, &last])
            .await?;
        tx.commit().await?;
        Ok(Ok(added))
    });
    match outcome {
        Ok(Ok(added)) => {
            if added > 0 {
                log::info!(
                    "created the rows of shards {first}..={last} of ID space {:?} in {table}",
                    config.prefix
                );
            }
            Ok(added > 0)
        }
        Ok(Err((shard, recorded))) => Err(LeaseError::LayoutMismatch {
            shard: u32::try_from(shard).unwrap_or(u32::MAX),
            prefix: config.prefix.clone(),
            recorded,
            ours: layout.to_string(),
        }
        .into()),
        Err(f) => Err(f.into_error("prepare the lease rows in", config).into()),
    }
}

/// The lease and its record from the acquiring statement's row.
fn granted_row(
    ask: &Ask<'_>,
    target: Target,
    table: String,
    conn: Conn,
    row: &Row,
    sent: Instant,
    layout: String,
) -> Result<(Box<dyn Engine>, Grant)> {
    let config = ask.config;
    let shard = u32::try_from(row.get::<_, i64>(0)).unwrap_or(u32::MAX);
    let lease = PgLease {
        config: config.clone(),
        target,
        table,
        shard,
        token: ask.token.to_string(),
        epoch: row.get(1),
        layout,
        conn: Mutex::new(conn),
        renew_conn: Mutex::new(Conn::open(config)?),
    };
    let record = lease.read(row, ask.layout);
    let grant = Grant {
        shard,
        record,
        at: sent,
        server_time: server_time(row.get(7)),
    };
    Ok((Box::new(lease), grant))
}

/// A row's record columns as the strict reader takes them: `Ok(None)` for
/// a shard never used (`high_water` NULL and nothing else set), `Err` for
/// columns that cannot go together. The engine and `inspect` both read rows
/// through it, so they never disagree on what is valid.
pub(super) fn raw_record(
    high_water: Option<i64>,
    last: (Option<i64>, Option<i64>),
    seen: Option<i64>,
    layout: String,
) -> Result<Option<RawRecord>, (&'static str, &'static str)> {
    if high_water.is_none() {
        if last != (None, None) || seen.is_some() {
            return Err((
                "high_water",
                "is NULL while last_second, last_sequence or seen is set",
            ));
        }
        return Ok(None);
    }
    let last = match last {
        (Some(sec), Some(seq)) => Some(format!("{sec} {seq}")),
        (None, None) => None,
        _ => return Err(("last", "has only one of last_second and last_sequence")),
    };
    Ok(Some(RawRecord {
        high_water: high_water.map(|v| v.to_string()),
        last,
        seen: seen.map(|v| v.to_string()),
        layout: Some(layout),
    }))
}

impl PgLease {
    /// The row's record, read strictly (columns 2 to 6: high_water,
    /// last_second, last_sequence, seen, layout).
    fn read(&self, row: &Row, layout: &Layout) -> Result<Record, LeaseError> {
        let high_water: Option<i64> = row.get(2);
        let last = (row.get(3), row.get(4));
        let seen: Option<i64> = row.get(5);
        let recorded: String = row.get(6);
        let invalid = |field, reason: &str| LeaseError::InvalidRecord {
            shard: self.shard,
            key: self.describe(),
            field,
            reason: reason.to_string(),
        };
        if self.epoch == EPOCH_MAX {
            return Err(invalid(
                "epoch",
                "is the largest bigint, which no acquisition can raise, so holders could not \
                 be told apart (set it to 0 while no generator holds the shard)",
            ));
        }
        if recorded != self.layout {
            return Err(LeaseError::LayoutMismatch {
                shard: self.shard,
                prefix: self.config.prefix.clone(),
                recorded: recorded.clone(),
                ours: self.layout.clone(),
            });
        }
        let Some(raw) = raw_record(high_water, last, seen, recorded)
            .map_err(|(field, reason)| invalid(field, reason))?
        else {
            return Ok(Record::default());
        };
        let (record, problems) = read_record(&raw, layout);
        match problems.into_iter().next() {
            Some((field, reason)) => Err(invalid(field, &reason)),
            None => Ok(record),
        }
    }

    fn key_args(&self) -> (String, i64, i64, String) {
        (
            self.config.prefix.clone(),
            i64::from(self.shard),
            self.epoch,
            self.token.clone(),
        )
    }

    /// A conditional write changed no row: why.
    fn gone(&self, conn: &mut Conn, timeout: Duration, known_mark: i64) -> Trouble {
        let sql = format!(
            "SELECT epoch, holder, COALESCE(high_water, 0) FROM {} \
             WHERE space = $1 AND shard = $2::bigint",
            self.table
        );
        let found = conn.run(&self.target, timeout, async |c| {
            c.query_opt(&sql, &[&self.config.prefix, &i64::from(self.shard)])
                .await
        });
        match found {
            Ok(None) => Trouble::Lost(LeaseError::RecordLost {
                shard: self.shard,
                key: self.describe(),
            }),
            Ok(Some(row))
                if row.get::<_, i64>(0) == self.epoch
                    && row.get::<_, Option<String>>(1).as_deref() == Some(&self.token)
                    && row.get::<_, i64>(2) < known_mark =>
            {
                Trouble::Lost(LeaseError::mark_lowered(self.shard, &self.describe()))
            }
            Ok(Some(row)) => {
                let epoch: i64 = row.get(0);
                Trouble::Lost(LeaseError::Lost {
                    shard: self.shard,
                    reason: if epoch != self.epoch {
                        format!(
                            "its fencing epoch moved from {} to {epoch}: another generator \
                             leased the shard",
                            self.epoch
                        )
                    } else {
                        "the row's holder was rewritten".to_string()
                    },
                })
            }
            Err(f) => Trouble::Again(f.into_error("check the lease in", &self.config)),
        }
    }
}

impl Engine for PgLease {
    fn renew(&self, _known_mark: u64, timeout: Duration) -> Result<Renewed, Trouble> {
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() + make_interval(secs => $5::float8) \
             WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4 \
             RETURNING high_water, layout, extract(epoch FROM clock_timestamp())::float8",
            self.table
        );
        let (space, shard, epoch, token) = self.key_args();
        let ttl = self.config.ttl.as_secs_f64();
        let mut conn = crate::sync::lock(&self.renew_conn);
        let row = conn
            .run(&self.target, timeout, async |c| {
                c.query_opt(&sql, &[&space, &shard, &epoch, &token, &ttl])
                    .await
            })
            .map_err(|f| Trouble::Again(f.into_error("renew the lease in", &self.config)))?;
        let Some(row) = row else {
            return Err(self.gone(&mut conn, timeout, 0));
        };
        if row.get::<_, String>(1) != self.layout {
            return Err(Trouble::Lost(LeaseError::InvalidRecord {
                shard: self.shard,
                key: self.describe(),
                field: "layout",
                reason: "was changed while this generator held the shard".to_string(),
            }));
        }
        Ok(Renewed {
            mark: row
                .get::<_, Option<i64>>(0)
                .map(|m| u64::try_from(m).unwrap_or(0)),
            server_time: server_time(row.get(2)),
        })
    }

    fn raise(&self, high_water: u64, seen: u64, known_mark: u64) -> Result<(), Trouble> {
        let sql = format!(
            "UPDATE {} SET high_water = GREATEST(COALESCE(high_water, 0), $5::bigint), \
                 seen = CASE WHEN $6::bigint > 0 THEN GREATEST(COALESCE(seen, 0), $6::bigint) ELSE seen END, \
                 last_second = NULL, last_sequence = NULL \
             WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4 \
                 AND COALESCE(high_water, 0) >= $7::bigint",
            self.table
        );
        let (space, shard, epoch, token) = self.key_args();
        let (hw, seen) = (
            i64::try_from(high_water).unwrap_or(i64::MAX),
            i64::try_from(seen).unwrap_or(0),
        );
        let known = i64::try_from(known_mark).unwrap_or(i64::MAX);
        let timeout = self.config.op_timeout();
        let mut conn = crate::sync::lock(&self.conn);
        let changed = conn
            .run(&self.target, timeout, async |c| {
                c.execute(&sql, &[&space, &shard, &epoch, &token, &hw, &seen, &known])
                    .await
            })
            .map_err(|f| {
                Trouble::Again(f.into_error(
                    "record the high-water second of the leased shard in",
                    &self.config,
                ))
            })?;
        if changed == 1 {
            Ok(())
        } else {
            Err(self.gone(&mut conn, timeout, known))
        }
    }

    fn finish(&self, last: Option<(u64, u32)>, seen: u64) -> Result<(), Trouble> {
        let (space, shard, epoch, token) = self.key_args();
        let timeout = self.config.op_timeout();
        let run = || -> Result<u64, Failure> {
            let mut conn = crate::sync::lock(&self.conn);
            match last {
                Some((sec, seq)) => {
                    let sql = format!(
                        "UPDATE {} SET high_water = GREATEST(COALESCE(high_water, 0), $5::bigint), \
                             last_second = $5::bigint, last_sequence = $6::bigint, \
                             seen = CASE WHEN $7::bigint > 0 THEN GREATEST(COALESCE(seen, 0), $7::bigint) \
                                    ELSE seen END, \
                             holder = NULL, expires_at = '-infinity' \
                         WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4",
                        self.table
                    );
                    let (sec, seq) = (i64::try_from(sec).unwrap_or(i64::MAX), i64::from(seq));
                    let seen = i64::try_from(seen).unwrap_or(0);
                    conn.run(&self.target, timeout, async |c| {
                        c.execute(&sql, &[&space, &shard, &epoch, &token, &sec, &seq, &seen])
                            .await
                    })
                }
                None => {
                    let sql = format!(
                        "UPDATE {} SET holder = NULL, expires_at = '-infinity' \
                         WHERE space = $1 AND shard = $2::bigint AND epoch = $3::bigint AND holder = $4",
                        self.table
                    );
                    conn.run(&self.target, timeout, async |c| {
                        c.execute(&sql, &[&space, &shard, &epoch, &token]).await
                    })
                }
            }
        };
        match off_runtime(run) {
            Ok(1) => Ok(()),
            Ok(_) if last.is_none() => Ok(()),
            Ok(_) => Err(Trouble::Lost(LeaseError::Lost {
                shard: self.shard,
                reason: "it was no longer held at close, so the exact last ID was not recorded"
                    .to_string(),
            })),
            Err(f) => Err(Trouble::Again(
                f.into_error("give back the lease in", &self.config),
            )),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} row (space {:?}, shard {})",
            self.table, self.config.prefix, self.shard
        )
    }
}
