//! The side-by-side replay: a [`Lockstep`] of both policies paced to a speed,
//! the chart's series (bounded: intervals merge as the replay grows), the
//! figures the harness's `replay --compare` prints — with, once the replay
//! is over, PyTorch's allocator with `expandable_segments` on the same trace
//! (core's `trace::Expandable`: what virtual memory, which WebGPU lacks,
//! would hold) — the smallest budgets on request, and scrubbing: the state
//! at any event, re-simulated exactly from a cursor that only moves forward
//! unless asked for an earlier event.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vrampool::trace::{Expandable, ExpandableBlock, ReplayCounts, Replayer};
use vrampool::{Error, Trace};

use super::budget::{Budget, BudgetJob, JobProgress, Whose};

use super::lockstep::{LaneFigures, Lockstep, POLICIES, SimDevice};
use super::pace::Pace;
use super::peak::PeakStack;
use super::segments::SegmentView;

/// Points the chart keeps at most; past that, neighbours merge.
pub const MAX_SERIES: usize = 512;

/// One point of the chart: the highest values over an interval of events.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SeriesPoint {
    /// The interval's last event (events taken).
    pub event: usize,
    /// Highest live bytes the trace asked for in the interval.
    pub live: u64,
    /// Highest bytes each policy reserved in the interval.
    pub reserved: [u64; 2],
}

impl SeriesPoint {
    fn absorb(&mut self, p: SeriesPoint) {
        self.event = self.event.max(p.event);
        self.live = self.live.max(p.live);
        self.reserved = [0, 1].map(|i| self.reserved[i].max(p.reserved[i]));
    }
}

/// The chart's series: one point per `every` events, at most [`MAX_SERIES`]
/// (when full, pairs merge and `every` doubles), so memory stays bounded
/// however long the trace, and no peak is lost between points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    every: usize,
    closed: Vec<SeriesPoint>,
    open: Option<SeriesPoint>,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            every: 1,
            closed: Vec::new(),
            open: None,
        }
    }
}

impl Series {
    /// Takes the figures after `p.event` events.
    pub fn push(&mut self, p: SeriesPoint) {
        self.open.get_or_insert(p).absorb(p);
        if p.event.is_multiple_of(self.every) {
            self.closed.extend(self.open.take());
            if self.closed.len() >= MAX_SERIES {
                self.closed = self
                    .closed
                    .chunks(2)
                    .map(|pair| {
                        let mut merged = pair[0];
                        for &p in &pair[1..] {
                            merged.absorb(p);
                        }
                        merged
                    })
                    .collect();
                self.every *= 2;
            }
        }
    }

    /// The points so far, the interval still open included.
    pub fn points(&self) -> Vec<SeriesPoint> {
        self.closed
            .iter()
            .chain(self.open.iter())
            .copied()
            .collect()
    }

    /// Events per point.
    pub fn every(&self) -> usize {
        self.every
    }
}

/// Both policies at one event: what the scrubber shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Moment {
    /// Events taken.
    pub position: usize,
    /// Live bytes the trace asked for then.
    pub live: u64,
    /// Each policy's figures then (peaks and counts since the start).
    pub figures: [LaneFigures; 2],
    /// Each policy's segment map then (largest segments) and how many are left out.
    pub maps: [(Vec<SegmentView>, usize); 2],
}

impl Moment {
    fn of(l: &Lockstep, max_segments: usize) -> Moment {
        Moment {
            position: l.position(),
            live: l.live_bytes(),
            figures: l.figures(),
            maps: [l.segments(0, max_segments), l.segments(1, max_segments)],
        }
    }
}

/// Where a scrub to an earlier event is: there, or on its way (see
/// [`Compare::scrub`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Seek {
    /// Both policies at the event.
    There(Box<Moment>),
    /// On its way: re-simulating (from the start, or on from where the last
    /// scrub left off), a slice per [`Compare::resume_seek`]. The seek `id`
    /// is new: its driver starts.
    Started(u64),
    /// On its way, driven by the seek already under way (its target moved).
    Going,
}

/// A side-by-side replay.
pub struct Compare {
    /// Tells this comparison from a later one (its task stops when it is gone).
    id: u64,
    device: SimDevice,
    /// The trace, shared by every replay of it here (the lockstep, the
    /// scrubber's, the yardstick's, the budget searches').
    trace: Arc<Trace>,
    run: Lockstep,
    /// When its events are due.
    pace: Pace,
    /// Wall clock at the first paced step, and milliseconds to the end.
    wall: Option<web_time::Instant>,
    millis: Option<u64>,
    series: Series,
    /// The figures at the end, as the harness reports them.
    result: Option<[LaneFigures; 2]>,
    /// The state after the last event (before the trace's leftovers are freed).
    last: Option<Moment>,
    /// The smallest budget (× peak live) of each policy and its device
    /// allocations, once found (`None` inside: even 4 × fails).
    budgets: [Option<Budget>; 2],
    /// PyTorch with `expandable_segments` on the same trace, stepped with
    /// the lockstep (a yardstick: not charted, not scrubbed), and its
    /// figures once every event was taken.
    vm: (Expandable, Replayer<'static, ExpandableBlock>),
    expandable: Option<LaneFigures>,
    /// Its smallest budget, found with the others.
    expandable_budget: Option<Budget>,
    /// The search for the smallest budgets, while one is under way.
    budget_job: Option<BudgetJob>,
    /// The scrubber's own replay, moved to whatever event it is asked for.
    cursor: Option<Lockstep>,
    /// The event the cursor is on its way to, and the id of that seek.
    heading: Option<(usize, u64)>,
    /// The last seek id given.
    seeks: u64,
    /// What holds memory at the trace's peak.
    peak: PeakStack,
}

impl Compare {
    /// Starts replaying `trace` through both policies on `device` at `speed`
    /// operations per second.
    pub fn new(
        trace: impl Into<Arc<Trace>>,
        device: SimDevice,
        speed: f64,
    ) -> Result<Compare, Error> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let trace = trace.into();
        let peak = PeakStack::of(&trace);
        let vm = (
            Expandable::new(device.capacity, None),
            Replayer::shared(trace.clone()),
        );
        Ok(Compare {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device,
            run: Lockstep::new(trace.clone(), device)?,
            trace,
            pace: Pace::new(speed),
            wall: None,
            millis: None,
            series: Series::default(),
            result: None,
            last: None,
            budgets: [None, None],
            vm,
            expandable: None,
            expandable_budget: None,
            budget_job: None,
            cursor: None,
            heading: None,
            seeks: 0,
            peak,
        })
    }

    /// Its id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The device both policies run on.
    pub fn device(&self) -> SimDevice {
        self.device
    }

    /// Events taken, and events in the trace.
    pub fn progress(&self) -> (usize, usize) {
        (self.run.position(), self.trace().events.len())
    }

    /// The figures so far (final once [`Compare::result`] is there).
    pub fn figures(&self) -> [LaneFigures; 2] {
        self.result.unwrap_or_else(|| self.run.figures())
    }

    /// The figures at the end, once every event was taken.
    pub fn result(&self) -> Option<[LaneFigures; 2]> {
        self.result
    }

    /// PyTorch with `expandable_segments` on the same trace and device,
    /// once every event was taken (core's `trace::Expandable`).
    pub fn expandable(&self) -> Option<LaneFigures> {
        self.expandable
    }

    /// The chart's series.
    pub fn series(&self) -> &Series {
        &self.series
    }

    /// What holds memory at the trace's peak.
    pub fn peak(&self) -> &PeakStack {
        &self.peak
    }

    /// How many events to take in the tick that begins at `t` and lasts
    /// `tick` seconds, to keep to the speed (see [`Pace::due`]); `None` once
    /// the replay is over.
    pub fn due(&mut self, t: f64, tick: f64, cap: usize) -> Option<usize> {
        if self.result.is_some() {
            return None;
        }
        self.wall.get_or_insert_with(web_time::Instant::now);
        Some(self.pace.due(t, tick, self.run.position(), cap))
    }

    /// Takes up to `n` events in both lanes; after the last, ends the replay.
    /// Returns whether it goes on.
    pub fn advance(&mut self, n: usize) -> bool {
        if self.result.is_some() {
            return false;
        }
        for _ in 0..n {
            if !self.run.step() {
                break;
            }
            // Refusals are out-of-memory only: the replay counts them and goes on.
            let (vm, replayer) = &mut self.vm;
            let _ = replayer.step(vm);
            self.series.push(SeriesPoint {
                event: self.run.position(),
                live: self.run.live_bytes(),
                reserved: self.run.reserved(),
            });
        }
        if self.run.is_done() {
            self.finish();
            return false;
        }
        true
    }

    /// Stops where it is: the figures so far become the result.
    pub fn stop(&mut self) {
        if self.result.is_none() {
            self.finish();
        }
    }

    /// Wall-clock milliseconds from the first paced step to the end.
    pub fn millis(&self) -> Option<u64> {
        self.millis
    }

    fn finish(&mut self) {
        self.millis = self.wall.map(|w| w.elapsed().as_millis() as u64);
        self.last = Some(Moment::of(&self.run, usize::MAX));
        if self.run.is_done() {
            let (vm, replayer) = &mut self.vm;
            while replayer.step(vm).unwrap_or(true) {}
            self.expandable = Some(lane_of(vm, replayer.counts(), self.trace.peak_live));
        }
        self.result = Some(self.run.finish());
    }

    /// Both policies after `at` events (clamped to the events taken so far),
    /// or, with `None`, as they are now; maps of the `max` largest segments.
    /// An earlier event is re-simulated from the start, a later one from
    /// where the last scrub left the cursor: exact, and no more memory than
    /// one more replay. All at once: see [`Compare::scrub`] for a slice at
    /// a time.
    pub fn moment(&mut self, at: Option<usize>, max: usize) -> Moment {
        match self.seek(at, max, usize::MAX) {
            Seek::There(m) => *m,
            Seek::Started(_) | Seek::Going => unreachable!("a seek with no bound gets there"),
        }
    }

    /// Where the scrubber goes when asked for event `at` (the slider, a
    /// click on a chart), and both policies there: as the slider's range
    /// allows, at most the events taken, and an event not taken yet while
    /// the replay runs (or `None`) follows the replay (`None`). Re-simulates
    /// at most `events` events; a scrub that needs more is on its way
    /// ([`Seek::Started`] or [`Seek::Going`]), and [`Compare::resume_seek`]
    /// takes it further. On a trace of millions of events, a scrub back
    /// re-simulates up to millions: a tab cannot do that between two frames.
    pub fn scrub(&mut self, at: Option<usize>, max: usize, events: usize) -> (Option<usize>, Seek) {
        let now = self.run.position();
        let at = at
            .filter(|&a| a < now || self.result.is_some())
            .map(|a| a.min(now));
        (at, self.seek(at, max, events))
    }

    fn seek(&mut self, at: Option<usize>, max: usize, events: usize) -> Seek {
        let now = self.run.position();
        let at = at.map(|a| a.min(now));
        if at.is_none_or(|a| a == now) {
            self.heading = None;
            return Seek::There(Box::new(match &self.last {
                Some(m) => trim(m.clone(), max),
                None => Moment::of(&self.run, max),
            }));
        }
        let at = at.unwrap_or(now);
        if self.cursor.as_ref().is_none_or(|c| c.position() > at) {
            match Lockstep::new(self.trace.clone(), self.device) {
                Ok(c) => self.cursor = Some(c),
                Err(_) => return Seek::There(Box::default()),
            }
        }
        let fresh = self.heading.is_none();
        let id = match self.heading {
            Some((_, id)) => id,
            None => {
                self.seeks += 1;
                self.seeks
            }
        };
        self.heading = Some((at, id));
        match self.resume_seek(max, events) {
            Some(m) => Seek::There(Box::new(m)),
            None if fresh => Seek::Started(id),
            None => Seek::Going,
        }
    }

    /// The seek under way, if any: its id.
    pub fn seeking(&self) -> Option<u64> {
        self.heading.map(|(_, id)| id)
    }

    /// Takes the seek under way up to `events` events further; both
    /// policies at its event once there (the seek is then over), `None`
    /// before (or with no seek under way).
    pub fn resume_seek(&mut self, max: usize, events: usize) -> Option<Moment> {
        let (at, _) = self.heading?;
        let cursor = self.cursor.as_mut()?;
        cursor.run_to(at.min(cursor.position().saturating_add(events)));
        if cursor.position() < at && !cursor.is_done() {
            return None;
        }
        self.heading = None;
        Some(Moment::of(cursor, max))
    }

    /// Each policy's smallest budget, once found.
    pub fn budgets(&self) -> [Option<Budget>; 2] {
        self.budgets
    }

    /// PyTorch with `expandable_segments`' smallest budget, once found.
    pub fn expandable_budget(&self) -> Option<Budget> {
        self.expandable_budget
    }

    /// Starts finding the smallest budgets — both policies', then, for a
    /// replay not stopped before its end, PyTorch with
    /// `expandable_segments`' (a stopped one has no row to show it in) —
    /// unless a search is under way; [`Compare::advance_budgets`] takes it
    /// forward.
    pub fn find_budgets(&mut self) {
        if self.budget_job.is_some() {
            return;
        }
        let stopped = self.stopped_early();
        let mut whose = vec![Whose::Policy(POLICIES[0]), Whose::Policy(POLICIES[1])];
        if !stopped {
            whose.push(Whose::Expandable);
        }
        self.budget_job = Some(BudgetJob::new(self.trace.clone(), self.device, &whose));
    }

    /// Takes the search for the smallest budgets about `events` events of
    /// replays further; whether it goes on. Each budget is shown once found.
    pub fn advance_budgets(&mut self, events: usize) -> Result<bool, Error> {
        let stopped = self.stopped_early();
        let Some(job) = &mut self.budget_job else {
            return Ok(false);
        };
        if stopped {
            // Stopped before its end since the search began: no row to show it in.
            job.drop_whose(Whose::Expandable);
        }
        let advanced = job.advance(events);
        for (whose, budget) in job.take_found() {
            match whose {
                Whose::Policy(p) => {
                    let lane = POLICIES
                        .iter()
                        .position(|&q| q == p)
                        .expect("a compared policy");
                    self.budgets[lane] = Some(budget);
                }
                Whose::Expandable => self.expandable_budget = Some(budget),
            }
        }
        let done = job.is_done();
        if advanced.is_err() || done {
            self.budget_job = None;
        }
        advanced.map(|()| !done)
    }

    /// Stopped before its last event (its figures are those so far, and
    /// PyTorch with `expandable_segments` has no row).
    fn stopped_early(&self) -> bool {
        self.result.is_some() && self.expandable.is_none()
    }

    /// Where the search for the smallest budgets is, while one is under way.
    pub fn budget_progress(&self) -> Option<JobProgress> {
        self.budget_job.as_ref().and_then(BudgetJob::progress)
    }
}

/// `m` with at most `max` segments per map.
fn trim(mut m: Moment, max: usize) -> Moment {
    for (bars, hidden) in &mut m.maps {
        if bars.len() > max {
            *hidden += bars.len() - max;
            bars.truncate(max);
        }
    }
    m
}

/// An `Expandable`'s figures in the harness's words.
fn lane_of(vm: &Expandable, counts: ReplayCounts, peak_live: u64) -> LaneFigures {
    let s = vm.stats();
    LaneFigures {
        peak_live,
        allocated: s.allocated,
        reserved: s.reserved,
        peak_reserved: s.peak_reserved,
        device_allocs: s.device_allocs,
        device_frees: s.device_frees,
        cache_hits: s.cache_hits,
        allocs: counts.allocs,
        ooms: counts.ooms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::budget::tests::expandable_at;
    use crate::model::lockstep::TENSOR_USAGE;
    use crate::model::lockstep::tests::sample;
    use vrampool::{Config, Limit, replay};

    #[test]
    fn the_series_stays_bounded_and_keeps_every_peak() {
        let mut s = Series::default();
        let n = 10 * MAX_SERIES + 7;
        for i in 1..=n {
            s.push(SeriesPoint {
                event: i,
                live: (i % 977) as u64,
                reserved: [i as u64, (n - i) as u64],
            });
        }
        let pts = s.points();
        assert!(pts.len() <= MAX_SERIES + 1, "{}", pts.len());
        assert_eq!(pts.last().unwrap().event, n);
        assert_eq!(pts.iter().map(|p| p.live).max(), Some(976));
        assert_eq!(pts.iter().map(|p| p.reserved[0]).max(), Some(n as u64));
        assert_eq!(pts[0].reserved[1], (n - 1) as u64);
        assert!(pts.windows(2).all(|w| w[0].event < w[1].event));
    }

    #[test]
    fn paced_compare_ends_with_the_lockstep_figures() {
        let trace = sample("resnet_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 10_000.0).unwrap();
        assert_eq!(c.due(0.0, 0.05, 5000), Some(500));
        c.advance(500);
        assert_eq!(c.due(0.05, 0.05, 5000), Some(500));
        let mut t = 0.05;
        while let Some(n) = c.due(t, 0.05, 5000) {
            c.advance(n);
            t += 0.05;
        }
        assert!(t > 0.6 && t < 0.85, "about 7098 events at 10 k/s: {t}");
        let got = c.result().unwrap();
        let mut l = Lockstep::new(trace.clone(), SimDevice::PAGE).unwrap();
        while l.step() {}
        assert_eq!(got, l.finish());
        // The chart's highest points are the peaks.
        let pts = c.series().points();
        assert_eq!(pts.last().unwrap().event, trace.events.len());
        assert_eq!(pts.iter().map(|p| p.live).max(), Some(trace.peak_live));
        for (i, lane) in got.iter().enumerate() {
            assert_eq!(
                pts.iter().map(|p| p.reserved[i]).max(),
                Some(lane.peak_reserved)
            );
        }
    }

    #[test]
    fn a_finished_compare_has_virtual_memory_beside_it_and_a_stopped_one_not() {
        let trace = sample("gpt_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        c.advance(1000);
        c.stop();
        assert_eq!(c.expandable(), None, "stopped: not the whole trace");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        while c.advance(5000) {}
        let x = c.expandable().expect("the whole trace was taken");
        // Core's Expandable on the page's device, replayed here by hand.
        let mut vm = Expandable::new(SimDevice::PAGE.capacity, None);
        let mut live = std::collections::HashMap::new();
        for e in &trace.events {
            match e.action {
                vrampool::trace::Action::Allocate => {
                    live.insert(e.pointer, vm.allocate(e.size).unwrap());
                }
                vrampool::trace::Action::Free => vm.free(live.remove(&e.pointer).unwrap()).unwrap(),
            }
        }
        let s = vm.stats();
        assert_eq!(
            (x.peak_reserved, x.device_allocs, x.cache_hits, x.ooms),
            (s.peak_reserved, s.device_allocs, s.cache_hits, 0)
        );
        assert_eq!(x.peak_live, trace.peak_live);
    }

    #[test]
    fn scrubbing_back_and_forth_shows_the_state_at_that_event() {
        let trace = sample("gpt_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        c.advance(6000);
        let want = |at: usize| {
            let mut l = Lockstep::new(trace.clone(), SimDevice::PAGE).unwrap();
            l.run_to(at);
            Moment::of(&l, 8)
        };
        for at in [4000, 4500, 1200, 5999, 0] {
            assert_eq!(c.moment(Some(at), 8), want(at), "event {at}");
        }
        // Beyond the events taken: where the replay is now.
        let now = c.moment(Some(9000), 8);
        assert_eq!(now.position, 6000);
        assert_eq!(now, want(6000));
        // After the end, "now" is the last event, leftovers not yet freed.
        while c.advance(5000) {}
        let end = c.moment(None, 8);
        assert_eq!(end, want(trace.events.len()));
        assert_eq!(c.moment(Some(trace.events.len()), 8), end);
    }

    #[test]
    fn a_scrub_past_the_events_taken_follows_or_stops_at_the_last() {
        let trace = sample("gpt_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        c.advance(3000);
        let now = c.moment(None, 8);
        let there = |m: Moment| Seek::There(Box::new(m));
        assert_eq!(
            c.scrub(Some(2000), 8, usize::MAX),
            (Some(2000), there(c.moment(Some(2000), 8)))
        );
        // Running: an event not taken yet follows the replay.
        assert_eq!(
            c.scrub(Some(trace.events.len()), 8, usize::MAX),
            (None, there(now.clone()))
        );
        assert_eq!(c.scrub(None, 8, usize::MAX), (None, there(now.clone())));
        // Stopped: a click at the chart's end stays at the last event taken.
        c.stop();
        assert_eq!(
            c.scrub(Some(trace.events.len()), 8, usize::MAX),
            (Some(3000), there(now))
        );
    }

    #[test]
    fn a_scrub_back_too_far_for_one_slice_gets_there_slice_by_slice() {
        let trace = sample("gpt_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        while c.advance(5000) {}
        let want = |at: usize| {
            let mut l = Lockstep::new(trace.clone(), SimDevice::PAGE).unwrap();
            l.run_to(at);
            Moment::of(&l, 8)
        };
        // From the start to 5 000 in slices of 1 000: a seek begins...
        let (at, seek) = c.scrub(Some(5000), 8, 1000);
        assert_eq!(at, Some(5000));
        let Seek::Started(id) = seek else {
            panic!("{seek:?}")
        };
        assert_eq!(c.seeking(), Some(id));
        assert_eq!(c.resume_seek(8, 1000), None);
        // ...its target moves while it goes: the same seek, still going...
        assert_eq!(c.scrub(Some(4500), 8, 1000), (Some(4500), Seek::Going));
        assert_eq!(c.seeking(), Some(id));
        let mut slices = 0;
        let m = loop {
            slices += 1;
            if let Some(m) = c.resume_seek(8, 1000) {
                break m;
            }
        };
        // ...and gets there, exactly: 4 500 events in slices of 1 000.
        assert_eq!(slices, 2, "3 000 taken, then 1 000 and 500");
        assert_eq!(m, want(4500));
        assert_eq!(c.seeking(), None);
        assert_eq!(c.resume_seek(8, 1000), None, "no seek under way");
        // Forward from there is where the cursor is: within one slice.
        assert_eq!(
            c.scrub(Some(5200), 8, 1000),
            (Some(5200), Seek::There(Box::new(want(5200))))
        );
        // Back again: a new seek, and a scrub to the end calls it off.
        let (_, seek) = c.scrub(Some(2500), 8, 1000);
        assert!(matches!(seek, Seek::Started(n) if n > id), "{seek:?}");
        let (at, seek) = c.scrub(None, 8, 1000);
        assert_eq!((at, c.seeking()), (None, None));
        assert_eq!(seek, Seek::There(Box::new(c.moment(None, 8))));
    }

    #[test]
    fn smallest_budgets_replay_with_no_oom_and_the_device_allocations_said() {
        let trace = sample("resnet_train");
        let mut c = Compare::new(trace.clone(), SimDevice::PAGE, 1e9).unwrap();
        while c.advance(5000) {}
        c.find_budgets();
        let mut slices = 0;
        while c.advance_budgets(20_000).unwrap() {
            slices += 1;
            // Each is shown once found, the others still blank.
            if c.budget_progress()
                .is_some_and(|p| p.whose == Whose::Expandable)
            {
                assert!(c.budgets().iter().all(Option::is_some));
                assert_eq!(c.expandable_budget(), None);
            }
        }
        assert!(slices > 3, "{slices}");
        assert_eq!(c.budget_progress(), None);
        for (policy, b) in POLICIES.iter().zip(c.budgets()) {
            let (x, allocs) = b.flatten().expect("fits within 4 × peak live");
            let run = |x: f64| {
                let limit = (trace.peak_live as f64 * x).ceil() as u64;
                let config = Config {
                    limit: Some(Limit::Bytes(limit)),
                    ..policy.config()
                };
                let mut e = SimDevice::PAGE.engine(config).unwrap();
                replay(&mut e, &trace, TENSOR_USAGE)
            };
            let at = run(x);
            assert_eq!((at.ooms, at.device_allocs), (0, allocs), "{policy:?}");
            assert!(x < 4.0 && run(x - 0.001).ooms > 0, "{policy:?}: {x}");
        }
        // PyTorch with expandable_segments: fits there, not a step below.
        let (x, allocs) = c.expandable_budget().flatten().expect("fits within 4 ×");
        let vm_at = |x: f64| expandable_at(&trace, (trace.peak_live as f64 * x).ceil() as u64);
        assert_eq!(vm_at(x), (0, allocs));
        assert!(vm_at(x - 0.001).0 > 0, "{x}");
    }

    #[test]
    fn a_stopped_compare_finds_no_budget_for_virtual_memory() {
        let mut c = Compare::new(sample("gpt_train"), SimDevice::PAGE, 1e9).unwrap();
        c.advance(1000);
        c.stop();
        c.find_budgets();
        while c.advance_budgets(1 << 20).unwrap() {}
        assert!(c.budgets().iter().all(Option::is_some));
        assert_eq!(c.expandable_budget(), None);
        // Stopped after the search began: the same.
        let mut c = Compare::new(sample("gpt_train"), SimDevice::PAGE, 1e9).unwrap();
        c.advance(1000);
        c.find_budgets();
        assert!(c.advance_budgets(1000).unwrap());
        c.stop();
        while c.advance_budgets(1 << 20).unwrap() {
            assert_ne!(
                c.budget_progress().map(|p| p.whose),
                Some(Whose::Expandable)
            );
        }
        assert!(c.budgets().iter().all(Option::is_some));
        assert_eq!(c.expandable_budget(), None);
    }
}
