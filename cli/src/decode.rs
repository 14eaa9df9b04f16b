//! `idutil decode`: the parts of IDs, from arguments or standard input.

use std::io::{self, BufRead, Read, Write};

use idutil::{Id, Layout};

use crate::report::CommandError;
use crate::times::rfc3339;
use crate::BoxError;

/// One decoded ID, as `decode --json` prints it: the fields in this order.
#[derive(serde::Serialize)]
struct Decoded {
    id: u64,
    time: String,
    seconds: u64,
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
            seconds: p.seconds,
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
                "id={} time={} seconds={} sequence={} shard={} clock={}",
                d.id, d.time, d.seconds, d.sequence, d.shard, d.clock
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

/// The longest line `decode` reads from standard input; an ID has at most
/// 16 digits, so a longer line is not an ID, and memory stays bounded.
const MAX_LINE: usize = 4096;

/// Decodes IDs from `input`, one per line, as `decode --help` describes: a
/// bad line stops with its number; the lines before it are already out.
pub(crate) fn decode_lines(
    mut input: impl BufRead,
    json: bool,
    layout: Layout,
    out: &mut impl Write,
) -> Result<(), BoxError> {
    let mut output = DecodeOutput::new(out, json, layout);
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        let limit = (MAX_LINE + 1) as u64;
        let read = (&mut input)
            .take(limit)
            .read_until(b'\n', &mut line)
            .map_err(CommandError::Read)?;
        if read == 0 {
            break;
        }
        let bad = |reason: String| CommandError::Input(format!("line {number}: {reason}"));
        if line.last() != Some(&b'\n') && line.len() > MAX_LINE {
            return Err(bad(format!("longer than {MAX_LINE} bytes, not an ID")).into());
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| bad("not valid UTF-8".to_string()))?
            .trim();
        if text.is_empty() {
            continue;
        }
        let id: Id = text
            .parse()
            .map_err(|e: idutil::IdError| bad(e.to_string()))?;
        output.row(id)?;
    }
    output.finish()?;
    Ok(())
}
