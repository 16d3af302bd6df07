//! Where a command runs: a GPU adapter (with its PCI bus, to find it in
//! nvidia-smi) or the simulated device; and nvidia-smi's used memory.

use anyhow::Result;
use vrampool::fmt_bytes;

use crate::{Common, device};

/// Where a command runs.
pub enum Target {
    Simulated {
        capacity: u64,
        max_buffer: u64,
    },
    Gpu {
        device: wgpu::Device,
        queue: wgpu::Queue,
        name: String,
        /// PCI bus id, when the driver gives one (to find it in nvidia-smi).
        bus: String,
        /// Index among the NVIDIA adapters of its backend (nvidia-smi's
        /// order, where the driver gives no bus id); none for other vendors.
        index: Option<usize>,
    },
}

impl Target {
    pub fn open(c: &Common, capacity: u64, max_buffer: u64) -> Result<Target> {
        if c.simulate {
            return Ok(Target::Simulated {
                capacity,
                max_buffer,
            });
        }
        let (index, adapter) = device::pick(c.adapter.as_deref())?;
        let (device, queue) = device::open(&adapter, c.hints())?;
        let info = adapter.get_info();
        // Counted among NVIDIA's adapters of the same backend only: a
        // software or GL adapter listed before it is no row of nvidia-smi.
        let index = (info.vendor == NVIDIA).then(|| {
            device::adapters()
                .iter()
                .take(index)
                .map(|a| a.get_info())
                .filter(|a| a.vendor == NVIDIA && a.backend == info.backend)
                .count()
        });
        Ok(Target::Gpu {
            device,
            queue,
            name: if info.device_pci_bus_id.is_empty() {
                format!("{} ({:?})", info.name, info.backend)
            } else {
                format!(
                    "{} ({:?}, PCI {})",
                    info.name, info.backend, info.device_pci_bus_id
                )
            },
            bus: info.device_pci_bus_id,
            index,
        })
    }

    pub fn name(&self) -> String {
        match self {
            Target::Simulated { capacity, .. } => {
                format!("simulated device ({})", fmt_bytes(*capacity))
            }
            Target::Gpu { name, .. } => name.clone(),
        }
    }

    pub fn max_buffer(&self) -> u64 {
        match self {
            Target::Simulated { max_buffer, .. } => *max_buffer,
            Target::Gpu { device, .. } => device.limits().max_buffer_size,
        }
    }
}

/// The largest rounding of a request among the policies (the PyTorch
/// preset's 512 bytes; the vrampool policy aligns to 256).
pub const GRANULE: u64 = 512;

/// Refuses a simulated `--max-buffer-size` below [`GRANULE`]: no request of
/// any size, at any scale, would fit such a buffer.
pub fn check_max_buffer_size(max_buffer_size: u64) -> Result<()> {
    if max_buffer_size < GRANULE {
        usage!(
            "--max-buffer-size {max_buffer_size}: the policies round every request up to \
             {GRANULE} bytes (the PyTorch preset's granule), so a buffer must hold at least \
             {GRANULE}"
        );
    }
    Ok(())
}

/// PCI vendor id of NVIDIA's adapters.
const NVIDIA: u32 = 0x10de;

/// Used memory in bytes of the GPU at PCI bus `bus`, as nvidia-smi reports it.
/// NVIDIA's Vulkan driver gives wgpu no bus id; then `index`, the adapter's
/// place among the NVIDIA adapters of its backend, is used, since Vulkan
/// lists NVIDIA GPUs in nvidia-smi's order (checked on two H200s:
/// `--adapter 1` filled GPU 1).
pub fn nvidia_smi_used(bus: &str, index: Option<usize>) -> Option<u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=pci.bus_id,memory.used",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<(String, &str)> = text
        .lines()
        .filter_map(|l| l.split_once(','))
        .map(|(b, m)| (b.trim().to_lowercase(), m.trim()))
        .collect();
    // nvidia-smi writes 00000000:1B:00.0, Vulkan 0000:1b:00.0: compare bus:device.function.
    let tail = |b: &str| b.rsplit(':').take(2).collect::<Vec<_>>().join(":");
    let want = tail(&bus.to_lowercase());
    let row = rows
        .iter()
        .find(|(b, _)| !want.is_empty() && tail(b) == want)
        .or_else(|| rows.get(index?))?;
    let mib: u64 = row.1.parse().ok()?;
    Some(mib << 20)
}
