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

mod audit;
mod conn;
mod engine;
mod inspect;
mod replication;
mod row;
mod sql;
mod target;
mod tls;

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Ask, Engine, Grant, LeaseConfig, LeaseError};
use crate::error::Result;
pub(crate) use audit::audit;
use conn::{number, off_runtime, Answer, Conn, Failure};
pub(crate) use inspect::inspect;
use sql::{create_table, prepare_space};
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
fn server_time(seconds: Option<f64>) -> Option<Duration> {
    seconds
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
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
    /// The holder's one connection, for renewals, raises and the close: a
    /// pooler's pool gives the holder one server connection at a time.
    conn: Mutex<Conn>,
    /// Whether the replication setup's risk was warned about (once until
    /// it changes).
    warned: AtomicBool,
}

/// The row the acquiring statement returned, its columns read.
struct Granted {
    shard: i64,
    epoch: i64,
    high_water: Option<i64>,
    last: (Option<i64>, Option<i64>),
    seen: Option<i64>,
    layout: String,
    server: Option<f64>,
}

impl Granted {
    fn read(row: &[Option<String>]) -> std::result::Result<Granted, Failure> {
        let cell = |i: usize| row.get(i).cloned().flatten();
        let required = |v: Option<i64>, what: &str| {
            v.ok_or_else(|| Failure::Answer(format!("{what} is NULL")))
        };
        Ok(Granted {
            shard: required(number(&cell(0), "shard")?, "shard")?,
            epoch: required(number(&cell(1), "epoch")?, "epoch")?,
            high_water: number(&cell(2), "high_water")?,
            last: (
                number(&cell(3), "last_second")?,
                number(&cell(4), "last_sequence")?,
            ),
            seen: number(&cell(5), "seen")?,
            layout: cell(6).unwrap_or_default(),
            server: number(&cell(7), "the server's clock")?,
        })
    }
}

/// Takes the first free shard of the range, creating the table and the ID
/// space's rows on first use.
pub(super) fn connect(ask: &Ask<'_>) -> Result<(Box<dyn Engine>, Grant)> {
    off_runtime(|| connect_here(ask))
}

fn connect_here(ask: &Ask<'_>) -> Result<(Box<dyn Engine>, Grant)> {
    let config = ask.config;
    let target = Target::parse(config)?;
    let mut conn = Conn::open(config)?;
    let layout = ask.layout.fingerprint();
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    conn.transaction_block(&target, timeout)
        .map_err(|f| f.into_error("lease a shard from", config))?;
    let warned = AtomicBool::new(false);
    let setup = conn
        .write(&target, timeout, &[replication::PROBE.to_string()])
        .map_err(|f| f.into_error("lease a shard from", config))?
        .pop()
        .and_then(|a| a.rows.into_iter().next())
        .and_then(|row| replication::Setup::read(&row));
    if let Some(setup) = &setup {
        replication::judge(setup, config, target.strict(), &warned)?;
    }
    let acquire = [sql::acquire(ask, &target, &layout)];
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = Instant::now();
        let row = match conn.write(&target, timeout, &acquire) {
            Ok(mut answers) => answers
                .pop()
                .and_then(|a: Answer| a.rows.into_iter().next()),
            Err(f) if f.code() == Some(UNDEFINED_TABLE) && tries < MAX_TRIES => {
                create_table(&mut conn, &target, config, timeout)?;
                continue;
            }
            Err(f) => return Err(f.into_error("lease a shard from", config).into()),
        };
        if let Some(row) = row {
            let granted =
                Granted::read(&row).map_err(|f| f.into_error("lease a shard from", config))?;
            return granted_row(ask, target, conn, granted, sent, layout, warned);
        }
        // Nothing free: another layout's ID space, rows not created yet,
        // or every shard leased. Or a race: the row the statement chose was
        // taken by a concurrent acquisition after its snapshot, and
        // `LIMIT 1` then yields nothing rather than the next free row; a
        // new statement (a new snapshot) finds it.
        if prepare_space(&mut conn, &target, ask, &layout, timeout)? {
            continue;
        }
        if tries >= MAX_TRIES {
            return Err(LeaseError::no_free_shard(&ask.range, &config.prefix).into());
        }
        std::thread::sleep(Duration::from_millis(2 * tries));
    }
}

/// The lease and its record from the acquiring statement's row.
fn granted_row(
    ask: &Ask<'_>,
    target: Target,
    conn: Conn,
    row: Granted,
    sent: Instant,
    layout: String,
    warned: AtomicBool,
) -> Result<(Box<dyn Engine>, Grant)> {
    let config = ask.config;
    let shard = u32::try_from(row.shard).unwrap_or(u32::MAX);
    let lease = PgLease {
        config: config.clone(),
        table: target.table(),
        target,
        shard,
        token: ask.token.to_string(),
        epoch: row.epoch,
        layout,
        conn: Mutex::new(conn),
        warned,
    };
    let server = server_time(row.server);
    let record = lease.read(row, ask.layout);
    let grant = Grant {
        shard,
        record,
        at: sent,
        server_time: server,
    };
    Ok((Box::new(lease), grant))
}
