//! The handles a [`Pool`](crate::Pool) gives out: [`PoolBuffer`] (a block
//! of a segment, returned on drop), [`WeakBuffer`], and the [`BufferBlock`]
//! they point at, with its buffer, range and bindings.

use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::{Arc, Weak};

use crate::types::{BlockId, SegmentId};

use super::desc::Sharing;
use super::pool::{Inner, Reuse};

/// A block of a pool segment: the buffer, the range, and how to bind it.
pub struct BufferBlock {
    pub(super) pool: Weak<Inner>,
    pub(super) id: BlockId,
    pub(super) segment: SegmentId,
    pub(super) buffer: wgpu::Buffer,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) block_size: u64,
    pub(super) usage: wgpu::BufferUsages,
    pub(super) sharing: Sharing,
    pub(super) label: Option<Arc<str>>,
}

impl BufferBlock {
    /// The segment's buffer; the block is `offset()..offset() + size()` of it.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
    /// Offset in the buffer (aligned to `min_storage_buffer_offset_alignment`).
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Size of the range (the request rounded up to 4 bytes).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Size of the block held (the request rounded to the pool's granularity).
    pub fn block_size(&self) -> u64 {
        self.block_size
    }
    /// The byte range in the buffer.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }
    /// The usage asked for.
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.usage
    }
    /// Which blocks it may share its buffer with.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }
    /// The label asked for.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }
    /// A slice of the range, for vertex/index binding, copies or mapping.
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.buffer.slice(self.range())
    }
    /// A `BufferBinding` of the range.
    pub fn buffer_binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        }
    }
    /// A `BindingResource` of the range, for a bind group entry.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(self.buffer_binding())
    }
}

impl Drop for BufferBlock {
    fn drop(&mut self) {
        let Some(inner) = self.pool.upgrade() else {
            return;
        };
        if self
            .usage
            .intersects(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE)
        {
            // A staging buffer goes back only unmapped. Unmapping an unmapped
            // buffer is a validation error in wgpu; the scope swallows it.
            let scope = inner.device.push_error_scope(wgpu::ErrorFilter::Validation);
            self.buffer.unmap();
            drop(scope);
        }
        let mut engine = inner.engine();
        let _ = match inner.reuse {
            Reuse::Immediate => engine.free(self.id),
            Reuse::AfterSubmit => engine.defer_free(self.id),
        };
    }
}

/// A strong handle to a pool block. Clones share the block; it returns to the
/// pool when the last clone is dropped (Python's `del`).
#[derive(Clone)]
pub struct PoolBuffer(pub(super) Arc<BufferBlock>);

impl PoolBuffer {
    /// A weak handle that does not keep the block alive (Python's `weakref`).
    pub fn downgrade(&self) -> WeakBuffer {
        WeakBuffer(Arc::downgrade(&self.0))
    }
}

impl std::ops::Deref for PoolBuffer {
    type Target = BufferBlock;
    fn deref(&self) -> &BufferBlock {
        &self.0
    }
}

impl std::fmt::Debug for PoolBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuffer")
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("label", &self.label)
            .finish()
    }
}

/// A weak handle: [`upgrade`](WeakBuffer::upgrade) works while the block is
/// live and returns `None` after.
#[derive(Clone)]
pub struct WeakBuffer(Weak<BufferBlock>);

impl WeakBuffer {
    /// A strong handle, if the block is still live.
    pub fn upgrade(&self) -> Option<PoolBuffer> {
        self.0.upgrade().map(PoolBuffer)
    }
    /// Whether the block is still live.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}
