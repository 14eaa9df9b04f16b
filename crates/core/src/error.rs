//! The errors of the values every idutil crate shares: [`IdError`] for a
//! value that is not an ID, and [`EnvError`] for an environment variable
//! that cannot be used. Both convert into [`idutil::Error`](https://docs.rs/idutil/latest/idutil/enum.Error.html).

use std::fmt;

/// A value that is not an ID: text or a number that cannot be parsed or
/// converted into an [`idutil::Id`](https://docs.rs/idutil/latest/idutil/struct.Id.html), or parts that do not fit a
/// [`Layout`](crate::Layout).
///
/// Returned by `FromStr` and `TryFrom` for `Id` and by
/// [`Layout::encode`](crate::Layout::encode) and
/// [`Layout::decode`](crate::Layout::decode). It converts into [`idutil::Error`](https://docs.rs/idutil/latest/idutil/enum.Error.html),
/// so `?` works in functions that return either.
///
/// ```
/// use idutil::{Id, IdError};
/// let err = "12x".parse::<Id>().unwrap_err();
/// assert!(matches!(err, IdError::Invalid { .. }));
/// assert_eq!(err.to_string(), r#"invalid ID "12x": not a decimal integer"#);
///
/// // A long input is cut short in the error, so it can go back to a client.
/// let err = "x".repeat(10_000).parse::<Id>().unwrap_err().to_string();
/// assert!(err.len() < 100, "{err}");
/// assert!(err.contains("... (10000 bytes)"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdError {
    /// Text or a number that is not a valid ID (negative, above
    /// 2<sup>53</sup> − 1, not a decimal integer, or not fitting the layout).
    #[non_exhaustive]
    Invalid {
        /// The input, as given, or its first [`IdError::MAX_INPUT`]
        /// characters followed by `...` and its length in bytes if it is
        /// longer: an error that may reach a log or an HTTP response never
        /// echoes a huge input back.
        input: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A part given to [`Layout::encode`](crate::Layout::encode) does not fit
    /// its field.
    #[non_exhaustive]
    PartOutOfRange {
        /// `"seconds"`, `"clock"`, `"sequence"` or `"shard"`.
        part: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
        max: u64,
    },
}

impl IdError {
    /// How many characters of a rejected input [`IdError::Invalid`] keeps:
    /// 2<sup>53</sup> − 1 has 16 digits, so any longer text is not an ID,
    /// and 32 show plenty of what it was.
    pub const MAX_INPUT: usize = 32;

    pub(crate) fn invalid(input: impl Into<String>, reason: &'static str) -> IdError {
        let mut input = input.into();
        if let Some((cut, _)) = input.char_indices().nth(IdError::MAX_INPUT) {
            let len = input.len();
            input.truncate(cut);
            input.push_str(&format!("... ({len} bytes)"));
        }
        IdError::Invalid { input, reason }
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::Invalid { input, reason } => write!(f, "invalid ID {input:?}: {reason}"),
            IdError::PartOutOfRange { part, value, max } => {
                write!(f, "{part} {value} does not fit the layout (at most {max})")
            }
        }
    }
}

impl std::error::Error for IdError {}

/// An environment variable ([`env`](crate::env) lists them) holds a value
/// that cannot be used. A setting that was asked for is never silently
/// replaced by a default: reading it fails instead.
///
/// It converts into [`idutil::Error`](https://docs.rs/idutil/latest/idutil/enum.Error.html) (as its `InvalidEnv`), so `?` works in
/// functions that return either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    /// The variable's name.
    pub var: &'static str,
    /// Its value, lossily decoded (a secret in it hidden).
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let EnvError { var, value, reason } = self;
        write!(f, "environment variable {var}={value:?}: {reason}")
    }
}

impl std::error::Error for EnvError {}
