//! A compute dispatch over bound blocks, as the tests record one: shared by
//! the native tests (`vrampool_tests`) and the browser's
//! (`web/tests/in_browser.rs`, through `#[path]`), so both run the same
//! shader the same way. Plain wgpu, nothing native.

/// `out[i] = in[i] * u.scale + u.shift` over the first `u.n` words: a
/// uniform, a read-only input and a read-write output, the first layout
/// anyone writes with wgpu compute.
pub const SCALE_WGSL: &str = r#"
struct U { scale: u32, shift: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read> input: array<u32>;
@group(0) @binding(2) var<storage, read_write> output: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < u.n) { output[id.x] = input[id.x] * u.scale + u.shift; }
}
"#;

/// An encoder, not submitted, with one compute pass running [`SCALE_WGSL`]
/// over `n` words of the three bindings (uniform, read-only input,
/// read-write output), bound in one bind group.
pub fn record_scale_pass(
    device: &wgpu::Device,
    bindings: [wgpu::BindingResource<'_>; 3],
    n: u32,
) -> wgpu::CommandEncoder {
    record_dispatch(device, SCALE_WGSL, bindings, n)
}

/// An encoder, not submitted, with one compute pass running `wgsl`'s `main`
/// (64 invocations a workgroup) over `n` invocations, its `bindings` bound
/// in order in one bind group (group 0, the layout derived from the shader).
pub fn record_dispatch<'a>(
    device: &wgpu::Device,
    wgsl: &str,
    bindings: impl IntoIterator<Item = wgpu::BindingResource<'a>>,
    n: u32,
) -> wgpu::CommandEncoder {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("dispatch"),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("dispatch"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let entries: Vec<wgpu::BindGroupEntry> = (0u32..)
        .zip(bindings)
        .map(|(binding, resource)| wgpu::BindGroupEntry { binding, resource })
        .collect();
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("dispatch"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(n.div_ceil(64), 1, 1);
    }
    enc
}
