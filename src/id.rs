//! The `Id` value type.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::layout::{Layout, Parts};

/// A unique ID: a non-negative integer at most 2<sup>53</sup> − 1, so that a
/// JavaScript number holds it exactly.
///
/// Every `Id` value is in range: the constructors check, and the only way
/// to get one otherwise is from a generator. It orders by time first (then
/// clock value, sequence and shard), converts losslessly to `i64` and `u64`,
/// and reads and writes as a plain decimal integer.
///
/// ```
/// use idutil::Id;
///
/// let id: Id = "1452736581206048".parse()?;
/// assert_eq!(id.sequence(), 1);
/// assert_eq!(id.shard(), 0);
/// assert_eq!(id.unix_seconds(), 1_639_403_583); // 2021-12-13T13:53:03Z
/// assert_eq!(i64::from(id), 1_452_736_581_206_048);
///
/// assert!("9007199254740992".parse::<Id>().is_err()); // 2^53
/// assert!("-1".parse::<Id>().is_err());
/// # Ok::<(), idutil::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(transparent)]
pub struct Id(u64);

impl Id {
    /// The largest ID: 2<sup>53</sup> − 1 = 9007199254740991, JavaScript's
    /// `Number.MAX_SAFE_INTEGER`.
    pub const MAX: Id = Id((1 << 53) - 1);

    /// The ID with this value, or `None` above [`Id::MAX`].
    pub const fn new(value: u64) -> Option<Id> {
        if value <= Id::MAX.0 {
            Some(Id(value))
        } else {
            None
        }
    }

    pub(crate) const fn from_valid(value: u64) -> Id {
        debug_assert!(value <= Id::MAX.0);
        Id(value)
    }

    /// The value as `u64`.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The value as `i64` (always non-negative).
    pub const fn as_i64(self) -> i64 {
        self.0 as i64
    }

    /// The parts under the default layout.
    pub fn parts(self) -> Parts {
        Layout::DEFAULT
            .decode(self)
            .expect("the default layout spans all 53 bits")
    }

    /// Seconds since 2000-01-01 UTC (default layout).
    pub fn seconds(self) -> u64 {
        self.parts().seconds
    }

    /// Seconds since the Unix epoch (default layout).
    pub fn unix_seconds(self) -> u64 {
        self.seconds() + Layout::DEFAULT.epoch()
    }

    /// The sequence number within the second (default layout).
    pub fn sequence(self) -> u32 {
        self.parts().sequence
    }

    /// The shard (default layout).
    pub fn shard(self) -> u32 {
        self.parts().shard
    }

    /// The wall-clock second the ID was issued in (default layout).
    pub fn time(self) -> SystemTime {
        Layout::DEFAULT.time(&self.parts())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Parses a plain decimal integer: digits only, no sign, no spaces.
impl FromStr for Id {
    type Err = Error;

    fn from_str(s: &str) -> Result<Id> {
        if s.is_empty() {
            return Err(Error::invalid_id(s, "empty"));
        }
        if s.starts_with('-') && s.len() > 1 && s[1..].bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid_id(s, "negative"));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid_id(s, "not a decimal integer"));
        }
        match s.parse::<u64>() {
            Ok(v) => Id::try_from(v).map_err(|_| Error::invalid_id(s, ABOVE_MAX)),
            Err(_) => Err(Error::invalid_id(s, ABOVE_MAX)),
        }
    }
}

const ABOVE_MAX: &str = "above 2^53 - 1 (9007199254740991)";

impl TryFrom<u64> for Id {
    type Error = Error;
    fn try_from(v: u64) -> Result<Id> {
        Id::new(v).ok_or_else(|| Error::invalid_id(v.to_string(), ABOVE_MAX))
    }
}

impl TryFrom<i64> for Id {
    type Error = Error;
    fn try_from(v: i64) -> Result<Id> {
        let u = u64::try_from(v).map_err(|_| Error::invalid_id(v.to_string(), "negative"))?;
        Id::try_from(u)
    }
}

impl From<Id> for u64 {
    fn from(id: Id) -> u64 {
        id.0
    }
}

impl From<Id> for i64 {
    fn from(id: Id) -> i64 {
        id.as_i64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_vector() {
        let id: Id = "1452736581206048".parse().unwrap();
        let p = id.parts();
        assert_eq!(
            (p.seconds, p.clock, p.sequence, p.shard),
            (692_718_783, 0, 1, 0)
        );
        // 2021-12-13T13:53:03Z
        assert_eq!(id.unix_seconds(), 1_639_403_583);
    }

    #[test]
    fn rejects_junk() {
        for bad in [
            "",
            "-1",
            "-",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "1e3",
            "abc",
            "0x10",
            "9007199254740992",
            "18446744073709551616",
            "99999999999999999999999999",
        ] {
            assert!(bad.parse::<Id>().is_err(), "{bad:?} was accepted");
        }
        assert!(Id::try_from(-5i64).is_err());
        assert!(Id::try_from(1u64 << 53).is_err());
        assert_eq!("007".parse::<Id>().unwrap().as_u64(), 7);
        assert_eq!(
            "9007199254740991".parse::<Id>().unwrap(),
            Id::MAX,
            "2^53 - 1 is the largest ID"
        );
    }

    #[test]
    fn messages_say_why() {
        let e = "-3".parse::<Id>().unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
        let e = "9007199254740992".parse::<Id>().unwrap_err().to_string();
        assert!(e.contains("2^53"), "{e}");
    }
}
