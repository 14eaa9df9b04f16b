//! The `idutil` command: issue, decode and inspect IDs from a shell.

mod args;
mod decode;
#[cfg(lease)]
mod lease;
mod manual;
mod next;
mod report;
mod state;
mod times;

use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command, StateAction};
use crate::decode::{decode, decode_lines};
use crate::manual::{completions, man};
use crate::next::{next, Interrupted};
use crate::report::stdout_was_closed;
use crate::report::{is_broken_pipe, runtime_error, usage_error, CommandError, StderrLogger};
use crate::state::{recover, show_state};

fn main() -> ExitCode {
    let stdout_closed = stdout_was_closed();
    log::set_logger(&StderrLogger).ok();
    log::set_max_level(log::LevelFilter::Warn);
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, &args),
    };
    if stdout_closed
        && !matches!(
            cli.command,
            Command::State {
                action: Some(_),
                ..
            }
        )
    {
        // Nothing is issued: every ID printed would be lost.
        let closed = io::Error::other("standard output is closed, so the output would be lost");
        return runtime_error(&closed, None);
    }
    let state_dir_from = cli.common.state_dir_setting();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<Interrupted>() {
            Some(stop) => {
                report::say!("idutil: {stop}");
                ExitCode::from(stop.exit_status())
            }
            None => runtime_error(&*e, state_dir_from),
        },
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), BoxError> {
    #[cfg(not(lease))]
    cli.common.refuse_lease(matches!(
        cli.command,
        Command::Next { .. } | Command::State { action: None, .. }
    ))?;
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
            decode_lines(stdin.lock(), json, cli.common.layout(), &mut out)?
        }
        Command::Decode { ids, json } => decode(&ids, json, cli.common.layout(), &mut out)?,
        #[cfg(lease)]
        Command::Lease {
            action: args::LeaseAction::Check { url, json },
        } => lease::check(&cli.common, url.as_deref(), json, &mut out)?,
        #[cfg(lease)]
        Command::Lease {
            action: args::LeaseAction::Release,
        } => lease::release(&cli.common, &mut out)?,
        #[cfg(feature = "postgres-lease")]
        Command::Lease {
            action:
                args::LeaseAction::Sql {
                    url,
                    name,
                    uninstall,
                    apply,
                },
        } => lease::sql(
            &cli.common,
            url.as_deref(),
            &name,
            (uninstall, apply),
            &mut out,
        )?,
        Command::Completions { shell } => completions(shell, &mut out)?,
        Command::Man { command } => man(&command, &mut out)?,
        Command::State { json, action: None } => show_state(&cli.common, json, &mut out)?,
        Command::State {
            action:
                Some(StateAction::Recover {
                    after,
                    unused_from,
                    unused_to,
                    force,
                    dry_run,
                }),
            ..
        } => {
            let unused = unused_from.zip(unused_to);
            recover(&cli.common, after, unused, force, dry_run, &mut out)?
        }
    }
    out.flush()?;
    Ok(())
}
