//! `vrampool`: the harness that runs the pool on any GPU, replays real
//! allocation traces under every policy, measures against raw wgpu and trains
//! a small MLP whose tensors all come from the pool.

/// `println!` that returns a failed write as an error instead of panicking:
/// `vrampool … | head` closes stdout early, and that is not a crash.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

mod bench;
mod device;
mod policy;
mod replay;
mod timeline;
mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use vrampool::{Backend, SimulatedDevice, Trace, WgpuBackend, fmt_bytes};

use crate::policy::{AccessMode, PolicyKind, Requests};
use crate::replay::{Moment, Outcome, Probe};
use crate::workload::Dtype;

#[derive(Parser)]
#[command(
    name = "vrampool",
    version,
    about = "A caching GPU memory pool for wgpu: try it on your GPU, replay real allocation traces, measure",
    long_about = "A caching GPU memory pool for wgpu, like PyTorch's CUDA caching allocator: \
freed blocks are cached and reused instead of going back to the driver, and empty_cache() gives \
them back.\n\n\
Start with `vrampool info` to see your GPUs, `vrampool bench` to see what a cache hit saves \
over create_buffer + destroy, and `vrampool replay data/traces/*.csv.gz --compare` to see \
how much memory each policy holds for real PyTorch workloads.",
    after_help = "Sizes are bytes. Every subcommand takes --json for machine-readable output."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// The GPU to run on: its index in `vrampool info`, or part of its name
    /// (e.g. `--adapter h200`). Default: the first adapter.
    #[arg(long, global = true, value_name = "INDEX|NAME")]
    adapter: Option<String>,
    /// Use the simulated device instead of a GPU (figures are the same; no driver needed).
    #[arg(long, global = true, conflicts_with = "adapter")]
    simulate: bool,
    /// After the run, print the pool's memory_summary (PyTorch's torch.cuda.memory_summary).
    #[arg(long, global = true)]
    summary: bool,
    /// Write a chart of live / allocated / reserved / cached and the budget over the run.
    #[arg(long, global = true, value_name = "FILE.svg")]
    timeline: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter with the limits that matter to memory.
    Info,
    /// Replay RMM CSV allocation logs (plain or gzip) through a policy, on a GPU or
    /// the simulated device, and print peak live, peak reserved, their ratio,
    /// device allocations and frees, cache hit rate, OOMs and time per operation.
    Replay(ReplayArgs),
    /// Pool hit against raw create_buffer + destroy, 256 B to 256 MiB, and the
    /// engine's own cost per operation.
    Bench(BenchArgs),
    /// Train a small MLP with compute shaders, every tensor from the pool.
    ///
    /// A two-layer MLP (64 inputs → hidden → 16 outputs, ReLU, squared error)
    /// learns a fixed random function from generated data with plain SGD, in
    /// shaders/mlp.wgsl. Like a framework, each step allocates its activations
    /// and gradients from the pool and drops them at the end, so from the second
    /// step on they are cache hits. Weights can be stored as f16 or int8 and are
    /// decoded in the shader; the run reports the memory saved and the loss,
    /// which must fall. With --find-batch and --budget it first finds, by a dry
    /// run on the simulated device, the largest batch whose steps fit the budget,
    /// then trains with it on the GPU under that budget.
    Workload(WorkloadArgs),
}

#[derive(Args)]
struct ReplayArgs {
    /// Trace files, e.g. data/traces/*.csv.gz
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Hard limit on reserved memory: bytes (`8000000000`) or a multiple of the
    /// trace's peak live (`1.05x`). Default: no limit.
    #[arg(long)]
    budget: Option<String>,
    /// The allocation policy.
    #[arg(long, value_enum, default_value_t = PolicyKind::Vrampool)]
    policy: PolicyKind,
    /// Run every policy on each trace and print one table.
    #[arg(long)]
    compare: bool,
    /// Also find the smallest budget (× peak live, ±0.001) that replays with no OOM.
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
    /// reuse costs. 0 (default): at once, as in PyTorch. Engine policies only.
    #[arg(long, default_value_t = 0, value_name = "N")]
    submit_every: u64,
    /// Simulated device memory in bytes (default: an H200's 141 GiB).
    #[arg(long, default_value_t = 141 << 30)]
    capacity: u64,
    /// Simulated max_buffer_size in bytes (default: the H200's 4 GiB).
    #[arg(long, default_value_t = 4 << 30)]
    max_buffer_size: u64,
    /// On a GPU: read nvidia-smi's used memory before, while memory grows, and
    /// after empty_cache.
    #[arg(long)]
    nvidia_smi: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Sizes in bytes, comma separated (default: 256 B to 256 MiB, ×16 apart).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Time spent measuring each figure, in milliseconds.
    #[arg(long, default_value_t = 300)]
    time_ms: u64,
}

#[derive(Args)]
struct WorkloadArgs {
    /// Samples per step.
    #[arg(long, default_value_t = 256)]
    batch: u32,
    /// Training steps.
    #[arg(long, default_value_t = 100)]
    steps: u32,
    /// How the weights are stored (decoded in the shader).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Hidden layer width.
    #[arg(long, default_value_t = 1024)]
    hidden: u32,
    /// Hard limit on the pool's reserved bytes (bytes). Needed by --find-batch.
    #[arg(long)]
    budget: Option<u64>,
    /// Find the largest batch whose step fits --budget: a dry run on the
    /// simulated device, then confirmed by training on the GPU.
    #[arg(long, requires = "budget")]
    find_batch: bool,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn bar(len: u64, common: &Common) -> ProgressBar {
    if common.json {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

fn run(cli: Cli) -> Result<ExitCode> {
    let c = &cli.common;
    match &cli.command {
        Command::Info => info(c),
        Command::Replay(a) => replay_cmd(a, c),
        Command::Bench(a) => bench_cmd(a, c),
        Command::Workload(a) => workload::command(a, c),
    }
}

fn info(c: &Common) -> Result<ExitCode> {
    if c.simulate {
        bail!("info lists real adapters; --simulate has none to list");
    }
    let all = device::info()?;
    if c.json {
        outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    for a in all {
        outln!("[{}] {} — {} {}", a.index, a.name, a.backend, a.device_type);
        outln!(
            "    driver                     {} {}",
            a.driver,
            a.driver_info
        );
        outln!(
            "    max_buffer_size            {} ({})",
            a.max_buffer_size,
            fmt_bytes(a.max_buffer_size)
        );
        outln!(
            "    max storage binding        {} ({})",
            a.max_storage_buffer_binding_size,
            fmt_bytes(a.max_storage_buffer_binding_size)
        );
        outln!(
            "    max uniform binding        {} ({})",
            a.max_uniform_buffer_binding_size,
            fmt_bytes(a.max_uniform_buffer_binding_size)
        );
        outln!(
            "    offset alignment           storage {} B, uniform {} B",
            a.min_storage_buffer_offset_alignment,
            a.min_uniform_buffer_offset_alignment
        );
        match a.allocator_report {
            Some((alloc, res, blocks)) => outln!(
                "    allocator report           {} allocated, {} reserved in {blocks} memory blocks (one 1 MiB probe buffer live)",
                fmt_bytes(alloc),
                fmt_bytes(res)
            ),
            None => outln!("    allocator report           not given by this backend"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a command runs.
enum Target {
    Simulated {
        capacity: u64,
        max_buffer: u64,
    },
    Gpu {
        device: wgpu::Device,
        queue: wgpu::Queue,
        name: String,
        /// PCI bus id, when the driver gives one (to find it in nvidia-smi).
        bus: String,
        /// Index among the adapters.
        index: usize,
    },
}

impl Target {
    fn open(c: &Common, capacity: u64, max_buffer: u64) -> Result<Target> {
        if c.simulate {
            return Ok(Target::Simulated {
                capacity,
                max_buffer,
            });
        }
        let (index, adapter) = device::pick(c.adapter.as_deref())?;
        let (device, queue) = device::open(&adapter)?;
        let info = adapter.get_info();
        Ok(Target::Gpu {
            device,
            queue,
            name: if info.device_pci_bus_id.is_empty() {
                format!("{} ({:?})", info.name, info.backend)
            } else {
                format!(
                    "{} ({:?}, PCI {})",
                    info.name, info.backend, info.device_pci_bus_id
                )
            },
            bus: info.device_pci_bus_id,
            index,
        })
    }

    fn name(&self) -> String {
        match self {
            Target::Simulated { capacity, .. } => {
                format!("simulated device ({})", fmt_bytes(*capacity))
            }
            Target::Gpu { name, .. } => name.clone(),
        }
    }

    fn max_buffer(&self) -> u64 {
        match self {
            Target::Simulated { max_buffer, .. } => *max_buffer,
            Target::Gpu { device, .. } => device.limits().max_buffer_size,
        }
    }
}

enum Budget {
    Bytes(u64),
    Times(f64),
}

fn parse_budget(s: &str) -> Result<Budget> {
    if let Some(x) = s.strip_suffix('x') {
        let v: f64 = x
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .with_context(|| {
                format!("--budget {s}: expected a multiple of peak live like 1.05x")
            })?;
        if v < 1.0 {
            bail!(
                "--budget {s} is below the trace's peak live (1x): no allocator can replay it; use 1x or more"
            );
        }
        Ok(Budget::Times(v))
    } else {
        s.parse().map(Budget::Bytes).map_err(|_| {
            anyhow::anyhow!(
                "--budget {s}: expected bytes (e.g. 8000000000) or a multiple of peak live (e.g. 1.03x)"
            )
        })
    }
}

/// Used memory in bytes of the GPU at PCI bus `bus`, as nvidia-smi reports it.
/// NVIDIA's Vulkan driver gives wgpu no bus id; then the adapter's `index` is
/// used, since Vulkan lists NVIDIA GPUs in nvidia-smi's order (checked on two
/// H200s: `--adapter 1` filled GPU 1).
fn nvidia_smi_used(bus: &str, index: usize) -> Option<u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=pci.bus_id,memory.used",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<(String, &str)> = text
        .lines()
        .filter_map(|l| l.split_once(','))
        .map(|(b, m)| (b.trim().to_lowercase(), m.trim()))
        .collect();
    // nvidia-smi writes 00000000:1B:00.0, Vulkan 0000:1b:00.0: compare bus:device.function.
    let tail = |b: &str| b.rsplit(':').take(2).collect::<Vec<_>>().join(":");
    let want = tail(&bus.to_lowercase());
    let row = rows
        .iter()
        .find(|(b, _)| !want.is_empty() && tail(b) == want)
        .or(rows.get(index))?;
    let mib: u64 = row.1.parse().ok()?;
    Some(mib << 20)
}

#[derive(Default, serde::Serialize)]
struct DriverView {
    /// nvidia-smi used bytes before the run, highest seen, after the replay, after empty_cache.
    nvidia_smi: Option<[Option<u64>; 4]>,
    /// (pool reserved, wgpu allocated, wgpu reserved) where the pool held most.
    allocator_at_peak: Option<(u64, u64, u64)>,
    /// The same after empty_cache.
    allocator_after_empty_cache: Option<(u64, u64, u64)>,
}

fn replay_cmd(a: &ReplayArgs, c: &Common) -> Result<ExitCode> {
    if a.scale == 0 {
        bail!("--scale 0: the divisor must be at least 1");
    }
    let budget = a.budget.as_deref().map(parse_budget).transpose()?;
    let mut traces = Vec::new();
    for path in &a.traces {
        let t = Trace::open(path)?;
        traces.push(if a.scale > 1 { t.scaled(a.scale) } else { t });
    }
    let target = Target::open(c, a.capacity, a.max_buffer_size)?;
    let max_buffer = target.max_buffer();
    for t in &traces {
        if t.largest > max_buffer {
            bail!(
                "{}: one allocation is {} but {} allows at most {} per buffer (max_buffer_size); \
                 pass --scale {} to divide every size",
                t.name,
                fmt_bytes(t.largest),
                target.name(),
                fmt_bytes(max_buffer),
                t.largest.div_ceil(max_buffer)
            );
        }
        if let Some(Budget::Bytes(b)) = budget
            && b < t.peak_live
        {
            bail!(
                "--budget {b} is below {}'s peak live of {} bytes ({}): no allocator can replay it; \
                 give at least that, or a multiple like 1.05x",
                t.name,
                t.peak_live,
                fmt_bytes(t.peak_live)
            );
        }
    }
    let policies: Vec<PolicyKind> = if a.compare {
        PolicyKind::ALL.to_vec()
    } else {
        vec![a.policy]
    };
    let runs = (traces.len() * policies.len()) as u64;
    let events: u64 = traces.iter().map(|t| t.events.len() as u64).sum();
    let pb = bar(events * policies.len() as u64, c);
    if !c.json {
        pb.println(format!("on {}", target.name()));
    }
    let requests = Requests {
        usage: vrampool::READ_WRITE_USAGE.bits(),
        access: a.access,
        submit_every: a.submit_every,
    };
    let mut rows = Vec::new();
    let mut any_oom = false;
    for t in &traces {
        let limit = budget.as_ref().map(|b| match b {
            Budget::Bytes(n) => *n,
            Budget::Times(x) => (t.peak_live as f64 * x).ceil() as u64,
        });
        for &kind in &policies {
            pb.set_message(format!("{} {}", t.name, kind.name()));
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
                    one_run(
                        kind,
                        &mut make,
                        t,
                        limit,
                        requests,
                        a.min_budget,
                        &pb,
                        &mut |_| {},
                    )?
                }
                Target::Gpu {
                    device, bus, index, ..
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
                        Moment::Emptied => {
                            let _ = device.poll(wgpu::PollType::wait_indefinitely());
                            emptied = smi();
                            after_empty = device
                                .generate_allocator_report()
                                .map(|r| (0, r.total_allocated_bytes, r.total_reserved_bytes));
                        }
                    };
                    let mut make = || Ok(WgpuBackend::new(device, None));
                    let out = one_run(
                        kind,
                        &mut make,
                        t,
                        limit,
                        requests,
                        a.min_budget,
                        &pb,
                        &mut probe,
                    )?;
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
            if c.summary && !c.json {
                pb.suspend(|| -> Result<()> {
                    outln!("memory_summary of {} under {}:", t.name, kind.name());
                    if outcome.summary.is_empty() {
                        outln!("  ({} keeps no per-pool stats)\n", kind.name());
                    } else {
                        outln!("{}", outcome.summary);
                    }
                    Ok(())
                })?;
            }
            if let Some(path) = &c.timeline {
                let file = timeline_path(path, &t.name, kind.name(), runs > 1);
                timeline::write(
                    &file,
                    &format!("{} — {} on {}", t.name, kind.name(), target.name()),
                    &outcome.samples,
                    limit,
                )?;
                pb.println(format!("wrote {}", file.display()));
            }
            rows.push((t.name.clone(), kind, limit, outcome, min, view));
        }
    }
    pb.finish_and_clear();
    print_replay(&rows, c, a.min_budget, &target)?;
    Ok(if any_oom && budget.is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

type Row = (
    String,
    PolicyKind,
    Option<u64>,
    Outcome,
    Option<(f64, u64)>,
    DriverView,
);

#[allow(clippy::too_many_arguments)]
fn one_run<B: Backend>(
    kind: PolicyKind,
    make: &mut dyn FnMut() -> Result<B>,
    t: &Trace,
    limit: Option<u64>,
    requests: Requests,
    find_min: bool,
    pb: &ProgressBar,
    probe: Probe<'_>,
) -> Result<(Outcome, Option<(f64, u64)>)> {
    let out = replay::run_policy(kind, make, t, limit, requests, pb, probe)?;
    let min = if find_min {
        pb.set_message(format!(
            "{} {}: bisecting the smallest budget",
            t.name,
            kind.name()
        ));
        replay::min_budget(kind, make, t, requests, &ProgressBar::hidden())?
    } else {
        None
    };
    Ok((out, min))
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

fn print_replay(rows: &[Row], c: &Common, min: bool, target: &Target) -> Result<()> {
    if c.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(trace, kind, limit, o, m, view)| {
                json!({
                    "trace": trace,
                    "policy": kind,
                    "device": target.name(),
                    "limit": limit,
                    "report": o.report,
                    "released_by_empty_cache": o.released_at_end,
                    "min_budget": m.map(|m| m.0),
                    "device_allocs_at_min_budget": m.map(|m| m.1),
                    "driver": view,
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
        "{:<14} {:<10} {:>10} {:>10} {:>10} {:>6} {:>9} {:>8} {:>8} {:>5} {:>8} {:>10} {:>8}",
        "trace",
        "policy",
        "budget",
        "peak live",
        "reserved",
        "ratio",
        "dev alloc",
        "dev free",
        "hit rate",
        "OOMs",
        "ns/op",
        "min budget",
        "at min"
    );
    for (trace, kind, limit, o, m, _) in rows {
        let r = &o.report;
        outln!(
            "{:<14} {:<10} {:>10} {:>10} {:>10} {:>6.3} {:>9} {:>8} {:>7.1}% {:>5} {:>8.0} {:>10} {:>8}",
            trace,
            kind.name(),
            limit.map_or("none".into(), fmt_bytes),
            fmt_bytes(r.peak_live),
            fmt_bytes(r.peak_reserved),
            r.reserved_ratio,
            r.device_allocs,
            r.device_frees,
            100.0 * r.cache_hits as f64 / r.allocs.max(1) as f64,
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
    for (trace, kind, _, o, _, view) in rows {
        if let Some((pool, alloc, res)) = view.allocator_at_peak {
            outln!(
                "{trace} {}: at the pool's peak it reserved {}; wgpu's allocator report then: {} allocated in {} of device memory blocks",
                kind.name(),
                fmt_bytes(pool),
                fmt_bytes(alloc),
                fmt_bytes(res)
            );
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

fn bench_cmd(a: &BenchArgs, c: &Common) -> Result<ExitCode> {
    let sizes: Vec<u64> = if a.sizes.is_empty() {
        bench::SIZES.to_vec()
    } else {
        a.sizes.clone()
    };
    if let Some(z) = sizes.iter().find(|&&s| s == 0) {
        bail!("--sizes: a size of {z} bytes cannot be allocated; give sizes of at least 1 byte");
    }
    let target = Target::open(c, 141 << 30, 4 << 30)?;
    if let Some(&big) = sizes.iter().find(|&&s| s > target.max_buffer()) {
        bail!(
            "--sizes: {big} bytes is above {}'s max_buffer_size of {}",
            target.name(),
            target.max_buffer()
        );
    }
    let pb = bar(sizes.len() as u64, c);
    let gpu = match &target {
        Target::Gpu { device, queue, .. } => Some((device, queue)),
        Target::Simulated { .. } => None,
    };
    let rows = bench::run(gpu, &sizes, Duration::from_millis(a.time_ms), &pb)?;
    pb.finish_and_clear();
    if c.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"device": target.name(), "rows": rows}))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!("on {}", target.name());
    outln!(
        "{:>10} {:>18} {:>12} {:>12} {:>8} | {:>5} {:>12} {:>12} {:>8} | {:>12}",
        "size",
        "raw create+destroy",
        "raw + poll",
        "pool hit",
        "ratio",
        "live",
        "raw, N live",
        "pool, N live",
        "ratio",
        "engine ns/op"
    );
    let t = |x: Option<f64>| x.map_or("-".into(), fmt_ns);
    for r in rows {
        let x = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0}x"));
        outln!(
            "{:>10} {:>18} {:>12} {:>12} {:>8} | {:>5} {:>12} {:>12} {:>8} | {:>12.1}",
            fmt_bytes(r.size),
            t(r.raw_ns),
            t(r.raw_poll_ns),
            t(r.pool_ns),
            x(r.ratio),
            r.live,
            t(r.raw_live_ns),
            t(r.pool_live_ns),
            x(r.ratio_live),
            r.engine_ns_per_op
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}
