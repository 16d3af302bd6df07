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

/// Returns, as `bail!` does, a [`Usage`] error: an invocation the harness
/// refuses itself (clap refuses the others), which exits 2 as clap's do.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::Usage(format!($($arg)*))))
    };
}

mod bench;
mod corpus;
mod device;
mod info;
mod policy;
mod replay;
mod settings;
mod target;
mod timeline;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::bench::BenchArgs;
use crate::corpus::CorpusArgs;
use crate::replay::ReplayArgs;
use crate::workload::WorkloadArgs;

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
pub struct Common {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The GPU to run on: its index in `vrampool info`, or part of its name
    /// (e.g. `--adapter h200`). Default: the first adapter.
    #[arg(long, global = true, value_name = "INDEX|NAME")]
    pub adapter: Option<String>,
    /// How wgpu's own allocator (Vulkan, DX12) places the pool's segments:
    /// `performance`, wgpu's default, sub-allocates every segment under 256 MiB
    /// in 128–256 MiB blocks it frees only once empty, so the device may hold
    /// more than the pool's peak reserved; `pool` (vrampool::pool_memory_hints)
    /// asks for 4 MiB blocks, so a segment above 4 MiB is memory of its own and
    /// the device holds close to what the pool reserves, at a device allocation
    /// per segment (BENCHMARKS.md); `memory-usage` is wgpu's 8–64 MiB. On
    /// Vulkan the vrampool policy sizes new segments to the blocks of these
    /// hints (vrampool::Config::fit_device_blocks; `--set
    /// fit_device_blocks=false` turns that off). Default: performance.
    #[arg(long, global = true, value_enum)]
    pub memory_hints: Option<device::Hints>,
    /// Use the simulated device instead of a GPU (figures are the same; no driver needed).
    #[arg(long, global = true, conflicts_with = "adapter")]
    pub simulate: bool,
    /// After the run, print the pool's memory_summary (PyTorch's torch.cuda.memory_summary).
    #[arg(long, global = true)]
    pub summary: bool,
    /// Write a chart of live / allocated / reserved / cached and the budget over the run.
    #[arg(long, global = true, value_name = "FILE.svg")]
    pub timeline: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter with the limits that matter to memory.
    Info,
    /// Replay RMM CSV allocation logs (plain or gzip) through a policy, on a GPU or
    /// the simulated device, and print peak live, peak reserved, their ratio,
    /// device allocations and frees, cache hit rate, OOMs and time per operation.
    /// Exits 3 when a replay ran out of memory (its figures are printed all the
    /// same), 2 on a usage error, 1 on any other error.
    Replay(ReplayArgs),
    /// Hold a policy to the standing targets over a corpus of traces: every
    /// trace at each scale (and, with --resize, every tensor resized), replayed
    /// on the simulated device by the vrampool policy (with any --set changes)
    /// and by the PyTorch preset. Prints the rows that miss a target — R: peak
    /// reserved above 1.10 × peak live + 2 MiB or above PyTorch's; M (with
    /// --min-budget): smallest budget above 1.03 × peak live + 1 MiB or above
    /// PyTorch's; at full size, A / B: more device allocations / bytes of
    /// segments created than PyTorch — the counts, and the device time the
    /// churn would cost on the H200.
    Corpus(CorpusArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.chain().any(|c| c.is::<Usage>()) {
                ExitCode::from(USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The exit code of a usage error, as clap's.
pub const USAGE: u8 = 2;

/// Options or values the harness refuses before it runs anything (the
/// message says which and what to give instead): exit code [`USAGE`].
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

impl Common {
    /// The memory hints a GPU device is opened with.
    pub fn hints(&self) -> device::Hints {
        self.memory_hints.unwrap_or(device::Hints::Performance)
    }
}

/// Whether `e` is stdout's reader gone away (`| head`).
pub fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A progress bar, hidden for `--json`.
pub fn bar(len: u64, common: &Common) -> ProgressBar {
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
    let name = match &cli.command {
        Command::Info => Some("info lists adapters"),
        Command::Bench(_) => Some("bench times allocations on pools it makes and drops"),
        _ => None,
    };
    if let Some(what) = name
        && (c.summary || c.timeline.is_some())
    {
        usage!(
            "{what}, and keeps no pool to summarise or chart: --summary and --timeline are for \
             replay and workload"
        );
    }
    if c.simulate && c.memory_hints.is_some() {
        usage!(
            "--memory-hints places segments in a GPU's memory, and the simulated device has \
             none: drop --simulate or --memory-hints"
        );
    }
    if matches!(cli.command, Command::Info) && c.adapter.is_some() {
        usage!("info lists every adapter: --adapter picks one for replay, bench and workload");
    }
    match &cli.command {
        Command::Info => info::command(c),
        Command::Replay(a) => replay::command(a, c),
        Command::Corpus(a) => corpus::command(a, c),
        Command::Bench(a) => bench::command(a, c),
        Command::Workload(a) => workload::command(a, c),
    }
}
