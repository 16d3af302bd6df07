//! The three shared PyTorch traces (data/traces) replayed on the simulated
//! device: under a hard limit of 1.03 × peak live there is no OOM (PyTorch needs
//! 1.123 / 1.031 / 1.124 ×), the same holds with every tensor resized, no
//! budget from 1.02 × to 2 × fails, a ceiling the replay never reaches changes
//! nothing (simulated and through a Pool on the test device), the PyTorch
//! preset reproduces PyTorch's own figures, a lavapipe replay equals the
//! simulated one, and a pool submitting every 64 operations, its dropped
//! blocks waiting for the submit, does not re-create its segments (and
//! equals the simulated replay with the same submit points). Every trace's
//! figures are pinned by figures.rs.

use vrampool::{Config, Engine, Limit, LimitKind, ReplayReport, SimulatedDevice, Trace, replay};
use vrampool_tests::trace_path;

const TRACES: [&str; 3] = ["gpt_train", "resnet_train", "batch_sweep"];
/// The H200's max_buffer_size (the largest trace allocation is 3.1 GiB).
const MAX_BUFFER: u64 = 4 << 30;
const DEVICE: u64 = 141 << 30;

/// Replays `t` on the simulated H200 under `budget` × peak live (or no limit);
/// returns the report and the engine, for its invariants and stats.
fn run(t: &Trace, budget: Option<f64>) -> (ReplayReport, Engine<SimulatedDevice>) {
    run_with(Config::default(), t, budget)
}

/// [`run`] with another configuration.
fn run_with(
    base: Config,
    t: &Trace,
    budget: Option<f64>,
) -> (ReplayReport, Engine<SimulatedDevice>) {
    let config = Config {
        limit: budget.map(|x| Limit::Bytes((t.peak_live as f64 * x) as u64)),
        ..base
    };
    let mut e = Engine::new(
        SimulatedDevice::with_max_buffer_size(DEVICE, MAX_BUFFER),
        config,
    )
    .unwrap();
    let r = replay(&mut e, t, 0);
    (r, e)
}

fn load(name: &str) -> Trace {
    let path = trace_path(name);
    Trace::open(&path).unwrap_or_else(|e| panic!("{e} (the traces live in data/traces)"))
}

#[test]
fn traces_read_as_documented() {
    // traces/README.md: allocations and peak live bytes.
    let expect = [
        ("gpt_train", 4674, 9_974_220_488u64),
        ("resnet_train", 3549, 3_124_435_472),
        ("batch_sweep", 5095, 14_289_141_352),
    ];
    for (name, allocs, peak) in expect {
        let t = load(name);
        assert_eq!(t.allocations(), allocs, "{name}");
        assert_eq!(t.peak_live, peak, "{name}");
    }
}

#[test]
fn every_trace_replays_under_1_03x_peak_live() {
    for name in TRACES {
        let t = load(name);
        let (r, e) = run(&t, Some(1.03));
        let limit = e.limit().unwrap();
        assert_eq!(r.ooms, 0, "{name}: {r:?}");
        assert!(
            r.peak_reserved <= limit,
            "{name}: reserved {} over the limit {limit}",
            r.peak_reserved
        );
        assert_eq!(r.allocs as usize, t.allocations());
        e.check_invariants().unwrap();
    }
}

#[test]
fn a_ceiling_the_workload_never_reaches_changes_nothing() {
    // A limit of 2 × peak live set as a ceiling places as with no limit. The
    // same limit as a budget (the default, and the negative control) places
    // with exact segments from the first request, so its cache fills up
    // towards the limit with segments it cannot reuse.
    let ceiling = Config {
        limit_kind: LimitKind::Ceiling,
        ..Config::default()
    };
    let figures = |r: &ReplayReport| (r.device_allocs, r.peak_reserved, r.segment_bytes_created);
    let mut reached = 0;
    for name in TRACES {
        let t = load(name);
        let (free, _) = run(&t, None);
        let (capped, e) = run_with(ceiling.clone(), &t, Some(2.0));
        assert_eq!(figures(&capped), figures(&free), "{name}");
        e.check_invariants().unwrap();
        let (budget, _) = run(&t, Some(2.0));
        assert!(
            budget.device_allocs > 2 * free.device_allocs
                && budget.peak_reserved > free.peak_reserved,
            "{name}: a budget made {} device allocations and held {} bytes, a ceiling {} and {}",
            budget.device_allocs,
            budget.peak_reserved,
            free.device_allocs,
            free.peak_reserved
        );
        // At 1.05 × the ceiling is reached where the unlimited replay would
        // pass it (resnet_train holds 1.074 × with no limit): it holds there,
        // with no OOM.
        let (tight, e) = run_with(ceiling.clone(), &t, Some(1.05));
        let limit = e.limit().unwrap();
        assert_eq!(tight.ooms, 0, "{name}");
        assert!(tight.peak_reserved <= limit, "{name}: over the ceiling");
        e.check_invariants().unwrap();
        if free.peak_reserved > limit {
            reached += 1;
            assert_ne!(figures(&tight), figures(&free), "{name}");
        }
    }
    assert!(reached >= 1, "the 1.05 × ceiling was reached on no trace");
}

#[test]
fn unlimited_replays_reuse_and_leave_a_consistent_engine() {
    // The figures themselves (ratio, device allocations, budgets) are pinned by
    // tests/tests/figures.rs against data/figures.json; here, what they do not say.
    for name in TRACES {
        let (r, e) = run(&load(name), None);
        assert_eq!(r.ooms, 0);
        assert!(
            r.hit_rate() > 0.95,
            "{name}: hit rate {} of {}",
            r.cache_hits,
            r.allocs
        );
        e.check_invariants().unwrap();
        assert_eq!(e.stats().total.allocated_bytes.current, 0);
        assert_eq!(e.stats().total.reserved_bytes.current, e.backend().used());
    }
}

#[test]
fn the_policy_holds_when_every_tensor_is_resized() {
    // The same workloads with tensors 0.75× to 1.25× as big: a policy tuned to
    // one exact set of sizes would pin a segment somewhere here and jump to
    // 1.2× (as an earlier version did on gpt_train at 0.9× and 1.1×).
    for name in TRACES {
        let base = load(name);
        for factor in [0.75, 0.9, 1.1, 1.25] {
            let t = base.resized(factor);
            let (r, _) = run(&t, None);
            assert!(
                r.ooms == 0 && r.reserved_ratio <= 1.10,
                "{name} ×{factor}: unlimited ratio {:.3}",
                r.reserved_ratio
            );
            assert_eq!(
                run(&t, Some(1.03)).0.ooms,
                0,
                "{name} ×{factor}: OOM under 1.03× peak live"
            );
        }
    }
}

#[test]
fn budgets_from_1_02x_to_2x_never_oom() {
    // No cliff above the minimum: every budget on the 0.001 grid the
    // smallest-budget search steps on, from 1.02 × to 2 ×, replays with no
    // out-of-memory (a bisection takes the smallest that passes for the
    // least that works, which a gap above it would belie).
    for name in TRACES {
        let t = load(name);
        for step in 0..=980 {
            let x = 1.02 + f64::from(step) * 0.001;
            assert_eq!(run(&t, Some(x)).0.ooms, 0, "{name} at {x:.3}x");
        }
    }
}

/// Replays `t` through a `Pool` on `device` as an app would: a read-write
/// storage block per tensor, each free followed by `Pool::submitted` (no
/// command was recorded, so a block may be reused at once, in trace order, as
/// the engine's replay does). Returns the pool, every block dropped.
fn replay_through_pool(
    t: &Trace,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    front_cache: bool,
) -> vrampool::Pool {
    replay_through_pool_watched(t, device, queue, front_cache, |_| {})
}

/// [`replay_through_pool`], calling `after_alloc` with the pool after every
/// allocation.
fn replay_through_pool_watched(
    t: &Trace,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    front_cache: bool,
    after_alloc: impl FnMut(&vrampool::Pool),
) -> vrampool::Pool {
    let options = vrampool::PoolOptions {
        front_cache,
        ..Default::default()
    };
    replay_through_pool_with(t, device, queue, options, after_alloc)
}

/// The requests of `t` the front cache serves when [`replay_through_pool`]
/// replays it on one thread (a submit after every free, so every parked
/// block is ready): those for which a block of the same size, rounded to 4
/// bytes, was parked since the last miss; a miss hands every parked block
/// back, and a shard parks at most 64. From the trace alone, not the pool.
fn front_hits_expected(t: &Trace) -> u64 {
    let mut sizes = std::collections::HashMap::new();
    let mut parked: Vec<u64> = Vec::new();
    let mut hits = 0;
    for e in &t.events {
        match e.action {
            vrampool::trace::Action::Allocate => {
                let size = e.size.next_multiple_of(4);
                sizes.insert(e.pointer, size);
                match parked.iter().rposition(|&p| p == size) {
                    Some(i) => {
                        parked.remove(i);
                        hits += 1;
                    }
                    None => parked.clear(),
                }
            }
            vrampool::trace::Action::Free => {
                let size = sizes.remove(&e.pointer).expect("validated trace");
                if parked.len() < 64 {
                    parked.push(size);
                }
            }
        }
    }
    hits
}

/// [`replay_through_pool_watched`] with the pool's options given whole.
fn replay_through_pool_with(
    t: &Trace,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    options: vrampool::PoolOptions,
    mut after_alloc: impl FnMut(&vrampool::Pool),
) -> vrampool::Pool {
    let pool = vrampool::Pool::new(device.clone(), queue.clone(), options).unwrap();
    let mut live = std::collections::HashMap::new();
    for e in &t.events {
        match e.action {
            vrampool::trace::Action::Allocate => {
                let desc = vrampool::AllocDesc::storage(e.size).read_write();
                live.insert(e.pointer, pool.alloc(desc).unwrap());
                after_alloc(&pool);
            }
            vrampool::trace::Action::Free => {
                live.remove(&e.pointer).expect("validated trace");
                pool.submitted();
            }
        }
    }
    pool
}

#[test]
fn on_a_device_a_ceiling_the_pool_never_reaches_changes_nothing() {
    // gpt_train ÷64 through a Pool on the test device (lavapipe or GL): with
    // no limit, under a ceiling of 2 × peak live, and under the same limit
    // as a budget (the negative control).
    let t = load("gpt_train").scaled(64);
    let (device, queue, _) = vrampool_tests::device();
    let with = |limit: Option<Limit>, limit_kind| {
        let options = vrampool::PoolOptions {
            front_cache: false,
            config: Config {
                limit,
                limit_kind,
                ..Config::default()
            },
            ..Default::default()
        };
        let pool = replay_through_pool_with(&t, &device, &queue, options, |_| {});
        pool.check_invariants().unwrap();
        let s = pool.stats();
        (s.counters.device_allocs, s.total.reserved_bytes.peak)
    };
    let limit = Some(Limit::Bytes(2 * t.peak_live));
    let free = with(None, LimitKind::Budget);
    assert_eq!(with(limit, LimitKind::Ceiling), free);
    let budget = with(limit, LimitKind::Budget);
    assert!(
        budget.0 > 2 * free.0 && budget.1 > free.1,
        "a budget made {budget:?} (device allocations, peak reserved), no limit {free:?}"
    );
}

#[test]
fn a_scaled_trace_replays_on_lavapipe() {
    // The real-device path of the replay engine: resnet scaled down 64× on Vulkan.
    let t = load("resnet_train").scaled(64);
    let (device, queue, _) = vrampool_tests::device();
    let pool = replay_through_pool(&t, &device, &queue, false);
    let s = pool.stats();
    assert_eq!(s.total.allocated_bytes.current, 0);
    // Without its front cache, the binding adds nothing to the engine's
    // decisions: the same replay on the simulated device, with the device's
    // max_buffer_size, gives the same figures.
    let max = pool.device().limits().max_buffer_size;
    let mut sim = Engine::new(
        SimulatedDevice::with_max_buffer_size(DEVICE, max),
        Config::default(),
    )
    .unwrap();
    let r = replay(&mut sim, &t, 0);
    assert_eq!(s.total.reserved_bytes.peak, r.peak_reserved);
    assert_eq!(s.counters.device_allocs, r.device_allocs);
    assert_eq!(s.counters.cache_hits, r.cache_hits);
    assert!(s.counters.hit_rate() > 0.9);

    // With it (the default), a hit takes the block its thread dropped last
    // with the same description rather than the engine's best fit: the same
    // allocations, frees and peak of requested bytes; placements that differ
    // a little.
    let fronted = replay_through_pool(&t, &device, &queue, true);
    fronted.check_invariants().unwrap();
    let f = fronted.stats();
    assert_eq!(f.total.allocated_bytes.current, 0);
    assert_eq!(f.total.requested_bytes.peak, s.total.requested_bytes.peak);
    assert_eq!(s.counters.front_hits, 0, "the pool without a front cache");
    // On one thread, with a submit after every free: a request is served by
    // the front cache when a block of its size (rounded to 4 bytes) was
    // dropped since the thread's last miss (a miss hands the parked blocks
    // back to the engine) and parked (at most 64 at once). Counted here from
    // the trace alone: 259 of 3 549 (a front cache that served half as
    // often, or twice, or kept its blocks past a miss, fails).
    assert_eq!(
        f.counters.front_hits,
        front_hits_expected(&t),
        "{:?}",
        f.counters
    );
    assert_eq!(
        (f.counters.allocs, f.counters.frees),
        (s.counters.allocs, s.counters.frees)
    );
    let (a, b) = (f.total.reserved_bytes.peak as f64, r.peak_reserved as f64);
    assert!(
        (a / b - 1.0).abs() < 0.02,
        "peak reserved {a} against the engine's {b}"
    );
    drop(fronted);

    // And the replay engine drives the wgpu backend directly.
    let mut real = Engine::new(
        vrampool::WgpuBackend::new(pool.device(), None),
        Config::default(),
    )
    .unwrap();
    let rr = replay(&mut real, &t, wgpu::BufferUsages::STORAGE.bits());
    assert_eq!(
        (rr.ooms, rr.peak_reserved, rr.device_allocs),
        (0, r.peak_reserved, r.device_allocs)
    );
    let held = real.stats().total.reserved_bytes.current;
    assert!(held > 0, "the replay left its cache warm");
    assert_eq!(real.empty_cache(), held);
    assert_eq!(real.stats().total.reserved_bytes.current, 0);
}

#[test]
fn a_pool_submitting_every_64_operations_does_not_recreate_its_segments() {
    // small_loop through a Pool on the test device, as a frame loop drives
    // it: every block allocated is written by a command of the open encoder
    // (a clear of its first 256 bytes), blocks are dropped before the submit
    // that runs those commands, and the encoder is submitted every 64
    // allocations and frees. Dropped blocks wait for that submit; the soft
    // headroom once released the segments holding them and re-created them
    // at the next one (2 747 MiB created for this 39 MiB loop with a submit
    // every 16 events, 6 134 MiB every 64; PyTorch's scheme 70 and 92 MiB).
    const EVERY: u64 = 64;
    let t = load("small_loop");
    let (device, queue, _) = vrampool_tests::device();
    let options = vrampool::PoolOptions {
        front_cache: false,
        ..Default::default()
    };
    let pool = vrampool::Pool::new(device.clone(), queue.clone(), options).unwrap();
    let encoder = || device.create_command_encoder(&Default::default());
    let (mut live, mut enc, mut events) = (std::collections::HashMap::new(), encoder(), 0);
    for e in &t.events {
        match e.action {
            vrampool::trace::Action::Allocate => {
                let b = pool
                    .alloc(vrampool::AllocDesc::storage(e.size).read_write())
                    .unwrap();
                enc.clear_buffer(b.buffer(), b.offset(), Some(b.size().min(256)));
                live.insert(e.pointer, b);
            }
            vrampool::trace::Action::Free => {
                live.remove(&e.pointer).expect("validated trace");
            }
        }
        events += 1;
        if events % EVERY == 0 {
            pool.submit([std::mem::replace(&mut enc, encoder()).finish()]);
        }
    }
    pool.submit([enc.finish()]);
    pool.check_invariants().unwrap();
    let s = pool.stats();
    // Without its front cache the pool makes the engine's decisions: the
    // replay with the same submit points on the simulated device.
    let simulated = |config| {
        let max = device.limits().max_buffer_size;
        let mut e =
            Engine::new(SimulatedDevice::with_max_buffer_size(DEVICE, max), config).unwrap();
        vrampool::replay_submitting(&mut e, &t, 0, false, EVERY)
    };
    let (ours, pytorch) = (simulated(Config::default()), simulated(Config::pytorch()));
    assert_eq!(
        (s.counters.device_allocs, s.counters.bytes_created),
        (ours.device_allocs, ours.segment_bytes_created)
    );
    assert_eq!(s.total.reserved_bytes.peak, ours.peak_reserved);
    assert!(
        // 1.5 ×: the pool is at 1.35 × (124 against 92 MiB on the H200's
        // buffer size), so a tenth more churn than now fails.
        2 * s.counters.bytes_created <= 3 * pytorch.segment_bytes_created,
        "{} MiB of segments created, PyTorch's scheme {} MiB",
        s.counters.bytes_created >> 20,
        pytorch.segment_bytes_created >> 20
    );
}

/// The most bytes wgpu's own allocator held while `t` replayed through a
/// pool with `config` on a device opened with `hints` (which the pool is
/// told of), and the pool's peak reserved; `None` where the backend has no
/// allocator report (GL).
fn device_and_pool_peaks(
    t: &Trace,
    hints: wgpu::MemoryHints,
    config: Config,
) -> Option<(u64, u64)> {
    let (device, queue, _) = vrampool_tests::device_with_hints(hints.clone());
    let options = vrampool::PoolOptions {
        front_cache: false,
        config,
        memory_hints: hints,
        ..Default::default()
    };
    let mut device_peak = Some(0);
    let pool = replay_through_pool_with(t, &device, &queue, options, |pool| {
        device_peak = device_peak
            .zip(pool.allocator_report())
            .map(|(peak, r)| peak.max(r.total_reserved_bytes));
    });
    Some((device_peak?, pool.stats().total.reserved_bytes.peak))
}

/// The configuration with segments not fitted to the device's blocks.
fn unfitted() -> Config {
    Config {
        fit_device_blocks: false,
        ..Config::default()
    }
}

#[test]
fn with_pool_memory_hints_the_device_holds_what_the_pool_reserves() {
    // resnet_train ÷16 (186 MiB live): the pool creates and releases segments
    // of 1–40 MiB. With wgpu's default hints its allocator sub-allocates them
    // in 128–256 MiB blocks, freed only once empty, and holds far more than
    // the pool reports; with pool_memory_hints() every segment above 4 MiB is
    // memory of its own and only the small segments share 4 MiB blocks.
    let t = load("resnet_train").scaled(16);
    // The pool's segments the same under both hints: not fitted to either's blocks.
    let Some((exact, pool_peak)) =
        device_and_pool_peaks(&t, vrampool::pool_memory_hints(), unfitted())
    else {
        return vrampool_tests::skipped_without_an_allocator_report();
    };
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    assert!(
        mib(exact) <= mib(pool_peak) * 1.10 + 8.0,
        "wgpu held {:.1} MiB for the pool's {:.1} MiB",
        mib(exact),
        mib(pool_peak)
    );
    let (default, same) =
        device_and_pool_peaks(&t, wgpu::MemoryHints::default(), unfitted()).unwrap();
    assert_eq!(
        same, pool_peak,
        "the hints do not change the pool's decisions"
    );
    assert!(
        mib(default) > mib(exact) * 1.3,
        "the default hints held {:.1} MiB, pool_memory_hints {:.1}",
        mib(default),
        mib(exact)
    );
    eprintln!(
        "resnet_train ÷16: pool peak {:.1} MiB; wgpu held {:.1} MiB with pool_memory_hints, {:.1} with the default",
        mib(pool_peak),
        mib(exact),
        mib(default)
    );
}

#[test]
fn under_the_default_hints_fitted_segments_keep_the_device_near_the_pool() {
    // resnet_train on the test device opened with wgpu's default hints,
    // where wgpu's allocator places every buffer up to a block's size in
    // shared blocks, freed only once empty: 64–128 MiB on lavapipe (its
    // memory is host-visible), 128–256 MiB on a discrete GPU (its first
    // block, made with the device, says which), so ÷4 there (745 MiB live)
    // and as recorded here. Unfitted, the soft headroom
    // releases segments beside live ones (freeing no block) and makes larger
    // ones (each a new block): the device holds far more than the pool
    // reserves. Fitted to the blocks the device sets aside
    // (Config::fit_device_blocks), what it holds stays near the pool's peak.
    let (device, _, _) = vrampool_tests::device();
    let first_block = vrampool_tests::first_allocator_block(&device).unwrap_or(0);
    let scale = if first_block >= 128 << 20 { 1 } else { 4 };
    let t = load("resnet_train").scaled(scale);
    let hints = wgpu::MemoryHints::default;
    let Some((device_off, pool_off)) = device_and_pool_peaks(&t, hints(), unfitted()) else {
        return vrampool_tests::skipped_without_an_allocator_report();
    };
    let (device_fit, pool_fit) = device_and_pool_peaks(&t, hints(), Config::default()).unwrap();
    let live = t.peak_live as f64;
    let ratio = |b: u64| b as f64 / live;
    eprintln!(
        "resnet_train ÷{scale}: unfitted pool {:.3} × peak live, device {:.3}; fitted pool {:.3}, device {:.3}",
        ratio(pool_off),
        ratio(device_off),
        ratio(pool_fit),
        ratio(device_fit)
    );
    assert!(
        ratio(device_off) > 1.35,
        "the unfitted control: the device held {:.3} ×",
        ratio(device_off)
    );
    assert!(
        ratio(device_fit) < 1.20 && ratio(pool_fit) < 1.10,
        "fitted: the device held {:.3} ×, the pool {:.3} ×",
        ratio(device_fit),
        ratio(pool_fit)
    );
}

#[test]
fn a_pool_told_other_hints_than_the_devices_fits_nothing() {
    // A tensor just above a quarter of the largest block wgpu's default
    // hints make, no soft headroom. On a device opened with those hints and
    // a pool told so, its segment is fitted to the range wgpu's allocator
    // sets aside (the rest of the first block). On a device opened with
    // pool_memory_hints() (4 MiB blocks) and a pool told the default, the
    // allocator's report contradicts the pool: no fit, the segment is the
    // request's size (fitted to a block those hints never make, it would be
    // memory of its own and the rest unused).
    let Some(size) = vrampool_tests::fitted_request_size(&vrampool_tests::device().0) else {
        return vrampool_tests::skipped_without_an_allocator_report();
    };
    let segment = |opened: wgpu::MemoryHints| {
        let (device, queue, _) = vrampool_tests::device_with_hints(opened);
        let options = vrampool::PoolOptions {
            config: Config {
                headroom: None,
                ..Config::default()
            },
            ..Default::default()
        };
        let pool = vrampool::Pool::new(device, queue, options).unwrap();
        let _block = pool
            .alloc(vrampool::AllocDesc::storage(size).read_write())
            .unwrap();
        pool.stats().total.reserved_bytes.current
    };
    let told_wrong = segment(vrampool::pool_memory_hints());
    assert_eq!(told_wrong, size);
    let told_right = segment(wgpu::MemoryHints::default());
    assert!(
        told_right > size,
        "a {} MiB request's segment is {} MiB: not fitted",
        size >> 20,
        told_right >> 20
    );
}

/// `Config::pytorch()` on the simulated device reproduces what PyTorch's own
/// caching allocator did with these logs on the H200 (data/traces/README.md):
/// the baseline the harness compares against is PyTorch, not a guess at it, and
/// the simulated device predicts the real one.
#[test]
fn the_pytorch_preset_reproduces_pytorchs_figures() {
    // (trace, replay ratio, min budget) from data/traces/pytorch_figures.json:
    // the budget a bisection of PyTorch's scan finds (resnet_train also fits
    // at 1.031 and 1.036-1.037, and runs out from 1.032 to 1.049: budgets
    // are not monotonic). Every row's, at every scale: tests/tests/figures.rs.
    let pytorch = [
        ("gpt_train", 1.123, 1.123),
        ("resnet_train", 1.193, 1.050),
        ("batch_sweep", 2.035, 1.124),
    ];
    for (name, ratio, min) in pytorch {
        let t = load(name);
        let replay_with = |limit: Option<f64>| run_with(Config::pytorch(), &t, limit).0;
        let r = replay_with(None);
        assert!(
            (r.reserved_ratio - ratio).abs() <= 0.005,
            "{name}: ratio {:.3}, PyTorch {ratio}",
            r.reserved_ratio
        );
        // PyTorch's minimum replays with no OOM; 1 % below it does not.
        assert_eq!(replay_with(Some(min + 0.002)).ooms, 0, "{name} at {min}");
        assert!(replay_with(Some(min - 0.01)).ooms > 0, "{name} below {min}");
    }
}
