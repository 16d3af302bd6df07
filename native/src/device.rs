//! Finding and opening adapters: `--adapter` and `info`.

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// Every adapter wgpu finds, on every backend this build supports (narrowed by
/// the `WGPU_BACKEND` environment variable, e.g. `WGPU_BACKEND=vulkan`).
pub fn adapters() -> Vec<wgpu::Adapter> {
    let desc = wgpu::InstanceDescriptor::new_without_display_handle();
    let backends = wgpu::Backends::from_env().unwrap_or(desc.backends);
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor { backends, ..desc });
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// The adapter `--adapter` names: its index in `info`'s list, or a
/// case-insensitive part of its name; the first one without `--adapter`.
/// Returns it with its index.
pub fn pick(selector: Option<&str>) -> Result<(usize, wgpu::Adapter)> {
    let all = adapters();
    if all.is_empty() {
        bail!(
            "no GPU adapter found (wgpu saw none on Vulkan, Metal, DX12 or GL). \
             Install a driver (Debian: apt-get install -y mesa-vulkan-drivers), \
             or pass --simulate to use the simulated device"
        );
    }
    let Some(sel) = selector else {
        return Ok((0, all.into_iter().next().expect("not empty")));
    };
    let names: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            if info.device_pci_bus_id.is_empty() {
                format!("{i}: {} ({:?})", info.name, info.backend)
            } else {
                format!(
                    "{i}: {} ({:?}, PCI {})",
                    info.name, info.backend, info.device_pci_bus_id
                )
            }
        })
        .collect();
    let index = sel.parse::<usize>().ok();
    if let Some(i) = index.filter(|&i| i < all.len()) {
        return Ok((i, all.into_iter().nth(i).expect("in range")));
    }
    // A number past the adapters may be a word of a name (`--adapter 4090`
    // for "RTX 4090"), never part of one ("1" is not "H100").
    let want = sel.to_lowercase();
    let n = all.len();
    let matches = |name: &str| match index {
        Some(_) => name
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| word == want),
        None => name.contains(&want),
    };
    match all
        .into_iter()
        .enumerate()
        .find(|(_, a)| matches(&a.get_info().name.to_lowercase()))
    {
        Some(found) => Ok(found),
        None => match index {
            Some(i) => usage!(
                "--adapter {i}: there are only {n} adapters, and no name has the word {i} ({})",
                names.join(", ")
            ),
            None => usage!(
                "--adapter {sel:?} matches no adapter; found: {}",
                names.join(", ")
            ),
        },
    }
}

/// wgpu's memory hints, as `--memory-hints` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Hints {
    /// vrampool::pool_memory_hints(): 4 MiB blocks.
    Pool,
    /// `wgpu::MemoryHints::Performance`, wgpu's default.
    Performance,
    /// `wgpu::MemoryHints::MemoryUsage`.
    MemoryUsage,
}

impl Hints {
    /// The hints themselves.
    pub fn wgpu(self) -> wgpu::MemoryHints {
        match self {
            Hints::Pool => vrampool::pool_memory_hints(),
            Hints::Performance => wgpu::MemoryHints::Performance,
            Hints::MemoryUsage => wgpu::MemoryHints::MemoryUsage,
        }
    }
}

/// Opens a device with the adapter's own limits (so `max_buffer_size` is the
/// hardware's, not WebGPU's 256 MiB default) and `hints`.
pub fn open(adapter: &wgpu::Adapter, hints: Hints) -> Result<(wgpu::Device, wgpu::Queue)> {
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("vrampool harness"),
        required_limits: adapter.limits(),
        memory_hints: hints.wgpu(),
        ..Default::default()
    }))
    .with_context(|| format!("cannot open a device on {}", adapter.get_info().name))
}

/// What `info` prints for one adapter.
#[derive(Debug, Serialize)]
pub struct AdapterReport {
    /// Index for `--adapter`.
    pub index: usize,
    /// Adapter name.
    pub name: String,
    /// Vulkan, Metal, DX12, GL.
    pub backend: String,
    /// Discrete, integrated, CPU …
    pub device_type: String,
    /// Driver name.
    pub driver: String,
    /// Driver version or details.
    pub driver_info: String,
    /// PCI bus id (tells identical GPUs apart), if the driver gives one.
    pub pci_bus_id: String,
    /// Largest single buffer.
    pub max_buffer_size: u64,
    /// Largest storage binding.
    pub max_storage_buffer_binding_size: u64,
    /// Largest uniform binding.
    pub max_uniform_buffer_binding_size: u64,
    /// Storage binding offsets must be multiples of this.
    pub min_storage_buffer_offset_alignment: u32,
    /// Uniform binding offsets must be multiples of this.
    pub min_uniform_buffer_offset_alignment: u32,
    /// wgpu's allocator report after creating one 1 MiB buffer, where the
    /// backend gives one: (allocated, reserved, memory blocks).
    pub allocator_report: Option<(u64, u64, usize)>,
}

/// Describes every adapter, its allocator report from a device opened with `hints`.
pub fn info(hints: Hints) -> Result<Vec<AdapterReport>> {
    let all = adapters();
    if all.is_empty() {
        bail!(
            "no GPU adapter found. Install a driver (Debian: apt-get install -y mesa-vulkan-drivers)"
        );
    }
    let mut out = Vec::new();
    for (index, a) in all.iter().enumerate() {
        let i = a.get_info();
        let l = a.limits();
        let allocator_report = open(a, hints).ok().and_then(|(device, _q)| {
            let b = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("vrampool info probe"),
                size: 1 << 20,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
            let r = device.generate_allocator_report().map(|r| {
                (
                    r.total_allocated_bytes,
                    r.total_reserved_bytes,
                    r.blocks.len(),
                )
            });
            b.destroy();
            r
        });
        out.push(AdapterReport {
            index,
            name: i.name,
            backend: format!("{:?}", i.backend),
            device_type: format!("{:?}", i.device_type),
            driver: i.driver,
            driver_info: i.driver_info,
            pci_bus_id: i.device_pci_bus_id,
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_uniform_buffer_binding_size: l.max_uniform_buffer_binding_size,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            min_uniform_buffer_offset_alignment: l.min_uniform_buffer_offset_alignment,
            allocator_report,
        });
    }
    Ok(out)
}
