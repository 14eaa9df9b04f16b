//! The settings of a recovery.

use std::time::Duration;

/// Settings for [`plan_recovery`](super::plan_recovery) and
/// [`recover`](super::recover).
///
/// ```
/// use idutil::state::RecoverOptions;
///
/// // No ID of the shard is later than 2030-01-01T00:00:00Z.
/// let options = RecoverOptions::new().after(1_893_456_000);
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct RecoverOptions {
    pub(super) after: Option<u64>,
    pub(super) unused: Option<(u64, u64)>,
    pub(super) force: bool,
    pub(super) window: Duration,
}

impl Default for RecoverOptions {
    fn default() -> Self {
        RecoverOptions::new()
    }
}

impl RecoverOptions {
    /// No vouched-for time, no forcing, the default reservation window.
    pub fn new() -> Self {
        RecoverOptions {
            after: None,
            unused: None,
            force: false,
            window: crate::generator::DEFAULT_WINDOW,
        }
    }

    /// A time (Unix seconds) that you vouch for: no ID of the shard carries
    /// a later second. Needed when the old high-water mark cannot be read
    /// with certainty, or there is no state file; otherwise it only moves
    /// the resumption later.
    pub fn after(mut self, unix_second: u64) -> Self {
        self.after = Some(unix_second);
        self
    }

    /// Brings back a shard that a clock far ahead pushed into the future:
    /// you vouch that no ID of the shard carries a second from `from` up to
    /// (not including) `to` (Unix seconds), the time the clock skipped.
    /// The shard then resumes after the latest second anything accounts for
    /// below `from` (and after the wall clock), and the seconds from `to` to
    /// the latest the state accounts for, where IDs were issued while the
    /// clock was wrong, are recorded as issued (a `skip` line): a
    /// generator passes over them when it gets there, so they stay unique.
    /// Healthy files are recovered this way without forcing. See the crate
    /// docs, *A clock far ahead*.
    pub fn unused(mut self, from: u64, to: u64) -> Self {
        self.unused = Some((from, to));
        self
    }

    /// Replaces even a healthy state file.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The reservation window added past the latest known second, rounded
    /// up to whole seconds (default [`DEFAULT_WINDOW`](crate::DEFAULT_WINDOW),
    /// the generator's).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }
}
