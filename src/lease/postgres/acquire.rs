//! Leasing a shard from PostgreSQL: the table and the ID space's rows made
//! on first use, the replication setup judged, the history checked, and the
//! first free row taken in one statement.

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::{off_runtime, Answer, Conn};
use super::held::PgLease;
use super::row::Granted;
use super::sql::{self, create_table, prepare_space};
use super::target::Target;
use super::{history, release, replication, server_time, MAX_TRIES, UNDEFINED_TABLE};
use crate::lease::interface::{host_time, Ask, Grant, Held};
use crate::lease::record::Record;
use crate::lease::renewal::check_skew;
use crate::lease::LeaseError;
use crate::lease::LeaseResult as Result;

/// Takes the first free shard of the range, creating the table and the ID
/// space's rows on first use.
pub(super) fn connect(ask: &Ask<'_>) -> Result<(Box<dyn Held>, Grant)> {
    off_runtime(|| connect_here(ask))
}

fn connect_here(ask: &Ask<'_>) -> Result<(Box<dyn Held>, Grant)> {
    let config = ask.config;
    let target = Target::parse(config)?;
    let mut conn = Conn::open(config)?;
    let layout = ask.layout.fingerprint();
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    conn.transaction_block(&target, timeout)
        .map_err(|f| f.into_error("lease a shard from", config))?;
    let warned = AtomicBool::new(false);
    let setup = match conn.write(&target, timeout, &[replication::PROBE.to_string()]) {
        Ok(mut answers) => answers
            .pop()
            .and_then(|a| a.rows.into_iter().next())
            .and_then(|row| replication::Setup::read(&row)),
        // A role that may not read `pg_stat_replication`: the setup is not
        // checked (renewals do not try), unless the rule is strict.
        Err(f) if f.code().is_some() => None,
        Err(f) => return Err(f.into_error("lease a shard from", config)),
    };
    match &setup {
        Some(setup) => replication::judge(setup, config, target.strict(), &warned)?,
        None if target.strict() => {
            return Err(LeaseError::UnsafeStore {
                url: config.url_redacted(),
                reason: "the replication setup cannot be read (synchronous_standby_names, \
                         pg_stat_replication), and replication=strict asks for it"
                    .to_string(),
            })
        }
        None => log::warn!(
            "the PostgreSQL lease at {} cannot read the replication setup \
             (synchronous_standby_names, pg_stat_replication), so it cannot warn about one that \
             lets a standby lacking a raise be promoted",
            config.url_redacted()
        ),
    }
    if let Some(forgotten) = history::check_space(&mut conn, &target, config, timeout)? {
        log::warn!(
            "ID space {:?} in {}: {}; every shard's mark is raised to {}, past every ID a \
             holder can have issued before",
            config.prefix,
            target.table(),
            forgotten.why,
            forgotten.floor
        );
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
            Err(f) => return Err(f.into_error("lease a shard from", config)),
        };
        if let Some(row) = row {
            let granted =
                Granted::read(&row).map_err(|f| f.into_error("lease a shard from", config))?;
            let probe = setup.is_some();
            return granted_row(ask, target, conn, granted, sent, layout, (warned, probe));
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
            let mut e = LeaseError::no_free_shard(&ask.range, &config.prefix);
            if let LeaseError::NoFreeShard { stuck, .. } = &mut e {
                *stuck = release::stuck_shards(
                    &mut conn,
                    &target,
                    config,
                    (*ask.range.start(), *ask.range.end()),
                    timeout,
                );
            }
            return Err(e);
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
    (warned, probe): (AtomicBool, bool),
) -> Result<(Box<dyn Held>, Grant)> {
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
        probe,
    };
    let server = server_time(row.server);
    let mut record = lease.read(row, ask.layout);
    // A server whose clock is off by more than the skew limit raises
    // nothing: the holder refuses it at once (`LeaseHolder::open`).
    let skewed = server.is_some_and(|s| check_skew(config, Some(shard), host_time(), s).is_some());
    if let (Ok(read), false) = (&record, skewed) {
        let timeout = config.op_timeout().max(Duration::from_secs(2));
        let had_mark = read.high_water.is_some();
        let mut conn = crate::sync::lock(&lease.conn);
        match history::check_shard(&mut conn, &lease.target, config, shard, had_mark, timeout) {
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
        server_time: server,
    };
    Ok((Box::new(lease), grant))
}
