//! What creating and destroying device memory costs, as a model: the time a
//! replay's device churn would take on a real device, from its counts alone
//! (so the simulated device can report it, and policies can be compared on
//! it before anyone runs them on a GPU).

use serde::{Deserialize, Serialize};

use super::ReplayReport;

/// The cost of device memory calls: a fixed part per buffer created and per
/// buffer destroyed, a part per MiB created and a part per MiB destroyed;
/// and of moving live blocks ([`Request::relocatable`](crate::Request::relocatable)):
/// a part per block copied and a part per MiB copied.
///
/// ```
/// use vrampool::trace::DeviceCost;
/// let h200 = DeviceCost::H200_VULKAN;
/// // One 256 MiB segment created: about 5.6 ms on the H200; created and
/// // released again: about 10.3 ms.
/// let made = h200.estimate_ms(1, 256 << 20, 0, 0);
/// let churned = h200.estimate_ms(1, 256 << 20, 1, 256 << 20);
/// assert!((5.0..6.0).contains(&made));
/// assert!((9.5..11.0).contains(&churned));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceCost {
    /// Microseconds per buffer created, whatever its size.
    pub per_create_us: f64,
    /// Microseconds per MiB of buffer created.
    pub per_mib_created_us: f64,
    /// Microseconds per buffer destroyed, whatever its size.
    pub per_destroy_us: f64,
    /// Microseconds per MiB of buffer destroyed.
    pub per_mib_released_us: f64,
    /// Microseconds per live block moved (one `copy_buffer_to_buffer`, and
    /// its share of the command buffer that carries it).
    pub per_block_moved_us: f64,
    /// Microseconds per MiB moved.
    pub per_mib_moved_us: f64,
}

impl DeviceCost {
    /// An NVIDIA H200 through wgpu 30 on Vulkan, as measured there:
    /// `create_buffer` + `destroy` about 1 µs each for buffers up to 16 MiB
    /// that wgpu's allocator sub-allocates; 21.9 µs per MiB created and
    /// 18.4 µs per MiB released — the least-squares fit (with the 1 µs fixed
    /// parts, and a per-operation term for the engine's own time) to the wall
    /// time of 486 whole trace replays on the H200 (`data/h200/e582d2d-replays-*`
    /// and `cost-replays-*`; the test `the_cost_model_is_the_fit_of_the_h200_replays`
    /// redoes the fit). `bench` times the two halves apart on large buffers:
    /// 24.8 and 21.1 µs per MiB at 256 MiB (four at once), 25.9 and 26.5 at
    /// 1 GiB. Moves: 10.9 µs per block and 0.88 µs per MiB, the fit (with
    /// the parts above held) to 315 replays with and without moves
    /// (`data/h200/984bdca-relocatable-replays-*`; the test
    /// `the_move_terms_are_the_fit_of_the_relocatable_replays`). A weak
    /// signal: the moves explain 5% of those replays' error.
    pub const H200_VULKAN: DeviceCost = DeviceCost {
        per_create_us: 1.0,
        per_mib_created_us: 21.9,
        per_destroy_us: 1.0,
        per_mib_released_us: 18.4,
        per_block_moved_us: 10.9,
        per_mib_moved_us: 0.88,
    };

    /// Milliseconds that `creates` buffers of `bytes_created` bytes in all,
    /// and `destroys` buffers of `bytes_released` bytes in all, would take.
    pub fn estimate_ms(
        &self,
        creates: u64,
        bytes_created: u64,
        destroys: u64,
        bytes_released: u64,
    ) -> f64 {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        (creates as f64 * self.per_create_us
            + mib(bytes_created) * self.per_mib_created_us
            + destroys as f64 * self.per_destroy_us
            + mib(bytes_released) * self.per_mib_released_us)
            / 1000.0
    }

    /// Milliseconds that moving `blocks` live blocks of `bytes` bytes in
    /// all would take.
    ///
    /// ```
    /// use vrampool::trace::DeviceCost;
    /// let h200 = DeviceCost::H200_VULKAN;
    /// // Moving one 64 MiB block costs less than creating a 64 MiB segment.
    /// assert!(h200.moves_ms(1, 64 << 20) < h200.estimate_ms(1, 64 << 20, 0, 0) / 10.0);
    /// ```
    pub fn moves_ms(&self, blocks: u64, bytes: u64) -> f64 {
        let mib = bytes as f64 / (1u64 << 20) as f64;
        (blocks as f64 * self.per_block_moved_us + mib * self.per_mib_moved_us) / 1000.0
    }

    /// The device time a replay's segment creations and releases, and its
    /// moves, would take (the releases during the replay: what
    /// `segment_bytes_released` counts, not the final `empty_cache`).
    pub fn of_replay(&self, r: &ReplayReport) -> f64 {
        self.estimate_ms(
            r.device_allocs,
            r.segment_bytes_created,
            r.device_frees,
            r.segment_bytes_released,
        ) + self.moves_ms(r.blocks_moved, r.bytes_moved)
    }
}

impl Default for DeviceCost {
    fn default() -> Self {
        DeviceCost::H200_VULKAN
    }
}
