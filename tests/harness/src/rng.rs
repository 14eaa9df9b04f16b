//! A small deterministic random number generator whose seed a failure prints.

use std::time::{SystemTime, UNIX_EPOCH};

/// A small deterministic PRNG (xorshift64*), seeded from
/// `IDUTIL_TEST_SEED` or the clock; the seed is printed so a failure can
/// be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env_or_time(test: &str) -> Rng {
        let seed = std::env::var("IDUTIL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: IDUTIL_TEST_SEED={seed}");
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
}
