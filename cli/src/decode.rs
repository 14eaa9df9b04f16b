//! `idutil decode`: the parts of IDs, from arguments or standard input.

use std::io::{self, BufRead, Write};

use idutil::{Id, Layout};

use crate::report::CommandError;
use crate::times::rfc3339;
use crate::BoxError;

/// One decoded ID, as `decode --json` prints it: the fields in this order.
/// Seconds are Unix seconds, as everywhere in the command and as
/// `Id::unix_seconds` gives them.
#[derive(serde::Serialize)]
struct Decoded {
    id: u64,
    time: String,
    unix_seconds: u64,
    sequence: u32,
    shard: u32,
    clock: u32,
}

impl Decoded {
    fn new(id: Id, layout: Layout) -> Result<Decoded, idutil::Error> {
        let p = layout.decode(id)?;
        Ok(Decoded {
            id: id.as_u64(),
            time: rfc3339(layout.epoch() + p.seconds),
            unix_seconds: layout.epoch() + p.seconds,
            sequence: p.sequence,
            shard: p.shard,
            clock: p.clock,
        })
    }
}

/// Writes decoded IDs as they come: a line each, or the elements of one
/// JSON array, opened by the first and closed by [`DecodeOutput::finish`]
/// (so an error before the first ID leaves no output at all).
struct DecodeOutput<'a, W: Write> {
    out: &'a mut W,
    json: bool,
    layout: Layout,
    rows: u64,
}

impl<'a, W: Write> DecodeOutput<'a, W> {
    fn new(out: &'a mut W, json: bool, layout: Layout) -> Self {
        DecodeOutput {
            out,
            json,
            layout,
            rows: 0,
        }
    }

    fn row(&mut self, id: Id) -> Result<(), BoxError> {
        let d = Decoded::new(id, self.layout)?;
        if self.json {
            self.out
                .write_all(if self.rows == 0 { b"[" } else { b"," })?;
            serde_json::to_writer(&mut *self.out, &d)?;
        } else {
            writeln!(
                self.out,
                "id={} time={} unix_seconds={} sequence={} shard={} clock={}",
                d.id, d.time, d.unix_seconds, d.sequence, d.shard, d.clock
            )?;
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(self) -> io::Result<()> {
        match (self.json, self.rows) {
            (false, _) => Ok(()),
            (true, 0) => self.out.write_all(b"[]\n"),
            (true, _) => self.out.write_all(b"]\n"),
        }
    }
}

pub(crate) fn decode(
    ids: &[Id],
    json: bool,
    layout: Layout,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let mut output = DecodeOutput::new(out, json, layout);
    for &id in ids {
        output.row(id)?;
    }
    output.finish()?;
    Ok(())
}

/// The longest word `decode` reads from standard input: an ID has at most
/// 16 digits (18 with the quotes of a JSON string), so a longer word is not
/// an ID, and memory stays bounded whatever the input.
const MAX_WORD: usize = 64;

/// Decodes IDs from `input`, as `decode --help` describes: words separated
/// by whitespace, commas and square brackets, each a decimal ID, bare or in
/// double quotes. So one ID per line, and the JSON arrays of `idutil next
/// --json` (numbers) or of the string form (strings), all read the same.
/// A bad word stops with its line number; the IDs before it are already out.
pub(crate) fn decode_lines(
    input: impl BufRead,
    json: bool,
    layout: Layout,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let mut output = DecodeOutput::new(out, json, layout);
    let mut word = Vec::with_capacity(MAX_WORD);
    let mut too_long = false;
    let mut line = 1u64;
    let finish_word = |word: &mut Vec<u8>, too_long: &mut bool, line: u64| {
        let bad = |reason: String| CommandError::Input(format!("line {line}: {reason}"));
        if std::mem::take(too_long) {
            return Err(bad(format!(
                "a word longer than {MAX_WORD} bytes, not an ID"
            )));
        }
        if word.is_empty() {
            return Ok(None);
        }
        let text = std::str::from_utf8(word).map_err(|_| bad("not valid UTF-8".to_string()))?;
        let unquoted = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(text);
        let id: Id = unquoted
            .parse()
            .map_err(|e: idutil::IdError| bad(e.to_string()))?;
        word.clear();
        Ok(Some(id))
    };
    for byte in input.bytes() {
        let byte = byte.map_err(CommandError::Read)?;
        if byte.is_ascii_whitespace() || matches!(byte, b',' | b'[' | b']') {
            if let Some(id) = finish_word(&mut word, &mut too_long, line)? {
                output.row(id)?;
            }
            if byte == b'\n' {
                line += 1;
            }
        } else if word.len() < MAX_WORD {
            word.push(byte);
        } else {
            too_long = true;
        }
    }
    if let Some(id) = finish_word(&mut word, &mut too_long, line)? {
        output.row(id)?;
    }
    output.finish()?;
    Ok(())
}
