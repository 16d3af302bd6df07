//! The standing targets a policy's replay of a trace is held to, against a
//! baseline's replay of the same trace (the PyTorch preset in this
//! project's figures): what `tests/tests/figures.rs` asserts on every row of
//! the corpus and what `vrampool corpus` reports.

use std::fmt;

use serde::Serialize;

use super::ReplayReport;

const MIB: f64 = (1u64 << 20) as f64;

/// The figures of one replay that the targets compare.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowFigures {
    /// Peak live bytes of the trace.
    pub peak_live: u64,
    /// Peak reserved bytes with no limit.
    pub peak_reserved: u64,
    /// Device buffers created with no limit.
    pub device_allocs: u64,
    /// Bytes of the segments created with no limit.
    pub bytes_created: u64,
    /// The smallest budget with no OOM, × peak live, as
    /// [`smallest_budget`](super::smallest_budget) finds it: `None` where none
    /// up to 4 × replays, or where it was not looked for (see
    /// [`Targets::budgets`]).
    pub min_budget: Option<f64>,
}

impl RowFigures {
    /// The figures of a replay with no limit, and the smallest budget found
    /// for it, if one was looked for.
    pub fn of(report: &ReplayReport, min_budget: Option<f64>) -> RowFigures {
        RowFigures {
            peak_live: report.peak_live,
            peak_reserved: report.peak_reserved,
            device_allocs: report.device_allocs,
            bytes_created: report.segment_bytes_created,
            min_budget,
        }
    }
}

/// Which targets are in force for a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// The trace at full size: device allocations and bytes created count
    /// (scaled down, the baseline's segment sizes are not scaled with it).
    pub full_size: bool,
    /// The smallest budgets were looked for.
    pub budgets: bool,
}

/// The targets a row misses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Missed {
    /// `R`: peak reserved with no limit above 1.10 × peak live + 2 MiB, or
    /// above the baseline's.
    pub reserved: bool,
    /// `M`: the smallest budget with no OOM above 1.03 × peak live + 1 MiB,
    /// or above the baseline's (budgets are found on a 0.001 grid, so the
    /// bound allows one step); `None` where the budgets were not
    /// looked for ([`Targets::budgets`]).
    pub budget: Option<bool>,
    /// `A`: at full size, more device allocations than the baseline.
    pub allocations: bool,
    /// `B`: at full size, more bytes of segments created than the baseline.
    pub bytes: bool,
}

impl Targets {
    /// What `ours` misses against `baseline`, the same trace replayed by the
    /// baseline policy.
    ///
    /// ```
    /// use vrampool::trace::{RowFigures, Targets};
    /// let row = |peak_reserved, device_allocs| RowFigures {
    ///     peak_live: 100 << 20,
    ///     peak_reserved,
    ///     device_allocs,
    ///     bytes_created: peak_reserved,
    ///     min_budget: None,
    /// };
    /// let targets = Targets { full_size: true, budgets: false };
    /// // 112 MiB is within 1.10 × 100 MiB + 2 MiB and below the baseline's
    /// // 130 MiB, but made with more device allocations.
    /// let missed = targets.missed(&row(112 << 20, 9), &row(130 << 20, 4));
    /// assert_eq!(missed.to_string(), "A");
    /// assert_eq!(targets.missed(&row(113 << 20, 4), &row(130 << 20, 4)).to_string(), "R");
    /// ```
    pub fn missed(&self, ours: &RowFigures, baseline: &RowFigures) -> Missed {
        let live = ours.peak_live as f64;
        let budget = |r: &RowFigures| r.min_budget.unwrap_or(f64::INFINITY);
        Missed {
            reserved: ours.peak_reserved as f64 > 1.10 * live + 2.0 * MIB
                || ours.peak_reserved > baseline.peak_reserved,
            budget: self.budgets.then(|| {
                budget(ours) * live > (1.03 + 0.001) * live + MIB || budget(ours) > budget(baseline)
            }),
            allocations: self.full_size && ours.device_allocs > baseline.device_allocs,
            bytes: self.full_size && ours.bytes_created > baseline.bytes_created,
        }
    }
}

impl Missed {
    /// Whether any target is missed.
    pub fn any(&self) -> bool {
        self.reserved || self.budget == Some(true) || self.allocations || self.bytes
    }
}

/// The letters of the missed targets, in the order `RMAB` (empty when none).
impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (missed, letter) in [
            (self.reserved, "R"),
            (self.budget == Some(true), "M"),
            (self.allocations, "A"),
            (self.bytes, "B"),
        ] {
            if missed {
                f.write_str(letter)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: u64 = 1000 << 20;

    fn row(
        peak_reserved: u64,
        min_budget: f64,
        device_allocs: u64,
        bytes_created: u64,
    ) -> RowFigures {
        RowFigures {
            peak_live: LIVE,
            peak_reserved,
            device_allocs,
            bytes_created,
            min_budget: Some(min_budget),
        }
    }

    /// A baseline no row here is above.
    fn loose() -> RowFigures {
        row(2 * LIVE, 2.0, 100, 4 * LIVE)
    }

    fn letters(full_size: bool, ours: RowFigures, baseline: RowFigures) -> String {
        Targets {
            full_size,
            budgets: true,
        }
        .missed(&ours, &baseline)
        .to_string()
    }

    #[test]
    fn each_target_is_missed_one_step_past_its_bound_and_not_at_it() {
        let r_bound = LIVE * 11 / 10 + (2 << 20);
        assert_eq!(letters(true, row(r_bound, 1.0, 1, LIVE), loose()), "");
        assert_eq!(letters(true, row(r_bound + 1, 1.0, 1, LIVE), loose()), "R");
        // 1.03 × + 1 MiB, with the grid's one step: 1.031 × 1000 MiB + 1 MiB
        // is 1.032 × here; a budget one grid step past it misses.
        assert_eq!(letters(true, row(LIVE, 1.0315, 1, LIVE), loose()), "");
        assert_eq!(letters(true, row(LIVE, 1.033, 1, LIVE), loose()), "M");
        assert_eq!(letters(true, row(LIVE, 1.0, 100, 4 * LIVE), loose()), "");
        assert_eq!(letters(true, row(LIVE, 1.0, 101, 4 * LIVE), loose()), "A");
        assert_eq!(
            letters(true, row(LIVE, 1.0, 100, 4 * LIVE + 1), loose()),
            "B"
        );
    }

    #[test]
    fn each_target_is_missed_above_the_baseline_and_a_and_b_only_at_full_size() {
        let baseline = row(LIVE + (1 << 20), 1.01, 5, LIVE);
        let ours = row(LIVE + (2 << 20), 1.02, 6, LIVE + 1);
        assert_eq!(letters(true, ours, baseline), "RMAB");
        assert_eq!(letters(false, ours, baseline), "RM");
        assert_eq!(
            letters(true, baseline, baseline),
            "",
            "level with the baseline"
        );
        // No budget looked for: M neither missed nor met.
        let m = Targets {
            full_size: true,
            budgets: false,
        }
        .missed(&ours, &baseline);
        assert_eq!((m.budget, m.to_string().as_str()), (None, "RAB"));
        // No budget found for ours (none up to 4 ×): missed.
        let none = RowFigures {
            min_budget: None,
            ..baseline
        };
        assert_eq!(letters(false, none, baseline), "M");
    }
}
