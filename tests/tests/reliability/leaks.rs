//! Leaks: a pool dropped with live blocks names them; a long churn ends with
//! reserved memory bounded by the cache policy, not growing.

use std::sync::{Arc, Mutex};

use vrampool::{AllocDesc, Config, Engine, Request, SimulatedDevice, Stats};
use vrampool_tests::Rng;

use super::{env_count, pool_with};

/// Captures what `tracing` logs while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let out = Arc::clone(&sink.0);
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(out.lock().unwrap().clone()).unwrap()
}

#[test]
fn a_pool_dropped_with_live_blocks_reports_them_by_label() {
    let pool = pool_with(Config::default());
    let weights = pool
        .alloc(AllocDesc::storage(3 << 20).label("weights"))
        .unwrap();
    let acts = pool
        .alloc(AllocDesc::storage(1 << 20).label("activations"))
        .unwrap();
    let freed = pool
        .alloc(AllocDesc::storage(1 << 20).label("freed"))
        .unwrap();
    drop(freed);
    let log = logged(|| drop(pool));
    assert!(log.contains("WARN"), "{log}");
    assert!(
        log.contains("vrampool dropped with 2 live blocks (4.00 MiB): weights (3.00 MiB), activations (1.00 MiB)"),
        "{log}"
    );
    assert!(!log.contains("freed"), "{log}");
    // The handles stay valid until dropped; a clean pool logs nothing.
    drop((weights, acts));
    let clean = pool_with(Config::default());
    drop(clean.alloc(AllocDesc::storage(1 << 20)).unwrap());
    assert_eq!(logged(|| drop(clean)), "");
}

/// What a churn runs against: the engine or a pool.
trait Target {
    type Handle;
    fn alloc(&mut self, size: u64) -> Self::Handle;
    fn free(&mut self, h: Self::Handle);
    /// Checks what must hold after every operation; returns reserved bytes.
    fn after(&mut self, op: u64) -> u64;
}

/// Runs `ops` random allocations and frees (1 B–32 MiB, live bytes kept near
/// `live_cap`) against `target`; returns the highest reserved in each tenth.
fn churn<T: Target>(target: &mut T, ops: u64, live_cap: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let (mut live, mut live_bytes) = (Vec::new(), 0u64);
    let (mut peaks, mut tenth_peak) = (Vec::new(), 0u64);
    for op in 1..=ops {
        if live_bytes < live_cap && (live.is_empty() || rng.below(2) == 0) {
            let size = match rng.below(100) {
                0..=79 => 1 + rng.below(64 << 10),
                80..=97 => (64 << 10) + rng.below(2 << 20),
                _ => (2 << 20) + rng.below(30 << 20),
            };
            live.push((target.alloc(size), size));
            live_bytes += size;
        } else {
            let (h, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
            live_bytes -= size;
            target.free(h);
        }
        tenth_peak = tenth_peak.max(target.after(op));
        if op % (ops / 10) == 0 {
            peaks.push(tenth_peak);
            tenth_peak = 0;
        }
    }
    for (h, _) in live {
        target.free(h);
    }
    peaks
}

/// The figures of a churn: the highest reserved in each tenth of the run, and
/// the stats at its end (every block freed; peaks are the run's).
struct Churn {
    peak_per_tenth: Vec<u64>,
    final_stats: Stats,
}

impl Target for Engine<SimulatedDevice> {
    type Handle = vrampool::BlockId;
    fn alloc(&mut self, size: u64) -> Self::Handle {
        self.allocate(Request::new(size, 1)).unwrap().id
    }
    fn free(&mut self, h: Self::Handle) {
        Engine::free(self, h).unwrap();
    }
    fn after(&mut self, op: u64) -> u64 {
        let s = self.stats();
        if let Some(cl) = self.config().cache_limit {
            // The cache limit's promise: fully-free (releasable) bytes never above it.
            assert!(
                s.releasable_bytes <= cl,
                "op {op}: {} releasable over a {cl} cache limit",
                s.releasable_bytes
            );
        }
        s.total.reserved_bytes.current
    }
}

fn engine_churn(config: Config, ops: u64, live_cap: u64) -> Churn {
    let mut engine = Engine::new(SimulatedDevice::new(64 << 30), config).unwrap();
    let peak_per_tenth = churn(&mut engine, ops, live_cap, 0xc4u64 << 32 | 0x0123);
    engine.check_invariants().unwrap();
    Churn {
        peak_per_tenth,
        final_stats: engine.stats(),
    }
}

/// How much a churn may hold: the second half of the run at most `growth`
/// above the first half's peak, and peak reserved at most `ratio` × peak live.
struct Bound {
    growth: u64,
    ratio: f64,
}

/// What the engine's churns keep to: at most one more small segment (2 MiB)
/// in the second half, and `ratio` × peak live (random churn fragments any
/// allocator that does not move blocks: the PyTorch preset holds 1.55 ×, the
/// default with a 16 MiB cache limit 1.21 ×; each bound is about 1.15 × its
/// figure, RELIABILITY.md has them).
const fn engine_bound(ratio: f64) -> Bound {
    Bound {
        growth: 2 << 20,
        ratio,
    }
}

/// The default policy's churn: at most 32 MiB more in the second half. Its
/// soft headroom releases and re-creates segments, so the peak of a tenth
/// moves by tens of MiB from tenth to tenth with no trend: since the split
/// remainders (1521b05) it ran 341–408 MiB over 1 M operations, 12 MiB more
/// in the second half than in the first; over 4 M operations 390–422 MiB,
/// 3 MiB more, and the policy before them 376–437 MiB, 8 MiB more. Since it
/// packs before it releases (01d90d8), 361–403 MiB over 1 M operations,
/// level (not measured over 4 M); with no cached block guarded (ff8d0e0),
/// 400–425 MiB, level. A leak of
/// one 2 MiB segment per 10 000 operations would add 100 MiB. Its peak is
/// 1.52 × peak live (382–428 MiB since 143164c); the bound 1.75 ×.
const DEFAULT_POLICY_BOUND: Bound = Bound {
    growth: 32 << 20,
    ratio: 1.75,
};

fn assert_bounded(c: &Churn, live_cap: u64, what: &str, bound: Bound) {
    let half = c.peak_per_tenth.len() / 2;
    let first = *c.peak_per_tenth[..half].iter().max().unwrap();
    let later = *c.peak_per_tenth[half..].iter().max().unwrap();
    let peak_live = c.final_stats.total.requested_bytes.peak;
    let peak_reserved = c.final_stats.total.reserved_bytes.peak;
    eprintln!(
        "{what}: reserved peak per tenth (MiB) {:?}, peak live {} MiB, peak reserved / peak live {:.2}, {} device allocations",
        c.peak_per_tenth.iter().map(|p| p >> 20).collect::<Vec<_>>(),
        peak_live >> 20,
        peak_reserved as f64 / peak_live as f64,
        c.final_stats.counters.device_allocs
    );
    // Not growing: the second half of the run reserves at most `growth` more
    // than the first half did.
    assert!(
        later <= first + bound.growth,
        "{what}: reserved grew from {} MiB (first half) to {} MiB (second half)",
        first >> 20,
        later >> 20
    );
    // Bounded: the ceiling the policy keeps to.
    assert!(
        peak_reserved as f64 <= bound.ratio * peak_live as f64,
        "{what}: peak reserved {} MiB for {} MiB live",
        peak_reserved >> 20,
        peak_live >> 20
    );
    assert!(peak_live <= live_cap + (32 << 20));
}

#[test]
fn a_million_operations_of_churn_keep_reserved_bounded() {
    let ops = env_count("VRAMPOOL_CHURN_OPS", 1_000_000);
    let cap = 256 << 20;
    let c = engine_churn(Config::default(), ops, cap);
    assert_bounded(&c, cap, "default policy", DEFAULT_POLICY_BOUND);
    let c = engine_churn(Config::pytorch(), ops, cap);
    assert_bounded(&c, cap, "pytorch preset", engine_bound(1.8));
    let limited = Config {
        cache_limit: Some(16 << 20),
        ..Config::default()
    };
    let c = engine_churn(limited, ops, cap);
    assert_bounded(&c, cap, "16 MiB cache limit", engine_bound(1.4));
}

/// Churn through `Pool` on the test device; at the end wgpu's own report
/// agrees with the pool: nothing leaked below it either. `frame`: every that
/// many operations the pool is told everything recorded was submitted
/// (`Pool::submitted`); 0 never tells it, as code that does not know of it.
fn pool_churn(ops: u64, frame: u64, what: &str, bound: Bound) {
    let cap = 128 << 20;
    let pool = pool_with(Config::default());
    // wgpu's own buffers (zero-init, indirect validation) are there before any segment.
    let Some(baseline) = pool.allocator_report() else {
        assert_eq!(vrampool_tests::backend(), wgpu::Backend::Gl);
        eprintln!("skipped: the GL backend gives no allocator report");
        return;
    };
    struct OnPool<'a>(&'a vrampool::Pool, u64);
    impl Target for OnPool<'_> {
        type Handle = vrampool::PoolBuffer;
        fn alloc(&mut self, size: u64) -> Self::Handle {
            self.0.alloc(AllocDesc::storage(size).read_write()).unwrap()
        }
        fn free(&mut self, h: Self::Handle) {
            drop(h);
        }
        fn after(&mut self, op: u64) -> u64 {
            if self.1 > 0 && op.is_multiple_of(self.1) {
                self.0.submitted();
            }
            self.0.stats().total.reserved_bytes.current
        }
    }
    let peak_per_tenth = churn(&mut OnPool(&pool, frame), ops, cap, 0x9001);
    let c = Churn {
        peak_per_tenth,
        final_stats: pool.stats(),
    };
    assert_bounded(&c, cap, what, bound);
    pool.check_invariants().unwrap();
    // Destroyed segments are freed by wgpu once the device is polled.
    let _ = pool.device().poll(wgpu::PollType::wait_indefinitely());
    let report = pool
        .allocator_report()
        .expect("Vulkan has an allocator report");
    let (segments, reserved) = (
        c.final_stats.total.segments.current,
        c.final_stats.total.reserved_bytes.current,
    );
    assert_eq!(
        (report.allocations.len() - baseline.allocations.len()) as u64,
        segments,
        "wgpu holds one buffer per pool segment, no more"
    );
    let wgpu_bytes = report.total_allocated_bytes - baseline.total_allocated_bytes;
    assert!(
        wgpu_bytes >= reserved && wgpu_bytes <= reserved + segments * (64 << 10),
        "wgpu holds {wgpu_bytes} bytes for {reserved} reserved"
    );
    assert_eq!(c.final_stats.total.allocated_bytes.current, 0);
    pool.empty_cache();
    assert_eq!(pool.stats().total.reserved_bytes.current, 0);
}

#[test]
fn a_million_operations_through_a_pool_on_a_real_device() {
    // Blocks dropped within a frame wait for its submit, so the run holds more
    // than the engine's: 238–285 MiB in the ten tenths, 1.80 × peak live, on
    // lavapipe (and 55 device allocations). The second half may hold 48 MiB
    // more than the first (the tenths' peaks spread over 47 MiB with no
    // trend); the ratio is bounded at about 1.15 × its figure.
    let ops = env_count("VRAMPOOL_CHURN_OPS", 1_000_000);
    pool_churn(
        ops,
        100,
        "pool on a real device, a submit every 100 operations",
        Bound {
            growth: 48 << 20,
            ratio: 2.1,
        },
    );
}

#[test]
fn churn_through_a_pool_never_told_of_a_submit_stays_bounded() {
    // Code that never calls Pool::submit: nothing dropped is ever reused, yet
    // reserved memory does not grow — once the workload has allocated 8 × its
    // high water since a pending block was last reclaimed, segments holding
    // only pending blocks are released (abandoned to wgpu, which frees an
    // idle buffer at once). Without that fallback (559e216) this run grew to
    // 55 655 MiB, 358 × peak live; with it 199–303 MiB in the ten tenths,
    // 1.96 × peak live (1.50 × before 559e216): segments keep their pending
    // blocks while any block in them lives. Bounded at about 1.15 × that, and
    // the second half at most 64 MiB above the first's peak (it is below it).
    let ops = env_count("VRAMPOOL_CHURN_OPS", 1_000_000) / 5;
    pool_churn(
        ops,
        0,
        "pool never told of a submit",
        Bound {
            growth: 64 << 20,
            ratio: 2.25,
        },
    );
}
