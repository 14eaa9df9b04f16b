//! One generator per shard and ID space on a host, whatever its state
//! directory.
//!
//! The state directory's lock file only protects one directory: two
//! directories for one shard would be two independent generators issuing
//! the same IDs. So a generator also binds a Linux abstract-namespace Unix
//! socket named `idutil/<id space>/shard-<N>` and keeps it listening for its
//! whole life. The kernel allows one socket per name and removes it when its
//! owner exits, however it exits: there is no file to go stale, delete or
//! replace with a symlink. A second generator finds the name taken and asks
//! the holder's pid with a non-blocking connect and `SO_PEERCRED`.
//!
//! The abstract namespace belongs to the network namespace: containers with
//! a network namespace of their own are separate hosts to this lock. On
//! other Unix systems there is no abstract namespace and only the state
//! directory's lock applies.

use crate::error::{Error, Result};

/// Environment variable that names the ID space (default `default`).
pub const ID_SPACE_ENV: &str = "IDUTIL_ID_SPACE";

/// The ID space generators use when none is named.
pub const DEFAULT_ID_SPACE: &str = "default";

/// Checks an ID space name: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
///
/// # Errors
///
/// The reason, when the name is not valid.
pub fn check_id_space(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        return Err("an ID space name cannot be empty");
    }
    if name.len() > 64 {
        return Err("an ID space name has at most 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("an ID space name may hold only letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// The ID space from `explicit`, else `IDUTIL_ID_SPACE`, else `default`.
///
/// # Errors
///
/// [`Error::InvalidIdSpace`] for a bad explicit name,
/// [`Error::InvalidEnv`] for a bad `IDUTIL_ID_SPACE`.
pub fn resolve_id_space(explicit: Option<&str>) -> Result<String> {
    if let Some(name) = explicit {
        check_id_space(name).map_err(|reason| Error::InvalidIdSpace {
            name: name.to_string(),
            reason,
        })?;
        return Ok(name.to_string());
    }
    match std::env::var_os(ID_SPACE_ENV) {
        None => Ok(DEFAULT_ID_SPACE.to_string()),
        Some(value) => {
            let text = value.to_string_lossy().into_owned();
            match value.to_str().map(check_id_space) {
                Some(Ok(())) => Ok(text),
                Some(Err(reason)) => Err(Error::InvalidEnv {
                    var: ID_SPACE_ENV,
                    value: text,
                    reason,
                }),
                None => Err(Error::InvalidEnv {
                    var: ID_SPACE_ENV,
                    value: text,
                    reason: "not valid UTF-8",
                }),
            }
        }
    }
}

/// Who holds a shard of an ID space on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostHolder {
    /// No generator on this host holds it.
    None,
    /// A generator holds it; its pid could not be learnt.
    Unknown,
    /// The generator with this pid holds it.
    Pid(u32),
}

fn socket_name(id_space: &str, shard: u32) -> String {
    format!("idutil/{id_space}/shard-{shard}")
}

/// The per-host hold on a shard of an ID space, released when dropped.
#[derive(Debug)]
pub(crate) struct HostLock {
    #[cfg(target_os = "linux")]
    listener: std::os::unix::net::UnixListener,
}

#[cfg(target_os = "linux")]
impl HostLock {
    /// Takes the shard of `id_space` for this process.
    ///
    /// # Errors
    ///
    /// [`Error::HostLocked`] if a generator on this host holds it;
    /// [`Error::Io`] if the socket cannot be made.
    pub(crate) fn acquire(id_space: &str, shard: u32) -> Result<HostLock> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixListener};

        let name = socket_name(id_space, shard);
        let io_err = |e| Error::io("bind the per-host lock", name.as_ref(), e);
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(io_err)?;
        // A socket closed a moment ago can linger while another thread of
        // its process is between fork and exec (the child holds a copy of
        // every descriptor until exec closes it): retry briefly before
        // calling the shard held.
        let mut bound = UnixListener::bind_addr(&addr);
        for _ in 0..20 {
            match &bound {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    bound = UnixListener::bind_addr(&addr);
                }
                _ => break,
            }
        }
        match bound {
            Ok(listener) => {
                // Probes connect to learn the pid; they are accepted and
                // dropped without blocking so the backlog never fills.
                listener.set_nonblocking(true).map_err(io_err)?;
                Ok(HostLock { listener })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(Error::HostLocked {
                shard,
                id_space: id_space.to_string(),
                pid: match holder(id_space, shard) {
                    HostHolder::Pid(pid) => Some(pid),
                    _ => None,
                },
            }),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Accepts and drops the connections of processes that asked for the
    /// holder's pid.
    pub(crate) fn drain(&self) {
        while self.listener.accept().is_ok() {}
    }
}

#[cfg(not(target_os = "linux"))]
impl HostLock {
    /// No per-host lock outside Linux: only the state directory's applies.
    pub(crate) fn acquire(_id_space: &str, _shard: u32) -> Result<HostLock> {
        Ok(HostLock {})
    }

    pub(crate) fn drain(&self) {}
}

/// Who holds `shard` of `id_space` on this host. Never blocks: a holder
/// whose pid cannot be learnt at once is [`HostHolder::Unknown`]. Outside
/// Linux, always [`HostHolder::None`].
pub fn holder(id_space: &str, shard: u32) -> HostHolder {
    #[cfg(target_os = "linux")]
    {
        use rustix::net::{
            connect, socket_with, sockopt::socket_peercred, AddressFamily, SocketAddrUnix,
            SocketFlags, SocketType,
        };
        let name = socket_name(id_space, shard);
        let Ok(addr) = SocketAddrUnix::new_abstract_name(name.as_bytes()) else {
            return HostHolder::Unknown;
        };
        let Ok(fd) = socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        ) else {
            return HostHolder::Unknown;
        };
        match connect(&fd, &addr) {
            Ok(()) => match socket_peercred(&fd) {
                Ok(cred) => u32::try_from(cred.pid.as_raw_nonzero().get())
                    .map_or(HostHolder::Unknown, HostHolder::Pid),
                Err(_) => HostHolder::Unknown,
            },
            Err(rustix::io::Errno::CONNREFUSED) | Err(rustix::io::Errno::NOENT) => HostHolder::None,
            Err(_) => HostHolder::Unknown,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (id_space, shard);
        HostHolder::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_space_names() {
        for good in ["default", "a", "app-1.prod_eu", &"x".repeat(64)] {
            assert!(check_id_space(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65), "a\0b"] {
            assert!(check_id_space(bad).is_err(), "{bad:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn second_holder_is_refused_with_the_pid_until_the_first_goes() {
        let space = format!("unit-{}-hostlock", std::process::id());
        assert_eq!(holder(&space, 4), HostHolder::None);
        let first = HostLock::acquire(&space, 4).unwrap();
        match HostLock::acquire(&space, 4) {
            Err(Error::HostLocked { shard: 4, pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("expected HostLocked, got {other:?}"),
        }
        // Another shard and another space are independent.
        let _other_shard = HostLock::acquire(&space, 5).unwrap();
        let _other_space = HostLock::acquire(&format!("{space}-b"), 4).unwrap();
        // Many probes never fill the backlog for good.
        for _ in 0..300 {
            assert_eq!(holder(&space, 4), HostHolder::Pid(std::process::id()));
            first.drain();
        }
        drop(first);
        assert_eq!(holder(&space, 4), HostHolder::None);
        let _again = HostLock::acquire(&space, 4).unwrap();
    }
}
