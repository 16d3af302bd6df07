//! Out of memory: under the pool's limit (lavapipe, CI) and with the device
//! itself exhausted (a real GPU: `#[ignore]`d, run on the H200).

use vrampool::{Access, AllocDesc, Config, Error, Limit, OomInfo, Pool, PoolBuffer, PoolOptions};
use vrampool_tests::{Range, Rng, Tagger};

use super::{env_count, pool_with};

/// Checks an out-of-memory error against the pool's figures at that moment:
/// it names requested / allocated / reserved / cached / limit, and they are true.
fn check_oom(pool: &Pool, e: &Error, requested: u64) -> OomInfo {
    let Error::OutOfMemory(info) = e else {
        panic!("expected OutOfMemory, got: {e}");
    };
    let s = pool.stats();
    assert_eq!(info.requested, requested);
    assert_eq!(info.allocated, s.total.allocated_bytes.current);
    assert_eq!(info.reserved, s.total.reserved_bytes.current);
    assert_eq!(info.cached, s.total.cached_bytes.current);
    let msg = e.to_string();
    for word in [
        "tried to allocate",
        "allocated",
        "reserved",
        "cached",
        "limit",
    ] {
        assert!(msg.contains(word), "`{msg}` lacks `{word}`");
    }
    // What to do: the device's refusal came after the cache was released,
    // and empty_cache() gives back what is pending since; the limit's kept a
    // cache that would not make room, so it does not advise emptying it.
    if info.device_refused {
        assert!(msg.contains("not releasable"), "{msg}");
        assert!(msg.contains("call empty_cache()"), "says what to do: {msg}");
        // No limit refused it: raising one would not help.
        assert!(!msg.contains("raise the limit"), "{msg}");
    } else {
        assert!(
            msg.contains("kept: releasing it would not make room"),
            "{msg}"
        );
        assert!(!msg.contains("empty_cache()"), "{msg}");
        assert!(msg.contains("raise the limit"), "says what to do: {msg}");
    }
    *info
}

#[test]
fn under_a_limit_the_cache_makes_room_where_it_can_and_nothing_invalid_is_handed_out() {
    let limit = 96 << 20;
    let config = Config {
        limit: Some(Limit::Bytes(limit)),
        ..Config::default()
    };
    let align = config.alignment;
    let pool = pool_with(config);
    let tagger = Tagger::new(pool.device(), pool.queue());
    let observed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&observed);
    pool.on_oom(move |i| sink.lock().unwrap().push(*i));
    let mut rng = Rng(0xf00d);
    let mut held: Vec<PoolBuffer> = Vec::new();
    let (mut ooms, mut made_room) = (0, 0);
    // Random sizes and frees: the pool fills, fragments, caches; every refusal
    // must be a clean error with true figures, never a broken buffer.
    for op in 0..4000 {
        if op % 10 == 0 {
            // A frame: nothing recorded is unsubmitted, dropped blocks may be reused.
            pool.submitted();
        }
        if rng.below(3) == 0 && !held.is_empty() {
            held.swap_remove(rng.below(held.len() as u64) as usize);
            continue;
        }
        let size = match rng.below(10) {
            0..=6 => 1 + rng.below(256 << 10),
            7..=8 => (1 << 20) + rng.below(8 << 20),
            _ => (8 << 20) + rng.below(24 << 20),
        };
        let before = pool.stats();
        let access = [Access::ReadWrite, Access::ReadOnly, Access::Any][rng.below(3) as usize];
        match pool.alloc(AllocDesc::storage(size).access(access).label("filler")) {
            Ok(b) => {
                if pool.stats().counters.bytes_released > before.counters.bytes_released {
                    // The cache was released to make room under the limit.
                    made_room += 1;
                }
                held.push(b)
            }
            Err(e) => {
                let info = check_oom(&pool, &e, size.next_multiple_of(4));
                assert_eq!(info.limit, Some(limit));
                assert!(
                    !info.device_refused,
                    "the pool's limit refused, not the device"
                );
                let after = pool.stats();
                assert_eq!(after.total.allocated_bytes, before.total.allocated_bytes);
                // The limit refuses only a request not even the whole cache
                // would make room for, and then keeps that cache: nothing
                // changed but the counters.
                let rounded = size.next_multiple_of(align);
                assert!(
                    before.total.reserved_bytes.current - before.releasable_bytes + rounded > limit,
                    "op {op}: refused a request the cache could have made room for"
                );
                assert_eq!(
                    after.counters.bytes_released, before.counters.bytes_released,
                    "op {op}: the cache it could not use is kept"
                );
                assert_eq!(
                    after.total.reserved_bytes.current,
                    before.total.reserved_bytes.current
                );
                assert_eq!(after.counters.device_allocs, before.counters.device_allocs);
                ooms += 1;
            }
        }
        assert!(pool.stats().total.reserved_bytes.current <= limit);
    }
    pool.check_invariants().unwrap();
    assert!(ooms >= 10, "the limit was reached often: {ooms} refusals");
    assert!(
        made_room >= 10,
        "the cache made room often: {made_room} allocations released it"
    );
    assert_eq!(
        observed.lock().unwrap().len(),
        ooms,
        "every OOM reached the observer"
    );
    assert_eq!(pool.stats().counters.ooms, ooms as u64);
    // Every buffer handed out is valid and private.
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    // After freeing, the largest request fits again.
    held.clear();
    let big = pool.alloc(AllocDesc::storage(limit / 2)).unwrap();
    assert_eq!(tagger.tag_and_verify(&[Range::from(&*big)]), 0);
}

/// Segment size for the exhaustion run: 1 GiB (or max_buffer_size if lower).
const CHUNK: u64 = 1 << 30;

#[test]
#[ignore = "exhausts the GPU's memory: run on a real GPU (the H200), not in CI. cargo test -p vrampool-tests --test reliability -- --ignored exhausted"]
fn a_really_exhausted_device_is_caught_released_retried_and_recovers() {
    // No wgpu memory budget: the driver itself runs out.
    let (device, queue, info) = vrampool_tests::device();
    eprintln!("adapter: {} ({:?})", info.name, info.backend);
    let chunk = CHUNK.min(device.limits().max_buffer_size & !255);
    let tagger = Tagger::new(&device, &queue);
    let pool = Pool::new(device, queue, PoolOptions::default()).unwrap();
    let limit_chunks = env_count("VRAMPOOL_EXHAUST_MAX_GIB", 200);
    let mut held: Vec<PoolBuffer> = Vec::new();
    let mut cached_probe = Vec::new();
    // The retries counted before the refused request.
    let mut retries_before;
    let err = loop {
        retries_before = pool.stats().counters.alloc_retries;
        match pool.alloc(AllocDesc::storage(chunk).label("chunk")) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        // Keep a little cache around (small blocks freed), so the refusal has
        // something to release first.
        if held.len() % 16 == 1 {
            cached_probe.push(pool.alloc(AllocDesc::storage(48 << 20)).unwrap());
        }
        if held.len() % 16 == 8 {
            cached_probe.clear();
        }
        assert!(
            (held.len() as u64) < limit_chunks,
            "the device never refused after {} GiB",
            (held.len() as u64 * chunk) >> 30
        );
    };
    drop(cached_probe);
    let s = pool.stats();
    eprintln!("refused after {} chunks: {err}", held.len());
    eprintln!("{}", pool.memory_summary());
    let info = check_oom(&pool, &err, chunk);
    assert!(info.device_refused, "the device refused: {err}");
    assert!(err.to_string().contains("the device refused the segment"));
    assert_eq!(s.counters.ooms, 1);
    // The refused request retried once: the cache released, then the
    // device's refusal reported. (An earlier request may have been refused
    // and served by its retry, where releasing the cache made room.)
    assert_eq!(
        s.counters.alloc_retries - retries_before,
        1,
        "the cache was released and the request retried once"
    );
    // After freeing, allocation succeeds again. (Two chunks go back first:
    // the tagger needs a little device memory of its own for its uniforms.)
    held.truncate(held.len() - 2);
    pool.empty_cache();
    // Every buffer handed out is valid: tag and verify all of them on the GPU.
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    held.push(pool.alloc(AllocDesc::storage(chunk)).unwrap());
    held.push(pool.alloc(AllocDesc::storage(chunk)).unwrap());
    let ranges: Vec<Range> = held.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    eprintln!(
        "recovered: {} chunks of {} MiB live after freeing two and allocating two",
        held.len(),
        chunk >> 20
    );
    pool.check_invariants().unwrap();
}

#[test]
#[ignore = "exhausts the GPU's memory with raw wgpu, to record what the pool prevents: run on the H200"]
fn raw_wgpu_on_an_exhausted_device_panics() {
    let (device, _queue, _) = vrampool_tests::device();
    let chunk = CHUNK.min(device.limits().max_buffer_size & !255);
    let limit_chunks = env_count("VRAMPOOL_EXHAUST_MAX_GIB", 200);
    let mut held = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..limit_chunks {
            held.push(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("raw chunk"),
                size: chunk,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }));
        }
    }));
    let Err(panic) = outcome else {
        panic!("raw create_buffer never failed in {limit_chunks} GiB");
    };
    let msg = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    eprintln!("raw wgpu panicked after {} buffers: {msg}", held.len());
    assert!(msg.to_lowercase().contains("memory"), "{msg}");
}
