//! [`IdBatch`]: a run of consecutive IDs, produced on the fly.

use crate::id::Id;
use crate::layout::Layout;

/// `n` consecutive IDs reserved by [`Generator::next_ids`](crate::Generator::next_ids), produced on the
/// fly: strictly increasing, no memory per ID.
#[derive(Clone, Debug)]
pub struct IdBatch {
    /// The next ID, packed. Within a second each ID is the one before plus
    /// `step` (one sequence number), so only a new second needs
    /// [`Layout::pack`]: per ID, a decrement, a test and an addition.
    id: u64,
    /// IDs left in the current second (the segment `id` is in).
    left: u64,
    /// The counter value just past the current segment.
    after: u64,
    /// The counter value just past the batch.
    end: u64,
    step: u64,
    layout: Layout,
    base: u64,
}

impl IdBatch {
    pub(super) fn new(first: u64, n: u64, layout: Layout, base: u64) -> IdBatch {
        let mut batch = IdBatch {
            id: 0,
            left: 0,
            after: first,
            end: first + n,
            step: 1 << layout.shard_bits(),
            layout,
            base,
        };
        batch.seek(first);
        batch
    }

    /// Starts the segment at counter value `at` (`at <= end`). Inlined, so
    /// that a loop over the batch keeps its fields in registers.
    #[inline]
    fn seek(&mut self, at: u64) {
        self.after = self.layout.counter_next_second(at).min(self.end);
        self.left = self.after - at;
        self.id = self.layout.pack(at, self.base);
    }

    /// The IDs not yet produced.
    fn remaining(&self) -> u64 {
        self.left + (self.end - self.after)
    }
}

impl Iterator for IdBatch {
    type Item = Id;

    #[inline]
    fn next(&mut self) -> Option<Id> {
        if self.left == 0 {
            if self.after == self.end {
                return None;
            }
            self.seek(self.after);
        }
        self.left -= 1;
        let id = self.id;
        self.id += self.step;
        Some(Id::from_valid(id))
    }

    /// Skips ahead in one step, without producing the IDs in between.
    fn nth(&mut self, n: usize) -> Option<Id> {
        match u64::try_from(n) {
            Ok(n) if n < self.remaining() => {
                let at = self.after - self.left + n;
                self.seek(at);
                self.next()
            }
            _ => {
                self.left = 0;
                self.after = self.end;
                None
            }
        }
    }

    /// The batch's last ID, in one step.
    fn last(mut self) -> Option<Id> {
        let skip = usize::try_from(self.remaining().checked_sub(1)?).ok()?;
        self.nth(skip)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for IdBatch {}
impl std::iter::FusedIterator for IdBatch {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::test_support::counter;

    const L: Layout = Layout::DEFAULT;
    const T: u64 = 1_700_000_000;

    #[test]
    fn batch_ids_are_the_packed_counters_across_seconds() {
        let layouts = [
            L,
            Layout::new(30, 2, 16, 5, L.epoch()).unwrap(),
            Layout::new(40, 0, 8, 5, L.epoch()).unwrap(),
        ];
        for layout in layouts {
            let base = layout.base(layout.clock_values() - 1, 3);
            let per_second = u64::from(layout.max_sequence()) + 1;
            let first = counter(&layout, T, per_second - 3);
            let n = 2 * per_second + 7;
            let ids: Vec<u64> = IdBatch::new(first, n, layout, base)
                .map(Id::as_u64)
                .collect();
            let packed: Vec<u64> = (first..first + n).map(|c| layout.pack(c, base)).collect();
            assert_eq!(ids, packed, "{layout:?}");
        }
        assert_eq!(IdBatch::new(0, 0, L, 0).next(), None);
        assert_eq!(IdBatch::new(0, 0, L, 0).last(), None);
        let per_second = u64::from(L.max_sequence()) + 1;
        let first = counter(&L, T, per_second - 2);
        let batch = IdBatch::new(first, 5, L, L.base(0, 3));
        let all: Vec<Id> = batch.clone().collect();
        assert_eq!(batch.clone().last(), all.last().copied());
        for k in 0..7 {
            let mut b = batch.clone();
            assert_eq!(b.nth(k), all.get(k).copied(), "nth({k})");
            assert_eq!(b.next(), all.get(k + 1).copied(), "after nth({k})");
        }
    }

    proptest::proptest! {
        /// Any mix of `next`, `nth` and `size_hint` agrees with packing
        /// each counter value on its own.
        #[test]
        fn a_batch_walks_like_the_packed_counters(
            widths in proptest::sample::select(vec![(32u32, 0u32, 16u32, 5u32), (30, 2, 16, 5), (40, 0, 8, 5), (44, 0, 1, 8)]),
            start in 0u64..1_000_000,
            n in 0u64..2_000,
            steps in proptest::collection::vec(0usize..600, 0..12),
        ) {
            let (s, k, q, h) = widths;
            let layout = Layout::new(s, k, q, h, L.epoch()).unwrap();
            let base = layout.base(layout.clock_values() - 1, 1);
            let model: Vec<u64> = (start..start + n).map(|c| layout.pack(c, base)).collect();
            let mut batch = IdBatch::new(start, n, layout, base);
            let mut at = 0usize;
            for step in steps {
                proptest::prop_assert_eq!(batch.size_hint(), (model.len() - at.min(model.len()), Some(model.len() - at.min(model.len()))));
                let got = if step % 3 == 0 { batch.next() } else { batch.nth(step) };
                let skip = if step % 3 == 0 { 0 } else { step };
                let want = model.get(at + skip).copied().map(Id::from_valid);
                proptest::prop_assert_eq!(got, want);
                at = (at + skip + 1).min(model.len());
            }
            let rest: Vec<u64> = batch.map(Id::as_u64).collect();
            proptest::prop_assert_eq!(&rest[..], &model[at..]);
        }
    }
}
