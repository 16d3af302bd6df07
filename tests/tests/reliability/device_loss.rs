//! Device loss: `Device::destroy` under a live pool.

use std::sync::{Arc, Mutex};

use vrampool::{AllocDesc, Error, Pool, PoolBuffer, PoolOptions};
use vrampool_tests::{Range, Tagger, device};
use wgpu::BufferUsages as U;

fn lost(r: Result<PoolBuffer, Error>) -> String {
    match r {
        Err(e @ Error::DeviceLost(_)) => e.to_string(),
        Err(e) => panic!("expected DeviceLost, got: {e}"),
        Ok(_) => panic!("expected DeviceLost, got a buffer"),
    }
}

#[test]
fn a_destroyed_device_fails_every_later_allocation_and_nothing_panics() {
    let (device, queue, _) = device();
    let pool = Pool::new(device.clone(), queue, PoolOptions::default()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&seen);
    pool.on_device_lost(move |why| sink.lock().unwrap().push(why.to_string()));

    let live: Vec<PoolBuffer> = (0..4)
        .map(|_| {
            pool.alloc(AllocDesc::storage(1 << 20).label("live"))
                .unwrap()
        })
        .collect();
    let weak = live[0].downgrade();
    let staging = pool
        .alloc(AllocDesc::storage(4096).usage(U::MAP_READ | U::COPY_DST))
        .unwrap();
    drop(pool.alloc(AllocDesc::storage(8 << 20)).unwrap());
    pool.submitted(); // nothing was recorded: the dropped block is cache now
    let before = pool.stats();
    assert!(before.total.cached_bytes.current >= 8 << 20);

    device.destroy();

    // A request that needs a new segment polls the device, which reports the loss.
    let why = lost(pool.alloc(AllocDesc::storage(256 << 20)));
    assert!(why.contains("destroyed"), "{why}");
    assert!(why.contains("Create a new device and a new pool"), "{why}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the observer ran once");
    assert!(pool.device_lost().unwrap().contains("Device::destroy"));

    // From then on every allocation fails, cache hits included, on both paths.
    let requests = [
        AllocDesc::storage(1 << 20),
        AllocDesc::storage(4),
        AllocDesc::storage(8 << 20).zeroed(),
        AllocDesc::storage(4096).usage(U::MAP_READ | U::COPY_DST),
        AllocDesc::storage(4096).usage(U::UNIFORM | U::COPY_DST),
    ];
    for desc in requests {
        lost(pool.alloc(desc));
        lost(pollster::block_on(pool.alloc_async(desc)));
    }
    // The failures changed nothing, and the figures stay readable.
    assert_eq!(pool.stats(), before);
    assert_eq!(
        pool.snapshot().segments.len() as u64,
        before.total.segments.current
    );
    assert!(pool.memory_summary().contains("Reserved"));
    pool.check_invariants().unwrap();

    // Live handles drop without panicking, and go back to the pool.
    drop(live);
    drop(staging);
    assert!(weak.upgrade().is_none());
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    assert_eq!(pool.empty_cache(), before.total.reserved_bytes.current);
    assert_eq!(pool.stats().total.reserved_bytes.current, 0);
    pool.check_invariants().unwrap();
    lost(pool.alloc(AllocDesc::storage(4)));
    drop(pool);

    // A new pool on a new device works.
    let (device, queue, _) = vrampool_tests::device();
    let tagger = Tagger::new(&device, &queue);
    let pool = Pool::new(device, queue, PoolOptions::default()).unwrap();
    let fresh: Vec<PoolBuffer> = (0..3)
        .map(|_| pool.alloc(AllocDesc::storage(1 << 20)).unwrap())
        .collect();
    let ranges: Vec<Range> = fresh.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    assert!(pool.device_lost().is_none());
}

#[test]
fn once_the_device_is_polled_even_a_cache_hit_fails() {
    // wgpu reports a destroyed device from its next poll (an application's
    // frame loop polls); from then on no block of the dead device is handed out.
    let (device, queue, _) = device();
    let pool = Pool::new(device.clone(), queue, PoolOptions::default()).unwrap();
    drop(pool.alloc(AllocDesc::storage(1 << 20)).unwrap());
    pool.submitted(); // nothing was recorded: the dropped block is cache now
    // The control: on a live device the same request is an engine cache hit
    // (stats() takes parked blocks back from the front cache first, as it
    // does below).
    let control = pool.stats();
    let hit = pool.alloc(AllocDesc::storage(1 << 20)).unwrap();
    let s = pool.stats();
    assert_eq!(s.counters.cache_hits, control.counters.cache_hits + 1);
    assert_eq!(s.counters.front_hits, control.counters.front_hits);
    drop(hit);
    pool.submitted();
    let before = pool.stats();
    device.destroy();
    let _ = device.poll(wgpu::PollType::Poll);
    lost(pool.alloc(AllocDesc::storage(1 << 20)));
    lost(pollster::block_on(
        pool.alloc_async(AllocDesc::storage(1 << 20)),
    ));
    assert_eq!(pool.stats(), before, "no hit counted, nothing handed out");
}

#[test]
fn a_block_parked_in_the_front_cache_before_the_loss_is_not_handed_out() {
    // The tests above read figures before the loss, which hands parked
    // blocks back to the engine: this one does not, so the request would be
    // a front-cache hit, served without the engine.
    let (device, queue, _) = device();
    let pool = Pool::new(device.clone(), queue, PoolOptions::default()).unwrap();
    let desc = AllocDesc::storage(1 << 20).read_write();
    // The control: the same steps on a live device are a front-cache hit.
    drop(pool.alloc(desc).unwrap());
    pool.submitted();
    let hit = pool.alloc(desc).unwrap();
    assert_eq!(pool.stats().counters.front_hits, 1, "the control's hit");
    drop(hit);
    pool.submitted();
    device.destroy();
    let _ = device.poll(wgpu::PollType::Poll);
    lost(pool.alloc(desc));
    lost(pollster::block_on(pool.alloc_async(desc)));
    assert_eq!(
        pool.stats().counters.front_hits,
        1,
        "no hit on the lost device"
    );
}

#[test]
fn every_pool_on_a_device_hears_of_its_loss() {
    // wgpu keeps one lost callback per device: each pool made takes it over
    // (and wgpu drops the one it replaces). The newest pool tells the older
    // ones, a pool made between them included, whether it was dropped
    // before the newest was made or after: none of them serves its cache
    // from the destroyed device, and every observer is called. Before, only
    // the newest pool heard of it; the oldest served its parked block.
    for drop_between_first in [false, true] {
        let (device, queue, _) = device();
        let old = Pool::new(device.clone(), queue.clone(), PoolOptions::default()).unwrap();
        let seen = Arc::new(Mutex::new(0));
        let sink = Arc::clone(&seen);
        old.on_device_lost(move |_| *sink.lock().unwrap() += 1);
        drop(old.alloc(AllocDesc::storage(4096)).unwrap());
        old.submitted(); // a block of 4 KiB cached, a hit for the next request
        let between = Pool::new(device.clone(), queue.clone(), PoolOptions::default()).unwrap();
        let between = if drop_between_first {
            drop(between);
            None
        } else {
            Some(between)
        };
        let new = Pool::new(device.clone(), queue, PoolOptions::default()).unwrap();
        drop(between);
        device.destroy();
        let _ = device.poll(wgpu::PollType::Poll);
        let case = if drop_between_first {
            "dropped before"
        } else {
            "dropped after"
        };
        assert!(new.device_lost().is_some(), "{case}");
        assert!(
            old.device_lost()
                .is_some_and(|why| why.contains("Device::destroy")),
            "{case}: {:?}",
            old.device_lost()
        );
        lost(old.alloc(AllocDesc::storage(4096)));
        lost(new.alloc(AllocDesc::storage(4096)));
        assert_eq!(
            old.stats().counters.front_hits,
            0,
            "{case}: no hit on the lost device"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            1,
            "{case}: the older pool's observer ran once"
        );
    }
}
