//! The pool the way wgpu code uses it: bind groups mixing uniform and storage
//! blocks in one dispatch, encoders recorded before they are submitted,
//! temporaries dropped before the submit, `queue.write_buffer` running ahead
//! of the command buffers of its submit. Each case checks what the GPU did
//! (wgpu's validation, and the bytes read back), on the device the tests run
//! on (lavapipe, or GL with `VRAMPOOL_TEST_BACKEND=gl`).

use vrampool::{
    Access, AllocDesc, BindingUse, BlockUse, Config, Error, Pool, PoolBuffer, PoolOptions,
};
use vrampool_tests::{device, read_back, record_scale_pass};
use wgpu::BufferUsages as U;

fn pool() -> Pool {
    vrampool_tests::pool_with(Config::default())
}

/// Runs SCALE_WGSL over the three blocks inside a validation error scope;
/// returns wgpu's validation error, if any.
fn dispatch_scale(
    pool: &Pool,
    uniform: &PoolBuffer,
    input: &PoolBuffer,
    output: &PoolBuffer,
    n: u32,
) -> Option<String> {
    let device = pool.device();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let enc = record_scale_pass(
        device,
        [uniform.binding(), input.binding(), output.binding()],
        n,
    );
    pool.queue().submit([enc.finish()]);
    pollster::block_on(scope.pop()).map(|e| e.to_string())
}

fn words(v: &[u8]) -> Vec<u32> {
    v.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_dispatch_binds_a_uniform_a_read_only_input_and_a_read_write_output() {
    // Case 1 of "safe to embed": written as a user would, with no declaration
    // beyond the usages. Before placement classes the three blocks shared one
    // segment and wgpu refused the dispatch ("conflicting usages").
    let pool = pool();
    let n = 1000u32;
    let uniform = pool
        .alloc(AllocDesc::storage(16).usage(U::UNIFORM | U::COPY_DST))
        .unwrap();
    let input = pool.alloc(AllocDesc::storage(4 * n as u64)).unwrap();
    let output = pool.alloc(AllocDesc::storage(4 * n as u64)).unwrap();
    let q = pool.queue();
    q.write_buffer(uniform.buffer(), uniform.offset(), &bytes(&[3, 7, n, 0]));
    let data: Vec<u32> = (0..n).collect();
    q.write_buffer(input.buffer(), input.offset(), &bytes(&data));
    let error = dispatch_scale(&pool, &uniform, &input, &output, n);
    assert_eq!(error, None, "wgpu refused the dispatch");
    let got = words(&read_back(&pool, &output));
    let want: Vec<u32> = data.iter().map(|x| x * 3 + 7).collect();
    assert_eq!(got, want);
}

/// A buffer outside the pool, for the copies' destination.
fn outside(pool: &Pool, size: u64) -> wgpu::Buffer {
    pool.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("outside the pool"),
        size,
        usage: U::COPY_DST | U::COPY_SRC,
        mapped_at_creation: false,
    })
}

fn read_raw(pool: &Pool, buffer: &wgpu::Buffer) -> Vec<u8> {
    vrampool_tests::read_range(pool.device(), pool.queue(), buffer, 0, buffer.size())
}

/// Writes `fill` to a fresh `size`-byte block, submits, and returns it.
fn filled(pool: &Pool, size: u64, fill: u8) -> PoolBuffer {
    let b = pool
        .alloc(AllocDesc::storage(size).label("temporary"))
        .unwrap();
    pool.queue()
        .write_buffer(b.buffer(), b.offset(), &vec![fill; size as usize]);
    pool.queue().submit([]);
    b
}

/// A temporary filled with 0x5A, a copy of it into a buffer outside the pool
/// recorded in an encoder not yet submitted, and the temporary dropped:
/// returns the copy's destination and the encoder.
fn copy_recorded_then_dropped(pool: &Pool, size: u64) -> (wgpu::Buffer, wgpu::CommandEncoder) {
    let dst = outside(pool, size);
    let tmp = filled(pool, size, 0x5A);
    let mut enc = pool.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(tmp.buffer(), tmp.offset(), &dst, 0, size);
    drop(tmp);
    (dst, enc)
}

#[test]
fn a_temporary_dropped_before_submit_is_not_cleared_for_the_next_zeroed_block() {
    // Case 2: a copy out of a temporary is recorded, the temporary is dropped
    // before the encoder is submitted, and the next allocation of that size
    // asks for zeroed memory. The pool must not clear (or hand out) the
    // temporary's bytes before the copy has run. The next allocation has the
    // temporary's own description (what a frame loop does: the front cache's
    // path) or another one (the engine's).
    let pool = pool();
    let size = 64 << 10;
    for label in ["temporary", "next"] {
        let (dst, enc) = copy_recorded_then_dropped(&pool, size);
        let next = pool
            .alloc(AllocDesc::storage(size).label(label).zeroed())
            .unwrap();
        pool.queue().submit([enc.finish()]);
        assert!(
            read_raw(&pool, &dst).iter().all(|&b| b == 0x5A),
            "the copy read the next owner's zeros ({label})"
        );
        assert!(read_back(&pool, &next).iter().all(|&b| b == 0), "zeroed");
        drop(next);
        pool.submitted();
    }
}

#[test]
fn a_temporary_dropped_before_submit_never_shows_the_next_owners_writes() {
    // Case 3: the same, but the next owner fills its block with
    // `queue.write_buffer`, which runs at the next submit ahead of that
    // submit's command buffers — ahead of the recorded copy.
    let pool = pool();
    let size = 64 << 10;
    for label in ["temporary", "next"] {
        let (dst, enc) = copy_recorded_then_dropped(&pool, size);
        let next = pool.alloc(AllocDesc::storage(size).label(label)).unwrap();
        pool.queue()
            .write_buffer(next.buffer(), next.offset(), &vec![0xC3; size as usize]);
        pool.queue().submit([enc.finish()]);
        let got = read_raw(&pool, &dst);
        assert!(
            got.iter().all(|&b| b == 0x5A),
            "the first owner's copy read {:#x}: another owner's bytes ({label})",
            got[0]
        );
        assert!(read_back(&pool, &next).iter().all(|&b| b == 0xC3));
        drop(next);
        pool.submitted();
    }
}

/// One owner of a block in the interleaving test: its tag, and whether the
/// current encoder holds a dispatch that reads it.
struct Owner {
    block: PoolBuffer,
    tag: u32,
}

/// Counts of what an interleaving run did.
#[derive(Debug, Default)]
struct Interleaving {
    corrupt: u64,
    nonzero: u64,
    /// Owners dropped while the open encoder held a dispatch using them.
    dropped_recorded: u64,
    /// Zeroed allocations served from reused bytes.
    zeroed_reuses: u64,
    submits: u64,
    cache_hits: u64,
    /// Of `cache_hits`, served by the front cache (a block the thread
    /// dropped with the same description).
    front_hits: u64,
}

/// Random interleavings of what wgpu code does with pool blocks: allocate
/// (filled by `queue.write_buffer`, or zeroed and tagged by a dispatch),
/// record a dispatch that verifies an owner's bytes into the open encoder,
/// drop an owner (often with such a dispatch recorded and not submitted),
/// submit (through `Pool::submit`, or `queue.submit` + `Pool::submitted`),
/// and `empty_cache`. Every verify runs when its encoder is submitted and
/// counts the words that are not its owner's: another owner's write or
/// zeroing reaching them first is counted. `empty_cache`: whether the run
/// calls it too.
fn interleave(pool: &Pool, ops: u64, seed: u64, empty_cache: bool) -> Interleaving {
    interleave_with(pool, ops, seed, empty_cache, false)
}

/// [`interleave`]; `frame_loop`: every block is read-write and one of two
/// sizes, as a frame loop's temporaries come back, so much of the reuse is
/// the front cache's (a block the thread dropped with the same description)
/// rather than the engine's.
fn interleave_with(
    pool: &Pool,
    ops: u64,
    seed: u64,
    empty_cache: bool,
    frame_loop: bool,
) -> Interleaving {
    use vrampool_tests::{Handed, Pass, Range, Rng, Tagger};
    let tagger = Tagger::new(pool.device(), pool.queue());
    let mut rng = Rng(seed);
    let mut owners: Vec<Owner> = Vec::new();
    let mut out = Interleaving::default();
    let mut next_tag = 1u32;
    let mut recorded: Vec<u32> = Vec::new(); // tags verified by the open encoder
    const BATCH: u32 = 256;
    let mut batch = tagger.batch(BATCH);
    let mut enc = pool.device().create_command_encoder(&Default::default());
    tagger.reset_errors();
    let before = pool.stats().counters;
    // Tells a zeroed block served from reused bytes (by place: see `Handed`).
    let mut handed = Handed::default();
    for op in 0..ops {
        let r = rng.below(100);
        let full = batch.len() + 2 >= BATCH;
        if full || r < 4 {
            // Submit the open encoder.
            batch.finish();
            if rng.below(2) == 0 {
                pool.submit([enc.finish()]);
            } else {
                pool.queue().submit([enc.finish()]);
                pool.submitted();
            }
            out.submits += 1;
            recorded.clear();
            batch = tagger.batch(BATCH);
            enc = pool.device().create_command_encoder(&Default::default());
            if out.submits.is_multiple_of(64) || op + 1 == ops {
                let [c, z] = tagger.read_errors();
                out.corrupt += c as u64;
                out.nonzero += z as u64;
                tagger.reset_errors();
            }
        } else if r < 5 {
            if empty_cache {
                pool.empty_cache();
            }
        } else if r < 45 && owners.len() < 64 || owners.is_empty() {
            // A frame loop's temporaries come back at the same sizes (and go
            // through the front cache); the rest are any size.
            const FRAME_SIZES: [u64; 6] = [64, 256, 4 << 10, 16 << 10, 100 << 10, 1 << 20];
            let size = match rng.below(20) {
                _ if frame_loop => FRAME_SIZES[2 + rng.below(2) as usize],
                0..=9 => FRAME_SIZES[rng.below(6) as usize],
                10..=16 => 4 + rng.below(16 << 10),
                17..=18 => (16 << 10) + rng.below(256 << 10),
                _ => (256 << 10) + rng.below(2 << 20),
            } & !3;
            let access = match rng.below(3) {
                _ if frame_loop => Access::ReadWrite,
                n => [Access::ReadWrite, Access::ReadOnly, Access::Any][n as usize],
            };
            let zeroed = rng.below(4) == 0;
            let mut desc = AllocDesc::storage(size).access(access).label("owner");
            if zeroed {
                desc = desc.zeroed();
            }
            let block = pool.alloc(desc).unwrap();
            let reused = handed.hand_out(&block);
            let tag = next_tag;
            next_tag += 1;
            let range = Range::from(&*block);
            if zeroed {
                if reused {
                    out.zeroed_reuses += 1;
                }
                // Zeros first (checked when the encoder runs), then its tag.
                batch.record(&mut enc, Pass::CountNonzero, range, 0);
                batch.record(&mut enc, Pass::Write, range, tag);
            } else {
                // Staged: runs at the next submit, ahead of that submit's commands.
                let words: Vec<u8> = (0..block.size() as u32 / 4)
                    .flat_map(|i| tag.wrapping_mul(2654435761).wrapping_add(i).to_le_bytes())
                    .collect();
                pool.queue()
                    .write_buffer(block.buffer(), block.offset(), &words);
            }
            owners.push(Owner { block, tag });
        } else if r < 75 {
            // Record a dispatch that reads an owner's bytes.
            let o = &owners[rng.below(owners.len() as u64) as usize];
            batch.record(&mut enc, Pass::Verify, Range::from(&*o.block), o.tag);
            recorded.push(o.tag);
        } else {
            let o = owners.swap_remove(rng.below(owners.len() as u64) as usize);
            if recorded.contains(&o.tag) {
                out.dropped_recorded += 1;
            }
            drop(o);
        }
    }
    batch.finish();
    pool.submit([enc.finish()]);
    let [c, z] = tagger.read_errors();
    out.corrupt += c as u64;
    out.nonzero += z as u64;
    let after = pool.stats().counters;
    out.cache_hits = after.cache_hits - before.cache_hits;
    out.front_hits = after.front_hits - before.front_hits;
    drop(owners);
    pool.check_invariants().unwrap();
    out
}

#[test]
fn random_interleavings_never_show_an_owner_another_owners_bytes() {
    // The issue's property: allocate / record / drop / write_buffer / zeroed
    // allocate / submit / empty_cache in any order, checked on the GPU.
    let ops = std::env::var("VRAMPOOL_INTERLEAVE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let out = interleave(&pool(), ops, 0x5eed_1234, true);
    eprintln!("{ops} interleaved operations: {out:?}");
    assert_eq!(
        out.corrupt, 0,
        "an owner read another owner's bytes: {out:?}"
    );
    assert_eq!(out.nonzero, 0, "a zeroed block held old bytes: {out:?}");
    // The run exercised what it claims to.
    assert!(out.dropped_recorded > ops / 50, "{out:?}");
    assert!(out.zeroed_reuses > ops / 500, "{out:?}");
    assert!(out.cache_hits > ops / 10, "memory was reused: {out:?}");
    assert!(out.submits > ops / 100, "{out:?}");
}

#[test]
fn frame_loop_interleavings_through_the_front_cache_never_mix_owners() {
    // The same property where blocks come back at the same few descriptions,
    // so most reuse is the front cache's (a dropped block handed on without
    // the engine): it too must wait for the submit after a drop.
    let out = interleave_with(&pool(), 20_000, 0xf4a3_e100, true, true);
    eprintln!("20000 frame-loop operations: {out:?}");
    assert_eq!(
        out.corrupt, 0,
        "an owner read another owner's bytes: {out:?}"
    );
    assert_eq!(out.nonzero, 0, "a zeroed block held old bytes: {out:?}");
    assert!(out.dropped_recorded > 20_000 / 50, "{out:?}");
    assert!(out.front_hits > 20_000 / 100, "{out:?}");
    assert!(out.zeroed_reuses > 20_000 / 500, "{out:?}");
}

#[test]
fn the_interleaving_check_catches_reuse_before_submit() {
    // Negative control: the same sequence on a pool that reuses a dropped
    // block at once (PyTorch-style reuse, wrong for code that drops blocks
    // before submitting) is caught. It releases nothing (no headroom, no
    // empty_cache): destroying a segment that an unsubmitted encoder uses
    // would fail the submit loudly instead of showing wrong bytes.
    let options = PoolOptions {
        config: Config {
            headroom: None,
            ..Config::default()
        },
        reuse: vrampool::Reuse::Immediate,
        ..PoolOptions::default()
    };
    let (device, queue, _) = device();
    let pool = Pool::new(device, queue, options).unwrap();
    let out = interleave(&pool, 5_000, 0x5eed_1234, false);
    eprintln!("5000 operations, immediate reuse: {out:?}");
    assert!(out.corrupt + out.nonzero > 0, "{out:?}");
}

#[test]
fn declared_blocks_are_packed_by_how_passes_bind_them() {
    // With the one-word declarations the same dispatch passes, and blocks
    // share buffers only with blocks bound the same way.
    let pool = pool();
    let n = 256u32;
    let uniforms: Vec<_> = (0..4)
        .map(|_| pool.alloc(AllocDesc::uniform(16).label("u")).unwrap())
        .collect();
    let inputs: Vec<_> = (0..4)
        .map(|_| {
            pool.alloc(AllocDesc::storage(4 * n as u64).read_only().label("in"))
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = (0..4)
        .map(|_| {
            pool.alloc(AllocDesc::storage(4 * n as u64).read_write().label("out"))
                .unwrap()
        })
        .collect();
    let same = |a: &PoolBuffer, b: &PoolBuffer| a.buffer() == b.buffer();
    // Read-only blocks (uniforms and read-only storage) share one buffer, the
    // read-write ones another.
    assert!(same(&uniforms[0], &inputs[3]) && same(&inputs[0], &inputs[1]));
    assert!(same(&outputs[0], &outputs[3]));
    assert!(!same(&inputs[0], &outputs[0]));
    assert_eq!(pool.stats().total.segments.current, 2);
    let q = pool.queue();
    for (i, (u, x)) in uniforms.iter().zip(&inputs).enumerate() {
        q.write_buffer(u.buffer(), u.offset(), &bytes(&[i as u32 + 2, 1, n, 0]));
        q.write_buffer(x.buffer(), x.offset(), &bytes(&(0..n).collect::<Vec<_>>()));
    }
    for (i, ((u, x), y)) in uniforms.iter().zip(&inputs).zip(&outputs).enumerate() {
        assert_eq!(dispatch_scale(&pool, u, x, y, n), None, "dispatch {i}");
        let got = words(&read_back(&pool, y));
        assert_eq!(got[5], 5 * (i as u32 + 2) + 1);
    }
}

#[test]
fn indirect_arguments_beside_read_write_storage() {
    // Dispatch arguments from the pool (read-only in the dispatch that uses
    // them) beside a read_write storage block in the same dispatch.
    let pool = pool();
    let args = pool.alloc(AllocDesc::indirect(12).label("args")).unwrap();
    let data = pool
        .alloc(AllocDesc::storage(4096).read_write().label("data"))
        .unwrap();
    let params = pool.alloc(AllocDesc::uniform(16).label("params")).unwrap();
    let q = pool.queue();
    q.write_buffer(args.buffer(), args.offset(), &bytes(&[16, 1, 1]));
    q.write_buffer(params.buffer(), params.offset(), &bytes(&[1, 0, 1024, 0]));
    let device = pool.device();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fill"),
        source: wgpu::ShaderSource::Wgsl(
            r#"
            struct U { scale: u32, shift: u32, n: u32, pad: u32 }
            @group(0) @binding(0) var<uniform> u: U;
            @group(0) @binding(1) var<storage, read_write> out: array<u32>;
            @compute @workgroup_size(64)
            fn main(@builtin(global_invocation_id) id: vec3<u32>) {
                if (id.x < u.n) { out[id.x] = id.x * u.scale + 7u; }
            }"#
            .into(),
        ),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fill"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: params.binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: data.binding(),
            },
        ],
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups_indirect(args.buffer(), args.offset());
    }
    pool.submit([enc.finish()]);
    assert_eq!(pollster::block_on(scope.pop()).map(|e| e.to_string()), None);
    let got = words(&read_back(&pool, &data));
    assert_eq!(got[1000], 1007);
}

#[test]
fn the_checked_helper_names_both_blocks_the_buffer_and_the_fix() {
    let pool = pool();
    // Two blocks declared read_write share a buffer; a pass that reads one
    // `var<storage, read>` beside the other's read_write binding breaks the
    // declaration.
    let a = pool
        .alloc(AllocDesc::storage(4096).read_write().label("activations"))
        .unwrap();
    let b = pool
        .alloc(AllocDesc::storage(4096).read_write().label("gradients"))
        .unwrap();
    assert_eq!(a.buffer(), b.buffer());
    let before = pool.stats();
    let uses = [
        BlockUse::new(&a, BindingUse::StorageReadWrite),
        BlockUse::new(&b, BindingUse::StorageRead),
    ];
    let err = pool.check_usage_scope(&uses).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, vrampool::Error::UsageConflict(_)), "{msg}");
    for want in [
        "'activations'",
        "'gradients'",
        "vrampool read-write segment",
        "read-write and read-only",
        ".read_only()",
    ] {
        assert!(msg.contains(want), "`{msg}` lacks `{want}`");
    }
    // The layout the helper refuses is one wgpu refuses too (negative control).
    let layout = pool
        .device()
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &[storage_entry(0, false), storage_entry(1, true)],
        });
    let scope = pool
        .device()
        .push_error_scope(wgpu::ErrorFilter::Validation);
    let group = pool.create_bind_group(Some("conflicting"), &layout, &[(0, uses[0]), (1, uses[1])]);
    assert!(matches!(group, Err(vrampool::Error::UsageConflict(_))));
    let raw = pool.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: a.binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: b.binding(),
            },
        ],
    });
    let module = pool
        .device()
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(
                r#"
            @group(0) @binding(0) var<storage, read_write> a: array<u32>;
            @group(0) @binding(1) var<storage, read> b: array<u32>;
            @compute @workgroup_size(1) fn main() { a[0] = b[0]; }"#
                    .into(),
            ),
        });
    let pl = pool
        .device()
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
    let pipeline = pool
        .device()
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
    let mut enc = pool.device().create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &raw, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
    pool.queue().submit([enc.finish()]);
    let wgpu_says = pollster::block_on(scope.pop()).expect("wgpu refuses it too");
    assert!(
        wgpu_says.to_string().contains("conflicting usages"),
        "{wgpu_says}"
    );
    // Nothing changed; the same blocks bound as declared pass.
    assert_eq!(pool.stats(), before);
    pool.check_usage_scope(&[
        BlockUse::new(&a, BindingUse::StorageReadWrite),
        BlockUse::new(&b, BindingUse::StorageReadWrite),
    ])
    .unwrap();
    // A block declared read-only and written by a pass, and a copy within
    // one buffer, are named too.
    let r1 = pool
        .alloc(AllocDesc::storage(256).read_only().label("weights"))
        .unwrap();
    let r2 = pool.alloc(AllocDesc::uniform(256).label("params")).unwrap();
    let e = pool
        .check_usage_scope(&[
            BlockUse::new(&r1, BindingUse::StorageReadWrite),
            BlockUse::new(&r2, BindingUse::Uniform),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'weights'") && e.contains("allocated .read_only() but the pass writes it"),
        "{e}"
    );
    let e = pool
        .check_usage_scope(&[
            BlockUse::new(&a, BindingUse::CopySrc),
            BlockUse::new(&b, BindingUse::CopyDst),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("one copy") && e.contains("Pool::copy_block_to_block"),
        "{e}"
    );
    // Blocks with buffers of their own never conflict with each other.
    let own1 = pool.alloc(AllocDesc::storage(256)).unwrap();
    let own2 = pool.alloc(AllocDesc::storage(256)).unwrap();
    pool.check_usage_scope(&[
        BlockUse::new(&own1, BindingUse::StorageReadWrite),
        BlockUse::new(&own2, BindingUse::StorageRead),
        BlockUse::new(&r2, BindingUse::Uniform),
        BlockUse::new(&a, BindingUse::StorageReadWrite),
    ])
    .unwrap();
}

/// A layout of one `var<uniform>` at binding 0, for a compute pass.
fn one_uniform_layout(pool: &Pool) -> wgpu::BindGroupLayout {
    pool.device()
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        })
}

/// Whether wgpu itself (not the pool) refuses a bind group of `layout`
/// with `block` at binding 0: the negative control of a pool refusal.
fn wgpu_refuses_bind_group(
    pool: &Pool,
    layout: &wgpu::BindGroupLayout,
    block: &PoolBuffer,
) -> bool {
    let scope = pool
        .device()
        .push_error_scope(wgpu::ErrorFilter::Validation);
    let _ = pool.device().create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: block.binding(),
        }],
    });
    pollster::block_on(scope.pop()).is_some()
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

#[test]
fn a_block_used_in_a_way_its_buffer_was_not_made_for_is_an_error_not_a_panic() {
    let pool = pool();
    // A read_write storage block lives in a storage segment: no UNIFORM.
    let data = pool
        .alloc(AllocDesc::storage(256).read_write().label("data"))
        .unwrap();
    assert!(!data.buffer().usage().contains(U::UNIFORM));
    let layout = one_uniform_layout(&pool);
    let e = pool
        .create_bind_group(
            None,
            &layout,
            &[(0, BlockUse::new(&data, BindingUse::Uniform))],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("bind group entry 0: 'data' (used as var<uniform>)")
            && msg.contains("without UNIFORM")
            && msg.contains("with .read_only() or Access::Any"),
        "{msg}"
    );
    // check_usage_scope says the same of a pass's uses.
    let e = pool
        .check_usage_scope(&[BlockUse::new(&data, BindingUse::Uniform)])
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("without UNIFORM"), "{e}");
    // Negative control: wgpu refuses the same entry (natively its
    // uncaptured-error handler would panic).
    assert!(wgpu_refuses_bind_group(&pool, &layout, &data));
    // A readback block cannot be a copy's source, an upload block its destination.
    let readback = pool.alloc(AllocDesc::readback(256).label("out")).unwrap();
    let upload = pool.alloc(AllocDesc::upload(256).label("in")).unwrap();
    let mut enc = pool.device().create_command_encoder(&Default::default());
    for (src, dst, says) in [
        (
            &readback,
            &data,
            "the source block out of a copy is in a buffer",
        ),
        (
            &data,
            &upload,
            "the destination block in of a copy is in a buffer",
        ),
    ] {
        let e = pool
            .copy_block_to_block(&mut enc, src, 0, dst, 0, 256)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().starts_with(says), "{e}");
        assert!(e.to_string().contains("a staging block is only"), "{e}");
    }
    // The usual directions still copy.
    assert!(
        pool.copy_block_to_block(&mut enc, &data, 0, &readback, 0, 256)
            .unwrap()
            .is_none()
    );
    pool.submit([enc.finish()]);
    // Negative control: wgpu refuses a copy out of the readback buffer.
    let scope = pool
        .device()
        .push_error_scope(wgpu::ErrorFilter::Validation);
    let mut enc = pool.device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(
        readback.buffer(),
        readback.offset(),
        data.buffer(),
        data.offset(),
        256,
    );
    drop(enc.finish());
    assert!(pollster::block_on(scope.pop()).is_some());
}

#[test]
fn a_bind_group_entry_past_the_devices_binding_size_is_an_error_naming_it() {
    // A uniform block larger than the device binds: wgpu's create_bind_group
    // raises a validation error (the uncaptured-error handler panics); the
    // helper says which entry and which limit.
    let pool = pool();
    let most = pool.device().limits().max_uniform_buffer_binding_size;
    let big = pool
        .alloc(AllocDesc::uniform(most + 256).label("params"))
        .unwrap();
    let layout = one_uniform_layout(&pool);
    let e = pool
        .create_bind_group(
            None,
            &layout,
            &[(0, BlockUse::new(&big, BindingUse::Uniform))],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("entry 0: 'params'") && e.contains("max_uniform_buffer_binding_size"),
        "{e}"
    );
    // Negative control: wgpu refuses the same entry.
    assert!(wgpu_refuses_bind_group(&pool, &layout, &big));
    // One block bound read_write twice: said as such.
    let rw = pool.alloc(AllocDesc::storage(256).read_write()).unwrap();
    let e = pool
        .check_usage_scope(&[
            BlockUse::new(&rw, BindingUse::StorageReadWrite),
            BlockUse::new(&rw, BindingUse::StorageReadWrite),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("read_write twice") && e.contains("Bind it once"),
        "{e}"
    );
}

#[test]
fn pending_blocks_show_in_the_figures_until_a_submit_is_declared() {
    let pool = pool();
    let a = pool
        .alloc(AllocDesc::storage(1 << 20).read_write().label("temporary"))
        .unwrap();
    let keep = pool
        .alloc(AllocDesc::storage(1 << 20).read_write().label("kept"))
        .unwrap();
    let (buffer, offset) = (a.buffer().clone(), a.offset());
    let is_the_temporary = |h: &PoolBuffer| h.buffer() == &buffer && h.offset() == offset;
    drop(a);
    let s = pool.stats();
    assert_eq!(s.total.pending_bytes.current, 1 << 20);
    assert_eq!(s.total.allocated_bytes.current, 1 << 20);
    assert_eq!(
        s.total.reserved_bytes.current,
        s.total.allocated_bytes.current
            + s.total.pending_bytes.current
            + s.total.cached_bytes.current
    );
    assert!(pool.memory_summary().contains("Pending (awaiting submit)"));
    let snap = pool.snapshot();
    let pending: Vec<_> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == vrampool::SnapshotState::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].label.as_deref(), Some("temporary"));
    // Not reused before the submit...
    let b = pool
        .alloc(AllocDesc::storage(1 << 20).read_write())
        .unwrap();
    assert!(!is_the_temporary(&b));
    drop(b);
    // ... and reused after it.
    pool.submit([]);
    assert_eq!(pool.stats().total.pending_bytes.current, 0);
    let c = pool
        .alloc(AllocDesc::storage(1 << 20).read_write())
        .unwrap();
    assert!(is_the_temporary(&c), "the temporary's bytes, best fit");
    drop((c, keep));
}

#[test]
fn under_a_limit_pending_blocks_are_released_before_an_out_of_memory() {
    // Code that never declares a submit still gets its memory back: the
    // out-of-memory ladder releases segments that hold only pending blocks
    // (wgpu keeps them for commands still recorded, then frees them).
    let pool = vrampool_tests::pool_with(Config {
        limit: Some(vrampool::Limit::Bytes(64 << 20)),
        ..Config::default()
    });
    for round in 0..8 {
        let a = pool
            .alloc(AllocDesc::storage(24 << 20).label("frame"))
            .unwrap();
        let b = pool
            .alloc(AllocDesc::storage(24 << 20).label("frame"))
            .unwrap();
        drop((a, b));
        let s = pool.stats();
        assert!(s.total.reserved_bytes.current <= 64 << 20, "round {round}");
    }
    let s = pool.stats();
    assert_eq!(s.counters.ooms, 0);
    // From the second round on, each request finds 48 MiB pending that 24
    // MiB more would pass the limit with: a segment abandoned for each, and
    // one made (a pending block reused early would abandon fewer).
    assert_eq!(
        (s.counters.segments_abandoned, s.counters.device_allocs),
        (14, 16),
        "{:?}",
        s.counters
    );
    pool.check_invariants().unwrap();
}

#[test]
fn immediate_reuse_keeps_pytorchs_model_for_code_that_submits_first() {
    let options = PoolOptions {
        reuse: vrampool::Reuse::Immediate,
        ..PoolOptions::default()
    };
    let (device, queue, _) = device();
    let pool = Pool::new(device, queue, options).unwrap();
    let a = pool.alloc(AllocDesc::storage(4096).read_write()).unwrap();
    let offset = a.offset();
    drop(a);
    assert_eq!(pool.stats().total.pending_bytes.current, 0);
    let b = pool.alloc(AllocDesc::storage(4096).read_write()).unwrap();
    assert_eq!((b.offset(), pool.stats().counters.cache_hits), (offset, 1));
}

/// Records a run of the random interleaving (`frame_loop`: of the frame
/// loop's) on a fresh pool and plans it.
fn recorded_plan(ops: u64, seed: u64, frame_loop: bool) -> vrampool::trace::RecordedPlan {
    let first = pool();
    first.start_recording();
    let out = interleave_with(&first, ops, seed, false, frame_loop);
    assert_eq!(out.corrupt + out.nonzero, 0, "{out:?}");
    let log = first.take_recording().unwrap();
    let plan = first.plan_recording(&log).unwrap();
    // Kept between runs as JSON.
    let json = serde_json::to_string(&plan).unwrap();
    serde_json::from_str(&json).unwrap()
}

#[test]
fn a_run_following_the_plan_of_its_recording_never_mixes_owners() {
    // Run once recording, plan the log, and run the same interleaving again
    // on a new pool that follows the plan: read-only and read-write blocks
    // (two pools of the engine, each planned; any-access blocks have buffers
    // of their own, so their pool is left out), dropped before and after
    // their dispatches are submitted. The plan places every request
    // of those pools (though the recorded run's soft headroom released
    // segments holding pending blocks: their frees are recorded as those
    // segments go, not at the drop), the run makes no
    // segment beyond the plan's, and the GPU sees every owner's bytes as its
    // own.
    let (ops, seed) = (6_000, 0xf011_0e55);
    let plan = recorded_plan(ops, seed, false);
    let pools: Vec<_> = plan.pools.iter().map(|p| p.0).collect();
    assert_eq!(pools.len(), 2, "{pools:?}");
    assert!(pools.iter().all(|k| !k.exclusive), "{pools:?}");
    let segments: usize = plan.pools.iter().map(|(_, p)| p.segments.len()).sum();

    let next = pool();
    next.follow(&plan).unwrap();
    assert_eq!(next.stats().counters.device_allocs as usize, segments);
    let out = interleave(&next, ops, seed, false);
    eprintln!(
        "{ops} operations following the plan: {out:?}, {:?}",
        next.follow_stats()
    );
    assert_eq!(
        out.corrupt, 0,
        "an owner read another owner's bytes: {out:?}"
    );
    assert_eq!(out.nonzero, 0, "a zeroed block held old bytes: {out:?}");
    assert!(out.dropped_recorded > ops / 50, "{out:?}");
    let follow = next.follow_stats();
    let s = next.stats();
    assert_eq!(follow.unplaced, 0, "{follow:?}");
    assert!(follow.placed > ops / 8, "{follow:?}");
    assert!(!follow.following, "the plan is used up: {follow:?}");
    // The planned pools made no segment beyond the plan's and held only it
    // (the any-access blocks' own buffers are the policy's, as always).
    let planned: Vec<_> = s.pools.iter().filter(|p| p.name != "own buffer").collect();
    assert_eq!(planned.len(), 2, "{:?}", s.pools);
    let peak_segments: u64 = planned.iter().map(|p| p.stats.segments.peak).sum();
    let peak_reserved: u64 = planned.iter().map(|p| p.stats.reserved_bytes.peak).sum();
    assert_eq!(peak_segments as usize, segments);
    assert_eq!(peak_reserved, plan.reserved());
}

#[test]
fn a_run_that_leaves_its_plan_is_served_as_always_and_gets_the_front_cache_back() {
    // The plan of one interleaving, followed by a different one: requests
    // miss the plan, the pool gives it up (its segments become cache) and
    // the run is as safe as any; after that the front cache serves again.
    let plan = recorded_plan(2_000, 1, false);
    let next = pool();
    next.follow(&plan).unwrap();
    let out = interleave(&next, 6_000, 2, false);
    assert_eq!(out.corrupt + out.nonzero, 0, "{out:?}");
    let follow = next.follow_stats();
    assert!(!follow.following && follow.unplaced >= 64, "{follow:?}");
    let front = next.stats().counters.front_hits;
    for _ in 0..4 {
        let b = next.alloc(AllocDesc::storage(4096)).unwrap();
        drop(b);
        next.submit([]);
    }
    assert!(
        next.stats().counters.front_hits > front,
        "the front cache is open again"
    );
    next.check_invariants().unwrap();
}

#[test]
fn a_frame_loop_following_its_plan_reaches_the_engine_in_order() {
    // A frame loop's temporaries come back at the same descriptions, which is
    // what the front cache serves without the engine: while the pool follows
    // a plan it must not, or the engine sees a different order than the
    // recording and the plan drifts.
    let (ops, seed) = (6_000, 0xf4a3_e100);
    let plan = recorded_plan(ops, seed, true);
    let next = pool();
    // As a browser follows it: its segments' answers awaited, then the
    // front cache closed.
    pollster::block_on(next.follow_async(&plan)).unwrap();
    let out = interleave_with(&next, ops, seed, false, true);
    assert_eq!(out.corrupt + out.nonzero, 0, "{out:?}");
    assert_eq!(out.front_hits, 0, "{out:?}");
    let follow = next.follow_stats();
    assert_eq!(follow.unplaced, 0, "{follow:?}");
    assert!(follow.placed > ops / 8 && !follow.following, "{follow:?}");
    // Used up: the front cache serves this run's next frames again.
    for _ in 0..4 {
        let b = next
            .alloc(AllocDesc::storage(4 << 10).access(Access::ReadWrite))
            .unwrap();
        drop(b);
        next.submit([]);
    }
    assert!(next.stats().counters.front_hits > 0);
}

#[test]
fn the_async_follow_and_preallocation_await_the_device_and_a_refusal_pins_nothing() {
    // Pool::follow_async and Pool::new_async, the browser's way to make
    // pinned segments, here with the fault injector answering the device's
    // scopes: a plan whose second segment the device refuses is an
    // out-of-memory that follows and pins nothing (the first segment made is
    // ordinary cache); followed again, every planned segment is made; a
    // refused preallocation makes no pool and holds nothing.
    use vrampool::fault::{Fault, Faults};
    use vrampool::{Growth, Limit};
    let plan = recorded_plan(2_000, 3, false);
    let segments: usize = plan.pools.iter().map(|(_, p)| p.segments.len()).sum();
    assert!(segments >= 2, "{segments} planned segments");
    let (device, queue, _) = device();
    let faults = Faults::new();
    let with = |faults: &Faults, config: Config| PoolOptions {
        config,
        faults: Some(faults.clone()),
        ..PoolOptions::default()
    };
    let next = Pool::new(
        device.clone(),
        queue.clone(),
        with(&faults, Config::default()),
    )
    .unwrap();
    // The second segment, and the one try more after the cache is released.
    faults.refuse(2, Fault::OutOfMemory);
    faults.refuse(3, Fault::OutOfMemory);
    let err = pollster::block_on(next.follow_async(&plan)).unwrap_err();
    assert!(
        matches!(&err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    assert_eq!(faults.creates(), 3);
    assert!(!next.follow_stats().following);
    let first = next.stats().total.reserved_bytes.current;
    assert!(first > 0 && first == faults.held(), "{first} B reserved");
    assert!(next.snapshot().segments.iter().all(|s| !s.pinned));
    assert_eq!(
        next.empty_cache(),
        first,
        "the first segment is ordinary cache"
    );
    next.check_invariants().unwrap();

    pollster::block_on(next.follow_async(&plan)).unwrap();
    assert!(next.follow_stats().following);
    assert_eq!(faults.held(), plan.reserved());
    assert_eq!(
        next.snapshot().segments.iter().filter(|s| s.pinned).count(),
        segments
    );
    let out = interleave(&next, 2_000, 3, false);
    assert_eq!(out.corrupt + out.nonzero, 0, "{out:?}");
    assert!(next.follow_stats().placed > 0);

    // Under a limit, a plan that does not fit beside a live block is
    // refused before anything is made (core/tests/follow.rs holds the
    // plan's bytes counted while they are made).
    let limited = Pool::new(
        device.clone(),
        queue.clone(),
        with(
            &Faults::new(),
            Config {
                limit: Some(Limit::Bytes(plan.reserved() * 3 / 2)),
                ..Config::default()
            },
        ),
    )
    .unwrap();
    let keep = limited.alloc(AllocDesc::storage(plan.reserved())).unwrap();
    let err = pollster::block_on(limited.follow_async(&plan)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    drop(keep);

    let refusing = Faults::new();
    refusing.refuse(1, Fault::OutOfMemory);
    refusing.refuse(2, Fault::OutOfMemory);
    let preallocate = Config {
        growth: Growth::Preallocate(4 << 20),
        ..Config::default()
    };
    let err = pollster::block_on(Pool::new_async(
        device.clone(),
        queue.clone(),
        with(&refusing, preallocate.clone()),
    ))
    .map(|_| ())
    .unwrap_err();
    assert!(
        matches!(&err, Error::OutOfMemory(i) if i.device_refused),
        "{err}"
    );
    assert_eq!((refusing.creates(), refusing.held()), (2, 0));
    let p = pollster::block_on(Pool::new_async(
        device,
        queue,
        with(&Faults::new(), preallocate),
    ))
    .unwrap();
    assert_eq!(p.stats().total.reserved_bytes.current, 4 << 20);
    assert!(p.snapshot().segments.iter().all(|s| s.pinned));
}

#[test]
fn a_block_written_or_cleared_through_its_handle_touches_only_its_own_bytes() {
    // Two uniform blocks of one shared buffer: each written and cleared
    // through BufferBlock::write / clear shows its own bytes, the other's
    // stay; a write past the block's end, or of a partial word, is refused
    // before it reaches the queue (queue.write_buffer(block.buffer(), ..)
    // would have written the neighbour's bytes).
    let pool = pool();
    let a = pool.alloc(AllocDesc::uniform(256).label("a")).unwrap();
    let b = pool.alloc(AllocDesc::uniform(256).label("b")).unwrap();
    assert_eq!(a.buffer(), b.buffer(), "one shared buffer");
    a.write(pool.queue(), 0, &[0xaa; 256]).unwrap();
    b.write(pool.queue(), 16, &[0xbb; 32]).unwrap();
    pool.submit([]);
    assert_eq!(read_back(&pool, &a), vec![0xaa; 256]);
    let got = read_back(&pool, &b);
    assert_eq!(&got[16..48], &[0xbb; 32]);
    let err = a.write(pool.queue(), 8, &[1; 256]).unwrap_err();
    assert!(err.to_string().contains("the block is 256 bytes"), "{err}");
    assert!(a.write(pool.queue(), 2, &[1; 4]).is_err(), "a partial word");
    // A block whose buffer cannot take a write is refused with what to do.
    let upload = pool.alloc(AllocDesc::upload(256)).unwrap();
    let err = upload.write(pool.queue(), 0, &[1; 4]).unwrap_err();
    assert!(err.to_string().contains("staging block"), "{err}");
    let mut enc = pool.device().create_command_encoder(&Default::default());
    assert!(upload.clear(&mut enc).is_err());
    drop(enc);
    assert!(
        a.write(pool.queue(), u64::MAX - 1, &[1; 4]).is_err(),
        "an overflowing offset"
    );
    let mut enc = pool.device().create_command_encoder(&Default::default());
    b.clear(&mut enc).unwrap();
    pool.submit([enc.finish()]);
    assert_eq!(read_back(&pool, &b), vec![0; 256]);
    assert_eq!(
        read_back(&pool, &a),
        vec![0xaa; 256],
        "the neighbour kept its bytes"
    );
}

/// Waits (60 s at most, else fails) until `pool` has nothing allocated:
/// blocks kept for submitted work (`used_in`) come back once the work is
/// done, from a wgpu callback a later submit or poll runs; each round submits
/// nothing to let them run.
fn wait_until_nothing_is_allocated(pool: &Pool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.stats().total.allocated_bytes.current != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the kept block never came back after its work"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
        pool.submit([]);
    }
}

#[test]
fn a_scoped_block_used_in_an_encoder_outlives_its_scope_until_the_work_is_done() {
    // A scope's temporary recorded into an encoder submitted after the scope
    // ends: kept for the encoder (ScopedBuffer::used_in), it is not the
    // pool's to hand on when the scope ends, nor after a submit of other
    // work; it comes back once the encoder's work is done, or at once if the
    // encoder is dropped unsubmitted.
    let pool = pool();
    let allocated = |pool: &Pool| pool.stats().total.allocated_bytes.current;
    for submitted in [true, false] {
        let mut encoder = pool.device().create_command_encoder(&Default::default());
        let ((), report) = pool.scope(|s| {
            let tmp = s.alloc(AllocDesc::storage(4096).read_write()).unwrap();
            encoder.clear_buffer(tmp.buffer(), tmp.offset(), Some(tmp.size()));
            tmp.used_in(&encoder);
        });
        assert_eq!(report.allocations, 1);
        assert!(!report.returned, "kept for the encoder: {report:?}");
        pool.submit([]);
        assert_eq!(allocated(&pool), 4096, "still the encoder's");
        if !submitted {
            drop(encoder);
            assert_eq!(allocated(&pool), 0, "an encoder dropped unsubmitted");
            continue;
        }
        pool.submit([encoder.finish()]);
        wait_until_nothing_is_allocated(&pool);
    }
    pool.check_invariants().unwrap();
}

#[path = "../../core/examples/common/quad.rs"]
mod quad;

/// Reads the `frames` rows of `width` pixels copied into the readback block
/// `frames` and checks each shows its draws' colours
/// ([`quad::check_frames`]); its panic, caught, for a control to expect.
fn frames_shown(
    device: &wgpu::Device,
    frames: &PoolBuffer,
    count: u32,
    width: u32,
) -> std::thread::Result<()> {
    frames
        .slice()
        .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let pixels = frames.slice().get_mapped_range().unwrap().to_vec();
    std::panic::catch_unwind(|| quad::check_frames(&pixels, count, width))
}

#[test]
fn a_render_pass_draws_from_pool_vertices_indices_and_per_draw_uniforms_every_frame() {
    // The render-pass layout of real wgpu code (web/tests/in_browser.rs has
    // the same case in the browser): a vertex and an index block and, each
    // frame, two uniforms (one per draw), each allocated, written with
    // `queue.write_buffer`, bound and dropped before the frame is submitted,
    // the first before the second is allocated; all four read-only uses of
    // one buffer in one pass. Every frame's image is copied out: a uniform
    // whose bytes the next allocation's `write_buffer` overwrote before the
    // submit shows as the wrong colour in its frame.
    const FRAMES: u32 = 8;
    const WIDTH: u32 = 64;
    for reuse in [vrampool::Reuse::AfterSubmit, vrampool::Reuse::Immediate] {
        let (device, queue, _) = device();
        let options = PoolOptions {
            reuse,
            ..PoolOptions::default()
        };
        let pool = Pool::new(device, queue, options).unwrap();
        let device = pool.device().clone();
        let vertices = pool.alloc(AllocDesc::vertex(32)).unwrap();
        let indices = pool.alloc(AllocDesc::index(12)).unwrap();
        let (corners, idx) = quad::mesh();
        let q = pool.queue();
        q.write_buffer(vertices.buffer(), vertices.offset(), &corners);
        q.write_buffer(indices.buffer(), indices.offset(), &idx);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let quad = quad::Quad::new(&device, WIDTH, 1);
        let frames = pool
            .alloc(AllocDesc::readback(u64::from(FRAMES * WIDTH * 4)))
            .unwrap();
        let mut shared = 0;
        let mut places = std::collections::BTreeSet::new();
        for f in 0..FRAMES {
            let mut groups = Vec::new();
            for right in [false, true] {
                let uniform = pool.alloc(AllocDesc::uniform(quad::UNIFORM_SIZE)).unwrap();
                shared += usize::from(uniform.buffer() == vertices.buffer());
                places.insert(uniform.offset());
                q.write_buffer(
                    uniform.buffer(),
                    uniform.offset(),
                    &quad::frame_uniform(f, right),
                );
                groups.push(quad.bind(&device, &uniform));
                drop(uniform);
            }
            let offset = u64::from(f * WIDTH * 4);
            quad::draw_frame(&quad, &pool, &vertices, &indices, &groups, &frames, offset);
        }
        let error = pollster::block_on(scope.pop());
        assert!(error.is_none(), "wgpu refused a frame: {error:?}");
        assert!(
            vertices.buffer() == indices.buffer() && shared == 2 * FRAMES as usize,
            "the vertex, index and uniform blocks share one buffer ({shared} uniforms did)"
        );
        let checked = frames_shown(&device, &frames, FRAMES, WIDTH);
        match reuse {
            vrampool::Reuse::AfterSubmit => {
                if let Err(e) = checked {
                    std::panic::resume_unwind(e);
                }
                assert_eq!(
                    places.len(),
                    2,
                    "each frame's two uniforms reuse the first frame's two places: {places:?}"
                );
            }
            // The control: a pool told the caller submits before it drops
            // (PyTorch's model) hands the first uniform's bytes to the second.
            _ => assert!(checked.is_err(), "the check caught no overwritten uniform"),
        }
    }
}

/// `used_in` on a render pass and on a command buffer, not only on an
/// encoder: a pass borrows its encoder, so code holding a pass can only
/// name the pass. Under `Reuse::Immediate` (a drop makes the block
/// reusable at once), each frame's two per-draw uniforms are allocated,
/// written, bound, drawn and dropped inside one pass, and a next owner's
/// uniform is allocated and written with other bytes before the frame is
/// submitted. Kept for the pass (`used_in(&pass)` before the drop) or for
/// the finished command buffer (`used_in(&cb)`, the handles dropped after
/// `finish`), every frame shows its own colours and the blocks come back
/// once the frame's work is done; the control, with neither, shows another
/// owner's colour.
#[test]
fn a_block_kept_for_a_pass_or_a_command_buffer_keeps_its_bytes_until_the_work_is_done() {
    const FRAMES: u32 = 8;
    const WIDTH: u32 = 64;
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Keep {
        Not,
        ForThePass,
        ForTheCommandBuffer,
    }
    for keep in [Keep::Not, Keep::ForThePass, Keep::ForTheCommandBuffer] {
        let (device, queue, _) = device();
        let options = PoolOptions {
            reuse: vrampool::Reuse::Immediate,
            ..PoolOptions::default()
        };
        let pool = Pool::new(device, queue, options).unwrap();
        let device = pool.device().clone();
        let q = pool.queue().clone();
        let vertices = pool.alloc(AllocDesc::vertex(32)).unwrap();
        let indices = pool.alloc(AllocDesc::index(12)).unwrap();
        let (corners, idx) = quad::mesh();
        q.write_buffer(vertices.buffer(), vertices.offset(), &corners);
        q.write_buffer(indices.buffer(), indices.offset(), &idx);
        let quad = quad::Quad::new(&device, WIDTH, 1);
        let frames = pool
            .alloc(AllocDesc::readback(u64::from(FRAMES * WIDTH * 4)))
            .unwrap();
        let held = pool.stats().total.allocated_bytes.current;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        for f in 0..FRAMES {
            let mut encoder = device.create_command_encoder(&Default::default());
            let mut until_finished = Vec::new();
            {
                let mut pass = quad.pass(&mut encoder);
                pass.set_vertex_buffer(0, vertices.slice());
                pass.set_index_buffer(indices.slice(), wgpu::IndexFormat::Uint16);
                for right in [false, true] {
                    let uniform = pool.alloc(AllocDesc::uniform(quad::UNIFORM_SIZE)).unwrap();
                    let bytes = quad::frame_uniform(f, right);
                    q.write_buffer(uniform.buffer(), uniform.offset(), &bytes);
                    pass.set_bind_group(0, &quad.bind(&device, &uniform), &[]);
                    pass.draw_indexed(0..6, 0, 0..1);
                    match keep {
                        Keep::Not => drop(uniform),
                        Keep::ForThePass => {
                            uniform.used_in(&pass);
                            drop(uniform);
                        }
                        Keep::ForTheCommandBuffer => until_finished.push(uniform),
                    }
                }
            }
            quad.copy_out(&mut encoder, &frames, u64::from(f * WIDTH * 4));
            let commands = encoder.finish();
            for uniform in until_finished {
                uniform.used_in(&commands);
            }
            // The next owner writes before this frame is submitted.
            let next = pool.alloc(AllocDesc::uniform(quad::UNIFORM_SIZE)).unwrap();
            q.write_buffer(next.buffer(), next.offset(), &quad::uniform([1.0; 4], 0.5));
            drop(next);
            pool.submit([commands]);
        }
        let error = pollster::block_on(scope.pop());
        assert!(
            error.is_none(),
            "wgpu refused a frame ({keep:?}): {error:?}"
        );
        let checked = frames_shown(&device, &frames, FRAMES, WIDTH);
        if keep == Keep::Not {
            assert!(
                checked.is_err(),
                "the control caught no overwritten uniform"
            );
            continue;
        }
        if let Err(e) = checked {
            std::panic::resume_unwind(e);
        }
        // Every kept uniform came back with its frame's work (the poll ran
        // the callbacks).
        assert_eq!(pool.stats().total.allocated_bytes.current, held, "{keep:?}");
        pool.check_invariants().unwrap();
    }
}

/// Records `f` into an encoder inside a validation scope and submits it
/// through the pool; returns wgpu's validation error, if any, and what `f`
/// returned (kept past the submit).
fn copy_scope<T>(
    pool: &Pool,
    f: impl FnOnce(&mut wgpu::CommandEncoder) -> T,
) -> (Option<String>, T) {
    let scope = pool
        .device()
        .push_error_scope(wgpu::ErrorFilter::Validation);
    let mut enc = pool.device().create_command_encoder(&Default::default());
    let kept = f(&mut enc);
    pool.submit([enc.finish()]);
    (pollster::block_on(scope.pop()).map(|e| e.to_string()), kept)
}

#[test]
fn a_copy_between_two_blocks_of_one_buffer_goes_through_a_block_of_its_own() {
    // A tensor library copies one tensor into another (clone, concat, a KV
    // cache's append); packed into one buffer, the two are one buffer to
    // wgpu, which refuses that copy.
    use vrampool::Reuse::{AfterSubmit, Immediate};
    // With no front cache, a block dropped under `Reuse::Immediate` serves
    // the next request of its size at once: the copy's must not be dropped
    // before the submit.
    for (reuse, front_cache) in [(AfterSubmit, true), (Immediate, true), (Immediate, false)] {
        let (device, queue, _) = device();
        let pool = Pool::new(
            device,
            queue,
            PoolOptions {
                reuse,
                front_cache,
                ..PoolOptions::default()
            },
        )
        .unwrap();
        let n = 1024u64;
        let a = pool.alloc(AllocDesc::storage(n).read_write()).unwrap();
        let b = pool.alloc(AllocDesc::storage(n).read_write()).unwrap();
        assert_eq!(a.buffer(), b.buffer(), "packed");
        let data: Vec<u32> = (0..n as u32 / 4).map(|i| 0xC0DE_0000 | i).collect();
        pool.queue()
            .write_buffer(a.buffer(), a.offset(), &bytes(&data));
        // Negative control: wgpu's own copy between them.
        let (plain, ()) = copy_scope(&pool, |enc| {
            enc.copy_buffer_to_buffer(a.buffer(), a.offset(), b.buffer(), b.offset(), n)
        });
        assert!(
            plain.as_deref().is_some_and(|e| e.contains("same buffer")),
            "{plain:?}"
        );
        // The copy's block is the encoder's: kept past the submit. Before
        // the submit, a request it would serve if let go gets written ahead
        // of the copy; that owner's bytes must stay its own.
        let next_request = AllocDesc::new(n, U::COPY_SRC | U::COPY_DST);
        let (err, (through, next)) = copy_scope(&pool, |enc| {
            let through = pool.copy_block_to_block(enc, &a, 0, &b, 0, n).unwrap();
            let next = pool.alloc(next_request).unwrap();
            pool.queue()
                .write_buffer(next.buffer(), next.offset(), &vec![0xEE; n as usize]);
            (through, next)
        });
        assert!(through.is_some());
        assert_eq!(err, None, "{reuse:?}");
        assert_eq!(words(&read_back(&pool, &b)), data, "{reuse:?}");
        assert_eq!(read_back(&pool, &next), vec![0xEE; n as usize], "{reuse:?}");
        drop((through, next));
        if reuse == Immediate && !front_cache {
            // Negative control: under Reuse::Immediate, the copy's block
            // dropped before the submit serves the next request, whose
            // bytes the copy then overwrites.
            let (_, next) = copy_scope(&pool, |enc| {
                drop(pool.copy_block_to_block(enc, &b, 0, &a, 0, n).unwrap());
                let next = pool.alloc(next_request).unwrap();
                pool.queue()
                    .write_buffer(next.buffer(), next.offset(), &vec![0xEE; n as usize]);
                next
            });
            assert_eq!(words(&read_back(&pool, &next)), data);
        }
        // Overlapping ranges of one block copy as memmove.
        let (err, moved) = copy_scope(&pool, |enc| {
            pool.copy_block_to_block(enc, &a, 0, &a, 256, 512).unwrap()
        });
        assert_eq!(err, None);
        let got = words(&read_back(&pool, &a));
        assert_eq!(got[64..192], data[..128], "{reuse:?}");
        assert_eq!(got[..64], data[..64]);
        drop(moved);
        // The same through `alloc_async` (the browser's way).
        let (err, copied) = copy_scope(&pool, |enc| {
            pollster::block_on(pool.copy_block_to_block_async(enc, &b, 0, &a, 512, 512)).unwrap()
        });
        assert_eq!(err, None);
        assert_eq!(
            words(&read_back(&pool, &a))[128..],
            data[..128],
            "{reuse:?}"
        );
        drop(copied);
        // Blocks of two buffers: one plain copy, no block of the pool's.
        let own = pool.alloc(AllocDesc::storage(n)).unwrap();
        let allocs = pool.stats().counters.allocs;
        let (err, through) = copy_scope(&pool, |enc| {
            pool.copy_block_to_block(enc, &b, 0, &own, 0, n).unwrap()
        });
        assert!(through.is_none());
        assert_eq!((err, pool.stats().counters.allocs), (None, allocs));
        assert_eq!(words(&read_back(&pool, &own)), data);
        // Ranges past a block, or off wgpu's 4-byte copy alignment.
        let mut enc = pool.device().create_command_encoder(&Default::default());
        for (src_at, dst_at, size, says) in [
            (0, 4, n, "runs past its 1024 bytes"),
            (2, 0, 8, "multiples of 4"),
            (0, 0, 6, "multiples of 4"),
            (u64::MAX, 0, 4, "runs past"),
        ] {
            let e = pool
                .copy_block_to_block(&mut enc, &a, src_at, &b, dst_at, size)
                .unwrap_err();
            // A bad argument, not a bad configuration.
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
            assert!(e.to_string().contains(says), "{e}");
        }
        drop((a, b, own));
        pool.submit([]);
        pool.check_invariants().unwrap();
        assert_eq!(pool.stats().total.allocated_bytes.current, 0, "{reuse:?}");
    }
}

/// Two inputs and two outputs in one dispatch: `out_a = in_a * u.scale +
/// u.shift`, `out_b = in_b ^ u.shift` over the first `u.n` words.
const TWO_BY_TWO_WGSL: &str = r#"
struct U { scale: u32, shift: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read> in_a: array<u32>;
@group(0) @binding(2) var<storage, read> in_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> out_a: array<u32>;
@group(0) @binding(4) var<storage, read_write> out_b: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < u.n) {
        out_a[id.x] = in_a[id.x] * u.scale + u.shift;
        out_b[id.x] = in_b[id.x] ^ u.shift;
    }
}
"#;

#[test]
fn owners_sharing_a_segment_fitted_to_wgpus_blocks_bind_and_keep_their_bytes() {
    // A segment above a quarter of the largest block of wgpu's own allocator
    // is sized to the range that allocator sets aside for it
    // (Config::fit_device_blocks, on by default where wgpu reports its
    // blocks: Vulkan), so it is larger than its request and the next
    // requests of its kind share it. One dispatch binds a uniform, two
    // read-only inputs sharing one fitted segment and two read-write outputs
    // sharing another (WebGPU validates usage per buffer in a dispatch); one
    // output is dropped before the submit and its size asked for again,
    // that owner's bytes staged by write_buffer (which runs ahead of the
    // recorded dispatch). The new owner never lands on the dropped one's
    // range, and after the submit each owner holds its own bytes.
    let (device, queue, _) = device();
    let Some(big) = vrampool_tests::fitted_request_size(&device) else {
        return vrampool_tests::skipped_without_an_allocator_report();
    };
    let options = PoolOptions {
        config: Config {
            headroom: None,
            ..Config::default()
        },
        ..Default::default()
    };
    let pool = Pool::new(device, queue, options).unwrap();
    const MIB: u64 = 1 << 20;
    let small = big / 9 * 5;
    let alloc = |size, access| {
        pool.alloc(AllocDesc::storage(size).access(access).label("owner"))
            .unwrap()
    };
    let uniform = pool
        .alloc(AllocDesc::storage(16).usage(U::UNIFORM | U::COPY_DST))
        .unwrap();
    let input = alloc(big, Access::ReadOnly);
    let output = alloc(big, Access::ReadWrite);
    let input_2 = alloc(small, Access::ReadOnly);
    let output_2 = alloc(small, Access::ReadWrite);
    for (a, b) in [(&input, &input_2), (&output, &output_2)] {
        assert!(
            a.buffer().size() >= big + small,
            "a {} MiB request's segment is {} MiB: not fitted to wgpu's blocks",
            big / MIB,
            a.buffer().size() / MIB
        );
        assert_eq!(
            a.buffer(),
            b.buffer(),
            "the second owner shares the fitted segment"
        );
    }
    let n = 1u32 << 20;
    let q = pool.queue();
    q.write_buffer(uniform.buffer(), uniform.offset(), &bytes(&[3, 7, n, 0]));
    let data: Vec<u32> = (0..n).collect();
    q.write_buffer(input.buffer(), input.offset(), &bytes(&data));
    let data_2: Vec<u32> = (0..n).map(|i| i ^ 0x00ff_00ff).collect();
    q.write_buffer(input_2.buffer(), input_2.offset(), &bytes(&data_2));
    q.submit([]);
    let scope = pool
        .device()
        .push_error_scope(wgpu::ErrorFilter::Validation);
    let enc = vrampool_tests::record_dispatch(
        pool.device(),
        TWO_BY_TWO_WGSL,
        [&uniform, &input, &input_2, &output, &output_2].map(|b| b.binding()),
        n,
    );
    let dropped = (
        output_2.buffer().clone(),
        output_2.offset(),
        output_2.size(),
    );
    drop(output_2);
    let next = alloc(small, Access::ReadWrite);
    assert!(
        next.buffer() != &dropped.0
            || next.offset() + next.size() <= dropped.1
            || dropped.1 + dropped.2 <= next.offset(),
        "the next owner got the range of one dropped before the submit of its dispatch"
    );
    let staged: Vec<u32> = (0..(small / 4) as u32)
        .map(|i| 0xA5A5_0000 | (i & 0xffff))
        .collect();
    q.write_buffer(next.buffer(), next.offset(), &bytes(&staged));
    pool.submit([enc.finish()]);
    let error = pollster::block_on(scope.pop()).map(|e| e.to_string());
    assert_eq!(
        error, None,
        "wgpu refused the dispatch over the fitted segments"
    );
    // Words differing from what each owner should hold (a count, not the
    // megabytes of both vectors, in the failure).
    let differ = |block: &PoolBuffer, want: &[u32]| {
        let got = words(&read_back(&pool, block));
        got.iter().zip(want).filter(|(g, w)| g != w).count()
    };
    let scaled: Vec<u32> = data.iter().map(|x| x * 3 + 7).collect();
    assert_eq!(differ(&output, &scaled), 0, "the first output");
    assert_eq!(differ(&input, &data), 0, "the first input");
    assert_eq!(differ(&input_2, &data_2), 0, "the second input");
    assert_eq!(
        differ(&next, &staged),
        0,
        "the dispatch recorded over the dropped owner ran over the next owner's staged bytes"
    );
    pool.check_invariants().unwrap();
}

/// Thread B records a write into a block and drops it, its encoder not yet
/// submitted; thread A then submits its own work. The pool's rule is
/// pool-wide, so A's submit makes B's block reusable (the control, without
/// `used_in`: A's next block gets B's bytes, and B's clear, submitted after
/// A's writes, would wipe them). `used_in` keeps the block for B's encoder
/// until its work is done, or until it is dropped unsubmitted. B is a
/// thread of its own here: its drop parks the block in its front-cache
/// shard, and the engine takes it from there for A.
#[test]
fn a_block_used_in_an_encoder_outlives_another_threads_submit() {
    let pool = pool();
    let desc = AllocDesc::storage(4096).read_write();
    let place = |b: &PoolBuffer| (b.buffer().clone(), b.offset());
    let allocated = |pool: &Pool| pool.stats().total.allocated_bytes.current;
    for keep in [false, true] {
        // Thread B.
        let (b_encoder, at) = std::thread::scope(|s| {
            s.spawn(|| {
                let x = pool.alloc(desc).unwrap();
                let at = place(&x);
                let mut encoder = pool.device().create_command_encoder(&Default::default());
                encoder.clear_buffer(x.buffer(), x.offset(), Some(x.size()));
                if keep {
                    x.used_in(&encoder);
                }
                drop(x);
                (encoder, at)
            })
            .join()
            .unwrap()
        });
        // Thread A (this one) submits, and reads a figure: the engine takes
        // back the blocks threads parked (as it does before it makes a segment).
        pool.submit([]);
        let _ = pool.stats();
        let y = pool.alloc(desc).unwrap();
        assert_eq!(place(&y) == at, !keep, "keep {keep}");
        if !keep {
            // The hazard: B's clear would run after A's writes to y.
            drop(b_encoder);
            drop(y);
            pool.submit([]);
            continue;
        }
        assert_eq!(allocated(&pool), 2 * 4096, "x is still the encoder's");
        // A writes y and B's encoder is submitted: y keeps A's bytes, and x
        // goes back once B's work is done.
        pool.queue()
            .write_buffer(y.buffer(), y.offset(), &[7u8; 4096]);
        pool.submit([b_encoder.finish()]);
        pool.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        assert_eq!(allocated(&pool), 4096);
        assert_eq!(read_back(&pool, &y), vec![7u8; 4096]);
        drop(y);
    }
    // Its callback may run inside the pool's own later calls (wgpu runs
    // completed work's callbacks in a submit): the drop is served there too.
    let w = pool.alloc(desc).unwrap();
    let mut encoder = pool.device().create_command_encoder(&Default::default());
    encoder.clear_buffer(w.buffer(), w.offset(), Some(w.size()));
    w.used_in(&encoder);
    drop(w);
    pool.submit([encoder.finish()]);
    wait_until_nothing_is_allocated(&pool);
    // An encoder dropped unsubmitted lets its blocks go at once.
    let z = pool.alloc(desc).unwrap();
    let encoder = pool.device().create_command_encoder(&Default::default());
    z.used_in(&encoder);
    drop(z);
    assert_eq!(allocated(&pool), 4096);
    drop(encoder);
    assert_eq!(allocated(&pool), 0);
    pool.submit([]);
    pool.check_invariants().unwrap();
}
