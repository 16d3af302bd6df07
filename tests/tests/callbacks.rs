//! wgpu runs user callbacks inside the pool's own wgpu calls: a submit or a
//! poll fires every `map_async` callback that is due, and a poll on a lost
//! device runs its lost callback. Several of those calls are made with the
//! pool's lock held. A callback that drops a handle, submits, or allocates,
//! and an observer that reads the pool, must not wait for the lock its own
//! thread holds. Each case runs on a thread of its own and fails (instead of
//! hanging the suite) if it does not finish in time; on the device the tests
//! run on (lavapipe, or GL with `VRAMPOOL_TEST_BACKEND=gl`).
//!
//! The pools here have no front cache where a drop or a hit must reach the
//! engine (a block parked in the front cache never takes the lock).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

use vrampool::{AllocDesc, BindingUse, BlockUse, Config, Error, Limit, Pool, PoolOptions, Reuse};

/// Runs `f` on a thread and returns its value, or fails if it has not
/// returned within a minute: a deadlock.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still waiting after a minute (a deadlock on the pool's lock)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{what}: the thread panicked (its message is above)")
        }
    }
}

fn pool_with(config: Config, reuse: Reuse, front_cache: bool) -> Arc<Pool> {
    let (device, queue, _) = vrampool_tests::device();
    let options = PoolOptions {
        config,
        reuse,
        front_cache,
        ..PoolOptions::default()
    };
    Arc::new(Pool::new(device, queue, options).expect("pool"))
}

/// A pool whose every drop and allocation goes through the engine's lock.
fn pool(reuse: Reuse) -> Arc<Pool> {
    pool_with(Config::default(), reuse, false)
}

/// A readback block mapped with `callback` as its callback: wgpu calls it
/// at the next poll or submit, whoever makes it. The map has not completed
/// when this returns (no poll has run since).
fn map_with(pool: &Pool, callback: impl FnOnce() + Send + 'static) -> vrampool::PoolBuffer {
    let staging = pool.alloc(AllocDesc::readback(256)).expect("staging");
    staging
        .slice()
        .map_async(wgpu::MapMode::Read, move |_| callback());
    staging
}

/// A request no segment of a fresh pool has room for: it makes a segment,
/// and the pool polls the device first, with its lock held.
fn new_segment() -> AllocDesc<'static> {
    AllocDesc::storage(48 << 20).read_write().label("big")
}

fn allocated(pool: &Pool) -> u64 {
    pool.stats().total.allocated_bytes.current
}

/// A 64 KiB read-write storage block's description.
fn small(label: &'static str) -> AllocDesc<'static> {
    AllocDesc::storage(64 << 10).read_write().label(label)
}

/// A callback that tells the pool of a submit and submits the next work, as
/// an `on_submitted_work_done` callback driving a frame loop would; counts
/// its runs in `ran`.
fn submits_next(pool: &Arc<Pool>, ran: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let (ran, weak) = (Arc::clone(ran), Arc::downgrade(pool));
    move || {
        let pool = weak.upgrade().expect("the pool is alive");
        pool.submitted();
        let encoder = pool.device().create_command_encoder(&Default::default());
        pool.submit([encoder.finish()]);
        ran.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_callback_run_by_the_pools_own_poll_may_drop_handles() {
    // The poll before a new segment runs a map callback that drops the last
    // handles of a block and of a movable block: both come back once the
    // allocation is done.
    let pool = pool(Reuse::Immediate);
    let p = Arc::clone(&pool);
    let (ran, live) = finishes("a drop from a map callback", move || {
        let block = p.alloc(small("victim")).unwrap();
        let movable = p.alloc_movable(small("movable")).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let staging = map_with(&p, move || {
            drop((block, movable));
            r.store(true, Ordering::SeqCst);
        });
        assert!(
            !ran.load(Ordering::SeqCst),
            "the callback ran before any poll"
        );
        let live_before = allocated(&p);
        let big = p.alloc(new_segment()).unwrap();
        let ran = ran.load(Ordering::SeqCst);
        // What is allocated now: the staging block and the new one.
        let live = (
            live_before,
            allocated(&p),
            staging.block_size() + big.block_size(),
        );
        drop((big, staging));
        (ran, live)
    });
    assert!(ran, "the map callback did not run inside the allocation");
    let (before, after, kept) = live;
    assert_eq!(
        after, kept,
        "the blocks dropped in the callback were not freed (allocated {before} before, {after} after)"
    );
    assert_eq!(allocated(&pool), 0);
    pool.check_invariants().unwrap();
}

#[test]
fn a_usage_conflict_found_inside_the_pools_own_poll_is_an_error_not_a_panic() {
    // A callback the pool's own poll runs checks a pass's blocks: naming the
    // segment of a conflict needs the engine's lock, which this thread holds.
    let pool = pool(Reuse::Immediate);
    let p = Arc::clone(&pool);
    let found = finishes("a usage check from a map callback", move || {
        let params = Arc::new(p.alloc(AllocDesc::uniform(64).label("params")).unwrap());
        let input = Arc::new(
            p.alloc(AllocDesc::storage(4096).read_only().label("input"))
                .unwrap(),
        );
        let found = Arc::new(Mutex::new(None));
        let (f, weak) = (Arc::clone(&found), Arc::downgrade(&p));
        let (pa, inp) = (Arc::clone(&params), Arc::clone(&input));
        let staging = map_with(&p, move || {
            let pool = weak.upgrade().unwrap();
            let r = pool.check_usage_scope(&[
                BlockUse::new(&pa, BindingUse::Uniform),
                BlockUse::new(&inp, BindingUse::StorageReadWrite),
            ]);
            *f.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
        });
        let big = p.alloc(new_segment()).unwrap();
        drop((big, staging));
        found.lock().unwrap().take()
    });
    let message = found
        .expect("the map callback ran inside the allocation")
        .expect_err("a conflict");
    assert!(
        message.contains("input") && message.contains("params"),
        "{message}"
    );
    assert!(
        message.contains("cannot be read here without waiting"),
        "{message}"
    );
    // Outside any callback the same check names the segment by its label.
    let params = pool.alloc(AllocDesc::uniform(64).label("params")).unwrap();
    let input = pool
        .alloc(AllocDesc::storage(4096).read_only().label("input"))
        .unwrap();
    let other = pool_with(Config::default(), Reuse::Immediate, false);
    let theirs = other
        .alloc(AllocDesc::storage(4096).read_only().label("theirs"))
        .unwrap();
    let named = |uses: &[BlockUse<'_>]| pool.check_usage_scope(uses).unwrap_err().to_string();
    assert!(
        named(&[
            BlockUse::new(&params, BindingUse::Uniform),
            BlockUse::new(&input, BindingUse::StorageReadWrite),
        ])
        .contains("vrampool"),
        "the segment's label"
    );
    // Another pool's block is not looked up in this pool's segments.
    let message = named(&[
        BlockUse::new(&theirs, BindingUse::StorageReadWrite),
        BlockUse::new(&theirs, BindingUse::Uniform),
    ]);
    assert!(message.contains("a buffer of another pool"), "{message}");
}

/// A reused block asked for zeroed is cleared with a submit of its own,
/// which runs the callbacks that are due. One drops the last handle of a
/// readback block of the same pool and allocates: a plain block is cleared
/// after the pool's lock is released, so the allocation is served; a movable
/// block is cleared with the lock held (a move must not overtake the clear),
/// so it is refused with `Error::Reentrant`.
fn zeroing_submit_runs_a_callback(movable: bool) {
    let pool = pool(Reuse::Immediate);
    let p = Arc::clone(&pool);
    let what = if movable {
        "a callback of a movable block's zeroing submit"
    } else {
        "a callback of a block's zeroing submit"
    };
    let (got, live) = finishes(what, move || {
        let desc = || small("reused");
        if movable {
            drop(p.alloc_movable(desc()).unwrap());
        } else {
            drop(p.alloc(desc()).unwrap());
        }
        let victim = p.alloc(AllocDesc::readback(4096)).unwrap();
        let got = Arc::new(Mutex::new(None));
        let (g, weak) = (Arc::clone(&got), Arc::downgrade(&p));
        let staging = map_with(&p, move || {
            drop(victim);
            let pool = weak.upgrade().expect("the pool is alive");
            let allocation = pool.alloc(AllocDesc::storage(4096).read_write());
            *g.lock().unwrap() = Some(allocation.map(|b| b.block_size()));
        });
        if movable {
            drop(p.alloc_movable(desc().zeroed()).unwrap());
        } else {
            drop(p.alloc(desc().zeroed()).unwrap());
        }
        drop(staging);
        let got = got.lock().unwrap().take();
        (got, allocated(&p))
    });
    match (movable, got) {
        (false, Some(Ok(size))) => assert_eq!(size, 4096, "{what}"),
        (true, Some(Err(Error::Reentrant(call)))) => assert_eq!(call, "Pool::alloc", "{what}"),
        (_, other) => panic!("{what}: the callback's allocation gave {other:?}"),
    }
    // Every handle is gone now, the victim's too.
    assert_eq!(
        live, 0,
        "{what}: blocks still allocated after every handle went"
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_callback_run_by_a_zeroing_submit_may_drop_handles_and_allocate() {
    zeroing_submit_runs_a_callback(false);
}

#[test]
fn a_callback_run_by_a_movable_blocks_zeroing_submit_may_drop_handles() {
    zeroing_submit_runs_a_callback(true);
}

#[test]
fn an_allocation_from_inside_the_pools_own_poll_is_refused_not_deadlocked() {
    let pool = pool(Reuse::AfterSubmit);
    let p = Arc::clone(&pool);
    let got = finishes("an allocation from a map callback", move || {
        let result = Arc::new(Mutex::new(None));
        let (r, weak) = (Arc::clone(&result), Arc::downgrade(&p));
        let staging = map_with(&p, move || {
            let pool = weak.upgrade().expect("the pool is alive");
            let got = pool.alloc(AllocDesc::storage(12 << 10).read_write());
            *r.lock().unwrap() = Some(got.map(|_| ()));
        });
        let big = p.alloc(new_segment()).unwrap();
        drop((big, staging));
        result.lock().unwrap().take()
    });
    match got {
        Some(Err(e @ Error::Reentrant(_))) => {
            let msg = e.to_string();
            assert!(
                msg.contains("Pool::alloc") && msg.contains("after the callback"),
                "{msg}"
            );
        }
        other => panic!("expected Error::Reentrant from inside the pool's poll, got {other:?}"),
    }
    // Outside any callback the same allocation is served.
    pool.alloc(AllocDesc::storage(12 << 10).read_write())
        .unwrap();
}

#[test]
fn a_callback_run_by_the_pools_own_poll_may_tell_it_of_a_submit() {
    // An `on_submitted_work_done`-style callback that submits the next work
    // and tells the pool: inside the poll before a new segment (the lock
    // held) `Pool::submitted` and `Pool::submit` take effect as the
    // allocation ends. A movable block whose place was read before is
    // unpinned by then: only that news unpins it (figures do not).
    let pool = pool(Reuse::AfterSubmit);
    let p = Arc::clone(&pool);
    let (pinned, ran) = finishes("a submit from a map callback", move || {
        let movable = p.alloc_movable(small("read")).unwrap();
        let _place = movable.place();
        let ran = Arc::new(AtomicUsize::new(0));
        let staging = map_with(&p, submits_next(&p, &ran));
        let pinned_before = movable.is_pinned();
        let big = p.alloc(new_segment()).unwrap();
        let pinned = (pinned_before, movable.is_pinned());
        drop((big, staging, movable));
        (pinned, ran.load(Ordering::SeqCst))
    });
    assert_eq!(ran, 1, "the callback did not run inside the allocation");
    assert_eq!(
        pinned,
        (true, false),
        "(pinned before the callback's submit, after the allocation)"
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_callback_under_the_lock_may_submit_while_another_thread_submits() {
    // Thread B's callback runs inside the pool's poll (the engine's lock
    // held) and submits while thread A is inside `Pool::submit` (its submit
    // lock held), whose own callback drops a block and so waits for the
    // engine's lock: B must not wait for A's submit lock.
    let pool = pool(Reuse::AfterSubmit);
    let (b_in, b_entered) = mpsc::channel::<()>();
    let (a_in, a_entered) = mpsc::channel::<()>();
    let victim = pool.alloc(AllocDesc::readback(4096)).unwrap();
    let victim_size = victim.block_size();
    // Allocated now: once B's callback runs, an allocation would wait for it.
    let staging_a = pool.alloc(AllocDesc::readback(256)).unwrap();
    let pb = Arc::clone(&pool);
    let b = std::thread::spawn(move || {
        let weak = Arc::downgrade(&pb);
        let staging = map_with(&pb, move || {
            b_in.send(()).unwrap();
            let waited = a_entered.recv_timeout(Duration::from_secs(20));
            let pool = weak.upgrade().expect("the pool is alive");
            let encoder = pool.device().create_command_encoder(&Default::default());
            pool.submit([encoder.finish()]);
            assert!(waited.is_ok(), "thread A's callback did not run");
        });
        let big = pb.alloc(new_segment()).unwrap();
        drop((big, staging));
    });
    let pa = Arc::clone(&pool);
    let done = finishes(
        "two threads, a submit lock and the engine's lock",
        move || {
            b_entered
                .recv_timeout(Duration::from_secs(20))
                .expect("thread B's callback did not run");
            staging_a.slice().map_async(wgpu::MapMode::Read, move |_| {
                a_in.send(()).unwrap();
                drop(victim);
            });
            let encoder = pa.device().create_command_encoder(&Default::default());
            pa.submit([encoder.finish()]);
            drop(staging_a);
            b.join().is_ok()
        },
    );
    assert!(done, "thread B panicked");
    assert_eq!(
        allocated(&pool),
        0,
        "the victim ({victim_size} B) did not come back"
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_callback_under_one_pools_lock_may_drop_another_pools_block() {
    let first = pool(Reuse::Immediate);
    let second = pool(Reuse::Immediate);
    let (p, q) = (Arc::clone(&first), Arc::clone(&second));
    let (ran, live) = finishes("a drop of another pool's block", move || {
        let theirs = q.alloc(small("theirs")).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let staging = map_with(&p, move || {
            drop(theirs);
            r.store(true, Ordering::SeqCst);
        });
        let big = p.alloc(new_segment()).unwrap();
        let live = allocated(&q);
        drop((big, staging));
        (ran.load(Ordering::SeqCst), live)
    });
    assert!(ran, "the callback did not run inside the allocation");
    assert_eq!(live, 0, "the other pool's block did not come back");
    second.check_invariants().unwrap();
}

/// Panic message of a caught panic.
fn message_of(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// In a callback under this thread's pool's lock: says so on `entered`,
/// waits until the other thread's callback says it runs under its pool's
/// lock (on `other`), then reads `theirs`, which waits for that lock.
fn meet_then_read(entered: &mpsc::Sender<()>, other: &mpsc::Receiver<()>, theirs: &Weak<Pool>) {
    entered.send(()).unwrap();
    other
        .recv_timeout(Duration::from_secs(20))
        .expect("the other thread's callback did not run");
    let theirs = theirs.upgrade().expect("the other pool is alive");
    // The other pool's allocations so far: its staging block at least.
    assert!(theirs.stats().counters.allocs >= 1);
}

#[test]
fn callbacks_of_two_pools_reading_each_other_on_two_threads_end_in_one_panic_not_a_deadlock() {
    // Thread A's map callback runs inside pool A's poll (A's lock held) and
    // reads pool B's stats() while thread B's runs inside pool B's poll and
    // reads pool A's: each waits for the lock the other holds. One of them
    // gives up with a panic saying why; the other's read is served, and both
    // allocations are whole.
    let pools = [pool(Reuse::Immediate), pool(Reuse::Immediate)];
    let (in_a, a_entered) = mpsc::channel::<()>();
    let (in_b, b_entered) = mpsc::channel::<()>();
    let run = |mine: &Arc<Pool>,
               theirs: &Arc<Pool>,
               entered: mpsc::Sender<()>,
               other_entered: mpsc::Receiver<()>| {
        let (mine, theirs) = (Arc::clone(mine), Arc::downgrade(theirs));
        move || {
            let read = Arc::new(AtomicBool::new(false));
            let r = Arc::clone(&read);
            let staging = map_with(&mine, move || {
                meet_then_read(&entered, &other_entered, &theirs);
                r.store(true, Ordering::SeqCst);
            });
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                drop(mine.alloc(new_segment()).unwrap());
            }));
            drop(staging);
            (caught.err().map(message_of), read.load(Ordering::SeqCst))
        }
    };
    let a = std::thread::spawn(run(&pools[0], &pools[1], in_a, b_entered));
    let b = run(&pools[1], &pools[0], in_b, a_entered);
    let (a, b) = finishes("two pools' callbacks reading each other", move || {
        let b = b();
        (a.join().expect("thread A"), b)
    });
    assert_eq!(
        [a.1, b.1].iter().filter(|&&read| read).count(),
        1,
        "the thread that did not give up read the other pool"
    );
    let panics: Vec<String> = [a.0, b.0].into_iter().flatten().collect();
    assert_eq!(panics.len(), 1, "one thread gives up, not both: {panics:?}");
    assert!(
        panics[0].contains("each would wait for the other forever")
            && panics[0].contains("after the callback returns"),
        "{}",
        panics[0]
    );
    for pool in &pools {
        assert_eq!(allocated(pool), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_callback_reading_another_pool_that_threads_hammer_is_served() {
    // Pool A's map callback runs inside A's poll (A's lock held) and reads
    // pool B's stats() while four threads allocate and free on B in a loop,
    // each operation under B's lock. The callback's wait is registered (it
    // holds A's lock) and polls B's lock between theirs: it is served, and
    // B's books hold after.
    let (a, b) = (pool(Reuse::Immediate), pool(Reuse::Immediate));
    /// Stops the threads however the test ends (a failure included, so
    /// they do not hammer on beside the next tests).
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let stop = Stop(Arc::new(AtomicBool::new(false)));
    let ops = Arc::new(AtomicUsize::new(0));
    let hammers: Vec<_> = (0..4)
        .map(|_| {
            let (b, stop, ops) = (Arc::clone(&b), Arc::clone(&stop.0), Arc::clone(&ops));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    drop(b.alloc(small("hammer")).unwrap());
                    ops.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let began = std::time::Instant::now();
    while ops.load(Ordering::SeqCst) < 1000 {
        assert!(
            !hammers.iter().any(|h| h.is_finished()),
            "a hammering thread stopped (its panic is above)"
        );
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "four threads made {} operations in a minute",
            ops.load(Ordering::SeqCst)
        );
        std::thread::yield_now();
    }
    let theirs = Arc::downgrade(&b);
    let waited = finishes("a read of a hammered pool from a callback", move || {
        let waited = Arc::new(Mutex::new(None));
        let w = Arc::clone(&waited);
        let staging = map_with(&a, move || {
            let t = std::time::Instant::now();
            let allocs = theirs.upgrade().unwrap().stats().counters.allocs;
            *w.lock().unwrap() = Some((t.elapsed(), allocs));
        });
        drop(a.alloc(new_segment()).unwrap());
        drop(staging);
        waited.lock().unwrap().take()
    });
    drop(stop);
    for h in hammers {
        h.join().expect("a hammering thread");
    }
    let (wait, allocs) = waited.expect("the callback did not run inside the allocation");
    eprintln!(
        "the callback's read waited {wait:?} for the lock, beside 4 threads' {} operations",
        ops.load(Ordering::SeqCst)
    );
    assert!(
        allocs >= 1000,
        "the read saw {allocs} allocations, the threads had made 1000 or more"
    );
    assert_eq!(allocated(&b), 0);
    b.check_invariants().unwrap();
}

#[test]
fn an_async_allocation_from_one_pools_callback_while_another_thread_awaits_the_device_is_refused() {
    // Thread B is inside pool B's `alloc_async` (its gate held: one
    // allocation at a time awaits the device), and its map callback, run by
    // the poll before B's new segment, reads pool A. Thread A's callback, run
    // under pool A's lock, asks pool B for an asynchronous allocation:
    // waiting for B's gate would wait for thread B, which waits for A's lock.
    // It is refused with `Error::Reentrant`, and both threads go on.
    let (pa, pb) = (pool(Reuse::Immediate), pool(Reuse::Immediate));
    let (b_in, b_entered) = mpsc::channel::<()>();
    let (a_asks, a_asked) = mpsc::channel::<()>();
    let b = {
        let (mine, theirs) = (Arc::clone(&pb), Arc::downgrade(&pa));
        std::thread::spawn(move || {
            let staging = map_with(&mine, move || meet_then_read(&b_in, &a_asked, &theirs));
            let big = pollster::block_on(mine.alloc_async(new_segment())).unwrap();
            drop((big, staging));
        })
    };
    let a = {
        let (mine, theirs) = (Arc::clone(&pa), Arc::downgrade(&pb));
        move || {
            let answer = Arc::new(Mutex::new(None));
            let got = Arc::clone(&answer);
            let staging = map_with(&mine, move || {
                b_entered
                    .recv_timeout(Duration::from_secs(20))
                    .expect("thread B's callback did not run");
                a_asks.send(()).unwrap();
                let theirs = theirs.upgrade().expect("pool B is alive");
                let asked = pollster::block_on(theirs.alloc_async(small("from A's callback")));
                *got.lock().unwrap() = Some(asked.map(drop));
            });
            let big = mine.alloc(new_segment()).unwrap();
            drop((big, staging));
            answer.lock().unwrap().take()
        }
    };
    let (answer, b_done) = finishes(
        "an async allocation across two pools' callbacks",
        move || {
            let answer = a();
            (answer, b.join().is_ok())
        },
    );
    assert!(b_done, "thread B panicked");
    match answer {
        Some(Err(Error::Reentrant(call))) => assert_eq!(call, "Pool::alloc_async"),
        other => panic!("expected Error::Reentrant, got {other:?}"),
    }
    for pool in [&pa, &pb] {
        assert_eq!(allocated(pool), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_callback_run_by_the_pools_own_submit_may_submit_again() {
    // wgpu fires due callbacks at the end of `queue.submit`; inside
    // `Pool::submit`, one that calls `Pool::submitted` and `Pool::submit`
    // must not wait for the submit it runs in.
    let pool = pool(Reuse::AfterSubmit);
    let p = Arc::clone(&pool);
    let (ran, pending) = finishes("a submit from a callback of Pool::submit", move || {
        drop(p.alloc(small("pending")).unwrap());
        // No poll between the map and the submit: the callback runs inside it.
        let ran = Arc::new(AtomicUsize::new(0));
        let staging = map_with(&p, submits_next(&p, &ran));
        let encoder = p.device().create_command_encoder(&Default::default());
        p.submit([encoder.finish()]);
        let ran = ran.load(Ordering::SeqCst);
        let pending = p.stats().total.pending_bytes.current;
        drop(staging);
        (ran, pending)
    });
    assert_eq!(ran, 1, "the map callback did not run inside Pool::submit");
    assert_eq!(
        pending, 0,
        "the block dropped before Pool::submit is still pending"
    );
}

#[test]
fn reading_the_pool_from_inside_its_own_poll_panics_with_the_reason_and_the_pool_goes_on() {
    // Waiting for the lock there would wait forever; the panic says why. It
    // is raised once the allocation is whole (the limit's count of bytes
    // being created included), and the block it made goes back.
    let config = Config {
        limit: Some(Limit::Bytes(128 << 20)),
        ..Config::default()
    };
    let pool = pool_with(config, Reuse::AfterSubmit, false);
    let p = Arc::clone(&pool);
    let message = finishes("stats() from a map callback", move || {
        let weak = Arc::downgrade(&p);
        let staging = map_with(&p, move || {
            if let Some(pool) = weak.upgrade() {
                let _ = pool.stats();
            }
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(p.alloc(new_segment()));
        }));
        drop(staging);
        caught.err().map(message_of)
    });
    let message = message.expect("stats() inside the pool's own poll did not panic");
    assert!(
        message.contains("wgpu callback") && message.contains("after the callback returns"),
        "{message}"
    );
    // The pool still serves up to its limit (two 48 MiB blocks under 128
    // MiB: a plan left counted would refuse the second), and its books hold.
    assert_eq!(
        allocated(&pool),
        0,
        "the allocation's block did not come back"
    );
    let again = (
        pool.alloc(new_segment()).unwrap(),
        pool.alloc(new_segment()).unwrap(),
    );
    assert_eq!(
        allocated(&pool),
        again.0.block_size() + again.1.block_size()
    );
    drop(again);
    pool.check_invariants().unwrap();
}

#[test]
fn a_callback_panic_in_an_async_allocations_releases_cancels_its_plan() {
    // Under a 128 MiB budget a 64 MiB request releases the cached 96 MiB
    // segment it cannot use; that release's poll runs a callback that
    // panics. The panic comes out of `alloc_async` once the plan is in
    // hand, and the plan is cancelled: the limit's count of bytes being
    // created goes back to zero, so 96 MiB allocate after.
    let config = Config {
        limit: Some(Limit::Bytes(128 << 20)),
        ..Config::default()
    };
    let faults = vrampool::fault::Faults::new();
    let (device, queue, _) = vrampool_tests::device();
    let options = PoolOptions {
        config,
        reuse: Reuse::Immediate,
        front_cache: false,
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let pool = Arc::new(Pool::new(device, queue, options).expect("pool"));
    let p = Arc::clone(&pool);
    let (message, made) = finishes("a panic from a callback of the release's poll", move || {
        drop(p.alloc(AllocDesc::storage(96 << 20).read_write()).unwrap());
        let weak = Arc::downgrade(&p);
        let staging = map_with(&p, move || {
            if let Some(pool) = weak.upgrade() {
                let _ = pool.stats();
            }
        });
        let before = faults.creates();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = pollster::block_on(p.alloc_async(AllocDesc::storage(64 << 20).read_write()));
        }));
        drop(staging);
        // Buffers asked of the device, kept or not.
        let made = faults.creates() - before;
        (caught.err().map(message_of), made)
    });
    let message = message.expect("the callback's panic did not come out of alloc_async");
    assert!(message.contains("wgpu callback"), "{message}");
    // Cancelled before its segment was asked for: none was.
    assert_eq!(made, 0, "a buffer was made for the cancelled plan");
    assert_eq!(allocated(&pool), 0);
    let again = (
        pool.alloc(new_segment()).unwrap(),
        pool.alloc(new_segment()).unwrap(),
    );
    drop(again);
    pool.check_invariants().unwrap();
}

#[test]
fn a_panicking_device_lost_observer_leaves_the_others_called() {
    let pool = pool(Reuse::AfterSubmit);
    let second = Arc::new(AtomicUsize::new(0));
    pool.on_device_lost(|_| panic!("the first observer panics"));
    let s = Arc::clone(&second);
    pool.on_device_lost(move |_| {
        s.fetch_add(1, Ordering::SeqCst);
    });
    pool.device().destroy();
    let p = Arc::clone(&pool);
    let (first, then) = finishes("a panicking device-lost observer", move || {
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = p.alloc(new_segment());
        }));
        let first = first.err().map(message_of);
        (first, p.alloc(new_segment()).map(|_| ()))
    });
    assert_eq!(first.as_deref(), Some("the first observer panics"));
    assert_eq!(
        second.load(Ordering::SeqCst),
        1,
        "the second observer's calls"
    );
    assert!(matches!(then, Err(Error::DeviceLost(_))), "{then:?}");
}

#[test]
fn an_out_of_memory_observer_may_read_the_pool() {
    let config = Config {
        limit: Some(Limit::Bytes(4 << 20)),
        ..Config::default()
    };
    let pool = pool_with(config, Reuse::AfterSubmit, true);
    let seen = Arc::new(Mutex::new(None));
    let (s, weak) = (Arc::clone(&seen), Arc::downgrade(&pool));
    pool.on_oom(move |_| {
        if let Some(pool) = weak.upgrade() {
            let summary = pool.memory_summary();
            let ooms = pool.stats().counters.ooms;
            pool.empty_cache();
            *s.lock().unwrap() = Some((summary, ooms));
        }
    });
    let p = Arc::clone(&pool);
    let got = finishes("an out-of-memory observer calling the pool", move || {
        p.alloc(AllocDesc::storage(8 << 20).read_write())
            .map(|_| ())
    });
    assert!(matches!(got, Err(Error::OutOfMemory(_))), "{got:?}");
    let (summary, ooms) = seen.lock().unwrap().take().expect("the observer ran");
    // Read after the refusal was counted, under the limit that refused it.
    assert_eq!(ooms, 1);
    assert!(summary.contains("limit 4.00 MiB"), "{summary}");
}

#[test]
fn a_loss_learned_while_a_thread_unwinds_still_reaches_the_observers() {
    // A thread panics holding a block; its drop, under a cache limit of 0,
    // releases the segment and polls, which is where wgpu tells of the
    // device destroyed before. The thread unwinds and ends; the observers
    // are still called, once. (Before f35b1ae they ran nowhere: wgpu tells a
    // loss once, and the unwinding drop dropped the news.)
    let pool = pool_with(
        Config {
            cache_limit: Some(0),
            ..Config::default()
        },
        Reuse::Immediate,
        false,
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    pool.on_device_lost(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
    });
    let block = pool.alloc(new_segment()).unwrap();
    pool.device().destroy();
    let ended = std::thread::spawn(move || {
        let _held = block;
        panic!("the thread holding the block panics");
    })
    .join();
    assert!(ended.is_err());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while calls.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the observer's calls");
    assert!(pool.device_lost().is_some());
}

#[test]
fn a_device_lost_observer_may_read_the_pool_and_is_called_once() {
    // The loss is learned from the poll the pool makes, with its lock held,
    // before it creates a segment; the observer runs once it is released,
    // reads the pool and registers another observer, which is called at once
    // (the device is lost already), and neither is called again.
    let pool = pool(Reuse::AfterSubmit);
    let calls = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let (c, s, s2, weak) = (
        Arc::clone(&calls),
        Arc::clone(&seen),
        Arc::clone(&second),
        Arc::downgrade(&pool),
    );
    pool.on_device_lost(move |why| {
        c.fetch_add(1, Ordering::SeqCst);
        if let Some(pool) = weak.upgrade() {
            *s.lock().unwrap() = Some((why.to_string(), allocated(&pool)));
            let s2 = Arc::clone(&s2);
            pool.on_device_lost(move |_| {
                s2.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let live = pool.alloc(AllocDesc::storage(4096).read_write()).unwrap();
    pool.device().destroy();
    let p = Arc::clone(&pool);
    let got = finishes("a device-lost observer calling the pool", move || {
        let got = p.alloc(new_segment()).map(|_| ());
        // Another poll, and another allocation: nothing is called again.
        let _ = p.device().poll(wgpu::PollType::Poll);
        let again = p.alloc(new_segment()).map(|_| ());
        (got, again)
    });
    assert!(matches!(got.0, Err(Error::DeviceLost(_))), "{:?}", got.0);
    assert!(matches!(got.1, Err(Error::DeviceLost(_))), "{:?}", got.1);
    match seen.lock().unwrap().clone() {
        Some((why, allocated)) => {
            assert!(why.contains("destroyed"), "{why}");
            assert_eq!(
                allocated,
                live.block_size(),
                "the observer saw the wrong figures"
            );
        }
        None => panic!("the device-lost observer was not called"),
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the first observer's calls"
    );
    assert_eq!(
        second.load(Ordering::SeqCst),
        1,
        "the second observer's calls"
    );
}

#[test]
fn empty_cache_gives_back_a_segment_a_callback_emptied_during_it() {
    // empty_cache first polls as it releases (with the lock held; only when
    // it released something), then as it waits for the device. A map
    // callback run by either drops the last block of a segment: that segment
    // is given back too before empty_cache returns, as it would have been
    // had the block been dropped a moment before the call. With the front
    // cache the drop parks the block there, for the next round to hand back.
    for (release_first, front_cache) in [(true, false), (false, false), (true, true), (false, true)]
    {
        let pool = pool_with(Config::default(), Reuse::Immediate, front_cache);
        let p = Arc::clone(&pool);
        let (ran, left, figure) = finishes("a drop during empty_cache", move || {
            if release_first {
                // A cached segment of its own usage, for the first poll.
                drop(p.alloc(AllocDesc::uniform(256)).unwrap());
            }
            let victim = p.alloc(small("victim")).unwrap();
            let ran = Arc::new(AtomicBool::new(false));
            let r = Arc::clone(&ran);
            let staging = map_with(&p, move || {
                drop(victim);
                r.store(true, Ordering::SeqCst);
            });
            let released = p.empty_cache();
            let figure = (released, p.stats().counters.last_empty_cache_bytes);
            let left: Vec<_> = p
                .snapshot()
                .segments
                .into_iter()
                .filter(|s| {
                    s.blocks
                        .iter()
                        .all(|b| b.state != vrampool::SnapshotState::Live)
                })
                .map(|s| s.label)
                .collect();
            drop(staging);
            (ran.load(Ordering::SeqCst), left, figure)
        });
        assert!(ran, "the callback did not run inside empty_cache");
        assert!(
            left.is_empty(),
            "with a release first: {release_first}, front cache: {front_cache}; segments with no live block left after empty_cache: {left:?}"
        );
        assert_eq!(
            figure.0, figure.1,
            "empty_cache's return and its figure in the counters"
        );
        pool.check_invariants().unwrap();
    }
}
