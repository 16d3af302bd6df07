//! The static plan with foresight (`trace::Foresight`): blocks live at the
//! same time never share a byte, blocks that are not may, segments stay
//! under the cap, bad input is refused with what to do, and on a real trace
//! the plan holds what the no-limit target asks of a policy, and no more
//! than the policy, which cannot see the future.

use std::path::PathBuf;

use proptest::prelude::*;
use vrampool::trace::{Foresight, ForesightError};
use vrampool::{Config, Engine, SimulatedDevice, Trace, replay};

const MIB: u64 = 1 << 20;

/// A trace from (allocate?, pointer, size) rows.
fn trace(rows: &[(bool, u64, u64)]) -> Trace {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for &(alloc, p, size) in rows {
        let action = if alloc { "allocate" } else { "free" };
        csv.push_str(&format!("0,0,{action},{p:#x},{size},0x0\n"));
    }
    Trace::parse("made", csv.as_bytes()).unwrap()
}

#[test]
fn blocks_live_apart_share_their_bytes_and_blocks_live_together_do_not() {
    // a and b are live together; c comes after both are freed.
    let t = trace(&[
        (true, 1, 3 * MIB),
        (true, 2, MIB),
        (false, 1, 3 * MIB),
        (false, 2, MIB),
        (true, 3, 4 * MIB),
        (false, 3, 4 * MIB),
    ]);
    let plan = Foresight::plan(&t, 256, 1 << 30).unwrap();
    assert_eq!(plan.segments, vec![4 * MIB]);
    let [a, b, c] = plan.blocks[..] else {
        panic!("{plan:?}")
    };
    assert!(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset);
    assert!(c.offset == 0 && c.size == 4 * MIB);
    assert_eq!(plan.ratio(), 1.0);
}

#[test]
fn a_segment_never_passes_the_largest_allowed() {
    // Two 3 MiB blocks live together, segments of at most 4 MiB: two segments.
    let t = trace(&[(true, 1, 3 * MIB), (true, 2, 3 * MIB)]);
    let plan = Foresight::plan(&t, 256, 4 * MIB).unwrap();
    assert_eq!(plan.segments, vec![3 * MIB, 3 * MIB]);
    // With room for both, one.
    let plan = Foresight::plan(&t, 256, 8 * MIB).unwrap();
    assert_eq!(plan.segments, vec![6 * MIB]);
}

#[test]
fn bad_input_is_refused_with_what_to_do() {
    let t = trace(&[(true, 1, 5 * MIB), (false, 1, 5 * MIB)]);
    let e = Foresight::plan(&t, 256, 4 * MIB).unwrap_err();
    assert_eq!(
        e,
        ForesightError::TooLarge {
            line: 2,
            size: 5 * MIB,
            max_segment: 4 * MIB
        }
    );
    assert!(e.to_string().contains("line 2") && e.to_string().contains("scale the trace down"));
    let e = Foresight::plan(&t, 300, 1 << 30).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    // An empty trace plans nothing.
    let plan = Foresight::plan(&Trace::default(), 256, 1 << 30).unwrap();
    assert_eq!((plan.reserved(), plan.ratio()), (0, 0.0));
}

/// A random trace: each step allocates a new pointer or frees a live one.
fn random_trace() -> impl Strategy<Value = Trace> {
    proptest::collection::vec(
        (any::<bool>(), 1u64..(3 * MIB), any::<prop::sample::Index>()),
        1..200,
    )
    .prop_map(|steps| {
        let (mut rows, mut live, mut next) = (Vec::new(), Vec::<(u64, u64)>::new(), 1u64);
        for (alloc, size, pick) in steps {
            if alloc || live.is_empty() {
                rows.push((true, next, size));
                live.push((next, size));
                next += 1;
            } else {
                let (p, s) = live.swap_remove(pick.index(live.len()));
                rows.push((false, p, s));
            }
        }
        trace(&rows)
    })
}

proptest! {
    #[test]
    fn a_plan_is_a_layout_a_pool_could_follow(t in random_trace(), cap_mib in 3u64..16) {
        let cap = cap_mib * MIB;
        let plan = Foresight::plan(&t, 256, cap).unwrap();
        prop_assert_eq!(plan.blocks.len(), t.allocations());
        for (i, a) in plan.blocks.iter().enumerate() {
            prop_assert_eq!(a.offset % 256, 0);
            prop_assert!(a.offset + a.size <= plan.segments[a.segment]);
            for b in &plan.blocks[i + 1..] {
                if a.segment == b.segment && a.overlaps_in_time(b) {
                    prop_assert!(
                        a.offset + a.size <= b.offset || b.offset + b.size <= a.offset,
                        "{:?} and {:?} share bytes", a, b
                    );
                }
            }
        }
        prop_assert!(plan.segments.iter().all(|&s| s > 0 && s <= cap));
        // At least what is live at the peak; at most every block apart.
        let total: u64 = plan.blocks.iter().map(|b| b.size).sum();
        prop_assert!(plan.reserved() >= t.peak_live && plan.reserved() <= total);
    }
}

#[test]
fn on_a_real_trace_the_plan_meets_the_no_limit_target_and_holds_no_more_than_the_policy() {
    // lstm_train ÷64: the sequence lengths grow, so each new longest batch
    // needs blocks larger than any cached; a plan made knowing them needs
    // one segment of about peak live.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces/lstm_train.csv.gz");
    let t = Trace::open(path).unwrap().scaled(64);
    let plan = Foresight::plan(&t, 256, 4 << 30).unwrap();
    let bound = 1.10 * t.peak_live as f64 + 2.0 * MIB as f64;
    assert!(
        (plan.reserved() as f64) <= bound,
        "plan {} > bound {bound}",
        plan.reserved()
    );
    assert_eq!(plan.segments.len(), 1);
    let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    let r = replay(&mut engine, &t, 0);
    assert!(
        r.peak_reserved >= plan.reserved(),
        "the policy reserved {} at its peak, the plan {}",
        r.peak_reserved,
        plan.reserved()
    );
}
