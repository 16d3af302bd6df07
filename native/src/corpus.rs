//! `corpus`: the standing targets over a corpus of traces. Every trace at
//! each scale — and, to see past the luck of one corpus, with every tensor
//! resized and with its sizes jittered apart — replayed on the simulated
//! device by the vrampool policy (with
//! any `--set` changes) and by the PyTorch preset: which rows miss which
//! target (core's `trace::Targets`), the counts, and the device time the
//! churn would cost on the H200 (core's `DeviceCost`); beside them, PyTorch
//! with expandable segments on simulated virtual memory (core's
//! `trace::Expandable`), the bar a pool without virtual memory is held to.
//! What BENCHMARKS.md's policy sweeps were measured with.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use vrampool::trace::{
    DeviceCost, Expandable, ExpandableStats, Foresight, ForesightError, Missed, Replayer,
    RowFigures, Targets, smallest_budget,
};
use vrampool::{Config, Engine, Limit, SimulatedDevice, Trace, fmt_bytes, replay_submitting};

use crate::settings::configured;
use crate::{Common, bar};

#[derive(Args)]
pub struct CorpusArgs {
    /// Trace files, or folders whose `*.csv` and `*.csv.gz` files are read.
    /// Default: data/traces and data/traces/heldout.
    paths: Vec<PathBuf>,
    /// Replay every trace with every size divided by each of these.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,64",
        value_name = "N,.."
    )]
    scales: Vec<u64>,
    /// Replay every trace (at each scale) with every tensor resized by each
    /// of these factors too (1: as recorded), e.g. `--resize 1,0.75,0.9,1.1,1.25`:
    /// a policy tuned to one set of sizes shows it here.
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "F,..")]
    resize: Vec<f64>,
    /// Replay every trace (at each scale and resize factor) with every
    /// distinct size moved by its own factor in 0.9–1.1, drawn from each of
    /// these seeds (core's `Trace::jittered`; 0: as recorded), e.g.
    /// `--jitter 1,2,3,4`: a policy tuned to the ratios between one
    /// workload's tensor sizes shows it here.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0",
        value_name = "SEED,.."
    )]
    jitter: Vec<u64>,
    /// Change a field of the vrampool policy's configuration from the
    /// default, as `replay --set` does; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// Also find each row's smallest budget with no OOM (the M target): about
    /// twenty replays a row more.
    #[arg(long)]
    min_budget: bool,
    /// Print every row, not only those that miss a target.
    #[arg(long)]
    all: bool,
    /// Also plan each row with foresight (core's `trace::Foresight`: every
    /// lifetime known in advance, each allocation given a fixed place in
    /// segments made once) and hold that plan to the same targets: what a
    /// pool that knew the future would reach, the yardstick for one that
    /// does not. A few seconds a row at full size.
    #[arg(long)]
    foresight: bool,
    /// The vrampool policy follows the static plan of each trace as
    /// recorded at that scale (`Engine::follow`): at resize ×1 and no jitter
    /// the workload runs again exactly as it was recorded; resized or
    /// jittered, it has departed from the plan, and the policy takes over
    /// (the plan's segments become ordinary cache). Not with --min-budget.
    #[arg(long)]
    follow: bool,
    /// Every tensor of the vrampool policy's replays relocatable
    /// (`Request::relocatable`): a tensor runtime that reads each tensor's
    /// place anew for every pass and submits what it recorded on the pool's
    /// request, so the pool may move live blocks to serve a request from
    /// memory it holds (`Config::relocate`). The PyTorch preset never moves.
    /// Not with --follow.
    #[arg(long)]
    relocatable: bool,
    /// Both policies' replays as a `Pool` caller that submits every N
    /// allocations and frees makes them (core's `replay_submitting`): a
    /// tensor freed waits for the next submit (`Reuse::AfterSubmit`), and
    /// with --relocatable each tensor is pinned from its allocation until
    /// that submit (`Pool::alloc_movable` under a runtime that reads a
    /// tensor's place when it records the command writing it). 0: frees at
    /// once, nothing pinned. The expandable-segments baseline is replayed
    /// with frees at once whatever N.
    #[arg(long, value_name = "N", default_value_t = 0)]
    submit_every: u64,
    /// Simulated device memory in bytes (default: an H200's 141 GiB).
    #[arg(long, default_value_t = 141 << 30)]
    capacity: u64,
    /// Simulated max_buffer_size in bytes (default: the H200's 4 GiB).
    #[arg(long, default_value_t = 4 << 30)]
    max_buffer_size: u64,
}

/// One trace at one scale and resize factor, through both policies.
#[derive(Serialize)]
struct Row {
    trace: String,
    scale: u64,
    resize: f64,
    /// The seed the sizes were jittered with (0: as recorded).
    jitter: u64,
    vrampool: Figures,
    pytorch: Figures,
    missed: Missed,
    /// The missed targets' letters (`RMAB`), empty when none.
    missed_letters: String,
    /// The vrampool policy's peak reserved came no later than the first time
    /// live bytes reached their peak: it was set on the way there, before
    /// the workload had reached that peak once to learn from.
    peak_by_first_live_peak: bool,
    /// With `--foresight`: the static plan's figures and the targets it
    /// misses against the PyTorch preset's (R, A, B; no budgets).
    foresight: Option<ForesightRow>,
    /// PyTorch with expandable segments (virtual memory) on the same row.
    expandable: ExpandableRow,
}

/// A row replayed through PyTorch's allocator with `expandable_segments`
/// on simulated virtual memory (core's `trace::Expandable`).
#[derive(Serialize)]
struct ExpandableRow {
    /// Its figures: bytes created are bytes of pages mapped, device
    /// allocations `cuMemMap` calls.
    #[serde(flatten)]
    row: RowFigures,
    /// Peak reserved ÷ peak live.
    ratio: f64,
    /// Device allocations at the smallest budget.
    device_allocs_at_min: Option<u64>,
    /// The targets it misses against the PyTorch preset's (`RMAB`): the
    /// standing targets are not met by virtual memory either.
    missed_letters: String,
    #[serde(skip)]
    missed: Missed,
    /// The vrampool policy's peak reserved is at or below this one's.
    vrampool_at_or_below: bool,
    /// Bytes of the requests it served from free blocks with no limit, and
    /// of those whose block lies across two page ranges mapped apart (what
    /// fixed-size buffers could not have reused).
    reused_bytes: u64,
    reused_across_maps: u64,
}

/// A row's static plan with foresight.
#[derive(Serialize)]
struct ForesightRow {
    /// The plan's reserved bytes (its segments, made once).
    reserved: u64,
    /// The plan's reserved bytes ÷ peak live.
    ratio: f64,
    /// Its segments: its device allocations, made once.
    segments: usize,
    /// The targets the plan misses (`RAB`), empty when none.
    missed_letters: String,
    #[serde(skip)]
    missed: Missed,
}

/// One policy's figures on a row.
#[derive(Serialize)]
struct Figures {
    #[serde(flatten)]
    row: RowFigures,
    /// Peak reserved ÷ peak live.
    ratio: f64,
    /// What the segments created and released would cost on the H200, ms.
    device_ms: f64,
    /// Device allocations at the smallest budget.
    device_allocs_at_min: Option<u64>,
    /// Allocations replayed when reserved bytes first reached their peak.
    peak_reserved_at: u64,
    /// Allocations replayed when live bytes first reached their peak.
    peak_live_at: u64,
    /// Bytes of live blocks moved (with --relocatable).
    bytes_moved: u64,
}

/// The counts over all rows.
#[derive(Serialize)]
struct Summary {
    rows: usize,
    missing_reserved: usize,
    missing_budget: Option<usize>,
    missing_allocations: usize,
    missing_bytes: usize,
    /// Rows missing the reserved target, per resize factor (in `--resize` order).
    missing_reserved_by_resize: Vec<usize>,
    /// Rows missing the reserved target, per jitter seed (in `--jitter` order).
    missing_reserved_by_jitter: Vec<usize>,
    mean_ratio: f64,
    pytorch_mean_ratio: f64,
    /// Of the rows missing the reserved target, those whose peak reserved
    /// came no later than the workload's first peak of live bytes.
    missing_reserved_by_first_live_peak: usize,
    /// With `--foresight`: the rows whose static plan misses the reserved
    /// target, the allocations or the bytes target, and its mean ratio.
    foresight: Option<ForesightSummary>,
    /// PyTorch with expandable segments on the same rows.
    expandable: ExpandableSummary,
    /// Estimated H200 device time of the full-size rows, ms.
    device_ms_full_size: f64,
    pytorch_device_ms_full_size: f64,
    /// Bytes of live blocks the vrampool policy moved, at full size and over
    /// every row (with --relocatable).
    bytes_moved_full_size: u64,
    bytes_moved: u64,
}

/// The counts of PyTorch with expandable segments over all rows.
#[derive(Serialize)]
struct ExpandableSummary {
    missing_reserved: usize,
    missing_budget: Option<usize>,
    missing_allocations: usize,
    missing_bytes: usize,
    mean_ratio: f64,
    /// Rows where the vrampool policy reserves no more than it.
    vrampool_at_or_below: usize,
}

/// The counts of the static plans over all rows.
#[derive(Serialize)]
struct ForesightSummary {
    missing_reserved: usize,
    missing_allocations: usize,
    missing_bytes: usize,
    mean_ratio: f64,
    most_segments: usize,
}

/// The trace files of `paths` (folders expanded), sorted within each folder.
fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let defaults = [
        PathBuf::from("data/traces"),
        PathBuf::from("data/traces/heldout"),
    ];
    let paths: &[PathBuf] = if paths.is_empty() { &defaults } else { paths };
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading the folder {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    let name = f.to_string_lossy();
                    f.is_file() && (name.ends_with(".csv") || name.ends_with(".csv.gz"))
                })
                .collect();
            inside.sort();
            files.extend(inside);
        } else if p.exists() {
            files.push(p.clone());
        } else {
            bail!(
                "{}: no such file or folder (with no paths, corpus reads data/traces and \
                 data/traces/heldout of the current folder)",
                p.display()
            );
        }
    }
    if files.is_empty() {
        bail!("no trace files (*.csv, *.csv.gz) in {}", show(paths));
    }
    Ok(files)
}

fn show(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One policy's replay of `t` on a fresh simulated device. With no limit
/// every request must be served: a refusal there means the simulated device
/// is too small for the row, and its figures would mean nothing.
fn figures(
    t: &Trace,
    config: &Config,
    plan: Option<&Foresight>,
    a: &CorpusArgs,
) -> Result<Figures> {
    let run = |limit: Option<u64>| -> Result<vrampool::ReplayReport> {
        let config = Config {
            limit: limit.map(Limit::Bytes),
            ..config.clone()
        };
        let device = SimulatedDevice::with_max_buffer_size(a.capacity, a.max_buffer_size);
        let mut engine = Engine::new(device, config)?;
        if let Some(plan) = plan {
            engine.follow(plan, 0)?;
        }
        let mut r = replay_submitting(&mut engine, t, 0, a.relocatable, a.submit_every);
        // The plan's segments, and a preallocation made with the engine, are
        // the replay's device allocations too: counted from the engine's making.
        let c = engine.stats().counters;
        r.device_allocs = c.device_allocs;
        r.segment_bytes_created = c.bytes_created;
        Ok(r)
    };
    let r = run(None)?;
    refused_with_no_limit(r.ooms, r.allocs, t, a)?;
    let min = if a.min_budget {
        smallest_budget(t.peak_live, |limit| {
            let r = run(Some(limit))?;
            Ok::<_, anyhow::Error>((r.ooms == 0, r.device_allocs))
        })?
    } else {
        None
    };
    Ok(Figures {
        row: RowFigures::of(&r, min.map(|m| m.0)),
        ratio: r.reserved_ratio,
        device_ms: DeviceCost::H200_VULKAN.of_replay(&r),
        device_allocs_at_min: min.map(|m| m.1),
        peak_reserved_at: r.peak_reserved_at.unwrap_or_default(),
        peak_live_at: r.peak_live_at.unwrap_or_default(),
        bytes_moved: r.bytes_moved,
    })
}

/// A replay with no limit that ran out of memory has no figures to show:
/// the device is too small for the trace.
fn refused_with_no_limit(ooms: u64, allocs: u64, t: &Trace, a: &CorpusArgs) -> Result<()> {
    if ooms > 0 {
        bail!(
            "{ooms} of {allocs} allocations were refused with no limit (peak live {}, device {} \
             with buffers of at most {}): give a larger --capacity or --max-buffer-size, or a \
             larger scale",
            fmt_bytes(t.peak_live),
            fmt_bytes(a.capacity),
            fmt_bytes(a.max_buffer_size)
        );
    }
    Ok(())
}

/// A smallest budget (× peak live) and the device allocations at it.
type Budget = (f64, u64);

/// `t` through PyTorch with expandable segments on a device of the
/// simulated device's memory (see [`ExpandableRow`]): its figures and, with
/// `--min-budget`, its smallest budget.
fn expandable_figures(
    t: &Trace,
    a: &CorpusArgs,
) -> Result<(RowFigures, Option<Budget>, ExpandableStats)> {
    let run = |limit: Option<u64>| {
        let mut vm = Expandable::new(a.capacity, limit);
        let mut replayer = Replayer::new(t);
        // Refusals are out-of-memory only: the replay counts them and goes on.
        while replayer.step(&mut vm).unwrap_or(true) {}
        let counts = replayer.counts();
        (counts.ooms, counts.allocs, vm.stats())
    };
    let (ooms, allocs, s) = run(None);
    // Like the engine's rows, none with no limit: on a device too small for
    // the trace its figures would be those of a partial replay.
    refused_with_no_limit(ooms, allocs, t, a)?;
    let min = if a.min_budget {
        smallest_budget::<()>(t.peak_live, |limit| {
            let (ooms, _, s) = run(Some(limit));
            Ok((ooms == 0, s.device_allocs))
        })
        .unwrap_or(None)
    } else {
        None
    };
    let row = RowFigures {
        peak_live: t.peak_live,
        peak_reserved: s.peak_reserved,
        device_allocs: s.device_allocs,
        bytes_created: s.bytes_mapped,
        min_budget: min.map(|m| m.0),
    };
    Ok((row, min, s))
}

/// The size of a jitter: every distinct size moved by up to 10 %.
const JITTER: f64 = 0.1;

/// One row: `full` at `scale`, `resize` and `jitter`, through both policies.
/// A (trace, scale)'s static plan as recorded, made once (see [`row`]).
type RecordedPlan = OnceLock<Result<Foresight, ForesightError>>;

fn row(
    full: &Trace,
    (scale, resize, jitter): Variant,
    recorded_plan: &RecordedPlan,
    ours: &Config,
    a: &CorpusArgs,
) -> Result<Row> {
    // The trace as recorded at this scale (what --follow plans); resized and
    // jittered at full size, then scaled: both round to PyTorch's 512-byte
    // granule, which after the scaling would have taken every tensor under
    // 512 B to 512 B (small_loop ÷64 ×1.1 held 1.13 × the live bytes, not 1.1 ×).
    let at_scale = |t: &Trace| {
        if scale > 1 {
            t.scaled(scale)
        } else {
            t.clone()
        }
    };
    let recorded = at_scale(full);
    let t = if resize == 1.0 && jitter == 0 {
        recorded.clone()
    } else {
        let mut t = if resize != 1.0 {
            full.resized(resize)
        } else {
            full.clone()
        };
        if jitter != 0 {
            t = t.jittered(JITTER, jitter);
        }
        at_scale(&t)
    };
    if t.largest > a.max_buffer_size {
        usage!(
            "one allocation is {} but the device allows at most {} per buffer; give a larger \
             --max-buffer-size or a larger scale",
            fmt_bytes(t.largest),
            fmt_bytes(a.max_buffer_size)
        );
    }
    // The vrampool policy's segments, and the plans', are at most this.
    let max_segment = ours.largest_segment(a.max_buffer_size);
    if t.largest > max_segment {
        usage!(
            "one allocation is {} but --set max_segment_size={max_segment} lets the vrampool \
             policy make no segment that large: raise it, or give a larger scale",
            fmt_bytes(t.largest)
        );
    }
    let as_recorded = || -> Result<&Foresight> {
        recorded_plan
            .get_or_init(|| Foresight::plan(&recorded, ours.alignment, max_segment))
            .as_ref()
            .map_err(|e| anyhow::Error::new(e.clone()))
    };
    let followed = if a.follow { Some(as_recorded()?) } else { None };
    let v = figures(&t, ours, followed, a).context("vrampool")?;
    let p = figures(&t, &Config::pytorch(), None, a).context("pytorch")?;
    let targets = Targets {
        full_size: scale == 1,
        budgets: a.min_budget,
    };
    let missed = targets.missed(&v.row, &p.row);
    let foresight = if a.foresight {
        let own;
        let plan = if resize == 1.0 && jitter == 0 {
            as_recorded()?
        } else {
            own = Foresight::plan(&t, ours.alignment, max_segment)?;
            &own
        };
        let row = RowFigures {
            peak_live: t.peak_live,
            peak_reserved: plan.reserved(),
            device_allocs: plan.segments.len() as u64,
            bytes_created: plan.reserved(),
            min_budget: None,
        };
        // A plan has no budget to find: R, A and B alone.
        let plan_targets = Targets {
            budgets: false,
            ..targets
        };
        let missed = plan_targets.missed(&row, &p.row);
        Some(ForesightRow {
            reserved: plan.reserved(),
            ratio: plan.ratio(),
            segments: plan.segments.len(),
            missed_letters: missed.to_string(),
            missed,
        })
    } else {
        None
    };
    let (x, x_min, x_stats) = expandable_figures(&t, a).context("expandable")?;
    let x_missed = targets.missed(&x, &p.row);
    let expandable = ExpandableRow {
        ratio: x.peak_reserved as f64 / x.peak_live as f64,
        vrampool_at_or_below: v.row.peak_reserved <= x.peak_reserved,
        row: x,
        device_allocs_at_min: x_min.map(|m| m.1),
        missed_letters: x_missed.to_string(),
        missed: x_missed,
        reused_bytes: x_stats.reused_bytes,
        reused_across_maps: x_stats.reused_across_maps,
    };
    let peak_by_first_live_peak = v.peak_reserved_at <= v.peak_live_at;
    Ok(Row {
        trace: full.name.clone(),
        scale,
        resize,
        jitter,
        vrampool: v,
        pytorch: p,
        missed,
        missed_letters: missed.to_string(),
        peak_by_first_live_peak,
        foresight,
        expandable,
    })
}

/// Runs `vrampool corpus`.
pub fn command(a: &CorpusArgs, c: &Common) -> Result<ExitCode> {
    if c.adapter.is_some() || c.summary || c.timeline.is_some() || c.memory_hints.is_some() {
        usage!(
            "corpus replays on the simulated device and prints its own table: --adapter, \
             --memory-hints, --summary and --timeline are for replay"
        );
    }
    if a.follow && a.relocatable {
        usage!(
            "--follow places each request where the plan says, and a plan's blocks never \
             move: drop --relocatable"
        );
    }
    if a.follow && a.submit_every > 0 {
        usage!("--follow replays each plan as recorded, every free at once: drop --submit-every");
    }
    if a.follow && a.min_budget {
        usage!(
            "--follow replays each plan with no limit (the plan is its budget): drop --min-budget"
        );
    }
    if let Some(s) = a.scales.iter().find(|&&s| s == 0) {
        usage!("--scales {s}: a divisor must be at least 1");
    }
    crate::target::check_max_buffer_size(a.max_buffer_size)?;
    if let Some(f) = a.resize.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        usage!("--resize {f}: a factor must be a positive number, like 0.9 or 1.1");
    }
    let (scales, resize, jitter) = (
        distinct(&a.scales),
        distinct(&a.resize),
        distinct(&a.jitter),
    );
    let ours = configured(Config::default(), &a.set)?;
    let files = trace_files(&a.paths)?;
    let mut traces = Vec::new();
    for f in &files {
        traces.push(Trace::open(f).with_context(|| format!("reading {}", f.display()))?);
    }
    // Every (trace, scale, resize, jitter), in that order.
    let mut jobs = Vec::new();
    // The static plan of each (trace, scale) as recorded, made by the first
    // job that needs it and shared by its resized and jittered variants.
    let plans: Vec<RecordedPlan> = (0..traces.len() * scales.len())
        .map(|_| OnceLock::new())
        .collect();
    for (ti, t) in traces.iter().enumerate() {
        for (si, &scale) in scales.iter().enumerate() {
            let plan = &plans[ti * scales.len() + si];
            for &f in &resize {
                for &j in &jitter {
                    jobs.push((t, (scale, f, j), plan));
                }
            }
        }
    }
    let pb = bar(jobs.len() as u64, c);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let done: Mutex<Vec<Option<Result<Row>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers.min(jobs.len()) {
            s.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(full, variant, plan)) = jobs.get(i) else {
                        break;
                    };
                    let r = row(full, variant, plan, &ours, a)
                        .with_context(|| format!("{} {}", full.name, show_variant(variant)));
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    done.lock().unwrap()[i] = Some(r);
                    pb.inc(1);
                }
            });
        }
    });
    pb.finish_and_clear();
    let mut rows = Vec::with_capacity(jobs.len());
    for r in done.into_inner().unwrap().into_iter().flatten() {
        rows.push(r?);
    }
    let summary = summarize(&rows, &resize, &jitter, a.min_budget);
    if c.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "set": a.set,
                "rows": rows,
                "summary": summary,
            }))?
        );
    } else {
        print_table(&rows, &summary, (&resize, &jitter), a.min_budget, a.all)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `xs` without repeats, in their order.
fn distinct<T: Copy + PartialEq>(xs: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(xs.len());
    for &x in xs {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// A row's variant of its trace: scale, resize factor, jitter seed.
type Variant = (u64, f64, u64);

/// `÷scale ×resize`, and `~seed` when jittered.
fn show_variant((scale, resize, jitter): Variant) -> String {
    if jitter == 0 {
        format!("÷{scale} ×{resize}")
    } else {
        format!("÷{scale} ×{resize} ~{jitter}")
    }
}

fn summarize(rows: &[Row], resize: &[f64], jitter: &[u64], budgets: bool) -> Summary {
    let count = |f: fn(&Missed) -> bool| rows.iter().filter(|r| f(&r.missed)).count();
    // Rows of one variant (a resize factor, a jitter seed) that miss R.
    let reserved_where =
        |keep: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| keep(r) && r.missed.reserved).count();
    let n = rows.len().max(1) as f64;
    // `+ 0.0`: an empty sum of f64 is -0.0.
    let full_ms =
        |f: fn(&Row) -> f64| rows.iter().filter(|r| r.scale == 1).map(f).sum::<f64>() + 0.0;
    Summary {
        rows: rows.len(),
        missing_reserved: count(|m| m.reserved),
        missing_budget: budgets.then(|| count(|m| m.budget == Some(true))),
        missing_allocations: count(|m| m.allocations),
        missing_bytes: count(|m| m.bytes),
        missing_reserved_by_resize: resize
            .iter()
            .map(|&f| reserved_where(&|r| r.resize == f))
            .collect(),
        missing_reserved_by_jitter: jitter
            .iter()
            .map(|&j| reserved_where(&|r| r.jitter == j))
            .collect(),
        mean_ratio: rows.iter().map(|r| r.vrampool.ratio).sum::<f64>() / n,
        pytorch_mean_ratio: rows.iter().map(|r| r.pytorch.ratio).sum::<f64>() / n,
        missing_reserved_by_first_live_peak: rows
            .iter()
            .filter(|r| r.missed.reserved && r.peak_by_first_live_peak)
            .count(),
        foresight: foresight_summary(rows),
        expandable: expandable_summary(rows, budgets),
        device_ms_full_size: full_ms(|r| r.vrampool.device_ms),
        pytorch_device_ms_full_size: full_ms(|r| r.pytorch.device_ms),
        bytes_moved_full_size: rows
            .iter()
            .filter(|r| r.scale == 1)
            .map(|r| r.vrampool.bytes_moved)
            .sum(),
        bytes_moved: rows.iter().map(|r| r.vrampool.bytes_moved).sum(),
    }
}

/// The counts of PyTorch with expandable segments over the rows.
fn expandable_summary(rows: &[Row], budgets: bool) -> ExpandableSummary {
    let count = |f: fn(&Missed) -> bool| rows.iter().filter(|r| f(&r.expandable.missed)).count();
    ExpandableSummary {
        missing_reserved: count(|m| m.reserved),
        missing_budget: budgets.then(|| count(|m| m.budget == Some(true))),
        missing_allocations: count(|m| m.allocations),
        missing_bytes: count(|m| m.bytes),
        mean_ratio: rows.iter().map(|r| r.expandable.ratio).sum::<f64>() / rows.len().max(1) as f64,
        vrampool_at_or_below: rows
            .iter()
            .filter(|r| r.expandable.vrampool_at_or_below)
            .count(),
    }
}

/// The counts of the rows' static plans, if they were made.
fn foresight_summary(rows: &[Row]) -> Option<ForesightSummary> {
    let plans: Vec<&ForesightRow> = rows.iter().filter_map(|r| r.foresight.as_ref()).collect();
    if plans.is_empty() {
        return None;
    }
    let count = |f: fn(&Missed) -> bool| plans.iter().filter(|p| f(&p.missed)).count();
    Some(ForesightSummary {
        missing_reserved: count(|m| m.reserved),
        missing_allocations: count(|m| m.allocations),
        missing_bytes: count(|m| m.bytes),
        mean_ratio: plans.iter().map(|p| p.ratio).sum::<f64>() / plans.len() as f64,
        most_segments: plans.iter().map(|p| p.segments).max().unwrap_or(0),
    })
}

fn print_table(
    rows: &[Row],
    s: &Summary,
    (resize, jitter): (&[f64], &[u64]),
    budgets: bool,
    all: bool,
) -> Result<()> {
    let budget = |f: &RowFigures| match (budgets, f.min_budget) {
        (false, _) => String::new(),
        (true, Some(m)) => format!(" {m:>6.3}"),
        (true, None) => "   > 4x".to_string(),
    };
    let plan = |r: &Row| match &r.foresight {
        None => String::new(),
        Some(f) => format!(
            "  {:>6.3} {:>4} {:<3}",
            f.ratio,
            f.segments,
            if f.missed.any() {
                f.missed_letters.as_str()
            } else {
                "—"
            }
        ),
    };
    let foresight = rows.iter().any(|r| r.foresight.is_some());
    outln!(
        "{:<18} {:>5} {:>6} {:>6} {:>10} {:>21} {:>11} {:>21} {:>19}{}{} missed",
        "trace",
        "scale",
        "resize",
        "jitter",
        "peak live",
        "ratio / pytorch / vm",
        "allocs / pt",
        "created / pt",
        "device ms / pt",
        if budgets {
            "  min budget / pt / vm"
        } else {
            ""
        },
        if foresight {
            "  plan: ratio segs missed"
        } else {
            ""
        }
    );
    for r in rows.iter().filter(|r| all || r.missed.any()) {
        let (v, p) = (&r.vrampool, &r.pytorch);
        outln!(
            "{:<18} {:>5} {:>6} {:>6} {:>10} {:>7.3} {:>7.3} {:>5.3} {:>5} {:>5} {:>10} {:>10} {:>9.2} {:>9.2}{}{}{}{} {}",
            r.trace,
            format!("÷{}", r.scale),
            format!("×{}", r.resize),
            if r.jitter == 0 {
                "—".to_string()
            } else {
                format!("~{}", r.jitter)
            },
            fmt_bytes(v.row.peak_live),
            v.ratio,
            p.ratio,
            r.expandable.ratio,
            v.row.device_allocs,
            p.row.device_allocs,
            fmt_bytes(v.row.bytes_created),
            fmt_bytes(p.row.bytes_created),
            v.device_ms,
            p.device_ms,
            budget(&v.row),
            budget(&p.row),
            budget(&r.expandable.row),
            plan(r),
            if r.missed.any() {
                r.missed_letters.as_str()
            } else {
                "—"
            }
        );
    }
    let m = s
        .missing_budget
        .map_or(String::new(), |m| format!(", M {m}"));
    let mut by = Vec::new();
    if resize.len() > 1 {
        let parts: Vec<String> = resize
            .iter()
            .zip(&s.missing_reserved_by_resize)
            .map(|(f, n)| format!("×{f} {n}"))
            .collect();
        by.push(format!("R by resize: {}", parts.join(", ")));
    }
    if jitter.len() > 1 {
        let parts: Vec<String> = jitter
            .iter()
            .zip(&s.missing_reserved_by_jitter)
            .map(|(j, n)| format!("~{j} {n}"))
            .collect();
        by.push(format!("R by jitter: {}", parts.join(", ")));
    }
    let by_resize = if by.is_empty() {
        String::new()
    } else {
        format!(" ({})", by.join("; "))
    };
    outln!(
        "{} rows miss R {}{m}, A {}, B {}{by_resize}; mean ratio {:.4} (pytorch {:.4}); \
         estimated H200 device time at full size {:.0} ms (pytorch {:.0} ms)",
        s.rows,
        s.missing_reserved,
        s.missing_allocations,
        s.missing_bytes,
        s.mean_ratio,
        s.pytorch_mean_ratio,
        s.device_ms_full_size,
        s.pytorch_device_ms_full_size
    );
    outln!(
        "of the {} rows missing R, {} peak no later than the first time live bytes reach \
         their peak",
        s.missing_reserved,
        s.missing_reserved_by_first_live_peak
    );
    let x = &s.expandable;
    outln!(
        "PyTorch with expandable_segments (vm: virtual memory, simulated) misses R {}{}, A {}, B {}; \
         mean ratio {:.4}; vrampool reserves no more than it on {} of {} rows",
        x.missing_reserved,
        x.missing_budget
            .map_or(String::new(), |m| format!(", M {m}")),
        x.missing_allocations,
        x.missing_bytes,
        x.mean_ratio,
        x.vrampool_at_or_below,
        s.rows
    );
    if s.bytes_moved > 0 {
        outln!(
            "relocatable: the vrampool policy moved {} of live blocks over the {} rows, {} at \
             full size",
            fmt_bytes(s.bytes_moved),
            s.rows,
            fmt_bytes(s.bytes_moved_full_size)
        );
    }
    if let Some(f) = &s.foresight {
        outln!(
            "planned with foresight: R {}, A {}, B {}; mean ratio {:.4}; at most {} segments",
            f.missing_reserved,
            f.missing_allocations,
            f.missing_bytes,
            f.mean_ratio,
            f.most_segments
        );
    }
    Ok(())
}
