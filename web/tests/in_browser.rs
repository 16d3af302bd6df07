//! The pool on a real browser WebGPU device, run by wasm-bindgen-test in
//! headless Chromium (scripts/test.sh). Natively this file is empty: these
//! paths — error scopes that resolve asynchronously, `alloc_async` releasing
//! and retrying under a budget, `map_async` without `poll` — exist only in the
//! browser.
#![cfg(target_arch = "wasm32")]

use vrampool::{AllocDesc, Config, Error, Limit, Pool, PoolOptions};
use wasm_bindgen_test::*;

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
    // Requests above 4 MiB get segments of their own under a limit.
    let p = pool(Some(16 << 20)).await;
    let a = p.alloc_async(AllocDesc::storage(5 << 20)).await.unwrap();
    let b = p.alloc_async(AllocDesc::storage(5 << 20)).await.unwrap();
    drop(a); // cached
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
