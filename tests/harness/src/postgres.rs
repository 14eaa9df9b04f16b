//! A throwaway PostgreSQL server for the database tests: a fresh cluster in
//! a temporary directory, run as an unprivileged user (`nobody` when the
//! tests run as root, which PostgreSQL refuses to be), listening on a Unix
//! socket in that directory (and, for the lease tests, on a loopback TCP
//! port), and stopped when dropped. The lease tests also kill it
//! (`pg_ctl stop -m immediate`'s signal), start it again, and make
//! streaming standbys of it that they promote.
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

/// A running server, stopped (fast shutdown) and deleted when dropped.
pub struct Postgres {
    child: Option<Child>,
    socket_dir: PathBuf,
    log: PathBuf,
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Whether it listens on 127.0.0.1:`port` too.
    tcp: bool,
    settings: Vec<String>,
    user: Unprivileged,
    /// The server's wall clock, set by libfaketime (`FAKETIME` format), or
    /// the host's.
    clock: Option<(crate::skip::Faketime, String)>,
    // Last, so the files go after the server has stopped.
    _dir: tempfile::TempDir,
}

/// The benchmark's server: see [`Postgres::start_for_benchmark`].
const BENCHMARK_SETTINGS: &[&str] = &[
    "fsync=on",
    "synchronous_commit=on",
    "full_page_writes=on",
    "shared_buffers=128MB",
    // Checkpoints on their default schedule (5 min, 1 GB of WAL): a long
    // run of inserts pays for them as a real server does.
    "checkpoint_timeout=5min",
    "max_wal_size=1GB",
    // No background vacuum or analysis during a measurement.
    "autovacuum=off",
];

/// How a lease test's server differs from the plain one.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `max_connections` (default 20).
    pub max_connections: Option<u32>,
    /// More `-c name=value` settings.
    pub settings: Vec<String>,
}

impl Postgres {
    /// Starts a server, or returns `None` after a loud notice when
    /// PostgreSQL is not installed (a panic under `CI=true`).
    pub fn start() -> Option<Postgres> {
        let bin = Postgres::bindir("IDs were NOT checked against a real PostgreSQL server")?;
        Some(Postgres::start_with(&bin, None))
    }

    /// Starts a server configured for measuring, not for testing: every
    /// commit flushed to disk (`fsync`, `synchronous_commit` and full-page
    /// writes on, PostgreSQL's defaults), a 128 MB buffer cache (the
    /// default: an index larger than that is read from the disk), and
    /// connections for a pool of clients. Returns `None` when PostgreSQL is
    /// not installed, as [`Postgres::start`] does.
    pub fn start_for_benchmark() -> Option<Postgres> {
        Postgres::start_tcp(&Options {
            max_connections: Some(30),
            settings: BENCHMARK_SETTINGS.iter().map(|s| s.to_string()).collect(),
        })
    }

    /// Starts a server that also listens on a free loopback TCP port, for
    /// the lease tests, or `None` as [`Postgres::start`].
    pub fn start_tcp(options: &Options) -> Option<Postgres> {
        let bin = Postgres::bindir("the PostgreSQL lease was NOT tested")?;
        Some(Postgres::start_with(&bin, Some(options)))
    }

    /// The server programs' directory, or `None` after a loud notice
    /// that says what was `untested` ([`skipped`](crate::skipped)).
    fn bindir(untested: &str) -> Option<PathBuf> {
        let found = find_bindir();
        if found.is_none() {
            crate::skip::skipped(format_args!(
                "\n*** SKIPPED: PostgreSQL (initdb, postgres) was not found on the PATH \
                 or under /usr/lib/postgresql/*/bin, so {untested}. Install Debian's \
                 `postgresql` package (as .ci/run does) to run this test. ***\n"
            ));
        }
        found
    }

    /// The one way a server starts: fresh directories for `user`, the data
    /// directory filled by `fill` (`initdb`, or a base backup), then the
    /// server itself, waited for.
    fn launch(
        bin: &Path,
        user: Unprivileged,
        port: u16,
        tcp: bool,
        settings: Vec<String>,
        fill: impl FnOnce(&Unprivileged, &Path),
    ) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("idutil-pg")
            .tempdir()
            .expect("a temporary directory");
        user.give(dir.path());
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("socket");
        std::fs::create_dir(&socket_dir).unwrap();
        user.give(&socket_dir);
        fill(&user, &data);
        let mut server = Postgres {
            child: None,
            socket_dir,
            log: dir.path().join("server.log"),
            bin: bin.to_path_buf(),
            data,
            port,
            tcp,
            settings,
            user,
            clock: None,
            _dir: dir,
        };
        // A port found free can still be taken before the server binds it
        // (by a server another test binary starts at the same moment): a
        // new server moves to another port. A restarted one keeps its own.
        let mut moves = 0;
        loop {
            match server.try_spawn() {
                Ok(()) => return server,
                Err(failure) if tcp && moves < 4 && failure.contains("Address already in use") => {
                    moves += 1;
                    server.port = crate::proxy::free_port();
                }
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    fn start_with(bin: &Path, options: Option<&Options>) -> Postgres {
        let tcp = options.is_some();
        let mut settings = vec![
            // Durability through a crash of the machine is not what these
            // tests measure; a killed server keeps what it committed.
            "fsync=off".to_string(),
            "shared_buffers=16MB".to_string(),
            format!(
                "max_connections={}",
                options.and_then(|o| o.max_connections).unwrap_or(20)
            ),
        ];
        if let Some(options) = options {
            settings.extend(options.settings.iter().cloned());
        }
        let port = if tcp { crate::proxy::free_port() } else { PORT };
        let initdb = |user: &Unprivileged, data: &Path| {
            let args = [
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ];
            let mut initdb = user.command(&bin.join("initdb"));
            run_to_end(initdb.arg("-D").arg(data).args(args), "initdb");
        };
        Postgres::launch(bin, Unprivileged::current(), port, tcp, settings, initdb)
    }

    /// Starts the server on its data directory (again) and waits until it
    /// accepts connections.
    fn spawn(&mut self) {
        if let Err(failure) = self.try_spawn() {
            panic!("{failure}");
        }
    }

    /// [`Postgres::spawn`], with a server that exits or never gets ready
    /// an error holding what it logged.
    fn try_spawn(&mut self) -> Result<(), String> {
        let logged = self.log_text().len();
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.user.give(&self.log);
        let listen = if self.tcp {
            "listen_addresses=127.0.0.1"
        } else {
            // No TCP at all.
            "listen_addresses="
        };
        let postgres = self.bin.join("postgres");
        let mut cmd = match &self.clock {
            // Loaded into the server only, not into `setpriv`, which runs
            // as root: libfaketime makes shared memory as the first
            // process that loads it, which the server, another user, then
            // may not open.
            Some((faketime, spec)) => {
                let mut cmd = self.user.command(Path::new("/usr/bin/env"));
                for (name, value) in faketime.environment(spec) {
                    let mut pair = std::ffi::OsString::from(format!("{name}="));
                    pair.push(value);
                    cmd.arg(pair);
                }
                cmd.arg(&postgres);
                cmd
            }
            None => self.user.command(&postgres),
        };
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-k")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string()])
            .args(["-c", listen]);
        for setting in &self.settings {
            cmd.args(["-c", setting]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let bin = self.bin.clone();
        self.wait_ready(&bin, logged)
    }

    fn wait_ready(&mut self, bin: &Path, logged: usize) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log = self.log_text();
                let new = log.get(logged..).unwrap_or(&log);
                return Err(format!("postgres exited ({status}) at start: {new}"));
            }
            let ready = Command::new(bin.join("pg_isready"))
                .arg("-h")
                .arg(&self.socket_dir)
                .args(["-p", &self.port.to_string(), "-t", "1", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres was not ready within {START_TIMEOUT:?}: {}",
                    self.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One of the server's own programs (`pgbench`, `psql`): the one
    /// beside the `postgres` it runs, whatever else is on the PATH.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// A URL for sqlx: database `postgres`, user `postgres`, over the socket.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@localhost:{}/postgres?host={}",
            self.port,
            self.socket_dir.display()
        )
    }

    /// A libpq connection string (diesel): the same database over the socket.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.socket_dir.display(),
            self.port
        )
    }

    /// The user the server runs as, for the tools beside it (PgBouncer).
    pub(crate) fn user(&self) -> &Unprivileged {
        &self.user
    }

    /// The loopback TCP port (servers from [`Postgres::start_tcp`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL over loopback TCP, without TLS.
    pub fn tcp_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Runs `sql` with `psql` over the socket; its output, unaligned and
    /// without headers. Panics if it fails.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql)
            .unwrap_or_else(|e| panic!("psql {sql:?} failed: {e}"))
    }

    /// Runs `sql` with `psql`, within `PGCONNECT_TIMEOUT` of 5 s and a
    /// statement timeout of 20 s.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("psql")
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "5")
            .env("PGOPTIONS", "-c statement_timeout=20000")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs one of the server's client programs (`pg_dump`, `pg_restore`)
    /// as its superuser on database `postgres`, over the socket, with
    /// `args`; panics if it fails.
    pub fn client(&self, program: &str, args: &[&str]) {
        let out = Command::new(self.program(program))
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-d", "postgres"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Kills the server the way `pg_ctl stop -m immediate` does (SIGQUIT:
    /// no checkpoint, crash recovery at the next start).
    pub fn kill_immediate(&mut self) {
        if let Some(child) = self.child.take() {
            stop(child, "-QUIT");
        }
    }

    /// Starts a killed server again on its data and port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.spawn();
    }

    /// Kills the server and starts it again with its wall clock set by
    /// `spec` (libfaketime's `FAKETIME` format: `+1h` runs it an hour
    /// ahead), or the host's again for `None`. `false`, the server left
    /// running as it was, after a loud notice when libfaketime is not
    /// installed.
    pub fn restart_with_clock(&mut self, spec: Option<&str>) -> bool {
        let clock = match spec {
            Some(spec) => match crate::skip::faketime() {
                Some(faketime) => Some((faketime, spec.to_string())),
                None => return false,
            },
            None => None,
        };
        self.kill_immediate();
        self.clock = clock;
        self.spawn();
        true
    }

    /// A streaming standby of this server (`pg_basebackup -R`), itself
    /// listening on a new loopback port. It replicates from `via` (a proxy's
    /// port, so that a test can cut it off), or straight from this server.
    pub fn standby(&self, via: Option<u16>) -> Postgres {
        assert!(self.tcp, "a standby replicates over TCP");
        let source = via.unwrap_or(self.port).to_string();
        let port = crate::proxy::free_port();
        let backup = |user: &Unprivileged, data: &Path| {
            let mut cmd = user.command(&self.bin.join("pg_basebackup"));
            cmd.args(["-h", "127.0.0.1", "-p", &source, "-U", "postgres"])
                .arg("-D")
                .arg(data)
                .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
                .env("PGAPPNAME", "standby");
            run_to_end(&mut cmd, "pg_basebackup");
        };
        let (user, settings) = (self.user.clone(), self.settings.clone());
        Postgres::launch(&self.bin, user, port, true, settings, backup)
    }

    /// Promotes a standby to primary, and waits until it accepts writes.
    pub fn promote(&self) {
        assert_eq!(self.psql("SELECT pg_promote(true, 60)"), "t");
    }

    /// Makes every commit wait for a standby (`synchronous_standby_names =
    /// '*'`), or for none (`None`).
    pub fn synchronous(&self, on: bool) {
        let names = if on { "*" } else { "" };
        self.psql(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ));
        self.psql("SELECT pg_reload_conf()");
    }

    /// What the server logged, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown: it ends the sessions and
        // stops cleanly, so nothing is left running after the tests.
        if let Some(child) = self.child.take() {
            stop(child, "-INT");
        }
    }
}

/// Sends `signal` (`kill`'s flag) to the server and waits for it to end,
/// for [`STOP_TIMEOUT`] at most before a SIGKILL.
pub(crate) fn stop(mut child: Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
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

/// Runs `cmd` (`what`, for the message) to its end; panics unless it
/// succeeds.
fn run_to_end(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The user the server runs as: `nobody` when the tests run as root
/// (PostgreSQL refuses root), else the current user.
#[derive(Clone)]
pub(crate) struct Unprivileged {
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
    pub(crate) fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        }
    }

    /// A command that runs `program` as the user (`setpriv` execs it, so
    /// the child's pid is the program's own).
    pub(crate) fn command(&self, program: &Path) -> Command {
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
