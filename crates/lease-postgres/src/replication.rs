//! What the server's replication setup promises the lease: read at open
//! and then with a renewal every [`every`], warned about (or refused, with
//! [`LeaseConfig::strict_replication`](idutil_lease::LeaseConfig::strict_replication))
//! where a standby that may lack a raise can be promoted.

use std::fmt;
use std::time::Duration;

use super::conn::number;
use idutil_lease::{LeaseConfig, LeaseError};

/// The statement that reads the setup: `synchronous_standby_names`,
/// `synchronous_commit` and the standbys streaming from the server.
///
/// The standbys are counted from `pg_stat_get_wal_senders()`, the WAL
/// senders that `pg_stat_replication` lists, without the view's walk over
/// every backend (`pg_stat_get_activity`) and its joins: that walk and
/// their planning cost the server more than the renewal's own write.
pub(super) const PROBE: &str = "SELECT current_setting('synchronous_standby_names'), \
     current_setting('synchronous_commit'), (SELECT count(*) FROM pg_stat_get_wal_senders())";

/// How long after a renewal that read the setup (and found it acceptable)
/// the next one reads it again: two TTLs, every sixth renewal. The setup
/// is what the server's operators change, not what each renewal changes;
/// a setup that turns unsafe under a running holder is seen by the first
/// renewal sent this long after the last read, at most a renewal period
/// ([`LeaseConfig::renew_every`]) later, and answered within a round
/// trip's deadline (a fifth of the TTL): within three TTLs. Under the
/// strict rule every renewal reads it again while it is refused, so the
/// holder goes on as soon as it is safe again.
pub(super) fn every(config: &LeaseConfig) -> Duration {
    config.get_ttl() * 2
}

/// `synchronous_standby_names` read: how many standbys must confirm a
/// commit, chosen how, among which names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SyncNames {
    /// `ANY n (...)`: a quorum; else by priority (`FIRST n (...)`,
    /// `n (...)`, a plain list, `*`).
    pub(super) quorum: bool,
    /// How many must confirm (0: no synchronous standby).
    pub(super) count: u32,
    /// The names listed (`*` included as it is).
    pub(super) names: Vec<String>,
}

impl SyncNames {
    /// Reads PostgreSQL's syntax; `None` for what it cannot be.
    pub(super) fn parse(text: &str) -> Option<SyncNames> {
        let text = text.trim();
        if text.is_empty() {
            return Some(SyncNames {
                quorum: false,
                count: 0,
                names: Vec::new(),
            });
        }
        let (quorum, rest) = match text.split_once(char::is_whitespace) {
            Some((word, rest)) if word.eq_ignore_ascii_case("any") => (true, rest.trim()),
            Some((word, rest)) if word.eq_ignore_ascii_case("first") => (false, rest.trim()),
            _ => (false, text),
        };
        let (count, list) = match rest.split_once('(') {
            Some((n, list)) => {
                let list = list.trim_end().strip_suffix(')')?;
                (n.trim().parse().ok()?, list)
            }
            None if rest.len() < text.len() => return None,
            None => (1, rest),
        };
        let names: Vec<String> = list
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_string())
            .filter(|n| !n.is_empty())
            .collect();
        (!names.is_empty()).then_some(SyncNames {
            quorum,
            count,
            names,
        })
    }

    /// How many standbys may be promoted: those streaming, or those named
    /// when more are named (a named standby that is down now may stream
    /// again, or be promoted).
    fn candidates(&self, streaming: u32) -> u32 {
        let named = if self.names.iter().any(|n| n == "*") {
            0
        } else {
            u32::try_from(self.names.len()).unwrap_or(u32::MAX)
        };
        streaming.max(named)
    }
}

/// The setup as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Setup {
    pub(super) standby_names: String,
    pub(super) synchronous_commit: String,
    pub(super) streaming: u32,
}

impl Setup {
    /// From [`PROBE`]'s row.
    pub(super) fn read(row: &[Option<String>]) -> Option<Setup> {
        let cell = |i: usize| row.get(i).cloned().flatten();
        Some(Setup {
            standby_names: cell(0)?,
            synchronous_commit: cell(1)?,
            streaming: number::<u32>(&cell(2), "standbys").ok()??,
        })
    }

    /// Why a standby that may lack a raise can be promoted under this
    /// setup, with what to do instead; `None` if no such standby can be.
    pub(super) fn risk(&self) -> Option<String> {
        let names = &self.standby_names;
        let Some(sync) = SyncNames::parse(names) else {
            return Some(format!(
                "synchronous_standby_names = '{names}' cannot be read by this crate, so it \
                 cannot tell whether every standby has each raise"
            ));
        };
        let n = sync.candidates(self.streaming);
        let safe = "the safe setups are ANY n or FIRST n of all n standbys \
                    (synchronous_standby_names = 'ANY n (s1, ..., sn)'), or a failover manager \
                    that promotes only a synchronous standby";
        if sync.count == 0 {
            return (self.streaming > 0).then(|| {
                format!(
                    "{} standby(s) stream from the server but synchronous_standby_names is \
                     empty: no commit waits for a standby, and a promoted standby may lack the \
                     last raises of the lease's marks, so IDs can be issued twice after a \
                     failover; {safe}",
                    self.streaming
                )
            });
        }
        if sync.count >= n {
            return None;
        }
        let how = if sync.names.iter().any(|n| n == "*") {
            format!("'*' lets any one of the {n} standbys confirm a commit")
        } else if sync.quorum {
            format!(
                "a quorum of {} of {n} standbys confirms a commit, and a standby outside it \
                 may be promoted",
                sync.count
            )
        } else {
            format!(
                "only the first {} of {n} standbys by priority confirm a commit, and another \
                 may be promoted",
                sync.count
            )
        };
        Some(format!(
            "synchronous_standby_names = '{names}' with {} standby(s) streaming: {how}, \
             lacking the last raises of the lease's marks, so IDs can be issued twice after \
             such a failover; {safe}",
            self.streaming
        ))
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "synchronous_standby_names = '{}', synchronous_commit = {}, {} standby(s) streaming",
            self.standby_names, self.synchronous_commit, self.streaming
        )
    }
}

/// What to do about `setup`: `Err` to refuse under the strict rule, a
/// warning logged (once per `warned` flag) otherwise.
pub(super) fn judge(
    setup: &Setup,
    config: &LeaseConfig,
    strict: bool,
    warned: &std::sync::atomic::AtomicBool,
) -> Result<(), LeaseError> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(risk) = setup.risk() else {
        warned.store(false, Relaxed);
        return Ok(());
    };
    if strict {
        return Err(LeaseError::unsafe_store(
            config.url_redacted(),
            format!("{risk} (refused: replication=strict)"),
        ));
    }
    if !warned.swap(true, Relaxed) {
        log::warn!(
            "the PostgreSQL lease at {}: {risk}; set replication=strict in the URL (or \
             LeaseConfig::strict_replication) to refuse such a setup",
            config.url_redacted()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(names: &str, streaming: u32) -> Setup {
        Setup {
            standby_names: names.into(),
            synchronous_commit: "on".into(),
            streaming,
        }
    }

    #[test]
    fn postgresql_syntax_is_read() {
        let any = SyncNames::parse("ANY 2 (s1, \"s 2\", s3)").unwrap();
        assert!(any.quorum);
        assert_eq!((any.count, any.names.len()), (2, 3));
        assert_eq!(any.names[1], "s 2");
        let first = SyncNames::parse("first 1 (a,b)").unwrap();
        assert!(!first.quorum && first.count == 1 && first.names == ["a", "b"]);
        let plain = SyncNames::parse("2 (a, b)").unwrap();
        assert_eq!((plain.quorum, plain.count), (false, 2));
        let list = SyncNames::parse("a, b").unwrap();
        assert_eq!((list.count, list.names.len()), (1, 2));
        assert_eq!(SyncNames::parse("*").unwrap().names, ["*"]);
        assert_eq!(SyncNames::parse("").unwrap().count, 0);
        assert!(SyncNames::parse("ANY x (a)").is_none());
        assert!(SyncNames::parse("ANY 1 (a").is_none());
    }

    #[test]
    fn a_standby_outside_the_confirming_set_is_a_risk() {
        // Safe: no standby; every standby confirms.
        assert_eq!(setup("", 0).risk(), None);
        assert_eq!(setup("*", 1).risk(), None);
        assert_eq!(setup("ANY 2 (s1, s2)", 2).risk(), None);
        assert_eq!(setup("FIRST 2 (s1, s2)", 1).risk(), None);
        // Not safe, each named for what it is.
        let says = |s: Setup, what: &str| {
            let risk = s.risk().expect("a risk");
            assert!(risk.contains(what), "{risk}");
            assert!(risk.contains("ANY n"), "{risk}");
        };
        says(setup("", 1), "empty");
        says(setup("*", 2), "'*'");
        says(setup("ANY 1 (s1, s2)", 2), "quorum of 1 of 2");
        says(setup("ANY 1 (s1, s2)", 1), "quorum of 1 of 2");
        says(setup("FIRST 1 (s1, s2)", 2), "first 1 of 2");
        says(setup("s1, s2", 1), "first 1 of 2");
        says(setup("ANY 2 (s1, s2)", 3), "quorum of 2 of 3");
    }
}
