//! What wgpu's allocator holds and makes under the pool, by the engine's
//! model of it (`DeviceBlocks`): every trace given, at one scale, replayed
//! by the default with `fit_device_blocks` off, the default, and the PyTorch
//! preset, on a simulated device whose allocator places segments in blocks
//! of MINB then MAXB MiB (default 128 and 256: wgpu-hal 30 under its default
//! hints on a discrete GPU), the first holding HEAD bytes of the device's own
//! (default 1 MiB, as the wgpu binding models it).
//!
//! ```sh
//! cd data/lab/device-blocks && cargo build --release
//! ./target/release/device-blocks-lab 1 ../../traces/*.csv.gz ../../traces/heldout/*.csv.gz
//! ```
//!
//! Per trace: the pool's peak reserved and the device's peak held (÷ peak
//! live), and an estimate of device time from the blocks' bytes made and
//! freed (16.8 and 18.1 µs per MiB: the least-squares fit of 8c72e63's 240
//! H100 replays, `tests/tests/cost.rs`); then geometric means and the rows
//! at or below the PyTorch preset's estimate. Q=1 prints the summary alone.

use vrampool::trace::{EngineTarget, Replayer};
use vrampool::{Config, DeviceBlocks, Engine, SimulatedDevice, Stats, Suballocation, Trace};

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn run(t: &Trace, config: Config) -> (Stats, DeviceBlocks) {
    let sizes = Suballocation::new(env("MINB", 128) << 20, env("MAXB", 256) << 20, 0)
        .with_head(env("HEAD", 1 << 20));
    let device =
        SimulatedDevice::with_max_buffer_size(141 << 30, 4 << 30).with_suballocation(sizes);
    let mut e = Engine::new(device, config).unwrap();
    let mut r = Replayer::new(t);
    let mut target = EngineTarget::new(&mut e, 1);
    while r.step(&mut target).unwrap() {}
    (e.stats(), e.backend().device_blocks().unwrap().clone())
}

fn estimate_ms(d: &DeviceBlocks) -> f64 {
    16.81e-3 * mib(d.bytes_created()) + 18.13e-3 * mib(d.bytes_freed())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scale: u64 = args[1].parse().expect("a scale");
    let quiet = std::env::var_os("Q").is_some();
    let (mut total, mut wins) = ([0.0f64; 3], [0; 3]);
    let (mut device_log, mut pool_log, mut n) = ([0.0f64; 3], [0.0f64; 3], 0.0);
    for path in &args[2..] {
        let t = Trace::open(path).unwrap().scaled(scale);
        let live = t.peak_live as f64;
        let unfitted = Config {
            fit_device_blocks: false,
            ..Config::default()
        };
        let rows = [
            run(&t, unfitted),
            run(&t, Config::default()),
            run(&t, Config::pytorch()),
        ];
        let pytorch = estimate_ms(&rows[2].1);
        n += 1.0;
        for (i, (s, d)) in rows.iter().enumerate() {
            total[i] += estimate_ms(d);
            wins[i] += (estimate_ms(d) <= pytorch) as u32;
            device_log[i] += (d.peak_held() as f64 / live).ln();
            pool_log[i] += (s.total.reserved_bytes.peak as f64 / live).ln();
        }
        if !quiet {
            print!("{:16}", t.name);
            for (s, d) in &rows {
                print!(
                    " | pool {:.3} dev {:.3} est {:7.1}",
                    s.total.reserved_bytes.peak as f64 / live,
                    d.peak_held() as f64 / live,
                    estimate_ms(d)
                );
            }
            println!();
        }
    }
    let geo = |v: [f64; 3]| v.map(|x| (x / n).exp());
    let (p, d) = (geo(pool_log), geo(device_log));
    println!(
        "geo mean pool: {:.3} {:.3} {:.3}  device: {:.3} {:.3} {:.3}",
        p[0], p[1], p[2], d[0], d[1], d[2]
    );
    println!(
        "sum est: unfitted {:.0} fitted {:.0} pytorch {:.0}; rows <= pytorch: unfitted {} fitted {}",
        total[0], total[1], total[2], wins[0], wins[1]
    );
}
