//! A compute dispatch whose three buffers come from the pool: a uniform, a
//! read-only input and a read-write output, read back through a pool
//! staging buffer. The first layout anyone writes with wgpu compute.
//!
//! ```sh
//! cargo run -p vrampool --example compute      # WGPU_BACKEND=gl picks OpenGL
//! ```

use vrampool::{AllocDesc, BindingUse as Use, BlockUse};

#[path = "common/mod.rs"]
mod common;

const SHADER: &str = r#"
struct Params { scale: f32, shift: f32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < params.n) {
        output[id.x] = input[id.x] * params.scale + params.shift;
    }
}
"#;

/// Runs `output = input * 2 + 1` over 4096 floats; returns the output.
fn run() -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let (device, queue) = common::device()?;
    let pool = common::pool(device, queue)?;
    let n = 4096u32;
    let bytes = 4 * n as u64;

    // One word on each block says how the shader binds it: the pool keeps
    // blocks bound read-only and blocks bound read_write in different
    // buffers, because WebGPU checks usage per buffer within a dispatch.
    let params = pool.alloc(AllocDesc::uniform(16).label("params"))?;
    let input = pool.alloc(AllocDesc::storage(bytes).read_only().label("input"))?;
    let output = pool.alloc(AllocDesc::storage(bytes).read_write().label("output"))?;
    let staging = pool.alloc(AllocDesc::readback(bytes).label("staging"))?;

    let queue = pool.queue();
    let mut uniform = [0u8; 16];
    uniform[0..4].copy_from_slice(&2.0f32.to_le_bytes());
    uniform[4..8].copy_from_slice(&1.0f32.to_le_bytes());
    uniform[8..12].copy_from_slice(&n.to_le_bytes());
    // Each write checked to stay within its block (the buffer is shared).
    params.write(queue, 0, &uniform)?;
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    input.write(queue, 0, &data)?;

    let device = pool.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("scale"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("scale"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    // A bind group of pool blocks, each with how the shader binds it: the
    // pool checks the pass's usage rule before wgpu sees it (an error that
    // names both blocks, instead of wgpu's validation panic).
    let group = pool.create_bind_group(
        Some("scale"),
        &pipeline.get_bind_group_layout(0),
        &[
            (0, BlockUse::new(&params, Use::Uniform)),
            (1, BlockUse::new(&input, Use::StorageRead)),
            (2, BlockUse::new(&output, Use::StorageReadWrite)),
        ],
    )?;
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(n.div_ceil(64), 1, 1);
    }
    encoder.copy_buffer_to_buffer(
        output.buffer(),
        output.offset(),
        staging.buffer(),
        staging.offset(),
        bytes,
    );
    // The input is not needed after this dispatch: dropped before the submit,
    // its block is pending (a recorded pass still reads it), not reused yet.
    drop((group, input));
    // Submitting through the pool tells it the commands are submitted: blocks
    // dropped before this call (the input) become reusable.
    pool.submit([encoder.finish()]);

    let result: Vec<f32> = common::read(&pool, &staging)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    println!("{}", pool.memory_summary());
    Ok(result)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = run()?;
    println!("output[0..4] = {:?}", &out[..4]);
    Ok(())
}

#[test]
fn computes_input_times_two_plus_one() {
    let out = run().unwrap();
    assert_eq!(out.len(), 4096);
    assert!(
        out.iter()
            .enumerate()
            .all(|(i, &y)| y == i as f32 * 2.0 + 1.0)
    );
}
