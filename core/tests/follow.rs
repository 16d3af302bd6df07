//! Following a static plan (`Engine::follow`): a workload that runs as it
//! was recorded gets the plan's layout — its peak reserved, its few segments,
//! nothing created during the run — with the engine's invariants at every
//! step; a workload that departs from its plan falls back to the policy and,
//! once it has left it, gets the plan's segments back as ordinary cache; bad
//! plans and device refusals are errors that leave nothing pinned behind.

use proptest::prelude::*;
use vrampool::fault::{Fault, Faults, Faulty};
use vrampool::trace::{EngineTarget, Foresight, Replayer};
use vrampool::{Config, Engine, Error, Limit, SegmentClass, SimulatedDevice, Trace, replay};

mod common;
use common::{beside_then_after, random_trace, shared, trace};

const MIB: u64 = 1 << 20;

fn engine() -> Engine<SimulatedDevice> {
    Engine::new(
        SimulatedDevice::with_max_buffer_size(8 << 30, 256 * MIB),
        Config::default(),
    )
    .unwrap()
}

/// Replays `t` step by step, checking the engine's invariants after each.
fn replay_checked<B: vrampool::Backend>(e: &mut Engine<B>, t: &Trace) {
    let mut replayer = Replayer::new(t);
    let mut target = EngineTarget {
        engine: e,
        usage: 0,
        relocatable: false,
    };
    while replayer.step(&mut target).unwrap() {
        target.engine.check_invariants().unwrap();
    }
    for h in replayer.take_live() {
        target.engine.free(h).unwrap();
    }
}

#[test]
fn a_workload_run_as_recorded_gets_its_plan() {
    for name in ["gpt_train", "resnet_train", "batch_sweep", "lstm_train"] {
        let t = shared(name, 64);
        let mut e = engine();
        let plan = Foresight::plan(&t, e.config().alignment, 256 * MIB).unwrap();
        e.follow(&plan, 0).unwrap();
        assert_eq!(e.stats().counters.device_allocs, plan.segments.len() as u64);
        let r = replay(&mut e, &t, 0);
        let followed = e.follow_stats();
        assert_eq!(
            followed.placed,
            t.allocations() as u64,
            "{name}: {followed:?}"
        );
        assert_eq!(followed.unplaced, 0, "{name}");
        // Used up: the engine follows no more, and the segments are ordinary.
        assert!(!followed.following);
        assert!(
            e.snapshot()
                .segments
                .iter()
                .all(|s| s.class == SegmentClass::Large && !s.pinned)
        );
        assert_eq!(
            (r.peak_reserved, r.device_allocs),
            (plan.reserved(), 0),
            "{name}"
        );
        let bound = 1.10 * t.peak_live as f64 + 2.0 * MIB as f64;
        assert!((r.peak_reserved as f64) <= bound, "{name}");
        e.check_invariants().unwrap();
        // Nothing is live: empty_cache gives every planned byte back.
        assert_eq!(e.empty_cache(), plan.reserved());
    }
}

#[test]
fn invariants_hold_at_every_step_of_a_followed_replay() {
    let t = shared("gpt_train", 64);
    let mut e = engine();
    let plan = Foresight::plan(&t, e.config().alignment, 256 * MIB).unwrap();
    e.follow(&plan, 0).unwrap();
    replay_checked(&mut e, &t);
    assert_eq!(e.follow_stats().placed, t.allocations() as u64);
}

#[test]
fn a_workload_that_leaves_its_plan_falls_back_and_gets_the_segments_back() {
    // The plan of gpt_train ÷64, followed by the same workload with every
    // tensor 10 % larger: no request matches, the policy serves them all,
    // and after 64 misses in a row the planned segments are ordinary cache.
    let t = shared("gpt_train", 64);
    let mut e = engine();
    let plan = Foresight::plan(&t, e.config().alignment, 256 * MIB).unwrap();
    e.follow(&plan, 0).unwrap();
    let grown = t.resized(1.1);
    replay_checked(&mut e, &grown);
    let s = e.follow_stats();
    assert_eq!(s.placed, 0);
    assert!(!s.following);
    assert_eq!(
        s.unplaced, 64,
        "it stopped counting when it stopped following"
    );
    assert!(
        e.snapshot()
            .segments
            .iter()
            .all(|s| !s.pinned && s.class != SegmentClass::Planned)
    );
    e.check_invariants().unwrap();
    assert_eq!(e.stats().total.allocated_bytes.current, 0);
    e.empty_cache();
    assert_eq!(e.stats().total.reserved_bytes.current, 0);
}

#[test]
fn requests_the_plan_did_not_foresee_go_to_the_policy_and_leave_the_plan_whole() {
    // a, b live together, then c: the plan packs them into one 4 MiB segment.
    let t = beside_then_after();
    let mut e = engine();
    let plan = Foresight::plan(&t, e.config().alignment, 256 * MIB).unwrap();
    e.follow(&plan, 0).unwrap();
    // The plan's free space serves only what it placed: not in the figure of
    // the largest request the cache could serve.
    assert_eq!(e.stats().largest_free_block, 0);
    let planned = e.snapshot().segments[0].id;
    let a = e.allocate(vrampool::Request::new(3 * MIB, 0)).unwrap();
    // A request the recording lacks: not in the planned segment.
    let extra = e.allocate(vrampool::Request::new(MIB / 2, 0)).unwrap();
    assert_ne!(extra.segment.0, planned);
    let b = e.allocate(vrampool::Request::new(MIB, 0)).unwrap();
    assert_eq!((a.segment.0, a.offset), (planned, plan.blocks[0].offset));
    assert_eq!((b.segment.0, b.offset), (planned, plan.blocks[1].offset));
    for id in [a.id, b.id, extra.id] {
        e.free(id).unwrap();
    }
    let c = e.allocate(vrampool::Request::new(4 * MIB, 0)).unwrap();
    assert_eq!((c.segment.0, c.offset), (planned, 0));
    assert_eq!(e.follow_stats().placed, 3);
    assert_eq!(e.follow_stats().unplaced, 1);
    e.check_invariants().unwrap();
    // Used up: ordinary cache, the whole 4 MiB free for any request.
    e.free(c.id).unwrap();
    assert!(!e.follow_stats().following);
    assert_eq!(e.stats().largest_free_block, 4 * MIB);
    e.check_invariants().unwrap();
}

#[test]
fn bad_plans_and_refusals_are_errors_that_pin_nothing() {
    let t = trace(&[(true, 1, 3 * MIB), (true, 2, 3 * MIB)]);
    // Planned with another alignment than the engine's.
    let odd = Foresight::plan(&t, 128, 256 * MIB).unwrap();
    let mut odd_sized = odd.clone();
    odd_sized.blocks[1].offset += 128;
    let e = engine().follow(&odd_sized, 0).unwrap_err();
    assert!(e.to_string().contains("alignment 256"), "{e}");
    // Larger than a buffer may be.
    let plan = Foresight::plan(&t, 256, 8 << 30).unwrap();
    let mut small = Engine::new(
        SimulatedDevice::with_max_buffer_size(8 << 30, 4 * MIB),
        Config::default(),
    )
    .unwrap();
    let e = small.follow(&plan, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("engine.max_segment_size()"), "{e}");
    // Over the limit.
    let mut limited = Engine::new(
        SimulatedDevice::new(8 << 30),
        Config {
            limit: Some(Limit::Bytes(4 * MIB)),
            ..Config::default()
        },
    )
    .unwrap();
    let e = limited.follow(&plan, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("raise the limit"), "{e}");
    assert_eq!(limited.stats().total.reserved_bytes.current, 0);
    let e = engine().follow(&odd_sized, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // The device refuses the second of two segments: the first is ordinary
    // cache, released by empty_cache, and the engine follows nothing.
    let two = Foresight::plan(&t, 256, 4 * MIB).unwrap();
    assert_eq!(two.segments.len(), 2);
    let mut e = refusing(2);
    assert!(matches!(e.follow(&two, 0), Err(Error::OutOfMemory(_))));
    follows_nothing_and_caches(&mut e, 3 * MIB);
}

#[test]
fn a_plan_followed_again_under_a_limit_takes_the_place_of_the_cache() {
    // The limit holds the plan once, not twice: following it again, its
    // first segments (idle cache once the plan is given up) make room, as a
    // request's ladder releases cache before it refuses. They were counted
    // as held, and the second follow refused.
    let t = trace(&[(true, 1, 3 * MIB), (false, 1, 0), (true, 2, MIB)]);
    let plan = Foresight::plan(&t, 256, 64 * MIB).unwrap();
    let limit = plan.reserved() * 3 / 2;
    let mut e = Engine::new(
        SimulatedDevice::new(8 << 30),
        Config {
            limit: Some(Limit::Bytes(limit)),
            ..Config::default()
        },
    )
    .unwrap();
    e.follow(&plan, 0).unwrap();
    e.follow(&plan, 0).unwrap();
    assert_eq!(e.stats().total.reserved_bytes.current, plan.reserved());
    assert!(e.follow_stats().following);
    e.check_invariants().unwrap();
    // A live block the cache cannot make room beside is still refused,
    // saying what is live.
    e.stop_following();
    let live = e.allocate(vrampool::Request::new(2 * MIB, 7)).unwrap();
    let err = e.follow(&plan, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("2.00 MiB is reserved, 2.00 MiB of it in segments that hold live blocks"),
        "{err}"
    );
    e.free(live.id).unwrap();
    // preallocate makes room the same way.
    e.empty_cache();
    let cached = e.allocate(vrampool::Request::new(limit / 2, 7)).unwrap();
    e.free(cached.id).unwrap();
    e.preallocate(limit * 3 / 4).unwrap();
    e.check_invariants().unwrap();
}

/// An engine whose device refuses its `n`th segment, and the one try after
/// (a refused pinned segment is asked for once more, the cache released and
/// the device waited for).
fn refusing(n: u64) -> Engine<Faulty<SimulatedDevice>> {
    let faults = Faults::new();
    let e = Engine::new(
        Faulty::new(SimulatedDevice::new(8 << 30), faults.clone()),
        Config::default(),
    )
    .unwrap();
    faults.refuse(n, Fault::OutOfMemory);
    faults.refuse(n + 1, Fault::OutOfMemory);
    e
}

/// After a refused `follow`: nothing followed or pinned, and the segments
/// made before the refusal ordinary cache of `cached` bytes.
fn follows_nothing_and_caches(e: &mut Engine<Faulty<SimulatedDevice>>, cached: u64) {
    assert!(!e.follow_stats().following);
    assert!(e.snapshot().segments.iter().all(|s| !s.pinned));
    e.check_invariants().unwrap();
    assert_eq!(e.empty_cache(), cached);
}

#[test]
fn a_run_that_lacks_some_of_the_recording_skips_them_and_empty_cache_ends_the_plan() {
    // Recorded: a, b, c one after another; this run makes a and c only.
    let t = trace(&[
        (true, 1, 3 * MIB),
        (false, 1, 3 * MIB),
        (true, 2, 2 * MIB),
        (false, 2, 2 * MIB),
        (true, 3, MIB),
        (true, 4, MIB),
    ]);
    let mut e = engine();
    let plan = Foresight::plan(&t, e.config().alignment, 256 * MIB).unwrap();
    e.follow(&plan, 0).unwrap();
    let a = e.allocate(vrampool::Request::new(3 * MIB, 0)).unwrap();
    e.free(a.id).unwrap();
    let c = e.allocate(vrampool::Request::new(MIB, 0)).unwrap();
    assert_eq!((c.segment, c.offset), (a.segment, plan.blocks[2].offset));
    assert_eq!(e.follow_stats().placed, 2);
    // Unforeseen requests while following: the soft headroom releases
    // nothing for them (the plan is the memory foreseen).
    // (Without a plan, the 20 and 24 MiB ones would have the 16 and 20 MiB
    // cached segments released for them.)
    for size in [16 * MIB, 20 * MIB, 24 * MIB] {
        let x = e.allocate(vrampool::Request::new(size, 0)).unwrap();
        e.free(x.id).unwrap();
    }
    assert_eq!(e.stats().counters.device_frees, 0);
    // The run ends before its plan (block 3 never comes): empty_cache gives
    // the plan up and releases every segment with nothing live.
    e.free(c.id).unwrap();
    assert!(e.follow_stats().following);
    e.empty_cache();
    assert!(!e.follow_stats().following);
    assert_eq!(e.stats().total.reserved_bytes.current, 0);
    e.check_invariants().unwrap();
}

#[test]
fn plans_the_engine_cannot_index_are_refused() {
    let t = trace(&[(true, 1, MIB)]);
    let mut plan = Foresight::plan(&t, 256, 256 * MIB).unwrap();
    plan.blocks[0].segment = 3;
    let e = engine().follow(&plan, 0).unwrap_err();
    assert!(e.to_string().contains("segment 3 of 1"), "{e}");
    let mut huge = Foresight::plan(&t, 256, 256 * MIB).unwrap();
    huge.segments[0] = 1 << 40;
    let mut big = Engine::new(
        SimulatedDevice::with_max_buffer_size(u64::MAX, u64::MAX),
        Config::default(),
    )
    .unwrap();
    let e = big.follow(&huge, 0).unwrap_err();
    assert!(e.to_string().contains("must be under"), "{e}");
    assert_eq!(big.stats().total.reserved_bytes.current, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(64)))]

    #[test]
    fn any_trace_followed_gets_its_plan(t in random_trace(600), cap_mib in 3u64..32) {
        let mut e = Engine::new(
            SimulatedDevice::with_max_buffer_size(8 << 30, cap_mib * MIB),
            Config::default(),
        )
        .unwrap();
        let plan = Foresight::plan(&t, e.config().alignment, cap_mib * MIB).unwrap();
        e.follow(&plan, 0).unwrap();
        replay_checked(&mut e, &t);
        prop_assert_eq!(e.follow_stats().placed, t.allocations() as u64);
        prop_assert_eq!(e.stats().total.reserved_bytes.peak, plan.reserved());
    }
}

/// A workload of two pools (usage 0x80 and 0x40) and an exclusive request,
/// with a deferred free, run on `e`.
fn two_pools(e: &mut Engine<SimulatedDevice>) -> Result<(), Error> {
    use vrampool::Request;
    for _ in 0..4 {
        let a = e.allocate(Request::new(3 * MIB, 0x80))?;
        let u = e.allocate(Request::new(256, 0x40))?;
        let staging = e.allocate(Request {
            exclusive: true,
            ..Request::new(MIB, 0x80)
        })?;
        let b = e.allocate(Request::new(MIB, 0x80))?;
        e.defer_free(a.id)?;
        // Pending: the 2 MiB tensor may not take a's bytes yet.
        let c = e.allocate(Request::new(2 * MIB, 0x80))?;
        let mark = e.defer_mark();
        e.reclaim_deferred(mark);
        let d = e.allocate(Request::new(2 * MIB, 0x80))?; // a's bytes now
        for x in [u, staging, b, c, d] {
            e.free(x.id)?;
        }
    }
    Ok(())
}

#[test]
fn a_recording_that_cannot_be_planned_is_a_bad_argument_that_says_why() {
    use vrampool::trace::RecordedPlan;
    let mut first = engine();
    first.start_recording();
    two_pools(&mut first).unwrap();
    let log = first.take_recording().unwrap();
    // Planned for a device whose buffers are smaller than its 3 MiB block
    // (a recording made on another device): the argument, not the config.
    let e = Error::from(RecordedPlan::from_recording(&log, 256, 2 * MIB).unwrap_err());
    let Error::InvalidArgument(msg) = &e else {
        panic!("{e:?}")
    };
    assert!(msg.starts_with("cannot plan the recording: pool "), "{msg}");
    assert!(
        msg.contains("does not fit in a segment of at most 2.00 MiB"),
        "{msg}"
    );
    assert!(
        !msg.contains("--"),
        "no harness flag in core's message: {msg}"
    );
    // A log that is not a trace is a trace error.
    let e = Error::from(RecordedPlan::from_recording("not a log", 256, MIB).unwrap_err());
    assert!(matches!(e, Error::Trace(_)), "{e:?}");
}

#[test]
fn a_recording_of_several_pools_is_planned_and_followed_pool_by_pool() {
    use vrampool::trace::{PoolKey, RecordedPlan};
    let mut first = engine();
    first.start_recording();
    two_pools(&mut first).unwrap();
    let log = first.take_recording().unwrap();
    let plan = RecordedPlan::from_recording(&log, 256, 256 * MIB).unwrap();
    // The exclusive pool is left out; the others in the order they came.
    let keys: Vec<PoolKey> = plan.pools.iter().map(|p| p.0).collect();
    assert_eq!(
        keys,
        [0x80, 0x40].map(|usage| PoolKey {
            usage,
            ..PoolKey::default()
        })
    );
    // The deferred free is recorded at its reclaim: the plan keeps a's
    // bytes from c (3 + 1 + 2 MiB at once), and gives them to d.
    assert_eq!(plan.pools[0].1.segments, vec![6 * MIB]);

    let mut next = engine();
    next.follow_recorded(&plan).unwrap();
    let made = next.stats().counters.device_allocs;
    assert_eq!(made, 2);
    two_pools(&mut next).unwrap();
    let follow = next.follow_stats();
    assert_eq!((follow.placed, follow.unplaced), (20, 0), "{follow:?}");
    assert!(!follow.following);
    // Only the exclusive request's own segment was made beside the plan.
    assert_eq!(next.stats().counters.device_allocs, made + 1);
    next.check_invariants().unwrap();
}

#[test]
fn a_plan_of_a_recording_refuses_what_it_cannot_follow_and_pins_nothing() {
    use vrampool::trace::{PoolKey, RecordedPlan};
    let t = trace(&[(true, 1, 3 * MIB), (true, 2, 3 * MIB)]);
    let plan = Foresight::plan(&t, 256, 4 * MIB).unwrap();
    let key = |usage, exclusive| PoolKey {
        usage,
        group: 0,
        exclusive,
    };
    for (pools, why) in [
        (vec![(key(1, true), plan.clone())], "exclusive"),
        (
            vec![(key(1, false), plan.clone()), (key(1, false), plan.clone())],
            "two plans",
        ),
    ] {
        let mut e = engine();
        let err = e.follow_recorded(&RecordedPlan { pools }).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
        assert_eq!(e.stats().total.reserved_bytes.current, 0);
    }
    // The device refuses the second pool's first segment: the first pool's
    // become ordinary cache and nothing is followed.
    let mut e = refusing(3);
    let two = RecordedPlan {
        pools: vec![(key(1, false), plan.clone()), (key(2, false), plan)],
    };
    assert!(matches!(
        e.follow_recorded(&two),
        Err(Error::OutOfMemory(_))
    ));
    follows_nothing_and_caches(&mut e, 6 * MIB);
    // A log whose streams are not an engine's pools.
    let log = "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x1,256,0x7f0000000000\n";
    let err = RecordedPlan::from_recording(log, 256, MIB).unwrap_err();
    assert!(err.to_string().contains("stream 0x7f0000000000"), "{err}");
}

#[test]
fn a_plan_whose_blocks_leave_their_segment_is_refused() {
    use vrampool::trace::{PoolKey, RecordedPlan};
    let t = trace(&[(true, 1, MIB), (true, 2, MIB)]);
    let good = Foresight::plan(&t, 256, 4 * MIB).unwrap();
    for (offset, size) in [(u64::MAX - 255, 256), (good.segments[0], 256), (0, 0)] {
        let mut bad = good.clone();
        bad.blocks[1].offset = offset;
        bad.blocks[1].size = size;
        let mut e = engine();
        let err = e.follow(&bad, 0).unwrap_err();
        assert!(
            err.to_string().contains("not a plan Foresight::plan made"),
            "{err}"
        );
        let plan = RecordedPlan {
            pools: vec![(PoolKey::default(), bad)],
        };
        assert!(e.follow_recorded(&plan).is_err());
        assert_eq!(e.stats().total.reserved_bytes.current, 0);
    }
}

#[test]
fn a_plan_of_a_pool_the_run_stops_using_is_given_up() {
    use vrampool::Request;
    use vrampool::trace::RecordedPlan;
    // Recorded: a pool used once at the start (0x40), then a loop on 0x80.
    let mut first = engine();
    first.start_recording();
    let u = first.allocate(Request::new(4096, 0x40)).unwrap();
    first.free(u.id).unwrap();
    let u = first.allocate(Request::new(4096, 0x40)).unwrap();
    first.free(u.id).unwrap();
    for _ in 0..100 {
        let a = first.allocate(Request::new(MIB, 0x80)).unwrap();
        first.free(a.id).unwrap();
    }
    let plan = RecordedPlan::from_recording(&first.take_recording().unwrap(), 256, MIB).unwrap();
    // This run uses 0x40 once, then only 0x80, far longer than recorded.
    let mut next = engine();
    next.follow_recorded(&plan).unwrap();
    let u = next.allocate(Request::new(4096, 0x40)).unwrap();
    next.free(u.id).unwrap();
    for i in 0..10_000 {
        let a = next.allocate(Request::new(MIB, 0x80)).unwrap();
        next.free(a.id).unwrap();
        if i == 100 {
            // 0x80's plan is used up; 0x40's waits for a second request.
            assert!(next.follow_stats().following);
        }
    }
    assert!(!next.follow_stats().following, "{:?}", next.follow_stats());
    assert!(next.snapshot().segments.iter().all(|s| !s.pinned));
    next.check_invariants().unwrap();
}

#[test]
fn recordings_log_only_their_own_deferred_frees() {
    use vrampool::Request;
    let mut e = engine();
    // Pending before the recording: its free is not logged (its allocation is not).
    let before = e.allocate(Request::new(MIB, 0)).unwrap();
    e.defer_free(before.id).unwrap();
    e.start_recording();
    let a = e.allocate(Request::new(MIB, 0)).unwrap();
    e.defer_free(a.id).unwrap();
    let mark = e.defer_mark();
    let one = e.take_recording().unwrap(); // a's free at the end: still pending
    e.start_recording();
    e.reclaim_deferred(mark); // before's and a's: neither belongs to this recording
    let b = e.allocate(Request::new(MIB, 0)).unwrap();
    e.defer_free(b.id).unwrap();
    let mark = e.defer_mark();
    e.reclaim_deferred(mark);
    let two = e.take_recording().unwrap();
    for (log, rows) in [(&one, 2), (&two, 2)] {
        let t = Trace::parse("log", log.as_bytes()).unwrap();
        assert_eq!(t.events.len(), rows, "{log}");
        assert_eq!(t.peak_live, MIB, "{log}");
    }
}

#[test]
fn recordings_log_only_the_frees_of_blocks_they_saw_allocated() {
    use vrampool::Request;
    // Live when the recording begins, freed during it (at once, deferred
    // and reclaimed, or retired): the log freed what it never allocated,
    // and no reader, nor a plan, took it.
    let mut e = engine();
    let freed = e.allocate(Request::new(MIB, 0)).unwrap();
    let deferred = e.allocate(Request::new(MIB, 0)).unwrap();
    let retired = e
        .allocate(Request {
            exclusive: true,
            ..Request::new(4096, 1)
        })
        .unwrap();
    let across = e.allocate(Request::new(MIB, 0)).unwrap();
    e.start_recording();
    e.free(freed.id).unwrap();
    e.defer_free(deferred.id).unwrap();
    let mark = e.defer_mark();
    e.reclaim_deferred(mark);
    e.retire(retired.id).unwrap();
    let a = e.allocate(Request::new(2 * MIB, 0)).unwrap();
    e.free(a.id).unwrap();
    let kept = e.allocate(Request::new(MIB, 0)).unwrap();
    let one = e.take_recording().unwrap();
    // A block of the first recording freed in the second is not its either.
    e.start_recording();
    e.free(kept.id).unwrap();
    e.free(across.id).unwrap();
    let b = e.allocate(Request::new(MIB, 0)).unwrap();
    e.free(b.id).unwrap();
    let two = e.take_recording().unwrap();
    for (log, rows, peak) in [(&one, 3, 2 * MIB), (&two, 2, MIB)] {
        let t = Trace::parse("log", log.as_bytes()).unwrap();
        assert_eq!((t.events.len(), t.peak_live), (rows, peak), "{log}");
        vrampool::trace::RecordedPlan::from_recording(log, 256, 64 * MIB).unwrap();
    }
}

#[test]
fn a_pool_used_once_a_long_step_keeps_its_plan_while_another_plan_matches() {
    use vrampool::Request;
    use vrampool::trace::RecordedPlan;
    // Each step: one 0x40 readback, then 5 000 tensors of 0x80.
    let step = |e: &mut Engine<SimulatedDevice>| {
        let r = e.allocate(Request::new(4096, 0x40)).unwrap();
        e.free(r.id).unwrap();
        for _ in 0..5_000 {
            let a = e.allocate(Request::new(MIB, 0x80)).unwrap();
            e.free(a.id).unwrap();
        }
    };
    let mut first = engine();
    first.start_recording();
    for _ in 0..3 {
        step(&mut first);
    }
    let plan = RecordedPlan::from_recording(&first.take_recording().unwrap(), 256, MIB).unwrap();
    let mut next = engine();
    next.follow_recorded(&plan).unwrap();
    for _ in 0..3 {
        step(&mut next);
    }
    let follow = next.follow_stats();
    assert_eq!((follow.placed, follow.unplaced), (15_003, 0), "{follow:?}");
    assert!(!follow.following);
}

#[test]
fn a_pinned_plan_counts_against_the_limit_until_committed_and_refuses_misuse() {
    // The browser's phases: the plan's bytes are held against the limit
    // while its segments are made, so a request meanwhile cannot take them;
    // a commit with the wrong segments, or on another engine, is refused;
    // those made become ordinary cache.
    let t = trace(&[
        (true, 1, 3 * MIB),
        (true, 2, 2 * MIB),
        (false, 1, 0),
        (false, 2, 0),
    ]);
    let two = Foresight::plan(&t, 256, 4 * MIB).unwrap();
    assert_eq!(two.segments.len(), 2);
    let recorded = vrampool::trace::RecordedPlan {
        pools: vec![(Default::default(), two.clone())],
    };
    let limit = two.reserved() + MIB;
    let mut e = Engine::new(
        SimulatedDevice::new(8 << 30),
        Config {
            limit: Some(Limit::Bytes(limit)),
            ..Config::default()
        },
    )
    .unwrap();
    let plan = e.plan_follow_recorded(&recorded).unwrap();
    assert_eq!((plan.len(), plan.bytes()), (2, two.reserved()));
    let err = e.allocate(vrampool::Request::new(2 * MIB, 7)).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
    let first = e.create_pinned_segment(&plan, 0).unwrap();
    let err = e.commit_pinned(plan, vec![first]).unwrap_err();
    assert!(err.to_string().contains("committed with 1"), "{err}");
    assert!(!e.follow_stats().following);
    assert_eq!(e.snapshot().segments.len(), 1, "the one made is cache");
    assert!(e.snapshot().segments.iter().all(|s| !s.pinned));
    assert_eq!(e.empty_cache(), two.segments[0]);

    // Another engine's plan.
    let mut other = engine();
    let plan = other.plan_follow_recorded(&recorded).unwrap();
    let err = e.commit_pinned(plan, Vec::new()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(e.stats().total.reserved_bytes.current, 0);
    assert_eq!(other.stats().total.reserved_bytes.current, 0);

    // Committed in full: followed, and the limit holds the plan once.
    let plan = e.plan_follow_recorded(&recorded).unwrap();
    let made: Vec<_> = (0..plan.len())
        .map(|i| e.create_pinned_segment(&plan, i).unwrap())
        .collect();
    e.commit_pinned(plan, made).unwrap();
    assert!(e.follow_stats().following);
    assert_eq!(e.stats().total.reserved_bytes.current, two.reserved());
    replay_checked(&mut e, &t);
    assert_eq!(e.follow_stats().placed, 2, "{:?}", e.follow_stats());
    e.check_invariants().unwrap();
}
