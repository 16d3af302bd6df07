//! Movable blocks through `Pool` (`Pool::alloc_movable`), used as wgpu code
//! uses them: a place read for each frame's passes, a dispatch binding a
//! uniform, a movable read-only input and a read-write output, encoders
//! recorded before they are submitted, `queue.write_buffer` running ahead of
//! its submit's command buffers. Each case checks what the GPU did (wgpu's
//! validation and the bytes read back) on the device the tests run on
//! (lavapipe, or GL with `VRAMPOOL_TEST_BACKEND=gl`).

use vrampool::{AllocDesc, Config, MovableBuffer, Place, Pool, PoolBuffer};
use vrampool_tests::{Rng, read_back, read_range, record_scale_pass};
use wgpu::BufferUsages as U;

const MIB: u64 = 1 << 20;

fn pool() -> Pool {
    vrampool_tests::pool_with(Config::default())
}

/// A movable block passes only read (`var<storage, read>`), as a kernel's input.
fn input(pool: &Pool, size: u64) -> MovableBuffer {
    pool.alloc_movable(AllocDesc::storage(size).read_only())
        .unwrap()
}

/// A plain request of the inputs' pool.
fn plain_input(pool: &Pool, size: u64) -> PoolBuffer {
    pool.alloc(AllocDesc::storage(size).read_only()).unwrap()
}

/// Writes `words` at the block's place (which pins it until the next submit).
fn write_words(pool: &Pool, b: &MovableBuffer, words: &[u32]) {
    let at = b.place();
    pool.queue()
        .write_buffer(at.buffer(), at.offset(), &bytes(words));
}

fn bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(v: &[u8]) -> Vec<u32> {
    v.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn read_place(pool: &Pool, at: &Place) -> Vec<u8> {
    read_range(
        pool.device(),
        pool.queue(),
        at.buffer(),
        at.offset(),
        at.size(),
    )
}

/// Two 24 MiB segments of the inputs' pool, each holding one live 12 MiB
/// movable block (`b`, `c`, filled with `pattern` words) and 12 MiB free: a
/// 20 MiB request fits in neither hole, and one block moving over makes
/// room. Returns the two blocks; the fills are submitted.
fn fragmented(pool: &Pool) -> (MovableBuffer, MovableBuffer) {
    let x = input(pool, 24 * MIB);
    let y = input(pool, 24 * MIB);
    drop(x);
    pool.submitted();
    let (p, b) = (input(pool, 12 * MIB), input(pool, 12 * MIB));
    drop(y);
    pool.submitted();
    let (c, s) = (input(pool, 12 * MIB), input(pool, 12 * MIB));
    drop(p);
    drop(s);
    let n = (12 * MIB / 4) as u32;
    write_words(
        pool,
        &b,
        &(0..n).map(|i| i ^ 0xB0B0_0000).collect::<Vec<_>>(),
    );
    write_words(
        pool,
        &c,
        &(0..n).map(|i| i ^ 0xC0C0_0000).collect::<Vec<_>>(),
    );
    pool.submit([]);
    assert!(!b.is_pinned() && !c.is_pinned(), "a submit unpins");
    (b, c)
}

fn pattern(tag: u32, n: u32) -> Vec<u32> {
    (0..n).map(|i| i ^ tag).collect()
}

/// Records SCALE_WGSL over `input`'s place (read now, so pinned) into
/// `output`, with a uniform block of the pool; returns the encoder, not
/// submitted, the uniform (to keep it live until the submit) and wgpu's
/// validation error, if any.
fn record_scale(
    pool: &Pool,
    input: &MovableBuffer,
    output: &PoolBuffer,
    n: u32,
) -> (wgpu::CommandEncoder, PoolBuffer, Option<String>) {
    let device = pool.device();
    let uniform = pool
        .alloc(AllocDesc::storage(16).usage(U::UNIFORM | U::COPY_DST))
        .unwrap();
    pool.queue()
        .write_buffer(uniform.buffer(), uniform.offset(), &bytes(&[3, 7, n, 0]));
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let at = input.place();
    let input = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: at.buffer(),
        offset: at.offset(),
        size: std::num::NonZeroU64::new(4 * n as u64),
    });
    let enc = record_scale_pass(device, [uniform.binding(), input, output.binding()], n);
    let error = pollster::block_on(scope.pop()).map(|e| e.to_string());
    (enc, uniform, error)
}

#[test]
fn a_block_moved_to_make_room_is_read_by_a_dispatch_at_its_new_place() {
    let pool = pool();
    let (b, c) = fragmented(&pool);
    let before = pool.stats().counters;
    let (b_at, c_at) = (b.place(), c.place());
    pool.submitted(); // the reads above recorded nothing
    // 20 MiB fit in neither hole: one 12 MiB block moves over instead of a segment.
    let big = plain_input(&pool, 20 * MIB);
    let after = pool.stats().counters;
    assert_eq!(after.device_allocs, before.device_allocs, "no new segment");
    assert_eq!(
        (
            after.blocks_moved - before.blocks_moved,
            after.bytes_moved - before.bytes_moved
        ),
        (1, 12 * MIB)
    );
    let moved = [(&b, &b_at), (&c, &c_at)]
        .iter()
        .filter(|(m, was)| {
            let now = m.place();
            now.buffer() != was.buffer() || now.offset() != was.offset()
        })
        .count();
    assert_eq!(moved, 1, "the handle of the block moved has its new place");
    // The new owner writes over the old place; the moved block keeps its bytes.
    pool.queue()
        .write_buffer(big.buffer(), big.offset(), &vec![0xEE; (20 * MIB) as usize]);
    pool.submit([]);
    let n = 1 << 16;
    for (m, tag) in [(&b, 0xB0B0_0000u32), (&c, 0xC0C0_0000)] {
        let output = pool
            .alloc(AllocDesc::storage(4 * n as u64).read_write())
            .unwrap();
        let (enc, _uniform, error) = record_scale(&pool, m, &output, n);
        assert_eq!(error, None, "wgpu refused the dispatch");
        pool.submit([enc.finish()]);
        let got = words(&read_back(&pool, &output));
        let want: Vec<u32> = pattern(tag, n)
            .iter()
            .map(|x| x.wrapping_mul(3).wrapping_add(7))
            .collect();
        assert!(got == want, "block {tag:#x}: the dispatch read other bytes");
        let whole = words(&read_place(&pool, &m.place()));
        assert!(
            whole == pattern(tag, (12 * MIB / 4) as u32),
            "block {tag:#x}: bytes lost"
        );
    }
    pool.check_invariants().unwrap();
}

#[test]
fn a_block_whose_place_a_recorded_pass_uses_stays_until_the_submit() {
    let pool = pool();
    let (b, c) = fragmented(&pool);
    let n = (12 * MIB / 4) as u32;
    // Passes recorded over both blocks, not submitted: both are pinned.
    let (out_b, out_c) = (
        pool.alloc(AllocDesc::storage(4 * n as u64).read_write())
            .unwrap(),
        pool.alloc(AllocDesc::storage(4 * n as u64).read_write())
            .unwrap(),
    );
    let (enc_b, _ub, e1) = record_scale(&pool, &b, &out_b, n);
    let (enc_c, _uc, e2) = record_scale(&pool, &c, &out_c, n);
    assert_eq!((e1, e2), (None, None));
    assert!(b.is_pinned() && c.is_pinned());
    let before = pool.stats().counters;
    let big = plain_input(&pool, 20 * MIB);
    let after = pool.stats().counters;
    assert_eq!(
        after.blocks_moved, before.blocks_moved,
        "a pinned block moved"
    );
    assert_eq!(
        after.device_allocs,
        before.device_allocs + 1,
        "a segment instead"
    );
    // The new owner's write runs ahead of the passes at this submit: had a
    // block moved, its pass would read these bytes.
    pool.queue()
        .write_buffer(big.buffer(), big.offset(), &vec![0xEE; (20 * MIB) as usize]);
    pool.submit([enc_b.finish(), enc_c.finish()]);
    for (out, tag) in [(&out_b, 0xB0B0_0000u32), (&out_c, 0xC0C0_0000)] {
        let got = words(&read_back(&pool, out));
        let want: Vec<u32> = pattern(tag, n)
            .iter()
            .map(|x| x.wrapping_mul(3).wrapping_add(7))
            .collect();
        assert!(got == want, "the pass over {tag:#x} read other bytes");
    }
    // The control: unpinned by that submit, the same request now moves a block.
    assert!(!b.is_pinned() && !c.is_pinned());
    drop(big);
    drop((out_b, out_c));
    pool.submitted();
    pool.empty_cache(); // the segment made for `big` goes
    let before = pool.stats().counters;
    let again = plain_input(&pool, 20 * MIB);
    let after = pool.stats().counters;
    assert_eq!(
        after.blocks_moved - before.blocks_moved,
        1,
        "nothing moved once unpinned"
    );
    assert_eq!(after.device_allocs, before.device_allocs);
    drop(again);
    pool.check_invariants().unwrap();
}

#[test]
fn a_frame_loop_of_movable_blocks_never_shows_an_owner_another_owners_bytes() {
    let pool = pool();
    let mut rng = Rng(0x6d6f_7661_626c_6531);
    // Each live block and its owner's fill byte.
    let mut live: Vec<(MovableBuffer, u8)> = Vec::new();
    let mut plain: Vec<(PoolBuffer, u8)> = Vec::new();
    let mut next = 1u8;
    let mut reused_zeroed = 0;
    let verify = |live: &[(MovableBuffer, u8)], plain: &[(PoolBuffer, u8)]| {
        for (b, fill) in live {
            let got = read_place(&pool, &b.place());
            let wrong = got.iter().filter(|&&x| x != *fill).count();
            assert_eq!(wrong, 0, "{b:?}: {wrong} bytes not its owner's");
        }
        for (p, fill) in plain {
            let wrong = read_back(&pool, p).iter().filter(|&&x| x != *fill).count();
            assert_eq!(wrong, 0, "{p:?}: {wrong} bytes not its owner's");
        }
        pool.submitted();
    };
    for frame in 0..300 {
        // One pass a frame reads a live block, as a kernel would: its place
        // read now (pinning it), a copy of it recorded, submitted only at the
        // frame's end, after the frame's allocations (which may move others).
        let read = (!live.is_empty()).then(|| {
            let (b, fill) = &live[rng.below(live.len() as u64) as usize];
            let at = b.place();
            let scratch = pool.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("scratch"),
                size: at.size(),
                usage: U::COPY_DST | U::COPY_SRC,
                mapped_at_creation: false,
            });
            let mut enc = pool.device().create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(at.buffer(), at.offset(), &scratch, 0, at.size());
            (enc, scratch, *fill)
        });
        // A few allocations and drops a frame; most blocks untouched, so free to move.
        for _ in 0..rng.below(4) + 1 {
            if live.is_empty() || rng.below(100) < 55 {
                let size = match rng.below(10) {
                    0..=4 => 256 + rng.below(256 << 10),
                    5..=8 => (256 << 10) + rng.below(4 * MIB),
                    _ => 4 * MIB + rng.below(12 * MIB),
                } & !3;
                if rng.below(4) == 0 {
                    // A plain block beside them: its misses move movable ones too.
                    let p = pool.alloc(AllocDesc::storage(size).read_write()).unwrap();
                    pool.queue()
                        .write_buffer(p.buffer(), p.offset(), &vec![next; size as usize]);
                    plain.push((p, next));
                    next = next.wrapping_add(1).max(1);
                } else {
                    // Some through the async path, some zeroed on reuse.
                    let desc = AllocDesc::storage(size).read_write();
                    let b = match rng.below(3) {
                        0 => pollster::block_on(pool.alloc_movable_async(desc)).unwrap(),
                        1 => {
                            // Zeroed: reads zero before its owner writes, though
                            // every owner before it filled it with a byte above 0.
                            let hits = pool.stats().counters.cache_hits;
                            let b = pool.alloc_movable(desc.zeroed()).unwrap();
                            let got = read_place(&pool, &b.place());
                            let stale = got.iter().filter(|&&x| x != 0).count();
                            assert_eq!(stale, 0, "frame {frame}: {b:?} zeroed shows {stale} bytes");
                            reused_zeroed += u32::from(pool.stats().counters.cache_hits > hits);
                            b
                        }
                        _ => pool.alloc_movable(desc).unwrap(),
                    };
                    let at = b.place();
                    pool.queue()
                        .write_buffer(at.buffer(), at.offset(), &vec![next; size as usize]);
                    live.push((b, next));
                    next = next.wrapping_add(1).max(1);
                }
            } else if !plain.is_empty() && rng.below(3) == 0 {
                plain.swap_remove(rng.below(plain.len() as u64) as usize);
            } else {
                live.swap_remove(rng.below(live.len() as u64) as usize);
            }
        }
        match read {
            Some((enc, scratch, fill)) => {
                pool.submit([enc.finish()]);
                let got = read_range(pool.device(), pool.queue(), &scratch, 0, scratch.size());
                let wrong = got.iter().filter(|&&x| x != fill).count();
                assert_eq!(
                    wrong, 0,
                    "frame {frame}: the pass read {wrong} bytes not its block's"
                );
            }
            None => {
                pool.submit([]);
            }
        }
        if frame % 50 == 49 {
            verify(&live, &plain);
            pool.check_invariants().unwrap();
        }
    }
    verify(&live, &plain);
    assert!(
        reused_zeroed >= 60,
        "only {reused_zeroed} zeroed blocks were cached ones, read back"
    );
    let c = pool.stats().counters;
    assert!(
        c.relocations > 0 && c.evacuations > 0,
        "the loop moved blocks both to serve misses ({}) and to empty segments ({})",
        c.relocations,
        c.evacuations
    );
    drop(live);
    drop(plain);
    pool.submitted();
    pool.check_invariants().unwrap();
}

#[test]
fn a_pinned_block_dropped_before_the_submit_goes_back_as_any_other() {
    let pool = pool();
    let (b, c) = fragmented(&pool);
    let was = b.place();
    drop(b); // pinned, and pending until the submit
    // Its bytes are not reused before the submit, by a plain or a movable request.
    let (p, m) = (plain_input(&pool, 12 * MIB), input(&pool, 12 * MIB));
    let m_at = m.place();
    for (buffer, offset) in [(p.buffer(), p.offset()), (m_at.buffer(), m_at.offset())] {
        let overlaps = buffer == was.buffer()
            && offset < was.offset() + was.size()
            && was.offset() < offset + 12 * MIB;
        assert!(
            !overlaps,
            "a pending block's bytes were handed out before the submit"
        );
    }
    drop((p, m, m_at));
    pool.submit([]);
    let _ = c.place();
    pool.submitted();
    drop(c);
    pool.submitted();
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    assert!(pool.leaks().is_empty());
    pool.check_invariants().unwrap();
}

#[test]
fn a_block_that_could_never_move_is_refused_with_the_fix() {
    let pool = pool();
    // Storage with no access said gets a buffer of its own; mappable blocks take no copies.
    for desc in [
        AllocDesc::storage(1 << 20),
        AllocDesc::storage(1 << 20).usage(U::MAP_READ | U::COPY_DST),
    ] {
        let e = pool.alloc_movable(desc).unwrap_err().to_string();
        assert!(
            e.contains("never moves") && e.contains("Pool::alloc"),
            "{e}"
        );
        assert!(
            pool.alloc(desc).is_ok(),
            "the same block through Pool::alloc"
        );
    }
    assert!(
        pool.alloc_movable(AllocDesc::storage(1 << 20).read_only())
            .is_ok()
    );
}

#[test]
fn under_immediate_reuse_a_place_read_still_pins_until_a_submit() {
    let (device, queue, _) = vrampool_tests::device();
    let options = vrampool::PoolOptions {
        reuse: vrampool::Reuse::Immediate,
        ..Default::default()
    };
    let pool = Pool::new(device, queue, options).unwrap();
    let (b, c) = fragmented(&pool);
    let (_b_at, _c_at) = (b.place(), c.place());
    let before = pool.stats().counters;
    let big = plain_input(&pool, 20 * MIB);
    assert_eq!(
        pool.stats().counters.blocks_moved,
        before.blocks_moved,
        "a pinned block moved"
    );
    drop(big);
    pool.submitted();
    pool.empty_cache();
    let before = pool.stats().counters;
    let _again = plain_input(&pool, 20 * MIB);
    assert_eq!(
        pool.stats().counters.blocks_moved - before.blocks_moved,
        1,
        "nothing moved once unpinned"
    );
}
