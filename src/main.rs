//! The `idutil` command: issue, decode and inspect IDs from a shell.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use idutil::host_lock::{self, HostHolder};
use idutil::state::{self, StateFile};
use idutil::{Generator, Id, Layout, DEFAULT_WINDOW};
use serde_json::json;

/// The most IDs one `idutil next` hands out.
const MAX_N: u64 = 1_000_000_000;

#[derive(Parser)]
#[command(
    name = "idutil",
    version,
    about = "Unique 53-bit integer IDs that stay exact in JavaScript and never repeat",
    after_help = "Examples:\n  idutil next -n 5\n  idutil --shard 3 next --json\n  idutil decode 1452736581206048\n  idutil state\n\n\
                  Environment: IDUTIL_SHARD (the shard, else the host name's trailing digits), \
                  IDUTIL_STATE_DIR (else $XDG_STATE_HOME/idutil or ~/.local/state/idutil), \
                  IDUTIL_ID_SPACE (else \"default\").\n\n\
                  Exit status: 0 on success; 2 on bad usage (arguments, or an unusable \
                  IDUTIL_SHARD, IDUTIL_STATE_DIR or host-name shard); 1 on any other error. \
                  Every error is one line on stderr; output cut short by an error is \
                  incomplete, whatever it looks like."
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Common {
    /// Shard to use, 0 to 31 (default: IDUTIL_SHARD, else the host name's trailing digits)
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(Layout::DEFAULT.max_shard())))]
    shard: Option<u32>,
    /// State directory, an absolute path (default: IDUTIL_STATE_DIR, else the platform's state directory)
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// ID space: one generator per shard and ID space on a host; generators whose IDs share a
    /// table must share one (default: IDUTIL_ID_SPACE, else "default")
    #[arg(long, global = true, value_name = "NAME", value_parser = parse_id_space)]
    id_space: Option<String>,
    /// Lease the shard from this Redis server instead (redis://host:port/db); with
    /// --shard, lease only that shard. `state` then shows the leases
    #[cfg(feature = "redis")]
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = idutil::lease::REDIS_URL_ENV,
        hide_env_values = true
    )]
    redis: Option<String>,
}

impl Common {
    /// The lease settings, when `--redis` or `IDUTIL_REDIS_URL` is given.
    #[cfg(feature = "redis")]
    fn lease(&self) -> Option<idutil::lease::LeaseConfig> {
        let url = self.redis.as_deref().map(str::trim)?;
        (!url.is_empty()).then(|| idutil::lease::LeaseConfig::new(url))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Issue new IDs, one per line
    #[command(
        after_help = "Examples:\n  idutil next\n  idutil next -n 1000 > ids.txt\n  idutil next -n 3 --json"
    )]
    Next {
        /// How many IDs (1 to 1000000000); all are reserved before any is printed
        #[arg(short = 'n', long = "count", value_name = "N", default_value_t = 1,
              allow_negative_numbers = true,
              value_parser = parse_count)]
        n: u64,
        /// Print a JSON array of numbers
        #[arg(long)]
        json: bool,
    },
    /// Show the time, sequence, shard and clock value of IDs
    #[command(
        after_help = "Examples:\n  idutil decode 1452736581206048\n  idutil decode --json $(idutil next -n 3)"
    )]
    Decode {
        /// IDs: decimal integers from 0 to 9007199254740991
        #[arg(required = true, allow_negative_numbers = true, value_name = "ID")]
        ids: Vec<Id>,
        /// Print a JSON array of objects
        #[arg(long)]
        json: bool,
    },
    /// Show the shard's state file and lock holder, or recover a damaged one
    #[command(
        after_help = "Examples:\n  idutil state\n  idutil --shard 3 state --json\n  idutil state recover\n  idutil state recover --after 2030-01-01T00:00:00Z"
    )]
    State {
        /// Print JSON
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<StateAction>,
    },
}

#[derive(Subcommand)]
enum StateAction {
    /// Replace a damaged or mismatched state file with a fresh one that
    /// resumes after the latest second the old file, its timestamp and the
    /// clock could imply
    #[command(
        after_help = "Examples:\n  idutil state recover\n  idutil --shard 3 --state-dir /var/lib/idutil state recover\n  idutil state recover --after 2030-01-01T00:00:00Z\n  idutil state recover --after 1893456000"
    )]
    Recover {
        /// Also resume after this second (Unix seconds or RFC 3339), for
        /// when the old state is lost and the shard may have run ahead
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        after: Option<u64>,
    },
}

fn parse_id_space(s: &str) -> Result<String, String> {
    idutil::host_lock::check_id_space(s)
        .map(|()| s.to_string())
        .map_err(str::to_string)
}

fn parse_count(s: &str) -> Result<u64, String> {
    let out_of_range = || format!("must be from 1 to {MAX_N}");
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("not a whole number; {}", out_of_range()));
    }
    match s.parse::<u64>() {
        Ok(n) if (1..=MAX_N).contains(&n) => Ok(n),
        _ => Err(out_of_range()),
    }
}

/// Unix seconds, or an RFC 3339 time with any offset (`2030-01-01T00:00:00Z`,
/// `2030-01-01T02:00:00+02:00`).
fn parse_time(s: &str) -> Result<u64, String> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map_err(|_| "too many digits for Unix seconds".to_string());
    }
    let t: jiff::Timestamp = s
        .parse()
        .map_err(|e| format!("not Unix seconds or an RFC 3339 time: {e}"))?;
    u64::try_from(t.as_second()).map_err(|_| "before 1970".to_string())
}

fn main() -> ExitCode {
    log::set_logger(&StderrLogger).ok();
    log::set_max_level(log::LevelFilter::Warn);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => runtime_error(&*e),
    }
}

/// Reports an error from running a command on one line of stderr. Settings
/// that cannot work (a shard out of range, an unusable environment variable)
/// are the caller's to fix, so they exit 2 like bad arguments; everything
/// else exits 1.
fn runtime_error(e: &(dyn std::error::Error + 'static)) -> ExitCode {
    let (kind, code) = match e.downcast_ref::<idutil::Error>() {
        Some(
            idutil::Error::ShardOutOfRange { .. }
            | idutil::Error::InvalidEnv { .. }
            | idutil::Error::InvalidIdSpace { .. }
            | idutil::Error::RelativeStateDir { .. }
            | idutil::Error::NoStateDir,
        ) => ("usage error", 2),
        Some(_) => ("error", 1),
        // The library reports its own I/O as `idutil::Error`: a bare I/O
        // error comes from writing the output.
        None if e.is::<io::Error>() || e.is::<serde_json::Error>() => {
            let reason = one_line(&e.to_string());
            eprintln!("idutil: error: cannot write the output: {reason}");
            return ExitCode::FAILURE;
        }
        None => ("error", 1),
    };
    eprintln!("idutil: {kind}: {}", one_line(&e.to_string()));
    ExitCode::from(code)
}

/// `text` with its lines joined, so an error is always one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Help and version go to stdout with status 0; anything else is a usage
/// error: one line on stderr, status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        eprintln!("idutil: usage error: a command is required: next, decode or state (see 'idutil --help')");
        return ExitCode::from(2);
    }
    // clap's message: a first paragraph saying what is wrong (the list of
    // missing arguments on the lines below it), tips, then the usage.
    let text = e.render().to_string();
    let first = text.trim_start().split("\n\n").next().unwrap_or_default();
    let reason = one_line(first);
    let reason = reason.strip_prefix("error: ").unwrap_or(&reason);
    let reason = if reason.is_empty() {
        "invalid usage"
    } else {
        reason
    };
    // `Usage: idutil next [OPTIONS]` names the command whose help to point at.
    let command = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .map(|usage| {
            usage
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "idutil".to_string());
    eprintln!("idutil: usage error: {reason} (see '{command} --help')");
    ExitCode::from(2)
}

type BoxError = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), BoxError> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cli.command {
        Command::Next { n, json } => next(&cli.common, n, json, &mut out)?,
        Command::Decode { ids, json } => decode(&ids, json, &mut out)?,
        Command::State { json, action: None } => show_state(&cli.common, json, &mut out)?,
        Command::State {
            action: Some(StateAction::Recover { after }),
            ..
        } => recover(&cli.common, after, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

fn next(common: &Common, n: u64, json: bool, out: &mut impl Write) -> Result<(), BoxError> {
    let mut builder = Generator::builder();
    if let Some(shard) = common.shard {
        builder = builder.shard(shard);
    }
    if let Some(dir) = &common.state_dir {
        builder = builder.state_dir(dir);
    }
    if let Some(space) = &common.id_space {
        builder = builder.id_space(space);
    }
    #[cfg(feature = "redis")]
    if let Some(lease) = common.lease() {
        builder = builder.redis_lease(lease);
    }
    let generator = builder.open()?;
    // Reserve every ID before printing any, so a failure cannot leave a
    // partial list that looks complete.
    let batch = generator.next_ids(n)?;
    if json {
        out.write_all(b"[")?;
        for (i, id) in batch.enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{id}")?;
        }
        out.write_all(b"]\n")?;
    } else {
        for id in batch {
            writeln!(out, "{id}")?;
        }
    }
    out.flush()?;
    generator.close()?;
    Ok(())
}

/// An RFC 3339 time for Unix seconds; past year 9999, which RFC 3339 cannot
/// write, the seconds themselves. Never panics, whatever a file or a clock
/// holds.
fn rfc3339(unix_seconds: u64) -> String {
    i64::try_from(unix_seconds)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(
            || format!("unix second {unix_seconds} (after year 9999)"),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

fn decode(ids: &[Id], json: bool, out: &mut impl Write) -> Result<(), BoxError> {
    let layout = Layout::DEFAULT;
    let mut rows = Vec::new();
    for &id in ids {
        let p = layout.decode(id)?;
        let time = rfc3339(layout.epoch() + p.seconds);
        if json {
            rows.push(json!({
                "id": id.as_u64(), "time": time, "seconds": p.seconds,
                "sequence": p.sequence, "shard": p.shard, "clock": p.clock,
            }));
        } else {
            writeln!(
                out,
                "id={id} time={time} seconds={} sequence={} shard={} clock={}",
                p.seconds, p.sequence, p.shard, p.clock
            )?;
        }
    }
    if json {
        serde_json::to_writer(&mut *out, &rows)?;
        writeln!(out)?;
    }
    Ok(())
}

fn shard_and_dir(common: &Common) -> Result<(u32, PathBuf), BoxError> {
    let (shard, _) = idutil::resolve_shard(common.shard, &Layout::DEFAULT)?;
    let dir = state::state_dir(common.state_dir.as_deref())?;
    Ok((shard, dir))
}

fn show_state(common: &Common, json: bool, out: &mut impl Write) -> Result<(), BoxError> {
    #[cfg(feature = "redis")]
    if let Some(lease) = common.lease() {
        show_leases(&lease, common.shard, json, out)?;
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

/// The leases and Redis's record of each shard (or of `only`).
#[cfg(feature = "redis")]
fn show_leases(
    config: &idutil::lease::LeaseConfig,
    only: Option<u32>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let leases: Vec<_> = idutil::lease::inspect(config, &Layout::DEFAULT)?
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
                })
            })
            .collect();
        let doc = json!({
            "redis": config.url_redacted(), "prefix": config.key_prefix(),
            "ttl_ms": config.lease_ttl().as_millis() as u64, "leases": rows,
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    let held = leases.iter().filter(|l| l.holder.is_some()).count();
    writeln!(
        out,
        "redis:        {} (key prefix {:?}), {held} of {} shards leased",
        config.url_redacted(),
        config.key_prefix(),
        leases.len()
    )?;
    for l in &leases {
        let lease = match (&l.holder, l.expires_in) {
            (Some(h), Some(t)) => format!("leased by {h}, expires in {:.1} s", t.as_secs_f64()),
            (Some(h), None) => format!("leased by {h}, no expiry"),
            (None, _) => "free".to_string(),
        };
        let record = match (l.last, l.high_water) {
            (Some((sec, seq)), _) => format!(
                "; last issued {} sequence {seq} (clean close)",
                rfc3339(sec)
            ),
            (None, Some(hw)) => format!("; high-water {}", rfc3339(hw)),
            (None, None) => String::new(),
        };
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

fn recover(common: &Common, after: Option<u64>, out: &mut impl Write) -> Result<(), BoxError> {
    let (shard, dir) = shard_and_dir(common)?;
    let r = state::recover(&dir, shard, &Layout::DEFAULT, DEFAULT_WINDOW, after)?;
    writeln!(
        out,
        "recovered {}: {}; shard {shard} resumes after {} ({}) with clock id {}",
        r.path.display(),
        r.previous,
        rfc3339(r.resume_after),
        r.resume_after,
        r.clock_id
    )?;
    Ok(())
}

fn is_broken_pipe(e: &BoxError) -> bool {
    let kind = match (
        e.downcast_ref::<io::Error>(),
        e.downcast_ref::<serde_json::Error>(),
    ) {
        (Some(e), _) => Some(e.kind()),
        (None, Some(e)) => e.io_error_kind(),
        (None, None) => None,
    };
    kind == Some(io::ErrorKind::BrokenPipe)
}

/// Warnings from the library, one line each on stderr.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let level = match record.level() {
                log::Level::Error => "error",
                _ => "warning",
            };
            eprintln!("idutil: {level}: {}", record.args());
        }
    }
    fn flush(&self) {}
}
