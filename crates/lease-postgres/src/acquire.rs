//! Leasing a shard from PostgreSQL: the table and the ID space's rows made
//! on first use, the replication setup judged, the history checked, and the
//! first free row taken and checked against its history in one statement.
//! Every step is tried again within the open's deadline when it failed in
//! a way that may pass ([`retry`](super::retry)).

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::{off_runtime, Conn};
use super::held::PgLease;
use super::history::{self, caps, create_history};
use super::replication;
use super::retry::{Deadline, Stop};
use super::row::Granted;
use super::sql::{self, create_table, prepare_space};
use super::target::Target;
use super::{release, server_time, MAX_TRIES, UNDEFINED_TABLE};
use idutil_lease::interface::{Ask, Grant, Held};
use idutil_lease::record::Record;
use idutil_lease::skew::{check_skew, host_time};
use idutil_lease::LeaseError;
use idutil_lease::LeaseResult as Result;

/// Takes the first free shard of the range, creating the table and the ID
/// space's rows on first use.
pub(super) fn connect(ask: &Ask<'_>) -> Result<(Box<dyn Held>, Grant)> {
    off_runtime(|| connect_here(ask))
}

/// What one try of the acquisition found.
enum Took {
    /// A row, the send time of the statement that took it, whether the
    /// statement raised it past a forgotten history, and whether it should
    /// have but did not (see [`sql::acquire`]).
    Row(Granted, Instant, (bool, bool)),
    /// No free row.
    Nothing,
}

fn connect_here(ask: &Ask<'_>) -> Result<(Box<dyn Held>, Grant)> {
    let config = ask.config;
    let target = Target::parse(config)?;
    let mut conn = Conn::open(config)?;
    let layout = ask.layout.fingerprint();
    let mut deadline = Deadline::open(config, ask.deadline);
    deadline.run(config, |t| {
        conn.transaction_block(&target, t)
            .map_err(|f| Stop::Step("connect to", f))
    })?;
    let warned = AtomicBool::new(false);
    let setup = deadline.run(config, |t| {
        match conn.write(&target, t, &[replication::PROBE.to_string()]) {
            Ok(mut answers) => Ok(answers
                .pop()
                .and_then(|a| a.rows.into_iter().next())
                .and_then(|row| replication::Setup::read(&row))),
            // A role that may not read the WAL senders: the setup is
            // not checked (renewals do not try), unless the rule is strict.
            Err(f) if f.code().is_some() && !f.may_pass() => Ok(None),
            Err(f) => Err(Stop::Step("read the replication setup of", f)),
        }
    })?;
    match &setup {
        Some(setup) => replication::judge(setup, config, target.strict(), &warned)?,
        None if target.strict() => {
            return Err(LeaseError::unsafe_store(config.url_redacted(), "the replication setup cannot be read (synchronous_standby_names, \
                         pg_stat_get_wal_senders()), and replication=strict asks for it"
                    .to_string()))
        }
        None => log::warn!(
            "the PostgreSQL lease at {} cannot read the replication setup \
             (synchronous_standby_names, pg_stat_get_wal_senders()), so it cannot warn about one that \
             lets a standby lacking a raise be promoted",
            config.url_redacted()
        ),
    }
    let forgotten = deadline.run(config, |t| {
        history::check_space(&mut conn, &target, config, t)
    })?;
    if let Some(forgotten) = forgotten {
        log::warn!(
            "ID space {:?} in {}: {}; {} raised to {}, past every ID a holder can have \
             issued before",
            config.get_prefix(),
            target.table(),
            forgotten.why,
            forgotten.raised,
            forgotten.floor
        );
    }
    let reclaim = [sql::reclaim(ask, &target, &layout)];
    // Whether a try of the acquisition failed: it may have taken a row
    // whose answer was lost, which the next try looks for first.
    let mut unsure = false;
    let mut tries = 0;
    loop {
        let took = deadline.run(config, |t| {
            let fail = |f| Stop::Step("lease a shard from", f);
            if unsure {
                let sent = Instant::now();
                let mut answers = conn.write(&target, t, &reclaim).map_err(fail)?;
                if let Some(row) = answers.pop().and_then(|a| a.rows.into_iter().next()) {
                    log::debug!("took back the row an earlier try of this open had leased");
                    return taken_row(&row, sent);
                }
                unsure = false;
            }
            let sent = Instant::now();
            let host = host_time().as_secs_f64();
            let acquire = [sql::acquire(ask, &target, &layout, caps(config), host)];
            let answer = match conn.write_once(&target, t, &acquire) {
                Err(f) if f.code() == Some(UNDEFINED_TABLE) => {
                    // Dropped since the history check: made again.
                    create_table(&mut conn, &target, t)
                        .map_err(|f| Stop::Step("create the lease table in", f))?;
                    create_history(&mut conn, &target, t)?;
                    conn.write_once(&target, t, &acquire)
                }
                other => other,
            };
            match answer {
                Ok(mut answers) => match answers.pop().and_then(|a| a.rows.into_iter().next()) {
                    Some(row) => taken_row(&row, sent),
                    None => Ok(Took::Nothing),
                },
                Err(f) => {
                    unsure = true;
                    Err(fail(f))
                }
            }
        })?;
        match took {
            Took::Row(granted, sent, raised) => {
                let probe = setup.is_some();
                return granted_row(
                    ask,
                    (target, conn, &mut deadline),
                    granted,
                    (sent, raised),
                    layout,
                    (warned, probe),
                );
            }
            Took::Nothing => {}
        }
        tries += 1;
        // Nothing free: another layout's ID space, rows not created yet,
        // or every shard leased. Or a race: the row the statement chose was
        // taken by a concurrent acquisition after its snapshot, and
        // `LIMIT 1` then yields nothing rather than the next free row; a
        // new statement (a new snapshot) finds it.
        if deadline.run(config, |t| {
            prepare_space(&mut conn, &target, ask, &layout, t)
        })? {
            continue;
        }
        if tries >= MAX_TRIES {
            let mut e = LeaseError::no_free_shard(&ask.range, config.get_prefix());
            if let LeaseError::NoFreeShard { stuck, skipped, .. } = &mut e {
                let database;
                (*stuck, database) = release::stuck_shards(
                    &mut conn,
                    &target,
                    config,
                    (*ask.range.start(), *ask.range.end()),
                    deadline.timeout(),
                );
                skipped.extend(database);
            }
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(2 * tries));
    }
}

/// A row the acquisition or a reclaim returned: the granted columns and
/// whether the row was raised past a forgotten history, or should have
/// been.
fn taken_row(row: &[Option<String>], sent: Instant) -> std::result::Result<Took, Stop> {
    let granted = Granted::read(row).map_err(|f| Stop::Step("lease a shard from", f))?;
    let flag = |i: usize| row.get(i).cloned().flatten().as_deref() == Some("t");
    Ok(Took::Row(granted, sent, (flag(8), flag(9))))
}

/// The lease and its record from the acquiring statement's row.
fn granted_row(
    ask: &Ask<'_>,
    (target, conn, deadline): (Target, Conn, &mut Deadline),
    row: Granted,
    (sent, (raised, unraised)): (Instant, (bool, bool)),
    layout: String,
    (warned, probe): (AtomicBool, bool),
) -> Result<(Box<dyn Held>, Grant)> {
    let config = ask.config;
    let shard = u32::try_from(row.shard).unwrap_or(u32::MAX);
    if raised {
        log::warn!(
            "shard {shard} of ID space {:?}: its row had a mark once and has none now (deleted \
             and created again); its mark is raised to {}, past every ID a holder can have \
             issued before",
            config.get_prefix(),
            row.high_water.unwrap_or_default()
        );
    }
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
        probed: Mutex::new(None),
        opening: AtomicBool::new(true),
    };
    let server = server_time(row.server);
    let mut record = lease.read(row, ask.layout);
    // The acquisition found the row with nothing in it although the
    // history knew the shard, and left it unraised: the server's clock was
    // further from this host's than the skew limit as the statement ran
    // (see `sql::acquire`). A server whose clock is off by more than the
    // limit raises nothing: the holder refuses it at once
    // (`Lease::acquire`); a slow answer from one within it raises now.
    let skewed = server.is_some_and(|s| check_skew(config, Some(shard), host_time(), s).is_some());
    if let (Ok(read), true, false) = (&record, unraised, skewed) {
        let mut conn = crate::sync::lock(&lease.conn);
        let checked = deadline.run(config, |t| {
            history::check_shard(&mut conn, &lease.target, config, shard, false, t)
        });
        match checked {
            Ok(None) => {}
            Ok(Some(forgotten)) => {
                log::warn!(
                    "shard {shard} of ID space {:?}: {}; its mark is raised to {}, past every \
                     ID a holder can have issued before",
                    config.get_prefix(),
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
