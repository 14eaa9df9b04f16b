//! Integrations with other crates, each behind the feature of the same
//! name. They add trait impls for [`idutil::Id`](https://docs.rs/idutil/latest/idutil/struct.Id.html); the core does not
//! depend on them.

#[cfg(feature = "diesel")]
mod diesel_support;
#[cfg(feature = "schemars")]
pub(crate) mod schemars_support;
#[cfg(feature = "sea-orm")]
mod sea_orm_support;
#[cfg(any(feature = "sqlx", feature = "sqlx-0_8"))]
mod sqlx_support;
#[cfg(feature = "ts-rs")]
mod ts_support;
#[cfg(any(feature = "utoipa", feature = "utoipa-5"))]
pub(crate) mod utoipa_support;

#[cfg(feature = "postgres-types")]
mod postgres_support;
#[cfg(feature = "rusqlite")]
mod rusqlite_support;
#[cfg(any(
    feature = "jiff",
    feature = "jiff-0_2",
    feature = "chrono",
    feature = "time"
))]
mod time_support;

/// The pattern of an ID written as a string: the canonical decimal form
/// (no sign, no leading zero) of a number from 0 to 2<sup>53</sup> − 1 =
/// 9007199254740991, exactly: a string it accepts always parses as an
/// [`idutil::Id`](https://docs.rs/idutil/latest/idutil/struct.Id.html), and every `Id` is written in a string it accepts.
/// Each alternative after the first two keeps a prefix of 9007199254740991
/// and puts a smaller digit after it; the tests build it again from that
/// number and check it against the parser.
#[cfg(any(test, feature = "serde"))]
pub(crate) const STRING_PATTERN: &str = "^(?:0|[1-9][0-9]{0,14}|[1-8][0-9]{15}|900[0-6][0-9]{12}|\
     90070[0-9]{11}|90071[0-8][0-9]{10}|900719[0-8][0-9]{9}|9007199[0-1][0-9]{8}|\
     90071992[0-4][0-9]{7}|900719925[0-3][0-9]{6}|9007199254[0-6][0-9]{5}|\
     90071992547[0-3][0-9]{4}|9007199254740[0-8][0-9]{2}|90071992547409[0-8][0-9]|\
     900719925474099[0-1])$";

#[cfg(test)]
mod tests {
    use super::STRING_PATTERN;
    use crate::Id;
    use proptest::prelude::*;

    /// The pattern of canonical decimals up to `max`, built digit by digit.
    fn pattern_up_to(max: &str) -> String {
        let mut alternatives = vec![
            "0".to_string(),
            format!("[1-9][0-9]{{0,{}}}", max.len() - 2),
        ];
        for (i, c) in max.bytes().enumerate() {
            let low = u8::from(i == 0);
            let last = i == max.len() - 1;
            let high = (c - b'0') as i32 - i32::from(!last);
            if high < i32::from(low) {
                continue;
            }
            let rest = max.len() - i - 1;
            let tail = match rest {
                0 => String::new(),
                1 => "[0-9]".to_string(),
                n => format!("[0-9]{{{n}}}"),
            };
            let digit = if i32::from(low) == high {
                high.to_string()
            } else {
                format!("[{low}-{high}]")
            };
            alternatives.push(format!("{}{digit}{tail}", &max[..i]));
        }
        format!("^(?:{})$", alternatives.join("|"))
    }

    #[test]
    fn the_pattern_is_built_from_the_largest_id() {
        assert_eq!(STRING_PATTERN, pattern_up_to(&Id::MAX.to_string()));
    }

    fn matches(s: &str) -> bool {
        regex::Regex::new(STRING_PATTERN).unwrap().is_match(s)
    }

    #[test]
    fn the_pattern_accepts_exactly_what_parses() {
        for s in [
            "0",
            "1",
            "9",
            "10",
            "1452736581206048",
            "9007199254740991",
            "8999999999999999",
        ] {
            assert!(matches(s) && s.parse::<Id>().is_ok(), "{s}");
        }
        for s in [
            "",
            "01",
            "00",
            "+1",
            "-1",
            " 1",
            "1 ",
            "9007199254740992",
            "9007199254741000",
            "9100000000000000",
            "10000000000000000",
            "99999999999999999",
            "1e3",
            "0x1",
        ] {
            assert!(!matches(s), "{s:?} matched");
            assert!(s.parse::<Id>().is_err(), "{s:?} parsed");
        }
    }

    proptest! {
        #[test]
        fn pattern_and_parser_agree_near_the_bound(offset in 0u64..2_000_000_000, up in any::<bool>()) {
            let max = Id::MAX.as_u64();
            let n = if up { max + offset } else { max - offset.min(max) };
            let s = n.to_string();
            prop_assert_eq!(matches(&s), n <= max);
            prop_assert_eq!(s.parse::<Id>().is_ok(), n <= max);
        }

        #[test]
        fn pattern_and_parser_agree_anywhere(n in any::<u64>(), zeros in 0usize..2) {
            let s = format!("{}{n}", "0".repeat(zeros));
            let canonical = zeros == 0 && n <= Id::MAX.as_u64();
            prop_assert_eq!(matches(&s), canonical);
            prop_assert_eq!(s.parse::<Id>().is_ok(), canonical);
        }
    }
}
