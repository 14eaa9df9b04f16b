//! A layout as text: the fingerprint state files record, reading it back
//! (`FromStr`, with the table of ready layouts) and `IDUTIL_LAYOUT`.

use std::fmt;

use super::Layout;

impl Layout {
    /// A short text form, `seconds:32 clock:0 sequence:16 shard:5 epoch:946684800`,
    /// as recorded in state files.
    pub fn fingerprint(&self) -> String {
        format!(
            "seconds:{} clock:{} sequence:{} shard:{} epoch:{}",
            self.seconds_bits, self.clock_bits, self.sequence_bits, self.shard_bits, self.epoch
        )
    }
}

/// A layout's text that cannot be read ([`Layout`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseLayoutError {
    reason: String,
}

impl fmt::Display for ParseLayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid layout: {}", self.reason)
    }
}

impl std::error::Error for ParseLayoutError {}

/// Reads the text [`Layout::fingerprint`] writes (and state files record):
/// the five fields `seconds`, `clock`, `sequence`, `shard` and `epoch`, each
/// `name:value` exactly once, in any order, separated by spaces.
///
/// Ready layouts (epoch 2000-01-01):
///
/// | text | instances | IDs a second each | until |
/// |---|---|---|---|
/// | `seconds:32 clock:0 sequence:16 shard:5 epoch:946684800` (the default) | 32 | 65,536 | 2136 |
/// | `seconds:32 clock:0 sequence:13 shard:8 epoch:946684800` | 256 | 8,192 | 2136 |
/// | `seconds:32 clock:0 sequence:11 shard:10 epoch:946684800` | 1,024 | 2,048 | 2136 |
/// | `seconds:32 clock:0 sequence:9 shard:12 epoch:946684800` | 4,096 | 512 | 2136 |
/// | `seconds:31 clock:2 sequence:15 shard:5 epoch:946684800` | 32 | 32,768 (4 clock values) | 2068 |
///
/// A fleet that outgrows its shards moves to a layout with more shard bits
/// under a new ID space (a new lease prefix or state directory): IDs of two
/// layouts can collide, and generators refuse a shard recorded under
/// another.
///
/// ```
/// use idutil::Layout;
///
/// let wide: Layout = "seconds:32 clock:0 sequence:11 shard:10 epoch:946684800".parse()?;
/// assert_eq!(wide.max_shard(), 1023);
/// assert_eq!(wide.fingerprint().parse::<Layout>()?, wide);
/// assert!("seconds:33 clock:0 sequence:16 shard:5 epoch:0".parse::<Layout>().is_err());
/// # Ok::<(), idutil::ParseLayoutError>(())
/// ```
impl std::str::FromStr for Layout {
    type Err = ParseLayoutError;

    fn from_str(text: &str) -> Result<Layout, ParseLayoutError> {
        let fail = |reason: String| ParseLayoutError { reason };
        let shown: String = text.chars().take(80).collect();
        let names = ["seconds", "clock", "sequence", "shard", "epoch"];
        let mut values = [None; 5];
        for part in text.split_whitespace() {
            let (name, value) = part.split_once(':').ok_or_else(|| {
                fail(format!(
                    "{shown:?}: fields are name:value, e.g. sequence:11"
                ))
            })?;
            let i = names.iter().position(|n| *n == name).ok_or_else(|| {
                fail(format!(
                    "{shown:?}: unknown field {name:?}; the fields are seconds, clock, \
                     sequence, shard and epoch"
                ))
            })?;
            if values[i].is_some() {
                return Err(fail(format!("{shown:?}: {name} is given twice")));
            }
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) || value.len() > 20 {
                return Err(fail(format!("{shown:?}: {name} is not a whole number")));
            }
            let value: u64 = value
                .parse()
                .map_err(|_| fail(format!("{shown:?}: {name} is too large")))?;
            values[i] = Some(value);
        }
        let [Some(seconds), Some(clock), Some(sequence), Some(shard), Some(epoch)] = values else {
            let missing: Vec<&str> = names
                .iter()
                .zip(values)
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect();
            return Err(fail(format!("{shown:?}: missing {}", missing.join(", "))));
        };
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Layout::new(
            narrow(seconds),
            narrow(clock),
            narrow(sequence),
            narrow(shard),
            epoch,
        )
        .map_err(|e| fail(format!("{shown:?}: {e}")))
    }
}

impl Layout {
    /// The layout named by `IDUTIL_LAYOUT`, if it is set.
    ///
    /// # Errors
    ///
    /// [`EnvError`](crate::EnvError) ([`idutil::Error::InvalidEnv`](https://docs.rs/idutil/latest/idutil/enum.Error.html#variant.InvalidEnv) once
    /// converted) if it is set but cannot be read: a layout that was asked for is never silently
    /// replaced by the default.
    pub fn from_env() -> Result<Option<Layout>, crate::EnvError> {
        let Some(raw) = std::env::var_os(crate::env::LAYOUT) else {
            return Ok(None);
        };
        let text = raw.to_string_lossy().into_owned();
        text.parse().map(Some).map_err(|_| crate::EnvError {
            var: crate::env::LAYOUT,
            value: text.chars().take(100).collect(),
            reason: "not a layout; give the five fields, e.g. \
                     \"seconds:32 clock:0 sequence:11 shard:10 epoch:946684800\" \
                     (see idutil::Layout's FromStr for ready layouts)",
        })
    }
}
