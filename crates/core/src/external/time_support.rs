//! An `Id`'s second as a date-time value of jiff, chrono or time (features
//! `jiff`, `jiff-0_2`, `chrono`, `time`).
//!
//! Every ID's second lies between 2000-01-01T00:00:00Z and
//! 2136-02-07T06:28:15Z, which all three represent, so the conversions
//! cannot fail. Like [`Id::time`], they give the whole second the ID was
//! issued in (default layout), in UTC.

use crate::Id;

/// `From<Id>` for the `Timestamp` of the jiff crate `$jiff` (under feature
/// `$feature`): jiff 1 and 0.2 make a `Timestamp` alike.
#[cfg(any(feature = "jiff", feature = "jiff-0_2"))]
macro_rules! jiff_from_id {
    ($(#[$doc:meta])* $jiff:ident, $feature:literal) => {
        $(#[$doc])*
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl From<Id> for $jiff::Timestamp {
            fn from(id: Id) -> $jiff::Timestamp {
                let seconds =
                    i64::try_from(id.unix_seconds()).expect("an ID's second fits an i64");
                $jiff::Timestamp::from_second(seconds)
                    .expect("every ID's second is a jiff Timestamp")
            }
        }
    };
}

#[cfg(feature = "jiff")]
jiff_from_id! {
    /// The second the ID was issued in, as a jiff `Timestamp` (jiff 1).
    ///
    /// ```
    /// let id: idutil::Id = "1452736581206048".parse()?;
    /// let t = jiff::Timestamp::from(id);
    /// assert_eq!(t.to_string(), "2021-12-13T13:53:03Z");
    /// # Ok::<(), idutil::Error>(())
    /// ```
    jiff, "jiff"
}

#[cfg(feature = "jiff-0_2")]
jiff_from_id! {
    /// The second the ID was issued in, as a jiff 0.2 `Timestamp`.
    jiff02, "jiff-0_2"
}

/// The second the ID was issued in, as a chrono `DateTime<Utc>`.
///
/// ```
/// let id: idutil::Id = "1452736581206048".parse()?;
/// let t = chrono::DateTime::<chrono::Utc>::from(id);
/// let expected = chrono::NaiveDate::from_ymd_opt(2021, 12, 13)
///     .and_then(|d| d.and_hms_opt(13, 53, 3))
///     .unwrap();
/// assert_eq!(t.naive_utc(), expected);
/// # Ok::<(), idutil::Error>(())
/// ```
#[cfg(feature = "chrono")]
#[cfg_attr(docsrs, doc(cfg(feature = "chrono")))]
impl From<Id> for chrono::DateTime<chrono::Utc> {
    fn from(id: Id) -> chrono::DateTime<chrono::Utc> {
        let seconds = i64::try_from(id.unix_seconds()).expect("an ID's second fits an i64");
        chrono::DateTime::from_timestamp(seconds, 0)
            .expect("every ID's second is a chrono DateTime")
    }
}

/// The second the ID was issued in, as a time `OffsetDateTime` in UTC.
///
/// ```
/// let id: idutil::Id = "1452736581206048".parse()?;
/// let t = time::OffsetDateTime::from(id);
/// assert_eq!(t.unix_timestamp(), 1_639_403_583);
/// assert_eq!(t.offset(), time::UtcOffset::UTC);
/// # Ok::<(), idutil::Error>(())
/// ```
#[cfg(feature = "time")]
#[cfg_attr(docsrs, doc(cfg(feature = "time")))]
impl From<Id> for time::OffsetDateTime {
    fn from(id: Id) -> time::OffsetDateTime {
        let seconds = i64::try_from(id.unix_seconds()).expect("an ID's second fits an i64");
        time::OffsetDateTime::from_unix_timestamp(seconds)
            .expect("every ID's second is a time OffsetDateTime")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first and last IDs of the layout, and the test vector, agree
    /// with `Id::unix_seconds` in every library.
    #[test]
    fn the_ends_of_the_range_convert() {
        for id in [Id::MIN, Id::MAX, "1452736581206048".parse().unwrap()] {
            let unix = i64::try_from(id.unix_seconds()).unwrap();
            #[cfg(feature = "jiff")]
            assert_eq!(jiff::Timestamp::from(id).as_second(), unix);
            #[cfg(feature = "jiff-0_2")]
            assert_eq!(jiff02::Timestamp::from(id).as_second(), unix);
            #[cfg(feature = "chrono")]
            assert_eq!(chrono::DateTime::<chrono::Utc>::from(id).timestamp(), unix);
            #[cfg(feature = "time")]
            assert_eq!(time::OffsetDateTime::from(id).unix_timestamp(), unix);
            let _ = unix;
        }
        #[cfg(feature = "jiff")]
        assert_eq!(
            jiff::Timestamp::from(Id::MAX).to_string(),
            "2136-02-07T06:28:15Z"
        );
        #[cfg(feature = "jiff-0_2")]
        assert_eq!(
            jiff02::Timestamp::from(Id::MAX).to_string(),
            "2136-02-07T06:28:15Z"
        );
        #[cfg(feature = "chrono")]
        assert_eq!(
            chrono::DateTime::<chrono::Utc>::from(Id::MIN).naive_utc(),
            chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .unwrap()
        );
    }
}
