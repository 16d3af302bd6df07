//! The allocation policies `replay --policy` compares, all over the same
//! [`Backend`] (the simulated device or a real wgpu device):
//!
//! - `vrampool`: the engine with its measured default configuration;
//! - `pytorch`: the same engine configured as PyTorch's caching allocator
//!   ([`Config::pytorch`]);
//! - `expandable`: PyTorch's allocator with `expandable_segments:True` on
//!   simulated virtual memory (core's [`Expandable`]): what a pool that
//!   could grow its buffers in place would hold. wgpu cannot, so it runs on
//!   the simulated device only;
//! - `none`: no pool, one device buffer created and destroyed per request;
//! - `size-class`: whole buffers cached by power-of-two size class, the scheme
//!   most wgpu pools use, releasing the cache only when a request would fail.

use std::collections::HashMap;

use clap::ValueEnum;
use vrampool::trace::{Expandable, ExpandableBlock, ReplayTarget, SubmitClock};
use vrampool::{
    Backend, BlockId, Config, DeviceError, Engine, Error, Limit, OomInfo, Request, SegmentDesc,
    Stats,
};

/// Which policy to replay with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// vrampool's default: segments, best fit, split/coalesce, soft headroom.
    Vrampool,
    /// PyTorch's caching allocator scheme (512 B rounding, 2/20 MiB segments, best fit with split).
    Pytorch,
    /// PyTorch's allocator with expandable_segments:True: one segment per
    /// pool growing in place through virtual memory (simulated device only).
    Expandable,
    /// Power-of-two size classes of whole buffers, cached (most wgpu pools).
    SizeClass,
    /// No pool: create_buffer and destroy for every request.
    None,
}

impl PolicyKind {
    /// Every policy, in the order `--compare` prints them.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Vrampool,
        PolicyKind::Pytorch,
        PolicyKind::Expandable,
        PolicyKind::SizeClass,
        PolicyKind::None,
    ];

    /// The name `--policy` takes.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Vrampool => "vrampool",
            PolicyKind::Pytorch => "pytorch",
            PolicyKind::Expandable => "expandable",
            PolicyKind::SizeClass => "size-class",
            PolicyKind::None => "none",
        }
    }

    /// Whether the policy can run on a wgpu device: `expandable` needs
    /// virtual memory, which wgpu does not have.
    pub fn runs_on_a_gpu(self) -> bool {
        self != PolicyKind::Expandable
    }

    /// Whether the policy is vrampool's engine (its default configuration or
    /// the PyTorch preset): the one that places by access and defers frees
    /// to a submit (of the two, only the default moves relocatable blocks).
    pub fn is_engine(self) -> bool {
        matches!(self, PolicyKind::Vrampool | PolicyKind::Pytorch)
    }
}

/// How a replay's blocks are bound, which decides where the engine places
/// them (`replay --access`; the engine policies only). WebGPU validates usage
/// per buffer, so blocks bound read-only and blocks bound read-write never
/// share a segment, and a block bound both ways gets a buffer of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    /// Every tensor bound `read_write`, as a tensor library on wgpu binds
    /// them (`Access::ReadWrite`): one placement class.
    ReadWrite,
    /// Half the tensors, chosen at random, bound only read-only: two classes,
    /// each in segments of its own.
    Split,
    /// No declaration (`Access::Any`, the pool's default for storage): every
    /// tensor a buffer of its own, reused whole.
    Any,
}

/// How a replay asks for its blocks.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Requests {
    /// Usage bits of every request.
    pub usage: u32,
    /// How the blocks are bound.
    pub access: AccessMode,
    /// Frees take effect only every this many events, as when an app submits
    /// its encoder every that many operations (`Reuse::AfterSubmit`: a block
    /// dropped before the submit waits for it), and a relocatable block is
    /// pinned from its allocation until the next submit (core's
    /// `SubmitClock`); 0 frees at once and pins nothing.
    pub submit_every: u64,
    /// Every request relocatable (`Request::relocatable`): the engine
    /// policies may move live blocks to make room (vrampool's; PyTorch's
    /// configuration never moves).
    pub relocatable: bool,
}

/// Byte and call counts every policy keeps, in the engine's words.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Figures {
    /// Bytes in blocks handed out (after the policy's rounding).
    pub allocated: u64,
    /// Bytes held from the device.
    pub reserved: u64,
    /// Reserved but not handed out.
    pub cached: u64,
    /// Device buffers created.
    pub device_allocs: u64,
    /// Device buffers destroyed.
    pub device_frees: u64,
    /// Requests served without a device call.
    pub cache_hits: u64,
    /// Requests that released cache and tried again.
    pub retries: u64,
    /// Bytes of the device buffers created.
    pub bytes_created: u64,
    /// Bytes of the device buffers released.
    pub bytes_released: u64,
    /// Live blocks moved to make room (relocatable requests only).
    pub blocks_moved: u64,
    /// Their bytes.
    pub bytes_moved: u64,
    /// Batches of moves, one command buffer each.
    pub move_batches: u64,
    /// Segments dropped while blocks in them awaited a submit (the engine's
    /// `segments_abandoned`; 0 for the baselines).
    pub segments_abandoned: u64,
}

/// An allocator the replay can drive: core's [`ReplayTarget`] (allocate,
/// free; a refusal for lack of memory is an `Error::OutOfMemory`) with the
/// figures the harness reports.
pub trait Policy: ReplayTarget {
    /// Whether [`Policy::figures`] is cheap enough to call after every operation
    /// (to track peaks the policy does not keep itself).
    const TRACKS_PEAK_CHEAPLY: bool = true;
    /// Current figures.
    fn figures(&self) -> Figures;
    /// Gives every cached byte back to the device; returns how many.
    fn empty_cache(&mut self) -> u64;
    /// The engine's stats, for policies built on it.
    fn stats(&self) -> Option<Stats> {
        None
    }
}

/// The engine as a policy (vrampool's default or PyTorch's configuration).
pub struct EnginePolicy<B: Backend> {
    /// The engine.
    pub engine: Engine<B>,
    requests: Requests,
    /// Allocations and frees so far.
    ops: u64,
    /// The submits every `submit_every` events.
    submits: SubmitClock,
}

impl<B: Backend> EnginePolicy<B> {
    /// An engine over `backend` with `config` and a hard `limit`.
    pub fn new(
        backend: B,
        mut config: Config,
        limit: Option<u64>,
        requests: Requests,
    ) -> Result<Self, Error> {
        config.limit = limit.map(Limit::Bytes);
        if config.default_usage == 0 {
            // A preallocation serves the replay's requests, as Pool::new
            // gives it the read-write blocks' usage.
            config.default_usage = requests.usage;
        }
        Ok(EnginePolicy {
            engine: Engine::new(backend, config)?,
            requests,
            ops: 0,
            submits: SubmitClock::new(requests.submit_every),
        })
    }
}

impl<B: Backend> ReplayTarget for EnginePolicy<B> {
    type Handle = BlockId;
    fn allocate(&mut self, size: u64) -> Result<BlockId, Error> {
        let mut req = Request::new(size, self.requests.usage);
        req.relocatable = self.requests.relocatable;
        match self.requests.access {
            AccessMode::ReadWrite => {}
            // A fixed hash of the operation number: half the tensors, spread
            // evenly and the same on every run.
            AccessMode::Split => {
                req.group = (self.ops.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63) as u8
            }
            AccessMode::Any => req.exclusive = true,
        }
        let r = self.engine.allocate(req);
        if self.requests.relocatable {
            // The replay's handles are ids, which a move keeps.
            self.engine.take_moves();
        }
        self.ops += 1;
        let id = r.as_ref().ok().map(|a| a.id);
        self.submits
            .allocated(&mut self.engine, id, self.requests.relocatable);
        r.map(|a| a.id)
    }
    fn free(&mut self, h: BlockId) {
        self.submits
            .free(&mut self.engine, h)
            .expect("the replay frees only blocks it allocated");
        self.ops += 1;
    }
}

impl<B: Backend> Policy for EnginePolicy<B> {
    const TRACKS_PEAK_CHEAPLY: bool = false;
    fn figures(&self) -> Figures {
        let s = self.engine.stats();
        Figures {
            allocated: s.total.allocated_bytes.current,
            reserved: s.total.reserved_bytes.current,
            cached: s.total.cached_bytes.current,
            device_allocs: s.counters.device_allocs,
            device_frees: s.counters.device_frees,
            cache_hits: s.counters.cache_hits,
            retries: s.counters.alloc_retries,
            bytes_created: s.counters.bytes_created,
            bytes_released: s.counters.bytes_released,
            blocks_moved: s.counters.blocks_moved,
            bytes_moved: s.counters.bytes_moved,
            move_batches: s.counters.move_batches(),
            segments_abandoned: s.counters.segments_abandoned,
        }
    }
    fn empty_cache(&mut self) -> u64 {
        // A caller submits its last commands before it empties the cache:
        // what it dropped since its last submit comes back first, and is
        // destroyed rather than abandoned.
        self.submits.submit(&mut self.engine);
        self.engine.empty_cache()
    }
    fn stats(&self) -> Option<Stats> {
        Some(self.engine.stats())
    }
}

/// Bookkeeping shared by the two baselines: a slab of device buffers and a budget.
struct Buffers<B: Backend> {
    backend: B,
    slab: Vec<Option<(B::Segment, u64)>>,
    free_slots: Vec<usize>,
    limit: Option<u64>,
    usage: u32,
    f: Figures,
}

impl<B: Backend> Buffers<B> {
    fn new(backend: B, limit: Option<u64>, usage: u32) -> Self {
        Buffers {
            backend,
            slab: Vec::new(),
            free_slots: Vec::new(),
            limit,
            usage,
            f: Figures::default(),
        }
    }

    fn fits(&self, size: u64) -> bool {
        self.limit
            .is_none_or(|l| self.f.reserved.checked_add(size).is_some_and(|r| r <= l))
    }

    /// The out-of-memory a refused `size`-byte buffer is.
    fn oom(&self, size: u64, device_refused: bool) -> Error {
        let mut info = OomInfo::new(size);
        info.allocated = self.f.allocated;
        info.reserved = self.f.reserved;
        info.cached = self.f.cached;
        info.limit = self.limit;
        info.device_refused = device_refused;
        Error::OutOfMemory(info)
    }

    fn create(&mut self, size: u64) -> Result<usize, Error> {
        if size > self.backend.max_segment_size() {
            return Err(Error::TooLarge {
                requested: size,
                max_buffer_size: self.backend.max_segment_size(),
            });
        }
        if !self.fits(size) {
            return Err(self.oom(size, false));
        }
        let seg = self
            .backend
            .create_segment(&SegmentDesc {
                size,
                usage: self.usage,
                label: "vrampool baseline buffer",
            })
            .map_err(|e| match e {
                DeviceError::OutOfMemory => self.oom(size, true),
                DeviceError::Lost(why) => Error::DeviceLost(why),
                DeviceError::Other(m) => Error::Device(m),
            })?;
        self.f.device_allocs += 1;
        self.f.bytes_created += size;
        self.f.reserved += size;
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slab[i] = Some((seg, size));
                i
            }
            None => {
                self.slab.push(Some((seg, size)));
                self.slab.len() - 1
            }
        };
        Ok(slot)
    }

    fn destroy(&mut self, slot: usize) {
        let (seg, size) = self.slab[slot].take().expect("live slot");
        self.free_slots.push(slot);
        self.backend.destroy_segment(seg);
        self.f.device_frees += 1;
        self.f.bytes_released += size;
        self.f.reserved -= size;
    }

    fn size(&self, slot: usize) -> u64 {
        self.slab[slot].as_ref().map_or(0, |s| s.1)
    }
}

/// `size` rounded up to 4 bytes, as wgpu requires for copies; a size that
/// cannot be is left as it is (larger than any buffer: `create` refuses it).
fn round_to_4(size: u64) -> u64 {
    size.checked_next_multiple_of(4).unwrap_or(size)
}

/// No pool: every request is its own device buffer (size rounded up to 4
/// bytes, as wgpu requires for copies), destroyed on free.
pub struct NoCache<B: Backend>(Buffers<B>);

impl<B: Backend> NoCache<B> {
    /// Over `backend`, refusing to hold more than `limit` bytes.
    pub fn new(backend: B, limit: Option<u64>, usage: u32) -> Self {
        NoCache(Buffers::new(backend, limit, usage))
    }
}

impl<B: Backend> ReplayTarget for NoCache<B> {
    type Handle = usize;
    fn allocate(&mut self, size: u64) -> Result<usize, Error> {
        let slot = self.0.create(round_to_4(size))?;
        self.0.f.allocated += self.0.size(slot);
        Ok(slot)
    }
    fn free(&mut self, h: usize) {
        self.0.f.allocated -= self.0.size(h);
        self.0.destroy(h);
        self.0.backend.flush_releases();
    }
}

impl<B: Backend> Policy for NoCache<B> {
    fn figures(&self) -> Figures {
        self.0.f
    }
    fn empty_cache(&mut self) -> u64 {
        0
    }
}

/// Whole buffers cached by power-of-two size class (at least 256 B); a
/// request above the device's largest buffer class gets its exact size. The
/// cache is released only when a new buffer would not fit the budget, or
/// the device refuses it (then the buffer is asked for once more).
pub struct SizeClass<B: Backend> {
    dev: Buffers<B>,
    cache: HashMap<u64, Vec<usize>>,
}

impl<B: Backend> SizeClass<B> {
    /// Over `backend`, refusing to hold more than `limit` bytes.
    pub fn new(backend: B, limit: Option<u64>, usage: u32) -> Self {
        SizeClass {
            dev: Buffers::new(backend, limit, usage),
            cache: HashMap::new(),
        }
    }

    fn class(&self, size: u64) -> u64 {
        match size.max(256).checked_next_power_of_two() {
            Some(c) if c <= self.dev.backend.max_segment_size() => c,
            _ => round_to_4(size),
        }
    }
}

impl<B: Backend> ReplayTarget for SizeClass<B> {
    type Handle = usize;
    fn allocate(&mut self, size: u64) -> Result<usize, Error> {
        let class = self.class(size);
        if let Some(slot) = self.cache.get_mut(&class).and_then(Vec::pop) {
            self.dev.f.cache_hits += 1;
            self.dev.f.cached -= class;
            self.dev.f.allocated += class;
            return Ok(slot);
        }
        if !self.dev.fits(class) && self.dev.f.cached > 0 {
            self.dev.f.retries += 1;
            self.empty_cache();
        }
        let slot = match self.dev.create(class) {
            // The device refused (too small, not the budget): what the cache
            // holds is given back and the request tried once more.
            Err(Error::OutOfMemory(_)) if self.dev.f.cached > 0 => {
                self.dev.f.retries += 1;
                self.empty_cache();
                self.dev.create(class)?
            }
            created => created?,
        };
        self.dev.f.allocated += class;
        Ok(slot)
    }
    fn free(&mut self, h: usize) {
        let class = self.dev.size(h);
        self.dev.f.allocated -= class;
        self.dev.f.cached += class;
        self.cache.entry(class).or_default().push(h);
    }
}

impl<B: Backend> Policy for SizeClass<B> {
    fn figures(&self) -> Figures {
        self.dev.f
    }
    fn empty_cache(&mut self) -> u64 {
        let released = self.dev.f.cached;
        for (_, slots) in self.cache.drain() {
            for s in slots {
                self.dev.destroy(s);
            }
        }
        self.dev.f.cached = 0;
        self.dev.backend.flush_releases();
        released
    }
}

/// PyTorch's allocator with `expandable_segments:True` (core's
/// [`Expandable`]) as a policy: on a device of the simulated device's memory,
/// under the replay's limit as PyTorch's `set_per_process_memory_fraction`.
pub struct ExpandablePolicy(pub Expandable);

impl ReplayTarget for ExpandablePolicy {
    type Handle = ExpandableBlock;
    fn allocate(&mut self, size: u64) -> Result<ExpandableBlock, Error> {
        self.0.allocate(size)
    }
    fn free(&mut self, h: ExpandableBlock) {
        self.0
            .free(h)
            .expect("the replay frees only blocks it allocated");
    }
}

impl Policy for ExpandablePolicy {
    fn figures(&self) -> Figures {
        let s = self.0.stats();
        Figures {
            allocated: s.allocated,
            reserved: s.reserved,
            cached: s.reserved - s.allocated,
            device_allocs: s.device_allocs,
            device_frees: s.device_frees,
            cache_hits: s.cache_hits,
            retries: s.retries,
            bytes_created: s.bytes_mapped,
            bytes_released: s.bytes_unmapped,
            ..Figures::default()
        }
    }
    fn empty_cache(&mut self) -> u64 {
        self.0.empty_cache()
    }
}
