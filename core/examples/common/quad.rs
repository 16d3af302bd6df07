//! A quad drawn offscreen from pool blocks, shared by the render example and
//! the render-pass tests (natively in tests/tests/embedding.rs, in the
//! browser in web/tests/in_browser.rs): the pipeline and the target are
//! wgpu boilerplate; what the pool serves — the vertex and index blocks and
//! a uniform per draw — stays in the code that uses this.

/// One draw's uniform: its colour, and where the quad goes.
pub const WGSL: &str = r#"
struct Draw { color: vec4<f32>, offset: vec2<f32>, pad: vec2<f32> }
@group(0) @binding(0) var<uniform> draw: Draw;

@vertex
fn vs(@location(0) position: vec2<f32>) -> @builtin(position) vec4<f32> {
    return vec4<f32>(position + draw.offset, 0.0, 1.0);
}

@fragment
fn fs() -> @location(0) vec4<f32> {
    return draw.color;
}
"#;

/// The uniform's size in bytes.
pub const UNIFORM_SIZE: u64 = 32;

/// The quad over the left half of the target (x from -1 to 0), as two
/// triangles of `u16` indices: the vertex block's bytes (32) and the index
/// block's (12).
pub fn mesh() -> (Vec<u8>, Vec<u8>) {
    let corners: [f32; 8] = [-1.0, -1.0, 0.0, -1.0, 0.0, 1.0, -1.0, 1.0];
    let indices: [u16; 6] = [0, 1, 2, 0, 2, 3];
    (
        corners.iter().flat_map(|v| v.to_le_bytes()).collect(),
        indices.iter().flat_map(|i| i.to_le_bytes()).collect(),
    )
}

/// A draw's uniform bytes: `color` (0..=1 each) and the quad moved right by
/// `dx` (1.0: the right half).
pub fn uniform(color: [f32; 4], dx: f32) -> Vec<u8> {
    [color[0], color[1], color[2], color[3], dx, 0.0, 0.0, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// The pipeline and an RGBA8 target of `width` × `height` to draw into.
pub struct Quad {
    pub pipeline: wgpu::RenderPipeline,
    pub target: wgpu::Texture,
    pub view: wgpu::TextureView,
}

impl Quad {
    pub fn new(device: &wgpu::Device, width: u32, height: u32) -> Self {
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("target"),
            size: wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = target.create_view(&Default::default());
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("quad"),
            source: wgpu::ShaderSource::Wgsl(WGSL.into()),
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("quad"),
            layout: None,
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs"),
                compilation_options: Default::default(),
                buffers: &[Some(wgpu::VertexBufferLayout {
                    array_stride: 8,
                    step_mode: wgpu::VertexStepMode::Vertex,
                    attributes: &wgpu::vertex_attr_array![0 => Float32x2],
                })],
            },
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs"),
                compilation_options: Default::default(),
                targets: &[Some(wgpu::TextureFormat::Rgba8Unorm.into())],
            }),
            primitive: Default::default(),
            depth_stencil: None,
            multisample: Default::default(),
            multiview_mask: None,
            cache: None,
        });
        Quad {
            pipeline,
            target,
            view,
        }
    }

    /// A bind group of one draw's uniform block.
    pub fn bind(&self, device: &wgpu::Device, uniform: &vrampool::PoolBuffer) -> wgpu::BindGroup {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("draw"),
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.binding(),
            }],
        })
    }

    /// A render pass that clears the target to black, its pipeline set.
    pub fn pass<'e>(&self, encoder: &'e mut wgpu::CommandEncoder) -> wgpu::RenderPass<'e> {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("frame"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &self.view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass
    }

    /// Copies the target into `staging` at `offset` (rows of `width` × 4
    /// bytes: `width` a multiple of 64).
    pub fn copy_out(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        staging: &vrampool::PoolBuffer,
        offset: u64,
    ) {
        let size = self.target.size();
        encoder.copy_texture_to_buffer(
            self.target.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: staging.buffer(),
                layout: wgpu::TexelCopyBufferLayout {
                    offset: staging.offset() + offset,
                    bytes_per_row: Some(size.width * 4),
                    rows_per_image: Some(size.height),
                },
            },
            size,
        );
    }
}

/// The render-pass tests' colour of the left (or right) draw of frame `f`
/// (0 to 7), exact in 8 bits and different in every frame.
#[allow(dead_code)] // the example draws one colour per frame
pub fn frame_colour(f: u32, right: bool) -> [u8; 4] {
    assert!(f < 8, "frame_colour has colours for frames 0 to 7, not {f}");
    let (a, b) = (10 + 30 * f as u8, 240 - 30 * f as u8);
    if right {
        [b, 60, a, 255]
    } else {
        [a, 200, b, 255]
    }
}

/// The uniform bytes of frame `f`'s left (or right) draw: its
/// [`frame_colour`], on that half.
#[allow(dead_code)] // the example draws one colour per frame
pub fn frame_uniform(f: u32, right: bool) -> Vec<u8> {
    let colour = frame_colour(f, right).map(|x| f32::from(x) / 255.0);
    uniform(colour, if right { 1.0 } else { 0.0 })
}

/// Checks that every frame of `pixels` (rows of `width` RGBA8 pixels, one
/// per frame) shows [`frame_colour`] of that frame on each half.
#[allow(dead_code)] // the example draws one colour per frame
pub fn check_frames(pixels: &[u8], frames: u32, width: u32) {
    for f in 0..frames {
        let at = |x: u32| pixels[((f * width + x) * 4) as usize..][..4].to_vec();
        for (x, right) in [
            (5, false),
            (width / 2 - 4, false),
            (width / 2 + 4, true),
            (width - 4, true),
        ] {
            let want = frame_colour(f, right);
            assert!(
                at(x).iter().zip(want).all(|(&g, w)| g.abs_diff(w) <= 1),
                "frame {f}, pixel {x}: {:?}, its draw's colour {want:?}",
                at(x)
            );
        }
    }
}

/// The render-pass tests' frame: one pass drawing the quad once per bind
/// group (vertices and indices from the pool blocks), the target copied into
/// `staging` at `offset`, submitted through the pool.
#[allow(dead_code)] // the example records its own pass, to show it
pub fn draw_frame(
    quad: &Quad,
    pool: &vrampool::Pool,
    vertices: &vrampool::PoolBuffer,
    indices: &vrampool::PoolBuffer,
    groups: &[wgpu::BindGroup],
    staging: &vrampool::PoolBuffer,
    offset: u64,
) {
    let mut encoder = pool.device().create_command_encoder(&Default::default());
    {
        let mut pass = quad.pass(&mut encoder);
        pass.set_vertex_buffer(0, vertices.slice());
        pass.set_index_buffer(indices.slice(), wgpu::IndexFormat::Uint16);
        for group in groups {
            pass.set_bind_group(0, group, &[]);
            pass.draw_indexed(0..6, 0, 0..1);
        }
    }
    quad.copy_out(&mut encoder, staging, offset);
    pool.submit([encoder.finish()]);
}
