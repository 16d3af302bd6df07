//! `replay`: RMM CSV traces through any policy, on a GPU or the simulated
//! device — its arguments, the runs (with `--min-budget` bisection and the
//! driver's view of memory on a GPU), and the table or JSON it prints. The
//! replay loop itself is in drive.rs, over core's `Replayer`.

mod drive;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde_json::json;
use vrampool::trace::{DeviceCost, Foresight};
use vrampool::{Backend, Config, LimitKind, SimulatedDevice, Trace, WgpuBackend, fmt_bytes};

use crate::policy::{AccessMode, PolicyKind, Requests};
use crate::settings::configured;
use crate::target::{GRANULE, Target, check_max_buffer_size, nvidia_smi_used};
use crate::{Common, bar, timeline};

use drive::Job;
pub use drive::{Moment, Outcome, Probe, Sample};

#[derive(Args)]
pub struct ReplayArgs {
    /// Trace files, e.g. data/traces/*.csv.gz
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Hard limit on reserved memory: bytes (`8000000000`) or a multiple of the
    /// trace's peak live (`1.05x`). Default: no limit. The expandable policy
    /// takes it as PyTorch does: what it maps may pass it by less than a
    /// page (2 or 20 MiB).
    #[arg(long)]
    budget: Option<String>,
    /// Take the limit (--budget, and the budgets --min-budget tries) as a
    /// ceiling for safety (vrampool::LimitKind::Ceiling: placed as with no
    /// limit until a request would pass it) rather than a budget to fill.
    /// The vrampool policy only.
    #[arg(long)]
    ceiling: bool,
    /// The allocation policy [default: vrampool].
    #[arg(long, value_enum, conflicts_with = "compare")]
    policy: Option<PolicyKind>,
    /// Run every policy on each trace and print one table (not with --policy).
    #[arg(long)]
    compare: bool,
    /// Also find the smallest budget (× peak live, in 0.001 steps) that replays with no OOM.
    #[arg(long)]
    min_budget: bool,
    /// Divide every size by N, so a trace larger than the device fits.
    #[arg(long, default_value_t = 1, value_name = "N")]
    scale: u64,
    /// How the trace's tensors are bound, which decides where the vrampool and
    /// pytorch policies place them: every tensor `read_write` (a tensor
    /// library), half of them read-only (`split`: two placement classes), or
    /// undeclared (`any`: a buffer each).
    #[arg(long, value_enum, default_value_t = AccessMode::ReadWrite)]
    access: AccessMode,
    /// Frees take effect every N events only, as when the app submits every N
    /// operations (a block dropped before a submit waits for it): what deferred
    /// reuse costs; with --relocatable, each tensor is also pinned from its
    /// allocation until the next submit (`Pool::alloc_movable`, its place read
    /// for the command writing it). 0 (default): at once, as in PyTorch.
    /// Engine policies only.
    #[arg(long, default_value_t = 0, value_name = "N")]
    submit_every: u64,
    /// Simulated device memory in bytes (default: an H200's 141 GiB). With
    /// --simulate only: a GPU has its own.
    #[arg(long)]
    capacity: Option<u64>,
    /// Simulated max_buffer_size in bytes (default: the H200's 4 GiB). With
    /// --simulate only: a GPU has its own.
    #[arg(long)]
    max_buffer_size: Option<u64>,
    /// On a GPU: read nvidia-smi's used memory before, while memory grows, and
    /// after empty_cache.
    #[arg(long)]
    nvidia_smi: bool,
    /// Change a field of the vrampool policy's configuration (vrampool::Config)
    /// from the default, e.g. `--set headroom=0.1` or
    /// `--set without_limit.medium_segment_fraction=0.015625`; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// The vrampool policy follows each trace's own static plan
    /// (`vrampool::trace::Foresight` at this scale, with the device's
    /// max_buffer_size; `Engine::follow`): the workload run again exactly as
    /// it was recorded, each tensor placed where a pool that knew every
    /// lifetime would place it. The plan's segments are made inside the
    /// timed replay and counted with it. Not with --budget or --min-budget.
    #[arg(long)]
    follow: bool,
    /// Every tensor relocatable (`Request::relocatable`): a tensor runtime
    /// that reads each tensor's place anew for every pass and submits what
    /// it recorded before the pool asks for more memory, so the vrampool
    /// policy may move live blocks to serve a request from memory it holds
    /// (`Config::relocate`); on a GPU the copies are `copy_buffer_to_buffer`
    /// on the queue, inside the timed replay (`WgpuBackend::with_moves`).
    /// The JSON report counts the bytes moved. The vrampool policy only; not
    /// with --follow, nor under --budget unless --ceiling (a budget places
    /// every block exactly, and nothing moves; --min-budget's tries too).
    #[arg(long)]
    relocatable: bool,
}

enum Budget {
    Bytes(u64),
    Times(f64),
}

fn parse_budget(s: &str) -> Result<Budget> {
    if let Some(x) = s.strip_suffix('x') {
        let Some(v) = x.parse::<f64>().ok().filter(|v| v.is_finite()) else {
            usage!("--budget {s}: expected a multiple of peak live like 1.05x");
        };
        if v < 1.0 {
            usage!(
                "--budget {s} is below the trace's peak live (1x): no allocator can replay it; use 1x or more"
            );
        }
        Ok(Budget::Times(v))
    } else {
        match s.parse() {
            Ok(bytes) => Ok(Budget::Bytes(bytes)),
            Err(_) => usage!(
                "--budget {s}: expected bytes (e.g. 8000000000) or a multiple of peak live (e.g. 1.03x)"
            ),
        }
    }
}

#[derive(Default, serde::Serialize)]
struct DriverView {
    /// nvidia-smi used bytes before the run, highest seen, after the replay, after empty_cache.
    nvidia_smi: Option<[Option<u64>; 4]>,
    /// (pool reserved, wgpu allocated, wgpu reserved) at the timeline point
    /// where the pool reserved most: about one in a thousand events is a
    /// point, so the exact peak (the table's) may fall between two.
    allocator_at_peak: Option<(u64, u64, u64)>,
    /// The same after empty_cache.
    allocator_after_empty_cache: Option<(u64, u64, u64)>,
}

/// The exit code of a replay that ran out of memory (under a budget, or on a
/// device too small with none): not 2, which is clap's for a usage error.
pub const OUT_OF_MEMORY: u8 = 3;

/// Runs `vrampool replay`.
pub fn command(a: &ReplayArgs, c: &Common) -> Result<ExitCode> {
    let policy = a.policy.unwrap_or(PolicyKind::Vrampool);
    if a.scale == 0 {
        usage!("--scale 0: the divisor must be at least 1");
    }
    if a.ceiling && a.budget.is_none() && !a.min_budget {
        usage!(
            "--ceiling takes the limit as a ceiling, and there is none: give --budget (or --min-budget)"
        );
    }
    if a.ceiling && !a.compare && policy != PolicyKind::Vrampool {
        usage!(
            "--ceiling applies to the vrampool policy only; {} has no such setting",
            policy.name()
        );
    }
    if !a.set.is_empty() && !a.compare && policy != PolicyKind::Vrampool {
        usage!(
            "--set changes the vrampool policy's configuration; {} has none",
            policy.name()
        );
    }
    // (option, given, used by the policy, which policies use it)
    let options = [
        (
            "--submit-every",
            a.submit_every > 0,
            policy.is_engine(),
            "the engine policies (vrampool, pytorch)",
        ),
        (
            "--access",
            a.access != AccessMode::ReadWrite,
            policy.is_engine(),
            "the engine policies (vrampool, pytorch)",
        ),
        (
            "--relocatable",
            a.relocatable,
            policy == PolicyKind::Vrampool,
            "the vrampool policy (the pytorch preset never moves a block)",
        ),
    ];
    if !a.compare
        && let Some((flag, _, _, who)) = options.iter().find(|o| o.1 && !o.2)
    {
        usage!(
            "{flag} applies to {who}; {} ignores it: drop it, or use --compare",
            policy.name()
        );
    }
    if a.relocatable && !a.ceiling && a.budget.is_some() {
        usage!(
            "--relocatable moves blocks only with no limit or under a --ceiling: under a budget \
             the engine places every block exactly and moves none; drop --relocatable, or add \
             --ceiling"
        );
    }
    if a.nvidia_smi && c.simulate {
        usage!("--nvidia-smi reads a GPU's memory, and --simulate runs on none: drop one");
    }
    if a.follow
        && (a.access != AccessMode::ReadWrite
            || a.submit_every > 0
            || (!a.compare && policy != PolicyKind::Vrampool))
    {
        usage!(
            "--follow is the vrampool policy following the trace's own plan, every tensor \
             read_write and freed at once as recorded: drop --access, --submit-every and \
             --policy (or use --compare)"
        );
    }
    if a.follow && a.relocatable {
        usage!(
            "--follow places each tensor where the plan says, and never moves it: drop --relocatable"
        );
    }
    if a.follow && (a.budget.is_some() || a.min_budget) {
        usage!(
            "--follow replays the trace's own plan with no limit: the plan is its budget; drop \
             --budget and --min-budget"
        );
    }
    if !c.simulate && !a.compare && !policy.runs_on_a_gpu() {
        usage!(
            "--policy {} simulates PyTorch's expandable_segments, which grow their memory in \
             place through CUDA's virtual memory; wgpu has none: add --simulate",
            policy.name()
        );
    }
    if !c.simulate && (a.capacity.is_some() || a.max_buffer_size.is_some()) {
        usage!(
            "--capacity and --max-buffer-size size the simulated device, and a GPU has its own: \
             add --simulate, or drop them"
        );
    }
    let budget = a.budget.as_deref().map(parse_budget).transpose()?;
    let limit_kind = if a.ceiling {
        LimitKind::Ceiling
    } else {
        LimitKind::Budget
    };
    // Checked before a trace is read or a device opened.
    let config = configured(
        Config {
            limit_kind,
            ..Config::default()
        },
        &a.set,
    )?;
    let (capacity, max_buffer_size) = (
        a.capacity.unwrap_or(141 << 30),
        a.max_buffer_size.unwrap_or(4 << 30),
    );
    check_max_buffer_size(max_buffer_size)?;
    let mut traces = Vec::new();
    for path in &a.traces {
        let t = Trace::open(path)?;
        traces.push(if a.scale > 1 { t.scaled(a.scale) } else { t });
    }
    unique_names(&mut traces);
    for t in traces.iter().filter(|t| t.skipped_failures > 0) {
        eprintln!(
            "note: {}: {} `allocate failure` rows skipped: allocations the recorded run was \
             refused, which no replay asks for",
            t.name, t.skipped_failures
        );
    }
    let target = Target::open(c, capacity, max_buffer_size)?;
    let max_buffer = target.max_buffer();
    // The vrampool policy's segments (and a plan's, with --follow) are at
    // most this: `--set max_segment_size` may lower it below the device's.
    let max_segment = config.largest_segment(max_buffer);
    let vrampool_runs = a.compare || policy == PolicyKind::Vrampool;
    for t in &traces {
        // As the policies round it (to GRANULE at most), and a scale that
        // fits counted from the file's sizes: `t` is scaled by --scale already.
        let rounded = t
            .largest
            .checked_next_multiple_of(GRANULE)
            .unwrap_or(u64::MAX);
        let room = |max: u64| (max / GRANULE * GRANULE).max(1);
        if rounded > max_buffer {
            usage!(
                "{}: one allocation is {} ({} as the policies round it) but {} allows at most {} \
                 per buffer (max_buffer_size); pass --scale {} to divide every size",
                t.name,
                fmt_bytes(t.largest),
                fmt_bytes(rounded),
                target.name(),
                fmt_bytes(max_buffer),
                a.scale
                    .max(1)
                    .saturating_mul(rounded.div_ceil(room(max_buffer)))
            );
        }
        if vrampool_runs && rounded > max_segment {
            usage!(
                "{}: one allocation is {} ({} rounded) but --set max_segment_size={} lets the \
                 vrampool policy make no segment that large: raise it, or pass --scale {} to \
                 divide every size",
                t.name,
                fmt_bytes(t.largest),
                fmt_bytes(rounded),
                max_segment,
                a.scale
                    .max(1)
                    .saturating_mul(rounded.div_ceil(room(max_segment)))
            );
        }
        if let Some(Budget::Bytes(b)) = budget
            && b < t.peak_live
        {
            usage!(
                "--budget {b} is below {}'s peak live of {} bytes ({}): no allocator can replay it; \
                 give at least that, or a multiple like 1.05x",
                t.name,
                t.peak_live,
                fmt_bytes(t.peak_live)
            );
        }
    }
    let on_gpu = matches!(target, Target::Gpu { .. });
    // On a GPU, --compare runs the policies wgpu can run.
    let policies: Vec<PolicyKind> = if a.compare {
        PolicyKind::ALL
            .into_iter()
            .filter(|k| !on_gpu || k.runs_on_a_gpu())
            .collect()
    } else {
        vec![policy]
    };
    let runs = (traces.len() * policies.len()) as u64;
    let events: u64 = traces.iter().map(|t| t.events.len() as u64).sum();
    let pb = bar(events * policies.len() as u64, c);
    if !c.json {
        // Not `println`, which a bar drawn nowhere (stderr not a terminal,
        // as in CI or a log file) drops.
        pb.suspend(|| eprintln!("on {}", target.name()));
    }
    let requests = Requests {
        usage: vrampool::READ_WRITE_USAGE.bits(),
        access: a.access,
        submit_every: a.submit_every,
        relocatable: a.relocatable,
    };
    let mut rows = Vec::new();
    let mut any_oom = false;
    let mut reader_gone = false;
    for t in &traces {
        let limit = budget.as_ref().map(|b| match b {
            Budget::Bytes(n) => *n,
            Budget::Times(x) => (t.peak_live as f64 * x).ceil() as u64,
        });
        let plan = if a.follow {
            Some(
                Foresight::plan(t, config.alignment, max_segment)
                    .with_context(|| format!("planning {}", t.name))?,
            )
        } else {
            None
        };
        for &kind in &policies {
            pb.set_message(format!("{} {}", t.name, kind.name()));
            let job = Job {
                kind,
                trace: t,
                limit,
                config: &config,
                requests,
                plan: plan.as_ref(),
            };
            let mut view = DriverView::default();
            let (outcome, min) = match &target {
                Target::Simulated {
                    capacity,
                    max_buffer,
                } => {
                    let mut make = || {
                        Ok(SimulatedDevice::with_max_buffer_size(
                            *capacity,
                            *max_buffer,
                        ))
                    };
                    one_run(job, &mut make, a.min_budget, &pb, &mut |_| {})?
                }
                Target::Gpu {
                    device,
                    queue,
                    bus,
                    index,
                    ..
                } => {
                    let smi = || {
                        if a.nvidia_smi {
                            nvidia_smi_used(bus, *index)
                        } else {
                            None
                        }
                    };
                    let before = smi();
                    let (mut high, mut last) = (before, 0u64);
                    let (mut held, mut emptied) = (None, None);
                    let (mut at_peak, mut after_empty) = (None::<(u64, u64, u64)>, None);
                    let mut probe = |m: Moment<'_>| match m {
                        Moment::Sample(s) => {
                            let r = s.figures.reserved;
                            if at_peak.is_none_or(|p| r > p.0)
                                && let Some(rep) = device.generate_allocator_report()
                            {
                                at_peak =
                                    Some((r, rep.total_allocated_bytes, rep.total_reserved_bytes));
                            }
                            // nvidia-smi takes tens of ms: ask when reserved has grown 2%.
                            if r as f64 > last as f64 * 1.02 {
                                last = r;
                                high = high.max(smi());
                            }
                        }
                        Moment::CacheHeld => held = smi(),
                        Moment::Emptied { reserved } => {
                            let _ = device.poll(wgpu::PollType::wait_indefinitely());
                            emptied = smi();
                            after_empty = device.generate_allocator_report().map(|r| {
                                (reserved, r.total_allocated_bytes, r.total_reserved_bytes)
                            });
                        }
                    };
                    let hints = c.hints().wgpu();
                    let mut make = || {
                        // Segments fitted to the blocks of the hints the
                        // device was opened with (Config::fit_device_blocks).
                        let backend = WgpuBackend::new(device, None).with_memory_hints(&hints);
                        Ok(if a.relocatable {
                            backend.with_moves(queue)
                        } else {
                            backend
                        })
                    };
                    let out = one_run(job, &mut make, a.min_budget, &pb, &mut probe)?;
                    view = DriverView {
                        nvidia_smi: a
                            .nvidia_smi
                            .then_some([before, high.max(held), held, emptied]),
                        allocator_at_peak: at_peak,
                        allocator_after_empty_cache: after_empty,
                    };
                    out
                }
            };
            any_oom |= outcome.report.ooms > 0;
            if c.summary && !c.json && !reader_gone {
                let printed = pb.suspend(|| -> Result<()> {
                    outln!("memory_summary of {} under {}:", t.name, kind.name());
                    if outcome.summary.is_empty() {
                        outln!("  ({} keeps no per-pool stats)\n", kind.name());
                    } else {
                        outln!("{}", outcome.summary);
                    }
                    Ok(())
                });
                // A reader gone away (`| head`): the replays go on, for the
                // exit code and the lines on stderr.
                match printed {
                    Err(e) if crate::broken_pipe(&e) => reader_gone = true,
                    printed => printed?,
                }
            }
            if let Some(path) = &c.timeline {
                let file = timeline_path(path, &t.name, kind.name(), runs > 1);
                timeline::write(
                    &file,
                    &format!("{} — {} on {}", t.name, kind.name(), target.name()),
                    &outcome.samples,
                    limit,
                )?;
                pb.suspend(|| eprintln!("wrote {}", file.display()));
            }
            rows.push(Row {
                trace: t.name.clone(),
                skipped_failures: t.skipped_failures,
                policy: kind,
                limit,
                limit_kind,
                outcome,
                min_budget: min,
                driver: view,
            });
        }
    }
    pb.finish_and_clear();
    // A reader gone away (`| head`) still gets the exit code below.
    if !reader_gone {
        match print_replay(&rows, c, a.min_budget, &target, &a.set) {
            Err(e) if crate::broken_pipe(&e) => {}
            printed => printed?,
        }
    }
    // With no limit, an out-of-memory is the device's: the trace did not fit,
    // and every figure above is of the part that did.
    for r in rows
        .iter()
        .filter(|r| r.limit.is_none() && r.outcome.report.ooms > 0)
    {
        let report = &r.outcome.report;
        eprintln!(
            "{} under {}: {} of {} allocations were refused with no limit, on {}: the device is \
             too small for the trace, and its figures are of a partial replay; {}",
            r.trace,
            r.policy.name(),
            report.ooms,
            report.allocs,
            target.name(),
            if c.simulate {
                "give a larger --capacity or --max-buffer-size, or a larger --scale"
            } else {
                "pass a larger --scale to divide every size"
            }
        );
    }
    Ok(if any_oom {
        ExitCode::from(OUT_OF_MEMORY)
    } else {
        ExitCode::SUCCESS
    })
}

/// One line of the table: a trace under a policy.
struct Row {
    trace: String,
    /// The trace's `allocate failure` rows, which no replay asks for.
    skipped_failures: u64,
    policy: PolicyKind,
    limit: Option<u64>,
    limit_kind: LimitKind,
    outcome: Outcome,
    /// The smallest budget (× peak live) and the device allocations it needs.
    min_budget: Option<(f64, u64)>,
    driver: DriverView,
}

/// Runs `job`, then (with `find_min`) bisects its smallest budget.
fn one_run<B: Backend>(
    job: Job<'_>,
    make: &mut dyn FnMut() -> Result<B>,
    find_min: bool,
    pb: &ProgressBar,
    probe: Probe<'_>,
) -> Result<(Outcome, Option<(f64, u64)>)> {
    let out = drive::run_policy(job, make, pb, probe)?;
    let min = if find_min {
        pb.set_message(format!(
            "{} {}: bisecting the smallest budget",
            job.trace.name,
            job.kind.name()
        ));
        drive::min_budget(job, make, &ProgressBar::hidden())?
    } else {
        None
    };
    Ok((out, min))
}

/// Traces of one name (files of one stem in two folders) get `-2`, `-3`, …
/// after it, in the order given: the table's rows and the timeline's files
/// are told apart by it.
fn unique_names(traces: &mut [Trace]) {
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::new();
    for t in traces.iter_mut() {
        let mut name = t.name.clone();
        let mut n = 1;
        while taken.contains(&name) {
            n += 1;
            name = format!("{}-{n}", t.name);
        }
        taken.insert(name.clone());
        t.name = name;
    }
}

fn timeline_path(path: &Path, trace: &str, policy: &str, many: bool) -> PathBuf {
    if !many {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("timeline");
    path.with_file_name(format!("{stem}-{trace}-{policy}.svg"))
}

fn print_replay(
    rows: &[Row],
    c: &Common,
    min: bool,
    target: &Target,
    set: &[String],
) -> Result<()> {
    if c.json {
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "trace": r.trace,
                    "skipped_failures": r.skipped_failures,
                    "policy": r.policy,
                    "device": target.name(),
                    "memory_hints": (!matches!(target, Target::Simulated { .. }))
                        .then(|| c.hints().to_possible_value())
                        .flatten()
                        .map(|v| v.get_name().to_string()),
                    "limit": r.limit,
                    // Only the vrampool policy reads it, for --budget and for
                    // the budgets --min-budget tries.
                    "limit_kind": (r.policy == PolicyKind::Vrampool
                        && (r.limit.is_some() || r.min_budget.is_some()))
                    .then_some(r.limit_kind),
                    // The vrampool policy's --set changes from the default.
                    "set": (r.policy == PolicyKind::Vrampool).then_some(set),
                    "report": r.outcome.report,
                    // The cost model is wgpu's buffer creation; mapping pages is another cost.
                    "estimated_device_ms": r.policy.runs_on_a_gpu()
                        .then(|| DeviceCost::H200_VULKAN.of_replay(&r.outcome.report)),
                    "released_by_empty_cache": r.outcome.released_at_end,
                    "segments_abandoned": r.outcome.segments_abandoned,
                    "min_budget": r.min_budget.map(|m| m.0),
                    "device_allocs_at_min_budget": r.min_budget.map(|m| m.1),
                    "driver": r.driver,
                    // --summary's memory_summary, as text, where it would have printed.
                    "memory_summary": c.summary.then_some(&r.outcome.summary),
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialises")
        );
        return Ok(());
    }
    outln!(
        "{:<14} {:<10} {:>10} {:>10} {:>10} {:>6} {:>9} {:>8} {:>10} {:>9} {:>8} {:>5} {:>8} {:>10} {:>8}",
        "trace",
        "policy",
        "budget",
        "peak live",
        "reserved",
        "ratio",
        "dev alloc",
        "dev free",
        "created",
        "est dev",
        "hit rate",
        "OOMs",
        "ns/op",
        "min budget",
        "at min"
    );
    for row in rows {
        let (trace, kind, limit, m) = (&row.trace, row.policy, row.limit, row.min_budget);
        let r = &row.outcome.report;
        outln!(
            "{:<14} {:<10} {:>10} {:>10} {:>10} {:>6.3} {:>9} {:>8} {:>10} {:>9} {:>7.1}% {:>5} {:>8.0} {:>10} {:>8}",
            trace,
            kind.name(),
            limit.map_or("none".into(), fmt_bytes),
            fmt_bytes(r.peak_live),
            fmt_bytes(r.peak_reserved),
            r.reserved_ratio,
            r.device_allocs,
            r.device_frees,
            fmt_bytes(r.segment_bytes_created),
            if kind.runs_on_a_gpu() {
                format!("{:.1}ms", DeviceCost::H200_VULKAN.of_replay(r))
            } else {
                "-".into()
            },
            100.0 * r.hit_rate(),
            r.ooms,
            r.ns_per_op,
            match m {
                Some((x, _)) => format!("{x:.3}x"),
                None if min => "> 4x".into(),
                None => "-".into(),
            },
            m.map_or("-".into(), |m| m.1.to_string()),
        );
    }
    for row in rows {
        let (trace, kind, o, view) = (&row.trace, row.policy, &row.outcome, &row.driver);
        if let Some((pool, alloc, res)) = view.allocator_at_peak {
            outln!(
                "{trace} {}: where the timeline saw the pool reserve most, {}, wgpu's allocator report: {} allocated in {} of device memory blocks",
                kind.name(),
                fmt_bytes(pool),
                fmt_bytes(alloc),
                fmt_bytes(res)
            );
            let live = o.report.peak_live.max(1) as f64;
            if c.hints() != crate::device::Hints::Pool && res as f64 > pool as f64 * 1.05 {
                outln!(
                    "{trace} {}: the device held {:.3} × peak live where the pool reserved {:.3} ×: wgpu shares its blocks among segments under 256 MiB; --memory-hints pool (vrampool::pool_memory_hints) gives each segment memory of its own",
                    kind.name(),
                    res as f64 / live,
                    pool as f64 / live
                );
            }
        }
        if let Some((_, alloc, res)) = view.allocator_after_empty_cache {
            outln!(
                "{trace} {}: empty_cache gave back {}; wgpu's allocator report after: {} allocated, {} reserved",
                kind.name(),
                fmt_bytes(o.released_at_end),
                fmt_bytes(alloc),
                fmt_bytes(res)
            );
        }
        if let Some([before, high, after, empty]) = view.nvidia_smi {
            let f = |x: Option<u64>| x.map_or("?".into(), fmt_bytes);
            outln!(
                "{trace} {}: nvidia-smi used: before {}, highest seen {}, after the replay with the cache held {}, after empty_cache {}",
                kind.name(),
                f(before),
                f(high),
                f(after),
                f(empty)
            );
        }
    }
    Ok(())
}
