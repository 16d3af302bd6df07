//! [`MovableBuffer`]: a pool block the engine may move while it is live
//! ([`Request::relocatable`](crate::Request::relocatable)), and the
//! [`Place`] a pass binds it at.
//!
//! Commands recorded in an encoder run only at submit, so a block's place
//! must not change between the moment a pass is recorded with it and the
//! submit that runs the pass: the copy a move submits would run first, and
//! the request served from the old place would overwrite it. The rule that
//! keeps this by construction: reading a block's place pins it until the
//! pool learns of a submit that began after the read ([`Pool::submit`](crate::Pool::submit)
//! or [`Pool::submitted`](crate::Pool::submitted)): the read is stamped with
//! the drop epoch, the same promise and the same marks deferred frees rest on. A block nobody read since then has no recorded command
//! that uses it (recording needs its place), so it may move; its copy is
//! submitted at once, ahead of every command recorded after, which read the
//! new place.
//!
//! Architecture invariant: a block moves only inside an allocation, under
//! the engine's lock, and its handle's place is updated before that lock
//! is released; the lock order is engine → movables → a handle's place.

// On wasm32 wgpu's types are neither Send nor Sync (see pool.rs).
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use crate::engine::Engine;
use crate::types::{BlockId, SegmentId};

use super::backend::WgpuBackend;
use super::handle::binding_of;
use super::lock::DeferredFree;
use super::pool::Inner;

/// Where a [`MovableBuffer`] is now: its buffer and range, and how to bind
/// it. Valid for the commands recorded until the pool next learns of a
/// submit; read it again (with [`MovableBuffer::place`]) for every pass after.
#[derive(Debug, Clone)]
pub struct Place {
    buffer: wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl Place {
    /// The segment's buffer; the block is `offset()..offset() + size()` of it.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
    /// Offset in the buffer.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Size of the range (the request rounded up to 4 bytes).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The byte range in the buffer.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }
    /// A slice of the range, for copies and vertex or index binding.
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.buffer.slice(self.range())
    }
    /// A `BufferBinding` of the range.
    pub fn buffer_binding(&self) -> wgpu::BufferBinding<'_> {
        binding_of(&self.buffer, self.offset, self.size)
    }
    /// A `BindingResource` of the range, for a bind group entry.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(self.buffer_binding())
    }
}

/// Where a movable block is, as its handle knows it.
struct At {
    buffer: wgpu::Buffer,
    segment: SegmentId,
    offset: u64,
    /// Read since the pool last learned of a submit: the engine may not move it.
    pinned: bool,
}

impl At {
    /// The [`Place`] of a block of `size` bytes here.
    fn place(&self, size: u64) -> Place {
        Place {
            buffer: self.buffer.clone(),
            offset: self.offset,
            size,
        }
    }
}

/// A handle's place, shared with the pool's table of movable blocks (which
/// holds no handle, so a move never ends up dropping a block's last one
/// under the engine's lock).
type SharedAt = Arc<Mutex<At>>;

fn lock(at: &SharedAt) -> std::sync::MutexGuard<'_, At> {
    at.lock().unwrap_or_else(|e| e.into_inner())
}

/// The block a [`MovableBuffer`] holds.
pub(super) struct MovableBlock {
    pool: Weak<Inner>,
    id: BlockId,
    size: u64,
    label: Option<Arc<str>>,
    at: SharedAt,
}

impl MovableBlock {
    fn at(&self) -> std::sync::MutexGuard<'_, At> {
        lock(&self.at)
    }
}

/// A strong handle to a pool block that the pool may move to make room for
/// another request instead of making a segment (the engine's
/// [`Request::relocatable`](crate::Request::relocatable); BENCHMARKS.md,
/// "Relocatable blocks"). It has no fixed buffer: [`MovableBuffer::place`]
/// says where it is and pins it there until the pool next learns of a submit.
/// The block returns to the pool when the handle drops, as a
/// [`PoolBuffer`](crate::PoolBuffer)'s does (pending until a submit covers
/// the drop, under [`Reuse::AfterSubmit`](crate::Reuse::AfterSubmit)).
///
/// Only blocks of shared buffers move (`Access::ReadOnly` or
/// `Access::ReadWrite`; `Access::Any` storage has a buffer of its own, and
/// `alloc_movable` refuses it, as it refuses mappable usages), never under a
/// budget, while the pool records or follows a plan, or in
/// [`Config::pytorch`](crate::Config::pytorch) (`Config::relocate` off). A bind group made from a place holds it: make bind groups for
/// each frame's passes (as a tensor runtime does per dispatch), not once for
/// the program.
///
/// ```
/// # let (device, queue) = vrampool::example_device()?;
/// use vrampool::{AllocDesc, Pool, PoolOptions};
/// let pool = Pool::new(device, queue, PoolOptions::default())?;
/// let weights = pool.alloc_movable(AllocDesc::storage(64 << 20).read_only())?;
/// for _frame in 0..3 {
///     let encoder = pool.device().create_command_encoder(&Default::default());
///     let at = weights.place(); // pinned from here to the submit below
///     pool.queue().write_buffer(at.buffer(), at.offset(), &[0u8; 256]);
///     // ... bind at.binding() in this frame's bind groups, record the passes ...
///     pool.submit([encoder.finish()]); // from here the pool may move it again
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MovableBuffer(Arc<MovableBlock>);

impl MovableBuffer {
    /// Where the block is now, pinned there until the pool learns of a submit
    /// that began after this call: record every command that uses the place
    /// into that submit (through [`Pool::submit`](crate::Pool::submit), or
    /// your own `queue.submit` then [`Pool::submitted`](crate::Pool::submitted);
    /// with several threads, as [`Pool::submitted`](crate::Pool::submitted)
    /// says: a submit from *any* thread unpins every place read before it
    /// began, so read a place, record with it and submit on one thread, or
    /// keep other threads' submits out of that span). Under [`Reuse::Immediate`](crate::Reuse::Immediate) too, only
    /// those calls unpin: a pool never told of a submit moves nothing once
    /// every block was read. Takes the pool's lock, so not from a wgpu
    /// callback (`map_async`'s, `on_submitted_work_done`'s) that wgpu runs
    /// inside the pool's own work with its lock held (an allocation that
    /// makes a segment or moves blocks, `empty_cache`, a limit change): there
    /// it panics, saying so, rather than wait for its own thread. `on_oom`
    /// and device-lost observers may call it.
    pub fn place(&self) -> Place {
        let block = &self.0;
        let Some(inner) = block.pool.upgrade() else {
            // The pool is gone: nothing moves any more.
            return block.at().place(block.size);
        };
        let mut engine = inner.engine();
        let mut movables = inner.movables();
        let mut at = block.at();
        // Stamped with the drop epoch as it is now: only a submit that begins
        // after this read (and so may carry the passes recorded with it)
        // unpins it. A pinned block read again takes the later stamp.
        let epoch = inner.front.cache.epoch();
        if !at.pinned {
            // Live while the handle is: the engine knows the id.
            let _ = engine.set_relocatable(block.id, false);
            at.pinned = true;
            inner.movables_pinned.store(true, Ordering::Release);
        }
        movables.pinned.insert(block.id, epoch);
        at.place(block.size)
    }

    /// Size of the range (the request rounded up to 4 bytes).
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// The label asked for.
    pub fn label(&self) -> Option<&str> {
        self.0.label.as_deref()
    }

    /// The engine's id of the block (what `snapshot()` and the leak report show).
    pub fn id(&self) -> BlockId {
        self.0.id
    }

    /// Whether the block is pinned where it is (its place was read since the
    /// pool last learned of a submit).
    pub fn is_pinned(&self) -> bool {
        self.0.at().pinned
    }
}

impl std::fmt::Debug for MovableBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self.0.at();
        f.debug_struct("MovableBuffer")
            .field("segment", &at.segment)
            .field("offset", &at.offset)
            .field("size", &self.0.size)
            .field("pinned", &at.pinned)
            .field("label", &self.0.label)
            .finish()
    }
}

/// The block goes back through the engine (movable blocks skip the front
/// cache: a parked block is live to the engine, and moving it would copy
/// bytes nobody needs).
impl Drop for MovableBlock {
    fn drop(&mut self) {
        let Some(inner) = self.pool.upgrade() else {
            return;
        };
        let cache = inner.front.cache;
        let stamp = cache.stamp();
        inner.free_from_drop(DeferredFree::Movable { id: self.id, stamp });
    }
}

impl Inner {
    /// Takes a movable block whose last handle went out of the table; with
    /// the engine's lock held.
    pub(super) fn forget_movable(&self, id: BlockId) {
        let mut movables = self.movables();
        movables.blocks.remove(&id);
        movables.pinned.remove(&id);
    }
}

/// The pool's movable blocks, by id, and the pinned ones with the drop
/// epoch of their last place read. Locked only with the engine's lock held.
#[derive(Default)]
pub(super) struct Movables {
    blocks: HashMap<BlockId, SharedAt>,
    pinned: HashMap<BlockId, u64>,
}

impl Inner {
    /// Wraps a relocatable allocation in its handle, known to the pool so a
    /// move updates its place.
    pub(super) fn wrap_movable(
        self: &Arc<Self>,
        buffer: wgpu::Buffer,
        a: &crate::types::Allocation,
        size: u64,
        label: Option<Arc<str>>,
    ) -> MovableBuffer {
        let at = Arc::new(Mutex::new(At {
            buffer,
            segment: a.segment,
            offset: a.offset,
            pinned: false,
        }));
        self.movables().blocks.insert(a.id, Arc::clone(&at));
        MovableBuffer(Arc::new(MovableBlock {
            pool: Arc::downgrade(self),
            id: a.id,
            size,
            label,
            at,
        }))
    }

    /// Gives the handles of the blocks the engine moved their places now.
    /// Called after every allocation that may have moved some, before the
    /// engine's lock is released. A block may have moved twice in one
    /// allocation (the headroom empties a segment an earlier round filled,
    /// which is then gone): its place is read from the engine, not from the
    /// moves.
    pub(super) fn apply_moves(&self, engine: &mut Engine<WgpuBackend>) {
        let moves = engine.take_moves();
        if moves.is_empty() {
            return;
        }
        let movables = self.movables();
        for m in moves {
            let Some(at) = movables.blocks.get(&m.id) else {
                // Only movable blocks are relocatable, each in the table while live.
                tracing::error!("vrampool: block {} moved with no handle to tell", m.id);
                continue;
            };
            let place = engine.locate(m.id).ok().and_then(|(segment, offset)| {
                Some((engine.segment_payload(segment)?.clone(), segment, offset))
            });
            let Some((buffer, segment, offset)) = place else {
                tracing::error!("vrampool: moved block {} is not live", m.id);
                continue;
            };
            let mut at = lock(at);
            debug_assert!(!at.pinned, "a pinned block moved");
            (at.buffer, at.segment, at.offset) = (buffer, segment, offset);
        }
    }

    /// The pool learned of a submit: every block whose place was last read
    /// before a submit that is done began may move again.
    pub(super) fn unpin_movables(&self, engine: &mut Engine<WgpuBackend>) {
        let mark = self.front.cache.reusable_mark();
        let mut guard = self.movables();
        let movables = &mut *guard;
        movables.pinned.retain(|&id, &mut epoch| {
            if epoch > mark {
                return true;
            }
            if let Some(at) = movables.blocks.get(&id) {
                lock(at).pinned = false;
                let _ = engine.set_relocatable(id, true);
            }
            false
        });
        if movables.pinned.is_empty() {
            self.movables_pinned.store(false, Ordering::Release);
        }
    }

    /// Whether some movable block may be pinned: one atomic load, so a submit
    /// takes no lock for movable blocks unless some were read (one pinned at
    /// the same moment as a submit may stay pinned until the next: safe).
    pub(super) fn any_pinned(&self) -> bool {
        self.movables_pinned.load(Ordering::Acquire)
    }
}
