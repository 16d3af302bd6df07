//! What creating and destroying device memory costs, as a model: the time a
//! replay's device churn would take on a real device, from its counts alone
//! (so the simulated device can report it, and policies can be compared on
//! it before anyone runs them on a GPU).

use serde::{Deserialize, Serialize};

use super::ReplayReport;

/// The cost of device memory calls: a fixed part per buffer created and per
/// buffer destroyed, and a part per MiB created.
///
/// ```
/// use vrampool::trace::DeviceCost;
/// let h200 = DeviceCost::H200_VULKAN;
/// // One 256 MiB segment: about 7.4 ms on the H200.
/// let ms = h200.estimate_ms(1, 256 << 20, 0);
/// assert!((7.0..8.0).contains(&ms));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceCost {
    /// Microseconds per buffer created, whatever its size.
    pub per_create_us: f64,
    /// Microseconds per MiB of buffer created.
    pub per_mib_us: f64,
    /// Microseconds per buffer destroyed.
    pub per_destroy_us: f64,
}

impl DeviceCost {
    /// An NVIDIA H200 through wgpu 30 on Vulkan, as measured there:
    /// `create_buffer` + `destroy` about 1 µs for buffers up to 16 MiB that
    /// wgpu's allocator sub-allocates, and 28.8 µs per MiB created — the
    /// least-squares fit (with the 1 µs fixed) to the wall time of 54 whole
    /// trace replays on the H200 (18 traces × 3 policies, BENCHMARKS.md);
    /// single large buffers in `bench` cost 35–40 µs per MiB. Destroying is
    /// counted at the fixed cost.
    pub const H200_VULKAN: DeviceCost = DeviceCost {
        per_create_us: 1.0,
        per_mib_us: 28.8,
        per_destroy_us: 1.0,
    };

    /// Milliseconds that `creates` buffers of `bytes_created` bytes in all
    /// and `destroys` destroyed buffers would take.
    pub fn estimate_ms(&self, creates: u64, bytes_created: u64, destroys: u64) -> f64 {
        let mib = bytes_created as f64 / (1u64 << 20) as f64;
        (creates as f64 * self.per_create_us
            + mib * self.per_mib_us
            + destroys as f64 * self.per_destroy_us)
            / 1000.0
    }

    /// The device time a replay's segment creations and releases would take.
    pub fn of_replay(&self, r: &ReplayReport) -> f64 {
        self.estimate_ms(r.device_allocs, r.segment_bytes_created, r.device_frees)
    }
}

impl Default for DeviceCost {
    fn default() -> Self {
        DeviceCost::H200_VULKAN
    }
}
