//! Where to connect: the URL read, its own options taken out (TLS, the
//! schema, the replication rule), one configuration per host.

use std::time::Duration;

use postgres_native_tls::MakeTlsConnector;
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::{Client, Config, NoTls};

use super::notices::Notices;
use super::tls::tls_for;
use idutil_lease::{LeaseConfig, LeaseError};

/// The table's name.
pub(super) const TABLE: &str = "idutil_lease";
/// The history table's name (see [`history`](super::history)).
pub(super) const HISTORY: &str = "idutil_lease_history";

/// The schema of the lease table when neither the URL nor the
/// configuration names one.
const DEFAULT_SCHEMA: &str = "public";

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
    /// The schema the lease table is in.
    schema: String,
    /// Refuse a replication setup that can lose a raise.
    strict: bool,
}

impl Target {
    /// Parses `url` (a `postgres://` URL or `key=value` options), taking
    /// out the options this crate handles itself (`sslmode`,
    /// `sslrootcert`, `schema`, `replication`).
    pub(super) fn parse(lease: &LeaseConfig) -> Result<Target, LeaseError> {
        let invalid = |reason: String| LeaseError::invalid_config(reason);
        let (rest, options) = take_options(
            lease.get_url().trim(),
            &["sslmode", "sslrootcert", "schema", "replication"],
        );
        let schema = match (options[2].as_deref(), lease.get_schema()) {
            (Some(url), Some(config)) if url != config => {
                return Err(invalid(format!(
                    "the lease URL names the schema {url:?} and the configuration {config:?}; \
                     name one"
                )))
            }
            (Some(""), _) => return Err(invalid("the lease URL's schema= is empty".into())),
            (Some(name), _) | (None, Some(name)) => name.to_string(),
            (None, None) => DEFAULT_SCHEMA.to_string(),
        };
        if schema.is_empty() || schema.contains('\0') {
            return Err(invalid(format!(
                "the lease schema {schema:?} is not a name"
            )));
        }
        let strict = match options[3].as_deref() {
            None => lease.get_strict_replication(),
            Some("strict") => true,
            Some("warn") => lease.get_strict_replication(),
            Some(other) => {
                return Err(invalid(format!(
                    "the lease URL's replication={other} is neither `strict` nor `warn`"
                )))
            }
        };
        let mut config: Config = rest.parse().map_err(|e| {
            invalid(format!(
                "the PostgreSQL URL {} cannot be read: {e}",
                lease.url_redacted()
            ))
        })?;
        let mode = options[0].as_deref().unwrap_or("prefer");
        let root = options[1].as_deref();
        let (ssl, tls) = tls_for(mode, root).map_err(invalid)?;
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
            schema,
            strict,
        })
    }

    /// The lease table, schema-qualified: every statement names it so,
    /// whatever the session's `search_path`, so roles whose search paths
    /// differ share one table.
    pub(super) fn table(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(TABLE))
    }

    /// The history table beside the lease table, schema-qualified as it is.
    pub(super) fn history_table(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(HISTORY))
    }

    /// The ports the URL names.
    pub(super) fn ports(&self) -> Vec<u16> {
        self.hosts
            .iter()
            .flat_map(|h| h.get_ports().iter().copied())
            .collect()
    }

    /// The schema the lease table is in.
    pub(super) fn schema(&self) -> &str {
        &self.schema
    }

    /// Whether a replication setup that can lose a raise is refused
    /// rather than warned about.
    pub(super) fn strict(&self) -> bool {
        self.strict
    }

    /// How long the server waits for a lock before giving up.
    pub(super) fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// Connects to the first host that answers (and accepts writes, with
    /// `target_session_attrs=read-write`) by `deadline`. Each host but the
    /// last gets its share of the time left, as libpq's `connect_timeout`
    /// applies to each host, so a host that drops packets or never answers
    /// cannot keep a connection from the next one (`tokio-postgres` bounds
    /// only the TCP connect of each host, and would spend the whole
    /// deadline on the first).
    pub(super) async fn connect(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<(Client, Notices, JoinHandle<()>), tokio_postgres::Error> {
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

    /// Connects to one host. No setting is made for the session: a pooler
    /// in transaction mode would not keep it (each transaction sets its own,
    /// see [`Conn::write`](super::conn::Conn::write)).
    async fn connect_one(
        &self,
        config: &Config,
    ) -> Result<(Client, Notices, JoinHandle<()>), tokio_postgres::Error> {
        let notices = Notices::default();
        let (client, task) = match &self.tls {
            None => {
                let (client, connection) = config.connect(NoTls).await?;
                (client, tokio::spawn(notices.clone().drive(connection)))
            }
            Some(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                (client, tokio::spawn(notices.clone().drive(connection)))
            }
        };
        Ok((client, notices, task))
    }
}

/// An identifier, quoted.
pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
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
    fn the_schema_and_the_replication_rule_come_from_the_url_or_the_config() {
        let parse = |c: LeaseConfig| Target::parse(&c);
        let t = parse(LeaseConfig::new("postgres://h/db")).unwrap();
        assert_eq!(t.table(), "\"public\".\"idutil_lease\"");
        assert!(!t.strict());
        let t = parse(LeaseConfig::new(
            "postgres://h/db?schema=api&replication=strict",
        ))
        .unwrap();
        assert_eq!(t.table(), "\"api\".\"idutil_lease\"");
        assert!(t.strict());
        let t =
            parse(LeaseConfig::new("host=h schema=Odd\"Name").strict_replication(true)).unwrap();
        assert_eq!(t.table(), "\"Odd\"\"Name\".\"idutil_lease\"");
        assert!(t.strict());
        let t = parse(LeaseConfig::new("postgres://h/db?schema=api").schema("api")).unwrap();
        assert_eq!(t.schema(), "api");
        for (config, says) in [
            (
                LeaseConfig::new("postgres://h/db?schema=a").schema("b"),
                "name one",
            ),
            (LeaseConfig::new("postgres://h/db?schema="), "empty"),
            (
                LeaseConfig::new("postgres://h/db?replication=maybe"),
                "replication=maybe",
            ),
        ] {
            let e = parse(config).err().expect(says);
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn literals_mean_the_same_whatever_the_server_reads_backslashes_as() {
        use super::super::conn::literal;
        assert_eq!(literal("plain"), "E'plain'");
        assert_eq!(literal("it's"), "E'it''s'");
        assert_eq!(
            literal("a\\'; DROP TABLE x; --"),
            "E'a\\\\''; DROP TABLE x; --'"
        );
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
