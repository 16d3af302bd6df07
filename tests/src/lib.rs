//! Helpers for the workspace-level tests: a real wgpu device (lavapipe in CI),
//! the tag-and-verify compute shader from `shaders/`, and the shared traces.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use vrampool::BufferBlock;

mod dispatch;
pub use dispatch::{SCALE_WGSL, record_dispatch, record_scale_pass};

/// The tag shader.
pub const TAG_WGSL: &str = include_str!("../../shaders/tag.wgsl");

/// The backend the GPU tests run on: Vulkan (Mesa lavapipe in CI) unless
/// `VRAMPOOL_TEST_BACKEND=gl` picks wgpu's GLES backend (Mesa llvmpipe
/// through EGL, surfaceless).
pub fn backend() -> wgpu::Backend {
    match std::env::var("VRAMPOOL_TEST_BACKEND").as_deref() {
        Ok("gl") => wgpu::Backend::Gl,
        Ok("vulkan") | Err(_) => wgpu::Backend::Vulkan,
        Ok(other) => panic!("VRAMPOOL_TEST_BACKEND={other}: expected vulkan or gl"),
    }
}

/// A real device on the first adapter of [`backend`] (Mesa lavapipe on CI),
/// with the adapter's own limits. Panics with what to install when there is none.
pub fn device() -> (wgpu::Device, wgpu::Queue, wgpu::AdapterInfo) {
    device_with_budget(None)
}

/// Like [`device`], with wgpu's `MemoryBudgetThresholds::for_resource_creation`
/// set: buffer creation beyond that percent of the driver's memory budget fails
/// with a real out-of-memory error (where the driver reports a budget,
/// `VK_EXT_memory_budget`), without exhausting the machine.
pub fn device_with_budget(percent: Option<u8>) -> (wgpu::Device, wgpu::Queue, wgpu::AdapterInfo) {
    device_with(percent, wgpu::MemoryHints::default())
}

/// Like [`device`], opened with `hints` (how wgpu's own allocator places
/// buffers; see `vrampool::pool_memory_hints`).
pub fn device_with_hints(
    hints: wgpu::MemoryHints,
) -> (wgpu::Device, wgpu::Queue, wgpu::AdapterInfo) {
    device_with(None, hints)
}

fn device_with(
    percent: Option<u8>,
    memory_hints: wgpu::MemoryHints,
) -> (wgpu::Device, wgpu::Queue, wgpu::AdapterInfo) {
    let backend = backend();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::from(backend),
        memory_budget_thresholds: wgpu::MemoryBudgetThresholds {
            for_resource_creation: percent,
            for_device_loss: None,
        },
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .unwrap_or_else(|e| {
                panic!(
                    "no {backend:?} adapter ({e}): install one (Debian: apt-get install -y mesa-vulkan-drivers for Vulkan, libegl1 libgles2 libegl-mesa0 for GL)"
                )
            });
    let info = adapter.get_info();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("vrampool tests"),
        required_limits: adapter.limits(),
        memory_hints,
        ..Default::default()
    }))
    .expect("request_device failed");
    (device, queue, info)
}

/// A pool with `config` on a fresh [`device`].
pub fn pool_with(config: vrampool::Config) -> vrampool::Pool {
    let (device, queue, _) = device();
    let options = vrampool::PoolOptions {
        config,
        ..Default::default()
    };
    vrampool::Pool::new(device, queue, options).expect("a pool on the test device")
}

/// A request size just above a quarter of the largest block of wgpu's own
/// allocator on `device` (opened with wgpu's default hints), so the pool
/// fits its segment to the blocks (`Config::fit_device_blocks`): the block
/// wgpu makes with the device is the first of its hints (64 MiB on lavapipe,
/// whose memory is host-visible; 128 MiB on a discrete GPU) and the largest
/// twice that, so 9/32 of it (36 or 72 MiB). `None` where the backend
/// reports no blocks (GL), where nothing is fitted.
pub fn fitted_request_size(device: &wgpu::Device) -> Option<u64> {
    Some(2 * first_allocator_block(device)? / 32 * 9)
}

/// The block wgpu's own allocator made with `device` (the largest its
/// report shows, on a device nothing else has allocated on yet); `None`
/// where the backend reports none (GL).
pub fn first_allocator_block(device: &wgpu::Device) -> Option<u64> {
    device
        .generate_allocator_report()
        .and_then(|r| r.blocks.iter().map(|b| b.size).max())
}

/// Where a test found no allocator report: only GL, which has no allocator
/// of its own (nothing fitted, no hints to compare); anywhere else fails.
pub fn skipped_without_an_allocator_report() {
    assert_eq!(
        backend(),
        wgpu::Backend::Gl,
        "only GL has no allocator report"
    );
    eprintln!("skipped on GL: wgpu has no allocator of its own there");
}

/// Path to a trace in the repository's `data/traces`.
pub fn trace_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/traces")
        .join(format!("{name}.csv.gz"))
}

/// Runs the tag shader over blocks.
pub struct Tagger {
    device: wgpu::Device,
    queue: wgpu::Queue,
    layout: wgpu::BindGroupLayout,
    write: wgpu::ComputePipeline,
    verify: wgpu::ComputePipeline,
    nonzero: wgpu::ComputePipeline,
    errors: wgpu::Buffer,
    readback: wgpu::Buffer,
}

/// A range of some buffer to run a pass over.
#[derive(Clone, Copy)]
pub struct Range<'a> {
    /// The buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Offset, a multiple of 256.
    pub offset: u64,
    /// Size, a multiple of 4.
    pub size: u64,
}

impl<'a> From<&'a BufferBlock> for Range<'a> {
    fn from(b: &'a BufferBlock) -> Self {
        Range {
            buffer: b.buffer(),
            offset: b.offset(),
            size: b.size(),
        }
    }
}

impl Tagger {
    /// Compiles the pipelines.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Tagger {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tag.wgsl"),
            source: wgpu::ShaderSource::Wgsl(TAG_WGSL.into()),
        });
        let storage = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tag"),
            entries: &[
                storage(0),
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: None,
                    },
                    count: None,
                },
                storage(2),
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tag"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let errors = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tag errors"),
            size: 8,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tag readback"),
            size: 8,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Tagger {
            device: device.clone(),
            queue: queue.clone(),
            write: pipeline("write_tags"),
            verify: pipeline("verify_tags"),
            nonzero: pipeline("count_nonzero"),
            layout,
            errors,
            readback,
        }
    }

    /// Starts a batch of at most `max` tag dispatches, to be recorded into
    /// encoders the caller owns (see [`Batch`]).
    pub fn batch(&self, max: u32) -> Batch<'_> {
        let params = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tag params"),
            size: max.max(1) as u64 * 256,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Batch {
            tagger: self,
            params,
            bytes: Vec::new(),
            max,
        }
    }

    /// Reads the two counters the passes have added to since the last reset:
    /// `[mismatched tag words, non-zero words]` (waits for the device).
    pub fn read_errors(&self) -> [u32; 2] {
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.errors, 0, &self.readback, 0, 8);
        self.queue.submit([enc.finish()]);
        self.readback
            .slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.expect("map readback"));
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        let counts: [u32; 2] = {
            let view = self.readback.slice(..).get_mapped_range().expect("mapped");
            [0, 1].map(|i| u32::from_le_bytes(view[i * 4..i * 4 + 4].try_into().unwrap()))
        };
        self.readback.unmap();
        counts
    }

    /// Sets both counters to zero (at the next submit, ahead of its commands).
    pub fn reset_errors(&self) {
        self.queue.write_buffer(&self.errors, 0, &[0; 8]);
    }

    /// Records one dispatch per `(range, tag)` of each pass, in order, in one
    /// submission; returns the two counters: `[mismatched tag words, non-zero words]`.
    fn run(&self, passes: &[(Pass, &[(Range<'_>, u32)])]) -> [u32; 2] {
        let n: usize = passes.iter().map(|p| p.1.len()).sum();
        let mut batch = self.batch(n as u32);
        let mut enc = self.device.create_command_encoder(&Default::default());
        for (pass, ranges) in passes {
            for (r, tag) in *ranges {
                assert!(batch.record(&mut enc, *pass, *r, *tag), "sized for n");
            }
        }
        self.reset_errors();
        batch.finish();
        self.queue.submit([enc.finish()]);
        self.read_errors()
    }

    /// One step of a long integrity run, in one submission: counts the non-zero
    /// words of `zeroed` (blocks handed out as zeroed), writes each `(range,
    /// tag)` of `write` (blocks new since the last step), then verifies every
    /// `(range, tag)` of `verify` (all live blocks). Returns `(corrupted words,
    /// non-zero words)`: a block whose tag changed since it was written shared
    /// bytes with another block, or was cleared by another block's zeroing.
    pub fn step(
        &self,
        zeroed: &[Range<'_>],
        write: &[(Range<'_>, u32)],
        verify: &[(Range<'_>, u32)],
    ) -> (u32, u32) {
        let zeroed: Vec<_> = zeroed.iter().map(|r| (*r, 0)).collect();
        let [corrupt, nonzero] = self.run(&[
            (Pass::CountNonzero, &zeroed),
            (Pass::Write, write),
            (Pass::Verify, verify),
        ]);
        (corrupt, nonzero)
    }

    /// Writes each range's tag, then verifies all; returns the corrupted words.
    pub fn tag_and_verify(&self, ranges: &[Range<'_>]) -> u32 {
        let tagged: Vec<_> = ranges.iter().zip(1..).map(|(r, t)| (*r, t)).collect();
        self.run(&[(Pass::Write, &tagged), (Pass::Verify, &tagged)])[0]
    }

    /// Counts non-zero words in the ranges.
    pub fn count_nonzero(&self, ranges: &[Range<'_>]) -> u32 {
        let ranges: Vec<_> = ranges.iter().map(|r| (*r, 0)).collect();
        self.run(&[(Pass::CountNonzero, &ranges)])[1]
    }
}

/// What one tag dispatch does to its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Writes the tag's pattern.
    Write,
    /// Counts words that differ from the tag's pattern (mismatched tag words).
    Verify,
    /// Counts non-zero words.
    CountNonzero,
}

/// Tag dispatches recorded into encoders the caller owns and submits: each
/// dispatch's parameters go to one uniform buffer, written by
/// [`Batch::finish`], which must be called before the submit (a staged
/// write runs at the next submit, ahead of its command buffers).
pub struct Batch<'t> {
    tagger: &'t Tagger,
    params: wgpu::Buffer,
    bytes: Vec<u8>,
    max: u32,
}

impl Batch<'_> {
    /// Dispatches recorded so far.
    pub fn len(&self) -> u32 {
        (self.bytes.len() / 256) as u32
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Records `pass` over `range` with `tag` into `enc`; `false` when the
    /// batch is full (nothing recorded).
    pub fn record(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        pass: Pass,
        r: Range<'_>,
        tag: u32,
    ) -> bool {
        let k = self.len();
        if k == self.max {
            return false;
        }
        let mut entry = [0u8; 256];
        entry[..4].copy_from_slice(&tag.to_le_bytes());
        entry[4..8].copy_from_slice(&((r.size / 4) as u32).to_le_bytes());
        self.bytes.extend_from_slice(&entry);
        let t = self.tagger;
        let bg = t.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &t.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: r.buffer,
                        offset: r.offset,
                        size: std::num::NonZeroU64::new(r.size),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &self.params,
                        offset: 0,
                        size: std::num::NonZeroU64::new(8),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: t.errors.as_entire_binding(),
                },
            ],
        });
        let pipeline = match pass {
            Pass::Write => &t.write,
            Pass::Verify => &t.verify,
            Pass::CountNonzero => &t.nonzero,
        };
        let groups = (r.size / 4).div_ceil(64) as u32;
        let mut cpass = enc.begin_compute_pass(&Default::default());
        cpass.set_pipeline(pipeline);
        cpass.set_bind_group(0, &bg, &[k * 256]);
        cpass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
        true
    }

    /// Writes the recorded dispatches' parameters (call before the submit).
    pub fn finish(self) {
        if !self.bytes.is_empty() {
            self.tagger.queue.write_buffer(&self.params, 0, &self.bytes);
        }
    }
}

/// The byte ranges handed out so far, per buffer: tells a block served from
/// reused memory by its place alone, without reading the pool's stats (which
/// hand every block parked in the front cache back to the engine, so that the
/// front cache would hand on none). A buffer is known by a hash of its handle:
/// one made after another was destroyed may share its hash, and then its fresh
/// bytes count as reused: what that changes is the caller's (the integrity
/// test checks them for zeros too, which fresh bytes must read anyway; the
/// interleaving test, which checks every zeroed block, counts one more reuse).
#[derive(Default)]
pub struct Handed(HashMap<u64, BTreeMap<u64, u64>>);

impl Handed {
    /// Records `block`'s range; whether any byte of it was handed out before.
    pub fn hand_out(&mut self, block: &BufferBlock) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        block.buffer().hash(&mut h);
        self.hand_out_range(h.finish(), block.offset(), block.size())
    }

    /// Records `size` bytes at `offset` of the buffer known as `buffer`;
    /// whether any byte of them was recorded before.
    pub fn hand_out_range(&mut self, buffer: u64, offset: u64, size: u64) -> bool {
        let ranges = self.0.entry(buffer).or_default();
        let (mut start, mut end) = (offset, offset + size);
        // The disjoint ranges (start -> end) that share a byte with
        // [start, end), merged into it.
        let touching: Vec<(u64, u64)> = ranges
            .range(..end)
            .rev()
            .take_while(|&(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for &(s, e) in &touching {
            ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        ranges.insert(start, end);
        !touching.is_empty()
    }
}

/// A tiny xorshift so random sequences are reproducible without a dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Copies `block`'s range into a fresh mappable buffer, waits, and returns its bytes.
pub fn read_back(pool: &vrampool::Pool, block: &BufferBlock) -> Vec<u8> {
    read_range(
        pool.device(),
        pool.queue(),
        block.buffer(),
        block.offset(),
        block.size(),
    )
}

/// Copies `size` bytes of `buffer` at `offset` into a fresh mappable buffer,
/// waits, and returns them.
pub fn read_range(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Vec<u8> {
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
    queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("map read back"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let bytes = staging
        .slice(..)
        .get_mapped_range()
        .expect("mapped")
        .to_vec();
    staging.unmap();
    bytes
}

#[cfg(test)]
mod tests {
    use super::Handed;

    #[test]
    fn handed_tells_a_range_that_shares_a_byte_with_one_before() {
        let mut h = Handed::default();
        assert!(!h.hand_out_range(1, 0, 256));
        // Adjacent, or in another buffer: no byte shared.
        assert!(!h.hand_out_range(1, 256, 256));
        assert!(!h.hand_out_range(2, 0, 256));
        // Inside, straddling, or at another offset over one: shared.
        assert!(h.hand_out_range(1, 64, 64));
        assert!(h.hand_out_range(1, 200, 100));
        assert!(!h.hand_out_range(1, 1024, 256));
        // Ending where [1024, 1280) starts: no byte shared.
        assert!(!h.hand_out_range(1, 768, 256));
        // From inside [0, 512) into [1024, 1280): shares bytes with all three
        // ranges, merged into one.
        assert!(h.hand_out_range(1, 511, 514));
        assert_eq!(h.0[&1].iter().collect::<Vec<_>>(), [(&0, &1280)]);
        assert!(!h.hand_out_range(1, 1280, 4));
    }
}
