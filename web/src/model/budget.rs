//! The smallest budgets of a comparison, found a slice at a time: core's
//! bisection stepped by hand ([`BudgetSearch`]), each limit it names a
//! replay taken a few thousand events per call, and given up at its first
//! refusal (a replay that ran out once does not fit). A search is 4 × peak
//! live, 1 × and a bisection: at most 14 replays per policy (2 where 1 ×
//! fits; those that run out stop early), seconds of work on a trace of a
//! million events, which a tab must not do in one go.
//!
//! The figures are those of the harness's `replay --min-budget` (core's
//! `trace::smallest_budget` over `replay`): the same limits, the same
//! replays, the same device allocations.

use std::collections::VecDeque;
use std::sync::Arc;

use vrampool::trace::{BudgetSearch, EngineTarget, Expandable, ExpandableBlock, Replayer};
use vrampool::{BlockId, Config, Engine, Error, Limit, SimulatedDevice, Trace};

use super::lockstep::{Policy, SimDevice, TENSOR_USAGE};

/// Whose smallest budget a search finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// A policy of the comparison, on the engine.
    Policy(Policy),
    /// PyTorch with `expandable_segments` (core's `trace::Expandable`), the
    /// yardstick beside them.
    Expandable,
}

/// The smallest budget (× peak live) and the device allocations of the
/// replay there; `None`: even 4 × runs out.
pub type Budget = Option<(f64, u64)>;

/// One replay at one limit, taken a slice at a time.
enum Probe {
    Pool(Box<Engine<SimulatedDevice>>, Replayer<'static, BlockId>),
    Vm(Box<Expandable>, Replayer<'static, ExpandableBlock>),
}

impl Probe {
    fn new(
        whose: Whose,
        trace: &Arc<Trace>,
        device: SimDevice,
        limit: u64,
    ) -> Result<Probe, Error> {
        Ok(match whose {
            Whose::Policy(policy) => {
                let config = Config {
                    limit: Some(Limit::Bytes(limit)),
                    ..policy.config()
                };
                Probe::Pool(
                    Box::new(device.engine(config)?),
                    Replayer::shared(trace.clone()),
                )
            }
            Whose::Expandable => Probe::Vm(
                Box::new(Expandable::new(device.capacity, Some(limit))),
                Replayer::shared(trace.clone()),
            ),
        })
    }

    /// Takes up to `n` events: how many it took, and once it knows, whether
    /// the replay fits (it ended with no refusal) and its device allocations.
    fn run(&mut self, n: usize) -> (usize, Option<(bool, u64)>) {
        // A refusal of any kind counts (core's `replay` counts every one).
        fn slice<T: vrampool::trace::ReplayTarget>(
            target: &mut T,
            replayer: &mut Replayer<'static, T::Handle>,
            n: usize,
        ) -> (usize, Option<bool>) {
            let start = replayer.position();
            loop {
                let taken = replayer.position() - start;
                if replayer.counts().ooms > 0 {
                    return (taken, Some(false));
                }
                if replayer.is_done() {
                    return (taken, Some(true));
                }
                if taken == n {
                    return (taken, None);
                }
                let _ = replayer.step(target);
            }
        }
        match self {
            Probe::Pool(engine, replayer) => {
                let (taken, fits) =
                    slice(&mut EngineTarget::new(engine, TENSOR_USAGE), replayer, n);
                let allocs = engine.stats().counters.device_allocs;
                (taken, fits.map(|f| (f, allocs)))
            }
            Probe::Vm(vm, replayer) => {
                let (taken, fits) = slice(vm.as_mut(), replayer, n);
                (taken, fits.map(|f| (f, vm.stats().device_allocs)))
            }
        }
    }

    /// Events taken.
    fn position(&self) -> usize {
        match self {
            Probe::Pool(_, r) => r.position(),
            Probe::Vm(_, r) => r.position(),
        }
    }
}

/// Where a [`BudgetJob`] is: whose budget it is finding, the replays it
/// began for it, and the current one's events taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// Whose budget.
    pub whose: Whose,
    /// Replays begun for it (from 1).
    pub replay: usize,
    /// Events the current replay took, of the trace's.
    pub events: (usize, usize),
}

/// The smallest budgets of one trace for several [`Whose`], one after the
/// other, a slice of events per [`BudgetJob::advance`].
pub struct BudgetJob {
    trace: Arc<Trace>,
    device: SimDevice,
    todo: VecDeque<Whose>,
    /// The search under way, its replays begun, and the replay at its
    /// current limit (made on the first slice that needs it).
    current: Option<(Whose, BudgetSearch, usize, Option<Probe>)>,
    /// Budgets found and not yet taken ([`BudgetJob::take_found`]).
    found: Vec<(Whose, Budget)>,
}

impl BudgetJob {
    /// A job that finds the budgets of `whose`, in that order, for `trace`
    /// on `device`.
    pub fn new(trace: Arc<Trace>, device: SimDevice, whose: &[Whose]) -> BudgetJob {
        BudgetJob {
            trace,
            device,
            todo: whose.iter().copied().collect(),
            current: None,
            found: Vec::new(),
        }
    }

    /// Takes at most about `events` events of replays (a replay's slice
    /// ends at the count or at a refusal); the budgets found in them wait in
    /// [`BudgetJob::take_found`], an error or not. An engine that cannot be
    /// made under a limit is the error.
    pub fn advance(&mut self, events: usize) -> Result<(), Error> {
        let mut left = events;
        while left > 0 {
            let (whose, search, replays, probe) = match &mut self.current {
                Some(c) => c,
                None => match self.todo.pop_front() {
                    Some(w) => {
                        self.current
                            .insert((w, BudgetSearch::new(self.trace.peak_live), 0, None))
                    }
                    None => break,
                },
            };
            let Some(limit) = search.next_limit() else {
                let result = search.result().expect("over once it names no limit");
                self.found.push((*whose, result));
                self.current = None;
                continue;
            };
            let p = match probe {
                Some(p) => p,
                None => {
                    *replays += 1;
                    probe.insert(Probe::new(*whose, &self.trace, self.device, limit)?)
                }
            };
            let (taken, outcome) = p.run(left);
            left -= taken.min(left);
            if let Some((fits, allocs)) = outcome {
                search.record(fits, allocs);
                *probe = None;
            }
        }
        Ok(())
    }

    /// The budgets found since the last call, in the order found.
    pub fn take_found(&mut self) -> Vec<(Whose, Budget)> {
        std::mem::take(&mut self.found)
    }

    /// Gives up `whose`'s search, under way or to come.
    pub fn drop_whose(&mut self, whose: Whose) {
        self.todo.retain(|&w| w != whose);
        if self.current.as_ref().is_some_and(|c| c.0 == whose) {
            self.current = None;
        }
    }

    /// Whether every budget was found (or given up) and taken.
    pub fn is_done(&self) -> bool {
        self.current.is_none() && self.todo.is_empty() && self.found.is_empty()
    }

    /// Where it is; `None` between searches.
    pub fn progress(&self) -> Option<JobProgress> {
        let (whose, _, replay, probe) = self.current.as_ref()?;
        Some(JobProgress {
            whose: *whose,
            replay: *replay,
            events: (
                probe.as_ref().map_or(0, Probe::position),
                self.trace.events.len(),
            ),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::lockstep::tests::sample;
    use vrampool::trace::smallest_budget;
    use vrampool::{Config, replay};

    use crate::model::POLICIES;

    /// PyTorch with `expandable_segments` over the whole of `trace` on the
    /// page's device under `limit`: its refusals and device allocations.
    pub(crate) fn expandable_at(trace: &Trace, limit: u64) -> (u64, u64) {
        let mut vm = Expandable::new(SimDevice::PAGE.capacity, Some(limit));
        let mut r = Replayer::new(trace);
        while r.step(&mut vm).unwrap_or(true) {}
        (r.counts().ooms, vm.stats().device_allocs)
    }

    /// Core's search over whole replays, as the harness's `--min-budget` runs it.
    fn whole(trace: &Trace, whose: Whose) -> Budget {
        smallest_budget(trace.peak_live, |limit| match whose {
            Whose::Policy(p) => {
                let config = Config {
                    limit: Some(Limit::Bytes(limit)),
                    ..p.config()
                };
                let mut e = SimDevice::PAGE.engine(config)?;
                let r = replay(&mut e, trace, TENSOR_USAGE);
                Ok::<_, Error>((r.ooms == 0, r.device_allocs))
            }
            Whose::Expandable => {
                let (ooms, allocs) = expandable_at(trace, limit);
                Ok((ooms == 0, allocs))
            }
        })
        .unwrap()
    }

    #[test]
    fn slices_find_the_budgets_whole_replays_find() {
        let trace = sample("resnet_train");
        let whose = [
            Whose::Policy(POLICIES[0]),
            Whose::Policy(POLICIES[1]),
            Whose::Expandable,
        ];
        let mut job = BudgetJob::new(Arc::new(trace.clone()), SimDevice::PAGE, &whose);
        let (mut found, mut calls) = (Vec::new(), 0);
        while !job.is_done() {
            let before = job.progress();
            job.advance(1000).unwrap();
            found.extend(job.take_found());
            calls += 1;
            // A slice takes at most its events: each replay of the trace
            // spans several calls.
            if let (Some(a), Some(b)) = (before, job.progress())
                && a.whose == b.whose
                && a.replay == b.replay
            {
                assert!(
                    b.events.0.saturating_sub(a.events.0) <= 1000,
                    "{a:?} → {b:?}"
                );
            }
        }
        assert!(calls > 3 * 14, "{calls} slices");
        assert_eq!(found.iter().map(|f| f.0).collect::<Vec<_>>(), whose);
        for (w, b) in found {
            assert!(b.is_some(), "{w:?} fits within 4 ×");
            assert_eq!(b, whole(&trace, w), "{w:?}");
        }
    }

    #[test]
    fn a_replay_that_runs_out_stops_at_its_first_refusal() {
        let trace = sample("gpt_train");
        let pytorch = Whose::Policy(POLICIES[1]);
        // Where PyTorch's scheme is first refused under 1 × peak live.
        let first_refusal = {
            let config = Config {
                limit: Some(Limit::Bytes(trace.peak_live)),
                ..Config::pytorch()
            };
            let mut e = SimDevice::PAGE.engine(config).unwrap();
            let mut r = Replayer::new(&trace);
            while r.counts().ooms == 0 {
                assert!(
                    r.step(&mut EngineTarget::new(&mut e, TENSOR_USAGE))
                        .unwrap_or(true)
                );
            }
            r.position()
        };
        let n = trace.events.len();
        assert!(first_refusal < n);
        let mut job = BudgetJob::new(Arc::new(trace), SimDevice::PAGE, &[pytorch]);
        // 4 × fits: the whole trace, and the next replay (1 ×) is not begun.
        job.advance(n).unwrap();
        assert_eq!(job.progress().unwrap().replay, 1);
        // 1 ×: one event short of its first refusal, it goes on...
        job.advance(first_refusal - 1).unwrap();
        let p = job.progress().unwrap();
        assert_eq!((p.replay, p.events.0), (2, first_refusal - 1));
        // ...and at it, it is over: the bisection's first replay begins next.
        job.advance(1).unwrap();
        assert_eq!(job.progress().unwrap().events.0, 0, "replay 2 is over");
        job.advance(1).unwrap();
        let p = job.progress().unwrap();
        assert_eq!((p.replay, p.events.0), (3, 1));
        assert!(job.take_found().is_empty());
    }

    #[test]
    fn a_search_given_up_leaves_the_others() {
        let trace = Arc::new(sample("resnet_train"));
        let whose = [Whose::Policy(POLICIES[0]), Whose::Expandable];
        let mut job = BudgetJob::new(trace.clone(), SimDevice::PAGE, &whose);
        job.advance(100).unwrap();
        job.drop_whose(Whose::Expandable);
        let mut found = Vec::new();
        while !job.is_done() {
            job.advance(1 << 20).unwrap();
            found.extend(job.take_found().into_iter().map(|(w, _)| w));
        }
        assert_eq!(found, [whose[0]], "the one search left, found once");
        // Given up while under way: the job is over with nothing more.
        let mut job = BudgetJob::new(trace, SimDevice::PAGE, &whose[1..]);
        job.advance(100).unwrap();
        job.drop_whose(Whose::Expandable);
        assert!(job.is_done() && job.progress().is_none());
    }
}
