//! Prints `memory_summary()` after replaying a trace on the simulated device.
//!
//! `cargo run --release -p vrampool --example summary -- data/traces/resnet_train.csv.gz`
use vrampool::{Config, Engine, SimulatedDevice, Trace, replay};

fn main() -> Result<(), vrampool::Error> {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/traces/resnet_train.csv.gz"
        )
        .into()
    });
    let trace = Trace::open(&path)?;
    let mut engine = Engine::new(
        SimulatedDevice::with_max_buffer_size(141 << 30, 4 << 30),
        Config::default(),
    )?;
    let report = replay(&mut engine, &trace, 0);
    println!(
        "{}: peak reserved / peak live = {:.3}",
        trace.name, report.reserved_ratio
    );
    print!("{}", engine.memory_summary());
    Ok(())
}
