//! What the fuzz targets check, callable on stable too: the regression test
//! in core/tests/fuzz_regressions.rs includes this file and runs it over every
//! input kept in fuzz/regressions/. A panic anywhere is a finding.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use vrampool::{
    Allocation, Config, Engine, Growth, Limit, Request, SimulatedDevice, Trace, replay,
};

/// Any bytes, plain or gzip: the reader returns a trace or an error with a
/// message, never panics; a trace it accepts is consistent and replays.
pub fn trace_reader(data: &[u8]) {
    let trace = match Trace::from_bytes("fuzz", data) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    // Every free matches a live allocation; the peak is what the events say.
    let (mut live, mut cur, mut peak) = (HashMap::new(), 0u64, 0u64);
    for e in &trace.events {
        match e.action {
            vrampool::trace::Action::Allocate => {
                assert!(e.size > 0);
                assert!(live.insert(e.pointer, e.size).is_none());
                cur += e.size;
                peak = peak.max(cur);
            }
            vrampool::trace::Action::Free => {
                assert_eq!(live.remove(&e.pointer), Some(e.size));
                cur -= e.size;
            }
        }
    }
    assert_eq!(peak, trace.peak_live);
    let mut engine = Engine::new(SimulatedDevice::new(1 << 40), Config::default()).unwrap();
    let report = replay(&mut engine, &trace, 1);
    assert_eq!(report.allocs as usize, trace.allocations());
    engine.check_invariants().unwrap();
}

/// The engine's configurations a session may start from.
#[derive(Arbitrary, Debug)]
enum Setup {
    Default,
    PyTorch,
    Limit(u32),
    CacheLimit(u32),
    Preallocate(u32),
    NoHeadroom,
    SharedLargePool,
}

/// One operation against the engine.
#[derive(Arbitrary, Debug)]
enum Op {
    Alloc {
        size: u32,
        shift: u8,
        usage: u8,
        exclusive: bool,
        group: bool,
        exact: bool,
    },
    Free(u16),
    DeferFree(u16),
    Reclaim,
    FreeAgain(u16),
    EmptyCache,
    SetLimit(Option<u32>),
    SetCacheLimit(Option<u32>),
    ResetPeaks,
    LoseDevice,
}

#[derive(Arbitrary, Debug)]
struct Session {
    setup: Setup,
    capacity_mib: u16,
    ops: Vec<Op>,
}

/// A random session of operations: after every one the engine's invariants
/// hold, its stats match what the session holds, a freed block is refused, a
/// hard limit is never crossed by a new segment, and nothing panics.
pub fn engine_ops(data: &[u8]) {
    let Ok(session) = Session::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mib = |n: u32| u64::from(n) << 20;
    let mut config = Config::default();
    match session.setup {
        Setup::Default => {}
        Setup::PyTorch => config = Config::pytorch(),
        Setup::Limit(l) => config.limit = Some(Limit::Bytes(u64::from(l) << 12)),
        Setup::CacheLimit(c) => config.cache_limit = Some(u64::from(c) << 12),
        Setup::Preallocate(p) => config.growth = Growth::Preallocate(u64::from(p % 4096) << 16),
        Setup::NoHeadroom => config.headroom = None,
        Setup::SharedLargePool => config.shared_large_pool = true,
    }
    let capacity = mib(u32::from(session.capacity_mib.max(1)));
    let Ok(mut engine) = Engine::new(SimulatedDevice::new(capacity), config) else {
        return;
    };
    let mut live: Vec<Allocation> = Vec::new();
    let mut freed: Vec<Allocation> = Vec::new();
    for op in session.ops {
        match op {
            Op::Alloc {
                size,
                shift,
                usage,
                exclusive,
                group,
                exact,
            } => {
                let size = u64::from(size) << (shift % 24);
                let req = Request {
                    exclusive,
                    group: u8::from(group),
                    exact_segment: exact,
                    ..Request::new(size, u32::from(usage % 3) + 1)
                };
                let before = engine.stats().total.reserved_bytes.current;
                match engine.allocate(req) {
                    Ok(a) => {
                        assert!(a.size >= size);
                        live.push(a);
                    }
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
                if let Some(limit) = engine.limit() {
                    let after = engine.stats().total.reserved_bytes.current;
                    assert!(after <= limit.max(before), "{after} reserved over {limit}");
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let a = live.swap_remove(usize::from(i) % live.len());
                engine.free(a.id).unwrap();
                freed.push(a);
            }
            Op::DeferFree(i) if !live.is_empty() => {
                let a = live.swap_remove(usize::from(i) % live.len());
                engine.defer_free(a.id).unwrap();
                freed.push(a);
            }
            Op::Reclaim => {
                let mark = engine.defer_mark();
                engine.reclaim_deferred(mark);
                assert_eq!(engine.stats().total.pending_bytes.current, 0);
            }
            Op::FreeAgain(i) if !freed.is_empty() => {
                let a = &freed[usize::from(i) % freed.len()];
                assert!(engine.free(a.id).is_err(), "a block freed twice");
            }
            Op::EmptyCache => {
                engine.empty_cache();
            }
            Op::SetLimit(l) => {
                let _ = engine.set_limit(l.map(|l| Limit::Bytes(u64::from(l) << 12)));
            }
            Op::SetCacheLimit(c) => engine.set_cache_limit(c.map(|c| u64::from(c) << 12)),
            Op::ResetPeaks => engine.reset_peak_stats(),
            Op::LoseDevice => engine.backend_mut().lose(),
            _ => {}
        }
        engine.check_invariants().unwrap();
        let s = engine.stats();
        assert_eq!(
            s.total.allocated_bytes.current,
            live.iter().map(|a| a.size).sum::<u64>()
        );
        assert_eq!(s.total.allocations.current, live.len() as u64);
        assert!(s.total.reserved_bytes.current <= capacity);
    }
    for a in live {
        engine.free(a.id).unwrap();
    }
    let mark = engine.defer_mark();
    engine.reclaim_deferred(mark);
    engine.empty_cache();
    let s = engine.stats();
    assert_eq!(s.total.allocated_bytes.current, 0);
    assert_eq!(
        s.total.reserved_bytes.current,
        engine
            .snapshot()
            .segments
            .iter()
            .filter(|g| g.pinned)
            .map(|g| g.size)
            .sum::<u64>()
    );
}
