//! A frame loop whose temporaries are dropped before the frame is submitted,
//! and filled with `queue.write_buffer` — which runs at the next submit,
//! ahead of that submit's command buffers. Each frame adds two temporaries
//! into a persistent `state`: the first is dropped before the second is
//! allocated, all before the submit. A pool that handed the first one's bytes
//! to the second would let the second's write reach the first dispatch, and
//! `state` would come out wrong. Submitting through `Pool::submit` tells the
//! pool when the dropped temporaries may serve the next frame.
//!
//! ```sh
//! cargo run -p vrampool --example frame_loop   # WGPU_BACKEND=gl picks OpenGL
//! ```

use vrampool::AllocDesc;

#[path = "common/mod.rs"]
mod common;

const SHADER: &str = r#"
@group(0) @binding(0) var<storage, read> tmp: array<u32>;
@group(0) @binding(1) var<storage, read_write> state: array<u32>;

@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&state)) { state[id.x] += tmp[id.x]; }
}
"#;

const N: u32 = 1024;
const FRAMES: u32 = 100;

/// The first temporary of frame `f`: `f + i` at word `i`.
fn first(f: u32) -> Vec<u32> {
    (0..N).map(|i| f + i).collect()
}

/// The second: `1000 × (f + 1)` everywhere.
fn second(f: u32) -> Vec<u32> {
    vec![1000 * (f + 1); N as usize]
}

struct Report {
    state: Vec<u32>,
    /// How many places in the pool the frames' temporaries took.
    temporary_places: usize,
    summary: String,
}

fn run() -> Result<Report, Box<dyn std::error::Error>> {
    let (device, queue) = common::device()?;
    let pool = common::pool(device, queue)?;
    let device = pool.device().clone();
    let bytes = 4 * N as u64;
    let state = pool.alloc(
        AllocDesc::storage(bytes)
            .read_write()
            .label("state")
            .zeroed(),
    )?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("add"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("add"),
        layout: None,
        module: &module,
        entry_point: Some("add"),
        compilation_options: Default::default(),
        cache: None,
    });
    let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let mut places: Vec<(wgpu::Buffer, u64)> = Vec::new();
    for f in 0..FRAMES {
        let mut encoder = device.create_command_encoder(&Default::default());
        for values in [first(f), second(f)] {
            let tmp = pool.alloc(AllocDesc::storage(bytes).read_only().label("temporary"))?;
            let place = (tmp.buffer().clone(), tmp.offset());
            if !places.contains(&place) {
                places.push(place);
            }
            pool.queue()
                .write_buffer(tmp.buffer(), tmp.offset(), &words(&values));
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: tmp.binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: state.binding(),
                    },
                ],
            });
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(N.div_ceil(64), 1, 1);
            }
            // Dropped with its dispatch recorded and not submitted: pending.
            drop(tmp);
        }
        pool.submit([encoder.finish()]);
    }
    let staging = pool.alloc(AllocDesc::readback(bytes).label("read back"))?;
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(
        state.buffer(),
        state.offset(),
        staging.buffer(),
        staging.offset(),
        bytes,
    );
    pool.submit([encoder.finish()]);
    let state = common::read(&pool, &staging)
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    Ok(Report {
        state,
        temporary_places: places.len(),
        summary: pool.memory_summary(),
    })
}

/// What `state` must hold after every frame ran once, in order.
fn expected() -> Vec<u32> {
    let mut s = vec![0u32; N as usize];
    for f in 0..FRAMES {
        for (i, (a, b)) in first(f).into_iter().zip(second(f)).enumerate() {
            s[i] += a + b;
        }
    }
    s
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let r = run()?;
    println!("{}", r.summary);
    println!(
        "state[0..4] = {:?} (expected {:?}); {} temporaries over {} frames in {} places of the pool",
        &r.state[..4],
        &expected()[..4],
        2 * FRAMES,
        FRAMES,
        r.temporary_places
    );
    Ok(())
}

#[test]
fn every_temporary_reaches_its_dispatch_and_memory_stays_flat() {
    let r = run().unwrap();
    assert_eq!(r.state, expected());
    // Each frame's two temporaries reuse the frame before's, once it is
    // submitted (not before: the second is allocated after the first is
    // dropped, with its dispatch recorded and not yet submitted).
    assert_eq!(r.temporary_places, 2);
}
