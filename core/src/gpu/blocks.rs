//! How wgpu's own allocator holds the pool's segments, from the memory
//! hints the device was opened with: wgpu-hal 30 on Vulkan places every
//! buffer in gpu-allocator's shared blocks, whose sizes follow the hints
//! (`AllocationSizes::from_memory_hints`), one set of blocks per memory type.

use crate::Suballocation;

use wgpu::BufferUsages as U;

const MIB: u64 = 1 << 20;

/// wgpu-core's `ZERO_BUFFER_SIZE`: the zero buffer every device holds.
const ZERO_BUFFER: u64 = 512 << 10;

/// Which memory a segment of some usage is made in, and its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeviceAllocator {
    /// Not mappable: gpu-allocator's `GpuOnly`.
    gpu: Suballocation,
    /// `MAP_WRITE`: `CpuToGpu`.
    upload: Suballocation,
    /// `MAP_READ` alone: `GpuToCpu`.
    readback: Suballocation,
}

impl DeviceAllocator {
    /// The allocator under `device`'s buffers when it was opened with
    /// `hints`: on Vulkan only (DX12's gpu-allocator is not modelled: its
    /// placement was not measured here; Metal, GL and the browser give
    /// every buffer memory of its own, as far as the pool can tell). An
    /// error says why the hints cannot be those of the device.
    pub(super) fn of(
        device: &wgpu::Device,
        hints: &wgpu::MemoryHints,
    ) -> Result<Option<Self>, String> {
        // A browser's WebGPU is never wgpu's Vulkan backend: no code for it
        // in the page's wasm.
        if cfg!(target_arch = "wasm32") {
            return Ok(None);
        }
        let info = device.adapter_info();
        if info.backend != wgpu::Backend::Vulkan {
            return Ok(None);
        }
        // wgpu-hal's `AllocationSizes::from_memory_hints`: device blocks,
        // then host-visible ones.
        let (device_blocks, host_blocks) = match hints {
            wgpu::MemoryHints::Performance => ((128 * MIB, 256 * MIB), (64 * MIB, 128 * MIB)),
            wgpu::MemoryHints::MemoryUsage => ((8 * MIB, 64 * MIB), (4 * MIB, 32 * MIB)),
            wgpu::MemoryHints::Manual {
                suballocated_device_memory_block_size: r,
            } => ((r.start, r.end), (r.start / 2, r.end / 2)),
        };
        let contradicted = || {
            format!(
                "wgpu's allocator holds blocks that memory hints {hints:?} do not make: segments \
                 are not fitted to them (pass the hints the device was opened with in \
                 PoolOptions::memory_hints)"
            )
        };
        let device_sizes = Suballocation::new(device_blocks.0, device_blocks.1, 0);
        let host_sizes = Suballocation::new(host_blocks.0, host_blocks.1, 0);
        // gpu-allocator sizes a memory type's blocks by whether it is host
        // visible, and puts a device-local buffer in the first memory type
        // that is device-local: host visible on some devices (lavapipe, many
        // integrated GPUs), not on others (discrete GPUs, some integrated
        // ones). wgpu's own zero buffer (`ZERO_BUFFER_SIZE`, 512 KiB), made
        // with every device, sits in the first block of that type, whose
        // size then says which (and the hints are the caller's word, wgpu
        // cannot be asked: a first block neither size says they are wrong).
        // Without a report to read, the device type decides.
        let report = device.generate_allocator_report();
        let first = report.as_ref().and_then(|r| {
            r.blocks
                .iter()
                .find(|b| {
                    r.allocations
                        .get(b.allocations.clone())
                        .unwrap_or_default()
                        .iter()
                        .any(|a| a.size == ZERO_BUFFER && a.name.contains("zero init"))
                })
                .map(|b| b.size)
        });
        let unified = match first {
            Some(size) if size == device_sizes.min_block() => false,
            Some(size) if size == host_sizes.min_block() => true,
            Some(_) => return Err(contradicted()),
            None => matches!(
                info.device_type,
                wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu
            ),
        };
        let (gpu_min, gpu_max) = if unified { host_blocks } else { device_blocks };
        // The zero buffer holds the first block's first 512 KiB, and on the
        // H100 a few hundred bytes more sat beside it: with the head at 512
        // KiB a segment fitted to the rest of that block took a new one
        // instead (llm_decode, BENCHMARKS.md). A head larger than the truth
        // costs a sliver; a smaller one, a block.
        let gpu = Suballocation::new(gpu_min, gpu_max, 0).with_head(2 * ZERO_BUFFER);
        let allocator = if unified {
            // Such a device may have one memory type for every location
            // (lavapipe has): its mappable segments share the same blocks.
            DeviceAllocator {
                gpu,
                upload: gpu,
                readback: gpu,
            }
        } else {
            DeviceAllocator {
                gpu,
                upload: Suballocation::new(host_blocks.0, host_blocks.1, 1),
                readback: Suballocation::new(host_blocks.0, host_blocks.1, 2),
            }
        };
        // Every other block must be one these hints make too, or a buffer's
        // own memory: a device opened with `pool_memory_hints()` holds 4 MiB
        // blocks, where segments fitted to 256 MiB blocks would each be memory
        // of their own, up to half of it unused.
        if let Some(report) = &report
            && !allocator.explains(report)
        {
            return Err(contradicted());
        }
        Ok(Some(allocator))
    }

    /// Whether every block `report` shows is one these sizes make, or one
    /// buffer's own memory.
    fn explains(&self, report: &wgpu::AllocatorReport) -> bool {
        report.blocks.iter().all(|block| {
            let own = block.allocations.len() == 1
                && report
                    .allocations
                    .get(block.allocations.start)
                    .is_some_and(|a| a.size == block.size);
            own || [self.gpu, self.upload, self.readback]
                .iter()
                .any(|s| s.is_block_size(block.size))
        })
    }

    /// The blocks a segment of `usage` goes to (wgpu-hal's memory location
    /// for a buffer's usage), and what the device adds to its size.
    pub(super) fn for_usage(&self, usage: u32) -> Suballocation {
        let usage = U::from_bits_truncate(usage);
        let sizes = if usage.contains(U::MAP_WRITE) {
            self.upload
        } else if usage.contains(U::MAP_READ) {
            self.readback
        } else {
            self.gpu
        };
        if usage.contains(U::VERTEX) {
            // wgpu-core makes a vertex buffer 4 bytes longer (so an empty
            // range can be bound at its end), and the driver rounds that up
            // to its alignment: 64 KiB, more than any we know, so a segment
            // fitted to a range still fits there.
            sizes.with_pad(64 << 10)
        } else {
            sizes
        }
    }
}
