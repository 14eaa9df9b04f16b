//! The generator's counter, `(seconds << sequence_bits) | sequence`: one
//! number that runs through every ID of a layout in order, so that taking
//! the next ID is an increment and a second ends by carrying into the next.
//! Every counter is made and read here.
//!
//! Seconds: everything outside a counter (the generator's bookkeeping, the
//! state file, the lease, the clock and every error) speaks Unix seconds.
//! The layout's epoch enters only here, where a counter is made from a Unix
//! second ([`Layout::counter_at`]) or its second is read back
//! ([`Layout::counter_second`]), and in the seconds field of an ID.

use super::{mask, Layout};

impl Layout {
    /// The counter of sequence number `sequence` in the seconds field
    /// `seconds` (seconds since the epoch).
    #[inline]
    #[doc(hidden)]
    pub const fn counter_from(&self, seconds: u64, sequence: u64) -> u64 {
        (seconds << self.sequence_bits()) | sequence
    }

    /// A counter's seconds field (seconds since the epoch) and sequence
    /// number: what [`Layout::pack`] lays into an ID.
    #[inline]
    pub(crate) const fn counter_fields(&self, counter: u64) -> (u64, u64) {
        let s = self.sequence_bits();
        (counter >> s, counter & mask(s))
    }

    /// The counter of the first ID in `unix_second`. Clamped one past the
    /// range: a second before the epoch counts as the epoch, and an absurd
    /// second (a wild clock, a damaged record) reaches the end of the range
    /// instead of wrapping.
    #[inline]
    #[doc(hidden)]
    pub const fn counter_at(&self, unix_second: u64) -> u64 {
        let seconds = unix_second.saturating_sub(self.epoch);
        let past = self.max_seconds() + 1;
        self.counter_from(if seconds < past { seconds } else { past }, 0)
    }

    /// The counter one past the layout's last second: the end of the range.
    #[inline]
    #[doc(hidden)]
    pub const fn counter_end(&self) -> u64 {
        self.counter_from(self.max_seconds() + 1, 0)
    }

    /// The Unix second `counter` lies in. Never overflows, whatever the
    /// counter holds (flags included): the counter's seconds are below
    /// 2<sup>63</sup>, and so is the epoch ([`Layout::new`] keeps every
    /// second of the layout within a signed 64-bit count).
    #[inline]
    #[doc(hidden)]
    pub const fn counter_second(&self, counter: u64) -> u64 {
        self.epoch + self.counter_fields(counter).0
    }

    /// The sequence number `counter` holds within its second.
    #[inline]
    #[doc(hidden)]
    pub const fn counter_sequence(&self, counter: u64) -> u32 {
        self.counter_fields(counter).1 as u32
    }

    /// How many counter values one second holds: 2<sup>sequence bits</sup>.
    #[inline]
    #[doc(hidden)]
    pub const fn counters_per_second(&self) -> u64 {
        1 << self.sequence_bits()
    }

    /// The first counter of the second after the one `counter` lies in.
    #[inline]
    #[doc(hidden)]
    pub const fn counter_next_second(&self, counter: u64) -> u64 {
        (counter | mask(self.sequence_bits())) + 1
    }
}

/// Counters for unit tests, worked out apart from the functions they test.
#[cfg(test)]
mod test_support {
    use crate::layout::Layout;

    /// The counter of sequence number `sequence` in `unix_second` (at or
    /// after the layout's epoch).
    pub(crate) fn counter(layout: &Layout, unix_second: u64, sequence: u64) -> u64 {
        layout.counter_from(unix_second - layout.epoch(), sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::counter;
    use crate::layout::Layout;

    #[test]
    fn a_counter_is_taken_apart_into_what_made_it() {
        for layout in [Layout::DEFAULT, Layout::new(30, 2, 15, 5, 0).unwrap()] {
            let unix = layout.epoch() + 1234;
            let c = counter(&layout, unix, 77);
            assert_eq!(layout.counter_second(c), unix);
            assert_eq!(layout.counter_sequence(c), 77);
            assert_eq!(layout.counter_fields(c), (1234, 77));
            assert_eq!(layout.counter_at(unix), counter(&layout, unix, 0));
            assert_eq!(layout.counter_next_second(c), counter(&layout, unix + 1, 0));
            assert_eq!(
                layout.counter_next_second(counter(&layout, unix, 0)),
                counter(&layout, unix + 1, 0)
            );
            assert_eq!(
                counter(&layout, unix + 1, 0) - counter(&layout, unix, 0),
                layout.counters_per_second()
            );
            assert_eq!(
                layout.counter_at(layout.last_unix_second() + 1),
                layout.counter_end()
            );
            assert_eq!(layout.counter_at(0), 0);
            // Flags in the high bits do not overflow the second.
            assert!(layout.counter_second(u64::MAX) > layout.last_unix_second());
        }
    }
}
