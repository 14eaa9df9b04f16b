//! Where the parts of an ID sit: the only place an ID is put together or
//! taken apart.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::IdError;
use crate::id::Id;

mod counter;
mod text;

pub use text::ParseLayoutError;

/// 2000-01-01T00:00:00Z in seconds since the Unix epoch: the default epoch.
pub const EPOCH_2000: u64 = 946_684_800;

/// The widest layout: IDs stay at or below 2<sup>53</sup> − 1, the largest
/// integer a JavaScript number holds exactly.
pub const MAX_TOTAL_BITS: u32 = 53;

/// The latest second a layout may reach, in seconds since the Unix epoch:
/// the largest a signed 64-bit count of seconds (and so a [`SystemTime`])
/// holds. Every second of every layout can be added and converted without
/// overflow.
const MAX_UNIX_SECOND: u64 = i64::MAX as u64;

/// The bit layout of an ID, from the top: seconds since the epoch, clock
/// value, sequence within the second, shard.
///
/// The default, [`Layout::DEFAULT`], is 32 bits of seconds since
/// 2000-01-01 UTC, no clock bits, 16 bits of sequence and 5 bits of shard:
/// bit-compatible with the classic formula
/// `((sec − 2000-01-01) << 21) | (seq << 5) | shard`.
///
/// Clock bits (`k > 0`) carry the generator's persistent clock id modulo
/// 2<sup>k</sup>. They let a generator whose wall clock went back across a
/// restart run on real time under a fresh clock value instead of borrowing
/// seconds until the clock catches up ([`idutil::Generator`](https://docs.rs/idutil/latest/idutil/struct.Generator.html),
/// *Clock rollbacks*).
///
/// ```
/// use idutil::Layout;
///
/// // 31 bits of seconds, 2 clock bits, 15 of sequence, 5 of shard.
/// const MINE: Layout = Layout::new_const(31, 2, 15, 5, idutil::EPOCH_2000);
/// assert_eq!(MINE.total_bits(), 53);
///
/// // Too wide: rejected when built, never truncated later.
/// assert!(Layout::new(33, 0, 16, 5, idutil::EPOCH_2000).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    seconds_bits: u8,
    clock_bits: u8,
    sequence_bits: u8,
    shard_bits: u8,
    epoch: u64,
}

/// Why a [`Layout`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The widths add up to more than 53 bits.
    TooWide {
        /// The sum of the widths.
        total: u32,
    },
    /// The seconds field has no bits.
    NoSeconds,
    /// The sequence field has no bits.
    NoSequence,
    /// The clock or shard field is wider than 16 bits, or the sequence field
    /// wider than 32.
    FieldTooWide {
        /// `"clock"`, `"sequence"` or `"shard"`.
        field: &'static str,
    },
    /// The epoch is so late that the layout's last second would lie beyond
    /// what a [`SystemTime`] (signed 64-bit seconds) can hold.
    EpochTooLate {
        /// The epoch given, in seconds since the Unix epoch.
        epoch: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::TooWide { total } => write!(
                f,
                "the fields add up to {total} bits; at most {MAX_TOTAL_BITS} fit in a JavaScript number"
            ),
            LayoutError::NoSeconds => write!(f, "the seconds field needs at least one bit"),
            LayoutError::NoSequence => write!(f, "the sequence field needs at least one bit"),
            LayoutError::FieldTooWide { field } => write!(
                f,
                "the {field} field is too wide (clock and shard take at most 16 bits, sequence 32)"
            ),
            LayoutError::EpochTooLate { epoch } => write!(
                f,
                "the epoch {epoch} is too late: the layout's last second would be past \
                 {MAX_UNIX_SECOND} s after the Unix epoch"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// The parts of an ID under some [`Layout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Parts {
    /// Whole seconds since the layout's epoch.
    pub seconds: u64,
    /// The clock value: the clock id modulo 2<sup>clock bits</sup> (0 when
    /// the layout has no clock bits).
    pub clock: u32,
    /// The sequence number within the second.
    pub sequence: u32,
    /// The shard: which generator issued the ID.
    pub shard: u32,
}

impl Layout {
    /// 32 bits of seconds since 2000-01-01 UTC, 0 clock bits, 16 bits of
    /// sequence, 5 bits of shard. Its last second is 2136-02-07T06:28:15Z.
    pub const DEFAULT: Layout = Layout::new_const(32, 0, 16, 5, EPOCH_2000);

    /// Builds a layout from the widths of its fields and its epoch (in
    /// seconds since the Unix epoch).
    ///
    /// # Errors
    ///
    /// [`LayoutError`] if the widths add up to more than 53 bits, the seconds
    /// or sequence field is empty, the clock or shard field is wider than 16
    /// bits or the sequence field wider than 32, or the epoch is so late that
    /// the last second would not fit a signed 64-bit count of seconds.
    pub const fn new(
        seconds_bits: u32,
        clock_bits: u32,
        sequence_bits: u32,
        shard_bits: u32,
        epoch: u64,
    ) -> Result<Layout, LayoutError> {
        if seconds_bits == 0 {
            return Err(LayoutError::NoSeconds);
        }
        if sequence_bits == 0 {
            return Err(LayoutError::NoSequence);
        }
        if clock_bits > 16 {
            return Err(LayoutError::FieldTooWide { field: "clock" });
        }
        if shard_bits > 16 {
            return Err(LayoutError::FieldTooWide { field: "shard" });
        }
        if sequence_bits > 32 {
            return Err(LayoutError::FieldTooWide { field: "sequence" });
        }
        // Each width is checked against 53 first so the sum cannot overflow.
        if seconds_bits > MAX_TOTAL_BITS {
            return Err(LayoutError::TooWide {
                total: MAX_TOTAL_BITS + 1,
            });
        }
        let total = seconds_bits + clock_bits + sequence_bits + shard_bits;
        if total > MAX_TOTAL_BITS {
            return Err(LayoutError::TooWide { total });
        }
        match epoch.checked_add(mask(seconds_bits)) {
            Some(last) if last <= MAX_UNIX_SECOND => {}
            _ => return Err(LayoutError::EpochTooLate { epoch }),
        }
        Ok(Layout {
            seconds_bits: seconds_bits as u8,
            clock_bits: clock_bits as u8,
            sequence_bits: sequence_bits as u8,
            shard_bits: shard_bits as u8,
            epoch,
        })
    }

    /// Like [`Layout::new`], for `const` items: an invalid layout is a
    /// compile-time error there (and a panic anywhere else).
    ///
    /// ```compile_fail
    /// // 54 bits: does not compile.
    /// const BAD: idutil::Layout = idutil::Layout::new_const(33, 0, 16, 5, 0);
    /// ```
    pub const fn new_const(
        seconds_bits: u32,
        clock_bits: u32,
        sequence_bits: u32,
        shard_bits: u32,
        epoch: u64,
    ) -> Layout {
        match Layout::new(seconds_bits, clock_bits, sequence_bits, shard_bits, epoch) {
            Ok(layout) => layout,
            Err(LayoutError::TooWide { .. }) => panic!("invalid layout: more than 53 bits"),
            Err(LayoutError::NoSeconds) => panic!("invalid layout: empty seconds field"),
            Err(LayoutError::NoSequence) => panic!("invalid layout: empty sequence field"),
            Err(LayoutError::FieldTooWide { .. }) => panic!("invalid layout: a field is too wide"),
            Err(LayoutError::EpochTooLate { .. }) => {
                panic!("invalid layout: the epoch is too late")
            }
        }
    }

    /// Width of the seconds field.
    pub const fn seconds_bits(&self) -> u32 {
        self.seconds_bits as u32
    }
    /// Width of the clock field, which carries the clock value: the
    /// persistent clock id modulo 2<sup>clock bits</sup> (see the crate
    /// docs, *Three things called clock*).
    pub const fn clock_bits(&self) -> u32 {
        self.clock_bits as u32
    }
    /// Width of the sequence field.
    pub const fn sequence_bits(&self) -> u32 {
        self.sequence_bits as u32
    }
    /// Width of the shard field.
    pub const fn shard_bits(&self) -> u32 {
        self.shard_bits as u32
    }
    /// The epoch, in seconds since the Unix epoch.
    pub const fn epoch(&self) -> u64 {
        self.epoch
    }
    /// Sum of the widths (at most 53).
    pub const fn total_bits(&self) -> u32 {
        self.seconds_bits() + self.clock_bits() + self.sequence_bits() + self.shard_bits()
    }
    /// The largest seconds value (seconds since the epoch).
    pub const fn max_seconds(&self) -> u64 {
        mask(self.seconds_bits())
    }
    /// The last representable second, in seconds since the Unix epoch.
    /// [`Layout::new`] guarantees it fits a signed 64-bit count of seconds.
    pub const fn last_unix_second(&self) -> u64 {
        self.epoch + self.max_seconds()
    }
    /// The seconds field for a Unix second, or `None` if the second is
    /// outside the layout's range (before its epoch or after its last
    /// second).
    pub const fn seconds_of(&self, unix_second: u64) -> Option<u64> {
        match unix_second.checked_sub(self.epoch) {
            Some(seconds) if seconds <= self.max_seconds() => Some(seconds),
            _ => None,
        }
    }
    /// The largest clock value.
    pub const fn max_clock(&self) -> u32 {
        mask(self.clock_bits()) as u32
    }
    /// The largest sequence number.
    pub const fn max_sequence(&self) -> u32 {
        mask(self.sequence_bits()) as u32
    }
    /// The largest shard.
    pub const fn max_shard(&self) -> u32 {
        mask(self.shard_bits()) as u32
    }
    /// Number of distinct clock values (2<sup>clock bits</sup>).
    pub const fn clock_values(&self) -> u32 {
        1 << self.clock_bits()
    }

    /// Puts the parts together.
    ///
    /// # Errors
    ///
    /// [`IdError::PartOutOfRange`] if a part does not fit its field.
    ///
    /// ```
    /// use idutil::{Layout, Parts};
    /// let id = Layout::DEFAULT.encode(Parts { seconds: 692_718_783, clock: 0, sequence: 1, shard: 0 })?;
    /// assert_eq!(id.as_u64(), 1_452_736_581_206_048);
    /// # Ok::<(), idutil::Error>(())
    /// ```
    pub fn encode(&self, parts: Parts) -> Result<Id, IdError> {
        check("seconds", parts.seconds, self.max_seconds())?;
        check("clock", parts.clock.into(), self.max_clock().into())?;
        check(
            "sequence",
            parts.sequence.into(),
            self.max_sequence().into(),
        )?;
        check("shard", parts.shard.into(), self.max_shard().into())?;
        let counter = self.counter_from(parts.seconds, u64::from(parts.sequence));
        Ok(Id::from_valid(
            self.pack(counter, self.base(parts.clock, parts.shard)),
        ))
    }

    /// Takes an ID apart.
    ///
    /// # Errors
    ///
    /// [`IdError::Invalid`] if the ID has bits set above the layout's total
    /// width (only possible for layouts narrower than 53 bits).
    pub fn decode(&self, id: Id) -> Result<Parts, IdError> {
        let v = id.as_u64();
        if v >> self.total_bits() != 0 {
            return Err(IdError::invalid(v.to_string(), "wider than the layout"));
        }
        let h = self.shard_bits();
        let s = self.sequence_bits();
        let k = self.clock_bits();
        Ok(Parts {
            seconds: v >> (h + s + k),
            clock: ((v >> (h + s)) & mask(k)) as u32,
            sequence: ((v >> h) & mask(s)) as u32,
            shard: (v & mask(h)) as u32,
        })
    }

    /// The wall-clock time of `parts.seconds` under this layout's epoch.
    /// Seconds beyond the layout's range (which no ID of it holds) count as
    /// its last second, so this never overflows.
    pub fn time(&self, parts: &Parts) -> SystemTime {
        let seconds = parts.seconds.min(self.max_seconds());
        UNIX_EPOCH + Duration::from_secs(self.epoch + seconds)
    }

    /// The bits of an ID that do not change within a generator: clock value
    /// and shard, in place.
    #[inline]
    #[doc(hidden)]
    pub const fn base(&self, clock: u32, shard: u32) -> u64 {
        ((clock as u64) << (self.sequence_bits() + self.shard_bits())) | shard as u64
    }

    /// Builds an ID from a generator counter (see `counter`) and the
    /// [`base`](Self::base) bits: the one place the counter's seconds and
    /// sequence are laid into their bits. The caller guarantees the
    /// counter's seconds fit the layout.
    #[inline]
    #[doc(hidden)]
    pub const fn pack(&self, counter: u64, base: u64) -> u64 {
        let h = self.shard_bits();
        let (seconds, sequence) = self.counter_fields(counter);
        (seconds << (h + self.sequence_bits() + self.clock_bits())) | (sequence << h) | base
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::DEFAULT
    }
}

const fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

fn check(part: &'static str, value: u64, max: u64) -> Result<(), IdError> {
    if value > max {
        Err(IdError::PartOutOfRange { part, value, max })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_matches_the_classic_formula() {
        let l = Layout::DEFAULT;
        assert_eq!(l.total_bits(), 53);
        assert_eq!(l.last_unix_second(), 5_241_652_095); // 2136-02-07T06:28:15Z
        let parts = Parts {
            seconds: 1234,
            clock: 0,
            sequence: 77,
            shard: 9,
        };
        let id = l.encode(parts).unwrap();
        assert_eq!(id.as_u64(), (1234 << 21) | (77 << 5) | 9);
        assert_eq!(l.decode(id).unwrap(), parts);
    }

    #[test]
    fn rejects_bad_widths() {
        assert_eq!(
            Layout::new(33, 0, 16, 5, 0),
            Err(LayoutError::TooWide { total: 54 })
        );
        assert_eq!(Layout::new(0, 0, 16, 5, 0), Err(LayoutError::NoSeconds));
        assert_eq!(Layout::new(32, 0, 0, 5, 0), Err(LayoutError::NoSequence));
        assert!(Layout::new(u32::MAX, 0, 16, 5, 0).is_err());
        assert!(Layout::new(10, 17, 16, 5, 0).is_err());
        assert!(Layout::new(10, 0, 16, 17, 0).is_err());
    }

    #[test]
    fn rejects_an_epoch_whose_last_second_overflows() {
        let latest = i64::MAX as u64 - ((1 << 32) - 1);
        let l = Layout::new(32, 0, 16, 5, latest).unwrap();
        assert_eq!(l.last_unix_second(), i64::MAX as u64);
        let far = Parts {
            seconds: u64::MAX,
            clock: 0,
            sequence: 0,
            shard: 0,
        };
        // The latest layout's last second is still a valid time.
        assert!(l.time(&far) > UNIX_EPOCH);
        for epoch in [latest + 1, u64::MAX - 10, u64::MAX] {
            assert_eq!(
                Layout::new(32, 0, 16, 5, epoch),
                Err(LayoutError::EpochTooLate { epoch })
            );
        }
        assert!(Layout::new(1, 0, 16, 5, i64::MAX as u64 - 1).is_ok());
        assert!(Layout::new(1, 0, 16, 5, i64::MAX as u64).is_err());
    }

    #[test]
    fn time_of_out_of_range_seconds_is_the_last_second() {
        let l = Layout::DEFAULT;
        let far = Parts {
            seconds: u64::MAX,
            clock: 0,
            sequence: 0,
            shard: 0,
        };
        let last = Parts {
            seconds: l.max_seconds(),
            ..far
        };
        assert_eq!(l.time(&far), l.time(&last));
    }

    #[test]
    fn clock_bits_sit_between_seconds_and_sequence() {
        let l = Layout::new(30, 3, 15, 5, 0).unwrap();
        let parts = Parts {
            seconds: (1 << 30) - 1,
            clock: 7,
            sequence: (1 << 15) - 1,
            shard: 31,
        };
        let id = l.encode(parts).unwrap();
        assert_eq!(id.as_u64(), (1 << 53) - 1);
        assert_eq!(l.decode(id).unwrap(), parts);
        assert!(l.encode(Parts { clock: 8, ..parts }).is_err());
    }

    #[test]
    fn narrow_layout_rejects_wide_ids() {
        let l = Layout::new(20, 0, 10, 2, 0).unwrap();
        assert!(l.decode(Id::from_u64(1 << 40).unwrap()).is_err());
    }
}
