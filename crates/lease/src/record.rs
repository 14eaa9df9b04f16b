//! A shard's record in the lease's store, read strictly: every field
//! parsed and checked against the layout, whatever the engine. Engines hand
//! over the fields as text ([`RawRecord`]) so that one reader judges them.

use crate::layout::Layout;

/// A shard's record, as found when the lease was granted (or as created,
/// for a shard that had none). Seconds are Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub high_water: Option<u64>,
    pub last: Option<(u64, u32)>,
    pub seen: Option<u64>,
}

impl Record {
    /// The first counter value under `layout` after everything the record
    /// says may have been issued: right after the exact last ID of a clean
    /// close, else after the high-water second.
    pub fn resume_at(&self, layout: &Layout) -> u64 {
        // Clamped one past the range: an absurd record ends the range
        // rather than wrapping the counter.
        let at = |unix: u64| layout.counter_at(unix);
        match (self.last, self.high_water) {
            (Some((sec, seq)), _) => at(sec) + u64::from(seq) + 1,
            (None, Some(hw)) => at(hw.saturating_add(1)),
            (None, None) => 0,
        }
    }
}

/// A record's fields as the store holds them, as text (`None`: absent).
#[derive(Clone, Debug, Default)]
pub struct RawRecord {
    pub high_water: Option<String>,
    pub last: Option<String>,
    pub seen: Option<String>,
    pub layout: Option<String>,
}

/// A field that cannot be trusted, and why.
pub type Problem = (&'static str, String);

/// Reads a record under `layout`, strictly: each field that is valid, and
/// what is wrong with the others (a missing `high_water`, `seen` or
/// `layout` included). The layout's own value is left to the caller to
/// compare.
pub fn read_record(raw: &RawRecord, layout: &Layout) -> (Record, Vec<Problem>) {
    let mut problems = Vec::new();
    let required = [
        ("high_water", &raw.high_water),
        ("seen", &raw.seen),
        ("layout", &raw.layout),
    ];
    for (name, value) in required {
        if value.is_none() {
            problems.push((name, "is missing".to_string()));
        }
    }
    let mut second = |name, value: &Option<String>| {
        parse_second(value.as_deref()?, layout)
            .map_err(|reason| problems.push((name, reason)))
            .ok()
    };
    let high_water = second("high_water", &raw.high_water);
    let seen = second("seen", &raw.seen);
    let mut record = Record {
        high_water,
        last: None,
        seen,
    };
    if let Some(text) = raw.last.as_deref() {
        match parse_last(text, layout) {
            Ok((sec, _)) if high_water.is_some_and(|hw| sec > hw) => problems.push((
                "last",
                format!(
                    "= {} is after high_water {}, the second reserved",
                    shown(text),
                    high_water.unwrap_or_default()
                ),
            )),
            Ok(last) => record.last = Some(last),
            Err(reason) => problems.push(("last", reason)),
        }
    }
    (record, problems)
}

/// At most 40 characters of a value from the store, quoted, for a message.
pub fn shown(text: &str) -> String {
    let mut cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

pub fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A Unix second within `layout`'s range, written with digits only.
pub fn parse_second(text: &str, layout: &Layout) -> std::result::Result<u64, String> {
    let (first, last) = (layout.epoch(), layout.last_unix_second());
    // At most 16 digits, as the scripts check while a shard is held.
    if !all_digits(text) || text.len() > 16 {
        return Err(format!(
            "= {} is not a whole number of Unix seconds (digits only)",
            shown(text)
        ));
    }
    match text.parse::<u64>() {
        Ok(v) if (first..=last).contains(&v) => Ok(v),
        _ => Err(format!(
            "= {} is outside the layout's range of Unix seconds {first}..={last}",
            shown(text)
        )),
    }
}

/// `"second sequence"`: the second within `layout`'s range, the sequence
/// within its sequence numbers.
pub fn parse_last(text: &str, layout: &Layout) -> std::result::Result<(u64, u32), String> {
    let form = || {
        format!(
            "= {} is not \"second sequence\" (two whole numbers, one space between)",
            shown(text)
        )
    };
    let (sec, seq) = text.split_once(' ').ok_or_else(form)?;
    if !all_digits(sec) || !all_digits(seq) {
        return Err(form());
    }
    let sec = parse_second(sec, layout)?;
    let max = layout.max_sequence();
    match seq.parse::<u32>() {
        Ok(seq) if seq <= max => Ok((sec, seq)),
        _ => Err(format!(
            "= {}: the sequence is above the layout's largest, {max}",
            shown(text)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseError;

    #[test]
    fn resume_points() {
        let l = Layout::DEFAULT;
        let t = 1_700_000_000;
        let at = |s: u64| (s - l.epoch()) << l.sequence_bits();
        assert_eq!(Record::default().resume_at(&l), 0);
        let crashed = Record {
            high_water: Some(t + 5),
            ..Record::default()
        };
        assert_eq!(crashed.resume_at(&l), at(t + 6));
        let closed = Record {
            high_water: Some(t),
            last: Some((t, 41)),
            seen: Some(t),
        };
        assert_eq!(closed.resume_at(&l), at(t) + 42);
        let full = Record {
            last: Some((t, 65535)),
            ..closed
        };
        assert_eq!(full.resume_at(&l), at(t + 1));
        let absurd = Record {
            high_water: Some(u64::MAX),
            ..Record::default()
        };
        assert_eq!(
            absurd.resume_at(&l),
            (l.max_seconds() + 1) << l.sequence_bits()
        );
    }

    fn raw(hw: &str, last: Option<&str>, seen: &str) -> RawRecord {
        RawRecord {
            high_water: Some(hw.to_string()),
            last: last.map(str::to_string),
            seen: Some(seen.to_string()),
            layout: Some(Layout::DEFAULT.fingerprint()),
        }
    }

    fn problems(r: &RawRecord) -> Vec<&'static str> {
        read_record(r, &Layout::DEFAULT)
            .1
            .into_iter()
            .map(|p| p.0)
            .collect()
    }

    #[test]
    fn a_valid_record_is_read() {
        let l = Layout::DEFAULT;
        let (record, problems) =
            read_record(&raw("1700000005", Some("1700000000 7"), "1700000001"), &l);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            record,
            Record {
                high_water: Some(1_700_000_005),
                last: Some((1_700_000_000, 7)),
                seen: Some(1_700_000_001),
            }
        );
        let edges = raw(
            &l.last_unix_second().to_string(),
            Some(&format!("{} {}", l.epoch(), l.max_sequence())),
            &l.epoch().to_string(),
        );
        assert!(read_record(&edges, &l).1.is_empty());
    }

    #[test]
    fn every_field_is_read_strictly() {
        let l = Layout::DEFAULT;
        let past_end = (l.last_unix_second() + 1).to_string();
        let before_epoch = (l.epoch() - 1).to_string();
        for bad in [
            "99999999999999999999",
            "00000000000000001795999999",
            "1795999999.0",
            "",
            " 1700000000",
            "1700000000 ",
            "+1700000000",
            "-1",
            "0x10",
            "1e9",
            "١٧٠٠٠٠٠٠٠٠",
            &past_end,
            &before_epoch,
        ] {
            assert_eq!(
                problems(&raw(bad, None, "1700000000")),
                ["high_water"],
                "{bad:?}"
            );
            assert_eq!(problems(&raw("1700000000", None, bad)), ["seen"], "{bad:?}");
        }
        for bad in [
            "1700000000",
            "1700000000  7",
            "1700000000 7 ",
            "1700000000 -7",
            "1700000000 65536",
            "1700000000 99999999999",
            "1700000001 0",
            "x y",
            "",
        ] {
            assert_eq!(
                problems(&raw("1700000000", Some(bad), "1700000000")),
                ["last"],
                "{bad:?}"
            );
        }
        let mut missing = raw("1700000000", None, "1700000000");
        missing.layout = None;
        missing.seen = None;
        assert_eq!(problems(&missing), ["seen", "layout"]);
        assert_eq!(problems(&RawRecord::default()).len(), 3);
    }

    #[test]
    fn messages_name_the_field_and_cut_long_values() {
        let long = "9".repeat(200);
        let (_, p) = read_record(&raw(&long, None, "1700000000"), &Layout::DEFAULT);
        assert_eq!(p[0].0, "high_water");
        assert!(p[0].1.contains("digits only") || p[0].1.contains("outside"));
        assert!(p[0].1.len() < 150, "{}", p[0].1);
        let e = LeaseError::invalid_record(3, "idutil:mark:3", "high_water", p[0].1.clone());
        let text = e.to_string();
        assert!(text.contains("idutil:mark:3 field high_water"), "{text}");
        assert_eq!(e.shard(), Some(3));
    }
}
