//! A throwaway PostgreSQL server for the database tests: a fresh cluster in
//! a temporary directory, run as an unprivileged user (`nobody` when the
//! tests run as root, which PostgreSQL refuses to be), listening only on a
//! Unix socket in that directory, and stopped when dropped.
//!
//! It needs PostgreSQL's server programs (`initdb`, `postgres`,
//! `pg_isready`): on the PATH, or under `/usr/lib/postgresql/*/bin` as
//! Debian's `postgresql` package installs them. Without them
//! [`Postgres::start`] prints a loud notice and returns `None`, except under
//! `CI=true`, where it panics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Only names the socket file, `.s.PGSQL.5432`: there is no TCP listener.
const PORT: u16 = 5432;

/// The tests' server: durability is not what they measure.
const TEST_SETTINGS: &[(&str, &str)] = &[
    ("fsync", "off"),
    ("max_connections", "20"),
    ("shared_buffers", "16MB"),
];

/// The benchmark's server: see [`Postgres::start_for_benchmark`].
const BENCHMARK_SETTINGS: &[(&str, &str)] = &[
    ("fsync", "on"),
    ("synchronous_commit", "on"),
    ("full_page_writes", "on"),
    ("shared_buffers", "128MB"),
    ("max_connections", "30"),
    // Checkpoints on their default schedule (5 min, 1 GB of WAL): a long
    // run of inserts pays for them as a real server does.
    ("checkpoint_timeout", "5min"),
    ("max_wal_size", "1GB"),
    // No background vacuum or analysis during a measurement.
    ("autovacuum", "off"),
];

/// A running server, stopped (fast shutdown) and deleted when dropped.
pub struct Postgres {
    child: Option<Child>,
    socket_dir: PathBuf,
    log: PathBuf,
    // Last, so the files go after the server has stopped.
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// Starts a server, or returns `None` after a loud notice when
    /// PostgreSQL is not installed (a panic under `CI=true`).
    pub fn start() -> Option<Postgres> {
        Postgres::start_with_settings(TEST_SETTINGS)
    }

    /// Starts a server configured for measuring, not for testing: every
    /// commit flushed to disk (`fsync`, `synchronous_commit` and full-page
    /// writes on, PostgreSQL's defaults), a 128 MB buffer cache (the
    /// default: an index larger than that is read from the disk), and
    /// connections for a pool of clients. Returns `None` when PostgreSQL is
    /// not installed, as [`Postgres::start`] does.
    pub fn start_for_benchmark() -> Option<Postgres> {
        Postgres::start_with_settings(BENCHMARK_SETTINGS)
    }

    fn start_with_settings(settings: &[(&str, &str)]) -> Option<Postgres> {
        let Some(bin) = find_bindir() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "PostgreSQL's server programs (initdb, postgres) are not installed, \
                     and CI=true requires the PostgreSQL tests"
                );
            }
            crate::skip::skipped(format_args!(
                "\n*** SKIPPED: PostgreSQL (initdb, postgres) was not found on the PATH \
                 or under /usr/lib/postgresql/*/bin, so IDs were NOT checked against a \
                 real PostgreSQL server. Install Debian's `postgresql` package (as \
                 .ci/run does) to run this test. ***\n"
            ));
            return None;
        };
        Some(Postgres::start_with(&bin, settings))
    }

    fn start_with(bin: &Path, settings: &[(&str, &str)]) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("idutil-pg")
            .tempdir()
            .expect("a temporary directory");
        let user = Unprivileged::current();
        user.give(dir.path());
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("socket");
        let log = dir.path().join("server.log");
        std::fs::create_dir(&socket_dir).unwrap();
        user.give(&socket_dir);

        let out = user
            .command(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let log_file = std::fs::File::create(&log).unwrap();
        user.give(&log);
        let child = user
            .command(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&socket_dir)
            .args(["-p", &PORT.to_string()])
            // No TCP at all.
            .args(["-c", "listen_addresses="])
            .args(
                settings
                    .iter()
                    .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")]),
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start postgres");
        let mut server = Postgres {
            child: Some(child),
            socket_dir,
            log,
            _dir: dir,
        };
        server.wait_ready(bin);
        server
    }

    fn wait_ready(&mut self, bin: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("postgres exited ({status}) at start: {}", self.log_text());
            }
            let ready = Command::new(bin.join("pg_isready"))
                .arg("-h")
                .arg(&self.socket_dir)
                .args(["-p", &PORT.to_string(), "-t", "1", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "postgres was not ready within {START_TIMEOUT:?}: {}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// A URL for sqlx: database `postgres`, user `postgres`, over the socket.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@localhost:{PORT}/postgres?host={}",
            self.socket_dir.display()
        )
    }

    /// A libpq connection string (diesel): the same database over the socket.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={PORT} user=postgres dbname=postgres",
            self.socket_dir.display()
        )
    }

    /// What the server logged, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGINT is PostgreSQL's fast shutdown: it ends the sessions and
        // stops cleanly, so nothing is left running after the tests.
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The user the server runs as: `nobody` when the tests run as root
/// (PostgreSQL refuses root), else the current user.
struct Unprivileged {
    /// `(uid, gid)` to switch to, when running as root.
    ids: Option<(u32, u32)>,
}

impl Unprivileged {
    fn current() -> Unprivileged {
        if !rustix::process::geteuid().is_root() {
            return Unprivileged { ids: None };
        }
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, "nobody"])
                .output()
                .expect("run id");
            assert!(out.status.success(), "there is no user `nobody`");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("a numeric id")
        };
        Unprivileged {
            ids: Some((id("-u"), id("-g"))),
        }
    }

    /// Makes `path` the user's.
    fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        }
    }

    /// A command that runs `program` as the user (`setpriv` execs it, so
    /// the child's pid is the program's own).
    fn command(&self, program: &Path) -> Command {
        match self.ids {
            None => Command::new(program),
            Some((uid, gid)) => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(program)
                    .env("HOME", "/");
                command
            }
        }
    }
}

/// The directory holding `initdb`, `postgres` and `pg_isready`: the PATH
/// first, then Debian's versioned directories, newest first.
fn find_bindir() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|d| complete(d)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| complete(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}
