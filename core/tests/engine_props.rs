//! Property tests of the engine on the simulated device: live blocks never
//! overlap, accounting adds up after any sequence of operations, no two adjacent
//! free blocks stay uncoalesced, the limit is never crossed, and a block freed
//! with `defer_free` is never handed out again before it is reclaimed.

use proptest::prelude::*;
use vrampool::{
    BlockId, Config, DeviceError, Engine, Error, Limit, Planned, Request, SimulatedDevice,
    SnapshotState,
};

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        usage: u32,
        exclusive: bool,
        group: u8,
    },
    Free(usize),
    DeferFree(usize),
    Reclaim,
    EmptyCache,
    SetLimit(Option<u64>),
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1u64..4096,
        4096u64..(1 << 20),
        (1u64 << 20)..(12 << 20),
        (12u64 << 20)..(80 << 20),
    ];
    prop_oneof![
        6 => (size, 0u32..3, proptest::bool::weighted(0.1), 0u8..2).prop_map(|(size, usage, exclusive, group)| Op::Alloc { size, usage, exclusive, group }),
        2 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::DeferFree),
        1 => Just(Op::Reclaim),
        1 => Just(Op::EmptyCache),
        1 => proptest::option::of((64u64 << 20)..(512 << 20)).prop_map(Op::SetLimit),
    ]
}

/// Checks that live blocks of each segment do not overlap and lie inside it.
fn assert_no_overlap(engine: &Engine<SimulatedDevice>) {
    for seg in engine.snapshot().segments {
        let mut live: Vec<(u64, u64)> = seg
            .blocks
            .iter()
            .filter(|b| b.state == SnapshotState::Live)
            .map(|b| (b.offset, b.offset + b.size))
            .collect();
        live.sort();
        for w in live.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap in segment {}: {:?}", seg.id, w);
        }
        if let Some(last) = live.last() {
            assert!(last.1 <= seg.size);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_any_sequence(ops in proptest::collection::vec(op(), 1..300), headroom in proptest::option::of(0.0f64..0.5), pytorch in proptest::bool::weighted(0.25)) {
        // A quarter of the runs use the PyTorch preset (512 B rounding, a shared large pool).
        let base = if pytorch { Config::pytorch() } else { Config::default() };
        let config = Config { headroom, ..base };
        let align = config.alignment;
        let mut engine = Engine::new(SimulatedDevice::with_max_buffer_size(64 << 30, 256 << 20), config).unwrap();
        let mut live: Vec<(BlockId, u64, (u64, u64))> = Vec::new();
        // Byte ranges (by segment address) of blocks freed with defer_free and
        // not reclaimed yet: no allocation may land on them.
        let mut pending: Vec<(u64, u64)> = Vec::new();
        let range = |engine: &Engine<SimulatedDevice>, a: &vrampool::Allocation| {
            let seg = engine.snapshot().segments.into_iter().find(|s| s.id == a.segment.0).unwrap();
            (seg.address + a.offset, seg.address + a.offset + a.size)
        };
        for op in ops {
            match op {
                Op::Alloc { size, usage, exclusive, group } => {
                    let before = engine.stats();
                    match engine.allocate(Request { size, usage, exclusive, group, ..Request::default() }) {
                        Ok(a) => {
                            let r = range(&engine, &a);
                            prop_assert!(
                                pending.iter().all(|p| r.1 <= p.0 || p.1 <= r.0),
                                "a pending block's bytes were handed out again: {:?} over {:?}", r, pending
                            );
                            let after = engine.stats().total.reserved_bytes.current;
                            if let Some(limit) = engine.limit()
                                && after > before.total.reserved_bytes.current {
                                    prop_assert!(after <= limit, "a new segment crossed the limit: {} > {}", after, limit);
                                }
                            prop_assert!(a.size >= size);
                            prop_assert_eq!(a.offset % 256, 0);
                            live.push((a.id, a.size, r));
                        }
                        Err(Error::OutOfMemory(info)) => {
                            // Refused only when the limit really leaves no room.
                            let limit = info.limit.expect("no OOM without a limit on a 64 GiB device");
                            prop_assert!(info.reserved + size > limit - align);
                            let after = engine.stats();
                            prop_assert_eq!(after.total.allocated_bytes.current, before.total.allocated_bytes.current);
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    }
                }
                Op::Free(i) => {
                    if !live.is_empty() {
                        let (id, _, _) = live.swap_remove(i % live.len());
                        engine.free(id).unwrap();
                        // A second free of the same block is an error, not a corruption.
                        prop_assert!(matches!(engine.free(id), Err(Error::UnknownBlock(_))));
                    }
                }
                Op::DeferFree(i) => {
                    if !live.is_empty() {
                        let (id, size, r) = live.swap_remove(i % live.len());
                        let before = engine.stats().total;
                        engine.defer_free(id).unwrap();
                        let after = engine.stats().total;
                        prop_assert_eq!(after.pending_bytes.current, before.pending_bytes.current + size);
                        prop_assert_eq!(after.cached_bytes.current, before.cached_bytes.current);
                        prop_assert!(matches!(engine.free(id), Err(Error::UnknownBlock(_))));
                        prop_assert!(matches!(engine.defer_free(id), Err(Error::UnknownBlock(_))));
                        pending.push(r);
                    }
                }
                Op::Reclaim => {
                    let before = engine.stats().total;
                    let mark = engine.defer_mark();
                    let bytes = engine.reclaim_deferred(mark);
                    prop_assert_eq!(bytes, before.pending_bytes.current);
                    prop_assert_eq!(engine.stats().total.pending_bytes.current, 0);
                    pending.clear();
                }
                Op::EmptyCache => {
                    engine.empty_cache();
                    prop_assert_eq!(engine.stats().releasable_bytes, 0);
                    // Pending blocks left are in segments that hold live ones.
                    let s = engine.snapshot();
                    for seg in &s.segments {
                        let pending = seg.blocks.iter().any(|b| b.state == SnapshotState::Pending);
                        let live = seg.blocks.iter().any(|b| b.state == SnapshotState::Live);
                        prop_assert!(!pending || live || seg.pinned, "a releasable segment kept pending blocks");
                    }
                }
                Op::SetLimit(l) => {
                    engine.set_limit(l.map(Limit::Bytes)).unwrap();
                    engine.reset_peak_stats();
                }
            }
            if let Err(e) = engine.check_invariants() {
                prop_assert!(false, "{}", e);
            }
            let s = engine.stats();
            prop_assert_eq!(s.total.allocated_bytes.current, live.iter().map(|l| l.1).sum::<u64>());
            prop_assert_eq!(
                s.total.reserved_bytes.current,
                s.total.allocated_bytes.current + s.total.pending_bytes.current + s.total.cached_bytes.current
            );
            prop_assert_eq!(s.total.reserved_bytes.current, engine.backend().used());
        }
        assert_no_overlap(&engine);
        for (id, _, _) in live.drain(..) {
            engine.free(id).unwrap();
        }
        engine.empty_cache();
        prop_assert_eq!(engine.backend().used(), 0);
        prop_assert_eq!(engine.stats().total.reserved_bytes.current, 0);
    }
}

#[test]
fn freed_neighbours_coalesce_into_one_block() {
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    let ids: Vec<_> = (0..8)
        .map(|_| e.allocate(Request::new(1000, 0)).unwrap())
        .collect();
    assert_eq!(
        e.stats().total.segments.current,
        1,
        "small blocks share one segment"
    );
    for a in ids.iter().step_by(2) {
        e.free(a.id).unwrap();
    }
    for a in ids.iter().skip(1).step_by(2) {
        e.free(a.id).unwrap();
    }
    e.check_invariants().unwrap();
    let snap = e.snapshot();
    assert_eq!(
        snap.segments[0].blocks.len(),
        1,
        "all free space is one block again"
    );
    assert_eq!(
        e.stats().largest_free_block,
        e.config().without_limit.small_segment
    );
}

#[test]
fn limit_releases_cache_before_failing() {
    let config = Config {
        limit: Some(Limit::Bytes(100 << 20)),
        ..Config::default()
    };
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), config).unwrap();
    let a = e.allocate(Request::new(60 << 20, 0)).unwrap();
    e.free(a.id).unwrap();
    // 60 MiB cached cannot serve 70 MiB; it is released so 70 MiB fits.
    let b = e.allocate(Request::new(70 << 20, 0)).unwrap();
    let s = e.stats();
    assert_eq!(s.counters.alloc_retries, 1);
    assert_eq!(s.counters.bytes_released, 60 << 20);
    assert_eq!(s.total.reserved_bytes.current, 70 << 20);
    // Now nothing can be released: a clear error, and the pool is unchanged.
    let err = e.allocate(Request::new(40 << 20, 0)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("tried to allocate 40.00 MiB"), "{msg}");
    assert!(msg.contains("70.00 MiB allocated"), "{msg}");
    assert!(msg.contains("limit 100.00 MiB"), "{msg}");
    assert_eq!(e.stats().counters.ooms, 1);
    e.free(b.id).unwrap();
    e.allocate(Request::new(40 << 20, 0)).unwrap();
}

#[test]
fn oom_observers_see_the_state() {
    use std::sync::{Arc, Mutex};
    let config = Config {
        limit: Some(Limit::Bytes(10 << 20)),
        ..Config::default()
    };
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), config).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    e.add_oom_observer(Box::new(move |i| s2.lock().unwrap().push(*i)));
    assert!(e.allocate(Request::new(11 << 20, 0)).is_err());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].requested, 11 << 20);
    assert_eq!(seen[0].limit, Some(10 << 20));
}

#[test]
fn device_oom_releases_cache_and_retries() {
    // A 1 GiB device, no pool limit: the device itself refuses.
    let mut e = Engine::new(
        SimulatedDevice::new(1 << 30),
        Config {
            headroom: None,
            ..Config::default()
        },
    )
    .unwrap();
    let a = e.allocate(Request::new(600 << 20, 0)).unwrap();
    e.free(a.id).unwrap();
    // 600 MiB cached cannot hold 700 MiB and leaves no room for it: released, retried.
    let b = e.allocate(Request::new(700 << 20, 0)).unwrap();
    let s = e.stats();
    assert_eq!(s.counters.alloc_retries, 1);
    assert_eq!(s.counters.bytes_released, 600 << 20);
    let err = e.allocate(Request::new(500 << 20, 0)).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(i) if i.device_refused));
    e.free(b.id).unwrap();
    // A packed segment the device cannot hold falls back to the exact request
    // before anything is released.
    let small = SimulatedDevice::with_max_buffer_size(100 << 20, 1 << 30);
    let mut e = Engine::new(
        small,
        Config {
            headroom: None,
            ..Config::default()
        },
    )
    .unwrap();
    e.allocate(Request::new(90 << 20, 0)).unwrap();
    e.allocate(Request::new(5 << 20, 0)).unwrap();
    let s = e.stats();
    assert_eq!((s.counters.alloc_retries, s.counters.ooms), (0, 0));
    assert_eq!(
        e.backend().used(),
        95 << 20,
        "exact segments, no 384 MiB ones"
    );
}

#[test]
fn too_large_and_zero_are_clear_errors() {
    let mut e = Engine::new(
        SimulatedDevice::with_max_buffer_size(1 << 30, 256 << 20),
        Config::default(),
    )
    .unwrap();
    let err = e.allocate(Request::new(300 << 20, 0)).unwrap_err();
    assert!(
        err.to_string().contains("max_buffer_size of 256.00 MiB"),
        "{err}"
    );
    assert!(matches!(
        e.allocate(Request::new(0, 0)),
        Err(Error::ZeroSize)
    ));
    assert!(matches!(
        e.allocate(Request::new(u64::MAX, 0)),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(e.stats().total.reserved_bytes.current, 0);
}

#[test]
fn cache_limit_and_preallocation() {
    let config = Config {
        cache_limit: Some(0),
        ..Config::default()
    };
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), config).unwrap();
    let a = e.allocate(Request::new(40 << 20, 0)).unwrap();
    e.free(a.id).unwrap();
    assert_eq!(
        e.stats().total.reserved_bytes.current,
        0,
        "cache limit 0 releases at once"
    );

    let config = Config {
        growth: vrampool::Growth::Preallocate(256 << 20),
        ..Config::default()
    };
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), config).unwrap();
    assert_eq!(e.stats().total.reserved_bytes.current, 256 << 20);
    let a = e.allocate(Request::new(100 << 20, 0)).unwrap();
    assert_eq!(
        e.stats().counters.device_allocs,
        1,
        "served from the preallocation"
    );
    e.free(a.id).unwrap();
    assert_eq!(e.empty_cache(), 0, "the preallocation is pinned");
    assert_eq!(e.stats().total.reserved_bytes.current, 256 << 20);

    let over = Config {
        growth: vrampool::Growth::Preallocate(256 << 20),
        limit: Some(Limit::Bytes(128 << 20)),
        ..Config::default()
    };
    let err = Engine::new(SimulatedDevice::new(1 << 30), over)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("cannot preallocate 256.00 MiB: the limit is 128.00 MiB"),
        "{err}"
    );
}

#[test]
fn fraction_limit_uses_capacity() {
    let config = Config {
        limit: Some(Limit::Fraction(0.5)),
        ..Config::default()
    };
    let e = Engine::new(SimulatedDevice::new(1 << 30), config.clone()).unwrap();
    assert_eq!(e.limit(), Some(512 << 20));
    let bad = Config {
        limit: Some(Limit::Fraction(-1.0)),
        ..Config::default()
    };
    assert!(matches!(
        Engine::new(SimulatedDevice::new(1 << 30), bad),
        Err(Error::Config(_))
    ));
}

#[test]
fn recording_writes_rmm_csv_that_replays() {
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    e.start_recording();
    let a = e.allocate(Request::new(5000, 0)).unwrap();
    let b = e.allocate(Request::new(3 << 20, 0)).unwrap();
    e.free(a.id).unwrap();
    e.free(b.id).unwrap();
    let log = e.take_recording().unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], vrampool::trace::HEADER);
    assert_eq!(lines.len(), 5);
    assert!(lines[1].contains(",allocate,0x") && lines[1].ends_with(",5000,0x0"));
    let t = vrampool::Trace::parse("rec", log.as_bytes()).unwrap();
    assert_eq!(t.peak_live, 5000 + (3 << 20));
}

#[test]
fn leaks_name_their_labels() {
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    let mut r = Request::new(4096, 0);
    r.label = Some("kv-cache".into());
    e.allocate(r).unwrap();
    let leaks = e.leaks();
    assert_eq!(leaks.len(), 1);
    assert_eq!(leaks[0].label.as_deref(), Some("kv-cache"));
    let summary = e.memory_summary();
    assert!(
        summary.contains("Allocated memory") && summary.contains("4.00 KiB"),
        "{summary}"
    );
    let json = serde_json::to_string(&e.snapshot()).unwrap();
    assert!(json.contains("kv-cache"));
    let report = vrampool::leak_report(&leaks).unwrap();
    assert!(
        report.contains("1 live blocks (4.00 KiB): kv-cache (4.00 KiB)"),
        "{report}"
    );
    assert!(vrampool::leak_report(&[]).is_none());
}

#[test]
fn a_plan_refused_to_the_end_leaves_no_trace_in_the_figures() {
    // The browser's path, step by step: plan a segment, the device refuses it,
    // then just the request, then the same after the cache was released. Only
    // the retry and OOM counters change, and the cache that was released —
    // all of what was releasable. (At a06ed76 the refused allocation had
    // counted a cache miss, marked its pool used and raised the high-water
    // mark and peaks before `revoke`, which undid none of it.) No soft
    // headroom, so planning releases nothing by itself.
    let config = Config {
        headroom: None,
        ..Config::default()
    };
    let mut e = Engine::new(SimulatedDevice::new(1 << 30), config).unwrap();
    let keep = e.allocate(Request::new(4096, 0)).unwrap();
    let cache = e.allocate(Request::new(64 << 20, 0)).unwrap();
    e.free(cache.id).unwrap();
    let before = e.stats();
    assert!(before.releasable_bytes > 0);
    let Planned::Create(plan) = e.plan(Request::new(50 << 20, 7)).unwrap() else {
        panic!("50 MiB of a new usage cannot come from the cache");
    };
    assert!(
        plan.desc().size > 50 << 20,
        "step 1: a packed medium segment"
    );
    assert_eq!(e.stats(), before, "a plan changes nothing yet");
    let plan = e.refused(plan, DeviceError::OutOfMemory).unwrap();
    assert_eq!(plan.desc().size, 50 << 20, "step 2: just the request");
    let plan = e.refused(plan, DeviceError::OutOfMemory).unwrap();
    let err = e.refused(plan, DeviceError::OutOfMemory).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    let mut after = e.stats();
    assert_eq!(after.counters.ooms, before.counters.ooms + 1);
    assert_eq!(
        after.counters.alloc_retries,
        before.counters.alloc_retries + 1
    );
    assert_eq!(
        after.counters.bytes_released, before.releasable_bytes,
        "all the cache"
    );
    assert_eq!(
        after.total.reserved_bytes.current,
        before.total.reserved_bytes.current - before.releasable_bytes
    );
    // Everything else is as it was: no miss, no used pool, no peak moved.
    let mut expected = before.clone();
    expected.counters.ooms += 1;
    expected.counters.alloc_retries += 1;
    expected.counters.device_frees = after.counters.device_frees;
    expected.counters.bytes_released = after.counters.bytes_released;
    expected.total.reserved_bytes.current = after.total.reserved_bytes.current;
    expected.total.cached_bytes.current = after.total.cached_bytes.current;
    expected.total.segments.current = after.total.segments.current;
    expected.total.free_blocks.current = after.total.free_blocks.current;
    expected.pools = after.pools.clone();
    expected.releasable_bytes = 0;
    expected.largest_free_block = after.largest_free_block;
    expected.inactive_split_bytes = after.inactive_split_bytes;
    assert_eq!(
        after.pools.len(),
        before.pools.len(),
        "the refused request's pool is not shown"
    );
    after.pools.clone_from(&expected.pools);
    assert_eq!(after, expected);
    e.check_invariants().unwrap();
    e.free(keep.id).unwrap();
}

#[test]
fn resetting_peak_stats_does_not_change_the_policy() {
    // The headroom scales with the highest allocated bytes ever, not with the
    // user-resettable peak: a reset must not make the pool drop its cache.
    let run = |reset: bool| {
        let mut e = Engine::new(SimulatedDevice::new(8 << 30), Config::default()).unwrap();
        let a = e.allocate(Request::new(1 << 30, 0)).unwrap();
        e.free(a.id).unwrap();
        if reset {
            e.reset_peak_stats();
            assert_eq!(e.stats().total.allocated_bytes.peak, 0);
        }
        let b = e.allocate(Request::new(4096, 0)).unwrap();
        e.free(b.id).unwrap();
        let s = e.stats();
        (
            s.counters.device_allocs,
            s.counters.device_frees,
            s.total.reserved_bytes.current,
        )
    };
    assert_eq!(run(true), run(false));
    assert_eq!(run(true).1, 0, "the cached 1 GiB segment was kept");
}
