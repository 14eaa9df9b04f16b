//! `idutil completions` and `idutil man`: shell completions and manual pages.

use std::io::Write;

use clap::CommandFactory;

use crate::args::Cli;
use crate::report::CommandError;
use crate::BoxError;

pub(crate) fn completions(
    shell: clap_complete::Shell,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    // clap_complete panics when a write fails; writing to memory cannot,
    // and the real write below reports its error like any other output.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "idutil", &mut script);
    out.write_all(&script)?;
    Ok(())
}

/// The manual page of `idutil` or of the command `path` names
/// (`["state", "recover"]`).
pub(crate) fn man(path: &[String], out: &mut impl Write) -> Result<(), BoxError> {
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
