//! Tools a test needs from the system (libfaketime), and loud notices when they are missing.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Command;

/// Every skip of the suite goes through here. It says that a test skipped
/// what it could not run (a tool, a device or a privilege it lacks), on
/// stderr past libtest's capture (which hides `eprintln!` of a passing
/// test), so a plain `cargo test` shows it. Under `CI=true` (which `.ci/run`
/// sets) a skip is a failure instead: CI runs every test, so what a test
/// lacks there must be installed, not passed over.
#[track_caller]
pub fn skipped(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}\nCI=true: a test may not skip under CI; give it what it needs");
    }
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// libfaketime, preloaded into a command to move its wall clock.
pub struct Faketime {
    lib: PathBuf,
}

impl Faketime {
    /// `program` with its clock set by `spec`, in libfaketime's `FAKETIME`
    /// format (as `faketime -f` takes it): `@2140-01-01 00:00:00` starts the
    /// clock there, `-1h` or `+400000000000` shifts it.
    ///
    /// The library is preloaded directly, not through the `faketime`
    /// wrapper: the wrapper keeps a semaphore and shared memory named after
    /// its pid in /dev/shm, leaves them behind when it does not exit
    /// cleanly, and then fails ("sem_open: File exists") in a later run
    /// that reuses the pid.
    pub fn command(&self, spec: &str, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.apply(&mut cmd, spec);
        cmd
    }

    /// Sets `cmd`'s wall clock by `spec`, as [`Faketime::command`] does; its
    /// monotonic clock is left alone.
    pub fn apply(&self, cmd: &mut Command, spec: &str) {
        for (name, value) in self.environment(spec) {
            cmd.env(name, value);
        }
    }

    /// The environment [`Faketime::apply`] sets, as `(name, value)` pairs:
    /// for a program started by another (`env NAME=VALUE... program`),
    /// when the library must not be loaded into the starter too.
    pub fn environment(&self, spec: &str) -> [(&'static str, OsString); 3] {
        [
            ("LD_PRELOAD", self.lib.clone().into_os_string()),
            ("FAKETIME", spec.into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }
}

/// Where Debian's `faketime` package (and a local build) put libfaketime.
fn find_libfaketime() -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/lib"), PathBuf::from("/usr/local/lib")];
    // Multiarch directories: /usr/lib/x86_64-linux-gnu and the like.
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with("-linux-gnu")),
        );
    }
    dirs.into_iter()
        .map(|d| d.join("faketime/libfaketime.so.1"))
        .find(|lib| lib.is_file())
}

/// libfaketime, or `None` after a loud [`skipped`].
pub fn faketime() -> Option<Faketime> {
    if let Some(lib) = find_libfaketime() {
        return Some(Faketime { lib });
    }
    skipped(format_args!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: libfaketime is not installed, so the clock rollback of\n\
         !!! the real binary is NOT tested. Install it: apt-get install faketime\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}

/// A command-line tool from the system (`strace`, `setpriv`, `flock`), or
/// `None` after a loud [`skipped`] saying what is not tested.
pub fn tool(name: &str, package: &str, untested: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_some() {
        return found;
    }
    skipped(format_args!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: {name} is not installed, so {untested} is NOT tested.\n\
         !!! Install it: apt-get install {package}\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}
