//! The pool on a real wgpu device (Mesa lavapipe in CI): data never leaks
//! between blocks (checked on the GPU), zeroed reuse reads zeros, empty_cache
//! lowers wgpu's own allocator report, out-of-memory is an error the pool
//! survives.

use vrampool::fault::{Fault, Faults};
use vrampool::{Access, AllocDesc, Config, Error, Limit, Pool, PoolBuffer, PoolOptions};
use vrampool_tests::{Range, Rng, Tagger, device, pool_with, read_back};
use wgpu::BufferUsages as U;

fn pool() -> Pool {
    pool_with(Config::default())
}

#[test]
fn the_tag_check_detects_overlap() {
    // Negative control: two overlapping ranges of one raw buffer must be caught,
    // or the no-overlap test below would prove nothing.
    let (device, queue, _) = device();
    let tagger = Tagger::new(&device, &queue);
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 8192,
        usage: U::STORAGE,
        mapped_at_creation: false,
    });
    let a = Range {
        buffer: &buf,
        offset: 0,
        size: 4096,
    };
    let b = Range {
        buffer: &buf,
        offset: 2048,
        size: 4096,
    };
    assert!(tagger.tag_and_verify(&[a, b]) > 0);
    let c = Range {
        buffer: &buf,
        offset: 4096,
        size: 4096,
    };
    assert_eq!(tagger.tag_and_verify(&[a, c]), 0);
}

#[test]
fn live_blocks_never_share_bytes_on_the_gpu() {
    let pool = pool();
    let tagger = Tagger::new(pool.device(), pool.queue());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live: Vec<PoolBuffer> = Vec::new();
    let mut checks = 0;
    for step in 0..3000 {
        if live.is_empty() || rng.below(100) < 55 {
            let size = match rng.below(10) {
                0..=5 => 4 + rng.below(64 << 10),
                6..=8 => (64 << 10) + rng.below(1 << 20),
                _ => (1 << 20) + rng.below(6 << 20),
            } & !3;
            // Every placement: packed read-write and read-only blocks, and
            // blocks with a buffer of their own.
            let access = [
                Access::ReadWrite,
                Access::ReadWrite,
                Access::ReadOnly,
                Access::Any,
            ][rng.below(4) as usize];
            live.push(
                pool.alloc(
                    AllocDesc::storage(size.max(4))
                        .access(access)
                        .label("tagged"),
                )
                .unwrap(),
            );
        } else {
            let i = rng.below(live.len() as u64) as usize;
            live.swap_remove(i);
        }
        if step % 50 == 49 {
            // A frame: nothing recorded is left unsubmitted, so what was
            // dropped may be reused.
            pool.submitted();
        }
        // Every frame, every live block: two that share bytes show it at
        // the first frame both are live over (a block handed out and
        // dropped within one frame is tagged at none).
        if step % 50 == 49 {
            let ranges: Vec<Range> = live.iter().map(|b| Range::from(&**b)).collect();
            assert_eq!(
                tagger.tag_and_verify(&ranges),
                0,
                "corrupted tags at step {step}"
            );
            checks += 1;
        }
    }
    assert!(checks > 0);
    let s = pool.stats();
    assert!(
        s.counters.cache_hits > 1000,
        "the pool reused memory: {:?}",
        s.counters
    );
    assert!(
        s.total.segments.current < live.len() as u64,
        "blocks share segments"
    );
    assert_eq!(
        s.total.allocated_bytes.current,
        live.iter().map(|b| b.block_size()).sum::<u64>()
    );
    pool.check_invariants().unwrap();
    drop(live);
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
}

#[test]
fn zeroed_reuse_reads_back_zeros() {
    let pool = pool();
    let tagger = Tagger::new(pool.device(), pool.queue());
    let size = 64 << 10;
    let a = pool.alloc(AllocDesc::storage(size)).unwrap();
    let (buffer, offset) = (a.buffer().clone(), a.offset());
    pool.queue()
        .write_buffer(a.buffer(), a.offset(), &vec![0xAB; size as usize]);
    pool.queue().submit([]);
    drop(a);
    pool.submitted(); // the write was submitted: a's bytes may be reused

    // Without zeroing, the reused block shows the old bytes: the test below is meaningful.
    let b = pool.alloc(AllocDesc::storage(size)).unwrap();
    assert_eq!(
        (b.buffer(), b.offset()),
        (&buffer, offset),
        "same block reused"
    );
    assert_eq!(tagger.count_nonzero(&[Range::from(&*b)]), (size / 4) as u32);
    drop(b);
    pool.submitted();

    let hits = pool.stats().counters.cache_hits;
    let c = pool.alloc(AllocDesc::storage(size).zeroed()).unwrap();
    assert_eq!((c.buffer(), c.offset()), (&buffer, offset));
    assert_eq!(pool.stats().counters.cache_hits, hits + 1);
    assert_eq!(tagger.count_nonzero(&[Range::from(&*c)]), 0);
}

#[test]
fn empty_cache_lowers_wgpus_reserved_bytes() {
    let pool = pool();
    let segment = 300u64 << 20; // above gpu-allocator's 256 MiB blocks: dedicated memory
    let Some(before) = pool.allocator_report() else {
        // wgpu's GL backend has no allocator to report on.
        assert_eq!(vrampool_tests::backend(), wgpu::Backend::Gl);
        eprintln!(
            "skipped: the {:?} backend gives no allocator report",
            vrampool_tests::backend()
        );
        return;
    };
    let blocks: Vec<_> = (0..3)
        .map(|_| pool.alloc(AllocDesc::storage(segment)).unwrap())
        .collect();
    drop(blocks);
    let s = pool.stats();
    assert_eq!(s.total.allocated_bytes.current, 0);
    assert_eq!(
        s.total.reserved_bytes.current,
        3 * segment,
        "freed blocks stay held"
    );
    // No submit was declared: they are pending, and empty_cache abandons
    // their segments (wgpu frees an idle buffer as soon as it is dropped).
    assert_eq!(s.total.pending_bytes.current, 3 * segment);
    let held = pool.allocator_report().unwrap();
    assert!(held.total_reserved_bytes >= before.total_reserved_bytes + 3 * segment);

    let released = pool.empty_cache();
    assert_eq!(released, 3 * segment);
    let after = pool.allocator_report().unwrap();
    assert!(
        held.total_reserved_bytes - after.total_reserved_bytes >= 3 * segment,
        "wgpu reserved {} -> {} after releasing {released}",
        held.total_reserved_bytes,
        after.total_reserved_bytes
    );
    let s = pool.stats();
    assert_eq!(s.total.reserved_bytes.current, 0);
    assert_eq!(s.total.pending_bytes.current, 0);
    assert_eq!(s.counters.segments_abandoned, 3);
    assert_eq!(s.counters.last_empty_cache_bytes, 3 * segment);
}

#[test]
fn out_of_memory_under_a_limit_is_an_error_and_the_pool_recovers() {
    let pool = pool_with(Config {
        limit: Some(Limit::Bytes(64 << 20)),
        ..Config::default()
    });
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s2 = seen.clone();
    pool.on_oom(move |i| s2.store(i.requested, std::sync::atomic::Ordering::SeqCst));
    let a = pool
        .alloc(AllocDesc::storage(48 << 20).label("big"))
        .unwrap();
    let before = pool.stats();
    let err = pool.alloc(AllocDesc::storage(32 << 20)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::OutOfMemory(_)));
    assert!(
        msg.contains("tried to allocate 32.00 MiB") && msg.contains("limit 64.00 MiB"),
        "{msg}"
    );
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 32 << 20);
    let after = pool.stats();
    assert_eq!(
        after.total, before.total,
        "a refused request changes no figure"
    );
    assert_eq!(after.counters.ooms, 1);
    drop(a);
    let b = pool.alloc(AllocDesc::storage(32 << 20)).unwrap();
    let tagger = Tagger::new(pool.device(), pool.queue());
    assert_eq!(
        tagger.tag_and_verify(&[Range::from(&*b)]),
        0,
        "the buffer handed out after an OOM is valid"
    );
}

#[test]
fn a_request_above_max_buffer_size_is_an_error() {
    let pool = pool();
    let max = pool.device().limits().max_buffer_size;
    let err = pool.alloc(AllocDesc::storage(max + 1)).unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { requested, max_buffer_size }
            if requested == (max + 1).next_multiple_of(4) && max_buffer_size == max),
        "{err}"
    );
    assert!(err.to_string().contains("max_buffer_size"));
    assert_eq!(
        pool.stats().total.reserved_bytes.current,
        0,
        "nothing reserved"
    );
    assert!(matches!(
        pool.alloc(AllocDesc::storage(0)),
        Err(Error::ZeroSize)
    ));
    let bad = pool
        .alloc(AllocDesc::storage(256).usage(U::MAP_READ | U::STORAGE))
        .unwrap_err();
    assert!(
        bad.to_string().contains("MAPPABLE_PRIMARY_BUFFERS"),
        "{bad}"
    );
    assert_eq!(pool.stats().total.reserved_bytes.current, 0);
    pool.alloc(AllocDesc::storage(1 << 20)).unwrap();
}

#[test]
fn alloc_async_refuses_what_the_pools_limit_does_not_allow() {
    // The engine's own limit refuses here, before any device call; the device's
    // refusals are the next tests'.
    let pool = pool_with(Config {
        limit: Some(Limit::Bytes(8 << 20)),
        ..Config::default()
    });
    let a = pollster::block_on(pool.alloc_async(AllocDesc::storage(4 << 20))).unwrap();
    let tagger = Tagger::new(pool.device(), pool.queue());
    assert_eq!(tagger.tag_and_verify(&[Range::from(&*a)]), 0);
    let err = pollster::block_on(pool.alloc_async(AllocDesc::storage(6 << 20))).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory(i) if !i.device_refused),
        "{err}"
    );
}

/// The two ways to allocate: at once (native) and awaiting the scopes (the browser's).
#[derive(Debug, Clone, Copy)]
enum Path {
    Alloc,
    Async,
}

impl Path {
    fn alloc(self, pool: &Pool, desc: AllocDesc<'_>) -> Result<PoolBuffer, Error> {
        match self {
            Path::Alloc => pool.alloc(desc),
            Path::Async => pollster::block_on(pool.alloc_async(desc)),
        }
    }
}

/// A pool whose device refuses the creates `faults` is told to, through wgpu's
/// error scopes, with a live block and a segment of releasable cache.
fn refusing_pool() -> (Pool, Faults, PoolBuffer) {
    let (device, queue, _) = device();
    let faults = Faults::new();
    let options = PoolOptions {
        config: Config {
            headroom: None,
            ..Config::default()
        },
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let pool = Pool::new(device, queue, options).unwrap();
    let keep = pool.alloc(AllocDesc::storage(4096).read_write()).unwrap();
    drop(
        pool.alloc(AllocDesc::storage(64 << 20).read_write())
            .unwrap(),
    );
    pool.submitted();
    assert!(pool.stats().releasable_bytes >= 64 << 20);
    (pool, faults, keep)
}

/// The size of [`fresh_request`]: above the small class and, after the 64 MiB
/// high water of [`refusing_pool`], below H / 50, so it is medium.
const FRESH: u64 = 1200 << 10;

/// A request no cached block serves: a packed read-only segment is planned.
fn fresh_request() -> AllocDesc<'static> {
    AllocDesc::storage(FRESH).read_only().label("fresh")
}

#[test]
fn a_device_refusal_takes_the_ladder_step_by_step_on_both_paths() {
    for path in [Path::Alloc, Path::Async] {
        // Step 1 refused: the pool asks for just the request, and gets it.
        let (pool, faults, _keep) = refusing_pool();
        let before = pool.stats();
        let creates = faults.creates();
        faults.refuse(1, Fault::OutOfMemory);
        let b = path.alloc(&pool, fresh_request()).unwrap();
        assert_eq!(
            faults.creates() - creates,
            2,
            "{path:?}: the planned segment, refused, then the exact one"
        );
        let seg = pool
            .snapshot()
            .segments
            .into_iter()
            .find(|s| s.blocks.iter().any(|b| b.label.as_deref() == Some("fresh")))
            .unwrap();
        assert_eq!(seg.size, FRESH, "{path:?}: a segment of just the request");
        let s = pool.stats();
        assert_eq!(
            (s.counters.alloc_retries, s.counters.ooms),
            (0, 0),
            "{path:?}"
        );
        assert_eq!(
            s.counters.bytes_released, before.counters.bytes_released,
            "{path:?}: nothing released"
        );
        let tagger = Tagger::new(pool.device(), pool.queue());
        assert_eq!(tagger.tag_and_verify(&[Range::from(&*b)]), 0, "{path:?}");
        pool.check_invariants().unwrap();

        // Steps 1 and 2 refused: the whole cache is released, then it fits.
        let (pool, faults, _keep) = refusing_pool();
        let releasable = pool.stats().releasable_bytes;
        faults.refuse(1, Fault::OutOfMemory);
        faults.refuse(2, Fault::OutOfMemory);
        let _b = path.alloc(&pool, fresh_request()).unwrap();
        let s = pool.stats();
        assert_eq!(s.counters.alloc_retries, 1, "{path:?}");
        assert_eq!(
            s.counters.bytes_released, releasable,
            "{path:?}: the cache went first"
        );
        assert_eq!(
            faults.held(),
            s.total.reserved_bytes.current,
            "{path:?}: an independent count"
        );

        // All three refused: an out-of-memory naming the device, and only the
        // OOM and retry counters and the released cache changed.
        let (pool, faults, _keep) = refusing_pool();
        let before = pool.stats();
        let creates = faults.creates();
        for n in 1..=3 {
            faults.refuse(n, Fault::OutOfMemory);
        }
        let err = path.alloc(&pool, fresh_request()).unwrap_err();
        assert_eq!(
            faults.creates() - creates,
            3,
            "{path:?}: the three steps of the ladder"
        );
        assert!(
            matches!(&err, Error::OutOfMemory(i) if i.device_refused),
            "{path:?}: {err}"
        );
        assert!(
            err.to_string().contains("the device refused the segment"),
            "{err}"
        );
        let after = pool.stats();
        assert_eq!(after.counters.ooms, 1);
        assert_eq!(after.counters.alloc_retries, 1);
        assert_eq!(
            after.counters.bytes_released, before.releasable_bytes,
            "{path:?}: all the cache"
        );
        assert_eq!(
            after.total.reserved_bytes.current,
            before.total.reserved_bytes.current - before.releasable_bytes
        );
        assert_eq!(
            faults.held(),
            after.total.reserved_bytes.current,
            "{path:?}: no refused buffer kept"
        );
        // Everything else as it was: no miss counted, no pool shown, no peak moved.
        assert_eq!(
            after,
            vrampool::fault::stats_after_refusal(&before, &after),
            "{path:?}"
        );
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_device_lost_while_creating_fails_every_later_request_on_both_paths() {
    for path in [Path::Alloc, Path::Async] {
        let (pool, faults, _keep) = refusing_pool();
        faults.refuse(1, Fault::Lost);
        let err = path.alloc(&pool, fresh_request()).unwrap_err();
        assert!(matches!(err, Error::DeviceLost(_)), "{path:?}: {err}");
        // Even a request the cache would serve.
        let err = path
            .alloc(&pool, AllocDesc::storage(4096).read_write())
            .unwrap_err();
        assert!(matches!(err, Error::DeviceLost(_)), "{path:?}: {err}");
        assert_eq!(pool.stats().counters.ooms, 0);
        // The pool knows it too (its observers were told).
        assert!(pool.device_lost().is_some(), "{path:?}");
        pool.check_invariants().unwrap();
    }
}

#[test]
fn weak_handles_upgrade_only_while_live() {
    let pool = pool();
    let a = pool.alloc(AllocDesc::storage(4096)).unwrap();
    let w = a.downgrade();
    let a2 = w.upgrade().expect("live");
    drop(a);
    assert!(w.is_alive(), "a clone still holds it");
    drop(a2);
    assert!(w.upgrade().is_none());
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
}

#[test]
fn a_scope_returns_everything_it_allocated() {
    let pool = pool();
    let keep = pool.alloc(AllocDesc::storage(1 << 20)).unwrap();
    let (sum, report) = pool.scope(|s| {
        let x = s.alloc(AllocDesc::storage(3 << 20).label("x")).unwrap();
        let y = s.alloc(AllocDesc::storage(5000).label("y")).unwrap();
        assert_eq!(s.pool().stats().total.allocations.current, 3);
        x.size() + y.size()
    });
    assert_eq!(sum, (3 << 20) + 5000);
    assert_eq!(report.allocations, 2);
    assert!(report.returned);
    let s = pool.stats();
    assert_eq!(s.total.allocations.current, 1);
    assert_eq!(s.total.allocated_bytes.current, keep.block_size());
}

#[test]
fn an_async_scope_counts_what_it_was_given_and_returns_it() {
    let pool = pool();
    let keep = pool.alloc(AllocDesc::storage(1 << 20)).unwrap();
    let max = pool.device().limits().max_buffer_size;
    let ((sum, refused), report) = pollster::block_on(pool.scope_async(async |s| {
        let x = s.alloc_async(AllocDesc::storage(3 << 20)).await.unwrap();
        let y = s.alloc_async(AllocDesc::storage(5000)).await.unwrap();
        assert_eq!(s.pool().stats().total.allocations.current, 3);
        // A refusal inside the scope is the caller's error and is not counted.
        let refused = s.alloc_async(AllocDesc::storage(max + 1)).await.is_err();
        (x.size() + y.size(), refused)
    }));
    assert_eq!(sum, (3 << 20) + 5000);
    assert!(refused);
    assert_eq!((report.allocations, report.bytes), (2, (3 << 20) + 5000));
    assert!(report.returned);
    let s = pool.stats();
    assert_eq!(s.total.allocations.current, 1);
    assert_eq!(s.total.allocated_bytes.current, keep.block_size());
}

#[test]
fn an_async_scope_dropped_part_way_gives_back_what_it_held() {
    let pool = pool();
    let keep = pool.alloc(AllocDesc::storage(1 << 20)).unwrap();
    let mut scope = Box::pin(pool.scope_async(async |s| {
        let _x = s.alloc_async(AllocDesc::storage(3 << 20)).await.unwrap();
        std::future::pending::<()>().await;
    }));
    // Natively the device answers at once: one poll allocates, then waits forever.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(scope.as_mut().poll(&mut cx).is_pending());
    let held = pool.stats().total.allocated_bytes.current;
    assert_eq!(held, keep.block_size() + (3 << 20));
    drop(scope);
    assert_eq!(
        pool.stats().total.allocated_bytes.current,
        keep.block_size()
    );
    pool.check_invariants().unwrap();
}

#[test]
fn staging_buffers_are_reused_only_once_unmapped() {
    let pool = pool();
    let usage = U::MAP_READ | U::COPY_DST;
    let src = pool.alloc(AllocDesc::storage(4096)).unwrap();
    pool.queue()
        .write_buffer(src.buffer(), src.offset(), &[7u8; 4096]);
    let read = |staging: &PoolBuffer| {
        let mut enc = pool.device().create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(
            src.buffer(),
            src.offset(),
            staging.buffer(),
            staging.offset(),
            4096,
        );
        pool.queue().submit([enc.finish()]);
        staging
            .slice()
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        pool.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        staging.slice().get_mapped_range().unwrap().to_vec()
    };
    let staging = pool.alloc(AllocDesc::storage(4096).usage(usage)).unwrap();
    assert_eq!(staging.offset(), 0, "a staging buffer is a whole segment");
    assert!(read(&staging).iter().all(|&b| b == 7));
    let buffer = staging.buffer().clone();
    drop(staging); // dropped while mapped: the pool unmaps it
    pool.submitted(); // its copy was submitted
    let again = pool.alloc(AllocDesc::storage(4096).usage(usage)).unwrap();
    assert_eq!(again.buffer(), &buffer, "the staging buffer was reused");
    assert!(read(&again).iter().all(|&b| b == 7), "and maps again");
}

/// A readback block holding 7s (written with `write_buffer`, submitted), the
/// pool's only block.
fn readback_of_sevens(pool: &Pool) -> PoolBuffer {
    let rb = pool.alloc(AllocDesc::readback(4096)).unwrap();
    pool.queue()
        .write_buffer(rb.buffer(), rb.offset(), &[7u8; 4096]);
    pool.submit([]);
    rb
}

#[test]
fn a_mapped_view_may_outlive_its_readback_block() {
    // wgpu 30's views keep their buffer: plain wgpu code may return a view
    // and drop the buffer. The pool's unmap on drop then panics inside wgpu;
    // the block must neither leak nor serve again while the view reads it,
    // and its buffer must be abandoned, not destroyed (wgpu unmaps a
    // destroyed buffer under the view), with a cache limit too.
    for cache_limit in [None, Some(0)] {
        view_outlives_its_block(cache_limit);
    }
}

fn view_outlives_its_block(cache_limit: Option<u64>) {
    let pool = pool();
    pool.set_cache_limit(cache_limit);
    let rb = readback_of_sevens(&pool);
    rb.slice().map_async(wgpu::MapMode::Read, |r| r.unwrap());
    pool.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    let view = rb.slice().get_mapped_range().unwrap();
    let buffer = rb.buffer().clone();
    drop(rb);
    assert!(pool.leaks().is_empty(), "the block went back");
    let c = pool.stats().counters;
    assert_eq!(
        (c.segments_abandoned, c.device_frees),
        (1, 1),
        "its buffer went too, abandoned, not destroyed"
    );
    let next = pool.alloc(AllocDesc::readback(4096)).unwrap();
    assert_ne!(next.buffer(), &buffer, "a buffer a view maps serves nobody");
    assert!(view.iter().all(|&b| b == 7), "the view reads what it read");
    drop((view, buffer, next));
    // The pool goes on: a readback maps and reads again.
    let again = readback_of_sevens(&pool);
    assert!(read_mapped(&pool, &again).iter().all(|&b| b == 7));
}

#[test]
fn a_map_callback_that_panics_as_its_block_drops_leaks_nothing() {
    // Dropping a block with a map pending aborts the map: the callback runs
    // with MapAborted, and a callback that unwraps panics in the drop. The
    // panic is the caller's; the block still goes back.
    let pool = pool();
    let rb = readback_of_sevens(&pool);
    rb.slice().map_async(wgpu::MapMode::Read, |r| r.unwrap());
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rb)));
    assert!(dropped.is_err(), "the callback's panic reaches the caller");
    assert!(pool.leaks().is_empty(), "the block went back");
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    let again = readback_of_sevens(&pool);
    assert!(read_mapped(&pool, &again).iter().all(|&b| b == 7));
}

/// Maps `block` for reading and returns its bytes.
fn read_mapped(pool: &Pool, block: &PoolBuffer) -> Vec<u8> {
    block.slice().map_async(wgpu::MapMode::Read, |r| r.unwrap());
    pool.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    block.slice().get_mapped_range().unwrap().to_vec()
}

#[test]
fn a_zeroed_upload_buffer_reads_zeros_though_its_last_owner_wrote_it() {
    // MAP_WRITE combines only with COPY_SRC, so nothing can clear a reused
    // upload buffer on the GPU: a zeroed one must be a buffer no owner held.
    let pool = pool();
    let write = |block: &PoolBuffer, byte: u8| {
        block
            .slice()
            .map_async(wgpu::MapMode::Write, |r| r.unwrap());
        pool.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        let size = block.size() as usize;
        block
            .slice()
            .get_mapped_range_mut()
            .unwrap()
            .copy_from_slice(&vec![byte; size]);
        block.buffer().unmap();
    };
    let first = pool.alloc(AllocDesc::upload(4096).zeroed()).unwrap();
    assert!(read_back(&pool, &first).iter().all(|&b| b == 0));
    write(&first, 0xab);
    let buffer = first.buffer().clone();
    drop(first);
    pool.submitted();
    // Control: not asked zeroed, the cached buffer is reused, bytes and all.
    let plain = pool.alloc(AllocDesc::upload(4096)).unwrap();
    assert_eq!(plain.buffer(), &buffer, "the upload buffer was reused");
    assert!(read_back(&pool, &plain).iter().all(|&b| b == 0xab));
    drop(plain);
    pool.submitted();
    let misses = pool.stats().counters.cache_misses;
    let zeroed = pool.alloc(AllocDesc::upload(4096).zeroed()).unwrap();
    assert_ne!(
        zeroed.buffer(),
        &buffer,
        "a new buffer, not the written one"
    );
    assert_eq!(pool.stats().counters.cache_misses, misses + 1);
    // The written one went back: one upload buffer held, not two.
    assert_eq!(pool.snapshot().segments.len(), 1);
    assert!(read_back(&pool, &zeroed).iter().all(|&b| b == 0));
    // A readback buffer (MAP_READ | COPY_DST) can be cleared: reused, zeroed.
    let readback = pool.alloc(AllocDesc::readback(4096)).unwrap();
    pool.queue()
        .write_buffer(readback.buffer(), readback.offset(), &[7u8; 4096]);
    let kept = readback.buffer().clone();
    drop(readback);
    pool.submitted();
    let again = pool.alloc(AllocDesc::readback(4096).zeroed()).unwrap();
    assert_eq!(again.buffer(), &kept, "the readback buffer was reused");
    again.slice().map_async(wgpu::MapMode::Read, |r| r.unwrap());
    pool.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    assert!(
        again
            .slice()
            .get_mapped_range()
            .unwrap()
            .iter()
            .all(|&b| b == 0)
    );
}

#[test]
fn stats_snapshot_and_leak_report_on_a_real_device() {
    let pool = pool();
    pool.start_recording();
    let a = pool
        .alloc(AllocDesc::storage(10_000).label("weights"))
        .unwrap();
    let b = pool
        .alloc(AllocDesc::storage(3 << 20).label("activations"))
        .unwrap();
    let s = pool.stats();
    assert_eq!(s.total.requested_bytes.current, 10_000 + (3 << 20));
    // Blocks are whole 256-byte units: 10 000 B takes 10 240.
    assert_eq!(s.total.allocated_bytes.current, 10_240 + (3 << 20));
    assert_eq!(
        s.total.reserved_bytes.current,
        pool.snapshot().segments.iter().map(|g| g.size).sum::<u64>()
    );
    assert_eq!(a.offset() % 256, 0);
    let snap = pool.snapshot();
    let labels: Vec<_> = snap
        .segments
        .iter()
        .flat_map(|s| s.blocks.iter().filter_map(|b| b.label.clone()))
        .collect();
    assert!(labels.contains(&"weights".to_string()) && labels.contains(&"activations".to_string()));
    let leaks = pool.leaks();
    assert_eq!(leaks.len(), 2);
    drop((a, b));
    assert!(pool.leaks().is_empty());
    let log = pool.take_recording().unwrap();
    assert_eq!(log.lines().count(), 5, "{log}");
    assert!(pool.memory_summary().contains("Reserved memory"));
}

#[test]
fn runs_on_the_chosen_backend() {
    let (device, _, info) = device();
    println!(
        "adapter: {} ({:?}, {:?}, driver {} {}); max_buffer_size {}",
        info.name,
        info.backend,
        info.device_type,
        info.driver,
        info.driver_info,
        device.limits().max_buffer_size
    );
    assert_eq!(info.backend, vrampool_tests::backend());
    assert!(device.limits().max_buffer_size >= 256 << 20);
}

/// A chunk above the packed classes: one segment per chunk.
const OOM_CHUNK: u64 = 256 << 20;

/// A pool on a device whose wgpu refuses buffers beyond 2 % of the driver's
/// memory budget — a real OutOfMemory from `create_buffer` — filled with
/// `OOM_CHUNK`s through `alloc` until it refuses. Returns the pool, a tagger
/// made before memory ran out (wgpu panics on an uncaptured out-of-memory, which
/// is what the pool exists to prevent), the chunks held, and the refusal.
fn fill_a_budgeted_device(
    alloc: impl Fn(&Pool) -> Result<PoolBuffer, Error>,
) -> (Pool, Tagger, Vec<PoolBuffer>, Error) {
    let (device, queue, _) = vrampool_tests::device_with_budget(Some(2));
    let config = Config {
        headroom: None,
        ..Config::default()
    };
    let pool = Pool::new(
        device,
        queue,
        PoolOptions {
            config,
            ..Default::default()
        },
    )
    .unwrap();
    let tagger = Tagger::new(pool.device(), pool.queue());
    let mut held = Vec::new();
    let err = loop {
        match alloc(&pool) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        assert!(
            held.len() < 256,
            "the device never refused: does the driver report a memory budget?"
        );
    };
    assert!(
        matches!(&err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    assert!(
        err.to_string().contains("the device refused the segment"),
        "{err}"
    );
    let s = pool.stats();
    assert_eq!(s.counters.ooms, 1);
    assert!(
        s.counters.alloc_retries >= 1,
        "the cache was released and the request retried"
    );
    assert_eq!(
        s.total.reserved_bytes.current,
        held.len() as u64 * OOM_CHUNK,
        "no refused segment was kept"
    );
    assert_eq!(
        s.total.allocated_bytes.current,
        held.len() as u64 * OOM_CHUNK
    );
    pool.check_invariants().unwrap();
    (pool, tagger, held, err)
}

#[test]
#[ignore = "needs a driver that reports a memory budget (VK_EXT_memory_budget); lavapipe does not. Run on the H200: cargo test -p vrampool-tests --test gpu -- --ignored"]
fn a_real_device_out_of_memory_is_caught_released_and_reported() {
    let (pool, tagger, mut held, _) =
        fill_a_budgeted_device(|p| p.alloc(AllocDesc::storage(OOM_CHUNK)));
    // After freeing, allocation works again; every buffer handed out is valid.
    let device_allocs = pool.stats().counters.device_allocs;
    held.truncate(held.len() - 2);
    // Dropped blocks are reusable once the work that may use them is
    // submitted (the default `Reuse::AfterSubmit`); none was recorded here.
    pool.submitted();
    let again = pool.alloc(AllocDesc::storage(OOM_CHUNK)).unwrap();
    assert_eq!(
        pool.stats().counters.device_allocs,
        device_allocs,
        "a cache hit"
    );
    drop(again);
    pool.submitted();
    assert_eq!(pool.empty_cache(), 2 * OOM_CHUNK);
    held.push(pool.alloc(AllocDesc::storage(OOM_CHUNK)).unwrap());
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
}

#[test]
#[ignore = "needs a driver that reports a memory budget (VK_EXT_memory_budget); lavapipe does not. Run on the H200: cargo test -p vrampool-tests --test gpu -- --ignored"]
fn alloc_async_catches_a_real_out_of_memory_after_the_fact() {
    // The browser's path: the segment is created, the error scopes are awaited,
    // and a refused segment is discarded before any handle to it exists.
    let (pool, tagger, mut held, _) = fill_a_budgeted_device(|p| {
        pollster::block_on(p.alloc_async(AllocDesc::storage(OOM_CHUNK)))
    });
    held.truncate(held.len() - 2);
    pool.submitted();
    assert_eq!(pool.empty_cache(), 2 * OOM_CHUNK);
    held.push(pollster::block_on(pool.alloc_async(AllocDesc::storage(OOM_CHUNK))).unwrap());
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
}

#[test]
fn a_handle_outliving_its_pool_stays_valid() {
    let pool = pool();
    let tagger = Tagger::new(pool.device(), pool.queue());
    let kept = pool
        .alloc(AllocDesc::storage(1 << 20).label("outlives the pool"))
        .unwrap();
    let weak = kept.downgrade();
    assert_eq!(pool.leaks()[0].label.as_deref(), Some("outlives the pool"));
    drop(pool); // logs the leak report; the handle keeps its buffer alive
    assert_eq!(tagger.tag_and_verify(&[Range::from(&*kept)]), 0);
    drop(kept); // no pool to return to: nothing happens, no panic
    assert!(weak.upgrade().is_none());
}
