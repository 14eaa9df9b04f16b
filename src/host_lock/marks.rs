//! The marks every holder of a shard keeps on the lock directory itself:
//! byte-range read locks that no removal of a file takes away, and that
//! every process sharing the directory sees, whatever its PID namespace.
//!
//! They are `fcntl` calls with a `struct flock`, for open file description
//! locks on a range (`F_OFD_SETLK`, `F_OFD_GETLK`), which neither `std`
//! nor `rustix` offers.

// Allowed here, as src/lib.rs says.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Bytes of the directory's range per shard and ID space: the exclusive
/// mark at 0, then from [`IDENTITY`] sixteen blocks of 256 bytes, one per
/// byte of the state directory's `(device, inode)`.
const SLOT_BITS: u32 = 13;
const SLOT: i64 = 1 << SLOT_BITS;
const IDENTITY: i64 = 16;

/// What a holder marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mark {
    /// It holds the shard alone: nobody else may.
    Exclusive,
    /// It shares the shard through the state directory with this
    /// `(device, inode)`: only holders of that directory may too.
    Dir((u64, u64)),
}

/// The range of the lock directory where the holders of one shard of one
/// ID space put their marks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    base: i64,
}

impl Slot {
    /// The slot of the lock file `name`: FNV-1a of the name (the same in
    /// every build and release), 50 bits of it, so that the slot's last
    /// byte stays below `i64::MAX`. Two names in one slot only ever refuse
    /// each other.
    pub(super) fn of(name: &str) -> Slot {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Slot {
            base: ((h >> (64 - 50)) << SLOT_BITS) as i64,
        }
    }

    /// The bytes `mark` locks: one each.
    fn bytes(self, mark: Mark) -> Vec<i64> {
        match mark {
            Mark::Exclusive => vec![self.base],
            Mark::Dir(id) => identity_bytes(id)
                .iter()
                .enumerate()
                .map(|(j, &b)| self.block(j) + i64::from(b))
                .collect(),
        }
    }

    /// The first byte of the block of the identity's `j`th byte.
    fn block(self, j: usize) -> i64 {
        self.base + IDENTITY + 256 * j as i64
    }

    /// Puts `mark` on `dir`'s open description (read locks, shared with
    /// every other holder's). Released by [`Slot::release`] or when the
    /// last descriptor of that description closes.
    /// `Unsupported` where a file offset has fewer than 64 bits (the
    /// slots would not fit), an error from the kernel where the directory
    /// takes no such lock (Linux before 3.15, some network file systems).
    pub(super) fn hold(self, dir: BorrowedFd<'_>, mark: Mark) -> io::Result<()> {
        for start in self.bytes(mark) {
            if let Err(e) = set(dir, libc::F_RDLCK, start, 1) {
                self.release(dir);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes every mark of `dir`'s open description off the slot.
    pub(super) fn release(self, dir: BorrowedFd<'_>) {
        let _ = set(dir, libc::F_UNLCK, self.base, SLOT);
    }

    /// Whether another holder (another open description of the
    /// directory) marks the slot in a way `mark` cannot share: for a
    /// directory, an exclusive holder or a holder of another directory;
    /// for an exclusive holder, any holder. This description's own marks
    /// never count.
    pub(super) fn conflicts(self, dir: BorrowedFd<'_>, mark: Mark) -> io::Result<bool> {
        let Mark::Dir(id) = mark else {
            return marked(dir, self.base, SLOT);
        };
        // A holder of another directory differs in some byte of the
        // identity, so it marks some byte of that block this one does not.
        if marked(dir, self.base, IDENTITY)? {
            return Ok(true);
        }
        for (j, &b) in identity_bytes(id).iter().enumerate() {
            let (block, b) = (self.block(j), i64::from(b));
            if marked(dir, block, b)? || marked(dir, block + b + 1, 255 - b)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether any other holder marks the slot.
    pub(super) fn held(self, dir: BorrowedFd<'_>) -> io::Result<bool> {
        marked(dir, self.base, SLOT)
    }
}

/// The sixteen bytes of a `(device, inode)`.
fn identity_bytes((dev, ino): (u64, u64)) -> [u8; 16] {
    let mut bytes = [0; 16];
    bytes[..8].copy_from_slice(&dev.to_le_bytes());
    bytes[8..].copy_from_slice(&ino.to_le_bytes());
    bytes
}

/// A `struct flock` for `len` bytes from `start`: `Unsupported` where a
/// file offset has fewer than 64 bits.
fn flock(kind: libc::c_int, start: i64, len: i64) -> io::Result<libc::flock> {
    if std::mem::size_of::<libc::off_t>() < 8 {
        return Err(io::ErrorKind::Unsupported.into());
    }
    // SAFETY: `struct flock` is plain data (integers and, on some
    // targets, padding), for which all zeroes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    Ok(fl)
}

/// `F_OFD_SETLK`: locks (`F_RDLCK`) or unlocks (`F_UNLCK`) a range,
/// without waiting.
fn set(dir: BorrowedFd<'_>, kind: libc::c_int, start: i64, len: i64) -> io::Result<()> {
    let fl = flock(kind, start, len)?;
    // SAFETY: the descriptor is open for the duration of the call (it is
    // borrowed), and `fl` is a valid `struct flock` the kernel only reads.
    let rc = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `F_OFD_GETLK`: whether a lock of another open description covers some
/// byte of the range (`len` 0 is an empty range, never marked).
fn marked(dir: BorrowedFd<'_>, start: i64, len: i64) -> io::Result<bool> {
    if len == 0 {
        return Ok(false);
    }
    let mut fl = flock(libc::F_WRLCK, start, len)?;
    // SAFETY: the descriptor is open for the duration of the call, and
    // `fl` is a valid `struct flock` the kernel reads and overwrites.
    let rc = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, OwnedFd};

    fn open_dir(path: &std::path::Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(path).unwrap())
    }

    #[test]
    fn marks_tell_other_directories_and_exclusive_holders_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let slot = Slot::of(&format!("unit-{}-marks", std::process::id()));
        let (a, b) = (Mark::Dir((7, 0x1234_5678)), Mark::Dir((7, 0x1234_5679)));
        let one = open_dir(tmp.path());
        let two = open_dir(tmp.path());
        // Its own marks never count.
        slot.hold(one.as_fd(), a).unwrap();
        assert!(!slot.conflicts(one.as_fd(), a).unwrap());
        assert!(!slot.held(one.as_fd()).unwrap());
        // Another holder of the same directory shares; of another, not;
        // an exclusive holder shares with nobody.
        assert!(!slot.conflicts(two.as_fd(), a).unwrap());
        assert!(slot.conflicts(two.as_fd(), b).unwrap());
        assert!(slot.conflicts(two.as_fd(), Mark::Exclusive).unwrap());
        assert!(slot.held(two.as_fd()).unwrap());
        // Another slot is independent.
        let other = Slot::of("another");
        assert!(!other.conflicts(two.as_fd(), Mark::Exclusive).unwrap());
        slot.release(one.as_fd());
        assert!(!slot.held(two.as_fd()).unwrap());
        slot.hold(one.as_fd(), Mark::Exclusive).unwrap();
        assert!(slot.conflicts(two.as_fd(), a).unwrap());
        // Closing the description lets go of its marks.
        drop(one);
        assert!(!slot.held(two.as_fd()).unwrap());
    }
}
