//! Checking, before wgpu does, that the pool blocks one compute dispatch,
//! render pass or copy uses can be used together: WebGPU validates usage per
//! buffer, and blocks may be ranges of one buffer. The pool's placement
//! ([`Sharing`]) keeps every layout that follows its [`Access`](crate::Access)
//! declarations valid; this names the blocks, the buffer and the fix when a
//! pass breaks a declaration, instead of wgpu's panic about a segment.

use crate::error::{Error, Result, UsageConflict};

use super::desc::{AllocDesc, Sharing};
use super::handle::{BufferBlock, PoolBuffer};
use super::pool::Pool;

/// How one pass or copy uses a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingUse {
    /// `var<uniform>`.
    Uniform,
    /// `var<storage, read>`.
    StorageRead,
    /// `var<storage, read_write>`.
    StorageReadWrite,
    /// A vertex buffer.
    Vertex,
    /// An index buffer.
    Index,
    /// Indirect draw or dispatch arguments.
    Indirect,
    /// The source of a copy.
    CopySrc,
    /// The destination of a copy.
    CopyDst,
}

impl BindingUse {
    /// The buffer usage wgpu requires of a buffer used so.
    fn needs(self) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        match self {
            BindingUse::Uniform => U::UNIFORM,
            BindingUse::StorageRead | BindingUse::StorageReadWrite => U::STORAGE,
            BindingUse::Vertex => U::VERTEX,
            BindingUse::Index => U::INDEX,
            BindingUse::Indirect => U::INDIRECT,
            BindingUse::CopySrc => U::COPY_SRC,
            BindingUse::CopyDst => U::COPY_DST,
        }
    }

    /// Whether the use writes (wgpu's exclusive uses).
    fn writes(self) -> bool {
        matches!(self, BindingUse::StorageReadWrite | BindingUse::CopyDst)
    }

    fn is_copy(self) -> bool {
        matches!(self, BindingUse::CopySrc | BindingUse::CopyDst)
    }

    fn describe(self) -> &'static str {
        match self {
            BindingUse::Uniform => "as var<uniform>",
            BindingUse::StorageRead => "as var<storage, read>",
            BindingUse::StorageReadWrite => "as var<storage, read_write>",
            BindingUse::Vertex => "as a vertex buffer",
            BindingUse::Index => "as an index buffer",
            BindingUse::Indirect => "as indirect arguments",
            BindingUse::CopySrc => "as a copy source",
            BindingUse::CopyDst => "as a copy destination",
        }
    }

    /// The binding type of a bind group layout entry for this use, if it is one.
    fn binding_type(self) -> Option<wgpu::BufferBindingType> {
        match self {
            BindingUse::Uniform => Some(wgpu::BufferBindingType::Uniform),
            BindingUse::StorageRead => Some(wgpu::BufferBindingType::Storage { read_only: true }),
            BindingUse::StorageReadWrite => {
                Some(wgpu::BufferBindingType::Storage { read_only: false })
            }
            _ => None,
        }
    }
}

/// A block and how one pass or copy uses it.
#[derive(Clone, Copy)]
pub struct BlockUse<'a> {
    /// The block.
    pub block: &'a BufferBlock,
    /// How it is used.
    pub used: BindingUse,
}

impl<'a> BlockUse<'a> {
    /// `block`, used as `used`.
    pub fn new(block: &'a BufferBlock, used: BindingUse) -> Self {
        BlockUse { block, used }
    }

    /// Refuses a use the block's buffer was not made for, saying what to
    /// allocate instead.
    pub(super) fn check_buffer(&self) -> Result<()> {
        match lacks(self.block, self.used) {
            Some(why) => Err(Error::InvalidArgument(format!("{} {why}", self.name()))),
            None => Ok(()),
        }
    }

    pub(super) fn name(&self) -> String {
        let b = self.block;
        let who = match b.label() {
            Some(l) => format!("'{l}'"),
            None => format!("the unlabelled block at offset {}", b.offset()),
        };
        format!("{who} (used {})", self.used.describe())
    }
}

impl Pool {
    /// Checks that the pool blocks one compute dispatch, render pass or copy
    /// uses can be used together, before wgpu validates them: within one pass
    /// a buffer may be used read-only in many ways, or as
    /// `var<storage, read_write>` (disjoint ranges), but not both; a copy may
    /// not have one buffer as source and destination. Blocks that follow
    /// their [`Access`](crate::Access) never conflict; a pass that breaks a
    /// declaration gets an [`Error::UsageConflict`] naming both blocks, their
    /// buffer and the fix. A block whose buffer lacks a use (a `.read_write()`
    /// block as a uniform, a readback block as a copy's source) is an
    /// [`Error::InvalidArgument`] naming it. Pure: nothing changes.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, BindingUse, BlockUse, Error, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let params = pool.alloc(AllocDesc::uniform(64).label("params"))?;
    /// let input = pool.alloc(AllocDesc::storage(4096).read_only().label("input"))?;
    /// let output = pool.alloc(AllocDesc::storage(4096).read_write().label("output"))?;
    /// pool.check_usage_scope(&[
    ///     BlockUse::new(&params, BindingUse::Uniform),
    ///     BlockUse::new(&input, BindingUse::StorageRead),
    ///     BlockUse::new(&output, BindingUse::StorageReadWrite),
    /// ])?;
    /// // Breaking a declaration: `input` written beside `params`, read in the
    /// // same pass, would be a validation error; here it is one that names them.
    /// let wrong = pool.check_usage_scope(&[
    ///     BlockUse::new(&params, BindingUse::Uniform),
    ///     BlockUse::new(&input, BindingUse::StorageReadWrite),
    /// ]);
    /// match wrong {
    ///     Err(Error::UsageConflict(c)) => assert!(c.to_string().contains("input")),
    ///     other => panic!("expected a usage conflict, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_usage_scope(&self, uses: &[BlockUse<'_>]) -> Result<()> {
        for u in uses {
            u.check_buffer()?;
        }
        self.check_conflicts(uses)
    }

    /// The pairs of `uses` WebGPU refuses in one usage scope (the second
    /// half of [`Pool::check_usage_scope`]; `create_bind_group` checks the
    /// first half itself, naming entries).
    fn check_conflicts(&self, uses: &[BlockUse<'_>]) -> Result<()> {
        for (i, a) in uses.iter().enumerate() {
            for b in &uses[i + 1..] {
                if a.block.buffer() != b.block.buffer() {
                    continue;
                }
                let same_block =
                    std::ptr::eq(a.block, b.block) || a.block.offset() == b.block.offset();
                let conflict = if a.used.is_copy() && b.used.is_copy() {
                    a.used != b.used
                } else {
                    (a.used.writes() || b.used.writes()) && (a.used != b.used || same_block)
                };
                if conflict {
                    return Err(self.conflict(a, b, same_block));
                }
            }
        }
        Ok(())
    }

    fn conflict(&self, a: &BlockUse<'_>, b: &BlockUse<'_>, same_block: bool) -> Error {
        // Name the writer first.
        let (w, r) = if a.used.writes() { (a, b) } else { (b, a) };
        let copy = a.used.is_copy() && b.used.is_copy();
        let how = if copy {
            "as both the source and the destination".to_string()
        } else if same_block && a.used == b.used {
            "read_write twice (overlapping writable bindings)".to_string()
        } else if same_block {
            "both ways at once".to_string()
        } else {
            "read-write and read-only at once".to_string()
        };
        let fix = if copy {
            "Copy with Pool::copy_block_to_block, which goes through a block of its own, or \
             allocate one of the two with Access::Any (a buffer of its own)"
                .to_string()
        } else if same_block && a.used == b.used {
            "Bind it once: WebGPU refuses two writable bindings of one range in a pass".to_string()
        } else if same_block {
            "A buffer cannot be read and written by one pass; split the pass in two, or copy \
             the block first"
                .to_string()
        } else if w.block.sharing() == Sharing::ReadOnly {
            format!(
                "It was allocated .read_only() but the pass writes it: allocate it with \
                 .read_write() if passes only ever bind it read_write, or with Access::Any \
                 (a buffer of its own) if they bind it both ways{}",
                if r.block.sharing() == Sharing::ReadOnly {
                    ""
                } else {
                    "; or bind the other one read_write"
                }
            )
        } else if r.block.sharing() == Sharing::ReadWrite {
            "The second was allocated .read_write() but the pass only reads it: bind it \
             var<storage, read_write>, or allocate it with .read_only() (or Access::Any if \
             passes bind it both ways)"
                .to_string()
        } else {
            "Allocate blocks bound only read-only with .read_only(), blocks bound only \
             read_write with .read_write(), and leave Access::Any on blocks bound both ways \
             (each gets a buffer of its own)"
                .to_string()
        };
        let segment = self.segment_name(w.block);
        Error::UsageConflict(Box::new(UsageConflict {
            first: w.name(),
            second: r.name(),
            segment,
            scope: if copy { "copy" } else { "pass" },
            how,
            fix,
        }))
    }

    /// Creates a bind group whose entries are pool blocks, after
    /// [`Pool::check_usage_scope`] over them: a conflict among its own
    /// entries is an error naming the blocks, not wgpu's panic. Each entry is
    /// `(binding, block use)`, the use being what the layout declares
    /// (uniform, storage read or storage read-write). Blocks from other bind
    /// groups of the same pass are checked with `check_usage_scope`. An
    /// entry whose block's buffer lacks the use (UNIFORM for a uniform,
    /// STORAGE for storage; a `.read_write()` block's segment has no
    /// UNIFORM), or larger than the device binds, is an
    /// [`Error::InvalidArgument`] naming it, where wgpu would raise a
    /// validation error. The bind group does not keep its blocks: keep their
    /// handles while it is used (see [`BufferBlock::buffer`]).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, BindingUse as Use, BlockUse, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
    ///     binding,
    ///     visibility: wgpu::ShaderStages::COMPUTE,
    ///     ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
    ///     count: None,
    /// };
    /// let layout = pool.device().create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
    ///     label: Some("step"),
    ///     entries: &[
    ///         entry(0, wgpu::BufferBindingType::Uniform),
    ///         entry(1, wgpu::BufferBindingType::Storage { read_only: false }),
    ///     ],
    /// });
    /// let params = pool.alloc(AllocDesc::uniform(64))?;
    /// let data = pool.alloc(AllocDesc::storage(4096).read_write())?;
    /// let group = pool.create_bind_group(
    ///     Some("step"),
    ///     &layout,
    ///     &[(0, BlockUse::new(&params, Use::Uniform)), (1, BlockUse::new(&data, Use::StorageReadWrite))],
    /// )?;
    /// # let _ = group;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_bind_group(
        &self,
        label: Option<&str>,
        layout: &wgpu::BindGroupLayout,
        entries: &[(u32, BlockUse<'_>)],
    ) -> Result<wgpu::BindGroup> {
        if let Some((n, u)) = entries
            .iter()
            .find(|(_, u)| u.used.binding_type().is_none())
        {
            return Err(Error::InvalidArgument(format!(
                "bind group entry {n}: {} is not a binding; bind groups hold uniform and storage buffers",
                u.name()
            )));
        }
        for (n, u) in entries {
            if let Some(why) = lacks(u.block, u.used) {
                return Err(Error::InvalidArgument(format!(
                    "bind group entry {n}: {} {why}",
                    u.name()
                )));
            }
        }
        let limits = self.device().limits();
        for (n, u) in entries {
            let (most, name) = match u.used {
                BindingUse::Uniform => (
                    limits.max_uniform_buffer_binding_size,
                    "max_uniform_buffer_binding_size",
                ),
                _ => (
                    limits.max_storage_buffer_binding_size,
                    "max_storage_buffer_binding_size",
                ),
            };
            if u.block.size() > most {
                return Err(Error::InvalidArgument(format!(
                    "bind group entry {n}: {} is {} bytes, and the device binds at most {most} \
                     ({name}): bind a range of it, or split it",
                    u.name(),
                    u.block.size()
                )));
            }
        }
        let uses: Vec<BlockUse<'_>> = entries.iter().map(|(_, u)| *u).collect();
        // Each entry's usage was checked above, by its number.
        self.check_conflicts(&uses)?;
        let entries: Vec<wgpu::BindGroupEntry<'_>> = entries
            .iter()
            .map(|(n, u)| wgpu::BindGroupEntry {
                binding: *n,
                resource: u.block.binding(),
            })
            .collect();
        Ok(self.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label,
            layout,
            entries: &entries,
        }))
    }

    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset` (offsets within the blocks) into `encoder`, as
    /// `copy_buffer_to_buffer` would; also between two blocks of one shared
    /// buffer, which WebGPU refuses as one copy ("Source and destination
    /// cannot be the same buffer"): those go through a block of its own,
    /// returned. It is a temporary of `encoder` like any other: drop it by
    /// the rule your encoders' blocks follow (with [`Reuse::AfterSubmit`],
    /// the default, at once if `encoder` goes in the next submit the pool
    /// learns of; with [`Reuse::Immediate`], once `encoder` is submitted).
    /// Overlapping ranges of one block copy as `memmove` does. Offsets and
    /// size are multiples of 4 (`wgpu::COPY_BUFFER_ALIGNMENT`) inside the
    /// blocks, or an error says which is not; so does a source whose buffer
    /// lacks COPY_SRC (a readback block) or a destination that lacks COPY_DST
    /// (an upload block). In the browser, where nothing may block,
    /// [`Pool::copy_block_to_block_async`].
    ///
    /// [`Reuse::AfterSubmit`]: crate::Reuse::AfterSubmit
    /// [`Reuse::Immediate`]: crate::Reuse::Immediate
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// // Two tensors packed into one buffer: a plain copy between them is
    /// // a validation error.
    /// let a = pool.alloc(AllocDesc::storage(1024).read_write())?;
    /// let b = pool.alloc(AllocDesc::storage(1024).read_write())?;
    /// assert_eq!(a.buffer(), b.buffer());
    /// let mut encoder = pool.device().create_command_encoder(&Default::default());
    /// let through = pool.copy_block_to_block(&mut encoder, &a, 0, &b, 0, 1024)?;
    /// assert!(through.is_some());
    /// pool.submit([encoder.finish()]);
    /// drop(through);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    #[must_use = "the block a copy within one buffer goes through is the encoder's: keep it until the encoder is submitted"]
    pub fn copy_block_to_block(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &BufferBlock,
        src_offset: u64,
        dst: &BufferBlock,
        dst_offset: u64,
        size: u64,
    ) -> Result<Option<PoolBuffer>> {
        let c = Ranges::new(src, src_offset, dst, dst_offset, size)?;
        let bounce = match c.bounce() {
            Some(desc) => Some(self.alloc(desc)?),
            None => None,
        };
        Ok(c.record(encoder, bounce))
    }

    /// [`Pool::copy_block_to_block`], its block of its own allocated with
    /// [`Pool::alloc_async`]: for the browser, or an async runtime.
    #[must_use = "the block a copy within one buffer goes through is the encoder's: keep it until the encoder is submitted"]
    pub async fn copy_block_to_block_async(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &BufferBlock,
        src_offset: u64,
        dst: &BufferBlock,
        dst_offset: u64,
        size: u64,
    ) -> Result<Option<PoolBuffer>> {
        let c = Ranges::new(src, src_offset, dst, dst_offset, size)?;
        let bounce = match c.bounce() {
            Some(desc) => Some(self.alloc_async(desc).await?),
            None => None,
        };
        Ok(c.record(encoder, bounce))
    }
}

/// Why `block` cannot be `used`, if it cannot: its buffer lacks the usage,
/// and wgpu would refuse the bind group, pass or copy with a validation
/// error (natively, a panic). Segments hold the usage their pool was made
/// for: the request's, or with `PoolOptions::widen_usage` the widest its
/// sharing allows; the advice says what to allocate instead.
fn lacks(block: &BufferBlock, used: BindingUse) -> Option<String> {
    use wgpu::BufferUsages as U;
    let (has, needs) = (block.buffer().usage(), used.needs());
    if has.contains(needs) {
        return None;
    }
    let names = |u: U| {
        u.iter_names()
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let fix = if has.intersects(U::MAP_READ | U::MAP_WRITE) {
        "a staging block is only a copy's destination (readback) or source (upload): copy \
         its bytes through a block allocated for this use"
            .to_string()
    } else if block.sharing() == Sharing::ReadWrite {
        "a .read_write() block's segment holds storage only: allocate a block for this use \
         (e.g. AllocDesc::uniform), or this one with .read_only() or Access::Any"
            .to_string()
    } else {
        format!(
            "allocate it with a usage that includes {} (its AllocDesc)",
            names(needs)
        )
    };
    Some(format!(
        "is in a buffer of usage {}, without {}: {fix}",
        names(has),
        names(needs)
    ))
}

/// The buffers and offsets of a copy between two blocks, checked.
struct Ranges<'a> {
    src: &'a wgpu::Buffer,
    from: u64,
    dst: &'a wgpu::Buffer,
    to: u64,
    size: u64,
}

impl<'a> Ranges<'a> {
    fn new(
        src: &'a BufferBlock,
        src_offset: u64,
        dst: &'a BufferBlock,
        dst_offset: u64,
        size: u64,
    ) -> Result<Ranges<'a>> {
        for (what, block, offset, used) in [
            ("source", src, src_offset, BindingUse::CopySrc),
            ("destination", dst, dst_offset, BindingUse::CopyDst),
        ] {
            let name = block.label().unwrap_or("(unlabelled)");
            if let Some(why) = lacks(block, used) {
                return Err(Error::InvalidArgument(format!(
                    "the {what} block {name} of a copy {why}"
                )));
            }
            if offset
                .checked_add(size)
                .is_none_or(|end| end > block.size())
            {
                return Err(Error::InvalidArgument(format!(
                    "a copy of {size} bytes at offset {offset} of the {what} block {name} runs \
                     past its {} bytes",
                    block.size()
                )));
            }
            if !(offset | size).is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) {
                return Err(Error::InvalidArgument(format!(
                    "a copy of {size} bytes at offset {offset} of the {what} block {name}: \
                     offsets and sizes of copies are multiples of {}",
                    wgpu::COPY_BUFFER_ALIGNMENT
                )));
            }
        }
        Ok(Ranges {
            src: src.buffer(),
            from: src.offset() + src_offset,
            dst: dst.buffer(),
            to: dst.offset() + dst_offset,
            size,
        })
    }

    /// The block of its own a copy within one buffer goes through, if this
    /// copy needs one (a copy of 0 bytes records nothing, and needs none).
    fn bounce(&self) -> Option<AllocDesc<'static>> {
        let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        (self.src == self.dst && self.size > 0)
            .then(|| AllocDesc::new(self.size, usage).label("vrampool copy"))
    }

    /// Records the copy, through `bounce` when given; returns `bounce`.
    fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        bounce: Option<PoolBuffer>,
    ) -> Option<PoolBuffer> {
        match &bounce {
            _ if self.size == 0 => {}
            None => {
                encoder.copy_buffer_to_buffer(self.src, self.from, self.dst, self.to, self.size)
            }
            Some(b) => {
                let at = b.offset();
                encoder.copy_buffer_to_buffer(self.src, self.from, b.buffer(), at, self.size);
                encoder.copy_buffer_to_buffer(b.buffer(), at, self.dst, self.to, self.size);
            }
        }
        bounce
    }
}
