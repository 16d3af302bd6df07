//! An offscreen render pass drawing from pool blocks: the vertices, the
//! indices and a per-frame uniform all come from the pool (read-only in the
//! pass, so they may share one buffer), and the uniform is allocated and
//! dropped every frame, before the frame is submitted. The last frame is read
//! back through a pool staging buffer.
//!
//! ```sh
//! cargo run -p vrampool --example render       # WGPU_BACKEND=gl picks OpenGL
//! ```

use vrampool::AllocDesc;

#[path = "common/mod.rs"]
mod common;
#[path = "common/quad.rs"]
mod quad;

const SIZE: u32 = 64;
const FRAMES: u32 = 60;

/// What the run saw: the last frame's pixels (RGBA8, row-major), how many
/// places in the pool the frames' uniforms took, and the pool's device
/// allocations.
struct Report {
    pixels: Vec<u8>,
    uniform_places: usize,
    device_allocs: u64,
}

fn run() -> Result<Report, Box<dyn std::error::Error>> {
    let (device, queue) = common::device()?;
    let pool = common::pool(device, queue)?;
    let device = pool.device().clone();

    // A quad over the left half of the target, as two triangles.
    let vertices = pool.alloc(AllocDesc::vertex(32).label("quad vertices"))?;
    let indices = pool.alloc(AllocDesc::index(12).label("quad indices"))?;
    let (corners, idx) = quad::mesh();
    pool.queue()
        .write_buffer(vertices.buffer(), vertices.offset(), &corners);
    pool.queue()
        .write_buffer(indices.buffer(), indices.offset(), &idx);
    // The pipeline (WGSL: a uniform with the colour) and a SIZE × SIZE target.
    let quad = quad::Quad::new(&device, SIZE, SIZE);

    let staging = pool.alloc(AllocDesc::readback((SIZE * SIZE * 4) as u64).label("pixels"))?;
    let mut places: Vec<(wgpu::Buffer, u64)> = Vec::new();
    for f in 0..FRAMES {
        // The frame's uniform: allocated, written, bound, and dropped before
        // the submit. The pool keeps it pending until `Pool::submit`, so the
        // next frame's uniform never overwrites one a recorded pass still reads.
        let uniform = pool.alloc(AllocDesc::uniform(quad::UNIFORM_SIZE).label("frame uniform"))?;
        let place = (uniform.buffer().clone(), uniform.offset());
        if !places.contains(&place) {
            places.push(place);
        }
        let shade = f as f32 / (FRAMES - 1) as f32;
        pool.queue().write_buffer(
            uniform.buffer(),
            uniform.offset(),
            &quad::uniform([shade, 0.5, 1.0 - shade, 1.0], 0.0),
        );
        let group = quad.bind(&device, &uniform);
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = quad.pass(&mut encoder);
            pass.set_bind_group(0, &group, &[]);
            // Vertices, indices and the uniform may be ranges of one buffer:
            // all three are read-only uses, which one pass may combine.
            pass.set_vertex_buffer(0, vertices.slice());
            pass.set_index_buffer(indices.slice(), wgpu::IndexFormat::Uint16);
            pass.draw_indexed(0..6, 0, 0..1);
        }
        if f == FRAMES - 1 {
            quad.copy_out(&mut encoder, &staging, 0);
        }
        drop((group, uniform));
        pool.submit([encoder.finish()]);
    }
    let pixels = common::read(&pool, &staging);
    println!("{}", pool.memory_summary());
    Ok(Report {
        pixels,
        uniform_places: places.len(),
        device_allocs: pool.stats().counters.device_allocs,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let r = run()?;
    let at = |x: u32, y: u32| &r.pixels[((y * SIZE + x) * 4) as usize..][..4];
    println!(
        "left half {:?}, right half {:?}; {} frames' uniforms in {} place(s) of the pool, {} device allocations",
        at(10, 32),
        at(50, 32),
        FRAMES,
        r.uniform_places,
        r.device_allocs
    );
    Ok(())
}

#[test]
fn draws_the_last_frame_and_reuses_the_per_frame_uniform() {
    let r = run().unwrap();
    let at = |x: u32, y: u32| r.pixels[((y * SIZE + x) * 4) as usize..][..4].to_vec();
    let near = |got: Vec<u8>, want: [u8; 4]| got.iter().zip(want).all(|(&g, w)| g.abs_diff(w) <= 1);
    // The last frame's colour (1.0, 0.5, 0.0) on the left half, black on the right.
    for y in [1, 32, 62] {
        assert!(
            near(at(5, y), [255, 128, 0, 255]),
            "left half, row {y}: {:?}",
            at(5, y)
        );
        assert!(
            near(at(50, y), [0, 0, 0, 255]),
            "right half, row {y}: {:?}",
            at(50, y)
        );
    }
    // Each frame's uniform reused the bytes of the frame before, once that
    // frame was submitted: one place for all 60.
    assert_eq!(r.uniform_places, 1);
}
