//! The allocation engine: segments, blocks, best-fit with split and coalesce,
//! and the release policies. It knows nothing of wgpu; it drives a
//! [`Backend`] that creates and destroys segments.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::backend::{Backend, DeviceError, SegmentDesc};
pub use crate::config::{Config, Growth, Limit, Placement};
use crate::error::{Error, OomInfo, Result};
pub use crate::snapshot::{
    Leak, Snapshot, SnapshotBlock, SnapshotSegment, SnapshotState, leak_report,
};
use crate::stats::{Counters, PoolReport, PoolStats, Stats};
use crate::trace::Recorder;

const NONE: u32 = u32::MAX;

/// What to allocate.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Bytes wanted (rounded up to [`Config::alignment`]).
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
    /// If a new segment is needed, make it exactly the request's size (no
    /// packing): what a retry after a device refusal asks for.
    pub exact_segment: bool,
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
    index: u32,
    generation: u32,
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// Numbers engines; each starts its block generations elsewhere (Fibonacci
/// hashing spreads the starts over the 32-bit range), so a block id from one is
/// refused by another.
static NEXT_ENGINE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Identifies a segment while it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SegmentId(pub u32);

/// Where a new block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Handle to give back to [`Engine::free`].
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

/// Size classes of segments. A request uses free blocks of its own class, of
/// the preallocation, and (without a hard limit, small and medium requests)
/// of large segments; see [`Placement`].
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
    /// The pinned preallocation ([`Growth::Preallocate`]): serves any
    /// non-exclusive request of its pool first, split freely.
    Preallocated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Free,
    Live,
    /// Freed with [`Engine::defer_free`]: its owner is done, but commands
    /// recorded and not yet submitted may still use it, so it is neither
    /// reused nor coalesced until [`Engine::reclaim_deferred`].
    Pending,
    Vacant,
}

/// A block freed with [`Engine::defer_free`], waiting for its mark.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    mark: u64,
    block: u32,
    generation: u32,
}

#[derive(Debug, Clone)]
struct Block {
    seg: u32,
    offset: u64,
    size: u64,
    prev: u32,
    next: u32,
    state: BlockState,
    generation: u32,
    requested: u64,
    dirty: bool,
    label: Option<Arc<str>>,
}

struct Segment<S> {
    payload: S,
    size: u64,
    /// Bytes of its pending blocks (see [`Engine::defer_free`]).
    pending: u64,
    /// The label the device knows it by (`vrampool read-write segment 3`).
    label: String,
    pool: u16,
    class: SegmentClass,
    first: u32,
    live: u32,
    last_used: u64,
    address: u64,
    pinned: bool,
}

struct Pool {
    usage: u32,
    exclusive: bool,
    group: u8,
    name: String,
    /// Free blocks by (class, size, index): best fit is the first at or above the request.
    free: BTreeSet<(u8, u64, u32)>,
    stats: PoolStats,
    /// Has held a segment: pools only named by refused requests stay out of stats.
    used: bool,
}

/// An observer called with the pool's state whenever a request fails for lack of memory.
pub type OomObserver = Box<dyn Fn(&OomInfo) + Send + Sync>;

/// The allocation engine over a [`Backend`].
///
/// ```
/// use vrampool::{Engine, Config, Request, SimulatedDevice};
/// let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// let a = engine.allocate(Request::new(4096, 0))?;
/// engine.free(a.id)?;
/// let b = engine.allocate(Request::new(4096, 0))?; // served from the cache
/// assert_eq!(engine.stats().counters.cache_hits, 1);
/// engine.free(b.id)?;
/// assert!(engine.empty_cache() > 0);
/// assert_eq!(engine.stats().total.reserved_bytes.current, 0);
/// # Ok::<(), vrampool::Error>(())
/// ```
pub struct Engine<B: Backend> {
    backend: B,
    /// Where this engine's block generations start (see [`BlockId`]).
    generation_start: u32,
    config: Config,
    limit: Option<u64>,
    max_segment: u64,
    blocks: Vec<Block>,
    vacant_blocks: Vec<u32>,
    segments: Vec<Option<Segment<B::Segment>>>,
    vacant_segments: Vec<u32>,
    pools: Vec<Pool>,
    total: PoolStats,
    counters: Counters,
    tick: u64,
    next_address: u64,
    recorder: Option<Recorder>,
    observers: Vec<OomObserver>,
    lost: Option<String>,
    has_preallocation: bool,
    /// Highest allocated bytes since the engine was made: what the headroom
    /// and the split guard scale with. Unlike the stats' peak, resetting peak
    /// stats does not touch it.
    high_water: u64,
    /// The free-index key of medium blocks (see [`Engine::key`]), fixed by the config.
    medium_key: u8,
    /// Blocks freed with [`Engine::defer_free`], oldest first.
    deferred: VecDeque<Deferred>,
    /// The mark the next deferred free gets (see [`Engine::defer_mark`]).
    defer_mark: u64,
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

fn class_code(c: SegmentClass) -> u8 {
    match c {
        SegmentClass::Small => 0,
        SegmentClass::Medium => 1,
        SegmentClass::Large => 2,
        SegmentClass::Exclusive => 3,
        SegmentClass::Preallocated => 4,
    }
}

impl<B: Backend> Engine<B> {
    /// Makes an engine over `backend`; preallocates if the config asks.
    pub fn new(backend: B, config: Config) -> Result<Self> {
        let medium_key = if config.shared_large_pool {
            class_code(SegmentClass::Large)
        } else {
            class_code(SegmentClass::Medium)
        };
        if config.alignment == 0 || !config.alignment.is_power_of_two() {
            return Err(Error::Config(format!(
                "alignment must be a power of two, got {}",
                config.alignment
            )));
        }
        let max_segment = config
            .max_segment_size
            .map_or(backend.max_segment_size(), |m| {
                m.min(backend.max_segment_size())
            });
        let mut e = Engine {
            generation_start: NEXT_ENGINE
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .wrapping_mul(0x9E37_79B9),
            backend,
            config,
            limit: None,
            max_segment,
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            pools: Vec::new(),
            total: PoolStats::default(),
            counters: Counters::default(),
            tick: 0,
            next_address: 0x7f00_0000_0000,
            recorder: None,
            observers: Vec::new(),
            lost: None,
            has_preallocation: false,
            high_water: 0,
            medium_key,
            deferred: VecDeque::new(),
            defer_mark: 0,
        };
        e.limit = e.resolve_limit(e.config.limit)?;
        if let Growth::Preallocate(bytes) = e.config.growth {
            e.preallocate(bytes)?;
        }
        Ok(e)
    }

    fn resolve_limit(&self, limit: Option<Limit>) -> Result<Option<u64>> {
        Ok(match limit {
            None => None,
            Some(Limit::Bytes(b)) => Some(b),
            Some(Limit::Fraction(f)) => {
                if !(f > 0.0 && f.is_finite()) {
                    return Err(Error::Config(format!(
                        "a memory fraction must be positive, got {f}"
                    )));
                }
                let cap = self.config.capacity.or(self.backend.capacity()).ok_or_else(|| {
                    Error::Config(
                        "a fraction limit needs the device capacity: set Config::capacity (the device does not report it)"
                            .into(),
                    )
                })?;
                Some((cap as f64 * f) as u64)
            }
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend, mutably.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Sets or clears the hard limit. Cached memory above a lower limit is
    /// released at once; live memory is never touched.
    pub fn set_limit(&mut self, limit: Option<Limit>) -> Result<()> {
        self.limit = self.resolve_limit(limit)?;
        self.config.limit = limit;
        if let Some(l) = self.limit {
            self.release(self.total.reserved_bytes.current.saturating_sub(l));
        }
        Ok(())
    }

    /// The hard limit in bytes.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Sets the cache limit and trims to it.
    pub fn set_cache_limit(&mut self, cache_limit: Option<u64>) {
        self.config.cache_limit = cache_limit;
        self.trim_cache();
    }

    /// Sets the soft headroom (see [`Config::headroom`]).
    pub fn set_headroom(&mut self, headroom: Option<f64>) {
        self.config.headroom = headroom;
    }

    /// Registers an observer called on every out-of-memory, after the cache
    /// was released and the request still failed.
    pub fn add_oom_observer(&mut self, f: OomObserver) {
        self.observers.push(f);
    }

    /// Starts recording every allocate and free as RMM CSV log lines.
    pub fn start_recording(&mut self) {
        self.recorder = Some(Recorder::new());
    }

    /// Stops recording and returns the log (header included), if recording.
    pub fn take_recording(&mut self) -> Option<String> {
        self.recorder.take().map(Recorder::finish)
    }

    /// Marks the device lost: every later allocation fails with [`Error::DeviceLost`].
    pub fn mark_lost(&mut self, why: impl Into<String>) {
        self.lost = Some(why.into());
    }

    fn pool_index(
        &mut self,
        usage: u32,
        exclusive: bool,
        group: u8,
        name: impl FnOnce() -> String,
    ) -> u16 {
        if let Some(i) = self
            .pools
            .iter()
            .position(|p| p.usage == usage && p.exclusive == exclusive && p.group == group)
        {
            return i as u16;
        }
        self.pools.push(Pool {
            usage,
            exclusive,
            group,
            name: name(),
            free: BTreeSet::new(),
            stats: PoolStats::default(),
            used: false,
        });
        (self.pools.len() - 1) as u16
    }

    /// Names the pool of requests with this usage, exclusivity and group (for
    /// summaries and segment labels); creates it if needed.
    pub fn name_pool(&mut self, usage: u32, exclusive: bool, group: u8, name: &str) {
        let i = self.pool_index(usage, exclusive, group, || name.to_string()) as usize;
        self.pools[i].name = name.to_string();
    }

    /// The free-index key of a class: its own, except that medium and large
    /// blocks share one with [`Config::shared_large_pool`] (PyTorch's large pool).
    #[inline]
    fn key(&self, c: SegmentClass) -> u8 {
        match c {
            SegmentClass::Medium => self.medium_key,
            other => class_code(other),
        }
    }

    fn class_of(&self, rounded: u64, exclusive: bool) -> SegmentClass {
        if exclusive {
            SegmentClass::Exclusive
        } else if rounded <= self.placement().small_request {
            SegmentClass::Small
        } else if rounded <= self.placement().medium_request {
            SegmentClass::Medium
        } else {
            SegmentClass::Large
        }
    }

    /// The placement profile in force: [`Config::under_limit`] while a hard
    /// limit is set, [`Config::without_limit`] otherwise.
    fn placement(&self) -> &Placement {
        if self.limit.is_some() {
            &self.config.under_limit
        } else {
            &self.config.without_limit
        }
    }

    /// A new small segment grows with what small segments already hold (see
    /// [`Placement::small_segment_growth`]).
    fn grown_small_segment(&self) -> u64 {
        let p = self.placement();
        let base = p.small_segment;
        if p.small_segment_growth <= 0.0 {
            return base;
        }
        let held: u64 = self
            .segments
            .iter()
            .flatten()
            .filter(|s| s.class == SegmentClass::Small)
            .map(|s| s.size)
            .sum();
        round_up((held as f64 * p.small_segment_growth) as u64, base)
            .clamp(base, p.max_small_segment.max(base))
    }

    fn segment_size(&self, rounded: u64, class: SegmentClass) -> u64 {
        let s = match class {
            SegmentClass::Small => self.grown_small_segment().max(rounded),
            SegmentClass::Medium => {
                let p = self.placement();
                let mut seg = p.medium_segment;
                if p.medium_segment_fraction > 0.0 {
                    let cap = round_up(
                        (self.high_water.max(self.total.allocated_bytes.current) as f64
                            * p.medium_segment_fraction) as u64,
                        p.small_segment.max(1),
                    );
                    seg = seg.min(cap.max(2 * rounded));
                }
                if let Some(limit) = self.limit {
                    // A shared segment is at most an eighth of the budget, so a
                    // small budget is not spent on one half-empty segment.
                    seg = seg.min(round_up(limit / 8, p.small_segment.max(1)).max(2 * rounded));
                }
                seg.max(rounded)
            }
            SegmentClass::Large => round_up(rounded, self.placement().large_rounding.max(1)),
            SegmentClass::Exclusive | SegmentClass::Preallocated => rounded,
        };
        s.min(self.max_segment).max(rounded)
    }

    /// Allocates a block.
    pub fn allocate(&mut self, req: Request) -> Result<Allocation> {
        if let Some(why) = &self.lost {
            return Err(Error::DeviceLost(why.clone()));
        }
        if req.size == 0 {
            return Err(Error::ZeroSize);
        }
        let rounded = req
            .size
            .checked_add(self.config.alignment - 1)
            .map(|x| x & !(self.config.alignment - 1))
            .filter(|&r| r <= self.max_segment)
            .ok_or(Error::TooLarge {
                requested: req.size,
                max_buffer_size: self.max_segment,
            })?;
        let pool = self.pool_index(req.usage, req.exclusive, req.group, || {
            format!(
                "{}{:#x}{}",
                if req.exclusive {
                    "exclusive "
                } else {
                    "usage "
                },
                req.usage,
                if req.group == 0 {
                    String::new()
                } else {
                    format!(" group {}", req.group)
                }
            )
        });
        let class = self.class_of(rounded, req.exclusive);
        self.tick += 1;
        let found = if class != SegmentClass::Exclusive && self.has_preallocation {
            self.find_free(pool, SegmentClass::Preallocated, rounded)
                .or_else(|| self.find_free(pool, class, rounded))
        } else {
            self.find_free(pool, class, rounded)
        };
        // A small or medium request may split a cached large block before a new
        // segment is made (without a hard limit): the space a large tensor left
        // behind serves the small ones of the next phase.
        let found = found.or_else(|| {
            let packed = matches!(class, SegmentClass::Small | SegmentClass::Medium);
            if packed && self.placement().reuse_large_blocks {
                self.find_free(pool, SegmentClass::Large, rounded)
            } else {
                None
            }
        });
        if let Some(b) = found {
            self.counters.cache_hits += 1;
            return Ok(self.take_block(b, rounded, req));
        }
        let seg = self.new_segment(pool, class, rounded, &req)?;
        self.counters.cache_misses += 1;
        let b = self.segments[seg as usize].as_ref().unwrap().first;
        Ok(self.take_block(b, rounded, req))
    }

    /// Best fit: the smallest free block of `class` that holds `rounded`, if
    /// the fit rules let it serve the request. Blocks are ordered by size, so
    /// when the smallest candidate is refused, every larger one would be too.
    fn find_free(&self, pool: u16, class: SegmentClass, rounded: u64) -> Option<u32> {
        let p = &self.pools[pool as usize];
        let c = self.key(class);
        let &(_, size, idx) = p.free.range((c, rounded, 0)..(c + 1, 0, 0)).next()?;
        let too_big = match class {
            SegmentClass::Exclusive => size > rounded + rounded / 4,
            SegmentClass::Large => {
                let fit = if self.split_guarded(size) {
                    Placement::GUARDED_FIT
                } else {
                    self.placement().large_fit
                };
                (rounded as f64) < size as f64 * fit
            }
            _ => false,
        };
        if too_big {
            return None;
        }
        Some(idx)
    }

    /// Whether a cached large block is too big to be split freely: pinning it
    /// with a small block could by itself cost more than the headroom allows.
    fn split_guarded(&self, block: u64) -> bool {
        self.placement().split_guard.is_some_and(|k| {
            let h = self.config.headroom.unwrap_or(0.0);
            block as f64 >= k * h * self.high_water as f64
        })
    }

    /// Creates a segment for a request, releasing cached memory as the limits require.
    fn new_segment(
        &mut self,
        pool: u16,
        class: SegmentClass,
        rounded: u64,
        req: &Request,
    ) -> Result<u32> {
        let mut size = if req.exact_segment {
            rounded
        } else {
            self.segment_size(rounded, class)
        };
        let mut retried = false;
        // Hard limit: release cached segments, then shrink the segment to the request.
        if let Some(limit) = self.limit
            && self.total.reserved_bytes.current + size > limit
        {
            if self.total.reserved_bytes.current + rounded <= limit {
                size = self.fit(size, rounded, limit);
            } else {
                self.counters.alloc_retries += 1;
                retried = true;
                self.release((self.total.reserved_bytes.current + rounded).saturating_sub(limit));
                if self.total.reserved_bytes.current + rounded > limit {
                    return Err(self.oom(req.size, false));
                }
                size = self.fit(size, rounded, limit);
            }
        }
        // Soft headroom: keep reserved within (1 + h) × peak allocated.
        if let Some(target) = self.soft_target(rounded)
            && self.total.reserved_bytes.current + size > target
        {
            if size > rounded && self.total.reserved_bytes.current + rounded <= target {
                size = self.fit(size, rounded, target);
            } else {
                self.release((self.total.reserved_bytes.current + size).saturating_sub(target));
            }
        }
        loop {
            let label = format!(
                "vrampool {} segment {}",
                self.pools[pool as usize].name, self.counters.device_allocs
            );
            match self.backend.create_segment(&SegmentDesc {
                size,
                usage: self.pools[pool as usize].usage,
                label: &label,
            }) {
                Ok(payload) => return Ok(self.insert_segment(payload, label, pool, class, size)),
                // The device refused: first ask for just the request instead of a
                // packed segment, then release the whole cache and ask once more.
                Err(DeviceError::OutOfMemory) if size > rounded => size = rounded,
                Err(DeviceError::OutOfMemory) if !retried => {
                    self.counters.alloc_retries += 1;
                    retried = true;
                    self.release(u64::MAX);
                }
                Err(DeviceError::OutOfMemory) => return Err(self.oom(req.size, true)),
                Err(DeviceError::Lost(why)) => {
                    self.lost = Some(why.clone());
                    return Err(Error::DeviceLost(why));
                }
                Err(DeviceError::Other(m)) => return Err(Error::Device(m)),
            }
        }
    }

    /// The soft headroom's cap on reserved bytes if `rounded` more were allocated.
    fn soft_target(&self, rounded: u64) -> Option<u64> {
        let h = self.config.headroom?;
        let peak = self
            .high_water
            .max(self.total.allocated_bytes.current + rounded);
        Some(((peak as f64 * (1.0 + h)) as u64).max(self.config.headroom_floor))
    }

    /// The largest aligned segment size in `rounded..=size` that keeps reserved under `cap`.
    fn fit(&self, size: u64, rounded: u64, cap: u64) -> u64 {
        let room =
            cap.saturating_sub(self.total.reserved_bytes.current) & !(self.config.alignment - 1);
        room.min(size).max(rounded)
    }

    fn oom(&mut self, requested: u64, device_refused: bool) -> Error {
        self.counters.ooms += 1;
        let info = OomInfo {
            requested,
            allocated: self.total.allocated_bytes.current,
            reserved: self.total.reserved_bytes.current,
            cached: self.total.cached_bytes.current,
            pending: self.total.pending_bytes.current,
            limit: self.limit,
            device_refused,
        };
        for o in &self.observers {
            o(&info);
        }
        Error::OutOfMemory(info)
    }

    fn new_block(&mut self, b: Block) -> u32 {
        if let Some(i) = self.vacant_blocks.pop() {
            let generation = self.blocks[i as usize].generation;
            self.blocks[i as usize] = Block { generation, ..b };
            i
        } else {
            self.blocks.push(Block {
                generation: self.generation_start,
                ..b
            });
            (self.blocks.len() - 1) as u32
        }
    }

    fn insert_segment(
        &mut self,
        payload: B::Segment,
        label: String,
        pool: u16,
        class: SegmentClass,
        size: u64,
    ) -> u32 {
        self.counters.device_allocs += 1;
        self.pools[pool as usize].used = true;
        let address = self.next_address;
        self.next_address += round_up(size, 2 << 20);
        let seg_index = match self.vacant_segments.pop() {
            Some(i) => i,
            None => {
                self.segments.push(None);
                (self.segments.len() - 1) as u32
            }
        };
        let b = self.new_block(Block {
            seg: seg_index,
            offset: 0,
            size,
            prev: NONE,
            next: NONE,
            state: BlockState::Free,
            generation: 0,
            requested: 0,
            dirty: false,
            label: None,
        });
        self.segments[seg_index as usize] = Some(Segment {
            payload,
            size,
            pending: 0,
            label,
            pool,
            class,
            first: b,
            live: 0,
            last_used: self.tick,
            address,
            pinned: false,
        });
        for st in [&mut self.total, &mut self.pools[pool as usize].stats] {
            st.reserved_bytes.add(size);
            st.cached_bytes.add(size);
            st.segments.add(1);
            st.free_blocks.add(1);
        }
        let key = self.key(class);
        self.pools[pool as usize].free.insert((key, size, b));
        seg_index
    }

    /// Hands out free block `b` for `rounded` bytes, splitting off the rest.
    fn take_block(&mut self, b: u32, rounded: u64, req: Request) -> Allocation {
        let (seg, size, offset) = {
            let blk = &self.blocks[b as usize];
            (blk.seg, blk.size, blk.offset)
        };
        let (pool, class) = {
            let s = self.segments[seg as usize].as_ref().unwrap();
            (s.pool, s.class)
        };
        let pi = pool as usize;
        let cc = self.key(class);
        self.pools[pi].free.remove(&(cc, size, b));
        let remainder = size - rounded;
        let split = match class {
            SegmentClass::Exclusive => false,
            SegmentClass::Large => remainder >= self.placement().min_split_remainder,
            SegmentClass::Medium if self.config.shared_large_pool => {
                remainder >= self.placement().min_split_remainder
            }
            _ => remainder >= self.config.alignment,
        };
        let block_size = if split {
            let next = self.blocks[b as usize].next;
            let dirty = self.blocks[b as usize].dirty;
            let r = self.new_block(Block {
                seg,
                offset: offset + rounded,
                size: remainder,
                prev: b,
                next,
                state: BlockState::Free,
                generation: 0,
                requested: 0,
                dirty,
                label: None,
            });
            if next != NONE {
                self.blocks[next as usize].prev = r;
            }
            self.blocks[b as usize].next = r;
            self.blocks[b as usize].size = rounded;
            self.pools[pi].free.insert((cc, remainder, r));
            rounded
        } else {
            for st in [&mut self.total, &mut self.pools[pi].stats] {
                st.free_blocks.sub(1);
            }
            size
        };
        let blk = &mut self.blocks[b as usize];
        blk.state = BlockState::Live;
        blk.requested = req.size;
        blk.label = req.label;
        let fresh = !blk.dirty;
        blk.dirty = true;
        let generation = blk.generation;
        let segm = self.segments[seg as usize].as_mut().unwrap();
        segm.live += 1;
        let address = segm.address + offset;
        for st in [&mut self.total, &mut self.pools[pi].stats] {
            st.allocated_bytes.add(block_size);
            st.requested_bytes.add(req.size);
            st.cached_bytes.sub(block_size);
            st.allocations.add(1);
        }
        self.counters.allocs += 1;
        self.high_water = self.high_water.max(self.total.allocated_bytes.current);
        if let Some(r) = &mut self.recorder {
            r.record(true, address, req.size);
        }
        Allocation {
            id: BlockId {
                index: b,
                generation,
            },
            segment: SegmentId(seg),
            offset,
            size: block_size,
            fresh,
        }
    }

    fn live_block(&self, id: BlockId) -> Result<&Block> {
        match self.blocks.get(id.index as usize) {
            Some(b) if b.generation == id.generation && b.state == BlockState::Live => Ok(b),
            _ => Err(Error::UnknownBlock(id.to_string())),
        }
    }

    /// The label the device knows a segment by (`vrampool read-write segment 3`).
    pub fn segment_label(&self, seg: SegmentId) -> Option<&str> {
        self.segments
            .get(seg.0 as usize)?
            .as_ref()
            .map(|s| s.label.as_str())
    }

    /// Bytes of pending blocks (see [`Engine::defer_free`]).
    pub fn pending_bytes(&self) -> u64 {
        self.total.pending_bytes.current
    }

    /// The segment payload (e.g. the `wgpu::Buffer`) of a segment.
    pub fn segment_payload(&self, seg: SegmentId) -> Option<&B::Segment> {
        self.segments
            .get(seg.0 as usize)?
            .as_ref()
            .map(|s| &s.payload)
    }

    /// Returns a block to the cache, coalescing it with free neighbours: the
    /// next request may reuse its bytes at once.
    pub fn free(&mut self, id: BlockId) -> Result<()> {
        let b = self.take_live(id)?;
        self.make_free(b);
        Ok(())
    }

    /// Returns a block whose bytes commands recorded but not yet submitted
    /// may still use: it is *pending* — counted in `pending_bytes`, neither
    /// reused nor coalesced — until [`Engine::reclaim_deferred`] is called
    /// with a mark taken after this call. A segment holding only free and
    /// pending blocks may still be released; the backend is then told to
    /// [`abandon`](Backend::abandon_segment) it rather than destroy it.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let a = e.allocate(Request::new(4096, 0))?;
    /// e.defer_free(a.id)?;
    /// let b = e.allocate(Request::new(4096, 0))?; // not a's bytes
    /// assert_ne!(b.offset, a.offset);
    /// assert_eq!(e.stats().total.pending_bytes.current, 4096);
    /// let mark = e.defer_mark(); // ... the work using `a` is submitted ...
    /// assert_eq!(e.reclaim_deferred(mark), 4096);
    /// assert_eq!(e.stats().total.pending_bytes.current, 0);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn defer_free(&mut self, id: BlockId) -> Result<()> {
        let b = self.take_live(id)?;
        let blk = &mut self.blocks[b as usize];
        blk.state = BlockState::Pending;
        let (seg, size, generation) = (blk.seg, blk.size, blk.generation);
        let segment = self.segments[seg as usize].as_mut().unwrap();
        segment.pending += size;
        let pi = segment.pool as usize;
        for st in [&mut self.total, &mut self.pools[pi].stats] {
            st.pending_bytes.add(size);
            st.pending_blocks.add(1);
        }
        self.deferred.push_back(Deferred {
            mark: self.defer_mark,
            block: b,
            generation,
        });
        Ok(())
    }

    /// A mark covering every block deferred so far: pass it to
    /// [`Engine::reclaim_deferred`] once the work recorded before those frees
    /// has been submitted. Blocks deferred after this call wait for a later mark.
    pub fn defer_mark(&mut self) -> u64 {
        self.defer_mark += 1;
        self.defer_mark - 1
    }

    /// Makes every block deferred up to `mark` free for reuse (coalescing it
    /// with free neighbours); returns their bytes. Blocks whose segment was
    /// released meanwhile are gone already.
    pub fn reclaim_deferred(&mut self, mark: u64) -> u64 {
        let mut bytes = 0;
        while let Some(&d) = self.deferred.front() {
            if d.mark > mark {
                break;
            }
            self.deferred.pop_front();
            let blk = &self.blocks[d.block as usize];
            if blk.state != BlockState::Pending || blk.generation != d.generation {
                continue; // released with its segment
            }
            let (seg, size) = (blk.seg, blk.size);
            let segment = self.segments[seg as usize].as_mut().unwrap();
            segment.pending -= size;
            let pi = segment.pool as usize;
            for st in [&mut self.total, &mut self.pools[pi].stats] {
                st.pending_bytes.sub(size);
                st.pending_blocks.sub(1);
            }
            self.make_free(d.block);
            bytes += size;
        }
        bytes
    }

    /// Takes a live block from its owner: the figures of a free, the id made
    /// stale. Returns the block's index, detached (neither live nor free yet).
    fn take_live(&mut self, id: BlockId) -> Result<u32> {
        let blk = self.live_block(id)?;
        let (seg, size, requested) = (blk.seg, blk.size, blk.requested);
        let b = id.index;
        let (pool, address) = {
            let s = self.segments[seg as usize].as_mut().unwrap();
            s.live -= 1;
            s.last_used = self.tick;
            (s.pool, s.address + self.blocks[b as usize].offset)
        };
        {
            let blk = &mut self.blocks[b as usize];
            blk.requested = 0;
            blk.generation = blk.generation.wrapping_add(1);
        }
        for st in [&mut self.total, &mut self.pools[pool as usize].stats] {
            st.allocated_bytes.sub(size);
            st.requested_bytes.sub(requested);
            st.allocations.sub(1);
        }
        self.counters.frees += 1;
        if let Some(r) = &mut self.recorder {
            r.record(false, address, requested);
        }
        Ok(b)
    }

    /// Makes detached block `b` free: cached, coalesced with its free
    /// neighbours, in the free index.
    fn make_free(&mut self, b: u32) {
        let (pi, cc) = {
            let blk = &mut self.blocks[b as usize];
            blk.state = BlockState::Free;
            blk.label = None;
            let s = self.segments[blk.seg as usize].as_ref().unwrap();
            (s.pool as usize, self.key(s.class))
        };
        let size = self.blocks[b as usize].size;
        for st in [&mut self.total, &mut self.pools[pi].stats] {
            st.cached_bytes.add(size);
            st.free_blocks.add(1);
        }
        // Coalesce with the next, then the previous neighbour.
        let mut cur = b;
        let next = self.blocks[cur as usize].next;
        if next != NONE && self.blocks[next as usize].state == BlockState::Free {
            self.merge(cur, next, pi, cc);
        }
        let prev = self.blocks[cur as usize].prev;
        if prev != NONE && self.blocks[prev as usize].state == BlockState::Free {
            self.merge(prev, cur, pi, cc);
            cur = prev;
        }
        let sz = self.blocks[cur as usize].size;
        self.pools[pi].free.insert((cc, sz, cur));
        self.trim_cache();
    }

    /// Merges free block `b` (right neighbour of `a`) into `a`, taking both out
    /// of the free index (the block being freed is not in it yet); the caller
    /// indexes the merged block.
    fn merge(&mut self, a: u32, b: u32, pi: usize, cc: u8) {
        let (asz, bsz) = (self.blocks[a as usize].size, self.blocks[b as usize].size);
        self.pools[pi].free.remove(&(cc, asz, a));
        self.pools[pi].free.remove(&(cc, bsz, b));
        let bnext = self.blocks[b as usize].next;
        let bdirty = self.blocks[b as usize].dirty;
        let blk = &mut self.blocks[a as usize];
        blk.size += bsz;
        blk.next = bnext;
        blk.dirty |= bdirty;
        if bnext != NONE {
            self.blocks[bnext as usize].prev = a;
        }
        let vb = &mut self.blocks[b as usize];
        vb.state = BlockState::Vacant;
        vb.generation = vb.generation.wrapping_add(1);
        self.vacant_blocks.push(b);
        for st in [&mut self.total, &mut self.pools[pi].stats] {
            st.free_blocks.sub(1);
        }
    }

    fn trim_cache(&mut self) {
        if let Some(cl) = self.config.cache_limit
            && self.total.cached_bytes.current > cl
        {
            self.release(self.total.cached_bytes.current - cl);
        }
    }

    /// Releases unpinned segments that hold no live block, least recently
    /// used first, until at least `need` bytes are released (`u64::MAX`: all
    /// of them). Segments holding pending blocks go last: the backend can only
    /// abandon them. Returns the bytes released. (Largest-first and best-fit
    /// victim orders were measured on the traces and hold more memory; see
    /// BENCHMARKS.md.)
    fn release(&mut self, need: u64) -> u64 {
        if need == 0 {
            return 0;
        }
        let mut candidates: Vec<(bool, u64, u64, u32)> = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Some(s) if s.live == 0 && !s.pinned => {
                    Some((s.pending > 0, s.last_used, s.size, i as u32))
                }
                _ => None,
            })
            .collect();
        candidates.sort_unstable();
        let mut released = 0;
        for (_, _, _, i) in candidates {
            if released >= need {
                break;
            }
            released += self.destroy_segment(i);
        }
        if released > 0 {
            self.backend.flush_releases();
        }
        released
    }

    /// Gives segment `i`, which holds no live block, back to the backend:
    /// destroyed when it is all free, abandoned when it holds pending blocks.
    fn destroy_segment(&mut self, i: u32) -> u64 {
        let s = self.segments[i as usize].take().unwrap();
        debug_assert_eq!(s.live, 0);
        let cc = self.key(s.class);
        let pi = s.pool as usize;
        let (mut free_blocks, mut pending_blocks) = (0, 0);
        let mut b = s.first;
        while b != NONE {
            let vb = &mut self.blocks[b as usize];
            match vb.state {
                BlockState::Free => {
                    free_blocks += 1;
                    let size = vb.size;
                    self.pools[pi].free.remove(&(cc, size, b));
                }
                BlockState::Pending => pending_blocks += 1,
                BlockState::Live | BlockState::Vacant => {
                    unreachable!("a released segment holds no live block")
                }
            }
            let vb = &mut self.blocks[b as usize];
            vb.state = BlockState::Vacant;
            vb.generation = vb.generation.wrapping_add(1);
            vb.label = None;
            self.vacant_blocks.push(b);
            b = vb.next;
        }
        self.vacant_segments.push(i);
        for st in [&mut self.total, &mut self.pools[pi].stats] {
            st.reserved_bytes.sub(s.size);
            st.cached_bytes.sub(s.size - s.pending);
            st.pending_bytes.sub(s.pending);
            st.pending_blocks.sub(pending_blocks);
            st.segments.sub(1);
            st.free_blocks.sub(free_blocks);
        }
        self.counters.device_frees += 1;
        self.counters.bytes_released += s.size;
        if s.pending > 0 {
            self.counters.segments_abandoned += 1;
            self.backend.abandon_segment(s.payload);
        } else {
            self.backend.destroy_segment(s.payload);
        }
        s.size
    }

    /// Takes back an allocation whose new segment the device refused after the
    /// fact (the browser's asynchronous error scopes): frees the block, destroys
    /// the segment, and undoes the counts of an allocation that never happened.
    /// (A recording keeps the allocate and free lines.)
    pub fn revoke(&mut self, a: &Allocation) -> Result<()> {
        self.free(a.id)?;
        self.counters.allocs -= 1;
        self.counters.frees -= 1;
        if matches!(self.segments.get(a.segment.0 as usize), Some(Some(s)) if s.live == 0) {
            let size = self.destroy_segment(a.segment.0);
            self.counters.device_allocs -= 1;
            self.counters.device_frees -= 1;
            self.counters.bytes_released -= size;
        }
        Ok(())
    }

    /// Counts an allocation that released cache and retried.
    pub fn note_retry(&mut self) {
        self.counters.alloc_retries += 1;
    }

    /// Counts an out-of-memory of `requested` bytes, calls the observers, and
    /// returns the error describing the pool's state.
    pub fn out_of_memory(&mut self, requested: u64, device_refused: bool) -> Error {
        self.oom(requested, device_refused)
    }

    /// Releases every cached segment that holds no live block (pinned
    /// preallocations excepted) back to the device, like
    /// `torch.cuda.empty_cache()`. Never touches live blocks. Returns the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        let r = self.release(u64::MAX);
        self.counters.last_empty_cache_bytes = r;
        r
    }

    /// Reserves `bytes` in one pinned segment of the default pool.
    pub fn preallocate(&mut self, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if bytes > self.max_segment {
            return Err(Error::TooLarge {
                requested: bytes,
                max_buffer_size: self.max_segment,
            });
        }
        let size = round_up(bytes, self.config.alignment);
        if let Some(limit) = self.limit
            && self.total.reserved_bytes.current + size > limit
        {
            return Err(Error::Config(format!(
                "cannot preallocate {}: the limit is {} and {} is already reserved; raise the limit or preallocate less",
                crate::fmt_bytes(size),
                crate::fmt_bytes(limit),
                crate::fmt_bytes(self.total.reserved_bytes.current)
            )));
        }
        let usage = self.config.default_usage;
        let pool = self.pool_index(usage, false, 0, || format!("usage {usage:#x}"));
        let label = "vrampool preallocated segment".to_string();
        let payload = self
            .backend
            .create_segment(&SegmentDesc {
                size,
                usage,
                label: &label,
            })
            .map_err(|e| match e {
                DeviceError::OutOfMemory => Error::OutOfMemory(OomInfo {
                    requested: size,
                    allocated: 0,
                    reserved: self.total.reserved_bytes.current,
                    cached: self.total.cached_bytes.current,
                    pending: self.total.pending_bytes.current,
                    limit: self.limit,
                    device_refused: true,
                }),
                DeviceError::Lost(w) => Error::DeviceLost(w),
                DeviceError::Other(m) => Error::Device(m),
            })?;
        let s = self.insert_segment(payload, label, pool, SegmentClass::Preallocated, size);
        self.segments[s as usize].as_mut().unwrap().pinned = true;
        self.has_preallocation = true;
        Ok(())
    }

    /// Figures for all pools, current and peak, and event counters.
    pub fn stats(&self) -> Stats {
        let largest_free_block = self
            .pools
            .iter()
            .filter_map(|p| p.free.iter().map(|&(_, s, _)| s).max())
            .max()
            .unwrap_or(0);
        let (releasable_bytes, releasable_pending) = self
            .segments
            .iter()
            .flatten()
            .filter(|s| s.live == 0 && !s.pinned)
            .fold((0, 0), |(size, pending), s| {
                (size + s.size, pending + s.pending)
            });
        Stats {
            total: self.total,
            // A pool that never held a byte (one a refused request named) is not shown.
            pools: self
                .pools
                .iter()
                .filter(|p| p.used)
                .map(|p| PoolReport {
                    name: p.name.clone(),
                    usage: p.usage,
                    stats: p.stats,
                })
                .collect(),
            counters: self.counters,
            largest_free_block,
            releasable_bytes,
            inactive_split_bytes: self.total.cached_bytes.current
                - (releasable_bytes - releasable_pending),
            limit: self.limit,
        }
    }

    /// Resets all peaks to current values, like `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&mut self) {
        self.total.reset_peak();
        for p in &mut self.pools {
            p.stats.reset_peak();
        }
    }

    /// The `memory_summary()` table.
    pub fn memory_summary(&self) -> String {
        self.stats().summary()
    }

    /// Every segment and its blocks.
    pub fn snapshot(&self) -> Snapshot {
        let mut segments = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            let mut blocks = Vec::new();
            let mut b = s.first;
            while b != NONE {
                let blk = &self.blocks[b as usize];
                blocks.push(SnapshotBlock {
                    offset: blk.offset,
                    size: blk.size,
                    requested: blk.requested,
                    state: match blk.state {
                        BlockState::Live => SnapshotState::Live,
                        BlockState::Pending => SnapshotState::Pending,
                        BlockState::Free | BlockState::Vacant => SnapshotState::Free,
                    },
                    label: blk.label.as_deref().map(str::to_string),
                });
                b = blk.next;
            }
            let p = &self.pools[s.pool as usize];
            segments.push(SnapshotSegment {
                id: i as u32,
                label: s.label.clone(),
                pool: p.name.clone(),
                usage: p.usage,
                class: s.class,
                size: s.size,
                address: s.address,
                pinned: s.pinned,
                blocks,
            });
        }
        Snapshot { segments }
    }

    /// Blocks still live, with their labels: the leak report.
    pub fn leaks(&self) -> Vec<Leak> {
        self.blocks
            .iter()
            .filter(|b| b.state == BlockState::Live)
            .map(|b| Leak {
                size: b.size,
                pool: self.pools[self.segments[b.seg as usize].as_ref().unwrap().pool as usize]
                    .name
                    .clone(),
                label: b.label.as_deref().map(str::to_string),
            })
            .collect()
    }

    /// Checks every invariant of the engine; returns a description of the first
    /// one broken. Used by tests; O(blocks).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        /// What the blocks and segments add up to, for one pool or all.
        #[derive(Default, Clone, Copy)]
        struct Recount {
            allocated: u64,
            requested: u64,
            reserved: u64,
            pending: u64,
            segments: u64,
            allocations: u64,
            free_blocks: u64,
            pending_blocks: u64,
        }
        let mut pools = vec![Recount::default(); self.pools.len()];
        let mut deferred = std::collections::HashMap::<(u32, u32), u32>::new();
        for d in &self.deferred {
            *deferred.entry((d.block, d.generation)).or_default() += 1;
        }
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            let r = &mut pools[s.pool as usize];
            let mut b = s.first;
            let mut off = 0;
            let mut prev = NONE;
            let (mut live, mut pending) = (0, 0);
            let mut prev_free = false;
            while b != NONE {
                let blk = &self.blocks[b as usize];
                if blk.seg != i as u32 {
                    return Err(format!("block {b} in segment {i} says segment {}", blk.seg));
                }
                if blk.offset != off {
                    return Err(format!(
                        "segment {i}: gap or overlap at offset {off} (block at {})",
                        blk.offset
                    ));
                }
                if blk.prev != prev {
                    return Err(format!("segment {i}: broken prev link at block {b}"));
                }
                if !blk.offset.is_multiple_of(self.config.alignment) {
                    return Err(format!("block {b} offset {} not aligned", blk.offset));
                }
                let free = blk.state == BlockState::Free;
                match blk.state {
                    BlockState::Live => {
                        live += 1;
                        r.allocated += blk.size;
                        r.requested += blk.requested;
                    }
                    BlockState::Free => {
                        if prev_free {
                            return Err(format!(
                                "segment {i}: two adjacent free blocks at offset {off}"
                            ));
                        }
                        let key = (self.key(s.class), blk.size, b);
                        if !self.pools[s.pool as usize].free.contains(&key) {
                            return Err(format!("free block {b} missing from the free index"));
                        }
                        r.free_blocks += 1;
                    }
                    BlockState::Pending => {
                        pending += blk.size;
                        r.pending_blocks += 1;
                        let listed = deferred.get(&(b, blk.generation)).copied().unwrap_or(0);
                        if listed != 1 {
                            return Err(format!(
                                "pending block {b} is listed {listed} times among the deferred frees"
                            ));
                        }
                    }
                    BlockState::Vacant => {
                        return Err(format!("vacant block {b} linked in segment {i}"));
                    }
                }
                prev_free = free;
                off += blk.size;
                prev = b;
                b = blk.next;
            }
            if off != s.size {
                return Err(format!(
                    "segment {i}: blocks cover {off} of {} bytes",
                    s.size
                ));
            }
            if live != s.live {
                return Err(format!(
                    "segment {i}: live count {} but {live} live blocks",
                    s.live
                ));
            }
            if pending != s.pending {
                return Err(format!(
                    "segment {i}: pending bytes {} but {pending} in pending blocks",
                    s.pending
                ));
            }
            r.reserved += s.size;
            r.pending += pending;
            r.segments += 1;
            r.allocations += live as u64;
        }
        let mut total = Recount::default();
        for (p, r) in self.pools.iter().zip(&pools) {
            if p.free.len() as u64 != r.free_blocks {
                return Err(format!(
                    "pool {}: {} entries in the free index, {} free blocks",
                    p.name,
                    p.free.len(),
                    r.free_blocks
                ));
            }
            total.allocated += r.allocated;
            total.requested += r.requested;
            total.reserved += r.reserved;
            total.pending += r.pending;
            total.segments += r.segments;
            total.allocations += r.allocations;
            total.free_blocks += r.free_blocks;
            total.pending_blocks += r.pending_blocks;
        }
        let named = std::iter::once(("all", &self.total, total)).chain(
            self.pools
                .iter()
                .zip(pools)
                .map(|(p, r)| (p.name.as_str(), &p.stats, r)),
        );
        for (pool, t, r) in named {
            let checks = [
                ("allocated", t.allocated_bytes.current, r.allocated),
                ("requested", t.requested_bytes.current, r.requested),
                ("reserved", t.reserved_bytes.current, r.reserved),
                ("pending", t.pending_bytes.current, r.pending),
                ("segments", t.segments.current, r.segments),
                ("allocations", t.allocations.current, r.allocations),
                ("free blocks", t.free_blocks.current, r.free_blocks),
                ("pending blocks", t.pending_blocks.current, r.pending_blocks),
                (
                    "cached",
                    t.cached_bytes.current,
                    r.reserved - r.allocated - r.pending,
                ),
            ];
            for (name, stat, recount) in checks {
                if stat != recount {
                    return Err(format!(
                        "pool {pool}: {name}: stats say {stat}, recount says {recount}"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl<B: Backend> Drop for Engine<B> {
    fn drop(&mut self) {
        if let Some(report) = leak_report(&self.leaks()) {
            tracing::warn!("{report}");
        }
    }
}
