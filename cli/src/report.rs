//! How errors and warnings reach stderr, one line each, and the exit status.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;
use idutil::state::Remedy;
use idutil::Error;

use crate::args::Cli;
use crate::BoxError;

/// Writes one line to stderr. An unwritable stderr (closed, full) loses
/// the line, never the exit status: `eprintln!` would panic instead.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use say;

/// Whether the command was started with standard output closed
/// (`idutil next >&-`): every ID it printed would be lost, so it refuses to
/// issue. The Rust runtime opens `/dev/null` read-write on a standard
/// descriptor that is closed at start-up (so that no file the command
/// opens takes its number), which tells it from a shell's `>/dev/null`
/// (write-only). Linux only (`/proc/self`); elsewhere, `false`.
pub(crate) fn stdout_was_closed() -> bool {
    #[cfg(target_os = "linux")]
    {
        let null = std::fs::read_link("/proc/self/fd/1")
            .is_ok_and(|target| target == Path::new("/dev/null"));
        let read_write = std::fs::read_to_string("/proc/self/fdinfo/1").is_ok_and(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
                .is_some_and(|flags| flags & 0o3 == 0o2)
        });
        null && read_write
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Reports an error from running a command on one line of stderr. Settings
/// that cannot work (a shard out of range, an unusable environment variable,
/// a state directory that cannot be one) are the caller's to fix, so they
/// exit 2 like bad arguments; everything else exits 1. `state_dir_from` is
/// the setting that named the state directory, if one did
/// ([`Common::state_dir_setting`](crate::args::Common::state_dir_setting)).
pub(crate) fn runtime_error(
    e: &(dyn std::error::Error + 'static),
    state_dir_from: Option<&str>,
) -> ExitCode {
    if let Some(e) = e.downcast_ref::<CommandError>() {
        let (kind, code) = match e {
            CommandError::Usage(_) => ("usage error", 2),
            CommandError::Input(_) => ("bad input", 2),
            CommandError::Read(_) => ("error", 1),
        };
        say!("idutil: {kind}: {}", one_line(&e.to_string()));
        return ExitCode::from(code);
    }
    let (kind, code) = match e.downcast_ref::<Error>() {
        Some(
            Error::ShardOutOfRange { .. }
            | Error::UnusableHostname { .. }
            | Error::InvalidEnv { .. }
            | Error::InvalidIdSpace { .. }
            | Error::RelativeStateDir { .. }
            | Error::UnusableStateDir { .. }
            | Error::NoStateDir,
        ) => ("usage error", 2),
        Some(_) => ("error", 1),
        // The library reports its own I/O as `idutil::Error`: a bare I/O
        // error comes from writing the output.
        None if e.is::<io::Error>() || e.is::<serde_json::Error>() => {
            let reason = one_line(&e.to_string());
            say!("idutil: error: cannot write the output: {reason}");
            return ExitCode::FAILURE;
        }
        None => ("error", 1),
    };
    let hint = e
        .downcast_ref::<Error>()
        .and_then(|e| hint(e, state_dir_from))
        .map(|h| format!("; {h}"))
        .unwrap_or_default();
    say!("idutil: {kind}: {}{hint}", one_line(&e.to_string()));
    ExitCode::from(code)
}

/// The command's own advice for a library error: its flags and
/// sub-commands, which the library's messages do not know about, and the
/// setting that named a state directory that cannot be one.
fn hint(e: &Error, state_dir_from: Option<&str>) -> Option<String> {
    match e {
        Error::RelativeStateDir { .. } | Error::UnusableStateDir { .. } => Some(format!(
            "the state directory was named by {}",
            state_dir_from?
        )),
        Error::ShardOutOfRange { .. } | Error::UnusableHostname { .. } | Error::Hostname(_) => {
            Some("the command also takes --shard N".into())
        }
        Error::DefaultStateDir { .. } => Some("the command also takes --state-dir DIR".into()),
        // A state file that cannot be trusted, or a recovery refused.
        _ => {
            let recover = || {
                let dir = e.path()?.parent().unwrap_or(Path::new("."));
                Some(format!(
                    "idutil state recover --shard {} --state-dir {}",
                    e.shard()?,
                    dir.display()
                ))
            };
            match e.remedy()? {
                Remedy::Recover => Some(format!("run: {}", recover()?)),
                Remedy::After => Some(format!("run: {} --after TIME", recover()?)),
                Remedy::Force => Some("pass --force".into()),
                _ => None,
            }
        }
    }
}

/// `text` with its lines joined, so an error is always one line.
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Help and version go to stdout with status 0; anything else is a usage
/// error: clap's own message and tips on one line of stderr, pointing at
/// the help of the command it concerns, status 2.
pub(crate) fn usage_error(e: clap::Error, args: &[OsString]) -> ExitCode {
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
    let reason = cut_long_arguments(reason, args);
    say!("idutil: usage error: {reason} (see '{command} --help')");
    ExitCode::from(2)
}

/// The longest argument a usage error quotes whole; a longer one is cut to
/// its first [`IdError::MAX_INPUT`](idutil::IdError::MAX_INPUT) characters
/// and its length, as a rejected ID read from standard input is, so junk on
/// the command line never comes back to the terminal or a log whole.
const MAX_QUOTED: usize = 64;

/// `reason` with every argument longer than [`MAX_QUOTED`] bytes that it
/// quotes cut short.
fn cut_long_arguments(mut reason: String, args: &[OsString]) -> String {
    for arg in args {
        let arg = arg.to_string_lossy();
        if arg.len() <= MAX_QUOTED || !reason.contains(arg.as_ref()) {
            continue;
        }
        let keep = arg
            .char_indices()
            .nth(idutil::IdError::MAX_INPUT)
            .map_or(arg.len(), |(i, _)| i);
        let cut = format!("{}... ({} bytes)", &arg[..keep], arg.len());
        reason = reason.replace(arg.as_ref(), &cut);
    }
    reason
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
pub(crate) enum CommandError {
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

pub(crate) fn is_broken_pipe(e: &BoxError) -> bool {
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
pub(crate) struct StderrLogger;

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
            say!("idutil: {level}: {}", record.args());
        }
    }
    fn flush(&self) {}
}
