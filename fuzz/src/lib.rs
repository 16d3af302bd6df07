//! What the fuzz targets check, callable on stable too: the regression test
//! in core/tests/fuzz_regressions.rs includes this file and runs it over every
//! input kept in fuzz/regressions/. A panic anywhere is a finding.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use vrampool::fault::{Fault, Faults, Faulty};
use vrampool::{
    Allocation, Config, Engine, Error, Growth, Limit, LimitKind, OomInfo, Planned, Request,
    SimulatedDevice, Stats, Trace, replay,
};

/// Any bytes, plain or gzip: the reader returns a trace or an error with a
/// message, never panics; a trace it accepts is consistent and replays.
pub fn trace_reader(data: &[u8]) {
    let trace = match Trace::from_bytes("fuzz", data) {
        Ok(t) => t,
        Err(e) => {
            // Every refusal names the input (and its line, past the header).
            assert!(e.to_string().starts_with("fuzz"), "{e}");
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
    streams(data, &trace);
}

/// A log the reader accepts, read stream by stream and planned pool by pool:
/// each stream's rows are a part of the whole (or an error with a message,
/// where a pointer is freed on another stream than it was allocated on),
/// and a plan is an error or plans only what the log holds.
fn streams(data: &[u8], whole: &Trace) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // gzip: the stream readers take plain text
    };
    let streams = match Trace::streams("fuzz", data) {
        Ok(s) => s,
        Err(e) => {
            // A stream column the whole read never looks at may be bad.
            assert!(e.to_string().starts_with("fuzz"), "{e}");
            return;
        }
    };
    let mut events = 0;
    for s in &streams {
        match Trace::parse_stream("fuzz", data, *s) {
            Ok(t) => events += t.events.len(),
            Err(e) => assert!(e.to_string().starts_with("fuzz"), "{e}"),
        }
    }
    assert!(events <= whole.events.len());
    if data.len() <= 64 << 10
        && let Ok(plan) = vrampool::trace::RecordedPlan::from_recording(text, 256, 1 << 40)
    {
        let planned: usize = plan.pools.iter().map(|(_, p)| p.blocks.len()).sum();
        assert!(planned <= whole.allocations());
    }
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
    /// A hard limit taken as a ceiling (`LimitKind::Ceiling`).
    Ceiling(u32),
}

/// How the device refuses a programmed create.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Refusal {
    OutOfMemory,
    Lost,
}

impl From<Refusal> for Fault {
    fn from(r: Refusal) -> Fault {
        match r {
            Refusal::OutOfMemory => Fault::OutOfMemory,
            Refusal::Lost => Fault::Lost,
        }
    }
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
    },
    /// Plans an allocation, then cancels the plan if it needs a segment.
    PlanCancel {
        size: u32,
        shift: u8,
    },
    Free(u16),
    DeferFree(u16),
    Reclaim,
    FreeAgain(u16),
    EmptyCache,
    SetLimit(Option<u32>),
    SetCacheLimit(Option<u32>),
    ResetPeaks,
    /// The device refuses the `n`th create from now (1 to 4).
    Refuse(u8, Refusal),
}

#[derive(Arbitrary, Debug)]
struct Session {
    setup: Setup,
    capacity_mib: u16,
    ops: Vec<Op>,
}

/// What the hard limit had to make room for, for a request of `rounded`
/// bytes: the request itself, which a segment shrinks to, or where segments
/// are not fitted to the limit (`Config::fit_to_limit` off: the PyTorch
/// preset) the segment it asks for, as PyTorch sizes it (2 MiB up to 1 MiB,
/// 20 MiB below 10 MiB, else rounded up to 2 MiB; an exclusive request's is
/// the request).
fn limit_needs(config: &Config, max_segment: u64, rounded: u64, exclusive: bool) -> u64 {
    if config.fit_to_limit || exclusive {
        return rounded;
    }
    let segment = match rounded {
        r if r <= 1 << 20 => 2 << 20,
        r if r < 10 << 20 => 20 << 20,
        r => r.next_multiple_of(2 << 20),
    };
    segment.min(max_segment).max(rounded)
}

/// What a refused request may change: the OOM and retry counters, and the
/// cache it released. Refused by the limit: nothing (the limit refuses only
/// a request not even the whole cache would make room for — `need` bytes,
/// see [`limit_needs`] — and keeps that cache). Refused by the device: all that was releasable, and, with
/// relocatable blocks, segments the soft headroom emptied by moving their
/// blocks. Everything else of `after` equals `before`.
fn check_refusal(before: &Stats, after: &Stats, info: &OomInfo, need: u64) {
    let released = after.counters.bytes_released - before.counters.bytes_released;
    if !info.device_refused {
        let limit = info.limit.expect("only a limit refuses but the device");
        assert!(
            before.total.reserved_bytes.current - before.releasable_bytes + need > limit,
            "the limit refused a request the cache could have made room for"
        );
        assert_eq!(released, 0, "the limit's refusal keeps the cache");
        assert_eq!(after.counters.alloc_retries, before.counters.alloc_retries);
        assert_eq!(after.counters.blocks_moved, before.counters.blocks_moved);
    } else if after.counters.blocks_moved == before.counters.blocks_moved {
        assert_eq!(
            released, before.releasable_bytes,
            "a refused request releases every releasable byte before it fails"
        );
    } else {
        // The soft headroom emptied partly live segments by moving their
        // relocatable blocks (into others, some of them releasable before)
        // and released them, before the device refused: every segment with
        // no live block is released all the same.
        assert_eq!(after.releasable_bytes, 0, "nothing releasable is kept");
    }
    assert_eq!(after.counters.allocs, before.counters.allocs);
    assert_eq!(after.counters.cache_hits, before.counters.cache_hits);
    assert_eq!(after.counters.cache_misses, before.counters.cache_misses);
    assert_eq!(after.counters.device_allocs, before.counters.device_allocs);
    assert_eq!(after.total.allocated_bytes, before.total.allocated_bytes);
    assert_eq!(after.total.requested_bytes, before.total.requested_bytes);
    assert_eq!(after.total.allocations, before.total.allocations);
    // Released segments may have held pending blocks (they were abandoned).
    assert!(after.total.pending_bytes.current <= before.total.pending_bytes.current);
    assert_eq!(
        before.total.cached_bytes.current + before.total.pending_bytes.current
            - after.total.cached_bytes.current
            - after.total.pending_bytes.current,
        released
    );
    assert_eq!(
        after.total.reserved_bytes.current,
        before.total.reserved_bytes.current - released
    );
    assert_eq!(
        after.total.reserved_bytes.peak,
        before.total.reserved_bytes.peak
    );
    assert_eq!(
        after.pools.len(),
        before.pools.len(),
        "a refused request's pool is not shown"
    );
}

/// A random session of operations, over a backend that refuses the creates
/// the session programs: after every operation the engine's invariants hold,
/// its stats match what the session holds, the bytes held match an
/// independent count, no create crosses the hard limit, a freed block is
/// refused, a refused request changes only what it may, and nothing panics.
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
        Setup::Ceiling(l) => {
            config.limit = Some(Limit::Bytes(u64::from(l) << 12));
            config.limit_kind = LimitKind::Ceiling;
        }
    }
    let capacity = mib(u32::from(session.capacity_mib.max(1)));
    let faults = Faults::new();
    let device = Faulty::new(SimulatedDevice::new(capacity), faults.clone());
    let Ok(mut engine) = Engine::new(device, config) else {
        return;
    };
    faults.check_limit(engine.limit());
    let mut live: Vec<Allocation> = Vec::new();
    let mut freed: Vec<Allocation> = Vec::new();
    // Live blocks asked for as not relocatable: they never move.
    let mut fixed = std::collections::HashSet::new();
    for op in session.ops {
        match op {
            Op::Alloc {
                size,
                shift,
                usage,
                exclusive,
                group,
            } => {
                let size = u64::from(size) << (shift % 24);
                // The high bit of `usage` (which only `usage % 3` reads
                // otherwise, so kept inputs decode as before): relocatable.
                let req = Request {
                    exclusive,
                    group: u8::from(group),
                    relocatable: usage >= 128,
                    ..Request::new(size, u32::from(usage % 3))
                };
                let relocatable = req.relocatable;
                let before = engine.stats();
                match engine.allocate(req) {
                    Ok(a) => {
                        assert!(a.size >= size);
                        if !relocatable {
                            fixed.insert(a.id);
                        }
                        live.push(a);
                    }
                    Err(Error::OutOfMemory(info)) => {
                        let a = engine.config().alignment;
                        let rounded = size.div_ceil(a) * a;
                        let max = engine.max_segment_size();
                        let need = limit_needs(engine.config(), max, rounded, exclusive);
                        check_refusal(&before, &engine.stats(), &info, need)
                    }
                    Err(_) => {
                        let after = engine.stats();
                        assert_eq!(after.total.allocated_bytes, before.total.allocated_bytes);
                        assert_eq!(after.counters.device_allocs, before.counters.device_allocs);
                    }
                }
            }
            Op::PlanCancel { size, shift } => {
                let size = u64::from(size) << (shift % 24);
                let before = engine.stats();
                match engine.plan(Request::new(size, 0)) {
                    Ok(Planned::Hit(a)) => live.push(a),
                    Ok(Planned::Create(plan)) => {
                        engine.cancel(plan);
                        // Sizing the plan may have released cache for it, nothing else.
                        let after = engine.stats();
                        assert_eq!(after.counters.allocs, before.counters.allocs);
                        assert_eq!(after.total.allocated_bytes, before.total.allocated_bytes);
                        assert_eq!(after.counters.device_allocs, before.counters.device_allocs);
                    }
                    Err(_) => {}
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let a = live.swap_remove(usize::from(i) % live.len());
                fixed.remove(&a.id);
                engine.free(a.id).unwrap();
                freed.push(a);
            }
            Op::DeferFree(i) if !live.is_empty() => {
                let a = live.swap_remove(usize::from(i) % live.len());
                fixed.remove(&a.id);
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
                faults.check_limit(engine.limit());
            }
            Op::SetCacheLimit(c) => engine.set_cache_limit(c.map(|c| u64::from(c) << 12)),
            Op::ResetPeaks => engine.reset_peak_stats(),
            Op::Refuse(n, how) => faults.refuse(u64::from(n % 4) + 1, how.into()),
            _ => {}
        }
        engine.check_invariants().unwrap();
        // Only live relocatable blocks move, each to another segment, and
        // the device copied what the engine counts.
        for m in engine.take_moves() {
            assert!(live.iter().any(|a| a.id == m.id), "only live blocks move");
            assert!(!fixed.contains(&m.id), "a block not relocatable moved");
            assert_ne!(m.from.0, m.to.0, "a block moved within its segment");
        }
        let s = engine.stats();
        assert_eq!(s.counters.bytes_moved, engine.backend().inner().moved());
        assert_eq!(
            s.total.allocated_bytes.current,
            live.iter().map(|a| a.size).sum::<u64>()
        );
        assert_eq!(s.total.allocations.current, live.len() as u64);
        assert!(s.total.reserved_bytes.current <= capacity);
        assert_eq!(
            s.total.reserved_bytes.current,
            faults.held(),
            "an independent count"
        );
        assert_eq!(engine.backend().inner().used(), faults.held());
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
