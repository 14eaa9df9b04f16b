//! The ferroid generator the benches measure idutil against, set up the
//! same way in each: the snowflake layout gets 22 sequence bits, so it
//! measures CPU, not its format's cap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::time::MonotonicClock;

ferroid::define_snowflake_id!(
    /// Milliseconds since the bench started, 5 machine bits, 22 sequence
    /// bits: the sequence never runs out within a millisecond here.
    FerroidId, u64,
    reserved: 0,
    timestamp: 37,
    machine_id: 5,
    sequence: 22
);

/// ferroid's lock-free generator.
pub type Ferroid = AtomicSnowflakeGenerator<FerroidId, MonotonicClock>;

/// A second before now, in Unix time: the epoch of the snowflake peers
/// (37 bits of milliseconds last years).
pub fn epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        - Duration::from_secs(1)
}

/// A ferroid generator (machine 1) with its epoch a second ago.
pub fn ferroid() -> Ferroid {
    AtomicSnowflakeGenerator::new(1, MonotonicClock::with_epoch(epoch()))
}
