//! The `idutil` command: issue, decode and inspect IDs from a shell.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, BufRead, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use idutil::host_lock::{self, HostHolder};
use idutil::state::{self, RecoverOptions, StateFile};
use idutil::{Generator, Id, Layout, DEFAULT_WINDOW};
use serde_json::json;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The most IDs one `idutil next` hands out.
const MAX_N: u64 = 1_000_000_000;

#[derive(Parser)]
#[command(
    name = "idutil",
    version,
    about = "Unique 53-bit integer IDs that stay exact in JavaScript and never repeat",
    after_help = "Examples:\n  idutil next -n 5\n  idutil --shard 3 next --json\n  idutil decode 1452736581206048\n  \
                  idutil next -n 2 | idutil decode\n  idutil state\n  \
                  idutil completions bash > ~/.local/share/bash-completion/completions/idutil\n  \
                  idutil man | man -l -\n\n\
                  Environment: IDUTIL_SHARD (the shard, else the number ending the host name), \
                  IDUTIL_STATE_DIR (else $XDG_STATE_HOME/idutil or ~/.local/state/idutil), \
                  IDUTIL_ID_SPACE (else \"default\").\n\n\
                  Exit status: 0 on success; 2 on bad usage or bad input (arguments, IDs on \
                  standard input, or an unusable IDUTIL_SHARD, IDUTIL_STATE_DIR, \
                  IDUTIL_ID_SPACE or host-name shard); 1 on any other error. \
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
        hide_env_values = true,
        value_parser = parse_redis_url
    )]
    redis: Option<String>,
}

impl Common {
    /// The lease settings, when `--redis` or `IDUTIL_REDIS_URL` is given.
    #[cfg(feature = "redis")]
    fn lease(&self) -> Option<idutil::lease::LeaseConfig> {
        self.redis.as_deref().map(idutil::lease::LeaseConfig::new)
    }
}

/// A Redis URL, trimmed; empty or blank is refused rather than taken to
/// turn the lease off (the shard would silently come from elsewhere).
#[cfg(feature = "redis")]
fn parse_redis_url(s: &str) -> Result<String, String> {
    let url = s.trim();
    if url.is_empty() {
        return Err(format!(
            "the Redis URL is empty or blank; give redis://host:port/db, or unset {}",
            idutil::lease::REDIS_URL_ENV
        ));
    }
    Ok(url.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Issue new IDs, one per line
    #[command(
        after_help = "Examples:\n  idutil next\n  idutil next -n 1000 > ids.txt\n  idutil next -n 3 --json\n  idutil next -n 10000000 --max-lead 1m\n\n\
                      One shard issues 65,536 IDs per second; more than that borrows seconds \
                      ahead of the wall clock, and a run that ends more than a minute ahead \
                      says so on stderr. --max-lead waits for the clock instead.\n\n\
                      SIGTERM, SIGINT and SIGHUP stop issuing, flush the IDs printed so far, \
                      save the exact last ID issued and exit with 128 + the signal number; \
                      the next run continues right after it."
    )]
    Next {
        /// How many IDs (1 to 1000000000), issued and printed 1024 at a time
        #[arg(short = 'n', long = "count", value_name = "N", default_value_t = 1,
              allow_negative_numbers = true,
              value_parser = parse_count)]
        n: u64,
        /// Print a JSON array of numbers
        #[arg(long)]
        json: bool,
        /// Never run more than this far ahead of the wall clock (seconds, or
        /// a duration such as 90s, 5m, 1h): once there, wait for the clock,
        /// so IDs come out at 65,536 per second. After the clock steps back,
        /// it waits until the clock catches up
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        max_lead: Option<Duration>,
    },
    /// Show the time, sequence, shard and clock value of IDs
    #[command(
        after_help = "Without ID arguments, reads IDs from standard input, one per line: \
                      surrounding whitespace is ignored and blank lines are skipped. A bad \
                      line stops decoding with 'line N: <reason>' and exit status 2; the \
                      IDs before it have been printed (with --json, in an array left \
                      unclosed, so it cannot pass for a complete one). Empty input prints \
                      nothing ([] with --json).\n\n\
                      Examples:\n  idutil decode 1452736581206048\n  idutil decode --json $(idutil next -n 3)\n  \
                      idutil next -n 2 | idutil decode\n  idutil decode --json < ids.txt"
    )]
    Decode {
        /// IDs: decimal integers from 0 to 9007199254740991 (default: standard input)
        #[arg(allow_negative_numbers = true, value_name = "ID")]
        ids: Vec<Id>,
        /// Print a JSON array of objects: id, time, seconds, sequence, shard, clock
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
    /// Print a shell completion script
    #[command(
        after_help = "Examples:\n  idutil completions bash > ~/.local/share/bash-completion/completions/idutil\n  \
                      idutil completions zsh > \"${fpath[1]}/_idutil\"\n  \
                      idutil completions fish > ~/.config/fish/completions/idutil.fish"
    )]
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of idutil or of one of its commands
    #[command(
        after_help = "Examples:\n  idutil man | man -l -\n  idutil man > idutil.1\n  idutil man decode > idutil-decode.1\n  \
                      idutil man state recover > idutil-state-recover.1"
    )]
    Man {
        /// A command whose page to print, such as `decode` or `state recover`
        /// (default: the page of idutil itself)
        #[arg(value_name = "COMMAND")]
        command: Vec<String>,
    },
}

#[derive(Subcommand)]
enum StateAction {
    /// Replace a damaged, lost or mismatched state file with one that resumes
    /// after everything the old file, the clock and --after account for;
    /// prints what it will do first
    #[command(
        after_help = "It refuses when it cannot know where to resume (no state file, or a \
                      high-water mark that cannot be read with certainty): pass --after with \
                      a time no ID of the shard is later than. It refuses a healthy file \
                      unless --force. The old file is kept as shard-N.state.bad.\n\n\
                      Examples:\n  idutil state recover --dry-run\n  idutil state recover\n  \
                      idutil --shard 3 --state-dir /var/lib/idutil state recover\n  \
                      idutil state recover --after 2030-01-01T02:00:00+02:00\n  \
                      idutil state recover --after 1893456000"
    )]
    Recover {
        /// A time you vouch for: no ID of the shard is later than it (Unix
        /// seconds or RFC 3339, any offset). Needed when the old high-water
        /// mark cannot be read or the file is gone
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        after: Option<u64>,
        /// Replace the state file even if it is healthy
        #[arg(long)]
        force: bool,
        /// Print what would be done, change nothing
        #[arg(long)]
        dry_run: bool,
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

/// Whole seconds, or a duration such as `90s`, `5m`, `1h 30m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| "too many digits".to_string());
    }
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("not seconds or a duration such as 90s or 5m: {e}"))?;
    Duration::try_from(d).map_err(|_| "negative".to_string())
}

fn main() -> ExitCode {
    log::set_logger(&StderrLogger).ok();
    log::set_max_level(log::LevelFilter::Warn);
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, &args),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<Interrupted>() {
            Some(stop) => {
                eprintln!("idutil: {stop}");
                ExitCode::from(stop.exit_status())
            }
            None => runtime_error(&*e),
        },
    }
}

/// Reports an error from running a command on one line of stderr. Settings
/// that cannot work (a shard out of range, an unusable environment variable)
/// are the caller's to fix, so they exit 2 like bad arguments; everything
/// else exits 1.
fn runtime_error(e: &(dyn std::error::Error + 'static)) -> ExitCode {
    if let Some(e) = e.downcast_ref::<CommandError>() {
        let (kind, code) = match e {
            CommandError::Usage(_) => ("usage error", 2),
            CommandError::Input(_) => ("bad input", 2),
            CommandError::Read(_) => ("error", 1),
        };
        eprintln!("idutil: {kind}: {}", one_line(&e.to_string()));
        return ExitCode::from(code);
    }
    let (kind, code) = match e.downcast_ref::<idutil::Error>() {
        Some(
            idutil::Error::ShardOutOfRange { .. }
            | idutil::Error::UnusableHostname { .. }
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
    let hint = e
        .downcast_ref::<idutil::Error>()
        .and_then(hint)
        .map(|h| format!("; {h}"))
        .unwrap_or_default();
    eprintln!("idutil: {kind}: {}{hint}", one_line(&e.to_string()));
    ExitCode::from(code)
}

/// The command's own advice for a library error: its flags and
/// sub-commands, which the library's messages do not know about.
fn hint(e: &idutil::Error) -> Option<String> {
    use idutil::state::Remedy;
    use idutil::Error;
    let recover = |path: &std::path::Path, shard: u32| {
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        format!(
            "idutil state recover --shard {shard} --state-dir {}",
            dir.display()
        )
    };
    match e {
        Error::ShardOutOfRange { .. } | Error::UnusableHostname { .. } | Error::Hostname(_) => {
            Some("the command also takes --shard N".into())
        }
        Error::BadState { path, shard, .. } => Some(format!("run: {}", recover(path, *shard))),
        Error::RecoveryRefused {
            path,
            shard,
            remedy,
            ..
        } => match remedy {
            Remedy::After => Some(format!("run: {} --after TIME", recover(path, *shard))),
            Remedy::Force => Some("pass --force to replace it anyway".into()),
            _ => None,
        },
        _ => None,
    }
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
/// error: clap's own message and tips on one line of stderr, pointing at
/// the help of the command it concerns, status 2.
fn usage_error(e: clap::Error, args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let (command, subcommands) = named_command(args);
    let reason = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // clap would print the whole help; one line names the choices.
        format!("a command is required: {}", subcommands.join(", "))
    } else {
        clap_reason(&e.render().to_string())
    };
    eprintln!("idutil: usage error: {reason} (see '{command} --help')");
    ExitCode::from(2)
}

/// clap's message and tips on one line. clap renders paragraphs: the error
/// (any list it names indented below it), its tips, then `Usage:` and a
/// pointer to `--help`; the last two give way to the pointer
/// [`usage_error`] adds.
fn clap_reason(rendered: &str) -> String {
    let reason = rendered
        .split("\n\n")
        .map(one_line)
        .filter(|p| {
            !p.is_empty() && !p.starts_with("Usage:") && !p.starts_with("For more information")
        })
        .collect::<Vec<_>>()
        .join("; ");
    match reason.strip_prefix("error: ").unwrap_or(&reason) {
        "" => "invalid usage".to_string(),
        reason => reason.to_string(),
    }
}

/// The command `args` name (`idutil state recover`), found by walking
/// clap's own command tree past options and their values, and the names of
/// its sub-commands.
fn named_command(args: &[OsString]) -> (String, Vec<String>) {
    let mut root = Cli::command();
    root.build();
    let mut path = vec![root.get_name().to_string()];
    let mut cmd = &root;
    let mut args = args.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(arg) = args.next() {
        let option = if arg == "--" {
            break;
        } else if let Some(long) = arg.strip_prefix("--") {
            cmd.get_arguments().find(|a| a.get_long() == Some(long))
        } else if let Some(short) = arg.strip_prefix('-') {
            let mut chars = short.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => cmd.get_arguments().find(|a| a.get_short() == Some(c)),
                _ => None,
            }
        } else {
            if let Some(sub) = cmd.find_subcommand(arg).filter(|s| s.get_name() != "help") {
                path.push(sub.get_name().to_string());
                cmd = sub;
            }
            None
        };
        // `--state-dir next` names a directory, not the command.
        if option.is_some_and(|o| o.get_action().takes_values()) {
            args.next();
        }
    }
    let subcommands = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_string())
        .collect();
    (path.join(" "), subcommands)
}

/// Errors of the command itself, beside the library's.
#[derive(Debug)]
enum CommandError {
    /// Bad usage found after parsing the arguments: status 2.
    Usage(String),
    /// A bad line on standard input: status 2.
    Input(String),
    /// Standard input could not be read: status 1.
    Read(io::Error),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Usage(reason) | CommandError::Input(reason) => f.write_str(reason),
            CommandError::Read(e) => write!(f, "cannot read standard input: {e}"),
        }
    }
}

impl std::error::Error for CommandError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommandError::Read(e) => Some(e),
            _ => None,
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), BoxError> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cli.command {
        Command::Next { n, json, max_lead } => next(&cli.common, n, json, max_lead, &mut out)?,
        Command::Decode { ids, json } if ids.is_empty() => {
            let stdin = io::stdin();
            if stdin.is_terminal() {
                return Err(CommandError::Usage(
                    "no IDs: give them as arguments, or one per line on standard input \
                     (see 'idutil decode --help')"
                        .to_string(),
                )
                .into());
            }
            decode_lines(stdin.lock(), json, &mut out)?
        }
        Command::Decode { ids, json } => decode(&ids, json, &mut out)?,
        Command::Completions { shell } => completions(shell, &mut out)?,
        Command::Man { command } => man(&command, &mut out)?,
        Command::State { json, action: None } => show_state(&cli.common, json, &mut out)?,
        Command::State {
            action:
                Some(StateAction::Recover {
                    after,
                    force,
                    dry_run,
                }),
            ..
        } => recover(&cli.common, after, force, dry_run, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// IDs per batch that `next` issues and prints: a signal or an error stops
/// it within one batch.
const CHUNK: u64 = 1024;
/// How often `next --max-lead` looks at the clock again while waiting.
const LEAD_POLL: Duration = Duration::from_millis(5);
/// How long after a signal `next` may take to stop on its own before the
/// signal thread closes the generator itself: a write blocked on a pipe
/// that nobody reads never returns.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// A run warns when it ends further than this ahead of the wall clock.
const LEAD_WARNING: u64 = 60;

/// `next` was stopped by a signal after saving its state.
#[derive(Debug)]
struct Interrupted(i32);

impl Interrupted {
    fn exit_status(&self) -> u8 {
        u8::try_from(128 + self.0).unwrap_or(1)
    }
}

impl Interrupted {
    fn name(&self) -> &'static str {
        match self.0 {
            SIGTERM => "SIGTERM",
            SIGINT => "SIGINT",
            SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.name();
        write!(
            f,
            "stopped by {name}: the IDs printed are complete lines, the exact last ID \
             issued is saved, and the next run continues right after it"
        )
    }
}

impl std::error::Error for Interrupted {}

fn next(
    common: &Common,
    n: u64,
    json: bool,
    max_lead: Option<Duration>,
    out: &mut impl Write,
) -> Result<(), BoxError> {
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
    if let Some(max_lead) = max_lead {
        builder = builder.max_lead(max_lead);
    }
    #[cfg(feature = "redis")]
    if let Some(lease) = common.lease() {
        builder = builder.redis_lease(lease);
    }
    // Caught from before the generator opens: a signal during the opening
    // waits in `signals` and stops the run before its first ID, with a
    // clean close.
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let generator = builder.open()?;
    let signal = AtomicI32::new(0);
    let signals_handle = signals.handle();
    let (done, finished) = mpsc::channel::<()>();
    let issued = thread::scope(|scope| {
        let (signals, signal, generator) = (&mut signals, &signal, &generator);
        scope.spawn(move || {
            if let Some(sig) = signals.forever().next() {
                signal.store(sig, SeqCst);
                if finished.recv_timeout(STOP_GRACE) == Err(RecvTimeoutError::Timeout) {
                    // Still stuck in a write nobody reads: every ID taken so
                    // far counts as issued, and the output may end mid-line.
                    let saved = generator.close();
                    eprintln!(
                        "idutil: stopped by {} while stuck writing the output, which may end \
                         in a cut line; every ID taken is saved as issued, and the next run \
                         continues after them",
                        Interrupted(sig).name()
                    );
                    if let Err(e) = saved {
                        eprintln!("idutil: error: {}", one_line(&e.to_string()));
                    }
                    std::process::exit(i32::from(Interrupted(sig).exit_status()));
                }
            }
        });
        let issued = issue(generator, n, json, signal, out).and_then(|()| Ok(out.flush()?));
        let _ = done.send(());
        signals_handle.close();
        issued
    });
    let lead = generator.lead();
    let closed = generator.close();
    issued?;
    closed?;
    if lead > LEAD_WARNING {
        let lead = jiff::SignedDuration::from_secs(i64::try_from(lead).unwrap_or(i64::MAX));
        log::warn!(
            "shard {} now runs {lead:#} ahead of the wall clock: one shard issues 65,536 IDs \
             per second and borrows later seconds beyond that. Spread the load over more \
             shards, or cap the lead with --max-lead",
            generator.shard(),
        );
    }
    match signal.load(SeqCst) {
        0 => Ok(()),
        sig => Err(Interrupted(sig).into()),
    }
}

/// Issues and prints `n` IDs, [`CHUNK`] at a time, until done or a signal
/// arrives.
fn issue(
    generator: &Generator,
    n: u64,
    json: bool,
    signal: &AtomicI32,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    if json {
        out.write_all(b"[")?;
    }
    let mut left = n;
    let mut first = true;
    while left > 0 {
        if signal.load(SeqCst) != 0 {
            // Whatever was printed is flushed by the caller; a JSON array
            // stays open, so it cannot pass for a complete one.
            return Ok(());
        }
        let k = left.min(CHUNK);
        let batch = match generator.try_next_ids(k) {
            Ok(batch) => batch,
            Err(idutil::Error::LeadCapReached { .. }) => {
                thread::sleep(LEAD_POLL);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for id in batch {
            if !json {
                writeln!(out, "{id}")?;
            } else if first {
                write!(out, "{id}")?;
                first = false;
            } else {
                write!(out, ",{id}")?;
            }
        }
        left -= k;
    }
    if json {
        out.write_all(b"]\n")?;
    }
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

/// One decoded ID, as `decode --json` prints it: the fields in this order.
#[derive(serde::Serialize)]
struct Decoded {
    id: u64,
    time: String,
    seconds: u64,
    sequence: u32,
    shard: u32,
    clock: u32,
}

impl Decoded {
    fn new(id: Id) -> Result<Decoded, idutil::Error> {
        let layout = Layout::DEFAULT;
        let p = layout.decode(id)?;
        Ok(Decoded {
            id: id.as_u64(),
            time: rfc3339(layout.epoch() + p.seconds),
            seconds: p.seconds,
            sequence: p.sequence,
            shard: p.shard,
            clock: p.clock,
        })
    }
}

/// Writes decoded IDs as they come: a line each, or the elements of one
/// JSON array, opened by the first and closed by [`DecodeOutput::finish`]
/// (so an error before the first ID leaves no output at all).
struct DecodeOutput<'a, W: Write> {
    out: &'a mut W,
    json: bool,
    rows: u64,
}

impl<'a, W: Write> DecodeOutput<'a, W> {
    fn new(out: &'a mut W, json: bool) -> Self {
        DecodeOutput { out, json, rows: 0 }
    }

    fn row(&mut self, id: Id) -> Result<(), BoxError> {
        let d = Decoded::new(id)?;
        if self.json {
            self.out
                .write_all(if self.rows == 0 { b"[" } else { b"," })?;
            serde_json::to_writer(&mut *self.out, &d)?;
        } else {
            writeln!(
                self.out,
                "id={} time={} seconds={} sequence={} shard={} clock={}",
                d.id, d.time, d.seconds, d.sequence, d.shard, d.clock
            )?;
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(self) -> io::Result<()> {
        match (self.json, self.rows) {
            (false, _) => Ok(()),
            (true, 0) => self.out.write_all(b"[]\n"),
            (true, _) => self.out.write_all(b"]\n"),
        }
    }
}

fn decode(ids: &[Id], json: bool, out: &mut impl Write) -> Result<(), BoxError> {
    let mut output = DecodeOutput::new(out, json);
    for &id in ids {
        output.row(id)?;
    }
    output.finish()?;
    Ok(())
}

/// The longest line `decode` reads from standard input; an ID has at most
/// 16 digits, so a longer line is not an ID, and memory stays bounded.
const MAX_LINE: usize = 4096;

/// Decodes IDs from `input`, one per line, as `decode --help` describes: a
/// bad line stops with its number; the lines before it are already out.
fn decode_lines(mut input: impl BufRead, json: bool, out: &mut impl Write) -> Result<(), BoxError> {
    let mut output = DecodeOutput::new(out, json);
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        let limit = (MAX_LINE + 1) as u64;
        let read = (&mut input)
            .take(limit)
            .read_until(b'\n', &mut line)
            .map_err(CommandError::Read)?;
        if read == 0 {
            break;
        }
        let bad = |reason: String| CommandError::Input(format!("line {number}: {reason}"));
        if line.last() != Some(&b'\n') && line.len() > MAX_LINE {
            return Err(bad(format!("longer than {MAX_LINE} bytes, not an ID")).into());
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| bad("not valid UTF-8".to_string()))?
            .trim();
        if text.is_empty() {
            continue;
        }
        let id: Id = text
            .parse()
            .map_err(|e: idutil::IdError| bad(e.to_string()))?;
        output.row(id)?;
    }
    output.finish()?;
    Ok(())
}

fn completions(shell: clap_complete::Shell, out: &mut impl Write) -> Result<(), BoxError> {
    // clap_complete panics when a write fails; writing to memory cannot,
    // and the real write below reports its error like any other output.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "idutil", &mut script);
    out.write_all(&script)?;
    Ok(())
}

/// The manual page of `idutil` or of the command `path` names
/// (`["state", "recover"]`).
fn man(path: &[String], out: &mut impl Write) -> Result<(), BoxError> {
    let mut cmd = Cli::command();
    cmd.build();
    for name in path {
        let known = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .map(|s| s.get_name().to_string())
            .collect::<Vec<_>>();
        let Some(sub) = cmd.find_subcommand(name).filter(|s| s.get_name() != "help") else {
            let within = cmd
                .get_display_name()
                .unwrap_or(cmd.get_name())
                .replace('-', " ");
            let reason = match known.is_empty() {
                true => format!("'{within}' has no commands, so no page for '{name}'"),
                false => format!(
                    "'{within}' has no command '{name}' (its commands: {})",
                    known.join(", ")
                ),
            };
            return Err(CommandError::Usage(format!("{reason} (see 'idutil man --help')")).into());
        };
        cmd = sub.clone();
    }
    let mut page = Vec::new();
    let source = format!("idutil {}", env!("CARGO_PKG_VERSION"));
    clap_mangen::Man::new(cmd)
        .source(source)
        .render(&mut page)?;
    out.write_all(&page)?;
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
                    "invalid": l.invalid,
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

fn recover(
    common: &Common,
    after: Option<u64>,
    force: bool,
    dry_run: bool,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let (shard, dir) = shard_and_dir(common)?;
    let mut options = RecoverOptions::new().force(force).window(DEFAULT_WINDOW);
    if let Some(after) = after {
        options = options.after(after);
    }
    let r = state::plan_recovery(&dir, shard, &Layout::DEFAULT, &options)?;
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
        r.window,
        r.clock_id
    )?;
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
