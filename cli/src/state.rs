//! `idutil state` and `idutil state recover`: a shard's state, shown and recovered.

use std::io::Write;
use std::path::PathBuf;

use idutil::host_lock::{self, HostHolder};
use idutil::state::{self, RecoverOptions, Remedy, StateFile};
use idutil::{Id, DEFAULT_WINDOW};
use serde_json::json;

use crate::args::Common;
use crate::times::rfc3339;
use crate::BoxError;

fn shard_and_dir(common: &Common) -> Result<(u32, PathBuf), BoxError> {
    let (shard, _) = idutil::shard::resolve_shard(common.shard, &common.layout())?;
    let dir = state::state_dir(common.state_dir.as_deref())?;
    Ok((shard, dir))
}

pub(crate) fn show_state(
    common: &Common,
    json: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    #[cfg(lease)]
    if let Some(lease) = common.lease() {
        show_leases(&lease, &common.layout(), common.shard, json, out)?;
        // A leased shard's local state needs the shard named.
        if json || common.shard.is_none() {
            return Ok(());
        }
        writeln!(out)?;
    }
    let (shard, dir) = shard_and_dir(common)?;
    let space = host_lock::resolve_id_space(common.id_space.as_deref())?;
    let report = state::inspect(&dir, shard)?;
    let holder = match (report.locked, report.holder) {
        (true, Some(pid)) => format!("pid {pid}"),
        (true, None) => "a process with an unreadable pid".to_string(),
        (false, _) => "none".to_string(),
    };
    let host_holder = host_lock::holder(&space, shard);
    let host_pid = match host_holder {
        HostHolder::Pid(pid) => Some(pid),
        _ => None,
    };
    if json {
        let state = report.state.as_ref().map(|s| {
            json!({
                "layout": s.layout.fingerprint(),
                "clock_id": s.clock_id,
                "clock_value": s.clock_value(),
                "high_water": s.high_water.iter().map(|(c, t)| json!({"clock": c, "second": t, "time": rfc3339(*t)})).collect::<Vec<_>>(),
                "seen_max": s.seen_max,
                "seen_last_run": s.seen_last_run,
                "last_issued": s.last.map(|(sec, seq)| json!({"second": sec, "time": rfc3339(sec), "sequence": seq, "id": last_id(s)})),
            })
        });
        let doc = json!({
            "path": report.path, "shard": shard, "locked": report.locked,
            "holder_pid": report.holder, "id_space": space,
            "host_locked": host_holder != HostHolder::None, "host_holder_pid": host_pid,
            "state": state,
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "path:         {}", report.path.display())?;
    writeln!(out, "shard:        {shard}")?;
    writeln!(out, "lock holder:  {holder}")?;
    let host = match host_holder {
        HostHolder::Pid(pid) => format!("pid {pid}"),
        HostHolder::Unknown => "a process whose pid is unknown".to_string(),
        HostHolder::None => "none".to_string(),
    };
    writeln!(
        out,
        "host holder:  {host} (ID space {space}, any state directory)"
    )?;
    let Some(s) = &report.state else {
        writeln!(
            out,
            "state:        none yet (the first generator creates it)"
        )?;
        return Ok(());
    };
    writeln!(out, "layout:       {}", s.layout.fingerprint())?;
    writeln!(
        out,
        "clock id:     {} (clock value {})",
        s.clock_id,
        s.clock_value()
    )?;
    for (c, t) in &s.high_water {
        writeln!(out, "high-water:   {} ({t}) clock value {c}", rfc3339(*t))?;
    }
    writeln!(
        out,
        "seen:         {} (highest wall clock), {} (last run)",
        rfc3339(s.seen_max),
        rfc3339(s.seen_last_run)
    )?;
    match s.last {
        Some((sec, seq)) => {
            let id = last_id(s).map_or_else(String::new, |id| format!(", ID {id}"));
            writeln!(out, "last issued:  {} sequence {seq}{id} (clean close)", rfc3339(sec))?
        }
        None => writeln!(out, "last issued:  unknown (running, or not closed cleanly: resumes after the high-water second)")?,
    }
    Ok(())
}

/// The leases and the store's record of each shard (or of `only`).
#[cfg(lease)]
fn show_leases(
    config: &idutil::lease::LeaseConfig,
    layout: &idutil::Layout,
    only: Option<u32>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let leases: Vec<_> = idutil::lease::inspect(config, layout)
        .map_err(idutil::Error::from)?
        .into_iter()
        .filter(|l| only.is_none_or(|s| s == l.shard))
        .collect();
    if json {
        let rows: Vec<_> = leases
            .iter()
            .map(|l| {
                json!({
                    "shard": l.shard,
                    "holder": l.holder,
                    "expires_in_ms": l.expires_in.map(|d| d.as_millis() as u64),
                    "high_water": l.high_water,
                    "last_issued": l.last.map(|(sec, seq)| json!({"second": sec, "time": rfc3339(sec), "sequence": seq})),
                    "seen_max": l.seen,
                    "layout": l.layout,
                    "epoch": l.epoch,
                    "invalid": l.invalid,
                })
            })
            .collect();
        let doc = json!({
            "lease": config.url_redacted(), "prefix": config.get_prefix(),
            "ttl_ms": config.get_ttl().as_millis() as u64, "leases": rows,
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    let held = leases.iter().filter(|l| l.holder.is_some()).count();
    writeln!(
        out,
        "lease:        {} (ID space {:?}), {held} of {} shards leased",
        config.url_redacted(),
        config.get_prefix(),
        leases.len()
    )?;
    for l in &leases {
        let lease = match (&l.holder, l.expires_in) {
            (Some(h), Some(t)) => format!("leased by {h}, expires in {:.1} s", t.as_secs_f64()),
            (Some(h), None) => format!("leased by {h}, no expiry"),
            (None, _) => "free".to_string(),
        };
        let mut record = String::new();
        if let Some(hw) = l.high_water {
            record += &format!("; high-water {}", rfc3339(hw));
        }
        if let Some((sec, seq)) = l.last {
            record += &format!(
                "; last issued {} sequence {seq} (clean close)",
                rfc3339(sec)
            );
        }
        if !l.invalid.is_empty() {
            record += &format!("; record INVALID, shard refused: {}", l.invalid.join("; "));
        }
        writeln!(out, "shard {:>2}:     {lease}{record}", l.shard)?;
    }
    Ok(())
}

/// The exact last ID of a cleanly closed state, when it fits its layout.
fn last_id(s: &StateFile) -> Option<u64> {
    let (sec, seq) = s.last?;
    let parts = idutil::Parts {
        seconds: sec.checked_sub(s.layout.epoch())?,
        clock: s.clock_value(),
        sequence: seq,
        shard: s.shard,
    };
    s.layout.encode(parts).ok().map(Id::as_u64)
}

pub(crate) fn recover(
    common: &Common,
    after: Option<u64>,
    unused: Option<(u64, u64)>,
    force: bool,
    dry_run: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let (shard, dir) = shard_and_dir(common)?;
    let mut options = RecoverOptions::new().force(force).window(DEFAULT_WINDOW);
    if let Some(after) = after {
        options = options.after(after);
    }
    if let Some((from, to)) = unused {
        options = options.unused(from, to);
    }
    let r = match state::plan_recovery(&dir, shard, &common.layout(), &options) {
        Ok(r) => r,
        // Nothing to recover: a dry run's answer, not a failure.
        Err(idutil::Error::RecoveryRefused {
            path,
            reason,
            remedy: Some(Remedy::Force),
            ..
        }) if dry_run => {
            writeln!(out, "state file:   {}", path.display())?;
            writeln!(out, "found:        {reason}")?;
            writeln!(out, "dry run: nothing to recover, nothing was changed")?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    writeln!(out, "state file:   {}", r.path.display())?;
    writeln!(out, "found:        {}", r.found)?;
    writeln!(
        out,
        "latest known: {} ({}), {}",
        rfc3339(r.latest),
        r.latest,
        r.latest_from
    )?;
    writeln!(
        out,
        "resume after: {} ({}): the latest known second plus the {} s reservation window; \
         clock id {}",
        rfc3339(r.resume_after),
        r.resume_after,
        r.window.as_secs(),
        r.clock_id
    )?;
    if let Some((first, last)) = r.skip {
        writeln!(
            out,
            "passed over: {} ({first}) to {} ({last}): issued while the clock was far ahead, \
             skipped when the shard gets there",
            rfc3339(first),
            rfc3339(last)
        )?;
    }
    if let Some(kept) = &r.kept_as {
        writeln!(out, "old file:     kept as {}", kept.display())?;
    }
    if dry_run {
        writeln!(out, "dry run: nothing was changed")?;
        return Ok(());
    }
    // Say what is about to happen before doing it.
    out.flush()?;
    r.apply()?;
    writeln!(
        out,
        "recovered {}: shard {shard} resumes after {} ({}) with clock id {}",
        r.path.display(),
        rfc3339(r.resume_after),
        r.resume_after,
        r.clock_id
    )?;
    Ok(())
}
