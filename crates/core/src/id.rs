//! The `Id` value type.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::IdError;
use crate::layout::{Layout, Parts};

/// A unique ID: a non-negative integer at most 2<sup>53</sup> − 1, so that a
/// JavaScript number holds it exactly.
///
/// Every `Id` value is in range: the constructors check, and the only way
/// to get one otherwise is from a generator. It orders by time first (then
/// clock value, sequence and shard), converts losslessly to `i64` and `u64`,
/// and reads and writes as a plain decimal integer.
///
/// In a database it is a signed 64-bit column (`BIGINT`, SQLite's
/// `INTEGER`): with the feature of the application's database crate
/// (`sqlx`, `diesel`, `sea-orm`, `rusqlite`, `postgres-types`) it binds and
/// reads as one directly, and [`Id::min_at`] / [`Id::max_at`] bound a range
/// query by time.
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
#[cfg_attr(
    feature = "diesel",
    derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow)
)]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::BigInt))]
#[repr(transparent)]
// Held as the `i64` a database column stores, so that the diesel impls can
// hand out a reference to it; always in 0 ..= 2^53 - 1.
pub struct Id(i64);

impl Id {
    /// The smallest ID, 0.
    pub const MIN: Id = Id(0);

    /// The largest ID: 2<sup>53</sup> − 1 = 9007199254740991, JavaScript's
    /// `Number.MAX_SAFE_INTEGER`.
    pub const MAX: Id = Id((1 << 53) - 1);

    /// The ID with this value, or `None` above [`Id::MAX`]. (New IDs come
    /// from [`idutil::IdUtil::next`](https://docs.rs/idutil/latest/idutil/struct.IdUtil.html#method.next) or a
    /// [`idutil::Generator`](https://docs.rs/idutil/latest/idutil/struct.Generator.html); this only wraps a value.)
    pub const fn from_u64(value: u64) -> Option<Id> {
        if value <= Id::MAX.0 as u64 {
            Some(Id(value as i64))
        } else {
            None
        }
    }

    /// An ID from a value its maker knows to be at most [`Id::MAX`]: what
    /// a generator lays out with [`Layout::pack`] under a layout of at most
    /// 53 bits. No check in release builds (it is on the generator's hot
    /// path); a larger value is the caller's bug, caught in debug builds.
    /// Anything else uses [`Id::from_u64`].
    #[doc(hidden)]
    pub const fn from_valid(value: u64) -> Id {
        debug_assert!(value <= Id::MAX.0 as u64);
        Id(value as i64)
    }

    /// The value as `u64`.
    pub const fn as_u64(self) -> u64 {
        self.0 as u64
    }

    /// The value as `i64` (always non-negative).
    pub const fn as_i64(self) -> i64 {
        self.0
    }

    /// The value as `i64`, by reference, for database bindings that keep a
    /// reference to what they write.
    #[cfg(feature = "diesel")]
    pub(crate) const fn as_i64_ref(&self) -> &i64 {
        &self.0
    }

    /// The smallest ID any generator can issue in the second that holds
    /// `time` (default layout): sequence 0, shard 0. `None` before
    /// 2000-01-01T00:00:00Z and after 2136-02-07T06:28:15Z, where no ID
    /// can be.
    ///
    /// With [`Id::max_at`] it bounds a range query by time: the IDs issued
    /// from the second of `from` to the second of `to`, both included, on
    /// every shard, are exactly those with
    /// `Id::min_at(from) <= id <= Id::max_at(to)`. Time is in whole
    /// seconds, so the bounds round down to the second; a generator that
    /// borrowed seconds ([`idutil::Generator`](https://docs.rs/idutil/latest/idutil/struct.Generator.html), *How it issues*) gave its IDs the borrowed
    /// second, up to its lead ([`idutil::Generator::lead`](https://docs.rs/idutil/latest/idutil/struct.Generator.html#method.lead)) after the wall
    /// clock.
    ///
    /// ```
    /// use idutil::Id;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let from = UNIX_EPOCH + Duration::from_secs(1_639_403_583); // 2021-12-13T13:53:03Z
    /// let to = from + Duration::from_secs(3600);
    /// let (low, high) = (Id::min_at(from).unwrap(), Id::max_at(to).unwrap());
    ///
    /// let id: Id = "1452736581206048".parse()?; // issued at 13:53:03
    /// assert!(low <= id && id <= high);
    /// assert_eq!(low.unix_seconds(), 1_639_403_583);
    /// assert_eq!(high.unix_seconds(), 1_639_407_183);
    /// assert_eq!((low.sequence(), low.shard()), (0, 0));
    /// assert_eq!((high.sequence(), high.shard()), (65_535, 31));
    ///
    /// // Before 2000 there are no IDs.
    /// assert_eq!(Id::min_at(UNIX_EPOCH), None);
    /// # Ok::<(), idutil::Error>(())
    /// ```
    ///
    /// In SQL, the two bounds go in as parameters (with feature `sqlx` or
    /// `diesel` the `Id`s bind directly; otherwise their `i64` values):
    ///
    /// ```sql
    /// SELECT id, text FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id
    /// ```
    ///
    /// Where a time may fall outside the range, clamp it:
    /// `Id::min_at(t).unwrap_or(Id::MIN)` for a start before 2000.
    pub fn min_at(time: SystemTime) -> Option<Id> {
        Id::second_of(time).map(|seconds| Id::from_valid(first_in(seconds)))
    }

    /// The largest ID any generator can issue in the second that holds
    /// `time` (default layout): the last sequence number on the last shard.
    /// `None` outside the layout's range, as for [`Id::min_at`], which
    /// shows how the two bound a range query.
    pub fn max_at(time: SystemTime) -> Option<Id> {
        Id::second_of(time).map(|seconds| Id::from_valid(last_in(seconds)))
    }

    /// Seconds since the default layout's epoch of the second that holds
    /// `time`, if the layout can represent it.
    fn second_of(time: SystemTime) -> Option<u64> {
        let unix = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
        Layout::DEFAULT.seconds_of(unix)
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

/// Parses the canonical decimal form, the one [`Display`](fmt::Display)
/// writes: digits only, no sign, no spaces, and no leading zero (`"0"`
/// itself is fine). So each ID has exactly one text, and a string that
/// parses can be compared, hashed or used as a cache key as it is:
/// `"007"` is not read as 7. The string schemas
/// ([`idutil::serde::string::PATTERN`](https://docs.rs/idutil/latest/idutil/serde/string/constant.PATTERN.html), feature
/// `serde`) admit exactly what this accepts.
impl FromStr for Id {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Id, IdError> {
        if s.is_empty() {
            return Err(IdError::invalid(s, "empty"));
        }
        if s.starts_with('-') && s.len() > 1 && s[1..].bytes().all(|b| b.is_ascii_digit()) {
            return Err(IdError::invalid(s, "negative"));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(IdError::invalid(s, "not a decimal integer"));
        }
        if s.len() > 1 && s.starts_with('0') {
            return Err(IdError::invalid(
                s,
                "a leading zero; write an ID without one, as it prints",
            ));
        }
        match s.parse::<u64>() {
            Ok(v) => Id::try_from(v).map_err(|_| IdError::invalid(s, ABOVE_MAX)),
            Err(_) => Err(IdError::invalid(s, ABOVE_MAX)),
        }
    }
}

/// The smallest ID of the default layout's seconds field `seconds`: the
/// first sequence number, clock value and shard.
const fn first_in(seconds: u64) -> u64 {
    let layout = Layout::DEFAULT;
    layout.pack(layout.counter_from(seconds, 0), 0)
}

/// The largest ID of the default layout's seconds field `seconds`: the last
/// sequence number, clock value and shard.
const fn last_in(seconds: u64) -> u64 {
    let layout = Layout::DEFAULT;
    let sequence = layout.max_sequence() as u64;
    let base = layout.base(layout.max_clock(), layout.max_shard());
    layout.pack(layout.counter_from(seconds, sequence), base)
}

/// Why a number is not an ID: the one wording of the 2^53 bound, in every
/// message that rejects a number above [`Id::MAX`].
pub const ABOVE_MAX: &str = "above 2^53 - 1 (9007199254740991)";

impl TryFrom<u64> for Id {
    type Error = IdError;
    fn try_from(v: u64) -> Result<Id, IdError> {
        Id::from_u64(v).ok_or_else(|| IdError::invalid(v.to_string(), ABOVE_MAX))
    }
}

impl TryFrom<i64> for Id {
    type Error = IdError;
    fn try_from(v: i64) -> Result<Id, IdError> {
        let u = u64::try_from(v).map_err(|_| IdError::invalid(v.to_string(), "negative"))?;
        Id::try_from(u)
    }
}

impl From<Id> for u64 {
    fn from(id: Id) -> u64 {
        id.as_u64()
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
    fn the_bound_text_names_the_largest_id() {
        assert!(ABOVE_MAX.contains(&Id::MAX.to_string()));
    }

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
        for zeros in ["007", "00", "01452736581206048"] {
            let e = zeros.parse::<Id>().unwrap_err().to_string();
            assert!(e.contains("leading zero"), "{e}");
        }
        assert_eq!("0".parse::<Id>().unwrap(), Id::MIN);
        assert_eq!(
            "9007199254740991".parse::<Id>().unwrap(),
            Id::MAX,
            "2^53 - 1 is the largest ID"
        );
    }

    #[test]
    fn time_bounds_span_every_shard_and_sequence_of_a_second() {
        use std::time::Duration;
        let at = |unix: u64| UNIX_EPOCH + Duration::from_secs(unix);
        let layout = Layout::DEFAULT;

        assert_eq!(Id::min_at(at(layout.epoch())), Some(Id::MIN));
        assert_eq!(Id::max_at(at(layout.last_unix_second())), Some(Id::MAX));
        assert_eq!(
            Id::max_at(at(layout.epoch())).map(Id::as_u64),
            Some((1 << 21) - 1)
        );
        for outside in [
            UNIX_EPOCH,
            at(layout.epoch() - 1),
            at(layout.last_unix_second() + 1),
            UNIX_EPOCH - Duration::from_secs(1),
            at(u64::MAX / 2),
        ] {
            assert_eq!(Id::min_at(outside), None, "{outside:?}");
            assert_eq!(Id::max_at(outside), None, "{outside:?}");
        }

        let id: Id = "1452736581206048".parse().unwrap();
        let second = at(id.unix_seconds());
        let later_in_it = second + Duration::from_millis(999);
        for t in [second, later_in_it] {
            let (low, high) = (Id::min_at(t).unwrap(), Id::max_at(t).unwrap());
            assert!(low <= id && id <= high);
            assert_eq!(low.unix_seconds(), id.unix_seconds());
            assert_eq!(high.unix_seconds(), id.unix_seconds());
            assert_eq!((low.sequence(), low.shard()), (0, 0));
            assert_eq!(
                (high.sequence(), high.shard()),
                (layout.max_sequence(), layout.max_shard())
            );
            // Adjacent seconds do not overlap and leave no gap.
            assert_eq!(
                Id::max_at(t - Duration::from_secs(1)).unwrap().as_u64() + 1,
                low.as_u64()
            );
            assert_eq!(
                high.as_u64() + 1,
                Id::min_at(t + Duration::from_secs(1)).unwrap().as_u64()
            );
        }
    }

    #[test]
    fn a_long_input_is_cut_short_in_the_error_on_a_character_boundary() {
        for long in [
            "7".repeat(10_000),
            "é".repeat(5_000),
            format!("1{}", "\u{1F600}".repeat(40)),
        ] {
            let e = long.parse::<Id>().unwrap_err();
            let IdError::Invalid { input, .. } = &e else {
                panic!("{e:?}")
            };
            let kept = input.split("...").next().unwrap();
            assert_eq!(kept.chars().count(), IdError::MAX_INPUT, "{input}");
            assert!(long.starts_with(kept));
            assert!(
                input.ends_with(&format!("... ({} bytes)", long.len())),
                "{input}"
            );
            assert!(e.to_string().len() < 250, "{e}");
        }
        // Short inputs are kept whole.
        let e = "x".repeat(IdError::MAX_INPUT).parse::<Id>().unwrap_err();
        assert!(!e.to_string().contains("..."), "{e}");
    }

    #[test]
    fn messages_say_why() {
        let e = "-3".parse::<Id>().unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
        let e = "9007199254740992".parse::<Id>().unwrap_err().to_string();
        assert!(e.contains("2^53"), "{e}");
    }
}
