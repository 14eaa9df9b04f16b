//! How an [`Error`] reads: its message, its `Debug` form, and the error
//! beneath it.

use std::fmt;
use std::path::Path;

use super::Error;
use crate::env;
use crate::state::ClaimHolder;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Id(e) => e.fmt(f),
            Error::BatchTooLarge { n, max } => {
                write!(
                    f,
                    "a batch of {n} IDs is larger than the {max} one step takes"
                )
            }
            Error::ShardOutOfRange { shard, max, source } => write!(
                f,
                "shard {shard} ({source}) is out of range 0..={max}; \
                 choose a shard in range"
            ),
            Error::InvalidEnv { var, value, reason } => {
                write!(f, "environment variable {var}={value:?}: {reason}")
            }
            Error::Hostname(e) => write!(
                f,
                "cannot read the host name to choose a shard ({e}); set {}",
                env::SHARD
            ),
            Error::UnusableHostname { host, problem } => write!(
                f,
                "host name {host:?} cannot choose a shard: {problem}; {}",
                problem.advice()
            ),
            Error::NoStateDir => write!(
                f,
                "no state directory: set {}, XDG_STATE_HOME or HOME, or pass a state directory",
                env::STATE_DIR
            ),
            Error::EndOfRange { last_unix_second } => write!(
                f,
                "the layout's last second ({last_unix_second} s after the Unix epoch) \
                 has been used; no more IDs can be issued"
            ),
            Error::EndMarginReached {
                shard,
                from,
                margin,
                last_unix_second,
            } => write!(
                f,
                "shard {shard} has reached the last {margin} s of its layout's range (from \
                 {from} s after the Unix epoch; the range ends at {last_unix_second}), which \
                 generators keep clear so that a clock far ahead for a moment cannot use the \
                 shard up; if the clock is right, the layout is used up (open with a smaller \
                 end margin to issue the rest); if a wrong clock pushed the shard here, move \
                 its IDs to another shard"
            ),
            Error::ClockOutOfRange {
                unix_second,
                first,
                last,
            } => write!(
                f,
                "the wall clock reads {unix_second} s after the Unix epoch, outside the \
                 layout's range of {first} to {last}; fix the clock"
            ),
            Error::LeadCapReached { lead, max_lead } => write!(
                f,
                "issuing would put the generator {lead} s ahead of the wall clock, \
                 past its max_lead of {max_lead} s"
            ),
            Error::Locked { shard, dir, pid } => {
                write!(
                    f,
                    "shard {shard} in state directory {} is in use by another generator",
                    dir.display()
                )?;
                match pid {
                    Some(pid) => write!(f, " (pid {pid})"),
                    None => Ok(()),
                }
            }
            Error::HostLocked {
                shard,
                id_space,
                pid,
                uid: None,
                held_dir,
                dir,
                ..
            } => {
                write!(
                    f,
                    "shard {shard} of ID space {id_space:?} is in use by another generator \
                     on this host"
                )?;
                match pid {
                    Some(pid) => write!(f, " (pid {pid})")?,
                    None => write!(f, " (pid unknown)")?,
                }
                match (held_dir, dir) {
                    (Some(held), Some(dir)) => write!(
                        f,
                        " with state directory {}, not {}: the processes of a host share a \
                         shard through one state directory; use that one, another shard, or \
                         another ID space for IDs that never share a table",
                        held.display(),
                        dir.display()
                    ),
                    _ => write!(
                        f,
                        ", and not through this state directory; use another shard, or \
                         another ID space for IDs that never share a table"
                    ),
                }
            }
            Error::HostLocked {
                shard,
                id_space,
                pid,
                uid: Some(uid),
                lock_file,
                ..
            } => {
                write!(
                    f,
                    "shard {shard} of ID space {id_space:?} is held on this host by "
                )?;
                match pid {
                    Some(pid) => write!(f, "pid {pid}")?,
                    None => write!(f, "a process")?,
                }
                write!(
                    f,
                    " of uid {uid}, another user (lock file {}): if that is not an idutil \
                     generator of that user, it took the name to block the shard; an \
                     administrator can end it and remove the file. Meanwhile use another \
                     shard, or another ID space for IDs that never share a table",
                    lock_file.display()
                )
            }
            Error::MemberStalled {
                shard,
                dir,
                holder,
                waited,
                ..
            } => {
                write!(f, "shard {shard} in state directory {}: ", dir.display())?;
                let ms = waited.as_millis();
                match holder {
                    ClaimHolder::Process { pid, stopped: true } => write!(
                        f,
                        "another process sharing it (pid {pid}) is stopped (a signal or a \
                         debugger) and has held its claim lock for over {ms} ms: resume \
                         (SIGCONT) or end it, then try again"
                    ),
                    ClaimHolder::Process { pid, .. } => write!(
                        f,
                        "another process sharing it (pid {pid}) has held its claim lock for over \
                         {ms} ms while no member made progress: it is stopped or stuck; resume \
                         or end it, then try again"
                    ),
                    ClaimHolder::OtherNamespace => write!(
                        f,
                        "a process sharing it from another PID namespace (it has no pid here) \
                         has held its claim lock for over {ms} ms while no member made \
                         progress: it is stopped or stuck; resume or end it, then try again"
                    ),
                    ClaimHolder::ThisProcess => write!(
                        f,
                        "another generator of this process on the same shard and directory \
                         has held its claim lock for over {ms} ms: it is stuck (writing to a \
                         disk that does not answer?); try again later"
                    ),
                    ClaimHolder::ThisGenerator => write!(
                        f,
                        "this generator's own turn (another of its threads) has held the claim \
                         lock for over {ms} ms: it is stuck (writing the state file to a disk \
                         that does not answer?); try again later"
                    ),
                    ClaimHolder::Unknown => write!(
                        f,
                        "another process sharing it (pid unknown) has held its claim lock for \
                         over {ms} ms while no member made progress: it is stopped or stuck; \
                         resume or end it, then try again"
                    ),
                }
            }
            Error::HostLockUnusable {
                shard,
                id_space,
                path,
                reason,
            } => write!(
                f,
                "cannot take shard {shard} of ID space {id_space:?} on this host: its lock \
                 file {} cannot be used: {reason}. idutil never makes such a file: someone \
                 else did, perhaps to block the shard; an administrator can remove it. \
                 Meanwhile use another shard, or another ID space for IDs that never share \
                 a table",
                path.display()
            ),
            Error::InvalidIdSpace { name, reason } => {
                write!(f, "invalid ID space {name:?}: {reason}")
            }
            Error::RelativeStateDir { path } => write!(
                f,
                "state directory {} is a relative path, which names a different directory \
                 in each working directory; give an absolute path",
                path.display()
            ),
            Error::UnusableStateDir { path, reason } => write!(
                f,
                "state directory {} cannot be used: {reason}",
                path.display()
            ),
            Error::Untrusted { path, reason } => {
                write!(f, "refusing to use {}: {reason}", path.display())
            }
            Error::DefaultStateDir { path, source } => write!(
                f,
                "{source}. {} is the default state directory, used because {} is not set: \
                 set {} to the absolute path of a directory this user can write (in a \
                 container, one on a persistent volume)",
                path.display(),
                env::STATE_DIR,
                env::STATE_DIR
            ),
            Error::StateReplaced { shard, reason } => write!(
                f,
                "shard {shard}: {reason} while the generator held it; the generator stopped \
                 issuing and writes nothing more. Find out who removed it, then open a new \
                 generator"
            ),
            Error::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            Error::BadState {
                path,
                shard,
                reason,
                ..
            } => {
                let dir = path.parent().unwrap_or(Path::new("."));
                write!(
                    f,
                    "state file {} cannot be trusted: {reason}; it was left as it is. \
                     Recovering shard {shard} in {} restarts it conservatively",
                    path.display(),
                    dir.display()
                )
            }
            Error::RecoveryRefused { path, reason, .. } => write!(
                f,
                "state file {} was not recovered: {reason}",
                path.display()
            ),
            Error::Forked { shard } => write!(
                f,
                "the generator of shard {shard} was opened by the parent of this process, \
                 which was made by a fork that ran no fork handlers (a raw clone or fork \
                 system call, or _Fork), so its copy here would issue its parent's IDs; \
                 create the child with fork()"
            ),
            Error::Closed => write!(f, "the generator is closed"),
            Error::AlreadyInitialized => {
                write!(f, "the process-wide generator is already initialized")
            }
            Error::Lease(e) => e.fmt(f),
        }
    }
}

/// The variant's name and the message (`HostLocked: shard 0 of ID space
/// "default" is in use ...`), for `{:?}` and `{:#?}` alike: what a `main`
/// returning `Result<(), idutil::Error>` prints after `Error: `, and what a
/// log's `{:?}` shows. The fields alone (`HostLocked { shard: 0, ... }`)
/// would leave out what happened and what to do; the message names every
/// field that matters, and [`Error::path`] and [`Error::shard`] give them
/// to code.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {self}", self.variant())
    }
}

impl Error {
    /// The variant's name, as written in the code.
    fn variant(&self) -> &'static str {
        match self {
            Error::Id(_) => "Id",
            Error::BatchTooLarge { .. } => "BatchTooLarge",
            Error::ShardOutOfRange { .. } => "ShardOutOfRange",
            Error::InvalidEnv { .. } => "InvalidEnv",
            Error::Hostname(_) => "Hostname",
            Error::UnusableHostname { .. } => "UnusableHostname",
            Error::NoStateDir => "NoStateDir",
            Error::EndOfRange { .. } => "EndOfRange",
            Error::EndMarginReached { .. } => "EndMarginReached",
            Error::ClockOutOfRange { .. } => "ClockOutOfRange",
            Error::LeadCapReached { .. } => "LeadCapReached",
            Error::Locked { .. } => "Locked",
            Error::HostLocked { .. } => "HostLocked",
            Error::MemberStalled { .. } => "MemberStalled",
            Error::HostLockUnusable { .. } => "HostLockUnusable",
            Error::InvalidIdSpace { .. } => "InvalidIdSpace",
            Error::RelativeStateDir { .. } => "RelativeStateDir",
            Error::UnusableStateDir { .. } => "UnusableStateDir",
            Error::Untrusted { .. } => "Untrusted",
            Error::DefaultStateDir { .. } => "DefaultStateDir",
            Error::StateReplaced { .. } => "StateReplaced",
            Error::Io { .. } => "Io",
            Error::BadState { .. } => "BadState",
            Error::RecoveryRefused { .. } => "RecoveryRefused",
            Error::Forked { .. } => "Forked",
            Error::Closed => "Closed",
            Error::AlreadyInitialized => "AlreadyInitialized",
            Error::Lease(_) => "Lease",
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Id(e) => std::error::Error::source(e),
            Error::Hostname(e) | Error::Io { source: e, .. } => Some(&**e),
            // Its message includes the inner error's; skip to that one's cause.
            Error::DefaultStateDir { source, .. } => std::error::Error::source(&**source),
            Error::Lease(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::Error;

    /// What a `main` returning `Result<(), idutil::Error>` prints: the
    /// variant and the whole message, not the fields.
    #[test]
    fn debug_is_the_variant_and_the_message() {
        let e = Error::HostLocked {
            shard: 0,
            id_space: "default".into(),
            pid: Some(4242),
            uid: None,
            lock_file: PathBuf::from("/dev/shm/idutil/default/shard-0.lock"),
            held_dir: Some(PathBuf::from("/srv/a")),
            dir: Some(PathBuf::from("/srv/b")),
        };
        let debug = format!("{e:?}");
        assert_eq!(debug, format!("HostLocked: {e}"));
        assert!(
            debug.starts_with(
                "HostLocked: shard 0 of ID space \"default\" is in use by another generator \
                 on this host (pid 4242) with state directory /srv/a, not /srv/b"
            ),
            "{debug}"
        );
        assert_eq!(format!("{e:#?}"), debug);
        assert_eq!(
            format!("{:?}", Error::Closed),
            "Closed: the generator is closed"
        );
    }
}
