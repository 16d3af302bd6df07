//! `workload`: trains the MLP of `vrampool-workload` on a GPU, every tensor
//! from the pool, and `--find-batch` tunes the batch to the budget.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use clap::ValueEnum;
use serde_json::json;
use vrampool::{Config, Limit, Pool, PoolOptions, fmt_bytes};
use vrampool_workload::{MlpConfig, Trainer, dry_run, find_batch};

use crate::replay::Sample;
use crate::target::Target;
use crate::{Common, bar, timeline};

/// Weight storage, as `--dtype` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// 4 bytes per weight.
    F32,
    /// 2 bytes per weight (decoded with unpack2x16float).
    F16,
    /// 1 byte per weight, one scale per tensor.
    Int8,
}

impl From<Dtype> for vrampool_workload::Dtype {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => vrampool_workload::Dtype::F32,
            Dtype::F16 => vrampool_workload::Dtype::F16,
            Dtype::Int8 => vrampool_workload::Dtype::Int8,
        }
    }
}

/// The largest batch `--find-batch` tries.
const MAX_BATCH: u32 = 1 << 20;

#[derive(Args)]
pub struct WorkloadArgs {
    /// Samples per step (default 256); with --find-batch, the largest batch
    /// the search tries (default 2^20).
    #[arg(long)]
    batch: Option<u32>,
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
    /// Train twice: once recording the pool, then on a new pool that follows
    /// the plan of that recording (`Pool::plan_recording`, `Pool::follow`),
    /// and report both runs; the figures printed are the followed run's.
    #[arg(long)]
    follow: bool,
}

/// What one training run did.
struct Run {
    losses: Vec<(u32, f32)>,
    samples: Vec<Sample>,
    /// Over the whole run (each step resets the pool's peaks, so that
    /// `samples` has each step's).
    peak_reserved: u64,
    peak_allocated: u64,
    /// The pool's at the end: its peaks are the last step's.
    stats: vrampool::Stats,
    summary: String,
    /// Wall time of all the steps (the model's setup excluded).
    steps_ms: f64,
}

/// Trains `cfg` for `steps` on `pool`.
fn train(pool: &Pool, cfg: MlpConfig, steps: u32, c: &Common) -> Result<Run> {
    let mut trainer =
        pollster::block_on(Trainer::new(pool, cfg)).context("cannot set up the model")?;
    let pb = bar(steps as u64, c);
    let mut losses = Vec::new();
    let mut samples = Vec::new();
    let every = (steps / 10).max(1);
    let first = pool.stats().total;
    let (mut peak_reserved, mut peak_allocated) =
        (first.reserved_bytes.peak, first.allocated_bytes.peak);
    let start = std::time::Instant::now();
    for s in 0..steps {
        pool.reset_peak_stats();
        let read = s == 0 || s + 1 == steps || s % every == 0;
        let r = pollster::block_on(trainer.step(pool, read))
            .with_context(|| format!("training step {s} (batch {})", cfg.batch))?;
        if let Some(l) = r.loss {
            losses.push((s, l));
            pb.set_message(format!("loss {l:.4}"));
        }
        let st = pool.stats();
        peak_reserved = peak_reserved.max(st.total.reserved_bytes.peak);
        peak_allocated = peak_allocated.max(st.total.allocated_bytes.peak);
        for (k, allocated) in [
            st.total.allocated_bytes.peak,
            st.total.allocated_bytes.current,
        ]
        .into_iter()
        .enumerate()
        {
            samples.push(Sample {
                op: 2 * s as u64 + k as u64,
                live: allocated,
                figures: crate::policy::Figures {
                    allocated,
                    reserved: st.total.reserved_bytes.current,
                    cached: st.total.reserved_bytes.current - allocated,
                    device_allocs: st.counters.device_allocs,
                    device_frees: st.counters.device_frees,
                    cache_hits: st.counters.cache_hits,
                    retries: st.counters.alloc_retries,
                    bytes_created: st.counters.bytes_created,
                    bytes_released: st.counters.bytes_released,
                    blocks_moved: st.counters.blocks_moved,
                    bytes_moved: st.counters.bytes_moved,
                    move_batches: st.counters.move_batches(),
                    segments_abandoned: st.counters.segments_abandoned,
                },
            });
        }
        pb.inc(1);
    }
    let steps_ms = start.elapsed().as_secs_f64() * 1e3;
    pb.finish_and_clear();
    drop(trainer);
    Ok(Run {
        losses,
        samples,
        peak_reserved,
        peak_allocated,
        stats: pool.stats(),
        summary: pool.memory_summary(),
        steps_ms,
    })
}

pub fn command(a: &WorkloadArgs, c: &Common) -> Result<ExitCode> {
    if a.steps < 2 {
        usage!(
            "--steps {}: give at least 2 so the loss can be seen to fall",
            a.steps
        );
    }
    if a.batch == Some(0) || a.hidden == 0 {
        usage!("--batch and --hidden must be at least 1");
    }
    if !(a.lr > 0.0 && a.lr.is_finite()) {
        usage!("--lr {}: the learning rate must be a positive number", a.lr);
    }
    let mut cfg = MlpConfig {
        batch: a.batch.unwrap_or(256),
        hidden: a.hidden,
        dtype: a.dtype.into(),
        lr: a.lr,
        ..MlpConfig::default()
    };
    if c.simulate && (a.follow || c.timeline.is_some()) {
        usage!(
            "--simulate makes a dry run, which trains nothing: --follow and --timeline need a GPU; \
             drop them or --simulate"
        );
    }
    let target = Target::open(c, 141 << 30, 4 << 30)?;
    // What one tensor may take: the GPU's limits, or the simulated H200's
    // under Vulkan (4 GiB buffers; wgpu-hal binds at most 2^31 - 1 bytes).
    let limits = match &target {
        Target::Gpu { device, .. } => device.limits(),
        Target::Simulated { max_buffer, .. } => wgpu::Limits {
            max_buffer_size: *max_buffer,
            max_storage_buffer_binding_size: (1 << 31) - 1,
            ..wgpu::Limits::default()
        },
    };
    let mut found = None;
    if a.find_batch {
        let budget = a.budget.expect("clap requires --budget");
        let most = cfg.largest_batch(&limits).min(a.batch.unwrap_or(MAX_BATCH));
        if most == 0 {
            // Says which tensor is past the device's limits at a batch of 1.
            MlpConfig { batch: 1, ..cfg }.check(&limits)?;
        }
        let Some(b) = find_batch(&cfg, budget, most) else {
            let need = dry_run(&MlpConfig { batch: 1, ..cfg }, u64::MAX / 4, 2)
                .map(|s| s.total.reserved_bytes.peak)
                .unwrap_or(0);
            bail!(
                "--budget {budget}: not even a batch of 1 fits (it needs {}); raise the budget or lower --hidden",
                fmt_bytes(need)
            );
        };
        let s = dry_run(&MlpConfig { batch: b, ..cfg }, budget, 2)?;
        if !c.json {
            outln!(
                "dry run on the simulated device: the largest batch within {} is {b} (peak reserved {})",
                fmt_bytes(budget),
                fmt_bytes(s.total.reserved_bytes.peak)
            );
        }
        found = Some((b, s.total.reserved_bytes.peak));
        cfg.batch = b;
    }
    if let Err(e) = cfg.check(&limits) {
        usage!("{e}");
    }
    let Target::Gpu { device, queue, .. } = &target else {
        // The simulated device runs no shaders: report the dry run alone.
        let s = dry_run(&cfg, a.budget.unwrap_or(u64::MAX / 4), a.steps)?;
        if c.json {
            outln!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"device": target.name(), "config": cfg, "found_batch": found.map(|f| f.0), "stats": s,
                        "memory_summary": c.summary.then(|| s.summary())})
                )?
            );
        } else {
            outln!(
                "simulated: {} steps of batch {} would reserve at most {} ({} device allocations, {} cache hits)",
                a.steps,
                cfg.batch,
                fmt_bytes(s.total.reserved_bytes.peak),
                s.counters.device_allocs,
                s.counters.cache_hits
            );
            if c.summary {
                outln!("{}", s.summary());
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let new_pool = || {
        Pool::new(
            device.clone(),
            queue.clone(),
            PoolOptions {
                config: Config {
                    limit: a.budget.map(Limit::Bytes),
                    ..Config::default()
                },
                memory_hints: c.hints().wgpu(),
                ..PoolOptions::default()
            },
        )
    };
    // With --follow: a recorded run first, planned, then the run reported,
    // on a new pool that follows the plan.
    let recorded = if a.follow {
        let first = new_pool()?;
        first.start_recording();
        let run = train(&first, cfg, a.steps, c)?;
        let log = first.take_recording().context("the pool was recording")?;
        let plan = first
            .plan_recording(&log)
            .context("cannot plan the recorded run")?;
        Some((run, plan))
    } else {
        None
    };
    let pool = new_pool()?;
    if let Some((_, plan)) = &recorded {
        pool.follow(plan)
            .context("cannot follow the plan of the recorded run")?;
    }
    let run = train(&pool, cfg, a.steps, c)?;
    let follow = pool.follow_stats();
    let Run {
        losses,
        samples,
        peak_reserved,
        peak_allocated,
        stats,
        summary,
        steps_ms,
    } = &run;
    let peak_reserved = *peak_reserved;
    let (first, last) = (losses[0].1, losses[losses.len() - 1].1);
    let saved = cfg.f32_weight_bytes() - cfg.weight_bytes();
    if let Some(path) = &c.timeline {
        timeline::write(
            path,
            &format!(
                "MLP batch {} {:?} on {}",
                cfg.batch,
                cfg.dtype,
                target.name()
            ),
            samples,
            a.budget,
        )?;
    }
    if c.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "device": target.name(),
                "config": cfg,
                "found_batch": found.map(|f| f.0),
                "dry_run_peak_reserved": found.map(|f| f.1),
                "losses": losses,
                "first_loss": first,
                "last_loss": last,
                "weight_bytes": cfg.weight_bytes(),
                "f32_weight_bytes": cfg.f32_weight_bytes(),
                "saved_bytes": saved,
                "peak_reserved": peak_reserved,
                "peak_allocated": peak_allocated,
                "steps_ms": steps_ms,
                "ms_per_step": steps_ms / f64::from(a.steps),
                "stats": stats,
                "recorded": recorded.as_ref().map(|(r, plan)| json!({
                    "losses": r.losses,
                    "peak_reserved": r.peak_reserved,
                    "peak_allocated": r.peak_allocated,
                    "steps_ms": r.steps_ms,
                    "stats": r.stats,
                    "plan_reserved": plan.reserved(),
                    "plan_segments": plan.pools.iter().map(|(_, p)| p.segments.len()).sum::<usize>(),
                })),
                "follow": recorded.as_ref().map(|_| follow),
                // --summary's table, as text, where it would have printed.
                "memory_summary": c.summary.then_some(&summary),
            }))?
        );
    } else {
        outln!(
            "on {}: {} steps, batch {}, hidden {}, weights {:?}",
            target.name(),
            a.steps,
            cfg.batch,
            cfg.hidden,
            cfg.dtype
        );
        outln!(
            "loss {first:.4} -> {last:.4} ({})",
            losses
                .iter()
                .map(|(s, l)| format!("{s}: {l:.4}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        outln!(
            "weights {} ({} as f32: {} saved)",
            fmt_bytes(cfg.weight_bytes()),
            fmt_bytes(cfg.f32_weight_bytes()),
            fmt_bytes(saved)
        );
        outln!(
            "pool: peak allocated {}, peak reserved {}, {} device allocations, {} of {} requests from the cache, {} OOMs",
            fmt_bytes(*peak_allocated),
            fmt_bytes(peak_reserved),
            stats.counters.device_allocs,
            stats.counters.cache_hits,
            stats.counters.allocs,
            stats.counters.ooms
        );
        if let Some((r, plan)) = &recorded {
            outln!(
                "recorded run: peak reserved {}, {} device allocations, {:.1} ms of steps; its plan: {} in {} buffers",
                fmt_bytes(r.peak_reserved),
                r.stats.counters.device_allocs,
                r.steps_ms,
                fmt_bytes(plan.reserved()),
                plan.pools
                    .iter()
                    .map(|(_, p)| p.segments.len())
                    .sum::<usize>()
            );
            outln!(
                "followed run: {} requests placed by the plan, {} not, {:.1} ms of steps",
                follow.placed,
                follow.unplaced,
                steps_ms
            );
        }
        if let Some((b, peak)) = found {
            outln!(
                "found batch {b}: the dry run reserved {}, the GPU run {} (budget {})",
                fmt_bytes(peak),
                fmt_bytes(peak_reserved),
                fmt_bytes(a.budget.unwrap_or(0))
            );
        }
        if c.summary {
            outln!("{summary}");
        }
    }
    if last.partial_cmp(&first) != Some(std::cmp::Ordering::Less) {
        bail!("the loss did not fall ({first} -> {last}); try a smaller --lr or more --steps");
    }
    Ok(ExitCode::SUCCESS)
}
