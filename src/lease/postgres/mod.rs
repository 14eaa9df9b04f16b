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
//! Or without code: `IDUTIL_LEASE_URL=postgres://...`
//! ([`env::LEASE_URL`](crate::env::LEASE_URL), which
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
//! mix); a row is never deleted by the lease. Beside it, a second table,
//! `idutil_lease_history`, keeps what the rows were written under (below,
//! [*Restores and rewound histories*](#restores-and-rewound-histories)).
//! A lease whose `expires_at` is more than a day ahead (`'infinity'`, as a
//! row edited by hand leaves it) never expires by itself: it is named in
//! [`LeaseError::NoFreeShard`] and freed by
//! [`release`](crate::lease::release) (`idutil lease release --shard N`),
//! which keeps the mark. A row whose `high_water` is `NULL` is a
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
//!   before it, as any asynchronous replica loses the last commits. The
//!   promoted standby's new timeline tells this apart: the first holder to
//!   lease there raises every row past what a holder can have issued (the
//!   lead cap, below), and a holder that followed to it and finds its mark
//!   lowered writes the mark back and stops. Nothing is issued twice, but
//!   such holders stop and must be reopened, and the bound rests on every
//!   holder's lead cap: a synchronous standby is still the deployment for
//!   a fleet that must ride out failover.
//! - A single server: a mark committed is a mark kept (with `fsync` on),
//!   through crashes and restarts.
//! - The **server's clock** decides expiry, and every renewal compares it
//!   with this host's: beyond [`LeaseConfig::max_skew`] the holder stops
//!   issuing (see [the lease's rules](crate::lease)).
//!
//! # Restores and rewound histories
//!
//! A table restored from a backup holds the marks of the backup's time,
//! and holders may have issued past them since. So may a server recovered
//! to an earlier point in time, or a standby promoted before it had every
//! raise. The rows cannot tell, so the lease keeps, in
//! `idutil_lease_history`, what they were written under: for each ID space
//! the server's system identifier (`pg_control_system()`, where the role
//! may run it), its timeline, and the lease table's OID and file node;
//! and for each shard that ever had a mark, a row of its own. A dump
//! restores none of these into agreement: `pg_restore` or `psql` create the
//! table again (a new OID), `TRUNCATE` and a reload give it a new file
//! node, another cluster has another system identifier, a point-in-time
//! recovery or a promotion starts a new timeline, and a shard whose row
//! lost its mark still has its history row.
//!
//! A holder that finds any of these treats the history as unknown: it
//! raises every row of the ID space (or the one row) to the server's clock
//! plus the largest lead cap a holder of the space recorded
//! ([`LeaseConfig::max_lead`], 30 s by default) plus
//! [`LeaseConfig::max_skew`] plus one second, past every ID a holder can
//! have issued, logs why, records the new identity, and leases. The cost
//! is a jump of that many seconds in the shard's IDs and a wait of a few
//! seconds before the first ID (the lead cap, counted from the clock),
//! never a re-issued ID. `VACUUM FULL` or `CLUSTER` of the lease table
//! gives it a new file node too, and costs the same once; so does the
//! first lease of an ID space that an earlier idutil used (marks, but no
//! history yet).
//!
//! A holder that finds its own row lowered, deleted or truncated while it
//! holds the shard writes its mark back before it stops ([the
//! rule](crate::lease)), and a holder's host keeps the marks of the shards
//! it leased in its state file.
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
mod engine;
mod history;
mod inspect;
mod release;
mod restore;
mod row;
mod sql;
mod target;
mod tls;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_postgres::Row;

use super::{Ask, Engine, Grant, LeaseConfig, LeaseError, Record};
use crate::error::Result;
use conn::{off_runtime, Conn};
pub(crate) use inspect::inspect;
pub(crate) use release::release;
use sql::{create_table, prepare_space, table};
use target::Target;

const ENGINE: &str = "PostgreSQL";
/// How many times an acquisition is tried before every shard counts as
/// leased.
const MAX_TRIES: u64 = 6;
/// A fencing epoch no acquisition can raise (a row rewritten by hand): the
/// shard is granted with it unchanged, read as invalid and given back.
const EPOCH_MAX: i64 = i64::MAX;
/// `undefined_table`: the table is not there yet.
const UNDEFINED_TABLE: &str = "42P01";

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
    if let Some(forgotten) = history::check_space(&mut conn, &target, config, &table, timeout)? {
        log::warn!(
            "ID space {:?} in {table}: {}; every shard's mark is raised to {}, past every ID a \
             holder can have issued before",
            config.prefix,
            forgotten.why,
            forgotten.floor
        );
    }
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
            let mut e = LeaseError::no_free_shard(&ask.range, &config.prefix);
            if let LeaseError::NoFreeShard { stuck, .. } = &mut e {
                *stuck = release::stuck_shards(
                    &mut conn,
                    &target,
                    config,
                    &table,
                    (first, last),
                    timeout,
                );
            }
            return Err(e.into());
        }
        std::thread::sleep(Duration::from_millis(2 * tries));
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
    let mut record = lease.read(row, ask.layout);
    if let Ok(read) = &record {
        let timeout = config.op_timeout().max(Duration::from_secs(2));
        let had_mark = read.high_water.is_some();
        let mut conn = crate::sync::lock(&lease.conn);
        match history::check_shard(
            &mut conn,
            &lease.target,
            config,
            &lease.table,
            shard,
            had_mark,
            timeout,
        ) {
            Ok(None) => {}
            Ok(Some(forgotten)) => {
                log::warn!(
                    "shard {shard} of ID space {:?}: {}; its mark is raised to {}, past every \
                     ID a holder can have issued before",
                    config.prefix,
                    forgotten.why,
                    forgotten.floor
                );
                record = Ok(Record {
                    high_water: Some(u64::try_from(forgotten.floor).unwrap_or(0)),
                    last: None,
                    seen: read.seen,
                });
            }
            Err(e) => record = Err(e),
        }
    }
    let grant = Grant {
        shard,
        record,
        at: sent,
        server_time: server_time(row.get(7)),
    };
    Ok((Box::new(lease), grant))
}
