//! `vrampool`: the harness that runs the pool on any GPU and replays real
//! allocation traces. This first cut replays traces on the simulated device;
//! the full harness (real adapters, bench, workload) grows from here.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vrampool::{Config, Engine, Limit, ReplayReport, SimulatedDevice, Trace, replay};

#[derive(Parser)]
#[command(
    name = "vrampool",
    version,
    about = "A caching GPU memory pool for wgpu: replay real allocation traces and measure"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print machine-readable JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Replay RMM CSV allocation logs (plain or gzip) through the pool on the
    /// simulated device and print peak live, peak reserved, their ratio and
    /// device allocations.
    Replay {
        /// Trace files, e.g. ../shared/traces/*.csv.gz
        #[arg(required = true)]
        traces: Vec<std::path::PathBuf>,
        /// Hard limit: bytes (`8000000000`) or a multiple of the trace's peak live (`1.03x`).
        #[arg(long)]
        budget: Option<String>,
        /// Also find the smallest budget (× peak live, to ±0.001) that replays with no OOM.
        #[arg(long)]
        min_budget: bool,
        /// Simulated device memory in bytes (default: an H200's 141 GiB).
        #[arg(long, default_value_t = 141 << 30)]
        capacity: u64,
        /// Simulated max_buffer_size in bytes (default: the H200's 4 GiB).
        #[arg(long, default_value_t = 4 << 30)]
        max_buffer_size: u64,
    },
}

enum Budget {
    Bytes(u64),
    Times(f64),
}

fn parse_budget(s: &str) -> Result<Budget, String> {
    if let Some(x) = s.strip_suffix('x') {
        let v: f64 = x
            .parse()
            .map_err(|_| format!("budget `{s}`: expected a multiple like 1.05x"))?;
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("budget `{s}` must be positive"));
        }
        Ok(Budget::Times(v))
    } else {
        s.parse().map(Budget::Bytes).map_err(|_| format!("budget `{s}`: expected bytes (e.g. 8000000000) or a multiple of peak live (e.g. 1.03x)"))
    }
}

fn run_one(
    t: &Trace,
    limit: Option<u64>,
    capacity: u64,
    max_buffer: u64,
) -> Result<ReplayReport, vrampool::Error> {
    let config = Config {
        limit: limit.map(Limit::Bytes),
        ..Config::default()
    };
    let mut e = Engine::new(
        SimulatedDevice::with_max_buffer_size(capacity, max_buffer),
        config,
    )?;
    Ok(replay(&mut e, t, 0))
}

fn min_budget(t: &Trace, capacity: u64, max_buffer: u64) -> Result<f64, vrampool::Error> {
    let (mut lo, mut hi) = (1.0f64, 4.0f64);
    if run_one(
        t,
        Some((t.peak_live as f64 * hi) as u64),
        capacity,
        max_buffer,
    )?
    .ooms
        > 0
    {
        return Ok(f64::INFINITY);
    }
    while hi - lo > 0.0005 {
        let mid = (lo + hi) / 2.0;
        if run_one(
            t,
            Some((t.peak_live as f64 * mid) as u64),
            capacity,
            max_buffer,
        )?
        .ooms
            == 0
        {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok((hi * 1000.0).ceil() / 1000.0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::Replay {
            traces,
            budget,
            min_budget: find_min,
            capacity,
            max_buffer_size,
        } => {
            let budget = budget.as_deref().map(parse_budget).transpose()?;
            let mut rows = Vec::new();
            let mut failed = false;
            if !cli.json {
                println!(
                    "{:<14} {:>16} {:>16} {:>7} {:>9} {:>7} {:>8} {:>5} {:>7} {:>10}",
                    "trace",
                    "peak live",
                    "peak reserved",
                    "ratio",
                    "dev alloc",
                    "frees",
                    "hit rate",
                    "OOMs",
                    "ns/op",
                    "min budget"
                );
            }
            for path in &traces {
                let t = Trace::open(path).map_err(|e| e.to_string())?;
                let limit = budget.as_ref().map(|b| match b {
                    Budget::Bytes(n) => *n,
                    Budget::Times(x) => (t.peak_live as f64 * x) as u64,
                });
                let r = run_one(&t, limit, capacity, max_buffer_size).map_err(|e| e.to_string())?;
                failed |= r.ooms > 0;
                let mb = if find_min {
                    Some(min_budget(&t, capacity, max_buffer_size).map_err(|e| e.to_string())?)
                } else {
                    None
                };
                if cli.json {
                    rows.push(serde_json::json!({ "report": r, "limit": limit, "min_budget": mb }));
                } else {
                    println!(
                        "{:<14} {:>16} {:>16} {:>7.3} {:>9} {:>7} {:>7.1}% {:>5} {:>7.0} {:>10}",
                        r.trace,
                        r.peak_live,
                        r.peak_reserved,
                        r.reserved_ratio,
                        r.device_allocs,
                        r.device_frees,
                        100.0 * r.cache_hits as f64 / r.allocs.max(1) as f64,
                        r.ooms,
                        r.ns_per_op,
                        mb.map_or("-".into(), |m| format!("{m:.3}x")),
                    );
                }
            }
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("reports serialise")
                );
            }
            Ok(if failed {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
