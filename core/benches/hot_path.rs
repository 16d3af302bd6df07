//! The engine's own cost per operation, with no device call: allocate and free
//! served from the cache (the hot path), on the simulated device; and the same
//! with the free deferred and reclaimed by a mark (`Reuse::AfterSubmit`).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use vrampool::{Config, Engine, Request, SimulatedDevice};

fn hot_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("hot_path");
    for (name, size) in [
        ("256B", 256u64),
        ("64KiB", 64 << 10),
        ("1MiB", 1 << 20),
        ("16MiB", 16 << 20),
        // Large with 16 GiB live around it (above H / 50's 192 MiB cap): the
        // class whose lookups go through `Placement::fullest_within`.
        ("256MiB", 256 << 20),
    ] {
        // A warm pool with 64 live blocks around, so the free index is not trivial.
        let mut e = Engine::new(SimulatedDevice::new(64 << 30), Config::default()).unwrap();
        let _keep: Vec<_> = (0..64)
            .map(|i| e.allocate(Request::new(size + i * 512, 0)).unwrap())
            .collect();
        let warm = e.allocate(Request::new(size, 0)).unwrap();
        e.free(warm.id).unwrap();
        g.bench_function(format!("alloc+free {name}"), |b| {
            b.iter(|| {
                let a = e.allocate(black_box(Request::new(size, 0))).unwrap();
                e.free(black_box(a.id)).unwrap();
            })
        });
        // The same with a deferred free made reusable by a mark, as a block
        // dropped before a submit is (one block per submit: the worst case).
        g.bench_function(format!("alloc+defer+reclaim {name}"), |b| {
            b.iter(|| {
                let a = e.allocate(black_box(Request::new(size, 0))).unwrap();
                e.defer_free(black_box(a.id)).unwrap();
                let mark = e.defer_mark();
                e.reclaim_deferred(mark);
            })
        });
        assert_eq!(
            e.stats().counters.device_allocs,
            e.stats().total.segments.current
        );
    }
    // Churn: random sizes, half the ops free.
    g.bench_function("churn 1k live", |b| {
        let mut e = Engine::new(SimulatedDevice::new(64 << 30), Config::default()).unwrap();
        let mut x = 0x2545F4914F6CDD1Du64;
        let mut live = Vec::with_capacity(2048);
        b.iter_batched(
            || (),
            |_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if live.len() < 1000 || x.is_multiple_of(2) {
                    live.push(
                        e.allocate(Request::new(256 + (x % (4 << 20)), 0))
                            .unwrap()
                            .id,
                    );
                } else {
                    let i = (x as usize / 2) % live.len();
                    e.free(live.swap_remove(i)).unwrap();
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
