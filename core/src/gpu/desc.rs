//! What a caller asks for ([`AllocDesc`]) and the engine request it becomes:
//! the size rounded for wgpu, and the pool a block goes to — which decides
//! which blocks may share a `wgpu::Buffer`.
//!
//! WebGPU validates usage per buffer, not per range: within one compute
//! dispatch or render pass, a buffer may be used read-only in many ways
//! (uniform, vertex, index, indirect, `var<storage, read>`) or as
//! `var<storage, read_write>` (disjoint ranges), but not both. So blocks
//! bound read-only and blocks bound read-write never share a segment, and a
//! storage block that may be bound either way gets a buffer of its own.

use std::sync::Arc;

use wgpu::BufferUsages as U;

use crate::error::{Error, Result};
use crate::types::Request;

/// Usage every read-only or dedicated segment is created with when
/// [`PoolOptions::widen_usage`](crate::PoolOptions::widen_usage) is on: one
/// pool serves uniform, vertex, index, indirect, read-only storage and copy
/// requests alike.
pub const GPU_USAGE: U = U::STORAGE
    .union(U::UNIFORM)
    .union(U::VERTEX)
    .union(U::INDEX)
    .union(U::INDIRECT)
    .union(U::COPY_SRC)
    .union(U::COPY_DST);

/// Usage of the segments that hold [`Access::ReadWrite`] blocks (with
/// `widen_usage`): storage and copies only, so wgpu itself refuses to bind
/// such a block as a uniform, vertex, index or indirect buffer.
pub const READ_WRITE_USAGE: U = U::STORAGE.union(U::COPY_SRC).union(U::COPY_DST);

/// Whether buffers of `usage` are mapped: such a block has a segment of its
/// own, goes back only unmapped, and its segment takes no copies.
pub(super) fn mappable(usage: U) -> bool {
    usage.intersects(U::MAP_READ | U::MAP_WRITE)
}

/// The uses that are read-only in every pass.
const READ_ONLY_USES: U = U::UNIFORM
    .union(U::VERTEX)
    .union(U::INDEX)
    .union(U::INDIRECT);

/// The engine group of blocks bound only `var<storage, read_write>` (the
/// engine's default group: a trace replay's blocks are tensors).
pub(crate) const GROUP_READ_WRITE: u8 = 0;
/// The engine group of blocks bound only read-only.
pub(crate) const GROUP_READ_ONLY: u8 = 1;

/// How passes bind a block: the one word that lets the pool pack blocks into
/// shared buffers without making wgpu see one buffer used two conflicting
/// ways in a pass. The default, [`Access::Any`], cannot fail a pass's
/// validation. (A copy between two blocks packed into one buffer fails
/// whatever their access, since WebGPU refuses a copy within one buffer:
/// [`Pool::copy_block_to_block`](crate::Pool::copy_block_to_block) makes it.)
///
/// ```
/// use vrampool::{Access, AllocDesc, Sharing};
/// // Bound `var<uniform>`: read-only in every pass, packed with other read-only blocks.
/// assert_eq!(AllocDesc::uniform(64).sharing()?, Sharing::ReadOnly);
/// // Storage with no declaration: may be bound either way, so a buffer of its own.
/// assert_eq!(AllocDesc::storage(4096).sharing()?, Sharing::Own);
/// // Declared: packed with blocks bound the same way.
/// assert_eq!(AllocDesc::storage(4096).read_only().sharing()?, Sharing::ReadOnly);
/// assert_eq!(AllocDesc::storage(4096).read_write().sharing()?, Sharing::ReadWrite);
/// # Ok::<(), vrampool::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Any binding: read-only in one pass, `read_write` in another. A block
    /// with STORAGE usage (or only copy usages) gets a buffer of its own,
    /// reused whole and never split, so no pass can see it conflict with
    /// another block. Blocks without STORAGE (uniform, vertex, index,
    /// indirect) are read-only in every pass and are packed as
    /// [`Access::ReadOnly`].
    #[default]
    Any,
    /// Only ever read by passes: `var<uniform>`, `var<storage, read>`,
    /// vertex, index or indirect input; written by `queue.write_buffer` and
    /// copies. Packed with other read-only blocks (one pass may use a buffer
    /// read-only in many ways at once).
    ReadOnly,
    /// Only ever bound `var<storage, read_write>` (and copied). Packed with
    /// other read-write blocks: WebGPU lets disjoint read-write ranges of one
    /// buffer share a pass. Not for uniform, vertex, index or indirect usage.
    ReadWrite,
}

/// Which blocks a block may share its `wgpu::Buffer` with: the outcome of
/// its usage and [`Access`] (see [`AllocDesc::sharing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// None: a buffer of its own (mappable staging buffers, and storage
    /// blocks with [`Access::Any`]).
    Own,
    /// Blocks bound only read-only.
    ReadOnly,
    /// Blocks bound only `var<storage, read_write>`.
    ReadWrite,
}

impl Sharing {
    /// The sharing a request made by [`AllocDesc::request`] stands for.
    pub(super) fn of(req: &Request) -> Sharing {
        if req.exclusive {
            Sharing::Own
        } else if req.group == GROUP_READ_ONLY {
            Sharing::ReadOnly
        } else {
            Sharing::ReadWrite
        }
    }
}

/// What to allocate.
///
/// ```
/// use vrampool::AllocDesc;
/// let params = AllocDesc::uniform(48).label("params");
/// let input = AllocDesc::storage(1 << 20).read_only().label("x");
/// let output = AllocDesc::storage(1 << 20).label("y").zeroed();
/// let staging = AllocDesc::readback(1 << 20);
/// # let _ = (params, input, output, staging);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AllocDesc<'a> {
    /// Bytes (rounded up to 4 for the handle's range).
    pub size: u64,
    /// How the range will be used.
    pub usage: wgpu::BufferUsages,
    /// How passes will bind it (see [`Access`]).
    pub access: Access,
    /// Shown in snapshots and the leak report.
    pub label: Option<&'a str>,
    /// Clear the range to zeros if its bytes were used before (WebGPU's
    /// guarantee for new buffers, kept for reused blocks).
    pub zeroed: bool,
}

impl<'a> AllocDesc<'a> {
    /// `size` bytes of `usage`, with [`Access::Any`].
    pub fn new(size: u64, usage: wgpu::BufferUsages) -> Self {
        AllocDesc {
            size,
            usage,
            access: Access::Any,
            label: None,
            zeroed: false,
        }
    }
    /// `size` bytes of storage (plus copy in and out).
    pub fn storage(size: u64) -> Self {
        Self::new(size, U::STORAGE | U::COPY_DST | U::COPY_SRC)
    }
    /// `size` bytes bound `var<uniform>` (written with `queue.write_buffer`).
    pub fn uniform(size: u64) -> Self {
        Self::new(size, U::UNIFORM | U::COPY_DST)
    }
    /// `size` bytes of vertex data.
    pub fn vertex(size: u64) -> Self {
        Self::new(size, U::VERTEX | U::COPY_DST)
    }
    /// `size` bytes of index data.
    pub fn index(size: u64) -> Self {
        Self::new(size, U::INDEX | U::COPY_DST)
    }
    /// `size` bytes of indirect draw or dispatch arguments.
    pub fn indirect(size: u64) -> Self {
        Self::new(size, U::INDIRECT | U::COPY_DST)
    }
    /// A staging buffer to read results back (`MAP_READ | COPY_DST`).
    ///
    /// Dropped while mapped, the pool unmaps it and reuses it. A view (from
    /// `get_mapped_range`) may outlive it, as in plain wgpu: wgpu then
    /// refuses the unmap with a panic the pool catches (the panic hook still
    /// prints it; with `panic = "abort"` it aborts), and the buffer serves
    /// nobody again, freed once the view is gone. Dropped with a map
    /// pending, the map is aborted and its callback runs at the drop. A map
    /// an encoder will start at its submit (`map_buffer_on_submit`) is not
    /// pending yet: keep the handle until that map's callback has run, or
    /// the buffer is mapped when the block serves its next owner, whose
    /// copies into it wgpu then refuses.
    pub fn readback(size: u64) -> Self {
        Self::new(size, U::MAP_READ | U::COPY_DST)
    }
    /// A staging buffer to upload from (`MAP_WRITE | COPY_SRC`).
    pub fn upload(size: u64) -> Self {
        Self::new(size, U::MAP_WRITE | U::COPY_SRC)
    }
    /// Sets the label.
    pub fn label(mut self, label: &'a str) -> Self {
        self.label = Some(label);
        self
    }
    /// Asks for zeroed memory, as a new wgpu buffer is: a reused block is
    /// cleared on the queue (`clear_buffer`) before it is handed out. An
    /// upload buffer (`MAP_WRITE | COPY_SRC`) cannot be cleared that way —
    /// WebGPU lets `MAP_WRITE` combine only with `COPY_SRC` — so a zeroed one
    /// is a new buffer, never a used one; the used one it could not take goes
    /// back ([`Request::fresh`](crate::Request::fresh)).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let upload = pool.alloc(AllocDesc::upload(4096))?;
    /// let used = upload.buffer().clone();
    /// drop(upload);
    /// pool.submitted();
    /// let zeroed = pool.alloc(AllocDesc::upload(4096).zeroed())?;
    /// assert_ne!(zeroed.buffer(), &used); // a new buffer: wgpu zeroed it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn zeroed(mut self) -> Self {
        self.zeroed = true;
        self
    }
    /// Sets the usage.
    pub fn usage(mut self, usage: wgpu::BufferUsages) -> Self {
        self.usage = usage;
        self
    }
    /// Sets how passes bind the block.
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }
    /// Declares the block read-only in every pass ([`Access::ReadOnly`]).
    pub fn read_only(self) -> Self {
        self.access(Access::ReadOnly)
    }
    /// Declares the block bound only `var<storage, read_write>` ([`Access::ReadWrite`]).
    pub fn read_write(self) -> Self {
        self.access(Access::ReadWrite)
    }

    /// Which blocks this one may share a buffer with, or why its usage and
    /// access contradict each other.
    pub fn sharing(&self) -> Result<Sharing> {
        let usage = self.usage;
        if mappable(usage) {
            return Ok(Sharing::Own);
        }
        match self.access {
            Access::Any if usage.contains(U::STORAGE) || !usage.intersects(READ_ONLY_USES) => {
                Ok(Sharing::Own)
            }
            Access::Any | Access::ReadOnly => Ok(Sharing::ReadOnly),
            Access::ReadWrite => {
                if !usage.contains(U::STORAGE) {
                    return Err(Error::InvalidUsage {
                        usage: usage.bits(),
                        why: format!(
                            "{usage:?} with Access::ReadWrite: read_write access is for storage blocks; add STORAGE, or use Access::Any"
                        ),
                    });
                }
                let read_only = usage & READ_ONLY_USES;
                if !read_only.is_empty() {
                    return Err(Error::InvalidUsage {
                        usage: usage.bits(),
                        why: format!(
                            "{usage:?} with Access::ReadWrite: {read_only:?} is a read-only use, and a pass using this block that way beside a \
                             read_write block of the same buffer would fail WebGPU's validation. Use Access::Any (a buffer of its own) for a block \
                             used both ways, or drop {read_only:?}"
                        ),
                    });
                }
                Ok(Sharing::ReadWrite)
            }
        }
    }

    /// The engine request a [`Pool`](crate::Pool) makes for this description:
    /// the size rounded to 4 bytes, and the pool it goes to: mappable staging
    /// buffers and [`Sharing::Own`] blocks get exclusive segments; read-only
    /// and read-write blocks each share segments of their own group (every
    /// usage within [`GPU_USAGE`], resp. [`READ_WRITE_USAGE`], shares one pool
    /// when `widen_usage`, as
    /// [`PoolOptions::widen_usage`](crate::PoolOptions::widen_usage) does). A
    /// dry run on the simulated device that calls this makes exactly the
    /// requests the pool will. `mappable_primary`: the device has
    /// `Features::MAPPABLE_PRIMARY_BUFFERS`.
    ///
    /// ```
    /// use vrampool::{AllocDesc, READ_WRITE_USAGE};
    /// let r = AllocDesc::storage(1001).read_write().request(true, false)?;
    /// assert_eq!((r.size, r.usage, r.exclusive), (1004, READ_WRITE_USAGE.bits(), false));
    /// // A storage block that may be bound any way: a segment of its own.
    /// assert!(AllocDesc::storage(1001).request(true, false)?.exclusive);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn request(&self, widen_usage: bool, mappable_primary: bool) -> Result<Request> {
        let usage = self.usage;
        let map = mappable(usage);
        if usage.is_empty() {
            return Err(Error::InvalidUsage {
                usage: 0,
                why: "no usage given; name at least one, e.g. STORAGE".into(),
            });
        }
        if map && !mappable_primary {
            let allowed = if usage.contains(U::MAP_READ | U::MAP_WRITE) {
                U::empty()
            } else if usage.contains(U::MAP_READ) {
                U::MAP_READ | U::COPY_DST
            } else {
                U::MAP_WRITE | U::COPY_SRC
            };
            if allowed.is_empty() || !allowed.contains(usage) {
                return Err(Error::InvalidUsage {
                    usage: usage.bits(),
                    why: format!(
                        "{usage:?}: MAP_READ combines only with COPY_DST and MAP_WRITE only with COPY_SRC \
                         unless the device has Features::MAPPABLE_PRIMARY_BUFFERS"
                    ),
                });
            }
        }
        let widened = |all: U| {
            if widen_usage && all.contains(usage) {
                all
            } else {
                usage | U::COPY_DST
            }
        };
        let (pool_usage, exclusive, group) = match self.sharing()? {
            Sharing::Own if map => (usage, true, 0),
            Sharing::Own => (widened(GPU_USAGE), true, 0),
            Sharing::ReadOnly => (widened(GPU_USAGE), false, GROUP_READ_ONLY),
            Sharing::ReadWrite => (widened(READ_WRITE_USAGE), false, GROUP_READ_WRITE),
        };
        // Round to 4 bytes; a size that cannot be rounded is too large for any
        // device, which the engine reports (it compares with max_buffer_size).
        let size = self
            .size
            .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .unwrap_or(self.size);
        Ok(Request {
            size,
            usage: pool_usage.bits(),
            exclusive,
            group,
            label: self.label.map(Arc::from),
            relocatable: false,
            // A reused block is cleared with clear_buffer, which needs
            // COPY_DST; a buffer WebGPU lets have none (MAP_WRITE | COPY_SRC)
            // is zeroed by being new.
            fresh: self.zeroed && !pool_usage.contains(U::COPY_DST),
        })
    }
}
