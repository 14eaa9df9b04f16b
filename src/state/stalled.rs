//! Who held the shard's short lock when a member gave up waiting for it:
//! [`ClaimHolder`], which [`Error`](crate::Error) carries, kept in a file
//! that imports nothing of the crate's errors.

/// Who held the short lock of a shard's processes (the claim file's, see
/// [*Processes sharing a shard*](super#processes-sharing-a-shard)) when a
/// generator gave up waiting for it
/// ([`Error::MemberStalled`](crate::Error::MemberStalled)), as far as
/// `/proc` let it tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimHolder {
    /// Another process, by its pid in this process's PID namespace.
    #[non_exhaustive]
    Process {
        /// Its pid.
        pid: u32,
        /// Whether it was stopped: by a signal (`SIGSTOP`, Ctrl-Z; state
        /// `T`) or by a debugger (`t`).
        stopped: bool,
    },
    /// A process of another PID namespace (a container, `unshare
    /// --pid`): it has no pid in this one, or `/proc` does not show it.
    OtherNamespace,
    /// Another generator of this process, on the same shard and state
    /// directory.
    ThisProcess,
    /// This generator itself: another of its threads (its reservation
    /// thread, or a call) in its own turn, writing the state file on a disk
    /// that does not answer.
    ThisGenerator,
    /// Nothing told: `/proc/locks` could not be read.
    Unknown,
}

impl ClaimHolder {
    /// The pid of the other process, in this process's PID namespace.
    pub fn pid(self) -> Option<u32> {
        match self {
            ClaimHolder::Process { pid, .. } => Some(pid),
            _ => None,
        }
    }
}
