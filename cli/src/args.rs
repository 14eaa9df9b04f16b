//! The command line: the commands, their flags and the parsers of their values.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use idutil::{Id, Layout};

#[cfg(not(lease))]
use crate::report::CommandError;
use crate::times::parse_time;

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
                  IDUTIL_STATE_DIR (else $XDG_STATE_HOME/idutil or ~/.local/state/idutil, \
                  created with its parents; a named state directory is created only when its \
                  parent exists), \
                  IDUTIL_ID_SPACE (else \"default\").\n\n\
                  Exit status: 0 on success; 2 on bad usage or bad input (arguments, IDs on \
                  standard input, or an unusable IDUTIL_SHARD, IDUTIL_STATE_DIR, \
                  IDUTIL_ID_SPACE or host-name shard, such as a state directory that is not \
                  a directory or whose parent is missing); 1 on any other error. \
                  Every error is one line on stderr; output cut short by an error is \
                  incomplete, whatever it looks like."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Args)]
pub(crate) struct Common {
    /// Shard to use, 0 to 31 (more with --layout) (default: IDUTIL_SHARD, else the host name's
    /// trailing digits)
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true,
          value_parser = parse_shard)]
    pub(crate) shard: Option<u32>,
    /// Layout of the IDs, e.g. "seconds:32 clock:0 sequence:11 shard:10 epoch:946684800" for
    /// 1,024 shards of 2,048 IDs a second (default: IDUTIL_LAYOUT, else seconds:32 clock:0
    /// sequence:16 shard:5 epoch:946684800)
    #[arg(long, global = true, value_name = "LAYOUT", env = idutil::env::LAYOUT,
          value_parser = parse_layout)]
    pub(crate) layout: Option<Layout>,
    /// State directory, an absolute path, created if missing when its parent exists (default:
    /// IDUTIL_STATE_DIR, else the platform's state directory)
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// ID space: on a host, one state directory per shard and ID space, shared by the
    /// processes that open it; generators whose IDs share a table must share one (default:
    /// IDUTIL_ID_SPACE, else "default")
    #[arg(long, global = true, value_name = "NAME", value_parser = parse_id_space)]
    pub(crate) id_space: Option<String>,
    /// Lease the shard from this store instead: postgres://user@host/db (several hosts:
    /// postgres://a,b/db?target_session_attrs=read-write) or redis://host:port/db; with
    /// --shard, lease only that shard. `state` then shows the leases
    #[cfg(lease)]
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = idutil::env::LEASE_URL,
        hide_env_values = true,
        value_parser = parse_lease_url
    )]
    lease: Option<String>,
    /// Without a lease engine, `--lease` is taken only to be refused with
    /// what to build ([`Common::refuse_lease`]), not as an unknown argument.
    #[cfg(not(lease))]
    #[arg(long, global = true, hide = true, value_name = "URL")]
    lease: Option<std::ffi::OsString>,
}

impl Common {
    /// The lease settings, when `--lease` or `IDUTIL_LEASE_URL` is given.
    #[cfg(lease)]
    pub(crate) fn lease(&self) -> Option<idutil::lease::LeaseConfig> {
        self.lease.as_deref().map(idutil::lease::LeaseConfig::new)
    }

    /// Refuses a lease asked for from a build without a lease engine:
    /// `--lease` for any command, `IDUTIL_LEASE_URL` for those a lease
    /// would change (`next`, `state`), one message for both.
    #[cfg(not(lease))]
    pub(crate) fn refuse_lease(&self, uses_lease: bool) -> Result<(), CommandError> {
        let setting = if self.lease.is_some() {
            "--lease"
        } else if uses_lease && std::env::var_os(idutil::env::LEASE_URL).is_some() {
            idutil::env::LEASE_URL
        } else {
            return Ok(());
        };
        Err(CommandError::Usage(format!(
            "{setting} asks for a lease, but this build of idutil has no lease engine \
             (cargo features `postgres-lease`, `redis`); build it with one (cargo install \
             idutil-cli --features postgres-lease,redis), or drop {setting}"
        )))
    }

    /// The setting that names the state directory: `--state-dir`, else
    /// `IDUTIL_STATE_DIR` when set, else none (the platform's default).
    pub(crate) fn state_dir_setting(&self) -> Option<&'static str> {
        if self.state_dir.is_some() {
            Some("--state-dir")
        } else if std::env::var_os(idutil::env::STATE_DIR).is_some() {
            Some(idutil::env::STATE_DIR)
        } else {
            None
        }
    }

    /// The layout: `--layout`, `IDUTIL_LAYOUT`, or the default.
    pub(crate) fn layout(&self) -> Layout {
        self.layout.unwrap_or_default()
    }
}

/// A lease URL, trimmed; empty or blank is refused rather than taken to
/// turn the lease off (the shard would silently come from elsewhere).
#[cfg(lease)]
fn parse_lease_url(s: &str) -> Result<String, String> {
    let url = s.trim();
    if url.is_empty() {
        return Err(format!(
            "the lease URL is empty or blank; give postgres://user@host/db or \
             redis://host:port/db, or unset {}",
            idutil::env::LEASE_URL
        ));
    }
    Ok(url.to_string())
}

/// A shard number; the layout (which may be wider than the default's 32
/// shards) is checked when the generator opens.
fn parse_shard(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= 0xFFFF)
        .ok_or_else(|| {
            format!(
                "{s:?} is not a shard: shards are 0..={} in the default layout (up to \
                 0..=65535 with --layout)",
                Layout::DEFAULT.max_shard()
            )
        })
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    s.parse::<Layout>().map_err(|e| e.to_string())
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        after_help = "Without ID arguments, reads IDs from standard input: words separated \
                      by whitespace, commas and square brackets, each an ID, bare or in double \
                      quotes; so one ID per line, and the JSON array of 'idutil next --json', \
                      both work. A bad word stops decoding with 'line N: <reason>' and exit \
                      status 2; the IDs before it have been printed (with --json, in an array left \
                      unclosed, so it cannot pass for a complete one). Empty input prints \
                      nothing ([] with --json).\n\n\
                      Examples:\n  idutil decode 1452736581206048\n  idutil decode --json $(idutil next -n 3)\n  \
                      idutil next -n 2 | idutil decode\n  idutil next -n 2 --json | idutil decode\n  idutil decode --json < ids.txt"
    )]
    Decode {
        /// IDs: decimal integers from 0 to 9007199254740991 (default: standard input)
        #[arg(allow_negative_numbers = true, value_name = "ID")]
        ids: Vec<Id>,
        /// Print a JSON array of objects: id, time, unix_seconds, sequence, shard, clock
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
    /// Audit a lease store, free a shard's lease that never expires by itself, or print the
    /// SQL that makes the database a holder
    #[cfg(lease)]
    #[command(
        after_help = "Examples:\n  idutil lease check postgres://app@db/app\n  \
                      IDUTIL_LEASE_URL=postgres://app@db/app idutil lease check --json\n  \
                      idutil lease release --shard 3          # IDUTIL_LEASE_URL set\n  \
                      idutil --lease postgres://app@db/app lease release --shard 3\n  \
                      idutil lease sql --shard 31 > migrations/0007_idutil.sql"
    )]
    Lease {
        #[command(subcommand)]
        action: LeaseAction,
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

#[cfg(lease)]
#[derive(Subcommand)]
pub(crate) enum LeaseAction {
    /// Audit the store: durability settings, standbys and the synchronous setup, a pooler in
    /// front, the schema and search path, privileges, clock skew, rows that never expire and
    /// free shards (PostgreSQL); persistence, eviction, replicas and theirs, DEBUG, clock skew,
    /// records to settle and free shards (Redis)
    #[command(
        after_help = "Prints one line per finding: ok, warn or fail, the topic, and what to \
                      change. Exit status 1 when a line says fail. With --shard, only that \
                      shard counts as the range; with --layout, the layout the fleet uses.\n\n\
                      Examples:\n  idutil lease check postgres://app@db/app\n  \
                      idutil lease check 'postgres://app@db/app?schema=ids&replication=strict'\n  \
                      idutil lease check redis://127.0.0.1:6379/\n  \
                      IDUTIL_LEASE_URL=postgres://app@db/app idutil lease check --json"
    )]
    Check {
        /// The store (default: --lease, else IDUTIL_LEASE_URL)
        #[arg(value_name = "URL", value_parser = parse_lease_url)]
        url: Option<String>,
        /// Print a JSON array of objects: verdict, topic, text
        #[arg(long)]
        json: bool,
    },
    /// Free the lease of --shard if it never expires by itself (expires_at
    /// 'infinity' or more than a day ahead, as a row edited by hand leaves
    /// it) or has expired; the shard's mark is kept, so its next holder
    /// resumes after every ID it issued
    #[command(
        after_help = "A live lease (one that expires within a day) is refused: it comes free \
                      by itself once its holder stops renewing. The shard's fencing epoch is \
                      raised, so a holder still writing under the old lease stops at its \
                      next write. 'idutil state' shows each lease's expiry; the error of a \
                      generator that finds no free shard names the stuck ones.\n\n\
                      Examples:\n  idutil lease release --shard 3          # IDUTIL_LEASE_URL set\n  \
                      idutil --lease postgres://app@db/app lease release --shard 3"
    )]
    Release,
    /// Print (or run, with --apply) the SQL that makes PostgreSQL itself hold --shard and
    /// hand out its IDs to any writer: DEFAULT idutil_next_id()
    #[cfg(feature = "postgres-lease")]
    #[command(
        after_help = "The script creates the lease tables if missing, takes the shard's row \
                      (refused while a live holder has it), and creates the counter and the \
                      functions NAME_next_id(), NAME_time(id), NAME_min_at(t) and \
                      NAME_max_at(t) in the lease's schema (the URL's schema=). Rust holders \
                      never take the shard while it is installed. Run it in one transaction; \
                      running it again changes nothing but the functions. --uninstall prints \
                      the script that records the counter's last ID in the row and gives the \
                      shard back.\n\n\
                      Examples:\n  idutil lease sql --shard 31 > migrations/0007_idutil.sql\n  \
                      idutil lease sql --shard 31 | psql -1 -v ON_ERROR_STOP=1 \"$DATABASE_URL\"\n  \
                      idutil --lease postgres://app@db/app lease sql --shard 31 --apply\n  \
                      idutil lease sql --uninstall --apply postgres://app@db/app"
    )]
    Sql {
        /// The database (default: --lease, else IDUTIL_LEASE_URL); only its schema= is read
        /// unless --apply
        #[arg(value_name = "URL", value_parser = parse_lease_url)]
        url: Option<String>,
        /// The functions' names start with NAME_ (another name per ID space in one schema)
        #[arg(long, value_name = "NAME", default_value = "idutil")]
        name: String,
        /// The script that gives the shard back instead
        #[arg(long)]
        uninstall: bool,
        /// Run the script on the database, in one transaction, instead of printing it
        #[arg(long)]
        apply: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum StateAction {
    /// Replace a damaged, lost or mismatched state file with one that resumes
    /// after everything the old file, the clock and --after account for;
    /// prints what it will do first
    #[command(
        after_help = "It refuses when it cannot know where to resume (no state file, or a \
                      high-water mark that cannot be read with certainty): pass --after with \
                      a time no ID of the shard is later than. It refuses a healthy file \
                      unless --force. The old file is kept as shard-N.state.bad.\n\n\
                      Exit status: 0 when it recovered the file, or with --dry-run printed \
                      the plan or found the file healthy (nothing to recover); 1 when it \
                      refuses or fails.\n\n\
                      Examples:\n  idutil state recover --dry-run\n  idutil state recover\n  \
                      idutil --shard 3 --state-dir /var/lib/idutil state recover\n  \
                      idutil state recover --after 2030-01-01T02:00:00+02:00\n  \
                      idutil state recover --after 1893456000"
    )]
    Recover {
        /// A time you vouch for: no ID of the shard is later than it (Unix
        /// seconds, RFC 3339 with any offset, or `now`). Needed when the old high-water
        /// mark cannot be read or the file is gone
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        after: Option<u64>,
        /// With --unused-to: a time from which you vouch that no ID of the
        /// shard has a second up to --unused-to, because a clock far ahead
        /// skipped it. The shard comes back before it; the IDs issued far
        /// ahead are passed over when the shard gets there
        #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "unused_to")]
        unused_from: Option<u64>,
        /// The end (not included) of the interval --unused-from starts
        #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "unused_from")]
        unused_to: Option<u64>,
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
    let out_of_range = || format!("must be from 0 to {MAX_N}");
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("not a whole number; {}", out_of_range()));
    }
    match s.parse::<u64>() {
        Ok(n) if n <= MAX_N => Ok(n),
        _ => Err(out_of_range()),
    }
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
