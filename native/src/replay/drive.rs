//! Running one replay: a trace through any [`Policy`] on any backend, driven
//! by core's `Replayer`, with samples for the timeline and bisection for the
//! smallest budget.

use std::time::Instant;

use anyhow::{Result, anyhow};
use indicatif::ProgressBar;
use serde::Serialize;
use vrampool::trace::{Foresight, Replayer, Step, smallest_budget};
use vrampool::{Backend, Config, ReplayReport, Trace};

use vrampool::trace::Expandable;

use crate::policy::{
    EnginePolicy, ExpandablePolicy, Figures, NoCache, Policy, PolicyKind, Requests, SizeClass,
};

/// One point of the timeline.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Operations done so far.
    pub op: u64,
    /// Live bytes as the trace asked for them.
    pub live: u64,
    /// The policy's figures then.
    pub figures: Figures,
}

/// What one replay produced.
pub struct Outcome {
    /// The figures.
    pub report: ReplayReport,
    /// Timeline points (about 1000 over the run).
    pub samples: Vec<Sample>,
    /// The engine's memory_summary at the end, before the cache is emptied.
    pub summary: String,
    /// Bytes `empty_cache` gave back at the end.
    pub released_at_end: u64,
    /// Segments the engine abandoned during the replay and its
    /// `empty_cache` (dropped while blocks in them awaited a submit; 0 for
    /// the baselines).
    pub segments_abandoned: u64,
}

/// When a [`Probe`] is called.
#[derive(Debug, Clone, Copy)]
pub enum Moment<'a> {
    /// At a timeline point.
    Sample(&'a Sample),
    /// After the last free, with the cache still held.
    CacheHeld,
    /// After `empty_cache`, with the bytes the pool still reserves (a
    /// preallocation's pinned segments stay).
    Emptied { reserved: u64 },
}

/// Called at each timeline point, and at the end before and after
/// `empty_cache`, so a real-device run can look at the driver.
pub type Probe<'a> = &'a mut dyn FnMut(Moment<'_>);

/// One replay: a trace through a policy, under a hard limit or none.
#[derive(Clone, Copy)]
pub struct Job<'t> {
    /// The policy.
    pub kind: PolicyKind,
    /// The trace.
    pub trace: &'t Trace,
    /// The hard limit, in bytes.
    pub limit: Option<u64>,
    /// The vrampool policy's configuration (its limit is `limit`).
    pub config: &'t Config,
    /// How the replay asks for its blocks.
    pub requests: Requests,
    /// A static plan the vrampool policy follows (`Engine::follow`): its
    /// segments are made inside the timed replay and counted with it.
    pub plan: Option<&'t Foresight>,
}

/// Runs `job` on the backend `make` builds.
pub fn run_policy<B: Backend>(
    job: Job<'_>,
    make: &mut dyn FnMut() -> Result<B>,
    bar: &ProgressBar,
    probe: Probe<'_>,
) -> Result<Outcome> {
    let Job {
        kind,
        trace,
        limit,
        config,
        requests,
        plan,
    } = job;
    let b = make()?;
    let usage = requests.usage;
    match kind {
        PolicyKind::Vrampool => drive(
            &mut EnginePolicy::new(b, config.clone(), limit, requests)?,
            trace,
            bar,
            probe,
            |p: &mut EnginePolicy<B>| match plan {
                Some(plan) => Ok(p.engine.follow(plan, usage)?),
                None => Ok(()),
            },
        ),
        PolicyKind::Pytorch => drive(
            &mut EnginePolicy::new(b, Config::pytorch(), limit, requests)?,
            trace,
            bar,
            probe,
            no_setup,
        ),
        PolicyKind::Expandable => {
            // Virtual memory the size of the device's (simulated) memory.
            let capacity = b.capacity().ok_or_else(|| {
                anyhow!("the expandable policy needs virtual memory: run it with --simulate")
            })?;
            drive(
                &mut ExpandablePolicy(Expandable::new(capacity, limit)),
                trace,
                bar,
                probe,
                no_setup,
            )
        }
        PolicyKind::SizeClass => drive(
            &mut SizeClass::new(b, limit, usage),
            trace,
            bar,
            probe,
            no_setup,
        ),
        PolicyKind::None => drive(
            &mut NoCache::new(b, limit, usage),
            trace,
            bar,
            probe,
            no_setup,
        ),
    }
}

/// The setup of a replay with nothing to prepare (see [`drive`]).
fn no_setup<P>(_: &mut P) -> Result<()> {
    Ok(())
}

/// Replays `trace` through `p` with core's [`Replayer`], taking a timeline
/// sample about every thousandth event (not counted in the time per op);
/// `setup` runs first, inside the timed and counted replay.
fn drive<P: Policy>(
    p: &mut P,
    trace: &Trace,
    bar: &ProgressBar,
    probe: Probe<'_>,
    setup: impl FnOnce(&mut P) -> Result<()>,
) -> Result<Outcome> {
    let n = trace.events.len() as u64;
    let every = (n / 1000).max(1);
    let mut samples = Vec::with_capacity(1024);
    let mut replayer = Replayer::new(trace);
    // Counted from the policy's making, not from here: a preallocation
    // (`--set growth=...`) made with the engine is a device allocation of
    // the replay too, as a followed plan's segments are.
    let before = Figures::default();
    let mut peak = Figures::default();
    let mut aside_ns = 0u128;
    let start = Instant::now();
    setup(p)?;
    while let Some(step) = replayer.next_step() {
        match step {
            Step::Allocate { size, line } => {
                let outcome = p.allocate(size);
                replayer
                    .allocated(outcome)
                    .map_err(|e| anyhow!("{}: line {line}: {e}", trace.name))?;
            }
            Step::Free(h) => p.free(h),
            Step::Skip => {}
        }
        let i = replayer.position() as u64 - 1;
        if i.is_multiple_of(every) || i + 1 == n {
            let t = Instant::now();
            let f = p.figures();
            peak.allocated = peak.allocated.max(f.allocated);
            peak.reserved = peak.reserved.max(f.reserved);
            let s = Sample {
                op: i + 1,
                live: replayer.live_bytes(),
                figures: f,
            };
            probe(Moment::Sample(&s));
            samples.push(s);
            bar.inc(every.min(n - i));
            aside_ns += t.elapsed().as_nanos();
        } else if P::TRACKS_PEAK_CHEAPLY {
            let f = p.figures();
            peak.allocated = peak.allocated.max(f.allocated);
            peak.reserved = peak.reserved.max(f.reserved);
        }
    }
    let busy_ns = start.elapsed().as_nanos() - aside_ns;
    let stats = p.stats();
    if let Some(s) = &stats {
        // The engine keeps exact peaks; the baselines are tracked every op.
        peak.allocated = s.total.allocated_bytes.peak;
        peak.reserved = s.total.reserved_bytes.peak;
    }
    // The replay's figures, before the blocks still live are freed (for
    // `empty_cache` to give everything back): a baseline that destroys a
    // buffer per free would count those as the replay's.
    let f = p.figures();
    for h in replayer.take_live() {
        p.free(h);
    }
    let summary = stats.map(|s| s.summary()).unwrap_or_default();
    probe(Moment::CacheHeld);
    let released_at_end = p.empty_cache();
    probe(Moment::Emptied {
        reserved: p.figures().reserved,
    });
    let segments_abandoned = p.figures().segments_abandoned - before.segments_abandoned;
    let counts = replayer.counts();
    let hits = f.cache_hits - before.cache_hits;
    Ok(Outcome {
        report: ReplayReport {
            trace: trace.name.clone(),
            allocs: counts.allocs,
            frees: counts.frees,
            peak_live: trace.peak_live,
            peak_allocated: peak.allocated,
            peak_reserved: peak.reserved,
            reserved_ratio: peak.reserved as f64 / trace.peak_live as f64,
            device_allocs: f.device_allocs - before.device_allocs,
            device_frees: f.device_frees - before.device_frees,
            segment_bytes_created: f.bytes_created - before.bytes_created,
            // During the replay, as `device_frees`: what `empty_cache` gave
            // back after it is `released_at_end`.
            segment_bytes_released: f.bytes_released - before.bytes_released,
            cache_hits: hits,
            cache_misses: counts.allocs - counts.ooms - hits,
            ooms: counts.ooms,
            retries: f.retries - before.retries,
            elapsed_ns: busy_ns as u64,
            ns_per_op: busy_ns as f64 / (counts.allocs + counts.frees).max(1) as f64,
            // Peaks are read at samples here, not at every operation.
            peak_reserved_at: None,
            peak_live_at: None,
            blocks_moved: f.blocks_moved - before.blocks_moved,
            bytes_moved: f.bytes_moved - before.bytes_moved,
            move_batches: f.move_batches - before.move_batches,
        },
        samples,
        summary,
        released_at_end,
        segments_abandoned,
    })
}

/// The smallest budget, as a multiple of peak live in 0.001 steps, under
/// which `job`'s policy replays its trace with no OOM (its own limit is not
/// used), with the device allocations it then needs; `None` if even 4 ×
/// peak live fails (see `trace::smallest_budget`).
pub fn min_budget<B: Backend>(
    job: Job<'_>,
    make: &mut dyn FnMut() -> Result<B>,
    bar: &ProgressBar,
) -> Result<Option<(f64, u64)>> {
    let hidden = ProgressBar::hidden();
    smallest_budget(job.trace.peak_live, |limit| {
        let o = run_policy(
            Job {
                limit: Some(limit),
                ..job
            },
            make,
            &hidden,
            &mut |_: Moment<'_>| {},
        )?;
        bar.inc(1);
        Ok((o.report.ooms == 0, o.report.device_allocs))
    })
}
