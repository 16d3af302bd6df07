//! A simulated device: no memory behind it, exact accounting. Policies can be
//! tested and real traces replayed on any machine.

use crate::backend::{Backend, DeviceError, SegmentDesc};
#[cfg(not(target_arch = "wasm32"))]
use crate::suballoc::{DeviceBlocks, Suballocation};

/// A device with `capacity` bytes and a `max_buffer_size`, that only counts.
///
/// ```
/// use vrampool::{Backend, SegmentDesc, SimulatedDevice};
/// let mut dev = SimulatedDevice::new(1024);
/// let s = dev.create_segment(&SegmentDesc { size: 1000, usage: 0, label: "a" }).unwrap();
/// assert!(dev.create_segment(&SegmentDesc { size: 100, usage: 0, label: "b" }).is_err());
/// dev.destroy_segment(s);
/// assert_eq!(dev.used(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct SimulatedDevice {
    capacity: u64,
    max_buffer_size: u64,
    used: u64,
    peak_used: u64,
    creates: u64,
    destroys: u64,
    moved: u64,
    lost: bool,
    /// The allocator it models under its segments, if any, and the slots
    /// its live segments hold in that model (not in wasm32 builds: see
    /// `suballoc.rs`).
    #[cfg(not(target_arch = "wasm32"))]
    blocks: Option<DeviceBlocks>,
    #[cfg(not(target_arch = "wasm32"))]
    free_slots: Vec<u32>,
    #[cfg(not(target_arch = "wasm32"))]
    slots: u32,
}

/// The segment of a simulated device: just its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimSegment {
    /// Bytes.
    pub size: u64,
    /// Its place in the modelled device allocator
    /// ([`SimulatedDevice::with_suballocation`]; 0 without one).
    pub slot: u32,
}

impl SimulatedDevice {
    /// A device of `capacity` bytes whose largest buffer is also `capacity`.
    pub fn new(capacity: u64) -> Self {
        Self::with_max_buffer_size(capacity, capacity)
    }

    /// A device of `capacity` bytes whose largest buffer is `max_buffer_size`
    /// (each at most 2^62 bytes, 4 EiB: a larger figure is taken as that, so
    /// sums of what it holds stay within a u64).
    pub fn with_max_buffer_size(capacity: u64, max_buffer_size: u64) -> Self {
        SimulatedDevice {
            capacity: capacity.min(crate::MAX_SEGMENT),
            max_buffer_size: max_buffer_size.min(crate::MAX_SEGMENT),
            used: 0,
            peak_used: 0,
            creates: 0,
            destroys: 0,
            moved: 0,
            lost: false,
            #[cfg(not(target_arch = "wasm32"))]
            blocks: None,
            #[cfg(not(target_arch = "wasm32"))]
            free_slots: Vec::new(),
            #[cfg(not(target_arch = "wasm32"))]
            slots: 0,
        }
    }

    /// The device with an allocator under its segments that places them in
    /// shared blocks as `sizes` says (wgpu on Vulkan does: see
    /// [`Suballocation`]), which it reports to the engine
    /// ([`Backend::suballocation`]) for every usage, and whose figures it
    /// keeps: [`SimulatedDevice::device_blocks`]. Its capacity still counts
    /// the segments' bytes.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice, Suballocation};
    /// let mib = 1u64 << 20;
    /// let blocks = Suballocation::new(128 * mib, 256 * mib, 0);
    /// let dev = SimulatedDevice::new(1 << 40).with_suballocation(blocks);
    /// let mut e = Engine::new(dev, Config::default())?;
    /// e.allocate(Request::new(120 * mib, 0))?;
    /// // The first block the device makes is 128 MiB: the segment is all of
    /// // it, and the 8 MiB beside the request serve the next one.
    /// assert_eq!(e.stats().total.reserved_bytes.current, 128 * mib);
    /// e.allocate(Request::new(8 * mib, 0))?;
    /// assert_eq!(e.stats().counters.device_allocs, 1);
    /// assert_eq!(e.backend().device_blocks().unwrap().held(), 128 * mib);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_suballocation(mut self, sizes: Suballocation) -> Self {
        self.blocks = Some(DeviceBlocks::new(sizes));
        self
    }

    /// The modelled device allocator's blocks, if it has one: what the device
    /// holds and has made, beside what the pool reserves.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device_blocks(&self) -> Option<&DeviceBlocks> {
        self.blocks.as_ref()
    }

    /// Bytes in segments now.
    pub fn used(&self) -> u64 {
        self.used
    }
    /// Highest `used` seen.
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }
    /// Segments created.
    pub fn creates(&self) -> u64 {
        self.creates
    }
    /// Segments destroyed.
    pub fn destroys(&self) -> u64 {
        self.destroys
    }
    /// Bytes copied between segments ([`Backend::move_bytes`]).
    pub fn moved(&self) -> u64 {
        self.moved
    }
    /// Simulates device loss: every later create fails.
    pub fn lose(&mut self) {
        self.lost = true;
    }
}

impl Backend for SimulatedDevice {
    type Segment = SimSegment;

    fn create_segment(&mut self, desc: &SegmentDesc<'_>) -> Result<SimSegment, DeviceError> {
        if self.lost {
            return Err(DeviceError::Lost("the simulated device was lost".into()));
        }
        if desc.size > self.max_buffer_size {
            return Err(DeviceError::Other(format!(
                "buffer of {} bytes exceeds max_buffer_size {}",
                desc.size, self.max_buffer_size
            )));
        }
        if self.used.saturating_add(desc.size) > self.capacity {
            return Err(DeviceError::OutOfMemory);
        }
        self.used += desc.size;
        self.peak_used = self.peak_used.max(self.used);
        self.creates += 1;
        #[cfg_attr(target_arch = "wasm32", allow(unused_mut))]
        let mut slot = 0;
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(blocks) = &mut self.blocks {
            slot = self.free_slots.pop().unwrap_or_else(|| {
                self.slots += 1;
                self.slots - 1
            });
            blocks.place(slot, desc.size);
        }
        Ok(SimSegment {
            size: desc.size,
            slot,
        })
    }

    fn destroy_segment(&mut self, segment: SimSegment) {
        self.used -= segment.size;
        self.destroys += 1;
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(blocks) = &mut self.blocks {
            blocks.remove(segment.slot);
            self.free_slots.push(segment.slot);
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn suballocation(&self, _: u32) -> Option<Suballocation> {
        self.blocks.as_ref().map(DeviceBlocks::sizes)
    }

    fn max_segment_size(&self) -> u64 {
        self.max_buffer_size
    }

    /// It has no bytes to copy, so it counts them.
    fn can_move(&self, _: u32) -> bool {
        true
    }

    fn move_bytes(&mut self, _: &SimSegment, _: u64, _: &SimSegment, _: u64, size: u64) {
        self.moved += size;
    }

    fn capacity(&self) -> Option<u64> {
        Some(self.capacity)
    }
}
