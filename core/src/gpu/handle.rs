//! The handles a [`Pool`](crate::Pool) gives out: [`PoolBuffer`] (a block
//! of a segment, returned on drop), [`WeakBuffer`], and the [`BufferBlock`]
//! they point at, with its buffer, range and bindings.

use std::any::Any;
use std::num::NonZeroU64;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, Weak};

use crate::error::{Error, Result};
use crate::types::{BlockId, SegmentId};

use super::desc::{Sharing, mappable};
use super::front::{FrontCache, FrontRef, Key};
use super::lock::DeferredFree;
use super::pool::Inner;
use super::usage::{BindingUse, BlockUse};

/// A block of a pool segment: the buffer, the range, and how to bind it.
///
/// ```
/// # let (device, queue) = vrampool::example_device()?;
/// use vrampool::{AllocDesc, Pool, PoolOptions};
/// let pool = Pool::new(device, queue, PoolOptions::default())?;
/// let data = pool.alloc(AllocDesc::storage(1024).read_only().label("data"))?;
/// let layout = pool.device().create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
///     label: None,
///     entries: &[wgpu::BindGroupLayoutEntry {
///         binding: 0,
///         visibility: wgpu::ShaderStages::COMPUTE,
///         ty: wgpu::BindingType::Buffer {
///             ty: wgpu::BufferBindingType::Storage { read_only: true },
///             has_dynamic_offset: false,
///             min_binding_size: None,
///         },
///         count: None,
///     }],
/// });
/// // The block's range of its segment, not the whole buffer.
/// let group = pool.device().create_bind_group(&wgpu::BindGroupDescriptor {
///     label: None,
///     layout: &layout,
///     entries: &[wgpu::BindGroupEntry { binding: 0, resource: data.binding() }],
/// });
/// pool.queue().write_buffer(data.buffer(), data.offset(), &[1; 1024]);
/// # let _ = group;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BufferBlock {
    /// The pool, for a block going back through the engine; `Weak::new()`
    /// once the pool has taken the block back itself.
    pub(super) pool: Weak<Inner>,
    /// The pool's front cache, where the block parks when its last handle goes.
    pub(super) front: FrontRef,
    pub(super) id: BlockId,
    pub(super) segment: SegmentId,
    pub(super) buffer: wgpu::Buffer,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) block_size: u64,
    pub(super) usage: wgpu::BufferUsages,
    pub(super) sharing: Sharing,
    pub(super) label: Option<Arc<str>>,
    /// A [`WeakBuffer`] was made of the block since it was last parked: its
    /// last handle's drop must then rule out a weak handle (see
    /// [`PoolBuffer`]'s drop). Set before the weak handle exists.
    pub(super) downgraded: AtomicBool,
}

impl BufferBlock {
    /// The segment's buffer; the block is `offset()..offset() + size()` of it.
    ///
    /// Neither a clone of this buffer nor a bind group made from the block
    /// ([`BufferBlock::binding`], [`Pool::create_bind_group`](crate::Pool::create_bind_group))
    /// keeps the block: once its last handle is dropped (and, with
    /// [`Reuse::AfterSubmit`](crate::Reuse::AfterSubmit), the pool learns of
    /// a submit after it), its bytes serve the next owner, and a bind group
    /// kept from before reads or writes that owner's data. A bind group made
    /// once and used every frame needs its blocks' handles kept as long.
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
        binding_of(&self.buffer, self.offset, self.size)
    }
    /// A `BindingResource` of the range, for a bind group entry. The bind
    /// group does not keep the block (see [`BufferBlock::buffer`]).
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(self.buffer_binding())
    }

    /// Writes `data` at `offset` bytes into the block with
    /// `queue.write_buffer` (staged now, run at the queue's next submit,
    /// ahead of that submit's command buffers), refusing a range past the
    /// block's end, which would write the bytes of whatever shares its
    /// buffer. `offset` and `data.len()` must be multiples of 4 (wgpu's
    /// rule), and the block's usage must include `COPY_DST`.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let params = pool.alloc(AllocDesc::uniform(16))?;
    /// params.write(pool.queue(), 0, &[1u8; 16])?;
    /// assert!(params.write(pool.queue(), 8, &[1u8; 16]).is_err()); // past its end
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(&self, queue: &wgpu::Queue, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        let dst = BlockUse::new(self, BindingUse::CopyDst);
        dst.check_buffer()?;
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(Error::InvalidArgument(format!(
                "cannot write {len} bytes at offset {offset} of {}: the block is {} bytes; \
                 write within it",
                dst.name(),
                self.size
            )));
        }
        let word = wgpu::COPY_BUFFER_ALIGNMENT;
        if !offset.is_multiple_of(word) || !len.is_multiple_of(word) {
            return Err(Error::InvalidArgument(format!(
                "cannot write {len} bytes at offset {offset} of {}: wgpu writes whole 4-byte \
                 words; pad the data and the offset to multiples of 4",
                dst.name()
            )));
        }
        queue.write_buffer(&self.buffer, self.offset + offset, data);
        Ok(())
    }

    /// Records a clear of the whole block (zeros) into `encoder`: run at
    /// that encoder's submit, and only its range, whatever else shares the
    /// buffer. The block's usage must include `COPY_DST`.
    pub fn clear(&self, encoder: &mut wgpu::CommandEncoder) -> Result<()> {
        BlockUse::new(self, BindingUse::CopyDst).check_buffer()?;
        encoder.clear_buffer(&self.buffer, self.offset, Some(self.size));
        Ok(())
    }
}

/// A `BufferBinding` of `size` bytes of `buffer` from `offset` (a block's
/// range, or a movable block's place).
pub(super) fn binding_of(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BufferBinding<'_> {
    wgpu::BufferBinding {
        buffer,
        offset,
        size: NonZeroU64::new(size),
    }
}

impl BufferBlock {
    /// The requests this block may serve again straight from the front cache.
    pub(super) fn key(&self) -> Key {
        Key {
            size: self.size,
            usage: self.usage,
            sharing: self.sharing,
        }
    }

    fn mappable(&self) -> bool {
        mappable(self.usage)
    }
}

/// The slow way back, through the engine's lock: for a block the front cache
/// did not take (a mappable one, a full shard, a block with weak handles,
/// a pool that records).
impl Drop for BufferBlock {
    fn drop(&mut self) {
        let Some(inner) = self.pool.upgrade() else {
            return;
        };
        let mut retire = false;
        let mut callback_panic = None;
        if self.mappable() {
            // A staging buffer goes back only unmapped. Unmapping an unmapped
            // buffer is a validation error in wgpu; the scope swallows it.
            // Unmapping also aborts a pending map, whose callback runs now
            // (with MapAborted) and may panic, and it panics in wgpu while a
            // view of the buffer is alive (a view keeps its buffer, and may
            // outlive the block): neither may keep the block from the pool.
            let scope = inner.device.push_error_scope(wgpu::ErrorFilter::Validation);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.buffer.unmap())) {
                // Perhaps still mapped: the block never serves again; its
                // buffer is dropped, and wgpu frees it once no view holds it.
                retire = true;
                if !a_view_is_alive(&*panic) {
                    callback_panic = Some(panic);
                }
            }
            drop(scope);
        }
        let stamp = self.front.cache.stamp();
        inner.free_from_drop(DeferredFree::Block {
            id: self.id,
            stamp,
            retire,
        });
        // A map callback's panic is the caller's: raised once the block is
        // back (not while unwinding already, which would abort).
        if let Some(panic) = callback_panic
            && !std::thread::panicking()
        {
            resume_unwind(panic);
        }
    }
}

/// Whether a panic of `wgpu::Buffer::unmap` is wgpu refusing to unmap a
/// buffer that a view still maps (which plain wgpu code may keep past the
/// buffer's last handle).
fn a_view_is_alive(panic: &(dyn Any + Send)) -> bool {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    message.is_some_and(|m| m.contains("still has accessible mapped views"))
}

/// A strong handle to a pool block. Clones share the block; it returns to the
/// pool when the last clone is dropped (Python's `del`).
#[derive(Clone)]
pub struct PoolBuffer(Option<Arc<BufferBlock>>);

impl PoolBuffer {
    pub(super) fn new(block: Arc<BufferBlock>) -> PoolBuffer {
        PoolBuffer(Some(block))
    }

    fn block(&self) -> &Arc<BufferBlock> {
        match &self.0 {
            Some(block) => block,
            None => unreachable!("a PoolBuffer holds its block until it is dropped"),
        }
    }

    /// A weak handle that does not keep the block alive (Python's `weakref`).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let activations = pool.alloc(AllocDesc::storage(1 << 20))?;
    /// let weak = activations.downgrade();
    /// assert!(weak.upgrade().is_some());
    /// drop(activations); // `del`: the block goes back to the pool
    /// assert!(weak.upgrade().is_none());
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn downgrade(&self) -> WeakBuffer {
        let block = self.block();
        // Before the weak handle exists, and so before the last handle's
        // drop reads it: through the release of this handle's own drop, or
        // program order and whatever moved or lent a handle to that thread.
        block.downgraded.store(true, Ordering::Relaxed);
        WeakBuffer(Arc::downgrade(block))
    }

    /// Keeps the block for `work`, whose commands use it: the block is not
    /// freed before `work`'s commands are done on the GPU (or they are
    /// dropped unsubmitted), whatever handles are dropped meanwhile: a
    /// handle kept in wgpu's `on_submitted_work_done` callback of the
    /// command buffer being recorded. `work` is a [`CommandEncoder`], a
    /// [`ComputePass`] or [`RenderPass`] on one, or the [`CommandBuffer`] it
    /// finished into ([`RecordsWork`]). PyTorch's `record_stream`, for
    /// WebGPU's encoders.
    ///
    /// The pool's own rule ([`Reuse::AfterSubmit`](crate::Reuse::AfterSubmit))
    /// is pool-wide: a submit it learns of, from any thread, makes every
    /// block dropped before it reusable. Where several threads record and
    /// submit their own encoders, a thread that drops a block its encoder
    /// still to be submitted uses can lose the block's bytes to another
    /// thread's submit; this keeps them. With [`Reuse::Immediate`](crate::Reuse::Immediate)
    /// it makes a drop before the submit safe too.
    ///
    /// What it costs: the block stays live, not pending, until the work is
    /// done (and then, with `AfterSubmit`, until the next submit the pool
    /// learns of), so it counts as allocated, and `empty_cache` and the
    /// out-of-memory ladder cannot release its segment meanwhile; the
    /// callback runs only when something polls the device or submits; a
    /// pool dropped before it runs reports the block as a leak. Not in wasm
    /// builds: the browser runs the pool on one thread.
    ///
    /// [`CommandEncoder`]: wgpu::CommandEncoder
    /// [`ComputePass`]: wgpu::ComputePass
    /// [`RenderPass`]: wgpu::RenderPass
    /// [`CommandBuffer`]: wgpu::CommandBuffer
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let mut encoder = pool.device().create_command_encoder(&Default::default());
    /// let tmp = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// encoder.clear_buffer(tmp.buffer(), tmp.offset(), Some(tmp.size()));
    /// tmp.used_in(&encoder);
    /// drop(tmp); // kept for the encoder
    /// pool.submit([]); // another thread's submit: the block stays the encoder's
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 1 << 20);
    /// pool.submit([encoder.finish()]);
    /// pool.device().poll(wgpu::PollType::wait_indefinitely())?;
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn used_in(&self, work: &impl RecordsWork) {
        let kept = self.clone();
        work.when_done(Box::new(move || drop(kept)));
    }
}

/// What [`PoolBuffer::used_in`] can keep a block for: something recording
/// commands into a command buffer, which wgpu can call back once that
/// command buffer's work is done ([`wgpu::CommandEncoder`],
/// [`wgpu::ComputePass`], [`wgpu::RenderPass`], [`wgpu::CommandBuffer`]; a
/// pass shares its encoder's command buffer). Sealed: implemented for
/// wgpu's four types only.
#[cfg(not(target_arch = "wasm32"))]
pub trait RecordsWork: sealed::Sealed {
    /// Runs `callback` once this command buffer's work is done on the GPU,
    /// or drops it unrun if the command buffer is dropped unsubmitted.
    #[doc(hidden)]
    fn when_done(&self, callback: Box<dyn FnOnce() + Send>);
}

#[cfg(not(target_arch = "wasm32"))]
mod sealed {
    pub trait Sealed {}
    impl Sealed for wgpu::CommandEncoder {}
    impl Sealed for wgpu::ComputePass<'_> {}
    impl Sealed for wgpu::RenderPass<'_> {}
    impl Sealed for wgpu::CommandBuffer {}
}

#[cfg(not(target_arch = "wasm32"))]
macro_rules! records_work {
    ($($t:ty),*) => {$(
        impl RecordsWork for $t {
            fn when_done(&self, callback: Box<dyn FnOnce() + Send>) {
                self.on_submitted_work_done(callback);
            }
        }
    )*};
}
#[cfg(not(target_arch = "wasm32"))]
records_work!(
    wgpu::CommandEncoder,
    wgpu::ComputePass<'_>,
    wgpu::RenderPass<'_>,
    wgpu::CommandBuffer
);

impl std::ops::Deref for PoolBuffer {
    type Target = BufferBlock;
    fn deref(&self) -> &BufferBlock {
        self.block()
    }
}

/// The last handle of a block parks it in its pool's front cache, for the
/// next request with the same description on this thread; otherwise the
/// block goes back through the engine ([`BufferBlock`]'s drop).
impl Drop for PoolBuffer {
    fn drop(&mut self) {
        let Some(mut block) = self.0.take() else {
            return;
        };
        // Only the last strong handle, and only with no weak handle left: a
        // parked block must be unreachable but through the cache.
        if Arc::strong_count(&block) != 1 {
            return;
        }
        // Every other handle's drop released the strong count this load
        // read (std's `Arc` drops with a release decrement, and every other
        // write of the count is a read-modify-write, so the value read is in
        // the release sequence of each); the fence makes what their threads
        // did before it visible here, a `downgrade` among it. No weak handle made since the block
        // was handed out: none exists, and with no other strong handle none
        // can be made, so this handle is the only way to the block. (Two
        // plain loads of the counts would not do: between them another clone
        // may make a weak handle and drop itself.) Most blocks never are
        // downgraded, and this spares their drop the atomic read-modify-write
        // of `Arc::get_mut`, which locks the weak count while it reads the
        // strong one: the check for those that were.
        fence(Ordering::Acquire);
        if block.downgraded.load(Ordering::Relaxed) {
            match Arc::get_mut(&mut block) {
                // No weak handle is left: the next owner's drop need not look.
                Some(b) => *b.downgraded.get_mut() = false,
                None => return,
            }
        }
        if block.mappable() {
            return;
        }
        let (front, key) = (block.front, block.key());
        // Refused (a full shard, a closed cache): dropped here, the slow way.
        let _ = FrontCache::park(front, block, key);
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
        self.0.upgrade().map(PoolBuffer::new)
    }
    /// Whether the block is still live.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}
