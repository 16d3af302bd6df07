//! The vocabulary the engine, the wgpu binding and the reports share: what a
//! caller asks for ([`Request`]), what it gets back ([`Allocation`],
//! [`BlockId`]), and how segments are classed ([`SegmentClass`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What to allocate.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Bytes wanted (rounded up to [`Config::alignment`](crate::Config::alignment)).
    pub size: u64,
    /// Usage bits; blocks only come from segments of the same usage.
    pub usage: u32,
    /// Each block gets a whole segment of its own and is never split: for
    /// mappable staging buffers, whose map state is per buffer, and for blocks
    /// that may be bound in any way (WebGPU validates usage per buffer).
    pub exclusive: bool,
    /// Blocks share segments only with blocks of the same usage, exclusivity
    /// and group. The wgpu binding keeps blocks bound only read-only and
    /// blocks bound only read-write in different groups, since one pass may
    /// not use one buffer both ways; 0 for everything else.
    pub group: u8,
    /// A label shown in snapshots and leak reports.
    pub label: Option<Arc<str>>,
    /// The engine may move this block's bytes into another segment while it
    /// is live, to serve a request from memory it already holds instead of a
    /// new segment ([`Config::relocate`](crate::Config::relocate); only where
    /// the backend copies, [`Backend::move_bytes`](crate::Backend::move_bytes),
    /// and never under a budget). The block keeps its [`BlockId`];
    /// [`Engine::take_moves`](crate::Engine::take_moves) and
    /// [`Engine::locate`](crate::Engine::locate) say where it went. A caller
    /// whose recorded, unsubmitted commands use the block's place pins it
    /// with [`Engine::set_relocatable`](crate::Engine::set_relocatable) until
    /// they are submitted. `false` by default: the wgpu binding's blocks move
    /// only when allocated with `Pool::alloc_movable`.
    pub relocatable: bool,
    /// The block must hold bytes no owner held before: a new segment serves
    /// it (wgpu zeroes a new buffer), or a cached block never handed out; a
    /// used cached block that would have served it is released with its
    /// segment if nothing else lives there, so repeated fresh requests hold
    /// one segment, not one each. The wgpu binding
    /// asks this for a zeroed block it cannot clear on the GPU: an upload
    /// buffer (`MAP_WRITE`, which WebGPU lets combine only with `COPY_SRC`,
    /// so no `clear_buffer` or copy can reach it). `false` by default.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// // A staging buffer of its own, as the wgpu binding's uploads are.
    /// let upload = |fresh| Request { exclusive: true, fresh, ..Request::new(4096, 1) };
    /// let used = e.allocate(upload(false))?;
    /// e.free(used.id)?;
    /// let fresh = e.allocate(upload(true))?;
    /// assert!(fresh.fresh); // bytes no owner held
    /// let s = e.stats();
    /// assert_eq!((s.counters.device_allocs, s.counters.device_frees), (2, 1));
    /// assert_eq!(s.total.reserved_bytes.current, 4096); // the used one went back
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fresh: bool,
}

impl Request {
    /// A request of `size` bytes with usage `usage`.
    pub fn new(size: u64, usage: u32) -> Self {
        Request {
            size,
            usage,
            ..Default::default()
        }
    }
}

/// Handle to a live block; freeing it twice, or in another engine, is detected.
///
/// Eight bytes, copied on the hot path: a slot's generation counts its reuses
/// from a start that differs per engine, so another engine's id matches a
/// live block here only if two 32-bit counters line up exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// Identifies a segment while it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SegmentId(pub u32);

/// Where a new block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Handle to give back to [`Engine::free`](crate::Engine::free).
    pub id: BlockId,
    /// The segment holding it.
    pub segment: SegmentId,
    /// Byte offset in the segment (a multiple of the alignment).
    pub offset: u64,
    /// Block size (rounded request).
    pub size: u64,
    /// `false` when these bytes were handed out before and may hold old data.
    pub fresh: bool,
}

/// A live block the engine moved to make room ([`Request::relocatable`]):
/// its bytes were copied from `from` to `to` through the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The block; its id is unchanged.
    pub id: BlockId,
    /// Its segment and offset before.
    pub from: (SegmentId, u64),
    /// Its segment and offset now.
    pub to: (SegmentId, u64),
    /// Bytes copied (the block's size).
    pub size: u64,
}

/// Size classes of segments. A request uses free blocks of its own class, of
/// the preallocation, and (without a hard limit, small and medium requests)
/// of large segments; see [`Placement`](crate::Placement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SegmentClass {
    /// Packed small requests.
    Small,
    /// Packed medium requests.
    Medium,
    /// One large request (split when reused for a smaller one).
    Large,
    /// One exclusive block, never split.
    Exclusive,
    /// The pinned preallocation ([`Growth::Preallocate`](crate::Growth::Preallocate)):
    /// serves any non-exclusive request of its pool first, split freely.
    Preallocated,
    /// A segment of a static plan the engine follows
    /// ([`Engine::follow`](crate::Engine::follow)): pinned, and served only
    /// by requests the plan places in it, at the plan's offsets.
    Planned,
}
