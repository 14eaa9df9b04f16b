//! The state file's text: rendering, parsing, the rules every file must
//! keep, and the checksum.

use super::*;
use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::layout::Layout;

/// What a state file records. Seconds are Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateFile {
    /// The layout the IDs were issued under.
    pub layout: Layout,
    /// The shard.
    pub shard: u32,
    /// The persistent clock id: bumped whenever a generator opened and found
    /// the wall clock behind the highest second the previous run saw.
    pub clock_id: u64,
    /// The highest wall-clock second any run on this shard has seen.
    pub seen_max: u64,
    /// The highest wall-clock second the last run saw.
    pub seen_last_run: u64,
    /// Per clock value, the highest second an ID may have been issued in.
    pub high_water: BTreeMap<u32, u64>,
    /// After a clean close: the exact last second and sequence issued,
    /// under clock value `clock_id mod 2^clock_bits`.
    pub last: Option<(u64, u32)>,
    /// Seconds, first and last, that IDs may have been issued in far ahead
    /// of the rest, after a clock that was far ahead: a generator passes
    /// over them when it gets there. Written by a recovery that brought
    /// the shard back ([`RecoverOptions::unused`](super::RecoverOptions::unused));
    /// a file with this line is version 3.
    pub skip: Option<(u64, u64)>,
}

impl StateFile {
    /// The clock value IDs carry: `clock_id` modulo the layout's clock values.
    pub fn clock_value(&self) -> u32 {
        (self.clock_id % u64::from(self.layout.clock_values())) as u32
    }

    /// The latest second an ID may have been issued in, as far as this
    /// file says: the highest mark, or the last second issued far ahead.
    pub(super) fn highest_issuable(&self) -> u64 {
        let mark = self.high_water.values().copied().max().unwrap_or(0);
        self.skip.map_or(mark, |(_, last)| mark.max(last))
    }

    pub(super) fn render(&self) -> String {
        let marks: Vec<String> = self
            .high_water
            .iter()
            .map(|(c, s)| format!("{c}:{s}"))
            .collect();
        let mut out = format!(
            "# idutil state file for shard {shard}. Replaced atomically by the generator that \
             holds shard-{shard}.lock; do not edit.\n\
             # If it is damaged, run: idutil state recover --shard {shard} --state-dir <this directory>\n\
             version = {version}\n\
             layout = {layout}\n\
             shard = {shard}\n\
             clock_id = {clock_id}\n\
             seen_max = {seen_max}\n\
             seen_last_run = {seen_last_run}\n\
             high_water = {marks}\n",
            shard = self.shard,
            version = if self.skip.is_some() { 3 } else { 2 },
            layout = self.layout.fingerprint(),
            clock_id = self.clock_id,
            seen_max = self.seen_max,
            seen_last_run = self.seen_last_run,
            marks = marks.join(" "),
        );
        if let Some((sec, seq)) = self.last {
            out.push_str(&format!("last = {sec} {seq}\n"));
        }
        if let Some((first, last)) = self.skip {
            out.push_str(&format!("skip = {first} {last}\n"));
        }
        let checksum = crc32fast::hash(out.as_bytes());
        out.push_str(&format!("checksum = {checksum:08x}\nend\n"));
        out
    }

    /// Parses a state file's text and checks every value against the
    /// file's own layout ([`StateFile::check`]). The error is the reason,
    /// for [`Error::BadState`]. It names lines and fields but never quotes
    /// the text: the file may not be a state file at all (a link to a
    /// secret, say), and error messages end up in logs.
    pub(super) fn parse(text: &str) -> std::result::Result<StateFile, String> {
        let mut fields: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
        let mut ended = false;
        let mut summed = None;
        let mut at = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            let (n, start) = (i + 1, at);
            at += line.len();
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if ended {
                return Err(format!("line {n} comes after the end marker"));
            }
            if line == "end" {
                ended = true;
                continue;
            }
            if summed.is_some() {
                return Err(format!("line {n} comes after the checksum"));
            }
            if line
                .split_once('=')
                .is_some_and(|(k, _)| k.trim() == "checksum")
            {
                summed = Some(&text[..start]);
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {n} is malformed"));
            };
            let Some(&key) = FIELDS.iter().find(|f| **f == key.trim()) else {
                return Err(format!("line {n} has an unknown field"));
            };
            if fields.insert(key, (n, value.trim())).is_some() {
                return Err(format!("{key} appears twice (again on line {n})"));
            }
        }
        if fields.is_empty() {
            return Err("the file is empty".into());
        }
        let (n, version) = fields.remove("version").ok_or("no version line")?;
        let version = match version.parse::<u32>() {
            Ok(v)
                if (OLDEST_VERSION..=STATE_VERSION).contains(&v)
                    && version.bytes().all(|b| b.is_ascii_digit()) =>
            {
                v
            }
            _ => {
                return Err(format!(
                    "line {n} holds an unknown version (this idutil reads versions \
                     {OLDEST_VERSION} to {STATE_VERSION})"
                ))
            }
        };
        if !ended {
            return Err("truncated: no end marker".into());
        }
        let checksum = fields.remove("checksum");
        match (version, checksum) {
            (1, Some((n, _))) => return Err(format!("line {n} has an unknown field")),
            (1, None) => {}
            (_, None) => return Err("no checksum line".into()),
            (_, Some(_)) => {}
        }
        let mut take = |key: &str| fields.remove(key).ok_or(format!("no {key} line"));
        let layout = parse_layout(take("layout")?)?;
        let shard = number(take("shard")?, "shard")?;
        let clock_id = number(take("clock_id")?, "clock_id")?;
        let seen_max = number(take("seen_max")?, "seen_max")?;
        let seen_last_run = number(take("seen_last_run")?, "seen_last_run")?;
        let high_water = parse_marks(take("high_water")?, &layout)?;
        let last = match fields.remove("last") {
            None => None,
            Some((n, v)) => {
                let mut words = v.split_whitespace();
                let (Some(sec), Some(seq), None) = (words.next(), words.next(), words.next())
                else {
                    return Err(format!("last (line {n}) is malformed"));
                };
                Some((
                    number((n, sec), "last second")?,
                    number((n, seq), "last sequence")?,
                ))
            }
        };
        let skip = match fields.remove("skip") {
            None => None,
            Some((n, _)) if version < 3 => return Err(format!("line {n} has an unknown field")),
            Some((n, v)) => {
                let mut words = v.split_whitespace();
                let (Some(first), Some(last), None) = (words.next(), words.next(), words.next())
                else {
                    return Err(format!("skip (line {n}) is malformed"));
                };
                Some((
                    number((n, first), "the first skipped second")?,
                    number((n, last), "the last skipped second")?,
                ))
            }
        };
        let state = StateFile {
            layout,
            shard,
            clock_id,
            seen_max,
            seen_last_run,
            high_water,
            last,
            skip,
        };
        state.check()?;
        // Last, so a field that is wrong in itself is named. Version 1
        // files have none and are checked field by field only.
        if let (Some((n, value)), Some(summed)) = (checksum, summed) {
            if value != format!("{:08x}", crc32fast::hash(summed.as_bytes())) {
                return Err(format!(
                    "the checksum (line {n}) does not match the contents: the file was damaged \
                     or edited"
                ));
            }
        }
        Ok(state)
    }

    /// Checks the values against the file's layout and against each other,
    /// so that nothing read from a file can make a generator resume early or
    /// make its arithmetic overflow:
    ///
    /// - every second (`seen_max`, `seen_last_run`, each high-water mark,
    ///   `last`'s second) lies within the layout's range, from its epoch to
    ///   its last second; `last`'s sequence and the shard fit the layout;
    /// - `high_water` has a mark for the current clock value, and that mark
    ///   is at or above `seen_last_run` and `last`'s second;
    /// - `seen_last_run` is at most `seen_max`, and the highest mark is at
    ///   or above `seen_max`;
    /// - `clock_id` can still be bumped through every clock value.
    ///
    /// Repeated or out-of-range clock values in `high_water` are refused
    /// when parsing.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        let layout = &self.layout;
        let in_range = |what: &str, second: u64| {
            if (layout.epoch()..=layout.last_unix_second()).contains(&second) {
                Ok(())
            } else {
                Err(format!("{what} is outside the layout's range of seconds"))
            }
        };
        if self.shard > layout.max_shard() {
            return Err("the shard does not fit the layout".into());
        }
        if self
            .clock_id
            .checked_add(u64::from(layout.clock_values()))
            .is_none()
        {
            return Err("clock_id is too large to be bumped".into());
        }
        in_range("seen_max", self.seen_max)?;
        in_range("seen_last_run", self.seen_last_run)?;
        if self.seen_last_run > self.seen_max {
            return Err("seen_last_run is above seen_max".into());
        }
        for (&value, &mark) in &self.high_water {
            if value >= layout.clock_values() {
                return Err("a high_water clock value does not fit the layout".into());
            }
            in_range(&format!("the high_water mark of clock value {value}"), mark)?;
        }
        let value = self.clock_value();
        let Some(&current) = self.high_water.get(&value) else {
            return Err(format!(
                "high_water has no mark for the current clock value {value}"
            ));
        };
        if current < self.seen_last_run {
            return Err(format!(
                "the high_water mark of clock value {value} is below seen_last_run"
            ));
        }
        if let Some((second, sequence)) = self.last {
            in_range("the last issued second", second)?;
            if sequence > layout.max_sequence() {
                return Err("the last issued sequence does not fit the layout".into());
            }
            if current < second {
                return Err(format!(
                    "the high_water mark of clock value {value} is below the last issued second"
                ));
            }
        }
        if self.high_water.values().all(|&mark| mark < self.seen_max) {
            return Err("every high_water mark is below seen_max".into());
        }
        if let Some((first, last)) = self.skip {
            in_range("the first skipped second", first)?;
            in_range("the last skipped second", last)?;
            if first > last {
                return Err("the skipped seconds end before they start".into());
            }
            // What a generator resumes after lies before the skipped
            // seconds; past them, the line is dropped.
            if self.high_water.values().any(|&mark| mark >= first) {
                return Err("a high_water mark is not below the skipped seconds".into());
            }
        }
        Ok(())
    }
}

/// The fields of a state file, in the order they are written.
pub(super) const FIELDS: [&str; 10] = [
    "checksum",
    "version",
    "layout",
    "shard",
    "clock_id",
    "seen_max",
    "seen_last_run",
    "high_water",
    "last",
    "skip",
];

/// A field's line number and value.
pub(super) type Field<'a> = (usize, &'a str);

pub(super) fn number<T: std::str::FromStr>(
    (line, text): Field<'_>,
    what: &str,
) -> std::result::Result<T, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} (line {line}) is not a number"));
    }
    text.parse()
        .map_err(|_| format!("{what} (line {line}) is out of range"))
}

/// `high_water = 0:1763751239 1:1763700000`: at least one mark, no clock
/// value twice, every clock value within the layout's.
pub(super) fn parse_marks(
    (line, text): Field<'_>,
    layout: &Layout,
) -> std::result::Result<BTreeMap<u32, u64>, String> {
    let mut marks = BTreeMap::new();
    for mark in text.split_whitespace() {
        let (value, second) = mark
            .split_once(':')
            .ok_or_else(|| format!("high_water (line {line}) is malformed"))?;
        let value: u32 = number((line, value), "a high_water clock value")?;
        if value >= layout.clock_values() {
            return Err(format!(
                "a high_water clock value (line {line}) does not fit the layout"
            ));
        }
        let second = number((line, second), "a high_water second")?;
        if marks.insert(value, second).is_some() {
            return Err(format!(
                "high_water (line {line}) lists clock value {value} twice"
            ));
        }
    }
    if marks.is_empty() {
        return Err(format!("high_water (line {line}) is empty"));
    }
    Ok(marks)
}

pub(super) fn parse_layout((line, text): Field<'_>) -> std::result::Result<Layout, String> {
    let malformed = || format!("layout (line {line}) is malformed");
    let mut widths = [None; 5];
    let names = ["seconds", "clock", "sequence", "shard", "epoch"];
    for part in text.split_whitespace() {
        let (name, value) = part.split_once(':').ok_or_else(malformed)?;
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(malformed)?;
        if widths[i].is_some() {
            return Err(malformed());
        }
        widths[i] = Some(number::<u64>((line, value), "a layout field")?);
    }
    let [Some(sec), Some(clk), Some(seq), Some(sh), Some(epoch)] = widths else {
        return Err(format!("layout (line {line}) is incomplete"));
    };
    let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    Layout::new(narrow(sec), narrow(clk), narrow(seq), narrow(sh), epoch)
        .map_err(|e| format!("layout (line {line}) is invalid: {e}"))
}

/// A state file's bytes as a state for `shard`, or why it cannot be
/// trusted.
pub(super) fn parse_state(bytes: &[u8], path: &Path, shard: u32) -> Result<StateFile> {
    let bad = |reason: String| Error::bad_state(path, shard, reason, Remedy::Recover);
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not text".into()))?;
    let state = StateFile::parse(text).map_err(bad)?;
    if state.shard != shard {
        return Err(bad(format!("it is for shard {}", state.shard)));
    }
    Ok(state)
}

/// Checks a loaded state file against the layout a generator uses.
pub(crate) fn check_layout(path: &Path, state: &StateFile, layout: &Layout) -> Result<()> {
    if state.layout != *layout {
        return Err(Error::bad_state(
            path,
            state.shard,
            format!(
                "it was written for layout {}, not {}",
                state.layout.fingerprint(),
                layout.fingerprint()
            ),
            Remedy::Recover,
        ));
    }
    Ok(())
}
