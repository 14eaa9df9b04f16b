//! [`IdBatch`]: a run of consecutive IDs, produced on the fly.

use crate::id::Id;
use crate::layout::Layout;

/// `n` consecutive IDs reserved by [`Generator::next_ids`](crate::Generator::next_ids), produced on the
/// fly: strictly increasing, no memory per ID.
#[derive(Clone, Debug)]
pub struct IdBatch {
    /// The counter value of the next ID.
    next: u64,
    end: u64,
    /// The next ID, packed. Within a second each ID is the one before plus
    /// `step` (one sequence number), so only a new second needs
    /// [`Layout::pack`]: an addition per ID instead of three variable
    /// shifts.
    id: u64,
    step: u64,
    sequence_mask: u64,
    layout: Layout,
    base: u64,
}

impl IdBatch {
    pub(super) fn new(first: u64, n: u64, layout: Layout, base: u64) -> IdBatch {
        IdBatch {
            next: first,
            end: first + n,
            id: layout.pack(first, base),
            step: 1 << layout.shard_bits(),
            sequence_mask: u64::from(layout.max_sequence()),
            layout,
            base,
        }
    }
}

impl Iterator for IdBatch {
    type Item = Id;

    #[inline]
    fn next(&mut self) -> Option<Id> {
        if self.next == self.end {
            return None;
        }
        let id = self.id;
        self.next += 1;
        self.id = if self.next & self.sequence_mask == 0 {
            self.layout.pack(self.next, self.base)
        } else {
            id + self.step
        };
        Some(Id::from_valid(id))
    }

    /// Skips ahead in one step, without producing the IDs in between.
    fn nth(&mut self, n: usize) -> Option<Id> {
        let left = self.end - self.next;
        match u64::try_from(n) {
            Ok(n) if n < left => {
                self.next += n;
                self.id = self.layout.pack(self.next, self.base);
                self.next()
            }
            _ => {
                self.next = self.end;
                None
            }
        }
    }

    /// The batch's last ID, in one step.
    fn last(mut self) -> Option<Id> {
        let left = self.end - self.next;
        let skip = usize::try_from(left.checked_sub(1)?).ok()?;
        self.nth(skip)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for IdBatch {}
impl std::iter::FusedIterator for IdBatch {}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout::DEFAULT;
    const T: u64 = 1_700_000_000;

    fn counter(layout: &Layout, unix: u64, seq: u64) -> u64 {
        ((unix - layout.epoch()) << layout.sequence_bits()) | seq
    }

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
        let per_second = 1 << L.sequence_bits();
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
}
