//! The state file's text: rendering, parsing (one reader of lines for
//! strict loading and for salvage), the versions read, and the checksum.

use std::collections::BTreeMap;
use std::path::Path;

use super::remedy::Remedy;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// The version of the state file format this crate reads and writes.
pub const STATE_VERSION: u32 = 3;

/// The oldest state file format this crate still reads: version 1, the same
/// fields without a checksum.
const OLDEST_VERSION: u32 = 1;

/// The first version whose files end with a checksum line: from it on, a
/// file without one is refused, and a damaged one has nothing certain.
pub(super) const CHECKSUM_SINCE: u32 = 2;

/// The first version that may hold a `skip` line; a file with one is
/// written as this version, any other as [`CHECKSUM_SINCE`].
const SKIP_SINCE: u32 = 3;

/// A version line's value as a version this crate reads: digits only,
/// from [`OLDEST_VERSION`] to [`STATE_VERSION`].
pub(super) fn known_version(text: &str) -> Option<u32> {
    let version = text.parse::<u32>().ok()?;
    (text.bytes().all(|b| b.is_ascii_digit())
        && (OLDEST_VERSION..=STATE_VERSION).contains(&version))
    .then_some(version)
}

/// The versions this crate reads, for the reasons that name an unknown one.
pub(super) fn versions_read() -> String {
    format!("this idutil reads versions {OLDEST_VERSION} to {STATE_VERSION}")
}

/// The value of a state file's `checksum` line for the text before that
/// line: the CRC-32 of those bytes, as 8 lowercase hexadecimal digits.
pub(super) fn checksum(text: &str) -> String {
    format!("{:08x}", crc32fast::hash(text.as_bytes()))
}

/// One line of a state file, as both readers see it: the strict one
/// ([`StateFile::parse`]) refuses what the lenient one (recovery's
/// salvage) passes over.
#[derive(Clone, Copy, Debug)]
pub(super) struct Line<'a> {
    /// The line's number, from 1.
    pub(super) number: usize,
    /// Where the line starts in the text: a checksum on this line covers
    /// the text before it.
    pub(super) start: usize,
    /// Whether the line ends in a newline (a file cut short ends in an
    /// incomplete one).
    pub(super) complete: bool,
    pub(super) kind: LineKind<'a>,
}

/// What a line holds, surrounding whitespace trimmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LineKind<'a> {
    /// An empty line or a comment (`#`).
    Blank,
    /// The end marker, `end`.
    End,
    /// `key = value`, each trimmed.
    Field { key: &'a str, value: &'a str },
    /// Anything else.
    Malformed,
}

/// The lines of a state file's text.
pub(super) fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    let mut at = 0;
    text.split_inclusive('\n').enumerate().map(move |(i, raw)| {
        let start = at;
        at += raw.len();
        let line = raw.trim();
        let kind = if line.is_empty() || line.starts_with('#') {
            LineKind::Blank
        } else if line == "end" {
            LineKind::End
        } else if let Some((key, value)) = line.split_once('=') {
            LineKind::Field {
                key: key.trim(),
                value: value.trim(),
            }
        } else {
            LineKind::Malformed
        };
        Line {
            number: i + 1,
            start,
            complete: raw.ends_with('\n'),
            kind,
        }
    })
}

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
    /// The highest wall-clock second (Unix seconds) any run on this shard
    /// has seen.
    pub seen_max: u64,
    /// The highest wall-clock second (Unix seconds) the last run saw.
    pub seen_last_run: u64,
    /// Per clock value, the highest second (Unix seconds) an ID may have
    /// been issued in.
    pub high_water: BTreeMap<u32, u64>,
    /// After a clean close: the exact last second (Unix seconds) and
    /// sequence issued, under clock value `clock_id mod 2^clock_bits`.
    pub last: Option<(u64, u32)>,
    /// Seconds (Unix seconds), first and last, that IDs may have been
    /// issued in far ahead of the rest, after a clock that was far ahead:
    /// a generator passes over them when it gets there. Written by a
    /// recovery that brought the shard back
    /// ([`RecoverOptions::unused`](super::RecoverOptions::unused)); a file
    /// with this line is version 3.
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
            "# idutil state file for shard {shard}. Replaced atomically by the generators that \
             hold shard-{shard}.lock; do not edit.\n\
             # If it is damaged, run: idutil state recover --shard {shard} --state-dir <this directory>\n\
             version = {version}\n\
             layout = {layout}\n\
             shard = {shard}\n\
             clock_id = {clock_id}\n\
             seen_max = {seen_max}\n\
             seen_last_run = {seen_last_run}\n\
             high_water = {marks}\n",
            shard = self.shard,
            version = if self.skip.is_some() {
                SKIP_SINCE
            } else {
                CHECKSUM_SINCE
            },
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
        let sum = checksum(&out);
        out.push_str(&format!("checksum = {sum}\nend\n"));
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
        for line in lines(text) {
            let n = line.number;
            if line.kind == LineKind::Blank {
                continue;
            }
            if ended {
                return Err(format!("line {n} comes after the end marker"));
            }
            let (key, value) = match line.kind {
                LineKind::End => {
                    ended = true;
                    continue;
                }
                _ if summed.is_some() => {
                    return Err(format!("line {n} comes after the checksum"));
                }
                LineKind::Field { key, value } => (key, value),
                LineKind::Blank | LineKind::Malformed => {
                    return Err(format!("line {n} is malformed"));
                }
            };
            if key == "checksum" {
                summed = Some(&text[..line.start]);
            }
            let Some(&key) = FIELDS.iter().find(|f| **f == key) else {
                return Err(format!("line {n} has an unknown field"));
            };
            if fields.insert(key, (n, value)).is_some() {
                return Err(format!("{key} appears twice (again on line {n})"));
            }
        }
        if fields.is_empty() {
            return Err("the file is empty".into());
        }
        let (n, version) = fields.remove("version").ok_or("no version line")?;
        let version = known_version(version)
            .ok_or_else(|| format!("line {n} holds an unknown version ({})", versions_read()))?;
        if !ended {
            return Err("truncated: no end marker".into());
        }
        let sum_line = fields.remove("checksum");
        match (version >= CHECKSUM_SINCE, sum_line) {
            (false, Some((n, _))) => return Err(format!("line {n} has an unknown field")),
            (false, None) => {}
            (true, None) => return Err("no checksum line".into()),
            (true, Some(_)) => {}
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
            Some((n, _)) if version < SKIP_SINCE => {
                return Err(format!("line {n} has an unknown field"))
            }
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
        if let (Some((n, value)), Some(summed)) = (sum_line, summed) {
            if value != checksum(summed) {
                return Err(format!(
                    "the checksum (line {n}) does not match the contents: the file was damaged \
                     or edited"
                ));
            }
        }
        Ok(state)
    }
}

/// The fields of a state file, in the order they are written.
const FIELDS: [&str; 10] = [
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
type Field<'a> = (usize, &'a str);

fn number<T: std::str::FromStr>(
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
fn parse_marks(
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

fn parse_layout((line, text): Field<'_>) -> std::result::Result<Layout, String> {
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
