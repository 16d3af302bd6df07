//! The thin binding over `wgpu::Device` (feature `wgpu`): a [`Pool`] of
//! segments that are `wgpu::Buffer`s, handles that give a buffer range and
//! return it on drop, and the two WebGPU rules a pool of shared buffers must
//! respect — usage validated per buffer in a pass ([`Access`], [`Sharing`],
//! [`BindingUse`]) and commands that run only when submitted ([`Reuse`]).
//!
//! - `backend.rs` — [`WgpuBackend`]: segments inside error scopes, device loss.
//! - `blocks.rs` — how wgpu's own allocator holds the segments, from the
//!   device's memory hints (what [`crate::Backend::suballocation`] reports).
//! - `desc.rs` — [`AllocDesc`], [`Access`], [`Sharing`]: description → engine request.
//! - `pool.rs` — [`Pool`], [`PoolOptions`], [`Reuse`]: allocation, submits, figures.
//! - `handle.rs` — [`PoolBuffer`], [`WeakBuffer`], [`BufferBlock`].
//! - `lock.rs` — the engine's lock, which knows its thread: what wgpu
//!   callbacks run inside the pool's own work ask of it waits for its
//!   release, or is refused.
//! - `movable.rs` — [`MovableBuffer`], [`Place`]: blocks the pool may move,
//!   pinned where they are from a place read to the next submit.
//! - `front.rs` — the front cache: blocks dropped by a thread, handed to its
//!   next request of the same description without the engine's lock.
//! - `usage.rs` — [`BindingUse`]: checking a pass's bindings before wgpu does.
//! - `scope.rs` — [`Scope`].
//! - here — [`pool_memory_hints`]: how to open the device so that wgpu's own
//!   allocator does not share its blocks among the pool's segments.

mod backend;
mod blocks;
mod desc;
mod front;
mod handle;
mod lock;
mod movable;
mod pool;
mod scope;
mod usage;

pub use backend::WgpuBackend;
pub use desc::{Access, AllocDesc, GPU_USAGE, READ_WRITE_USAGE, Sharing};
#[doc(hidden)]
pub use front::pin_thread_shard;
#[cfg(not(target_arch = "wasm32"))]
pub use handle::RecordsWork;
pub use handle::{BufferBlock, PoolBuffer, WeakBuffer};
pub use movable::{MovableBuffer, Place};
pub use pool::{Pool, PoolOptions, Reuse};
pub use scope::{Scope, ScopeReport, ScopedBuffer};
pub use usage::{BindingUse, BlockUse};

/// The memory hints to open a pool's device with: wgpu's own allocator
/// (Vulkan and DX12) then sub-allocates only in 4 MiB blocks, so a segment
/// above 4 MiB is device memory of its own. With wgpu's default
/// ([`wgpu::MemoryHints::Performance`]) segments under 256 MiB share 128–256
/// MiB blocks that wgpu frees only once empty: the pool then holds less than
/// the device does, and a segment it releases may free nothing. The price is
/// a device allocation per segment, slower than a place in a block wgpu
/// already holds; small segments still share 4 MiB blocks, and wgpu keeps one
/// block after [`Pool::empty_cache`](crate::Pool::empty_cache). Metal and GL
/// ignore the hints. BENCHMARKS.md has the H200 figures. Give the pool the
/// same hints ([`PoolOptions::memory_hints`](crate::PoolOptions::memory_hints)):
/// it sizes segments to the blocks they make.
///
/// ```
/// let desc = wgpu::DeviceDescriptor {
///     memory_hints: vrampool::pool_memory_hints(),
///     ..Default::default()
/// };
/// # let _ = desc;
/// ```
pub fn pool_memory_hints() -> wgpu::MemoryHints {
    const MIB: u64 = 1 << 20;
    wgpu::MemoryHints::Manual {
        suballocated_device_memory_block_size: 4 * MIB..4 * MIB,
    }
}

/// A device on the first adapter wgpu finds (`WGPU_BACKEND=vulkan` or `gl`
/// narrows the search), with the adapter's own limits: what the examples in
/// this crate's documentation run on (Mesa lavapipe in CI). Not part of the
/// API: open your device as your application does.
#[doc(hidden)]
#[cfg(not(target_arch = "wasm32"))]
pub fn example_device()
-> std::result::Result<(wgpu::Device, wgpu::Queue), Box<dyn std::error::Error>> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter =
        pollster::block_on(instance.request_adapter(&Default::default())).map_err(|e| {
            format!(
                "{e}: the examples need a GPU adapter (Debian: apt-get install mesa-vulkan-drivers)"
            )
        })?;
    let desc = wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    };
    Ok(pollster::block_on(adapter.request_device(&desc))?)
}

#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pool>();
    assert_send_sync::<PoolBuffer>();
    assert_send_sync::<WeakBuffer>();
    assert_send_sync::<MovableBuffer>();
};
