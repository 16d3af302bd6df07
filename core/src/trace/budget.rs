//! The smallest budget with no OOM: a bisection over hard limits, as a
//! function that replays at each limit ([`smallest_budget`]) and as a state
//! machine a caller steps itself ([`BudgetSearch`]), for one that cannot
//! block on a whole search — the page, which replays each limit a slice per
//! frame.
//!
//! Architecture invariant: the search knows nothing of replays, engines or
//! devices; it names limits and is told whether each fit.

/// The smallest budget with no OOM, in steps of 0.001 × `peak_live`: the
/// hard limit `replay` is called with (in bytes; it returns whether the
/// replay had no OOM, and its device allocations), as a multiple of
/// `peak_live`, and the device allocations of that very replay; `None` if
/// even 4 × peak live runs out.
///
/// Bisects over whole steps between 1 × and 4 ×, trying 4 × first (`None`
/// if it runs out) and then 1 ×, so the
/// figure is always a budget the replay ran at with no OOM, one step above
/// one where it ran out (or 1 × itself). Budgets are not monotonic: a larger
/// limit changes which segments are made, and a replay can run out a step
/// above a budget where it fits; the figure is the threshold the bisection
/// finds, where a budget one step lower fails. The limits it tries are
/// [`BudgetSearch`]'s.
///
/// ```
/// use vrampool::trace::smallest_budget;
/// // A replay that fits from 1.0305 × peak live up.
/// let peak = 1_000_000u64;
/// let min = smallest_budget(peak, |limit| Ok::<_, ()>((limit >= 1_030_500, 7)));
/// assert_eq!(min, Ok(Some((1.031, 7))));
/// ```
pub fn smallest_budget<E>(
    peak_live: u64,
    mut replay: impl FnMut(u64) -> Result<(bool, u64), E>,
) -> Result<Option<(f64, u64)>, E> {
    let mut search = BudgetSearch::new(peak_live);
    while let Some(limit) = search.next_limit() {
        let (fits, allocs) = replay(limit)?;
        search.record(fits, allocs);
    }
    Ok(search
        .result()
        .expect("the search ends when it has no limit to try"))
}

/// [`smallest_budget`]'s bisection, stepped by its caller: ask
/// [`next_limit`](BudgetSearch::next_limit), replay there, [`record`](BudgetSearch::record)
/// the outcome, until it names no limit; then [`result`](BudgetSearch::result)
/// is the figure. A caller that replays a limit in slices (a browser tab
/// between frames) can stop at a first out-of-memory: a replay that ran out
/// once does not fit, and its allocations are not read.
///
/// ```
/// use vrampool::trace::BudgetSearch;
/// let mut search = BudgetSearch::new(1_000_000);
/// let mut tried = 0;
/// while let Some(limit) = search.next_limit() {
///     tried += 1;
///     search.record(limit >= 1_030_500, 7); // a replay that fits from 1.0305 × up
/// }
/// assert_eq!(search.result(), Some(Some((1.031, 7))));
/// assert!(tried <= 14, "4 ×, 1 ×, then a bisection of 3 000 steps");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSearch {
    peak_live: u64,
    /// Thousandths of peak live: `lo` runs out (or is untried), `hi` fits
    /// (or is untried, at first).
    lo: u64,
    hi: u64,
    /// The device allocations of the replay at `hi`.
    allocs: u64,
    stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// 4 × is tried first: if it runs out, nothing fits.
    Four,
    /// Then 1 ×, where most policies fit within a few percent.
    One,
    /// Then the midpoint of `lo` and `hi`.
    Bisect,
    /// The figure.
    Done(Option<(f64, u64)>),
}

impl BudgetSearch {
    /// A search over budgets for a trace of `peak_live` bytes at its peak.
    pub fn new(peak_live: u64) -> Self {
        BudgetSearch {
            peak_live,
            lo: 1000,
            hi: 4000,
            allocs: 0,
            stage: Stage::Four,
        }
    }

    /// The hard limit (bytes) to replay at next; `None` once the search is over.
    pub fn next_limit(&self) -> Option<u64> {
        let k = match self.stage {
            Stage::Four => self.hi,
            Stage::One => self.lo,
            Stage::Bisect => self.lo + (self.hi - self.lo) / 2,
            Stage::Done(_) => return None,
        };
        Some(self.limit(k))
    }

    /// The outcome of the replay at [`next_limit`](BudgetSearch::next_limit):
    /// whether it ran with no OOM, and its device allocations. Ignored once
    /// the search is over.
    pub fn record(&mut self, fits: bool, allocs: u64) {
        self.stage = match self.stage {
            Stage::Four if !fits => Stage::Done(None),
            Stage::Four => {
                self.allocs = allocs;
                Stage::One
            }
            Stage::One if fits => Stage::Done(Some((1.0, allocs))),
            Stage::One | Stage::Bisect => {
                if self.stage == Stage::Bisect {
                    let mid = self.lo + (self.hi - self.lo) / 2;
                    if fits {
                        self.hi = mid;
                        self.allocs = allocs;
                    } else {
                        self.lo = mid;
                    }
                }
                // lo runs out, hi fits (and allocs are hi's).
                if self.hi - self.lo > 1 {
                    Stage::Bisect
                } else {
                    Stage::Done(Some((self.hi as f64 / 1000.0, self.allocs)))
                }
            }
            done @ Stage::Done(_) => done,
        };
    }

    /// The figure once the search is over (`Some(None)`: even 4 × ran out),
    /// `None` while it still names a limit.
    pub fn result(&self) -> Option<Option<(f64, u64)>> {
        match self.stage {
            Stage::Done(r) => Some(r),
            _ => None,
        }
    }

    /// `k` thousandths of peak live, rounded up to a byte: whole thousandths
    /// of peak live times `k` (saturating), and the rest's share rounded up
    /// (below 4 000 000, so exact). No 128-bit division: the page carries
    /// this code, and one costs its wasm a kilobyte.
    fn limit(&self, k: u64) -> u64 {
        let (whole, rest) = (self.peak_live / 1000, self.peak_live % 1000);
        whole
            .saturating_mul(k)
            .saturating_add((rest * k).div_ceil(1000))
    }
}
