//! Properties over random inputs: encode/decode, parsing, and generators
//! driven by arbitrary clock sequences.

use idutil_harness as harness;

use idutil::{Clock, Error, Generator, Id, IdError, Layout, ManualClock, Parts};
use proptest::prelude::*;

/// A valid layout: widths that fit in 53 bits, any epoch.
fn layout() -> impl Strategy<Value = Layout> {
    (
        1u32..=40,
        0u32..=4,
        1u32..=22,
        0u32..=10,
        0u64..=2_000_000_000,
    )
        .prop_filter_map("at most 53 bits", |(sec, clk, seq, sh, epoch)| {
            Layout::new(sec, clk, seq, sh, epoch).ok()
        })
}

fn parts_in(layout: Layout) -> impl Strategy<Value = Parts> {
    (
        0..=layout.max_seconds(),
        0..=layout.max_clock(),
        0..=layout.max_sequence(),
        0..=layout.max_shard(),
    )
        .prop_map(|(seconds, clock, sequence, shard)| Parts {
            seconds,
            clock,
            sequence,
            shard,
        })
}

proptest! {
    #[test]
    fn encode_decode_round_trips((layout, parts) in layout().prop_flat_map(|l| (Just(l), parts_in(l)))) {
        let id = layout.encode(parts).unwrap();
        prop_assert!(id <= Id::MAX);
        prop_assert!(id.as_u64() >> layout.total_bits() == 0);
        prop_assert_eq!(layout.decode(id).unwrap(), parts);
    }

    #[test]
    fn encoding_orders_by_seconds_first(
        (layout, a, b) in layout().prop_flat_map(|l| (Just(l), parts_in(l), parts_in(l)))
    ) {
        let (ia, ib) = (layout.encode(a).unwrap(), layout.encode(b).unwrap());
        let key = |p: &Parts| (p.seconds, p.clock, p.sequence, p.shard);
        prop_assert_eq!(ia.cmp(&ib), key(&a).cmp(&key(&b)));
    }

    #[test]
    fn out_of_range_parts_are_rejected(
        (layout, parts) in layout().prop_flat_map(|l| (Just(l), parts_in(l))),
        field in 0usize..4,
        excess in 1u64..1000,
    ) {
        let mut bad = parts;
        match field {
            0 => bad.seconds = layout.max_seconds() + excess,
            1 => bad.clock = layout.max_clock().saturating_add(excess as u32),
            2 => bad.sequence = layout.max_sequence().saturating_add(excess as u32),
            _ => bad.shard = layout.max_shard().saturating_add(excess as u32),
        }
        let is_out_of_range = matches!(layout.encode(bad), Err(IdError::PartOutOfRange { .. }));
        prop_assert!(is_out_of_range);
    }

    #[test]
    fn text_round_trips(v in 0u64..=Id::MAX.as_u64()) {
        let id = Id::from_u64(v).unwrap();
        prop_assert_eq!(id.to_string().parse::<Id>().unwrap(), id);
        prop_assert_eq!(Id::try_from(id.as_i64()).unwrap(), id);
    }

    #[test]
    fn values_above_2_pow_53_are_rejected(v in (Id::MAX.as_u64() + 1)..=u64::MAX) {
        prop_assert!(Id::from_u64(v).is_none());
        prop_assert!(Id::try_from(v).is_err());
        prop_assert!(v.to_string().parse::<Id>().is_err());
    }

    #[test]
    fn negative_and_junk_text_is_rejected(v in i64::MIN..0, junk in "[^0-9]{1,8}|[0-9]{0,5}[^0-9]+[0-9]{0,5}") {
        prop_assert!(v.to_string().parse::<Id>().is_err());
        prop_assert!(Id::try_from(v).is_err());
        prop_assert!(junk.parse::<Id>().is_err());
    }
}

/// A step of a clock script: move the clock, then draw some IDs.
#[derive(Clone, Debug)]
enum Step {
    Forward(u64),
    Back(u64),
    Ids(u64),
    Batch(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..5).prop_map(Step::Forward),
        (0u64..100_000).prop_map(Step::Back),
        (1u64..3000).prop_map(Step::Ids),
        (1u64..200_000).prop_map(Step::Batch),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Under any clock script, with a small layout whose sequence runs out
    /// quickly and whose range ends soon: IDs strictly increase, never
    /// exceed 2^53 - 1, never go past the layout's last second, the end
    /// of the range is an error rather than a wrap, and a clock outside the
    /// range is an error rather than an ID.
    #[test]
    fn strictly_increasing_under_any_clock(start_offset in 0u64..200, steps in prop::collection::vec(step(), 1..25)) {
        let layout = Layout::new(9, 0, 8, 3, 1_000_000_000).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(layout.epoch() + start_offset);
        let g = Generator::builder().id_space(harness::space_for(dir.path()))
            .shard(5)
            .state_dir(dir.path())
            .layout(layout)
            .clock(clock.clone())
            .end_margin(std::time::Duration::ZERO)
            .open()
            .unwrap();
        let mut last: Option<Id> = None;
        let mut ended = false;
        let mut check = |id: Id| -> Result<(), TestCaseError> {
            prop_assert!(id <= Id::MAX);
            let p = layout.decode(id).unwrap();
            prop_assert!(p.seconds <= layout.max_seconds());
            prop_assert_eq!(p.shard, 5);
            if let Some(prev) = last {
                prop_assert!(id > prev, "{} after {}", id, prev);
            }
            last = Some(id);
            Ok(())
        };
        for step in steps {
            // A refused batch consumes nothing (smaller requests may still
            // fit); a refused single ID means the range is used up.
            let (result, single): (Result<Vec<Id>, Error>, bool) = match step {
                Step::Forward(s) => { clock.advance(s); (Ok(vec![]), false) }
                Step::Back(s) => { clock.rewind(s); (Ok(vec![]), false) }
                Step::Ids(n) => ((0..n).map(|_| g.next_id()).collect(), true),
                Step::Batch(n) => (g.next_ids(n).map(|b| b.collect()), false),
            };
            match result {
                Ok(ids) => for id in ids { check(id)?; },
                Err(Error::EndOfRange { .. }) => ended |= single,
                // A clock outside the layout issues nothing until it is back.
                Err(Error::ClockOutOfRange { unix_second, .. }) => {
                    prop_assert_eq!(unix_second, clock.now());
                    prop_assert!(layout.seconds_of(unix_second).is_none());
                }
                Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
            }
        }
        if ended {
            // Once the range is exhausted, it stays exhausted (or the clock
            // reads outside the range: no ID either way).
            let still_ended = matches!(
                g.next_id(),
                Err(Error::EndOfRange { .. } | Error::ClockOutOfRange { .. })
            );
            prop_assert!(still_ended);
        }
    }
}
