//! Reaching PostgreSQL: the URL's options (TLS, several hosts), and
//! connections whose every round trip has a deadline.
//!
//! Each connection runs on a Tokio runtime of its own, on the calling
//! thread (no worker threads): `tokio-postgres` then gives a deadline to
//! every round trip (`tokio::time::timeout`), which the synchronous
//! `postgres` crate cannot, and a renewal that outlasted its deadline would
//! let the fence come late. A call that times out drops its connection and
//! is never cancelled on the server: a cancelled wait for a synchronous
//! standby reports the commit as done although the standby may not have
//! it.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio::runtime::{Builder, Runtime};
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};
use tokio_postgres::{Client, Config, NoTls};

use super::ENGINE;
use crate::lease::{LeaseConfig, LeaseError};

/// Where and how to connect: the parsed URL, one configuration per host
/// in the order they are tried, and the TLS settings.
#[derive(Clone)]
pub(super) struct Target {
    hosts: Vec<Config>,
    /// `None` with `sslmode=disable`.
    tls: Option<MakeTlsConnector>,
    /// The server gives up waiting for a lock after this long: the client
    /// has given up by then, and a statement left waiting would keep its
    /// session (one more at every retry) until the lock is released.
    lock_timeout: Duration,
}

/// TLS connectors already built, by what they check: building one reads
/// the system's root certificates, tens of milliseconds that every open
/// would pay again.
static CONNECTORS: Mutex<Vec<(ConnectorKey, MakeTlsConnector)>> = Mutex::new(Vec::new());

/// What a TLS connector checks, and the root certificate file it adds.
type ConnectorKey = (Verify, Option<String>);

/// A TLS connector that checks what `verify` says, trusting `root` (a PEM
/// file) beside the system's roots.
fn connector(verify: Verify, root: Option<&str>) -> Result<MakeTlsConnector, String> {
    let key = (verify, root.map(str::to_string));
    let mut built = crate::sync::lock(&CONNECTORS);
    if let Some((_, c)) = built.iter().find(|(k, _)| *k == key) {
        return Ok(c.clone());
    }
    let mut tls = TlsConnector::builder();
    if let Some(path) = root {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read sslrootcert {path}: {e}"))?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| format!("sslrootcert {path} is not a PEM certificate: {e}"))?;
        tls.add_root_certificate(cert);
    }
    match verify {
        Verify::Off | Verify::Encrypt => {
            tls.danger_accept_invalid_certs(true)
                .danger_accept_invalid_hostnames(true);
        }
        Verify::Ca => {
            tls.danger_accept_invalid_hostnames(true);
        }
        Verify::Full => {}
    }
    let tls = tls.build().map_err(|e| format!("cannot set up TLS: {e}"))?;
    let tls = MakeTlsConnector::new(tls);
    built.push((key, tls.clone()));
    Ok(tls)
}

/// What the URL asks of TLS, libpq's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// `disable`: plain text.
    Off,
    /// `prefer`, `require`: encrypted, the certificate not checked (unless
    /// `sslrootcert` names a CA: then as `verify-ca`).
    Encrypt,
    /// `verify-ca`: the certificate chain checked, not the host name.
    Ca,
    /// `verify-full`: the chain and the host name checked.
    Full,
}

impl Target {
    /// Parses `url` (a `postgres://` URL or `key=value` options), taking
    /// out the options this crate handles itself (`sslmode`,
    /// `sslrootcert`).
    pub(super) fn parse(lease: &LeaseConfig) -> Result<Target, LeaseError> {
        let invalid = |reason: String| LeaseError::InvalidConfig { reason };
        let (rest, options) = take_options(lease.url.trim(), &["sslmode", "sslrootcert"]);
        let mut config: Config = rest.parse().map_err(|e| {
            invalid(format!(
                "the PostgreSQL URL {} cannot be read: {e}",
                lease.url_redacted()
            ))
        })?;
        let mode = options[0].as_deref().unwrap_or("prefer");
        let root = options[1].as_deref();
        let (ssl, verify) = match mode {
            "disable" => (SslMode::Disable, Verify::Off),
            "allow" | "prefer" => (SslMode::Prefer, Verify::Encrypt),
            "require" => (SslMode::Require, Verify::Encrypt),
            "verify-ca" => (SslMode::Require, Verify::Ca),
            "verify-full" => (SslMode::Require, Verify::Full),
            other => {
                return Err(invalid(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, \
                     verify-full"
                )))
            }
        };
        // As libpq: a root certificate given makes `require` check the chain.
        let verify = match (verify, root) {
            (Verify::Encrypt, Some(_)) if mode == "require" => Verify::Ca,
            (v, _) => v,
        };
        let tls = match verify {
            Verify::Off => None,
            _ => Some(connector(verify, root).map_err(invalid)?),
        };
        config.ssl_mode(ssl);
        config.connect_timeout(lease.op_timeout().max(Duration::from_millis(100)));
        config.keepalives_idle(Duration::from_secs(5));
        // The lease only ever writes: a host that does not accept writes (a
        // standby, an old primary back as one) is passed over, whatever the
        // URL says.
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        if config.get_application_name().is_none() {
            config.application_name("idutil-lease");
        }
        Ok(Target {
            hosts: per_host(&config),
            tls,
            lock_timeout: lease.op_timeout().max(Duration::from_millis(100)),
        })
    }

    /// Connects to the first host that answers (and accepts writes, with
    /// `target_session_attrs=read-write`) by `deadline`. Each host but the
    /// last gets its share of the time left, as libpq's `connect_timeout`
    /// applies to each host, so a host that drops packets or never answers
    /// cannot keep a connection from the next one (`tokio-postgres` bounds
    /// only the TCP connect of each host, and would spend the whole
    /// deadline on the first).
    async fn connect(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Client, tokio_postgres::Error> {
        let n = self.hosts.len();
        let mut failed = None;
        for (i, config) in self.hosts.iter().enumerate() {
            if i + 1 == n {
                return self.connect_one(config).await;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let share = left / u32::try_from(n - i).unwrap_or(u32::MAX);
            match tokio::time::timeout(share, self.connect_one(config)).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(e)) => failed = Some(e),
                Err(_) => {}
            }
        }
        match failed {
            Some(e) => Err(e),
            // No host at all: `tokio-postgres` says so.
            None => self.connect_one(&Config::new()).await,
        }
    }

    async fn connect_one(&self, config: &Config) -> Result<Client, tokio_postgres::Error> {
        let client = match &self.tls {
            None => {
                let (client, connection) = config.connect(NoTls).await?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        log::debug!("PostgreSQL lease connection closed: {e}");
                    }
                });
                client
            }
            Some(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        log::debug!("PostgreSQL lease connection closed: {e}");
                    }
                });
                client
            }
        };
        // The mark must be on the synchronous standby (where there is one)
        // before an ID past it is issued, whatever the database's default.
        // A lock held by someone else's long transaction: the server gives
        // up when the client does, rather than keeping a session waiting at
        // every retry.
        client
            .batch_execute(&format!(
                "SELECT set_config('synchronous_commit', \
                 CASE current_setting('synchronous_commit') \
                 WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, false), \
                 set_config('lock_timeout', '{}ms', false)",
                self.lock_timeout.as_millis()
            ))
            .await?;
        Ok(client)
    }
}

/// One configuration per host of `config` (its port and address with it),
/// in the order to try them: shuffled with `load_balance_hosts=random`.
/// A configuration with one host or none is kept as it is.
fn per_host(config: &Config) -> Vec<Config> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let n = hosts.len().max(addrs.len());
    // One host, or lists that do not match (which `tokio-postgres` then
    // reports): as it is.
    let matched = |len: usize| len == 0 || len == n;
    if n <= 1
        || !matched(hosts.len())
        || !matched(addrs.len())
        || !(ports.len() <= 1 || ports.len() == n)
    {
        return vec![config.clone()];
    }
    let mut all: Vec<Config> = (0..n)
        .map(|i| {
            let mut one = Config::new();
            match hosts.get(i) {
                Some(Host::Tcp(host)) => {
                    one.host(host);
                }
                #[cfg(unix)]
                Some(Host::Unix(path)) => {
                    one.host_path(path);
                }
                None => {}
            }
            if let Some(addr) = addrs.get(i) {
                one.hostaddr(*addr);
            }
            match ports {
                [] => {}
                [port] => {
                    one.port(*port);
                }
                _ => {
                    one.port(ports[i]);
                }
            }
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                one.options(options);
            }
            if let Some(name) = config.get_application_name() {
                one.application_name(name);
            }
            if let Some(timeout) = config.get_connect_timeout() {
                one.connect_timeout(*timeout);
            }
            if let Some(timeout) = config.get_tcp_user_timeout() {
                one.tcp_user_timeout(*timeout);
            }
            if let Some(interval) = config.get_keepalives_interval() {
                one.keepalives_interval(interval);
            }
            if let Some(retries) = config.get_keepalives_retries() {
                one.keepalives_retries(retries);
            }
            one.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle())
                .target_session_attrs(config.get_target_session_attrs())
                .channel_binding(config.get_channel_binding());
            one
        })
        .collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let start = usize::try_from(nanos).unwrap_or(0) % all.len();
        all.rotate_left(start);
    }
    all
}

/// Takes `names` out of a URL's query or a `key=value` string; returns the
/// rest and each option's value (the last one given).
fn take_options(url: &str, names: &[&str]) -> (String, Vec<Option<String>>) {
    let mut found = vec![None; names.len()];
    let mut keep = |pair: &str| -> bool {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match names.iter().position(|n| key.trim() == *n) {
            Some(i) => {
                found[i] = Some(percent_decode(value.trim().trim_matches('\'')));
                false
            }
            None => true,
        }
    };
    if url.contains("://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_string(), found);
        };
        let kept: Vec<&str> = query.split('&').filter(|p| keep(p)).collect();
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        (rest, found)
    } else {
        let kept: Vec<&str> = url.split_whitespace().filter(|p| keep(p)).collect();
        (kept.join(" "), found)
    }
}

/// `%XX` escapes decoded (a path in a URL's query).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a call did not go through.
pub(super) enum Failure {
    Db(tokio_postgres::Error),
    Timeout(Duration),
}

/// A `tokio-postgres` error whose message includes the server's own
/// (`tokio-postgres` says only "db error" and keeps the rest in its source).
#[derive(Debug)]
struct PgError(tokio_postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(
                f,
                "{} ({}): {}",
                db.severity(),
                db.code().code(),
                db.message()
            ),
            None => match std::error::Error::source(&self.0) {
                Some(cause) => write!(f, "{}: {cause}", self.0),
                None => self.0.fmt(f),
            },
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl Failure {
    pub(super) fn into_error(self, action: &'static str, lease: &LeaseConfig) -> LeaseError {
        match self {
            Failure::Db(e) => LeaseError::store(ENGINE, action, &lease.url, PgError(e)),
            Failure::Timeout(d) => LeaseError::store(
                ENGINE,
                action,
                &lease.url,
                io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {d:?}")),
            ),
        }
    }

    /// The server's SQLSTATE, if it answered with an error.
    pub(super) fn code(&self) -> Option<&str> {
        match self {
            Failure::Db(e) => e.code().map(|c| c.code()),
            Failure::Timeout(_) => None,
        }
    }
}

/// One connection, opened when first needed and dropped after any failure,
/// on a runtime of its own.
pub(super) struct Conn {
    rt: Option<Runtime>,
    client: Option<Client>,
}

impl Conn {
    pub(super) fn new() -> io::Result<Conn> {
        let rt = Builder::new_current_thread().enable_all().build()?;
        Ok(Conn {
            rt: Some(rt),
            client: None,
        })
    }

    /// Runs `op` on the connection (connecting first if needed) within
    /// `timeout`, connection included, off any async caller's thread. A
    /// connection found closed (the server restarted, the session was
    /// terminated) is replaced once within the same deadline: every
    /// operation of the lease is a conditional write that may run twice.
    pub(super) fn run<T: Send>(
        &mut self,
        target: &Target,
        timeout: Duration,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error> + Send + Sync,
    ) -> Result<T, Failure> {
        off_runtime(move || self.run_here(target, timeout, op))
    }

    fn run_here<T>(
        &mut self,
        target: &Target,
        timeout: Duration,
        op: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, Failure> {
        let timeout = timeout.max(Duration::from_millis(1));
        let Conn { rt, client } = self;
        let rt = rt
            .as_ref()
            .expect("the runtime lives as long as the connection");
        let result = rt.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            tokio::time::timeout_at(deadline, async {
                if let Some(c) = client.as_mut() {
                    match op(c).await {
                        Err(e) if e.is_closed() => *client = None,
                        done => return done,
                    }
                }
                let c = client.insert(target.connect(deadline).await?);
                op(c).await
            })
            .await
        });
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                // An error inside a transaction leaves it to roll back on
                // the server; a fresh connection starts clean.
                *client = None;
                Err(Failure::Db(e))
            }
            Err(_) => {
                *client = None;
                Err(Failure::Timeout(timeout))
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.client = None;
        // Dropping a runtime may block, which an async caller's thread
        // forbids: let it go in the background.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` where a runtime of our own may block: on this thread, or on a
/// short-lived one when this thread is already inside a Tokio runtime (an
/// async `main` opening a generator).
pub(super) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("idutil-lease-open".into())
            .spawn_scoped(s, f)
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
    .unwrap_or_else(|e| panic!("cannot start a thread for the PostgreSQL lease: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_options_are_taken_out_of_urls_and_strings() {
        let (rest, found) = take_options(
            "postgres://u:p@a,b/app?sslmode=verify-full&target_session_attrs=read-write&sslrootcert=%2Fetc%2Fca.pem",
            &["sslmode", "sslrootcert"],
        );
        assert_eq!(
            rest,
            "postgres://u:p@a,b/app?target_session_attrs=read-write"
        );
        assert_eq!(found[0].as_deref(), Some("verify-full"));
        assert_eq!(found[1].as_deref(), Some("/etc/ca.pem"));
        let (rest, found) = take_options("host=a,b sslmode=require dbname=x", &["sslmode"]);
        assert_eq!(rest, "host=a,b dbname=x");
        assert_eq!(found[0].as_deref(), Some("require"));
        let (rest, _) = take_options("postgres://h/db?sslmode=disable", &["sslmode"]);
        assert_eq!(rest, "postgres://h/db");
    }

    #[test]
    fn several_hosts_are_tried_one_by_one_with_everything_else_kept() {
        let config: Config =
            "postgres://u:pw@a:1,b:2/app?application_name=x&connect_timeout=3&options=-cfoo%3Dbar"
                .parse()
                .unwrap();
        let hosts = per_host(&config);
        assert_eq!(hosts.len(), 2);
        for (one, (host, port)) in hosts.iter().zip([("a", 1), ("b", 2)]) {
            assert!(matches!(one.get_hosts(), [Host::Tcp(h)] if h == host));
            assert_eq!(one.get_ports(), [port]);
            assert_eq!(one.get_user(), Some("u"));
            assert_eq!(one.get_password(), Some(&b"pw"[..]));
            assert_eq!(one.get_dbname(), Some("app"));
            assert_eq!(one.get_application_name(), Some("x"));
            assert_eq!(one.get_options(), Some("-cfoo=bar"));
            assert_eq!(one.get_connect_timeout(), Some(&Duration::from_secs(3)));
        }
        let one_port: Config = "host=a,b port=7 user=u".parse().unwrap();
        assert!(per_host(&one_port).iter().all(|c| c.get_ports() == [7]));
        // Lists that do not match stay whole, for tokio-postgres to refuse.
        let mismatched: Config = "host=a,b,c port=1,2 user=u".parse().unwrap();
        assert_eq!(per_host(&mismatched).len(), 1);
        let single: Config = "postgres://u@a/app".parse().unwrap();
        assert_eq!(per_host(&single).len(), 1);
    }

    #[test]
    fn bad_tls_settings_are_refused_with_a_reason() {
        for (url, says) in [
            ("postgres://h/db?sslmode=sometimes", "sslmode=sometimes"),
            (
                "postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
                "sslrootcert",
            ),
            ("postgres://h/db?nonsense_option=1", "cannot be read"),
        ] {
            let e = Target::parse(&LeaseConfig::new(url)).err().expect(url);
            assert!(e.to_string().contains(says), "{url}: {e}");
        }
        assert!(Target::parse(&LeaseConfig::new("postgres://a,b/db?sslmode=require")).is_ok());
    }
}
