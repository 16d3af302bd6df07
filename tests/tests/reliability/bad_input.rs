//! Bad input through the API: each case gets a clear error (or, for input that
//! is odd but valid, the right result) and leaves the pool consistent, its
//! figures unchanged where nothing happened. The trace reader's cases are in
//! core/tests/trace_reader.rs, the CLI's in native/tests/cli.rs.

use vrampool::{
    AllocDesc, Config, Engine, Error, Growth, Limit, Pool, PoolOptions, SimulatedDevice, Trace,
};
use vrampool_tests::{Range, Tagger};
use wgpu::BufferUsages as U;

use super::pool_with;

/// A request that must fail with a message containing each of `expect`.
struct Refused {
    case: &'static str,
    desc: AllocDesc<'static>,
    expect: &'static [&'static str],
}

#[test]
fn refused_requests_name_the_problem_and_change_nothing() {
    let pool = pool_with(Config {
        limit: Some(Limit::Bytes(64 << 20)),
        ..Config::default()
    });
    let max = pool.device().limits().max_buffer_size;
    // Some state to keep: live blocks and cache.
    let kept: Vec<_> = (0..3)
        .map(|_| pool.alloc(AllocDesc::storage(3 << 20)).unwrap())
        .collect();
    drop(pool.alloc(AllocDesc::storage(5 << 20)).unwrap());
    pool.submitted(); // nothing was recorded: the dropped block is cache
    let s = AllocDesc::storage;
    let cases = [
        Refused {
            case: "size 0",
            desc: s(0),
            expect: &["cannot allocate 0 bytes"],
        },
        Refused {
            case: "above max_buffer_size",
            desc: s(max + 1),
            expect: &[
                "larger than the largest segment this pool may create",
                "max_buffer_size",
            ],
        },
        Refused {
            case: "u64::MAX bytes (rounding would overflow)",
            desc: s(u64::MAX),
            expect: &[
                "larger than the largest segment this pool may create",
                "max_buffer_size",
            ],
        },
        Refused {
            case: "above the pool's limit",
            desc: s(65 << 20),
            expect: &["out of memory", "limit 64.00 MiB", "allocated", "cached"],
        },
        Refused {
            case: "no usage",
            desc: s(256).usage(U::empty()),
            expect: &["no usage given"],
        },
        Refused {
            case: "MAP_READ | STORAGE without MAPPABLE_PRIMARY_BUFFERS",
            desc: s(256).usage(U::MAP_READ | U::STORAGE),
            expect: &[
                "MAP_READ combines only with COPY_DST",
                "MAPPABLE_PRIMARY_BUFFERS",
            ],
        },
        Refused {
            case: "MAP_READ | MAP_WRITE",
            desc: s(256).usage(U::MAP_READ | U::MAP_WRITE),
            expect: &["MAP_READ combines only with COPY_DST"],
        },
        Refused {
            case: "MAP_WRITE | COPY_DST",
            desc: s(256).usage(U::MAP_WRITE | U::COPY_DST),
            expect: &["MAP_WRITE only with COPY_SRC"],
        },
        Refused {
            case: "MAP_READ | COPY_DST | UNIFORM",
            desc: s(256).usage(U::MAP_READ | U::COPY_DST | U::UNIFORM),
            expect: &["invalid usage"],
        },
        Refused {
            // wgpu itself refuses: acceleration-structure input needs a feature
            // this device was not created with.
            case: "BLAS_INPUT without the ray-tracing feature",
            desc: s(256).usage(U::BLAS_INPUT),
            expect: &["device error", "EXPERIMENTAL_RAY_QUERY"],
        },
        Refused {
            case: "read_write access with a read-only use (UNIFORM)",
            desc: s(256).usage(U::STORAGE | U::UNIFORM).read_write(),
            expect: &["Access::ReadWrite", "read-only use", "Access::Any"],
        },
        Refused {
            case: "read_write access without STORAGE",
            desc: AllocDesc::vertex(256).read_write(),
            expect: &["Access::ReadWrite", "add STORAGE"],
        },
    ];
    for c in &cases {
        let before = pool.stats();
        let e = match pool.alloc(c.desc) {
            Ok(_) => panic!("{}: a buffer was handed out", c.case),
            Err(e) => e.to_string(),
        };
        for want in c.expect {
            assert!(e.contains(want), "{}: `{e}` lacks `{want}`", c.case);
        }
        if e.starts_with("out of memory") {
            assert!(before.releasable_bytes > 0, "the case has cache to lose");
        }
        changed_nothing(&pool, &before, &e, c.case, "alloc");
        // The async path refuses the same way, with the same figures.
        let before = pool.stats();
        let a = pollster::block_on(pool.alloc_async(c.desc));
        let Err(async_error) = a else {
            panic!("{}: alloc_async handed out a buffer", c.case)
        };
        assert_eq!(async_error.to_string(), e, "{}", c.case);
        changed_nothing(&pool, &before, &e, c.case, "alloc_async");
    }
    drop(kept);
}

/// After a refusal with message `e`: an out-of-memory is counted, and
/// nothing else changed (not even the whole cache would make room under the
/// limit, so it is kept); the pool is consistent.
fn changed_nothing(pool: &Pool, before: &vrampool::Stats, e: &str, case: &str, path: &str) {
    let mut after = pool.stats();
    if e.starts_with("out of memory") {
        assert_eq!(
            after.counters.ooms,
            before.counters.ooms + 1,
            "{case}, {path}"
        );
        after.counters.ooms = before.counters.ooms;
    }
    assert_eq!(&after, before, "{case}: {path} changed the figures");
    pool.check_invariants()
        .unwrap_or_else(|e| panic!("{case}, {path}: {e}"));
}

#[test]
fn bad_configurations_are_refused_and_leave_the_limit_alone() {
    let pool = pool_with(Config::default());
    pool.set_limit(Some(Limit::Bytes(32 << 20))).unwrap();
    let before = pool.stats();
    for (case, limit, want) in [
        (
            "a fraction without the device capacity",
            Limit::Fraction(0.5),
            "needs the device capacity",
        ),
        (
            "a NaN fraction",
            Limit::Fraction(f64::NAN),
            "must be above 0 and at most 1",
        ),
        (
            "a negative fraction",
            Limit::Fraction(-1.0),
            "must be above 0 and at most 1",
        ),
        (
            "an infinite fraction",
            Limit::Fraction(f64::INFINITY),
            "must be above 0 and at most 1",
        ),
        (
            "a fraction above 1",
            Limit::Fraction(1.5),
            "must be above 0 and at most 1",
        ),
    ] {
        let e = pool.set_limit(Some(limit)).unwrap_err().to_string();
        assert!(e.contains(want), "{case}: {e}");
        assert_eq!(pool.stats(), before, "{case}");
    }
    // The old limit still holds.
    let e = pool.alloc(AllocDesc::storage(33 << 20)).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory(i) if i.limit == Some(32 << 20)),
        "{e}"
    );

    let (device, queue, _) = vrampool_tests::device();
    let max = device.limits().max_buffer_size;
    for (case, config, want) in [
        (
            "alignment 3",
            Config {
                alignment: 3,
                ..Config::default()
            },
            "alignment must be a power of two",
        ),
        (
            "a preallocation larger than one buffer",
            Config {
                growth: Growth::Preallocate(max + 1),
                ..Config::default()
            },
            "max_buffer_size",
        ),
    ] {
        let options = PoolOptions {
            config,
            ..Default::default()
        };
        let e = Pool::new(device.clone(), queue.clone(), options).unwrap_err();
        assert!(e.to_string().contains(want), "{case}: {e}");
    }
}

#[test]
fn odd_sizes_are_rounded_and_usable() {
    let pool = pool_with(Config::default());
    let tagger = Tagger::new(pool.device(), pool.queue());
    let sizes = [1u64, 3, 5, 255, 257, 4097, 1_000_003];
    let blocks: Vec<_> = sizes
        .iter()
        .map(|&n| pool.alloc(AllocDesc::storage(n)).unwrap())
        .collect();
    for (b, &n) in blocks.iter().zip(&sizes) {
        assert_eq!(
            b.size(),
            n.next_multiple_of(4),
            "{n}: bindable, multiple of 4"
        );
        assert!(b.block_size() >= b.size());
        assert_eq!(b.offset() % 256, 0);
    }
    let s = pool.stats();
    let held: u64 = blocks.iter().map(|b| b.block_size()).sum();
    assert_eq!(s.total.allocated_bytes.current, held);
    let ranges: Vec<Range> = blocks.iter().map(|b| Range::from(&**b)).collect();
    assert_eq!(tagger.tag_and_verify(&ranges), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn labels_with_any_characters_survive_every_report() {
    let pool = pool_with(Config::default());
    pool.start_recording();
    let long = "x".repeat(1 << 20);
    let labels = [
        "nul\0inside",
        "new\nline, comma \"quoted\"",
        "\u{202e}right-to-left \u{1f525} emoji",
        "",
        long.as_str(),
    ];
    let blocks: Vec<_> = labels
        .iter()
        .map(|l| pool.alloc(AllocDesc::storage(1024).label(l)).unwrap())
        .collect();
    for (b, l) in blocks.iter().zip(labels) {
        assert_eq!(b.label(), Some(l));
    }
    let leaks = pool.leaks();
    for l in labels {
        assert!(leaks.iter().any(|k| k.label.as_deref() == Some(l)));
    }
    let snapshot = pool.snapshot();
    let mut shown: Vec<&str> = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == vrampool::SnapshotState::Live)
        .filter_map(|b| b.label.as_deref())
        .collect();
    let mut want = labels.to_vec();
    shown.sort_unstable();
    want.sort_unstable();
    assert!(shown == want, "the snapshot's labels are the blocks' own");
    let snap = serde_json::to_string(&snapshot).unwrap();
    let back: vrampool::Snapshot = serde_json::from_str(&snap).unwrap();
    assert_eq!(back, snapshot);
    assert!(!pool.memory_summary().is_empty());
    drop(blocks);
    // The recording (labels are not part of RMM's format) still parses.
    let log = pool.take_recording().unwrap();
    let t = Trace::parse("labels", log.as_bytes()).unwrap();
    assert_eq!(t.allocations(), labels.len());
}

#[test]
fn freeing_a_block_twice_or_a_stranger_is_refused_by_the_engine() {
    // Two engines doing the same operations put their blocks in the same slots:
    // the other engine's id names a slot that is live here too.
    let engine = || Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
    let (mut ours, mut theirs) = (engine(), engine());
    let two = |e: &mut Engine<SimulatedDevice>| {
        let r = || vrampool::Request::new(4096, 1);
        (e.allocate(r()).unwrap(), e.allocate(r()).unwrap())
    };
    let (a, keep) = two(&mut ours);
    let (_, stranger) = two(&mut theirs);
    assert_eq!(
        (stranger.segment, stranger.offset),
        (keep.segment, keep.offset)
    );
    ours.free(a.id).unwrap();
    let before = ours.stats();
    for (case, id) in [
        ("double free", a.id),
        ("another engine's block", stranger.id),
    ] {
        let e = ours.free(id).unwrap_err().to_string();
        assert!(
            e.contains("already freed, or belongs to another pool"),
            "{case}: {e}"
        );
        assert_eq!(ours.stats(), before, "{case}");
        ours.check_invariants().unwrap();
    }
    ours.free(keep.id).unwrap();
}
