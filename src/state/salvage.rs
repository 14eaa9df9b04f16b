//! What a state file that cannot be trusted as a whole still says for
//! certain, read leniently for a recovery.

use std::collections::BTreeSet;

use super::format::{checksum, known_version, lines, versions_read, LineKind, CHECKSUM_SINCE};
use crate::layout::Layout;

/// What a state file that failed
/// [`StateFile::parse`](super::StateFile::parse) still says for certain.
/// It reads the same lines as the strict reader, passing over what that
/// one refuses. Only complete (newline-terminated) lines count, so a file
/// cut short in the middle of a number does not pass off the shorter
/// number.
#[derive(Debug)]
pub(super) struct Salvage {
    /// The high-water marks, or why they cannot be trusted.
    pub(super) marks: std::result::Result<Vec<u64>, String>,
    /// Other legible seconds within the layout's range, as evidence:
    /// among them the marks that parse but are not certain, which can only
    /// make a recovery resume later.
    pub(super) seconds: Vec<(&'static str, u64)>,
    pub(super) clock_id: Option<u64>,
}

impl Salvage {
    pub(super) fn read(text: &str, layout: &Layout) -> Salvage {
        let fields: Vec<(&str, &str)> = lines(text)
            .filter(|line| line.complete)
            .filter_map(|line| match line.kind {
                LineKind::Field { key, value } => Some((key, value)),
                _ => None,
            })
            .collect();
        let values = |key: &str| -> Vec<&str> {
            fields
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| *v)
                .collect()
        };
        let plausible = |v: &str| {
            let n: u64 = v.parse().ok()?;
            (layout.epoch()..=layout.last_unix_second())
                .contains(&n)
                .then_some(n)
        };
        let marks = match (
            values("version").as_slice(),
            values("high_water").as_slice(),
        ) {
            ([], _) => Err("no legible version line".to_string()),
            ([v], _) if known_version(v).is_none() => {
                Err(format!("an unknown version; {}", versions_read()))
            }
            ([_], []) => Err("no complete high_water line".to_string()),
            ([_], [marks]) => Salvage::marks(marks, &plausible),
            _ => Err("a field appears twice".to_string()),
        };
        let legible_marks = match &values("high_water").as_slice() {
            [line] => line
                .split_whitespace()
                .filter_map(|entry| entry.split_once(':'))
                .filter_map(|(_, second)| plausible(second))
                .collect(),
            _ => Vec::new(),
        };
        let version = match values("version").as_slice() {
            [v] => known_version(v),
            _ => None,
        };
        // A checksum that fails says some byte changed, and it may be one of
        // the mark's digits: nothing in the file is certain then.
        let marks = match (Salvage::checksum(text), version) {
            (Some(false), _) => {
                Err("the file's checksum does not match, so none of its fields is certain".into())
            }
            (None, Some(v)) if v >= CHECKSUM_SINCE => {
                Err("its checksum line is gone, so none of its fields is certain".into())
            }
            _ => marks,
        };
        let one = |key: &str| match values(key).as_slice() {
            [v] => Some(*v),
            _ => None,
        };
        let mut seconds = Vec::new();
        for (key, what) in [
            ("seen_max", "the highest wall clock seen"),
            ("seen_last_run", "the wall clock of the last run"),
        ] {
            seconds.extend(one(key).and_then(plausible).map(|s| (what, s)));
        }
        seconds.extend(
            one("last")
                .and_then(|v| v.split_whitespace().next())
                .and_then(plausible)
                .map(|s| ("the last issued ID", s)),
        );
        // A mark below a second the file records as seen or issued is not
        // what a generator writes: a changed digit, perhaps.
        let certain = marks.is_ok();
        let marks = marks.and_then(|m| {
            let highest = m.iter().copied().max().unwrap_or(0);
            match seconds.iter().find(|(_, s)| *s > highest) {
                Some((what, _)) => Err(format!(
                    "the high-water marks are below {what}, which a generator never writes"
                )),
                None => Ok(m),
            }
        });
        // Seconds issued far ahead (version 3): never resumed before, so a
        // damaged file's recovery passes them by resuming after them.
        seconds.extend(
            one("skip")
                .and_then(|v| v.split_whitespace().nth(1))
                .and_then(plausible)
                .map(|s| ("the last second issued far ahead", s)),
        );
        if !certain || marks.is_err() {
            seconds.extend(
                legible_marks
                    .into_iter()
                    .map(|m| ("a high-water mark that may be damaged", m)),
            );
        }
        Salvage {
            marks,
            seconds,
            clock_id: one("clock_id").and_then(|v| v.parse().ok()),
        }
    }

    /// Whether the file's checksum line matches what comes before it;
    /// `None` if it has no complete checksum line.
    fn checksum(text: &str) -> Option<bool> {
        lines(text).find_map(|line| match line.kind {
            LineKind::Field {
                key: "checksum",
                value,
            } if line.complete => Some(value == checksum(&text[..line.start])),
            _ => None,
        })
    }

    fn marks(
        text: &str,
        plausible: &dyn Fn(&str) -> Option<u64>,
    ) -> std::result::Result<Vec<u64>, String> {
        let mut values = BTreeSet::new();
        let mut marks = Vec::new();
        for entry in text.split_whitespace() {
            let (value, second) = entry
                .split_once(':')
                .ok_or("the high_water line is malformed")?;
            let value: u32 = value
                .parse()
                .map_err(|_| "the high_water line is malformed")?;
            if !values.insert(value) {
                return Err("the high_water line lists a clock value twice".into());
            }
            if !second.bytes().all(|b| b.is_ascii_digit()) {
                return Err("the high_water line is malformed".into());
            }
            marks.push(plausible(second).ok_or("a high_water mark is outside the layout's range")?);
        }
        if marks.is_empty() {
            return Err("the high_water line is empty".into());
        }
        Ok(marks)
    }
}
