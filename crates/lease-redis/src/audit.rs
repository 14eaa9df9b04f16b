//! `lease check` for Redis: the server's setup read and judged, line by
//! line, without leasing anything. The judgements are `setup.rs`'s, the
//! ones a generator applies at open.

use std::time::{Duration, Instant};

use ::redis::Connection;

use super::conn::{client, connection};
use super::key;
use super::setup::{self, Setup};
use crate::layout::Layout;
use idutil_lease::record::{read_record, RawRecord};
use idutil_lease::LeaseResult as Result;
use idutil_lease::{Finding, LeaseConfig, Verdict};

use Verdict::{Fail, Ok as Fine, Warn};

/// Audits the server `config` names; see [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html).
pub(crate) fn audit(config: &LeaseConfig, layout: &Layout) -> Result<Vec<Finding>> {
    let range = config.range(layout, None)?;
    let strict = setup::strict(config)?;
    let client = client(config)?;
    let timeout = config.op_timeout().max(Duration::from_secs(2));
    let mut a = Audit { found: Vec::new() };
    let read = connection(&client, timeout).and_then(|mut conn| {
        let setup = Setup::read(&mut conn)?;
        let sent = Instant::now();
        let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query(&mut conn)?;
        let server = Duration::from_secs(secs) + Duration::from_micros(micros) + sent.elapsed() / 2;
        Ok((conn, setup, server))
    });
    let (mut conn, mut setup, server) = match read {
        Ok(read) => read,
        Err(e) => {
            a.say(
                Fail,
                "connection",
                format!("cannot read {}: {e}", config.url_redacted()),
            );
            return Ok(a.found);
        }
    };
    setup.ask_replicas(client.get_connection_info(), timeout);
    a.say(
        Fine,
        "connection",
        format!(
            "{} (Redis {}, run ID {})",
            config.url_redacted(),
            setup.version,
            setup.run_id
        ),
    );
    durability(&mut a, &setup);
    eviction(&mut a, &setup);
    replication(&mut a, config, &setup, strict);
    debugging(&mut a, &setup);
    clock(&mut a, config, server);
    records(&mut a, config, layout, &range, &setup, &mut conn);
    Ok(a.found)
}

struct Audit {
    found: Vec<Finding>,
}

impl Audit {
    fn say(&mut self, verdict: Verdict, topic: &'static str, text: impl Into<String>) {
        self.found.push(Finding::new(verdict, topic, text));
    }
}

/// The reason a refusal gives, for a finding.
fn refusal_text(setup: &Setup, config: &LeaseConfig) -> String {
    match setup.refusal(config) {
        Some(idutil_lease::LeaseError::UnsafeStore { reason, .. }) => reason,
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn durability(a: &mut Audit, setup: &Setup) {
    if setup.aof {
        a.say(Fine, "durability", "appendonly yes");
    } else {
        a.say(
            Fail,
            "durability",
            "appendonly no: every restart of Redis rolls its data back to the last snapshot or \
             empties it, with the shards' records and leases, and the lease refuses it; set \
             appendonly yes with appendfsync always",
        );
    }
    match &setup.settings {
        Ok(s) if s.appendfsync == "always" => {
            a.say(Fine, "durability", "appendfsync always");
        }
        Ok(s) if setup.aof => a.say(
            Warn,
            "durability",
            format!(
                "appendfsync {}: a crash of Redis or of its machine can lose the last raises it \
                 acknowledged; the restart is told apart and nothing is issued twice, but each \
                 shard's next holder then waits a TTL and jumps, and a holder that lost a raise \
                 stops; set appendfsync always",
                s.appendfsync
            ),
        ),
        Ok(_) => {}
        Err(e) => a.say(
            Warn,
            "durability",
            format!(
                "CONFIG GET is refused ({e}): appendfsync cannot be checked; the lease keeps its \
                 promise with appendfsync always"
            ),
        ),
    }
}

fn eviction(a: &mut Audit, setup: &Setup) {
    match &setup.settings {
        Ok(s) => {
            let (policy, max) = (s.policy.as_str(), s.maxmemory.as_str());
            if let Some(policy) = setup.evicting() {
                a.say(
                    Fail,
                    "eviction",
                    format!(
                        "maxmemory-policy {policy} with maxmemory {max}: Redis may evict the \
                         shards' records, and the lease refuses it; set maxmemory-policy \
                         noeviction"
                    ),
                );
            } else {
                a.say(
                    Fine,
                    "eviction",
                    format!("maxmemory-policy {policy}, maxmemory {max}: no key is evicted"),
                );
            }
        }
        Err(_) => a.say(
            Warn,
            "eviction",
            "the eviction policy cannot be read (CONFIG GET is refused); the lease keeps its \
             promise with maxmemory-policy noeviction or no maxmemory",
        ),
    }
}

fn replication(a: &mut Audit, config: &LeaseConfig, setup: &Setup, strict: bool) {
    if setup.role != "master" && !setup.role.is_empty() {
        return a.say(Fail, "replication", refusal_text(setup, config));
    }
    if setup.replicas.is_empty() {
        return a.say(
            Fine,
            "replication",
            "no replicas: a raise is kept once the server acknowledged it",
        );
    }
    for replica in &setup.replicas {
        let addr = replica.addr();
        match &replica.own {
            Some(Ok(0)) => a.say(
                Fine,
                "replication",
                format!(
                    "replica {addr} ({}) has no replicas of its own; every raise waits (WAIT) \
                     for it",
                    replica.state
                ),
            ),
            Some(Ok(n)) => a.say(
                Fail,
                "replication",
                format!(
                    "replica {addr} has {n} replica(s) of its own: a raise waits (WAIT) only for \
                     the server's own replicas, so a chained replica may lack it and be \
                     promoted, and the lease refuses it; attach every replica to the primary"
                ),
            ),
            Some(Err(e)) => a.say(
                if strict { Fail } else { Warn },
                "replication",
                format!(
                    "replica {addr} could not be asked whether it has replicas of its own \
                     ({e}): a chain behind it cannot be seen{}",
                    if strict {
                        " (refused: replication=strict)"
                    } else {
                        "; make it reachable with the URL's credentials"
                    }
                ),
            ),
            None => {}
        }
    }
    a.say(
        Warn,
        "replication",
        "promote a replica only once this server is stopped for good: holders that open here \
         after a replica was promoted while this server still serves are not stopped, and the \
         two sides can issue the same IDs (automatic failover is no deployment the Redis lease \
         promises)",
    );
}

fn debugging(a: &mut Audit, setup: &Setup) {
    let Ok(s) = &setup.settings else { return };
    let enabled = match s.debug.as_str() {
        "no" => false,
        // Before Redis 7 the setting does not exist and DEBUG is allowed.
        "" => !setup
            .version
            .split('.')
            .next()
            .is_some_and(|major| major.parse::<u32>().is_ok_and(|m| m >= 7)),
        _ => true,
    };
    if enabled {
        a.say(
            Warn,
            "debugging",
            format!(
                "enable-debug-command {}: DEBUG RELOAD NOSAVE and DEBUG LOADAOF load older data \
                 into the running server without a restart, which no holder that is gone can \
                 tell apart; set enable-debug-command no",
                if s.debug.is_empty() {
                    "(always, before Redis 7)"
                } else {
                    &s.debug
                }
            ),
        );
    } else {
        a.say(Fine, "debugging", "enable-debug-command no");
    }
}

fn clock(a: &mut Audit, config: &LeaseConfig, server: Duration) {
    a.found.push(Finding::clock(config, server));
}

/// The shards' records: which can be trusted as they are, which a holder
/// will settle first, which are unusable; and how many shards are free.
fn records(
    a: &mut Audit,
    config: &LeaseConfig,
    layout: &Layout,
    range: &std::ops::RangeInclusive<u32>,
    setup: &Setup,
    conn: &mut Connection,
) {
    let (mut free, mut confirmed, mut unknown, mut bad) = (0, 0, Vec::new(), Vec::new());
    for shard in range.clone() {
        let mark = key(config, "mark", shard);
        let read: ::redis::RedisResult<(bool, String)> = ::redis::pipe()
            .exists(key(config, "lease", shard))
            .cmd("TYPE")
            .arg(&mark)
            .query(conn);
        let (leased, kind) = match read {
            Ok(read) => read,
            Err(e) => return a.say(Fail, "records", format!("cannot read {mark}: {e}")),
        };
        free += u32::from(!leased);
        match kind.as_str() {
            "none" => unknown.push(shard),
            "hash" => {
                let fields: ::redis::RedisResult<Vec<Option<String>>> = ::redis::cmd("HMGET")
                    .arg(&mark)
                    .arg(&["high_water", "last", "seen", "layout", "run"])
                    .query(conn);
                let mut fields = match fields {
                    Ok(fields) => fields.into_iter(),
                    Err(e) => return a.say(Fail, "records", format!("cannot read {mark}: {e}")),
                };
                let mut next = || fields.next().flatten();
                let (high_water, last, seen, recorded, run) =
                    (next(), next(), next(), next(), next());
                let raw = RawRecord {
                    high_water,
                    last,
                    seen,
                    layout: recorded,
                };
                let (_, problems) = read_record(&raw, layout);
                if let Some(other) = raw.layout.as_ref().filter(|l| **l != layout.fingerprint()) {
                    bad.push(format!(
                        "{mark}: layout {other}, not {}",
                        layout.fingerprint()
                    ));
                } else if let Some((field, reason)) = problems.into_iter().next() {
                    bad.push(format!("{mark}: {field} {reason}"));
                } else if run.as_deref() == Some(setup.run_id.as_str()) {
                    confirmed += 1;
                } else {
                    unknown.push(shard);
                }
            }
            other => bad.push(format!("{mark}: the key holds a {other}, not a hash")),
        }
    }
    a.say(
        Fine,
        "records",
        format!(
            "{confirmed} shard record(s) confirmed by a holder since Redis last started (run ID \
             {})",
            setup.run_id
        ),
    );
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(u32::to_string).collect();
        a.say(
            Fine,
            "records",
            format!(
                "shard(s) {} have no record, or one not confirmed since Redis last started: the \
                 next holder of each holds its lease one TTL, then starts past what a holder \
                 can have issued (the lead cap, {} s, plus the skew limit and a second past \
                 Redis's clock)",
                list.join(", "),
                config.get_max_lead().as_secs()
            ),
        );
    }
    for text in bad {
        a.say(
            Fail,
            "records",
            format!("{text}: a generator skips the shard (refuses it when asked for by number)"),
        );
    }
    let total = u64::from(range.end() - range.start()) + 1;
    let free = u64::from(free);
    let text = format!(
        "{free} of {total} shards ({}..={}) of ID space {:?} are free",
        range.start(),
        range.end(),
        config.get_prefix()
    );
    let verdict = if free == 0 {
        Fail
    } else if free * 10 < total {
        Warn
    } else {
        Fine
    };
    a.say(verdict, "shards", text);
}
