//! What the examples share: a device on the first adapter wgpu finds (the
//! backend can be chosen with `WGPU_BACKEND`, e.g. `vulkan` or `gl`).

/// A device and queue on the first adapter, with the adapter's own limits
/// and the pool's memory hints (so wgpu's own allocator does not share its
/// blocks among the pool's segments, and the device holds what the pool
/// reserves).
pub fn device() -> Result<(wgpu::Device, wgpu::Queue), String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter =
        pollster::block_on(instance.request_adapter(&Default::default())).map_err(|e| {
            format!("no GPU adapter ({e}); on Linux: apt-get install mesa-vulkan-drivers")
        })?;
    let info = adapter.get_info();
    eprintln!("adapter: {} ({:?})", info.name, info.backend);
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("vrampool example"),
        required_limits: adapter.limits(),
        memory_hints: vrampool::pool_memory_hints(),
        ..Default::default()
    }))
    .map_err(|e| format!("no device: {e}"))
}

/// A pool over `device`, told the hints [`device`] opened it with.
pub fn pool(device: wgpu::Device, queue: wgpu::Queue) -> Result<vrampool::Pool, vrampool::Error> {
    let options = vrampool::PoolOptions {
        memory_hints: vrampool::pool_memory_hints(),
        ..Default::default()
    };
    vrampool::Pool::new(device, queue, options)
}

/// Maps a pool staging block after its copy was submitted and returns its bytes.
pub fn read(pool: &vrampool::Pool, staging: &vrampool::PoolBuffer) -> Vec<u8> {
    staging
        .slice()
        .map_async(wgpu::MapMode::Read, |r| r.expect("map the staging block"));
    pool.device()
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let bytes = staging.slice().get_mapped_range().expect("mapped").to_vec();
    staging.buffer().unmap();
    bytes
}
