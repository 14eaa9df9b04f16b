//! Damaged state files: the ways one can be broken, and resealing a changed one.

use std::path::Path;

/// Ways a state file can be damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// A line overwritten with NUL bytes (a torn write); the high-water
    /// number survives.
    Corrupt,
    /// Cut short in the middle of the high-water line: the number is lost.
    Truncated,
    /// A version this crate does not read.
    WrongVersion,
    /// A well-formed file for another layout.
    WrongLayout,
    /// A well-formed file for another shard.
    WrongShard,
    /// Bytes that are not UTF-8; the numbers survive.
    NonUtf8,
    /// Zero bytes: every number is lost.
    Empty,
}

impl Damage {
    pub const ALL: [Damage; 7] = [
        Damage::Corrupt,
        Damage::Truncated,
        Damage::WrongVersion,
        Damage::WrongLayout,
        Damage::WrongShard,
        Damage::NonUtf8,
        Damage::Empty,
    ];

    /// Whether the high-water line survives, legible and certain, so that
    /// recovery needs no time vouched for.
    pub fn keeps_the_mark(self) -> bool {
        match self {
            // A sound file, only for another layout.
            Damage::WrongLayout => true,
            // A changed byte fails the checksum, so no field is certain;
            // cut short, an unknown format, or another shard's marks.
            Damage::Corrupt
            | Damage::NonUtf8
            | Damage::Truncated
            | Damage::WrongVersion
            | Damage::WrongShard
            | Damage::Empty => false,
        }
    }

    /// Damages the state file in place; returns the damaged bytes.
    pub fn apply(self, path: &Path) -> Vec<u8> {
        let good = std::fs::read_to_string(path).expect("read the state file");
        let replace_once = |from: &str, to: &str| {
            assert!(good.contains(from), "{from:?} not in state file:\n{good}");
            good.replacen(from, to, 1).into_bytes()
        };
        let line_of = |key: &str| {
            good.lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key} line in:\n{good}"))
                .to_string()
        };
        let bytes = match self {
            Damage::Corrupt => {
                let line = line_of("seen_max");
                replace_once(&line, &"\0".repeat(line.len()))
            }
            Damage::Truncated => {
                let at = good.find("high_water = ").expect("high_water line") + 17;
                good.as_bytes()[..at].to_vec()
            }
            Damage::WrongVersion => replace_once("version = 2\n", "version = 99\n"),
            // Sound for its own layout (one clock bit taken from the
            // seconds), so only the layout is wrong.
            Damage::WrongLayout => {
                reseal(&replace_once("seconds:32 clock:0", "seconds:31 clock:1"))
            }
            Damage::WrongShard => {
                let line = line_of("shard =");
                let shard: u32 = line["shard =".len()..].trim().parse().expect("shard");
                reseal(&replace_once(
                    &format!("{line}\n"),
                    &format!("shard = {}\n", shard + 1),
                ))
            }
            Damage::NonUtf8 => {
                let mut b = good.into_bytes();
                b.splice(2..2, [0xff, 0xfe, 0x80]);
                b
            }
            Damage::Empty => Vec::new(),
        };
        std::fs::write(path, &bytes).expect("write the damaged state file");
        bytes
    }
}

/// A state file's text with its checksum line made to match again, as a
/// sound file written that way would have it: the CRC-32 of every byte
/// before the line, 8 lowercase hexadecimal digits, as the `state` module's
/// docs define it.
pub fn reseal(text: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(text).expect("a state file is text");
    let at = text.find("checksum = ").expect("a checksum line");
    let sum = format!("{:08x}", crc32fast::hash(&text.as_bytes()[..at]));
    format!("{}checksum = {sum}\nend\n", &text[..at]).into_bytes()
}
