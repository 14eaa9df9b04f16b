//! What the Redis server is set up to keep, read at open, at every renewal
//! and by the audit (`lease check`): its persistence, its eviction policy,
//! its replicas (and theirs), and whether it runs the debugging commands
//! that load older data into a running server. What each finding means for
//! the lease is said once, here, for all three.

use std::time::{Duration, Instant};

use ::redis::{Client, ConnectionAddr, ConnectionInfo, RedisResult};

use super::conn::connection;
use idutil_lease::{LeaseConfig, LeaseError};

/// The server, as read.
pub(super) struct Setup {
    /// `redis_version`.
    pub(super) version: String,
    /// `run_id`: new at every start of the server.
    pub(super) run_id: String,
    /// `master`, or `slave` for a replica.
    pub(super) role: String,
    /// `aof_enabled`: the append-only file is on (`appendonly yes`).
    pub(super) aof: bool,
    /// What `CONFIG GET` answered, or why it did not (renamed or not
    /// allowed, as on most managed services).
    pub(super) settings: Result<Settings, String>,
    /// The replicas connected to the server.
    pub(super) replicas: Vec<Replica>,
}

/// The settings only `CONFIG GET` tells. An empty value: the server has no
/// such setting.
pub(super) struct Settings {
    pub(super) appendfsync: String,
    pub(super) policy: String,
    pub(super) maxmemory: String,
    /// `enable-debug-command` (Redis 7 on; before it `DEBUG` is always
    /// allowed, and this is empty).
    pub(super) debug: String,
}

/// A replica the server lists in `INFO replication`.
pub(super) struct Replica {
    pub(super) host: String,
    pub(super) port: u16,
    /// `online`, `wait_bgsave`, ...
    pub(super) state: String,
    /// What the replica answered when asked for replicas of its own: how
    /// many (`Ok`), or why it could not be asked; `None` until asked.
    pub(super) own: Option<Result<u32, String>>,
}

impl Replica {
    /// `host:port`.
    pub(super) fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The value of `name:` in an `INFO` section.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The replicas of `INFO replication`: `slaveN:ip=...,port=...,state=...`.
fn replicas(info: &str) -> Vec<Replica> {
    info.lines()
        .filter(|l| {
            l.strip_prefix("slave")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|l| {
            let (_, fields) = l.split_once(':')?;
            let get = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            Some(Replica {
                host: get("ip")?.to_string(),
                port: get("port")?.parse().ok()?,
                state: get("state").unwrap_or("").to_string(),
                own: None,
            })
        })
        .collect()
}

/// How many replicas `INFO replication` says are connected.
pub(super) fn connected(info: &str) -> u32 {
    field(info, "connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Setup {
    /// Reads the server's setup on `conn`. A `CONFIG GET` the server
    /// refuses is kept as its error; a connection that fails is the error.
    pub(super) fn read(conn: &mut ::redis::Connection) -> RedisResult<Setup> {
        let (server, persistence, replication): (String, String, String) = ::redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("persistence")
            .cmd("INFO")
            .arg("replication")
            .query(conn)?;
        let answers: Vec<RedisResult<Vec<String>>> = ::redis::pipe()
            .ignore_errors()
            .cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .cmd("CONFIG")
            .arg("GET")
            .arg("enable-debug-command")
            .query(conn)?;
        let mut values = Vec::new();
        let mut refused = None;
        for answer in answers {
            match answer {
                Ok(pair) => values.push(pair.get(1).cloned().unwrap_or_default()),
                Err(e) => {
                    refused.get_or_insert(e.to_string());
                    values.push(String::new());
                }
            }
        }
        let settings = match (refused, values.as_slice()) {
            (Some(e), _) => Err(e),
            (None, [appendfsync, policy, maxmemory, debug]) => Ok(Settings {
                appendfsync: appendfsync.clone(),
                policy: policy.clone(),
                maxmemory: maxmemory.clone(),
                debug: debug.clone(),
            }),
            (None, _) => Err("CONFIG GET answered an unexpected number of replies".to_string()),
        };
        Ok(Setup {
            version: field(&server, "redis_version").unwrap_or("").to_string(),
            run_id: field(&server, "run_id").unwrap_or("").to_string(),
            role: field(&replication, "role").unwrap_or("").to_string(),
            aof: field(&persistence, "aof_enabled") == Some("1"),
            settings,
            replicas: replicas(&replication),
        })
    }

    /// Asks each replica (on the address the server lists, with the URL's
    /// credentials and database) how many replicas it has of its own, all
    /// of them within `timeout`.
    pub(super) fn ask_replicas(&mut self, info: &ConnectionInfo, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for replica in &mut self.replicas {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                replica.own = Some(Err("no time was left to ask it".to_string()));
                continue;
            }
            let addr = ConnectionAddr::Tcp(replica.host.clone(), replica.port);
            let asked = Client::open(info.clone().set_addr(addr))
                .and_then(|client| connection(&client, left))
                .and_then(|mut conn| {
                    ::redis::cmd("INFO")
                        .arg("replication")
                        .query::<String>(&mut conn)
                });
            replica.own = Some(
                asked
                    .map(|info| connected(&info))
                    .map_err(|e| e.to_string()),
            );
        }
    }

    /// A replica with replicas of its own: `WAIT` counts only the server's
    /// own replicas, so a chained one may lack a raise and be promoted.
    pub(super) fn chained(&self) -> Option<(&Replica, u32)> {
        self.replicas.iter().find_map(|r| match r.own {
            Some(Ok(n)) if n > 0 => Some((r, n)),
            _ => None,
        })
    }

    /// What makes the server lose or roll back the lease's records in
    /// routine operation, or lets a replica lacking a raise be promoted:
    /// the lease is refused at open and a holder stops for good at the
    /// renewal that finds it.
    pub(super) fn refusal(&self, config: &LeaseConfig) -> Option<LeaseError> {
        let reason = if self.role != "master" && !self.role.is_empty() {
            format!(
                "the server is a replica (role {}): the lease writes to the primary only; point \
                 the URL at the primary",
                self.role
            )
        } else if !self.aof {
            "appendonly is no, so every restart of Redis rolls its data back to the last \
             snapshot or empties it, taking the shards' records and leases with it: each \
             restart would stop every holder and cost every shard a wait; set appendonly yes \
             with appendfsync always (CONFIG SET appendonly yes, and in redis.conf), or use the \
             PostgreSQL lease"
                .to_string()
        } else if let Some(policy) = self.evicting() {
            format!(
                "maxmemory-policy is {policy} with a maxmemory limit, so Redis may evict the \
                 shards' records and IDs would be issued twice; set maxmemory-policy noeviction \
                 (or use a Redis of its own for the lease, or the PostgreSQL lease)"
            )
        } else if let Some((replica, n)) = self.chained() {
            format!(
                "replica {} has {n} replica(s) of its own: a raise waits (WAIT) only for the \
                 server's own replicas, so a chained replica may lack it and be promoted; \
                 attach every replica to the primary itself, or use the PostgreSQL lease",
                replica.addr()
            )
        } else {
            return None;
        };
        Some(LeaseError::unsafe_store(config.url_redacted(), reason))
    }

    /// The eviction policy, if it may evict the lease's keys (a `maxmemory`
    /// limit with a policy other than `noeviction`).
    pub(super) fn evicting(&self) -> Option<&str> {
        let s = self.settings.as_ref().ok()?;
        let limited = !s.maxmemory.is_empty() && s.maxmemory != "0";
        let policy = if s.policy.is_empty() {
            "noeviction"
        } else {
            &s.policy
        };
        (limited && policy != "noeviction").then_some(policy)
    }

    /// Replicas that could not be asked for replicas of their own: a chain
    /// behind them cannot be seen.
    pub(super) fn unasked(&self) -> impl Iterator<Item = (&Replica, &str)> {
        self.replicas.iter().filter_map(|r| match &r.own {
            Some(Err(e)) => Some((r, e.as_str())),
            _ => None,
        })
    }

    /// What keeps the promise with a cost, or could not be checked: warned
    /// about at open (`strict`: a replica that could not be asked is
    /// refused instead, as the refusal says).
    pub(super) fn cautions(&self, strict: bool) -> (Vec<String>, Option<String>) {
        let mut warn = Vec::new();
        let mut refuse = None;
        match &self.settings {
            Ok(s) if s.appendfsync != "always" && !s.appendfsync.is_empty() => warn.push(format!(
                "appendfsync is {}, not always: a crash of Redis or of its machine can lose the \
                 last raises it acknowledged. The restart is told apart (the records' run ID), \
                 so nothing is issued twice, but each shard's next holder then waits a TTL and \
                 jumps past what a holder can have issued, and a holder that lost a raise \
                 stops; set appendfsync always",
                s.appendfsync
            )),
            Ok(_) => {}
            Err(e) => warn.push(format!(
                "CONFIG GET is refused ({e}), so appendfsync and the eviction policy cannot be \
                 checked: the lease is safe only with appendfsync always and maxmemory-policy \
                 noeviction (or no maxmemory)"
            )),
        }
        for (replica, why) in self.unasked() {
            let text = format!(
                "replica {} could not be asked whether it has replicas of its own ({why}): a \
                 chained replica may lack a raise (WAIT covers only the server's own replicas) \
                 and be promoted; make it reachable from this host with the URL's credentials",
                replica.addr()
            );
            if strict {
                refuse.get_or_insert(format!("{text} (refused: replication=strict)"));
            } else {
                warn.push(format!(
                    "{text}, or set replication=strict in the URL (or \
                     LeaseConfig::strict_replication) to refuse such a setup"
                ));
            }
        }
        (warn, refuse)
    }
}

/// Whether `config` asks for the strict replication rule: a replica that
/// cannot be asked for replicas of its own is then refused
/// ([`LeaseConfig::strict_replication`], or `replication=strict` in the
/// URL).
///
/// # Errors
///
/// A `replication=` option that is neither `strict` nor `warn`.
pub(super) fn strict(config: &LeaseConfig) -> Result<bool, LeaseError> {
    let query = config.get_url().split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("replication", "strict")) => return Ok(true),
            Some(("replication", "warn")) => return Ok(config.get_strict_replication()),
            Some(("replication", other)) => {
                return Err(LeaseError::invalid_config(format!(
                    "the lease URL's replication={other} is neither `strict` nor `warn`"
                )))
            }
            _ => {}
        }
    }
    Ok(config.get_strict_replication())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLICATION: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=6380,state=online,offset=42,lag=0\r\n\
        slave1:ip=::1,port=6381,state=wait_bgsave,offset=0,lag=1\r\n\
        master_failover_state:no-failover\r\nslave_read_only:1\r\n";

    fn setup(aof: bool, policy: &str, maxmemory: &str, fsync: &str) -> Setup {
        Setup {
            version: "7.0.15".into(),
            run_id: "ab".into(),
            role: "master".into(),
            aof,
            settings: Ok(Settings {
                appendfsync: fsync.into(),
                policy: policy.into(),
                maxmemory: maxmemory.into(),
                debug: "no".into(),
            }),
            replicas: replicas(REPLICATION),
        }
    }

    #[test]
    fn info_is_read() {
        assert_eq!(field(REPLICATION, "role"), Some("master"));
        assert_eq!(connected(REPLICATION), 2);
        assert_eq!(field(REPLICATION, "slave_read_only"), Some("1"));
        let r = replicas(REPLICATION);
        assert_eq!(r.len(), 2, "slave_read_only is no replica");
        assert_eq!(
            (r[0].addr(), r[0].state.as_str()),
            ("127.0.0.1:6380".into(), "online")
        );
        assert_eq!(r[1].addr(), "[::1]:6381");
    }

    #[test]
    fn each_unsafe_setting_is_refused_by_name() {
        let c = LeaseConfig::new("redis://127.0.0.1/");
        let says = |s: Setup, what: &str| {
            let e = s.refusal(&c).expect("a refusal");
            assert!(matches!(e, LeaseError::UnsafeStore { .. }));
            assert!(e.to_string().contains(what), "{e}");
        };
        assert!(setup(true, "noeviction", "100mb", "always")
            .refusal(&c)
            .is_none());
        assert!(setup(true, "allkeys-lru", "0", "always")
            .refusal(&c)
            .is_none());
        says(
            setup(false, "noeviction", "0", "always"),
            "appendonly is no",
        );
        says(setup(true, "allkeys-lru", "5mb", "always"), "allkeys-lru");
        let mut chained = setup(true, "noeviction", "0", "always");
        chained.replicas[1].own = Some(Ok(1));
        says(chained, "replica [::1]:6381 has 1 replica(s) of its own");
        let mut replica = setup(true, "noeviction", "0", "always");
        replica.role = "slave".into();
        says(replica, "is a replica");
    }

    #[test]
    fn cautions_name_what_was_not_checked() {
        let (warn, refuse) = setup(true, "noeviction", "0", "everysec").cautions(false);
        assert!(refuse.is_none());
        assert!(warn[0].contains("appendfsync is everysec"), "{warn:?}");
        let mut s = setup(true, "noeviction", "0", "always");
        s.replicas[0].own = Some(Err("connection refused".into()));
        s.replicas[1].own = Some(Ok(0));
        let (warn, refuse) = s.cautions(false);
        assert!(refuse.is_none() && warn.len() == 1, "{warn:?}");
        assert!(
            warn[0].contains("127.0.0.1:6380 could not be asked"),
            "{warn:?}"
        );
        let (_, refuse) = s.cautions(true);
        assert!(refuse.unwrap().contains("replication=strict"));
        s.settings = Err("ERR unknown command 'CONFIG'".into());
        assert!(s.cautions(false).0[0].contains("CONFIG GET is refused"));
    }

    #[test]
    fn the_strict_rule_is_read_from_the_url() {
        let strict_of = |url: &str| strict(&LeaseConfig::new(url));
        assert!(!strict_of("redis://h/").unwrap());
        assert!(strict_of("redis://h/?replication=strict").unwrap());
        assert!(strict_of("redis://h/0?protocol=resp3&replication=strict").unwrap());
        assert!(!strict_of("redis://h/?replication=warn").unwrap());
        assert!(strict_of("redis://h/?replication=maybe").is_err());
        assert!(strict(&LeaseConfig::new("redis://h/").strict_replication(true)).unwrap());
    }
}
