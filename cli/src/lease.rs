//! `idutil lease`: `check`, a lease store's setup audited, one line per
//! finding; `release`, freeing a shard's lease that never expires by
//! itself ([`idutil::lease::release`]); `sql`, the database as a holder
//! ([`idutil::lease::postgres::DatabaseHolder`]).

use std::io::Write;

use idutil::lease::{check as audit, Finding, LeaseConfig, Verdict};

use crate::args::Common;
use crate::report::CommandError;
use crate::BoxError;

/// Audits the lease store `url` names (else `--lease`,
/// `IDUTIL_LEASE_URL`) and prints what is safe and what is not: `ok`,
/// `warn` or `fail`, the topic, the finding. An error (status 1) when
/// anything fails.
pub(crate) fn check(
    common: &Common,
    url: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let config = match url {
        Some(url) => LeaseConfig::new(url.trim()),
        None => common.lease().ok_or_else(|| {
            CommandError::Usage(format!(
                "no lease URL: give one (idutil lease check postgres://...), --lease or {}",
                idutil::env::LEASE_URL
            ))
        })?,
    };
    let config = match common.shard {
        Some(shard) => config.shards(shard..=shard),
        None => config,
    };
    // As an `idutil::Error`, so that its hint reaches stderr (`report.rs`).
    let found = audit(&config, &common.layout()).map_err(idutil::Error::from)?;
    if json {
        let lines: Vec<serde_json::Value> = found
            .iter()
            .map(|f| {
                serde_json::json!({
                    "verdict": f.verdict.to_string(),
                    "topic": f.topic,
                    "text": f.text,
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &lines)?;
        writeln!(out)?;
    } else {
        for f in &found {
            writeln!(out, "{f}")?;
        }
    }
    out.flush()?;
    let failed: Vec<&Finding> = found
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .collect();
    match failed.len() {
        0 => Ok(()),
        // Not an I/O error: those are reported as failing to write the output.
        n => Err(format!(
            "the lease check found {n} problem(s) that break the lease (the `fail` lines)"
        )
        .into()),
    }
}

/// Frees the lease of `--shard` if it never expires by itself, keeping
/// its mark.
pub(crate) fn release(common: &Common, out: &mut impl Write) -> Result<(), BoxError> {
    let Some(config) = common.lease() else {
        return Err(CommandError::Usage(
            "no lease: give --lease URL or set IDUTIL_LEASE_URL".to_string(),
        )
        .into());
    };
    let Some(shard) = common.shard else {
        return Err(CommandError::Usage(
            "name the shard whose lease to release: --shard N".to_string(),
        )
        .into());
    };
    let released =
        idutil::lease::release(&config, &common.layout(), shard).map_err(idutil::Error::from)?;
    writeln!(
        out,
        "released shard {shard} of ID space {:?}: its lease (holder {}, expiring {}) is free; \
         its mark is kept",
        config.get_prefix(),
        released.holder.as_deref().unwrap_or("none"),
        released.expires_at
    )?;
    Ok(())
}

/// Prints the script that makes the database a holder of `--shard` (or,
/// with `uninstall`, the one that gives it back), or runs it with `apply`.
#[cfg(feature = "postgres-lease")]
pub(crate) fn sql(
    common: &Common,
    url: Option<&str>,
    name: &str,
    (uninstall, apply): (bool, bool),
    out: &mut impl Write,
) -> Result<(), BoxError> {
    use idutil::lease::postgres::DatabaseHolder;

    let config = match url
        .map(|u| LeaseConfig::new(u.trim()))
        .or_else(|| common.lease())
    {
        Some(config) => config,
        None if apply => {
            return Err(CommandError::Usage(format!(
                "no database to run the script on: give its URL (idutil lease sql --apply \
                 postgres://...), --lease or {}",
                idutil::env::LEASE_URL
            ))
            .into())
        }
        // Only the schema and the ID space are read from a URL: without
        // one, the defaults (schema public).
        None => LeaseConfig::new("postgres://localhost/"),
    };
    let shard = match (common.shard, uninstall) {
        (Some(shard), _) => shard,
        // The uninstall finds the row by its holder, whatever the shard.
        (None, true) => 0,
        (None, false) => {
            return Err(CommandError::Usage(
                "name the shard the database holds: --shard N (one no Rust holder needs)"
                    .to_string(),
            )
            .into())
        }
    };
    let holder = DatabaseHolder::new(&config, shard)
        .layout(common.layout())
        .name(name);
    let err = |e: idutil::lease::LeaseError| idutil::Error::from(e);
    match (uninstall, apply) {
        (false, false) => write!(out, "{}", holder.install_sql().map_err(err)?)?,
        (true, false) => write!(out, "{}", holder.uninstall_sql().map_err(err)?)?,
        (false, true) => {
            holder.install().map_err(err)?;
            writeln!(
                out,
                "installed: {} holds shard {shard} of ID space {:?}; use DEFAULT {}",
                holder.holder_token().map_err(err)?,
                config.get_prefix(),
                holder
                    .holder_token()
                    .map_err(err)?
                    .trim_start_matches("database function ")
            )?;
        }
        (true, true) => {
            holder.uninstall().map_err(err)?;
            writeln!(
                out,
                "removed: {} no longer holds a shard of ID space {:?}; its last ID is in the row",
                holder.holder_token().map_err(err)?,
                config.get_prefix()
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
