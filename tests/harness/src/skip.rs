//! Tools a test needs from the system (`faketime`), and loud notices when they are missing.

use std::process::{Command, Stdio};

/// Says that a test skipped what it could not run, on stderr past libtest's
/// capture (which hides `eprintln!` of a passing test), so a plain
/// `cargo test` shows it.
pub fn skipped(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// `faketime`, or `None` after a loud skip message; under CI its absence
/// is a failure.
pub fn faketime() -> Option<&'static str> {
    let found = Command::new("faketime")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return Some("faketime");
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("faketime is not on PATH; CI must install it (apt-get install faketime)");
    }
    skipped(format_args!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: faketime is not on PATH, so the clock rollback of the\n\
         !!! real binary is NOT tested. Install it: apt-get install faketime\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}
