//! Taking a file's `flock` without blocking, the one way the crate's lock
//! files are taken: a call a signal interrupted is made again, and a lock
//! another process holds is an answer, not an error.

use std::fs::File;
use std::io;

/// Which `flock` to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flock {
    Exclusive,
    Shared,
}

/// Tries once to take `kind` of lock on `file`: `Ok(true)` taken,
/// `Ok(false)` held by another open file (contended), `Err` anything else.
/// A call interrupted by a signal (`EINTR`) is made again. How long to go
/// on trying a contended lock is the caller's.
pub(crate) fn try_flock(file: &File, kind: Flock) -> io::Result<bool> {
    loop {
        let result = match kind {
            Flock::Exclusive => fs2::FileExt::try_lock_exclusive(file),
            Flock::Shared => fs2::FileExt::try_lock_shared(file),
        };
        match result {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Takes `kind` of lock on `file` that this open file already holds the
/// other kind of (a change of kind, which another holder can refuse):
/// [`try_flock`], a contended lock an error.
pub(crate) fn change_flock(file: &File, kind: Flock) -> io::Result<()> {
    if try_flock(file, kind)? {
        Ok(())
    } else {
        Err(fs2::lock_contended_error())
    }
}

#[cfg(test)]
mod tests {
    use super::{try_flock, Flock};
    use std::fs::File;

    /// A file and `N` open file descriptions of it, each its own lock.
    fn opens<const N: usize>() -> (tempfile::NamedTempFile, [File; N]) {
        let named = tempfile::NamedTempFile::new().unwrap();
        let files = std::array::from_fn(|_| File::open(named.path()).unwrap());
        (named, files)
    }

    #[test]
    fn an_exclusive_lock_held_elsewhere_is_contended_not_an_error() {
        let (_named, [a, b]) = opens();
        assert!(try_flock(&a, Flock::Exclusive).unwrap());
        assert!(!try_flock(&b, Flock::Exclusive).unwrap());
        assert!(!try_flock(&b, Flock::Shared).unwrap());
        drop(a);
        assert!(try_flock(&b, Flock::Exclusive).unwrap());
    }

    #[test]
    fn shared_locks_are_shared_and_keep_out_an_exclusive_one() {
        let (_named, [a, b, c]) = opens();
        assert!(try_flock(&a, Flock::Shared).unwrap());
        assert!(try_flock(&b, Flock::Shared).unwrap());
        assert!(!try_flock(&c, Flock::Exclusive).unwrap());
    }
}
