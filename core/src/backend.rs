//! The two-method interface between the engine and a device.

/// What a backend reports when it cannot create a segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device has no memory left for a buffer of this size.
    #[error("the device is out of memory")]
    OutOfMemory,
    /// The device was lost or destroyed.
    #[error("device lost: {0}")]
    Lost(String),
    /// Any other refusal, with the device's message.
    #[error("{0}")]
    Other(String),
}

/// How a segment is to be created.
#[derive(Debug, Clone, Copy)]
pub struct SegmentDesc<'a> {
    /// Size in bytes.
    pub size: u64,
    /// Usage bits of the pool the segment belongs to (wgpu's `BufferUsages` bits in the binding).
    pub usage: u32,
    /// A label for debuggers, e.g. `vrampool storage segment 3`.
    pub label: &'a str,
}

/// Where the engine gets device memory from: create a segment of N bytes,
/// destroy a segment. Implemented by the simulated device and by wgpu.
pub trait Backend {
    /// The device object behind one segment (a `wgpu::Buffer`, or nothing).
    type Segment;
    /// Creates a segment, or says why not.
    fn create_segment(&mut self, desc: &SegmentDesc<'_>) -> Result<Self::Segment, DeviceError>;
    /// Gives a segment back to the device.
    fn destroy_segment(&mut self, segment: Self::Segment);
    /// Gives back a segment that commands recorded but not yet submitted may
    /// still use (it held blocks freed with
    /// [`Engine::defer_free`](crate::Engine::defer_free)): the device must keep
    /// it valid for them. wgpu drops its handle instead of destroying it, and
    /// frees the memory once the last command using it has run. By default
    /// the same as [`Backend::destroy_segment`].
    fn abandon_segment(&mut self, segment: Self::Segment) {
        self.destroy_segment(segment)
    }
    /// Whether the backend can copy bytes between two segments made with
    /// `usage` ([`Backend::move_bytes`]): the engine moves
    /// [relocatable](crate::Request::relocatable) blocks of a pool only if
    /// so. No by default.
    fn can_move(&self, usage: u32) -> bool {
        let _ = usage;
        false
    }
    /// Copies `size` bytes at `from_offset` of `from` to `to_offset` of `to`,
    /// two different segments of one pool (WebGPU copies only between two
    /// buffers). The engine calls it only if [`Backend::can_move`] their usage, then
    /// [`Backend::flush_moves`] after each batch. The copy must read the
    /// source after every use the caller made of it so far and land before
    /// any later use of either range (wgpu: the batch's copies in one command
    /// buffer, submitted at `flush_moves`; queue order does the rest).
    fn move_bytes(
        &mut self,
        from: &Self::Segment,
        from_offset: u64,
        to: &Self::Segment,
        to_offset: u64,
        size: u64,
    ) {
        let _ = (from, from_offset, to, to_offset, size);
        unreachable!("the engine moves blocks only where the backend can move them");
    }
    /// Called after a batch of [`Backend::move_bytes`].
    fn flush_moves(&mut self) {}
    /// Called after a batch of destroys, so the device can really free them (wgpu: poll).
    fn flush_releases(&mut self) {}
    /// Called once after a device refusal released the whole cache, before
    /// the last try: waits until the device has really freed what was
    /// released (wgpu natively: until the work submitted so far is done, as
    /// PyTorch synchronizes before its last try; a destroyed buffer's memory
    /// returns only then). Nothing by default, and in a browser, which
    /// cannot block.
    fn settle_releases(&mut self) {}
    /// How the device's own allocator holds a segment made with `usage`, if
    /// it places segments in shared blocks of device memory (wgpu on Vulkan:
    /// gpu-allocator). The engine then keeps a model of those blocks and, with
    /// [`Config::fit_device_blocks`](crate::Config::fit_device_blocks), sizes
    /// a new segment to the gap the device would put it in. `None` (the
    /// default): nothing is known of it (every segment taken as device memory
    /// of its own; wgpu's DX12 backend sub-allocates too, but is not
    /// modelled).
    fn suballocation(&self, usage: u32) -> Option<crate::Suballocation> {
        let _ = usage;
        None
    }
    /// Why the device is lost, if the backend learned so other than through
    /// a refused create (wgpu: the device's lost callback). The engine serves
    /// nothing once it is, not even from its cache. `None` by default.
    fn lost(&self) -> Option<String> {
        None
    }
    /// The largest segment the device can create (wgpu: `max_buffer_size`).
    fn max_segment_size(&self) -> u64;
    /// Total device memory, if known; used by [`Limit::Fraction`](crate::Limit::Fraction).
    fn capacity(&self) -> Option<u64> {
        None
    }
}
