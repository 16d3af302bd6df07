//! `bench`: a pool hit against raw `create_buffer` + `destroy`, and the
//! engine's own cost per operation with no device call.

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use indicatif::ProgressBar;
use serde::Serialize;
use vrampool::{AllocDesc, Config, Engine, Pool, PoolOptions, Request, Reuse, SimulatedDevice};

/// Sizes `bench` measures: 256 B to 256 MiB, ×16 apart.
pub const SIZES: [u64; 6] = [256, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// One row of the table.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Bytes per request.
    pub size: u64,
    /// Raw `create_buffer` + `destroy`, ns per pair (None on the simulated device).
    pub raw_ns: Option<f64>,
    /// Raw create + destroy + `poll`, so the memory really goes back, ns.
    pub raw_poll_ns: Option<f64>,
    /// Pool hit: `alloc` + drop of a cached block and `Pool::submitted` (the
    /// default `Reuse::AfterSubmit` makes a dropped block reusable at the next
    /// submit the pool learns of), ns per block.
    pub pool_ns: Option<f64>,
    /// `raw_ns / pool_ns`.
    pub ratio: Option<f64>,
    /// Buffers held at once in the `_live` figures (64, or fewer to stay within 1 GiB).
    pub live: u64,
    /// Raw: create `live` buffers, then destroy them all; ns per buffer. This is
    /// what a framework step does, and the driver cannot recycle one block.
    pub raw_live_ns: Option<f64>,
    /// Pool: `live` allocations from a warm cache, then drop them all and
    /// `Pool::submitted` once; ns per buffer.
    pub pool_live_ns: Option<f64>,
    /// `raw_live_ns / pool_live_ns`.
    pub ratio_live: Option<f64>,
    /// Raw, `live` at once, the two halves timed apart: `create_buffer`, ns
    /// per buffer.
    pub raw_create_ns: Option<f64>,
    /// ... and `destroy` of them all, then one `poll` (what the pool's
    /// release does), ns per buffer: what giving memory back costs.
    pub raw_destroy_ns: Option<f64>,
    /// The engine alone (simulated device, warm cache): ns per allocate or free.
    pub engine_ns_per_op: f64,
}

/// Runs `f` repeatedly for about `budget` (at most `max_iters` times),
/// returning ns per call. The clock is read once per batch, and batches double
/// while they take under a millisecond, so a clock read (tens of ns on some
/// VMs) does not count in a call that costs tens of ns.
fn time(budget: Duration, max_iters: u64, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let start = Instant::now();
    let (mut n, mut batch) = (0u64, 1u64);
    while n < max_iters && (n < 3 || start.elapsed() < budget) {
        let k = batch.min(max_iters - n);
        let t = Instant::now();
        for _ in 0..k {
            f();
        }
        n += k;
        if t.elapsed() < Duration::from_millis(1) {
            batch = (batch * 2).min(1 << 16);
        }
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

/// The engine's hot path at `size`: allocate + free of a cached block, ns per operation.
pub fn engine_ns(size: u64, budget: Duration) -> f64 {
    // Room for the nine blocks held at once, whatever the size.
    let device = SimulatedDevice::new(size.saturating_mul(16).max(1 << 40));
    let mut e = Engine::new(device, Config::default()).expect("default config is valid");
    // A few live neighbours, so the free path coalesces as in a real workload.
    let _keep: Vec<_> = (0..8)
        .map(|_| e.allocate(Request::new(size, 0)).expect("fits"))
        .collect();
    let per_pair = time(budget, u64::MAX, || {
        let a = e.allocate(Request::new(black_box(size), 0)).expect("fits");
        e.free(black_box(a.id)).expect("live");
    });
    per_pair / 2.0
}

/// Blocks each thread of `bench --threads` holds at once: a frame's
/// temporaries, allocated, dropped, then one `Pool::submitted` (the submit
/// that makes them reusable for the next frame).
pub const FRAME: usize = 16;

/// One row of `bench --threads`: threads allocating and dropping on one pool.
#[derive(Debug, Serialize)]
pub struct ThreadRow {
    /// The pool's `Reuse`: `after_submit` (the default; a `Pool::submitted`
    /// ends each frame) or `immediate` (no submit needed).
    pub reuse: &'static str,
    /// Threads sharing the pool.
    pub threads: usize,
    /// Bytes per request.
    pub size: u64,
    /// Pool hits (alloc + drop, and a `Pool::submitted` per [`FRAME`]
    /// hits) per second, all threads together.
    pub hits_per_s: f64,
    /// `hits_per_s` over the first row's (one thread, when `--threads` starts at 1).
    pub scaling: f64,
    /// Allocations the cache did not serve while measuring (0 when every
    /// operation was the hit it is counted as).
    pub cache_misses: u64,
}

/// `threads` threads at once each run frames on `pool` for `budget`: allocate
/// [`FRAME`] blocks of `size`, drop them, and (with `Reuse::AfterSubmit`)
/// `Pool::submitted`; hits per second, all threads together, for each count.
/// An allocation the pool refuses ends the run with its error.
pub fn threads(
    pool: &Pool,
    reuse: Reuse,
    counts: &[usize],
    size: u64,
    budget: Duration,
) -> Result<Vec<ThreadRow>> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Barrier, Mutex};
    let block = |size| AllocDesc::storage(size).read_write();
    let mut rows: Vec<ThreadRow> = Vec::new();
    for &n in counts {
        // Warm the cache with a frame's blocks per thread, each on its thread.
        let warmed: Vec<Result<(), vrampool::Error>> = std::thread::scope(|s| {
            let spawned: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        let frame = (0..FRAME)
                            .map(|_| pool.alloc(block(size)))
                            .collect::<Result<Vec<_>, _>>()?;
                        drop(frame);
                        Ok(())
                    })
                })
                .collect();
            spawned
                .into_iter()
                .map(|h| h.join().unwrap_or(Ok(())))
                .collect()
        });
        warmed.into_iter().collect::<Result<(), _>>()?;
        pool.submitted();
        let misses_before = pool.stats().counters.cache_misses;
        let (done, hits) = (AtomicBool::new(false), AtomicU64::new(0));
        let failed: Mutex<Option<vrampool::Error>> = Mutex::new(None);
        let start = Barrier::new(n + 1);
        let elapsed = std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    start.wait();
                    let mut k = 0u64;
                    let mut frame = Vec::with_capacity(FRAME);
                    'run: while !done.load(Ordering::Relaxed) {
                        for _ in 0..4 {
                            for _ in 0..FRAME {
                                match pool.alloc(block(black_box(size))) {
                                    Ok(b) => frame.push(b),
                                    Err(e) => {
                                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                                        done.store(true, Ordering::Relaxed);
                                        break 'run;
                                    }
                                }
                            }
                            frame.clear();
                            if reuse == Reuse::AfterSubmit {
                                pool.submitted();
                            }
                            k += FRAME as u64;
                        }
                    }
                    hits.fetch_add(k, Ordering::Relaxed);
                });
            }
            start.wait();
            let t = Instant::now();
            while !done.load(Ordering::Relaxed) && t.elapsed() < budget {
                std::thread::sleep(Duration::from_millis(1));
            }
            done.store(true, Ordering::Relaxed);
            t.elapsed()
        });
        if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e.into());
        }
        let hits_per_s = hits.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64();
        let base = rows.first().map_or(hits_per_s, |r| r.hits_per_s);
        rows.push(ThreadRow {
            reuse: match reuse {
                Reuse::AfterSubmit => "after_submit",
                Reuse::Immediate => "immediate",
            },
            threads: n,
            size,
            hits_per_s,
            scaling: hits_per_s / base,
            cache_misses: pool.stats().counters.cache_misses - misses_before,
        });
    }
    pool.empty_cache();
    Ok(rows)
}

/// Rounds of `live` buffers of `desc` created, then destroyed and one `poll`,
/// for about `budget` (at least 3, at most `rounds`): ns per buffer created,
/// and per buffer destroyed. The poll does not wait, as the pool's release
/// does not (`flush_releases`): a free the device defers past it would be
/// timed in the next round's create.
fn create_then_destroy(
    device: &wgpu::Device,
    desc: &wgpu::BufferDescriptor<'_>,
    live: u64,
    rounds: u64,
    budget: Duration,
) -> (f64, f64) {
    let (mut create, mut destroy, mut n) = (Duration::ZERO, Duration::ZERO, 0u64);
    let start = Instant::now();
    while n < rounds && (n < 3 || start.elapsed() < budget) {
        let t = Instant::now();
        let held: Vec<_> = (0..live).map(|_| device.create_buffer(desc)).collect();
        create += t.elapsed();
        let t = Instant::now();
        for b in held {
            b.destroy();
        }
        let _ = device.poll(wgpu::PollType::Poll);
        destroy += t.elapsed();
        n += 1;
    }
    let per = |d: Duration| d.as_nanos() as f64 / (n * live) as f64;
    (per(create), per(destroy))
}

/// Measures every size on `device` (or only the engine when `None`).
pub fn run(
    gpu: Option<(&wgpu::Device, &wgpu::Queue)>,
    memory_hints: wgpu::MemoryHints,
    sizes: &[u64],
    budget: Duration,
    bar: &ProgressBar,
) -> Result<Vec<Row>> {
    // Told the hints the device was opened with, so its segments fit the
    // blocks those hints make (`Config::fit_device_blocks`).
    let options = PoolOptions {
        memory_hints,
        ..PoolOptions::default()
    };
    let pool = match gpu {
        Some((d, q)) => Some(Pool::new(d.clone(), q.clone(), options)?),
        None => None,
    };
    // The raw buffers are made outside any error scope (a scope in the timed
    // loop would be timed too): a device that refuses one reports it here,
    // not through wgpu's default handler, which panics.
    let refused = Arc::new(Mutex::new(None::<String>));
    if let Some((device, _)) = gpu {
        let first = Arc::clone(&refused);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            first
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| e.to_string());
        }));
    }
    let mut rows = Vec::new();
    for &size in sizes {
        bar.set_message(vrampool::fmt_bytes(size));
        let (mut raw_ns, mut raw_poll_ns, mut pool_ns) = (None, None, None);
        let live = ((1u64 << 30) / size).clamp(1, 64);
        let (mut raw_live_ns, mut pool_live_ns) = (None, None);
        let (mut raw_create_ns, mut raw_destroy_ns) = (None, None);
        if let (Some((device, _)), Some(pool)) = (gpu, &pool) {
            // Big buffers cost milliseconds: cap iterations so each size takes ~budget.
            let max = if size >= 64 << 20 { 40 } else { 1_000_000 };
            let desc = wgpu::BufferDescriptor {
                label: Some("vrampool bench raw"),
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            };
            raw_ns = Some(time(budget, max, || {
                let b = device.create_buffer(&desc);
                b.destroy();
            }));
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
            raw_poll_ns = Some(time(budget, max, || {
                let b = device.create_buffer(&desc);
                b.destroy();
                drop(b);
                let _ = device.poll(wgpu::PollType::Poll);
            }));
            // Tensors: bound read_write, packed in shared segments.
            let block = |size| AllocDesc::storage(size).read_write();
            drop(pool.alloc(block(size))?); // warm the cache
            pool.submitted();
            pool_ns = Some(time(budget, 10_000_000, || {
                let b = pool.alloc(block(black_box(size))).expect("cached");
                drop(black_box(b));
                pool.submitted();
            }));
            let rounds = (max / live).max(3);
            raw_live_ns = Some(
                time(budget, rounds, || {
                    let held: Vec<_> = (0..live).map(|_| device.create_buffer(&desc)).collect();
                    for b in held {
                        b.destroy();
                    }
                }) / live as f64,
            );
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
            let (create, destroy) = create_then_destroy(device, &desc, live, rounds, budget);
            (raw_create_ns, raw_destroy_ns) = (Some(create), Some(destroy));
            let warm: Vec<_> = (0..live)
                .map(|_| pool.alloc(block(size)))
                .collect::<Result<_, _>>()?;
            drop(warm);
            pool.submitted();
            pool_live_ns = Some(
                time(budget, 10_000_000 / live, || {
                    let held: Vec<_> = (0..live)
                        .map(|_| pool.alloc(block(black_box(size))).expect("cached"))
                        .collect();
                    drop(black_box(held));
                    pool.submitted();
                }) / live as f64,
            );
            pool.empty_cache();
            // Every phase of this size: the raw buffers are the ones made
            // outside an error scope (the pool's own are in its scopes).
            if let Some(e) = refused.lock().unwrap_or_else(|p| p.into_inner()).take() {
                bail!(
                    "the GPU refused a buffer while measuring {} (bench holds up to {live} of \
                     them at once): {e}; give smaller --sizes",
                    vrampool::fmt_bytes(size)
                );
            }
        }
        rows.push(Row {
            size,
            raw_ns,
            raw_poll_ns,
            pool_ns,
            ratio: raw_ns.zip(pool_ns).map(|(r, p)| r / p),
            live,
            raw_live_ns,
            pool_live_ns,
            ratio_live: raw_live_ns.zip(pool_live_ns).map(|(r, p)| r / p),
            raw_create_ns,
            raw_destroy_ns,
            engine_ns_per_op: engine_ns(size, budget),
        });
        bar.inc(1);
    }
    Ok(rows)
}
