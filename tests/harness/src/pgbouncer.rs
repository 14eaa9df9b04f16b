//! A throwaway PgBouncer (Debian's `pgbouncer`) in front of a test's
//! PostgreSQL server: loopback only, `auth_type = trust`, run as the
//! server's own unprivileged user (PgBouncer refuses root), in the pool
//! mode a test asks for, and stopped when dropped.
//!
//! Without `pgbouncer` installed, [`PgBouncer::start`] prints a loud
//! notice and returns `None`, except under `CI=true`, where it panics.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::Postgres;

/// A running PgBouncer, stopped when dropped.
pub struct PgBouncer {
    child: Option<Child>,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// The pooler's settings a test chooses.
#[derive(Clone, Debug)]
pub struct Pool {
    /// `session`, `transaction` or `statement`.
    pub mode: &'static str,
    /// Server connections per user and database.
    pub size: u32,
    /// The users it lets in (they need no password: `trust`).
    pub users: Vec<String>,
}

impl PgBouncer {
    /// Starts PgBouncer in front of `server` (a TCP server), or returns
    /// `None` after a loud notice when it is not installed.
    pub fn start(server: &Postgres, pool: &Pool) -> Option<PgBouncer> {
        let program = find("pgbouncer")?;
        let dir = tempfile::Builder::new()
            .prefix("idutil-pgbouncer")
            .tempdir()
            .expect("a temporary directory");
        let user = server.user();
        user.give(dir.path());
        let port = crate::proxy::free_port();
        let users: String = pool
            .users
            .iter()
            .map(|u| format!("\"{u}\" \"\"\n"))
            .collect();
        let auth = dir.path().join("users.txt");
        std::fs::write(&auth, users).unwrap();
        user.give(&auth);
        let log = dir.path().join("pgbouncer.log");
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host=127.0.0.1 port={upstream}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {auth}\npool_mode = {mode}\n\
                 admin_users = postgres\n\
                 default_pool_size = {size}\nmin_pool_size = 0\nreserve_pool_size = 0\n\
                 max_client_conn = 2000\nlogfile = {log}\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 server_check_delay = 0\n",
                upstream = server.port(),
                auth = auth.display(),
                mode = pool.mode,
                size = pool.size,
                log = log.display(),
            ),
        )
        .unwrap();
        user.give(&ini);
        let child = user
            .command(&program)
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let mut bouncer = PgBouncer {
            child: Some(child),
            port,
            log,
            _dir: dir,
        };
        bouncer.wait_ready();
        Some(bouncer)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("pgbouncer exited ({status}) at start: {}", self.log_text());
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not listen within 20 s: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL through it for `user`, to database `postgres`, without TLS.
    pub fn url(&self, user: &str) -> String {
        format!(
            "postgres://{user}@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Runs `command` (`PAUSE`, `RESUME`, `SHOW POOLS`) on its admin
    /// console as `postgres`; its output, unaligned and without headers.
    pub fn admin(&self, command: &str) -> String {
        let out = std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "pgbouncer",
                "-X",
                "-A",
                "-t",
                "-c",
                command,
            ])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "pgbouncer {command:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// What it logged, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::postgres::stop(child, "-INT");
        }
    }
}

/// `program` on the PATH or in `/usr/sbin` (Debian's pgbouncer), or `None`
/// after a loud notice (a panic under `CI=true`).
fn find(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain([Path::new("/usr/sbin").to_path_buf()])
        .map(|d| d.join(program))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{program} is not installed, and CI=true requires the pooler tests");
        }
        crate::skip::skipped(format_args!(
            "\n*** SKIPPED: {program} was not found, so the PostgreSQL lease was NOT tested \
             behind a pooler. Install Debian's `{program}` package (as .ci/run does). ***\n"
        ));
    }
    found
}
