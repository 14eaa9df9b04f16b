//! What would let a shard go on after a refusal: [`Remedy`], which
//! [`Error`](crate::Error) carries, kept in a file that imports nothing of
//! the crate's errors.

/// What would let a shard go on: after a state file that cannot be
/// trusted ([`Error::BadState`](crate::Error::BadState)), or a refused recovery
/// ([`Error::RecoveryRefused`](crate::Error::RecoveryRefused)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// A recovery ([`recover`](super::recover), the command's `idutil state recover`); it
    /// may still ask for a vouched time if the file's mark is not certain.
    Recover,
    /// A recovery with a time no ID of the shard is later than, vouched for
    /// with [`RecoverOptions::after`](super::RecoverOptions::after) (the command's `--after TIME`).
    After,
    /// Forcing the recovery with [`RecoverOptions::force`](super::RecoverOptions::force) (the command's
    /// `--force`): the state file is healthy.
    Force,
    /// Working the recovery out again: the state file changed meanwhile.
    Retry,
}
