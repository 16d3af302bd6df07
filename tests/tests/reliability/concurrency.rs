//! Eight threads pulling at one pool: random allocate / free / empty_cache /
//! stats, on the simulated device (the engine behind a mutex, as any backend
//! would share it) and through `Pool` on lavapipe (handles dropped on other
//! threads, zeroing submissions, empty_cache polling while others allocate).
//! Afterwards: no deadlock, no lost block, stats equal a recount from the
//! snapshot, the engine's invariants hold, and no two live blocks share bytes.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vrampool::fault::{Fault, Faults};
use vrampool::{
    Access, AllocDesc, Config, Engine, Pool, PoolBuffer, PoolOptions, Request, SimulatedDevice,
    Snapshot, SnapshotState,
};
use vrampool_tests::{Range, Rng, Tagger};

use super::{env_count, pool_with};

const THREADS: u64 = 8;

/// A size: mostly small tensors, some medium, a few large.
fn size(rng: &mut Rng) -> u64 {
    match rng.below(100) {
        0..=69 => 1 + rng.below(16 << 10),
        70..=97 => (16 << 10) + rng.below(1 << 20),
        _ => (1 << 20) + rng.below(8 << 20),
    }
}

/// Runs `work(thread)` on `THREADS` threads and waits for all of them, failing
/// (not hanging) if one has not finished within `limit`: a deadlock.
fn on_threads(limit: Duration, work: impl Fn(u64) + Send + Sync + 'static) {
    let work = Arc::new(work);
    let (done, finished) = mpsc::channel();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (work, done) = (Arc::clone(&work), done.clone());
            std::thread::spawn(move || {
                work(t);
                done.send(t).unwrap();
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + limit;
    for _ in 0..THREADS {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match finished.recv_timeout(left) {
            Ok(_) => {}
            Err(_) => panic!("a thread has not finished after {limit:?}: deadlock?"),
        }
    }
    for h in handles {
        h.join().expect("a worker panicked");
    }
}

/// Stats recounted from a snapshot: (live blocks, allocated, reserved, segments).
fn recount(s: &Snapshot) -> (u64, u64, u64, u64) {
    let mut r = (0, 0, 0, s.segments.len() as u64);
    for seg in &s.segments {
        r.2 += seg.size;
        for b in seg.blocks.iter().filter(|b| b.state == SnapshotState::Live) {
            r.0 += 1;
            r.1 += b.size;
        }
    }
    r
}

#[test]
fn eight_threads_share_one_engine_behind_a_mutex() {
    // The engine takes `&mut self` (it is not Sync by design): threads share it
    // behind a mutex, as the wgpu binding's Pool does. This checks that its
    // state survives any interleaving of whole operations.
    let ops = env_count("VRAMPOOL_THREAD_OPS", 100_000);
    let engine = Arc::new(Mutex::new(
        Engine::new(SimulatedDevice::new(64 << 30), Config::default()).unwrap(),
    ));
    let held = Arc::new(Mutex::new(Vec::new()));
    let (e, h) = (Arc::clone(&engine), Arc::clone(&held));
    on_threads(Duration::from_secs(300), move |t| {
        let mut rng = Rng(0x5eed_0000 + t);
        let mut mine = Vec::new();
        for _ in 0..ops {
            match rng.below(1000) {
                0 => {
                    e.lock().unwrap().empty_cache();
                }
                1..=50 => {
                    let engine = e.lock().unwrap();
                    engine.check_invariants().unwrap();
                    let s = engine.stats();
                    assert_eq!(s.total.reserved_bytes.current, engine.backend().used());
                }
                n if n < 530 || mine.is_empty() => {
                    if mine.len() < 200 {
                        let a = e.lock().unwrap().allocate(Request::new(size(&mut rng), 1));
                        mine.push(a.unwrap());
                    }
                }
                _ => {
                    let a = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                    e.lock().unwrap().free(a.id).unwrap();
                }
            }
        }
        h.lock().unwrap().extend(mine);
    });
    let engine = engine.lock().unwrap();
    engine.check_invariants().unwrap();
    let held = held.lock().unwrap();
    let s = engine.stats();
    let (blocks, allocated, reserved, segments) = recount(&engine.snapshot());
    assert_eq!(blocks, held.len() as u64, "no block lost");
    assert_eq!(allocated, held.iter().map(|a| a.size).sum::<u64>());
    assert_eq!(s.total.allocated_bytes.current, allocated);
    assert_eq!(s.total.reserved_bytes.current, reserved);
    assert_eq!(s.total.segments.current, segments);
    assert_eq!(s.counters.allocs - s.counters.frees, blocks);
    assert!(s.counters.allocs > THREADS * ops / 3, "{:?}", s.counters);
}

#[test]
fn eight_threads_on_one_pool_on_a_real_device() {
    let ops = env_count("VRAMPOOL_THREAD_OPS", 100_000);
    let pool = Arc::new(pool_with(Config::default()));
    // Handles given away to be dropped by another thread.
    let exchange = Arc::new(Mutex::new(Vec::<PoolBuffer>::new()));
    let kept = Arc::new(Mutex::new(Vec::<PoolBuffer>::new()));
    let (p, x, k) = (Arc::clone(&pool), Arc::clone(&exchange), Arc::clone(&kept));
    on_threads(Duration::from_secs(600), move |t| {
        let mut rng = Rng(0xc0ff_ee00 + t);
        let mut mine: Vec<PoolBuffer> = Vec::new();
        for _ in 0..ops {
            match rng.below(1000) {
                0 => {
                    p.empty_cache();
                }
                1..=50 => {
                    let s = p.stats();
                    assert_eq!(
                        s.total.reserved_bytes.current,
                        s.total.allocated_bytes.current
                            + s.total.pending_bytes.current
                            + s.total.cached_bytes.current
                    );
                }
                51..=60 => {
                    if let Some(b) = mine.pop() {
                        x.lock().unwrap().push(b);
                    }
                }
                61..=70 => {
                    let theirs = x.lock().unwrap().pop();
                    drop(theirs);
                }
                71..=80 => {
                    // No thread records commands (zeroing is submitted by the
                    // pool at once): what was dropped may be reused.
                    p.submitted();
                }
                n if n < 540 || mine.is_empty() => {
                    if mine.len() < 100 {
                        let access = [Access::ReadWrite, Access::ReadOnly, Access::Any]
                            [rng.below(3) as usize];
                        let mut desc = AllocDesc::storage(size(&mut rng))
                            .access(access)
                            .label("thread");
                        if n % 50 == 0 {
                            desc = desc.zeroed();
                        }
                        mine.push(p.alloc(desc).unwrap());
                    }
                }
                _ => {
                    mine.swap_remove(rng.below(mine.len() as u64) as usize);
                }
            }
        }
        k.lock().unwrap().extend(mine);
    });
    let mut held = std::mem::take(&mut *kept.lock().unwrap());
    held.append(&mut exchange.lock().unwrap());
    pool.check_invariants().unwrap();
    let s = pool.stats();
    let (blocks, allocated, reserved, segments) = recount(&pool.snapshot());
    assert_eq!(blocks, held.len() as u64, "no block lost");
    assert_eq!(allocated, held.iter().map(|b| b.block_size()).sum::<u64>());
    assert_eq!(s.total.allocated_bytes.current, allocated);
    assert_eq!(s.total.reserved_bytes.current, reserved);
    assert_eq!(s.total.segments.current, segments);
    assert_eq!(s.counters.allocs - s.counters.frees, blocks);
    assert!(s.counters.allocs > THREADS * ops / 3, "{:?}", s.counters);
    // The blocks the threads ended with share no byte, on the GPU.
    let tagger = Tagger::new(pool.device(), pool.queue());
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    drop(held);
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    pool.empty_cache();
    assert_eq!(pool.stats().total.reserved_bytes.current, 0);
}

#[test]
fn eight_threads_allocate_through_alloc_async_while_the_device_refuses() {
    // The browser's path from many threads at once (natively, alloc_async
    // awaits the same scopes): each thread mixes alloc_async and alloc, drops
    // and submits, and programs the device to refuse some creates. No
    // deadlock; refusals are clean errors; what the device holds equals the
    // pool's reserved bytes (an independent count); the blocks held at the end
    // share no byte on the GPU.
    let ops = env_count("VRAMPOOL_THREAD_OPS", 100_000) / 10;
    let (device, queue, _) = vrampool_tests::device();
    let faults = Faults::new();
    let options = PoolOptions {
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let pool = Arc::new(Pool::new(device, queue, options).unwrap());
    let kept = Arc::new(Mutex::new(Vec::<PoolBuffer>::new()));
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (p, k, f, r) = (
        Arc::clone(&pool),
        Arc::clone(&kept),
        faults.clone(),
        Arc::clone(&refused),
    );
    on_threads(Duration::from_secs(600), move |t| {
        let mut rng = Rng(0xa5a5_0000 + t);
        let mut mine: Vec<PoolBuffer> = Vec::new();
        for _ in 0..ops {
            match rng.below(100) {
                0..=2 => f.refuse(1 + rng.below(3), Fault::OutOfMemory),
                3..=7 => {
                    p.submitted();
                }
                n if n < 55 || mine.is_empty() => {
                    if mine.len() < 50 {
                        let access = [Access::ReadWrite, Access::ReadOnly, Access::Any]
                            [rng.below(3) as usize];
                        let desc = AllocDesc::storage(size(&mut rng))
                            .access(access)
                            .label("async");
                        let got = if n % 2 == 0 {
                            pollster::block_on(p.alloc_async(desc))
                        } else {
                            p.alloc(desc)
                        };
                        match got {
                            Ok(b) => mine.push(b),
                            Err(vrampool::Error::OutOfMemory(i)) => {
                                assert!(i.device_refused, "no limit: only the device refuses");
                                r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    }
                }
                _ => {
                    mine.swap_remove(rng.below(mine.len() as u64) as usize);
                }
            }
        }
        k.lock().unwrap().extend(mine);
    });
    pool.check_invariants().unwrap();
    let s = pool.stats();
    assert_eq!(
        s.total.reserved_bytes.current,
        faults.held(),
        "an independent count"
    );
    assert_eq!(
        s.counters.ooms,
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        s.counters.ooms > 0,
        "the device refused some requests to the end: {:?}",
        s.counters
    );
    assert!(s.counters.allocs > THREADS * ops / 4, "{:?}", s.counters);
    let held = std::mem::take(&mut *kept.lock().unwrap());
    let tagger = Tagger::new(pool.device(), pool.queue());
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    drop(held);
    pool.submitted();
    pool.empty_cache();
    assert_eq!(pool.stats().total.reserved_bytes.current, 0);
    assert_eq!(faults.held(), 0);
}
