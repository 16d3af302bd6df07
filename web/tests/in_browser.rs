//! The pool on a real browser WebGPU device, run by wasm-bindgen-test in
//! headless Chromium (scripts/test.sh). Natively this file is empty: these
//! paths — error scopes that resolve asynchronously, `alloc_async` releasing
//! and retrying under a budget, `map_async` without `poll` — exist only in the
//! browser. The embedding cases (a uniform, a read-only input and a
//! read-write output in one dispatch; a temporary dropped before its encoder
//! is submitted; a render pass drawing from pool vertices, indices and
//! per-draw uniforms; a run following its recorded plan, `Pool::follow`,
//! whose segments the browser makes synchronously) are checked here as
//! tests/tests/embedding.rs checks them natively.
#![cfg(target_arch = "wasm32")]

use vrampool::{AllocDesc, Config, Error, Limit, Pool, PoolOptions};
use wasm_bindgen_test::*;

#[path = "../../core/examples/common/quad.rs"]
mod quad;

#[path = "../../tests/src/dispatch.rs"]
mod dispatch;

wasm_bindgen_test_configure!(run_in_browser);

async fn pool(limit: Option<u64>) -> Pool {
    let (_, device, queue) = vrampool_web::open_webgpu()
        .await
        .expect("the browser gives a WebGPU device (--enable-unsafe-webgpu)");
    Pool::new(
        device,
        queue,
        PoolOptions {
            config: Config {
                limit: limit.map(Limit::Bytes),
                ..Config::default()
            },
            ..PoolOptions::default()
        },
    )
    .expect("a pool")
}

#[wasm_bindgen_test]
async fn async_oom_releases_the_cache_retries_and_reports() {
    // Under a limit, requests above 256 KiB get segments of their own.
    let p = pool(Some(16 << 20)).await;
    let a = p.alloc_async(AllocDesc::storage(5 << 20)).await.unwrap();
    let b = p.alloc_async(AllocDesc::storage(5 << 20)).await.unwrap();
    drop(a);
    p.submitted(); // nothing recorded used it: cached
    // 8 MiB fits only if the cached 5 MiB segment is released first.
    let c = p.alloc_async(AllocDesc::storage(8 << 20)).await.unwrap();
    let s = p.stats();
    assert!(s.counters.alloc_retries >= 1, "{s:?}");
    assert!(s.total.reserved_bytes.current <= 16 << 20);
    // Nothing left to release: a clear out-of-memory, no invalid buffer.
    match p.alloc_async(AllocDesc::storage(6 << 20)).await {
        Err(Error::OutOfMemory(info)) => {
            assert_eq!(info.requested, 6 << 20);
            assert_eq!(info.limit, Some(16 << 20));
        }
        other => panic!("expected OutOfMemory, got {:?}", other.map(|b| b.size())),
    }
    assert_eq!(p.stats().counters.ooms, 1);
    drop((b, c));
    // After frees it works again.
    let d = p.alloc_async(AllocDesc::storage(15 << 20)).await.unwrap();
    assert_eq!(d.size(), 15 << 20);
    p.check_invariants().unwrap();
}

#[wasm_bindgen_test]
async fn too_large_for_the_device_is_an_error_not_a_panic() {
    let p = pool(None).await;
    let max = p.device().limits().max_buffer_size;
    match p.alloc_async(AllocDesc::storage(max + 1)).await {
        Err(Error::TooLarge {
            max_buffer_size, ..
        }) => assert_eq!(max_buffer_size, max),
        other => panic!("expected TooLarge, got {:?}", other.map(|b| b.size())),
    }
    assert!(p.alloc_async(AllocDesc::storage(1 << 20)).await.is_ok());
}

/// Copies `size` bytes at `offset` of `buffer` through a fresh staging buffer
/// and returns them (awaiting the map: no poll in the browser).
async fn read(p: &Pool, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Vec<u8> {
    use wgpu::BufferUsages as U;
    let staging = p.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size,
        usage: U::MAP_READ | U::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = p.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
    p.queue().submit([enc.finish()]);
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    rx.await.unwrap().unwrap();
    let bytes = staging.slice(..).get_mapped_range().unwrap().to_vec();
    staging.unmap();
    bytes
}

#[wasm_bindgen_test]
async fn a_dispatch_binds_a_uniform_a_read_only_input_and_a_read_write_output() {
    use wgpu::BufferUsages as U;
    let p = pool(None).await;
    let n = 1000u32;
    let uniform = p
        .alloc_async(AllocDesc::storage(16).usage(U::UNIFORM | U::COPY_DST))
        .await
        .unwrap();
    let input = p
        .alloc_async(AllocDesc::storage(4 * n as u64))
        .await
        .unwrap();
    let output = p
        .alloc_async(AllocDesc::storage(4 * n as u64))
        .await
        .unwrap();
    let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
    p.queue()
        .write_buffer(uniform.buffer(), uniform.offset(), &words(&[3, 7, n, 0]));
    let data: Vec<u32> = (0..n).collect();
    p.queue()
        .write_buffer(input.buffer(), input.offset(), &words(&data));
    let scope = p.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let enc = dispatch::record_scale_pass(
        p.device(),
        [uniform.binding(), input.binding(), output.binding()],
        n,
    );
    p.queue().submit([enc.finish()]);
    let error = scope.pop().await;
    assert!(error.is_none(), "WebGPU refused the dispatch: {error:?}");
    let got = read(&p, output.buffer(), output.offset(), 4 * n as u64).await;
    let want: Vec<u8> = words(&data.iter().map(|x| x * 3 + 7).collect::<Vec<_>>());
    assert_eq!(got, want);
}

/// A temporary filled with 0x5A, a copy out of it recorded into an encoder,
/// the temporary dropped, then `next` run before the encoder is submitted.
/// Returns what the copy read.
async fn copy_out_of_a_dropped_temporary(p: &Pool, zeroed_next: bool) -> Vec<u8> {
    use wgpu::BufferUsages as U;
    let size = 64 << 10;
    let dst = p.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("outside the pool"),
        size,
        usage: U::COPY_DST | U::COPY_SRC,
        mapped_at_creation: false,
    });
    let tmp = p.alloc_async(AllocDesc::storage(size)).await.unwrap();
    p.queue()
        .write_buffer(tmp.buffer(), tmp.offset(), &vec![0x5A; size as usize]);
    p.queue().submit([]);
    let mut enc = p.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(tmp.buffer(), tmp.offset(), &dst, 0, size);
    drop(tmp);
    let next = if zeroed_next {
        p.alloc_async(AllocDesc::storage(size).zeroed())
            .await
            .unwrap()
    } else {
        let next = p.alloc_async(AllocDesc::storage(size)).await.unwrap();
        p.queue()
            .write_buffer(next.buffer(), next.offset(), &vec![0xC3; size as usize]);
        next
    };
    p.queue().submit([enc.finish()]);
    let want = if zeroed_next { 0 } else { 0xC3 };
    let theirs = read(p, next.buffer(), next.offset(), size).await;
    assert!(theirs.iter().all(|&b| b == want), "the next owner's bytes");
    read(p, &dst, 0, size).await
}

#[wasm_bindgen_test]
async fn a_temporary_dropped_before_submit_is_not_cleared_for_the_next_zeroed_block() {
    let p = pool(None).await;
    let got = copy_out_of_a_dropped_temporary(&p, true).await;
    assert!(
        got.iter().all(|&b| b == 0x5A),
        "the copy read {:#x}",
        got[0]
    );
}

#[wasm_bindgen_test]
async fn a_temporary_dropped_before_submit_never_shows_the_next_owners_writes() {
    let p = pool(None).await;
    let got = copy_out_of_a_dropped_temporary(&p, false).await;
    assert!(
        got.iter().all(|&b| b == 0x5A),
        "the copy read {:#x}",
        got[0]
    );
}

#[wasm_bindgen_test]
async fn bytes_written_to_a_block_read_back_through_a_pool_staging_buffer() {
    let p = pool(None).await;
    let src = p.alloc_async(AllocDesc::storage(4096)).await.unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    p.queue().write_buffer(src.buffer(), src.offset(), &data);
    let staging = p
        .alloc_async(
            AllocDesc::storage(4096)
                .usage(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
        )
        .await
        .unwrap();
    let mut enc = p.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(
        src.buffer(),
        src.offset(),
        staging.buffer(),
        staging.offset(),
        4096,
    );
    p.queue().submit([enc.finish()]);
    let slice = staging.slice();
    let (tx, rx) = futures_channel::oneshot::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    rx.await.unwrap().unwrap();
    assert_eq!(&slice.get_mapped_range().unwrap()[..], &data[..]);
}

#[wasm_bindgen_test]
async fn a_scope_in_the_browser_gives_its_blocks_back_each_with_its_own_bytes() {
    // Pool::scope's closure is synchronous and Scope::alloc is native only:
    // in the browser a scope is scope_async's, its blocks alloc_async's.
    let p = pool(Some(16 << 20)).await;
    let keep = p.alloc_async(AllocDesc::storage(1 << 20)).await.unwrap();
    let ((a_bytes, b_bytes, refused), report) = p
        .scope_async(async |s| {
            // read_write: blocks that share buffers (a plain storage block,
            // Access::Any, gets a buffer of its own).
            let a = s
                .alloc_async(AllocDesc::storage(4096).read_write())
                .await
                .unwrap();
            let b = s
                .alloc_async(AllocDesc::storage(4096).read_write())
                .await
                .unwrap();
            // Two ranges of one buffer: their bytes stay apart only if each
            // write keeps to its own.
            assert!(a.buffer() == b.buffer() && a.offset() != b.offset());
            a.write(s.pool().queue(), 0, &[0xA1; 4096]).unwrap();
            b.write(s.pool().queue(), 0, &[0xB2; 4096]).unwrap();
            // Past the limit inside the scope: an error, not a block.
            let refused = s.alloc_async(AllocDesc::storage(32 << 20)).await.is_err();
            let a_bytes = read(s.pool(), a.buffer(), a.offset(), 4096).await;
            let b_bytes = read(s.pool(), b.buffer(), b.offset(), 4096).await;
            (a_bytes, b_bytes, refused)
        })
        .await;
    assert!(a_bytes.iter().all(|&x| x == 0xA1), "a's bytes");
    assert!(b_bytes.iter().all(|&x| x == 0xB2), "b's bytes");
    assert!(refused, "32 MiB under a 16 MiB limit");
    assert_eq!((report.allocations, report.bytes), (2, 8192));
    assert!(report.returned);
    assert_eq!(p.stats().total.allocated_bytes.current, keep.block_size());
    p.check_invariants().unwrap();
}

#[wasm_bindgen_test]
async fn a_zeroed_upload_buffer_reads_zeros_though_its_last_owner_wrote_it() {
    // WebGPU lets MAP_WRITE combine only with COPY_SRC: nothing can clear a
    // reused upload buffer, so a zeroed one is a new buffer (natively: gpu.rs).
    let p = pool(None).await;
    let first = p.alloc_async(AllocDesc::upload(4096)).await.unwrap();
    let (tx, rx) = futures_channel::oneshot::channel();
    first.slice().map_async(wgpu::MapMode::Write, move |r| {
        let _ = tx.send(r);
    });
    rx.await.unwrap().unwrap();
    first
        .slice()
        .get_mapped_range_mut()
        .unwrap()
        .copy_from_slice(&[0xab; 4096]);
    first.buffer().unmap();
    let buffer = first.buffer().clone();
    drop(first);
    p.submitted();
    // Control: not asked zeroed, the cached buffer is reused, bytes and all.
    let plain = p.alloc_async(AllocDesc::upload(4096)).await.unwrap();
    assert_eq!(plain.buffer(), &buffer, "the upload buffer was reused");
    let bytes = read(&p, plain.buffer(), plain.offset(), 4096).await;
    assert!(bytes.iter().all(|&b| b == 0xab));
    drop(plain);
    p.submitted();
    let zeroed = p
        .alloc_async(AllocDesc::upload(4096).zeroed())
        .await
        .unwrap();
    assert_ne!(
        zeroed.buffer(),
        &buffer,
        "a new buffer, not the written one"
    );
    let bytes = read(&p, zeroed.buffer(), zeroed.offset(), 4096).await;
    assert!(bytes.iter().all(|&b| b == 0));
}

#[wasm_bindgen_test]
async fn a_device_refusal_in_the_browser_takes_the_ladder_and_changes_no_figure() {
    // The device refuses through the browser's asynchronous error scopes (the
    // fault injector answers them with wgpu's out-of-memory error): first
    // the planned segment only, then every step of the ladder. As in
    // tests/tests/gpu.rs, a 64 MiB block allocated and dropped sets the high
    // water (so 1200 KiB is a medium request, planned in a packed segment
    // bigger than itself) and leaves a segment of cache to release.
    use vrampool::fault::{Fault, Faults};
    let (_, device, queue) = vrampool_web::open_webgpu().await.expect("WebGPU");
    let faults = Faults::new();
    let options = PoolOptions {
        config: Config {
            headroom: None,
            ..Config::default()
        },
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let p = Pool::new(device, queue, options).unwrap();
    let _keep = p
        .alloc_async(AllocDesc::storage(4096).read_write())
        .await
        .unwrap();
    drop(
        p.alloc_async(AllocDesc::storage(64 << 20).read_write())
            .await
            .unwrap(),
    );
    p.submitted();
    let creates = faults.creates();
    faults.refuse(1, Fault::OutOfMemory);
    let b = p
        .alloc_async(AllocDesc::storage(1200 << 10).read_only())
        .await
        .unwrap();
    assert_eq!(
        faults.creates() - creates,
        2,
        "the planned segment, then just the request"
    );
    assert_eq!(b.size(), 1200 << 10);
    drop(b);
    p.submitted();
    let before = p.stats();
    let creates = faults.creates();
    for n in 1..=3 {
        faults.refuse(n, Fault::OutOfMemory);
    }
    // Not served by the cached 1200 KiB block: a packed segment is planned.
    let Err(err) = p
        .alloc_async(AllocDesc::storage(1300 << 10).read_only())
        .await
    else {
        panic!("the device refused every step")
    };
    assert!(
        matches!(&err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    assert_eq!(faults.creates() - creates, 3, "the three steps");
    let after = p.stats();
    assert_eq!(after.counters.ooms, before.counters.ooms + 1);
    assert_eq!(
        after.counters.bytes_released - before.counters.bytes_released,
        before.releasable_bytes,
        "all the cache went first"
    );
    assert_eq!(
        after.total.reserved_bytes.current,
        before.total.reserved_bytes.current - before.releasable_bytes
    );
    assert_eq!(faults.held(), after.total.reserved_bytes.current);
    // Everything else as it was, field by field (as tests/tests/gpu.rs
    // checks natively): no miss counted, no pool shown, no peak moved.
    assert_eq!(after, vrampool::fault::stats_after_refusal(&before, &after));
    p.check_invariants().unwrap();
}

#[wasm_bindgen_test]
async fn a_refusal_on_the_browsers_synchronous_path_is_taken() {
    // The preallocation (and a followed plan's segments) are made at once in
    // the browser, their scopes' answer unread. The fault injector's answer
    // is known at once: it was ignored, the refused segment kept, and its
    // bytes given back to the injector later though never counted (an
    // overflow panic in this debug build).
    use vrampool::fault::{Fault, Faults};
    let (_, device, queue) = vrampool_web::open_webgpu().await.expect("WebGPU");
    let faults = Faults::new();
    // The segment, and the one try more a refusal gets.
    faults.refuse(1, Fault::OutOfMemory);
    faults.refuse(2, Fault::OutOfMemory);
    let options = PoolOptions {
        config: Config {
            growth: vrampool::Growth::Preallocate(1 << 20),
            ..Config::default()
        },
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let err = Pool::new(device, queue, options).expect_err("refused");
    assert!(
        matches!(&err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    assert_eq!((faults.creates(), faults.held()), (2, 0));
}

#[wasm_bindgen_test]
async fn a_preallocation_the_browser_refuses_is_new_asyncs_error() {
    // A real refusal through the browser's error scopes: a preallocation
    // whose usage WebGPU does not allow (MAP_READ beside STORAGE). Pool::new
    // cannot wait for the answer and takes the buffer unchecked (its
    // documented limit); Pool::new_async awaits it and makes no pool.
    let (_, device, queue) = vrampool_web::open_webgpu().await.expect("WebGPU");
    let options = PoolOptions {
        config: Config {
            growth: vrampool::Growth::Preallocate(1 << 20),
            default_usage: (wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE).bits(),
            ..Config::default()
        },
        ..PoolOptions::default()
    };
    let unchecked = Pool::new(device.clone(), queue.clone(), options.clone());
    assert!(unchecked.is_ok(), "the synchronous path takes it unchecked");
    let err = Pool::new_async(device.clone(), queue.clone(), options)
        .await
        .map(|_| ())
        .expect_err("refused");
    assert!(matches!(&err, Error::Device(_)), "{err}");
    // A preallocation the browser accepts is made and pinned.
    let options = PoolOptions {
        config: Config {
            growth: vrampool::Growth::Preallocate(4 << 20),
            ..Config::default()
        },
        ..PoolOptions::default()
    };
    let p = Pool::new_async(device, queue, options).await.unwrap();
    assert_eq!(p.stats().total.reserved_bytes.current, 4 << 20);
    assert!(p.snapshot().segments.iter().all(|s| s.pinned));
}

/// Yields to the browser for `ms` (a `setTimeout`), so promises resolve.
async fn yield_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let w = web_sys::window().expect("a window");
        w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .expect("setTimeout");
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_follow_dropped_while_the_device_checks_its_second_segment_loses_nothing() {
    // A follow_async future dropped while the browser checks the plan's
    // second segment: the first, made and checked already, is ordinary
    // cache (the fault injector counts it held, the pool reserved), the
    // second destroyed, nothing followed or pinned, and the limit's count of
    // the plan's bytes given back. Before, the first was dropped uncounted.
    use std::future::Future;
    use std::task::{Context, Waker};
    use vrampool::fault::Faults;
    let p = pool(None).await;
    p.start_recording();
    assert_eq!(scale_step(&p, 7).await, (None, true), "the recorded run");
    let plan = p.plan_recording(&p.take_recording().unwrap()).unwrap();
    let segments: usize = plan.pools.iter().map(|(_, f)| f.segments.len()).sum();
    assert!(segments >= 2, "{segments} planned segments");
    let (_, device, queue) = vrampool_web::open_webgpu().await.expect("WebGPU");
    let faults = Faults::new();
    let options = PoolOptions {
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let next = Pool::new(device, queue, options).unwrap();
    {
        let mut following = std::pin::pin!(next.follow_async(&plan));
        let mut cx = Context::from_waker(Waker::noop());
        // Polled until the second segment is made and awaits its answer.
        for _ in 0..200 {
            assert!(
                following.as_mut().poll(&mut cx).is_pending(),
                "still waiting"
            );
            if faults.creates() == 2 {
                break;
            }
            yield_ms(5).await;
        }
        assert_eq!(faults.creates(), 2, "the second segment was made");
    }
    let s = next.stats();
    assert_eq!(
        s.counters.device_allocs, 1,
        "the first segment is the pool's"
    );
    assert_eq!(faults.held(), s.total.reserved_bytes.current);
    assert!(s.total.reserved_bytes.current > 0);
    assert!(!next.follow_stats().following);
    assert!(next.snapshot().segments.iter().all(|g| !g.pinned));
    assert_eq!(next.empty_cache(), s.total.reserved_bytes.current);
    assert_eq!(faults.held(), 0);
    next.check_invariants().unwrap();
}

#[wasm_bindgen_test]
async fn an_allocation_dropped_while_the_device_checks_its_segment_loses_nothing() {
    // A page drops an `alloc_async` future when what awaited it goes away
    // (a component unmounted, a `select!` that took its other arm). In the
    // browser the future waits for the device's answer on its new segment;
    // dropped there, the segment, the limit's count of its bytes and the
    // fault injector's count must all be given back.
    use std::future::Future;
    use std::task::{Context, Waker};
    use vrampool::fault::Faults;
    let (_, device, queue) = vrampool_web::open_webgpu().await.expect("WebGPU");
    let faults = Faults::new();
    let options = PoolOptions {
        config: Config {
            limit: Some(Limit::Bytes(16 << 20)),
            ..Config::default()
        },
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let p = Pool::new(device, queue, options).unwrap();
    let a = p.alloc_async(AllocDesc::storage(4 << 20)).await.unwrap();
    let before = p.stats();
    let creates = faults.creates();
    {
        let mut waiting = std::pin::pin!(p.alloc_async(AllocDesc::storage(8 << 20)));
        let polled = waiting
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        assert!(
            polled.is_pending(),
            "the first poll makes the segment and waits for the device's answer"
        );
    }
    assert_eq!(faults.creates() - creates, 1, "the segment was made");
    assert_eq!(
        faults.held(),
        4 << 20,
        "the dropped allocation's segment is no longer counted as held"
    );
    assert_eq!(p.stats(), before, "no figure moved");
    p.check_invariants().unwrap();
    // The limit counts only the live 4 MiB: 12 MiB more fit.
    let b = p.alloc_async(AllocDesc::storage(12 << 20)).await.unwrap();
    assert_eq!(faults.held(), 16 << 20);
    assert_eq!(p.stats().total.reserved_bytes.current, 16 << 20);
    drop((a, b));
    p.check_invariants().unwrap();
}

#[wasm_bindgen_test]
async fn a_render_pass_draws_from_pool_vertices_indices_and_per_draw_uniforms_every_frame() {
    // The render-pass layout of real wgpu code: a vertex and an index block
    // and, each frame, two uniforms (one per draw), each allocated, written
    // with `queue.write_buffer`, bound and dropped before the frame is
    // submitted; the first is dropped before the second is allocated. In one
    // pass the four are read-only uses of one buffer. Every frame's image is
    // copied out, so a uniform whose bytes the next allocation's
    // `write_buffer` overwrote before the submit shows as the wrong colour in
    // its frame: with `Reuse::Immediate` the first draw is drawn with the
    // second's uniform and the left half stays black, which the native
    // test's control (tests/tests/embedding.rs, the same frames and the same
    // check) shows failing.
    const FRAMES: u32 = 8;
    const WIDTH: u32 = 64; // one 256-byte row of RGBA8
    let p = pool(None).await;
    let device = p.device().clone();
    let vertices = p.alloc_async(AllocDesc::vertex(32)).await.unwrap();
    let indices = p.alloc_async(AllocDesc::index(12)).await.unwrap();
    let (corners, idx) = quad::mesh();
    p.queue()
        .write_buffer(vertices.buffer(), vertices.offset(), &corners);
    p.queue()
        .write_buffer(indices.buffer(), indices.offset(), &idx);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let quad = quad::Quad::new(&device, WIDTH, 1);
    let frames = p
        .alloc_async(AllocDesc::readback(u64::from(FRAMES * WIDTH * 4)))
        .await
        .unwrap();
    let mut shared = 0;
    let mut places = std::collections::BTreeSet::new();
    for f in 0..FRAMES {
        let mut groups = Vec::new();
        for right in [false, true] {
            let uniform = p
                .alloc_async(AllocDesc::uniform(quad::UNIFORM_SIZE))
                .await
                .unwrap();
            shared += usize::from(uniform.buffer() == vertices.buffer());
            places.insert(uniform.offset());
            p.queue().write_buffer(
                uniform.buffer(),
                uniform.offset(),
                &quad::frame_uniform(f, right),
            );
            groups.push(quad.bind(&device, &uniform));
            // Dropped before the submit, and before the next one is allocated.
            drop(uniform);
        }
        quad::draw_frame(
            &quad,
            &p,
            &vertices,
            &indices,
            &groups,
            &frames,
            u64::from(f * WIDTH * 4),
        );
    }
    let error = scope.pop().await;
    assert!(error.is_none(), "WebGPU refused a frame: {error:?}");
    assert!(
        vertices.buffer() == indices.buffer() && shared == 2 * FRAMES as usize,
        "the vertex, index and uniform blocks share one buffer ({shared} of {} uniforms did)",
        2 * FRAMES
    );
    let slice = frames.slice();
    let (tx, rx) = futures_channel::oneshot::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    rx.await.unwrap().unwrap();
    let pixels = slice.get_mapped_range().unwrap().to_vec();
    quad::check_frames(&pixels, FRAMES, WIDTH);
    assert_eq!(
        places.len(),
        2,
        "each frame's two uniforms reuse the first frame's two places: {places:?}"
    );
}

/// One step of a workload, as a page runs it: a uniform, an input and an
/// output bound in one dispatch, and a temporary written, dropped before
/// the submit. Returns WebGPU's validation error, if any, and whether the
/// output holds `input * 3 + shift`.
async fn scale_step(p: &Pool, shift: u32) -> (Option<String>, bool) {
    use wgpu::BufferUsages as U;
    let n = 4096u32;
    let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let uniform = p
        .alloc_async(AllocDesc::storage(16).usage(U::UNIFORM | U::COPY_DST))
        .await
        .unwrap();
    let input = p
        .alloc_async(AllocDesc::storage(4 * n as u64).read_only())
        .await
        .unwrap();
    let output = p
        .alloc_async(AllocDesc::storage(4 * n as u64).read_write())
        .await
        .unwrap();
    let temporary = p
        .alloc_async(AllocDesc::storage(4 * n as u64).read_write())
        .await
        .unwrap();
    let blocks = [&uniform, &input, &output, &temporary];
    for (i, a) in blocks.iter().enumerate() {
        for b in &blocks[i + 1..] {
            assert!(
                a.buffer() != b.buffer()
                    || a.offset() + a.size() <= b.offset()
                    || b.offset() + b.size() <= a.offset(),
                "two owners of one step share bytes"
            );
        }
    }
    let q = p.queue();
    q.write_buffer(
        uniform.buffer(),
        uniform.offset(),
        &words(&[3, shift, n, 0]),
    );
    let data: Vec<u32> = (0..n).map(|i| i ^ shift).collect();
    q.write_buffer(input.buffer(), input.offset(), &words(&data));
    q.write_buffer(temporary.buffer(), temporary.offset(), &words(&data));
    drop(temporary);
    let scope = p.device().push_error_scope(wgpu::ErrorFilter::Validation);
    let enc = dispatch::record_scale_pass(
        p.device(),
        [uniform.binding(), input.binding(), output.binding()],
        n,
    );
    p.submit([enc.finish()]);
    let error = scope.pop().await.map(|e| e.to_string());
    let got = read(p, output.buffer(), output.offset(), 4 * n as u64).await;
    let want = words(&data.iter().map(|x| x * 3 + shift).collect::<Vec<_>>());
    (error, got == want)
}

#[wasm_bindgen_test]
async fn a_run_following_its_recorded_plan_binds_the_planned_blocks_in_a_dispatch() {
    // Pool::follow in the browser, where the plan's segments are made
    // synchronously (as a preallocation's are) and taken unchecked, then
    // Pool::follow_async, which awaits the browser's answer: a step
    // recorded, planned, the cache emptied, and the same step run again
    // following the plan. The plan places every request of the step (the
    // uniform and the input in the read-only pool's planned buffer, the
    // output and the temporary dropped before the submit in the read-write
    // one), no two of them overlap, WebGPU accepts the dispatch binding a
    // uniform and read-only storage of one planned buffer, and the output
    // holds what the shader wrote.
    let p = pool(None).await;
    p.start_recording();
    assert_eq!(scale_step(&p, 7).await, (None, true), "the recorded run");
    let plan = p.plan_recording(&p.take_recording().unwrap()).unwrap();
    p.empty_cache();
    p.follow(&plan).unwrap();
    assert_eq!(
        scale_step(&p, 9).await,
        (None, true),
        "following, synchronously"
    );
    // And as the browser should: each segment's answer awaited.
    p.empty_cache();
    p.follow_async(&plan).await.unwrap();
    assert_eq!(
        scale_step(&p, 11).await,
        (None, true),
        "the run following the plan"
    );
    let followed = p.follow_stats();
    assert_eq!((followed.placed, followed.unplaced), (4, 0), "{followed:?}");
    p.check_invariants().unwrap();
}
