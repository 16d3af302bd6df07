//! A simulated device: no memory behind it, exact accounting. Policies can be
//! tested and real traces replayed on any machine.

use crate::backend::{Backend, DeviceError, SegmentDesc};

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
}

/// The segment of a simulated device: just its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimSegment {
    /// Bytes.
    pub size: u64,
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
        }
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
        Ok(SimSegment { size: desc.size })
    }

    fn destroy_segment(&mut self, segment: SimSegment) {
        self.used -= segment.size;
        self.destroys += 1;
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
