//! The smallest budget with no OOM (`trace::smallest_budget`): always a
//! budget the replay ran at and fit, reported with that replay's device
//! allocations, one 0.001 step above a budget that ran out.

use proptest::prelude::*;
use vrampool::trace::{BudgetSearch, smallest_budget};

#[allow(dead_code)] // cases() only
mod common;

/// Peak live bytes for which step k (k thousandths) is a limit of k × 1000 bytes.
const PEAK: u64 = 1_000_000;

#[test]
fn a_threshold_between_two_steps_is_the_step_above_it() {
    // Fits from 1.0008 × up: 1.001 is the smallest step that fits.
    let min = smallest_budget(PEAK, |limit| Ok::<_, ()>((limit >= 1_000_800, limit)));
    assert_eq!(min, Ok(Some((1.001, 1_001_000))));
}

#[test]
fn a_figure_that_runs_out_is_never_reported() {
    // Fits from 1.0091 × up except around 1.010 (budgets are not monotonic):
    // the figure is a budget that fit, with that replay's allocations.
    let fits = |limit: u64| limit >= 1_009_100 && !(1_009_990..=1_010_010).contains(&limit);
    let (x, allocs) = smallest_budget(PEAK, |limit| Ok::<_, ()>((fits(limit), limit)))
        .unwrap()
        .unwrap();
    let limit = (x * PEAK as f64).round() as u64;
    assert!(fits(limit), "{x} ran out");
    assert_eq!(
        allocs, limit,
        "the allocations are the figure's own replay's"
    );
}

#[test]
fn one_and_four_times_are_the_ends() {
    let at_one = smallest_budget(PEAK, |_| Ok::<_, ()>((true, 3)));
    assert_eq!(at_one, Ok(Some((1.0, 3))));
    let never = smallest_budget(PEAK, |_| Ok::<_, ()>((false, 3)));
    assert_eq!(never, Ok(None));
    let at_four = smallest_budget(PEAK, |limit| Ok::<_, ()>((limit >= 4 * PEAK, 3)));
    assert_eq!(at_four, Ok(Some((4.0, 3))));
    // A replay's error is the search's.
    assert_eq!(
        smallest_budget(PEAK, |_| Err::<(bool, u64), _>("lost")),
        Err("lost")
    );
}

#[test]
fn a_peak_near_u64_max_asks_for_at_most_u64_max() {
    let mut asked = Vec::new();
    let min = smallest_budget(u64::MAX / 2, |limit| {
        asked.push(limit);
        Ok::<_, ()>((limit == u64::MAX, 0))
    });
    assert_eq!(min, Ok(Some((2.001, 0))));
    assert!(asked.contains(&u64::MAX));
}

#[test]
fn a_search_stepped_by_hand_names_a_limit_until_it_has_a_figure() {
    let mut search = BudgetSearch::new(PEAK);
    let mut limits = Vec::new();
    while let Some(limit) = search.next_limit() {
        assert_eq!(search.result(), None, "no figure while a limit is named");
        limits.push(limit);
        search.record(limit >= 1_020_000, limit);
    }
    assert_eq!(limits[..2], [4 * PEAK, PEAK], "4 × first, then 1 ×");
    assert_eq!(search.result(), Some(Some((1.02, 1_020_000))));
    // Over: what it is told later changes nothing.
    search.record(false, 0);
    assert_eq!(search.next_limit(), None);
    assert_eq!(search.result(), Some(Some((1.02, 1_020_000))));
}

/// The bisection as a closure loop, as `smallest_budget` was written before
/// `BudgetSearch`: the reference its limits are held to.
fn closure_loop(peak_live: u64, mut replay: impl FnMut(u64) -> (bool, u64)) -> Option<(f64, u64)> {
    let mut attempt = |k: u64| {
        let (whole, rest) = (peak_live / 1000, peak_live % 1000);
        replay(
            whole
                .saturating_mul(k)
                .saturating_add((rest * k).div_ceil(1000)),
        )
    };
    let (mut lo, mut hi) = (1000u64, 4000u64);
    let (fits, mut allocs) = attempt(hi);
    if !fits {
        return None;
    }
    let (fits, at_one) = attempt(lo);
    if fits {
        return Some((1.0, at_one));
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let (fits, at_mid) = attempt(mid);
        if fits {
            hi = mid;
            allocs = at_mid;
        } else {
            lo = mid;
        }
    }
    Some((hi as f64 / 1000.0, allocs))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(256)))]

    /// The stepped search tries the closure loop's limits, in its order,
    /// and ends with its figure.
    #[test]
    fn the_search_tries_the_limits_the_closure_loop_tried(
        peak in 1u64..u64::MAX / 4,
        threshold in 900u64..4200,
        holes in proptest::collection::vec(1000u64..4000, 0..40),
    ) {
        let fits = |limit: u64| {
            let k = (limit as f64 / peak as f64 * 1000.0).round() as u64;
            k >= threshold && !holes.contains(&k)
        };
        let mut want = Vec::new();
        let figure = closure_loop(peak, |limit| {
            want.push(limit);
            (fits(limit), limit % 997)
        });
        let mut got = Vec::new();
        let mut search = BudgetSearch::new(peak);
        while let Some(limit) = search.next_limit() {
            got.push(limit);
            search.record(fits(limit), limit % 997);
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(search.result(), Some(figure));
    }

    /// Whatever budgets run out, the figure fit, its allocations are its
    /// own replay's, and one step below it ran out (or it is 1 ×).
    #[test]
    fn the_figure_fits_and_one_step_below_does_not(
        threshold in 1000u64..4200,
        holes in proptest::collection::vec(1000u64..4000, 0..40),
    ) {
        let fits = |k: u64| k >= threshold && !holes.contains(&k);
        let min = smallest_budget(PEAK, |limit| {
            prop_assert_eq!(limit % 1000, 0, "whole steps only");
            Ok((fits(limit / 1000), limit / 1000))
        })?;
        match min {
            None => prop_assert!(!fits(4000)),
            Some((x, k)) => {
                prop_assert_eq!(x, k as f64 / 1000.0);
                prop_assert!(fits(k));
                prop_assert!(k == 1000 || !fits(k - 1));
            }
        }
    }
}
