//! How wgpu's own allocator holds the pool's segments, from the memory
//! hints the device was opened with: wgpu-hal 30 on Vulkan places every
//! buffer in gpu-allocator's shared blocks, whose sizes follow the hints
//! (`AllocationSizes::from_memory_hints`), one set of blocks per memory type.

use crate::Suballocation;

use wgpu::BufferUsages as U;

const MIB: u64 = 1 << 20;

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
        // gpu-allocator sizes a memory type's blocks by whether it is host
        // visible. A discrete GPU's device-local memory is not; an integrated
        // GPU's and a CPU device's (lavapipe) is, so their `GpuOnly` buffers
        // take host-sized blocks too.
        let unified = matches!(
            info.device_type,
            wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu
        );
        let (gpu_min, gpu_max) = if unified { host_blocks } else { device_blocks };
        // wgpu-core makes a 512 KiB zero buffer (`ZERO_BUFFER_SIZE`) in
        // device-local memory with every device, so its first block exists,
        // and a few hundred bytes more sat beside it on the H100: with the
        // head at 512 KiB a segment fitted to the rest of that block took a
        // new one instead (llm_decode, BENCHMARKS.md). A head larger than the
        // truth costs a sliver; a smaller one, a block.
        let gpu = Suballocation::new(gpu_min, gpu_max, 0).with_head(1 << 20);
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
        // The hints are the caller's word (wgpu cannot be asked). Its
        // allocator's report can show them wrong: a device opened with
        // `pool_memory_hints()` holds 4 MiB blocks, which wgpu's default hints
        // never make; segments fitted to 256 MiB blocks there would each be
        // memory of their own, up to half of it unused.
        if let Some(report) = device.generate_allocator_report()
            && !allocator.explains(&report)
        {
            return Err(format!(
                "wgpu's allocator holds blocks that memory hints {hints:?} do not make: segments \
                 are not fitted to them (pass the hints the device was opened with in \
                 PoolOptions::memory_hints)"
            ));
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
