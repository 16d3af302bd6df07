//! `replay`: a trace through any [`Policy`] on any backend, with samples for
//! the timeline and bisection for the smallest budget.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Result, bail};
use indicatif::ProgressBar;
use serde::Serialize;
use vrampool::trace::Action;
use vrampool::{Backend, Config, ReplayReport, Trace};

use crate::policy::{
    EnginePolicy, Figures, NoCache, Policy, PolicyKind, Refusal, Requests, SizeClass,
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
}

/// When a [`Probe`] is called.
#[derive(Debug, Clone, Copy)]
pub enum Moment<'a> {
    /// At a timeline point.
    Sample(&'a Sample),
    /// After the last free, with the cache still held.
    CacheHeld,
    /// After `empty_cache`.
    Emptied,
}

/// Called at each timeline point, and at the end before and after
/// `empty_cache`, so a real-device run can look at the driver.
pub type Probe<'a> = &'a mut dyn FnMut(Moment<'_>);

/// Replays `trace` with `policy` on the backend `make` builds.
pub fn run_policy<B: Backend>(
    kind: PolicyKind,
    make: &mut dyn FnMut() -> Result<B>,
    trace: &Trace,
    limit: Option<u64>,
    requests: Requests,
    bar: &ProgressBar,
    probe: Probe<'_>,
) -> Result<Outcome> {
    let b = make()?;
    let usage = requests.usage;
    match kind {
        PolicyKind::Vrampool => drive(
            &mut EnginePolicy::new(b, Config::default(), limit, requests)?,
            trace,
            bar,
            probe,
        ),
        PolicyKind::Pytorch => drive(
            &mut EnginePolicy::new(b, Config::pytorch(), limit, requests)?,
            trace,
            bar,
            probe,
        ),
        PolicyKind::SizeClass => drive(&mut SizeClass::new(b, limit, usage), trace, bar, probe),
        PolicyKind::None => drive(&mut NoCache::new(b, limit, usage), trace, bar, probe),
    }
}

fn drive<P: Policy>(
    p: &mut P,
    trace: &Trace,
    bar: &ProgressBar,
    probe: Probe<'_>,
) -> Result<Outcome> {
    let n = trace.events.len() as u64;
    let every = (n / 1000).max(1);
    let mut samples = Vec::with_capacity(1024);
    let mut live: HashMap<u64, P::Handle> = HashMap::with_capacity(1024);
    let (mut allocs, mut frees, mut ooms, mut live_bytes) = (0u64, 0u64, 0u64, 0u64);
    let before = p.figures();
    let mut peak = Figures::default();
    let mut aside_ns = 0u128;
    let start = Instant::now();
    for (i, e) in trace.events.iter().enumerate() {
        match e.action {
            Action::Allocate => {
                allocs += 1;
                live_bytes += e.size;
                match p.allocate(e.size) {
                    Ok(h) => {
                        live.insert(e.pointer, h);
                    }
                    Err(Refusal::OutOfMemory) => ooms += 1,
                    Err(Refusal::Fatal(why)) => {
                        bail!("{}: line {}: {why}", trace.name, e.line)
                    }
                }
            }
            Action::Free => {
                frees += 1;
                live_bytes -= e.size;
                if let Some(h) = live.remove(&e.pointer) {
                    p.free(h);
                }
            }
        }
        if (i as u64).is_multiple_of(every) || i + 1 == trace.events.len() {
            let t = Instant::now();
            let f = p.figures();
            peak.allocated = peak.allocated.max(f.allocated);
            peak.reserved = peak.reserved.max(f.reserved);
            let s = Sample {
                op: i as u64 + 1,
                live: live_bytes,
                figures: f,
            };
            probe(Moment::Sample(&s));
            samples.push(s);
            bar.inc(every.min(n - i as u64));
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
    for (_, h) in live.drain() {
        p.free(h);
    }
    let summary = stats.map(|s| s.summary()).unwrap_or_default();
    let f = p.figures();
    probe(Moment::CacheHeld);
    let released_at_end = p.empty_cache();
    probe(Moment::Emptied);
    let hits = f.cache_hits - before.cache_hits;
    let device_allocs = f.device_allocs - before.device_allocs;
    Ok(Outcome {
        report: ReplayReport {
            trace: trace.name.clone(),
            allocs,
            frees,
            peak_live: trace.peak_live,
            peak_allocated: peak.allocated,
            peak_reserved: peak.reserved,
            reserved_ratio: peak.reserved as f64 / trace.peak_live as f64,
            device_allocs,
            device_frees: f.device_frees - before.device_frees,
            cache_hits: hits,
            cache_misses: allocs - ooms - hits,
            ooms,
            retries: f.retries - before.retries,
            elapsed_ns: busy_ns as u64,
            ns_per_op: busy_ns as f64 / (allocs + frees).max(1) as f64,
        },
        samples,
        summary,
        released_at_end,
    })
}

/// The smallest budget, as a multiple of peak live rounded up to 0.001, under
/// which `kind` replays `trace` with no OOM, with the device allocations it
/// then needs; `None` if even 4 × peak live fails.
pub fn min_budget<B: Backend>(
    kind: PolicyKind,
    make: &mut dyn FnMut() -> Result<B>,
    trace: &Trace,
    requests: Requests,
    bar: &ProgressBar,
) -> Result<Option<(f64, u64)>> {
    let hidden = ProgressBar::hidden();
    let mut attempt = |x: f64| -> Result<ReplayReport> {
        let limit = (trace.peak_live as f64 * x).ceil() as u64;
        let o = run_policy(
            kind,
            make,
            trace,
            Some(limit),
            requests,
            &hidden,
            &mut |_: Moment<'_>| {},
        )?;
        bar.inc(1);
        Ok(o.report)
    };
    let (mut lo, mut hi) = (1.0f64, 4.0f64);
    let mut best = attempt(hi)?;
    if best.ooms > 0 {
        return Ok(None);
    }
    // Most policies fit within a few percent: try there first.
    let first = attempt(1.0)?;
    if first.ooms == 0 {
        return Ok(Some((1.0, first.device_allocs)));
    }
    while hi - lo > 0.0005 {
        let mid = (lo + hi) / 2.0;
        let r = attempt(mid)?;
        if r.ooms == 0 {
            hi = mid;
            best = r;
        } else {
            lo = mid;
        }
    }
    let x = (hi * 1000.0).ceil() / 1000.0;
    if x > hi {
        // Confirm the rounded figure itself (it is above the bisected one).
        let r = attempt(x)?;
        if r.ooms == 0 {
            best = r;
        }
    }
    Ok(Some((x, best.device_allocs)))
}
