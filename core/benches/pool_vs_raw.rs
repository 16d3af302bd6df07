//! A pool hit against raw wgpu: allocate + free through `Pool` (the block comes
//! from the cache) versus `create_buffer` + `destroy` on the same device. Runs on
//! the first adapter wgpu finds (lavapipe here, the H200 in BENCHMARKS.md).
//!
//! Beside them, the engine's own allocate + free of a cached block (the
//! simulated device), and the default pool with its front cache off (every
//! hit through the engine's lock: the path before the front cache).
//!
//! Two hits: with `Reuse::Immediate` (the block is reusable as soon as it is
//! dropped) and with the default `Reuse::AfterSubmit` (dropped, then made
//! reusable by `Pool::submitted`, as a frame's submit does).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use vrampool::{AllocDesc, Config, Engine, Pool, PoolOptions, Request, Reuse, SimulatedDevice};

fn device() -> (wgpu::Device, wgpu::Queue) {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .expect("no GPU adapter (Debian: apt-get install mesa-vulkan-drivers)");
    let info = adapter.get_info();
    eprintln!(
        "adapter: {} ({:?}, driver {})",
        info.name, info.backend, info.driver_info
    );
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("request_device")
}

fn pool_vs_raw(c: &mut Criterion) {
    let (device, queue) = device();
    let max = device.limits().max_buffer_size;
    let pool = Pool::new(device.clone(), queue.clone(), PoolOptions::default()).unwrap();
    let immediate = Pool::new(
        device.clone(),
        queue,
        PoolOptions {
            reuse: Reuse::Immediate,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    // The hit path before the front cache: every alloc and drop through the
    // engine's lock.
    let locked = Pool::new(
        device.clone(),
        pool.queue().clone(),
        PoolOptions {
            front_cache: false,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let mut g = c.benchmark_group("pool_vs_raw");
    for (name, size) in [
        ("256B", 256u64),
        ("64KiB", 64 << 10),
        ("1MiB", 1 << 20),
        ("16MiB", 16 << 20),
        ("256MiB", 256 << 20),
    ] {
        if size > max {
            continue;
        }
        let block = AllocDesc::storage(size).read_write();
        drop(immediate.alloc(block).unwrap()); // warm the caches
        drop(pool.alloc(block).unwrap());
        pool.submitted();
        drop(locked.alloc(block).unwrap());
        locked.submitted();
        // The engine alone (simulated device): what a hit costs under the lock.
        let mut engine = Engine::new(SimulatedDevice::new(64 << 30), Config::default()).unwrap();
        let warm = engine.allocate(Request::new(size, 0)).unwrap();
        engine.free(warm.id).unwrap();
        g.bench_function(format!("engine alloc+free {name}"), |b| {
            b.iter(|| {
                let a = engine.allocate(black_box(Request::new(size, 0))).unwrap();
                engine.free(black_box(a.id)).unwrap();
            })
        });
        g.bench_function(format!("pool hit {name}"), |b| {
            b.iter(|| drop(black_box(immediate.alloc(black_box(block)).unwrap())))
        });
        g.bench_function(format!("pool hit after submit {name}"), |b| {
            b.iter(|| {
                drop(black_box(pool.alloc(black_box(block)).unwrap()));
                pool.submitted();
            })
        });
        g.bench_function(
            format!("pool hit after submit, front cache off {name}"),
            |b| {
                b.iter(|| {
                    drop(black_box(locked.alloc(black_box(block)).unwrap()));
                    locked.submitted();
                })
            },
        );
        let create_destroy = || {
            let buf = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            });
            buf.destroy();
        };
        g.bench_function(format!("raw create+destroy {name}"), |b| {
            b.iter(create_destroy);
            // Let wgpu free what was destroyed before the next size.
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
        });
        // What an app that wants the memory back pays: wgpu frees a destroyed
        // buffer only when the device is polled.
        g.bench_function(format!("raw create+destroy+poll {name}"), |b| {
            b.iter(|| {
                create_destroy();
                let _ = device.poll(wgpu::PollType::wait_indefinitely());
            });
        });
    }
    g.finish();
}

criterion_group!(benches, pool_vs_raw);
criterion_main!(benches);
