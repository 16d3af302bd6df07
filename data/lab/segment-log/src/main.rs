//! Where a replay's peak reserved is set, and what the segments hold then.
//!
//! `segment-log-lab TRACE [SCALE]` replays TRACE (divided by SCALE) under the
//! default policy on the simulated H200 (141 GiB, 4 GiB buffers, as
//! tests/tests/figures.rs) and prints:
//! - every event that made or released a segment (`CHURN=1`): device
//!   allocations and frees so far, reserved and allocated MiB, MiB created
//!   and released by that event;
//! - the segments at each event listed in `DUMP=E1,E2,..` (those of at least
//!   64 MiB), each block `L` live or `f` free, in MiB;
//! - the segments when reserved last rose (its peak), with each one's live
//!   and free MiB.

use vrampool::trace::{EngineTarget, Replayer};
use vrampool::{Config, Engine, SimulatedDevice, Snapshot, SnapshotState, Trace};

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn segments(snapshot: &Snapshot, at_least: u64) -> String {
    let mut out = String::new();
    for seg in snapshot.segments.iter().filter(|s| s.size >= at_least) {
        let blocks: Vec<String> = seg
            .blocks
            .iter()
            .map(|b| {
                let state = if b.state == SnapshotState::Live {
                    "L"
                } else {
                    "f"
                };
                format!("{state}{:.1}", mib(b.size))
            })
            .collect();
        out += &format!(
            "  seg {} {:?} {:.1} MiB: {}\n",
            seg.id,
            seg.class,
            mib(seg.size),
            blocks.join(" ")
        );
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: segment-log-lab TRACE [SCALE]  (env CHURN=1, DUMP=E1,E2,..)");
        std::process::exit(2);
    };
    let scale: u64 = args
        .get(2)
        .map_or(1, |s| s.parse().expect("SCALE is a whole number"));
    let full = Trace::open(path).expect("a readable trace");
    let trace = if scale > 1 { full.scaled(scale) } else { full };
    let dump: Vec<usize> = std::env::var("DUMP")
        .unwrap_or_default()
        .split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().expect("DUMP lists event numbers"))
        .collect();
    let churn = std::env::var_os("CHURN").is_some();
    let device = SimulatedDevice::with_max_buffer_size(141 << 30, 4 << 30);
    let mut engine = Engine::new(device, Config::default()).expect("the default config");
    let mut replayer = Replayer::new(&trace);
    let (mut peak, mut at_peak) = (0u64, String::new());
    let (mut allocs, mut frees, mut created, mut released) = (0, 0, 0, 0);
    loop {
        let event = replayer.position();
        let more = replayer
            .step(&mut EngineTarget::new(&mut engine, 0))
            .expect("no limit: no refusal");
        let stats = engine.stats();
        let (reserved, allocated) = (
            stats.total.reserved_bytes.current,
            stats.total.allocated_bytes.current,
        );
        let c = &stats.counters;
        if churn && (c.device_allocs, c.device_frees) != (allocs, frees) {
            println!(
                "event {event}: allocs {} frees {} reserved {:.1} allocated {:.1} created {:.1} released {:.1}",
                c.device_allocs,
                c.device_frees,
                mib(reserved),
                mib(allocated),
                mib(c.bytes_created - created),
                mib(c.bytes_released - released)
            );
            (allocs, frees, created, released) = (
                c.device_allocs,
                c.device_frees,
                c.bytes_created,
                c.bytes_released,
            );
        }
        if dump.contains(&event) {
            println!(
                "== after event {event}: reserved {:.1} allocated {:.1}",
                mib(reserved),
                mib(allocated)
            );
            print!("{}", segments(&engine.snapshot(), 64 << 20));
        }
        if reserved > peak {
            peak = reserved;
            at_peak = format!(
                "peak reserved set at event {event}: reserved {:.1} MiB, allocated {:.1} (peak {:.1})\n{}",
                mib(reserved),
                mib(allocated),
                mib(stats.total.allocated_bytes.peak),
                segments(&engine.snapshot(), 0)
            );
        }
        if !more {
            break;
        }
    }
    print!("{at_peak}");
    println!(
        "ratio {:.3} (peak reserved / peak live)",
        peak as f64 / trace.peak_live as f64
    );
}
