//! The allocation engine: segments, blocks, best-fit with split and coalesce,
//! and the release policies. It knows nothing of wgpu; it drives a
//! [`Backend`] that creates and destroys segments.
//!
//! One concern per file:
//! - `mod.rs` — [`Engine`]: construction, settings, and the native
//!   allocation path (plan, create, commit);
//! - `store.rs` — the block and segment slabs, the per-usage free indexes,
//!   split on take and coalesce on free;
//! - `placement.rs` — size classes, segment sizes and which cached block may
//!   serve a request;
//! - `device.rs` — segment sizes fitted to the blocks of the device's own
//!   allocator, from a model of them ([`Backend::suballocation`]);
//! - `ladder.rs` — a missed request's segment: sizing it under the limits,
//!   and the steps after a device refusal ([`SegmentPlan`]);
//! - `pinned.rs` — the pinned segments asked for at once: a preallocation
//!   and a followed plan's, in the same two phases ([`PinnedPlan`]);
//! - `release.rs` — giving segments back: limits, cache limit, `empty_cache`;
//! - `deferred.rs` — frees that wait for a mark ([`Engine::defer_free`]);
//! - `follow.rs` — placing requests where a static plan says ([`Engine::follow`]);
//! - `relocate.rs` — moving relocatable blocks to make room ([`Engine::take_moves`]);
//! - `inspect.rs` — stats, snapshots, leaks;
//! - `invariants.rs` — [`Engine::check_invariants`].
//!
//! Architecture invariant: the engine never calls the device except through
//! [`Backend`], and never holds a segment the backend has not created
//! successfully: a refused segment changes no figure but the retry and OOM
//! counters (and the cache a retry released).

mod deferred;
mod device;
mod follow;
mod free_index;
mod inspect;
mod invariants;
mod ladder;
mod pinned;
mod placement;
mod release;
mod relocate;
mod store;

use std::collections::VecDeque;

use crate::backend::Backend;
use crate::config::{Config, Growth, Limit};
use crate::error::{Error, OomInfo, Result};
use crate::stats::{Counters, PoolStats};
use crate::types::{Allocation, Request};

pub use follow::FollowStats;
pub use invariants::InvariantError;
pub use ladder::{Planned, SegmentPlan};
pub use pinned::PinnedPlan;

use deferred::Deferred;
use store::{Block, Segment, UsagePool};

/// An observer called with the pool's state whenever a request fails for lack of memory.
pub type OomObserver = Box<dyn Fn(&OomInfo) + Send + Sync>;

/// Numbers engines; each starts its block generations elsewhere (Fibonacci
/// hashing spreads the starts over the 32-bit range), so a block id from one is
/// refused by another.
static NEXT_ENGINE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

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
    /// Where this engine's block generations start (see [`crate::BlockId`]).
    generation_start: u32,
    config: Config,
    limit: Option<u64>,
    max_segment: u64,
    blocks: Vec<Block>,
    vacant_blocks: Vec<u32>,
    segments: Vec<Option<Segment<B::Segment>>>,
    vacant_segments: Vec<u32>,
    pools: Vec<UsagePool>,
    total: PoolStats,
    counters: Counters,
    tick: u64,
    next_address: u64,
    recorder: Option<store::Recording>,
    observers: Vec<OomObserver>,
    lost: Option<String>,
    /// Bytes of the pinned preallocated segments ([`Engine::preallocate`]).
    preallocated: u64,
    /// Highest allocated bytes since the engine was made: what the headroom
    /// and the split guard scale with. Unlike the stats' peak, resetting peak
    /// stats does not touch it.
    high_water: u64,
    /// Bytes allocated since the engine last reclaimed a pending block (0
    /// while none is pending): how long the caller has gone without saying
    /// a submit happened (see [`release::PENDING_PATIENCE`]).
    allocated_since_reclaim: u64,
    /// The free-index key of medium blocks (see [`Engine::key`]), fixed by the config.
    medium_key: u8,
    /// Bytes of segments planned and not yet committed, refused, cancelled
    /// or dropped: counted against the limits, so a plan awaiting the device
    /// (the browser's path) is not overtaken by another allocation. Shared
    /// with each plan's `InFlight`, which gives its bytes back when dropped.
    in_flight: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Blocks freed with [`Engine::defer_free`], oldest first.
    deferred: VecDeque<Deferred>,
    /// The mark the next deferred free gets (see [`Engine::defer_mark`]).
    defer_mark: u64,
    /// Bytes the soft headroom released since its target last grew.
    soft_released: u64,
    /// What the soft headroom's target grew by to stop churn (see
    /// [`Config::churn_limit`]).
    headroom_credit: u64,
    /// The high water when `soft_released` last started from 0.
    soft_high: u64,
    /// The last [`release::RELEASED_KEPT`] segments the soft headroom
    /// released, oldest first.
    released: VecDeque<release::Released>,
    /// The engine has made a segment of the pool, class and size of one the
    /// soft headroom released: the workload's loop comes back to what the
    /// headroom gives up, so from now on it packs before it releases (see
    /// [`Config::pack_before_release`]).
    recreated: bool,
    /// The static plans being followed, at most one a pool (see
    /// [`Engine::follow`]).
    following: Vec<follow::Following>,
    follow_stats: FollowStats,
    /// Live blocks that may move (see [`Request::relocatable`]).
    relocatable_live: u64,
    /// Blocks moved since the caller last took them ([`Engine::take_moves`]).
    moves: Vec<crate::types::Moved>,
    /// A model of the device allocator's blocks, one per kind of memory the
    /// backend sub-allocates segments in (`Backend::suballocation`).
    #[cfg(not(target_arch = "wasm32"))]
    device: crate::suballoc::DeviceModels,
}

impl<B: Backend> Engine<B> {
    /// Makes an engine over `backend`; preallocates if the config asks.
    pub fn new(backend: B, config: Config) -> Result<Self> {
        let mut engine = Self::unprovisioned(backend, config)?;
        if let Some(plan) = engine.plan_configured()? {
            engine.make_pinned(plan)?;
        }
        Ok(engine)
    }

    /// An engine over `backend` that has not made the preallocation its
    /// config asks for: [`Engine::plan_configured`] plans it.
    pub(crate) fn unprovisioned(backend: B, config: Config) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let max_segment = config
            .largest_segment(backend.max_segment_size())
            .min(crate::MAX_SEGMENT);
        if max_segment < config.alignment {
            return Err(Error::Config(format!(
                "alignment {} B is larger than the largest segment the device allows ({} B): no \
                 segment could hold a block; give an alignment of at most that",
                config.alignment, max_segment
            )));
        }
        let mut engine = Engine {
            generation_start: NEXT_ENGINE
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .wrapping_mul(0x9E37_79B9),
            medium_key: placement::medium_key(&config),
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
            preallocated: 0,
            high_water: 0,
            allocated_since_reclaim: 0,
            in_flight: Default::default(),
            deferred: VecDeque::new(),
            defer_mark: 0,
            soft_released: 0,
            headroom_credit: 0,
            soft_high: 0,
            released: VecDeque::new(),
            recreated: false,
            following: Vec::new(),
            follow_stats: FollowStats::default(),
            relocatable_live: 0,
            moves: Vec::new(),
            #[cfg(not(target_arch = "wasm32"))]
            device: Default::default(),
        };
        engine.limit = engine.resolve_limit(engine.config.limit)?;
        Ok(engine)
    }

    /// The preallocation the config asks for, planned (`None` for none).
    pub(crate) fn plan_configured(&mut self) -> Result<Option<PinnedPlan>> {
        let Growth::Preallocate(bytes) = self.config.growth else {
            return Ok(None);
        };
        // The configuration asked for it: its refusal is the configuration's.
        self.plan_preallocate(bytes).map_err(|e| match e {
            Error::InvalidArgument(m) => Error::Config(m),
            e => e,
        })
    }

    fn resolve_limit(&self, limit: Option<Limit>) -> Result<Option<u64>> {
        Ok(match limit {
            None => None,
            Some(Limit::Bytes(b)) => Some(b),
            Some(Limit::Fraction(f)) => {
                crate::config::fraction_ok(f).map_err(Error::Config)?;
                let cap = self
                    .config
                    .capacity
                    .or(self.backend.capacity())
                    .ok_or_else(|| {
                        Error::Config(
                        "a fraction limit needs the device capacity, which wgpu does not report: \
                         set Config::capacity where the pool is made (PoolOptions::config), or \
                         give the limit in bytes (Limit::Bytes)"
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

    /// The largest segment the engine makes: the backend's largest buffer,
    /// or [`Config::max_segment_size`] if smaller.
    pub fn max_segment_size(&self) -> u64 {
        self.max_segment
    }

    /// Bytes of device segments held now, PyTorch's
    /// `torch.cuda.memory_reserved()`: what [`Engine::stats`] reports as
    /// `total.reserved_bytes.current`, read without building the figures.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let a = e.allocate(Request::new(1000, 0))?;
    /// assert_eq!(e.reserved_bytes(), 2 << 20); // one small segment
    /// assert_eq!(e.reserved_bytes(), e.stats().total.reserved_bytes.current);
    /// # let _ = a; Ok::<(), vrampool::Error>(())
    /// ```
    pub fn reserved_bytes(&self) -> u64 {
        self.total.reserved_bytes.current
    }

    /// Sets or clears the hard limit. Cached memory above a lower limit is
    /// released at once, counting the segments of plans in flight
    /// ([`Engine::plan`] to [`Engine::commit`]) as held; live memory is never
    /// touched. A plan made before the limit fell is still carried out, so
    /// where the cache cannot make room for it, reserved passes the limit
    /// until blocks are freed (the next request then finds the limit full).
    /// The limit is a budget
    /// or a ceiling as [`Config::limit_kind`](crate::Config::limit_kind) said
    /// when the engine was made.
    pub fn set_limit(&mut self, limit: Option<Limit>) -> Result<()> {
        self.limit = self.resolve_limit(limit)?;
        self.config.limit = limit;
        if let Some(l) = self.limit {
            self.release_ordered(self.held().saturating_sub(l));
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

    /// Sets the soft headroom (see [`Config::headroom`]) and starts its churn
    /// count and credit afresh. A headroom that is negative or not finite is
    /// refused and changes nothing.
    pub fn set_headroom(&mut self, headroom: Option<f64>) -> Result<()> {
        let config = Config {
            headroom,
            ..self.config.clone()
        };
        config.validate().map_err(Error::Config)?;
        self.config.headroom = headroom;
        self.reset_churn();
        Ok(())
    }

    /// Forgets what the soft headroom released, the credit it granted and
    /// whether it saw a segment re-created.
    pub(super) fn reset_churn(&mut self) {
        self.soft_released = 0;
        self.headroom_credit = 0;
        self.soft_high = self.high_water;
        self.released.clear();
        self.recreated = false;
    }

    /// Registers an observer called on every out-of-memory: after the cache
    /// was released and the device still refused, or when the limit refused
    /// a request not even the whole cache would make room for.
    pub fn add_oom_observer(&mut self, f: OomObserver) {
        self.observers.push(f);
    }

    /// Starts recording every allocate and free as RMM CSV log lines: the
    /// blocks allocated from now on, and their frees. The free of a block
    /// already live is not logged (its allocate row is not in the log, and
    /// no reader takes a free of what it never saw allocated). To read a
    /// recording as it goes, [`Engine::drain_recording`]: a recording
    /// stopped and started again is a new one.
    pub fn start_recording(&mut self) {
        self.recorder = Some(store::Recording::new());
    }

    /// Stops recording and returns the log (header included), if recording.
    /// Each row's `Stream` is the pool of the request
    /// ([`PoolKey`](crate::trace::PoolKey)). A free through
    /// [`Engine::defer_free`] is logged when its bytes become reusable (the
    /// reclaim of its mark) or go (its segment released), and one still
    /// pending now at the end of the log: the log is of where the engine
    /// could place what, as a plan of it
    /// ([`RecordedPlan`](crate::trace::RecordedPlan)) needs.
    pub fn take_recording(&mut self) -> Option<String> {
        for d in &self.deferred {
            store::log_free(&mut self.recorder, d.row);
        }
        self.recorder.take().map(store::Recording::finish)
    }

    /// The log so far (header included), if recording, and the recording
    /// goes on: the next drain's (or [`Engine::take_recording`]'s) log
    /// continues this one, the frees of blocks this one logged allocated
    /// included, so the logs past their headers, joined in order, read as
    /// one. A deferred free still pending is logged when its bytes become
    /// reusable, in a later log.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice, Trace};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// e.start_recording();
    /// let a = e.allocate(Request::new(4096, 0))?;
    /// let first = e.drain_recording().unwrap();
    /// e.free(a.id)?;
    /// let second = e.take_recording().unwrap();
    /// let joined = format!("{first}{}", second.split_once('\n').unwrap().1);
    /// assert_eq!(Trace::parse("joined", joined.as_bytes())?.events.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drain_recording(&mut self) -> Option<String> {
        self.recorder.as_mut().map(store::Recording::drain)
    }

    /// Allocates a block: from the cache when a cached block fits, else in a
    /// new segment the backend creates. When the device refuses a segment,
    /// the engine asks for just the request, then releases its whole cache
    /// and asks once more, then fails (see [`Engine::plan`] for the same
    /// steps driven by a caller that must await the device).
    pub fn allocate(&mut self, req: Request) -> Result<Allocation> {
        let mut plan = match self.plan(req)? {
            Planned::Hit(a) => return Ok(a),
            Planned::Create(plan) => plan,
        };
        loop {
            match self.backend.create_segment(&plan.desc()) {
                Ok(segment) => return self.commit(plan, segment),
                Err(refusal) => plan = self.refused(plan, refusal)?,
            }
        }
    }

    /// Returns a block to the cache, coalescing it with free neighbours: the
    /// next request may reuse its bytes at once.
    pub fn free(&mut self, id: crate::BlockId) -> Result<()> {
        let (b, row) = self.take_live(id)?;
        store::log_free(&mut self.recorder, row);
        self.make_free(b);
        Ok(())
    }

    /// Frees block `id` for good: its segment, if nothing else lives there
    /// (no block pending, not pinned), goes back to the device at once,
    /// abandoned (its handle dropped, not destroyed), instead of serving
    /// another request. For a block of its own segment whose memory no later
    /// owner may be handed: a staging buffer a mapped view still reads, which
    /// wgpu frees once the view is gone. Returns the bytes released.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let staging = e.allocate(Request { exclusive: true, ..Request::new(4096, 1) })?;
    /// assert_eq!(e.retire(staging.id)?, 4096);
    /// assert_eq!(e.reserved_bytes(), 0);
    /// assert_eq!(e.stats().counters.segments_abandoned, 1);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn retire(&mut self, id: crate::BlockId) -> Result<u64> {
        let (b, row) = self.take_live(id)?;
        store::log_free(&mut self.recorder, row);
        let before = self.counters.bytes_released;
        let segment = self.blocks[b as usize].segment;
        // Abandoned before the cache limit trims: a trim would destroy it,
        // and wgpu unmaps a destroyed buffer under the view still reading it.
        self.make_free_untrimmed(b);
        if self.release_segment(segment, true) > 0 {
            self.backend.flush_releases();
        }
        self.trim_cache();
        Ok(self.counters.bytes_released - before)
    }

    /// Whether `id` is a live block of this engine.
    #[cfg(feature = "wgpu")]
    pub(crate) fn is_live(&self, id: crate::BlockId) -> bool {
        self.live_block(id).is_ok()
    }

    /// Counts `n` allocations a caller served itself by handing a block
    /// freed to it straight to its next owner, without a free and an
    /// allocate here (the wgpu binding's handle cache): the figures of `n`
    /// cache hits and `n` frees.
    #[cfg(feature = "wgpu")]
    pub(crate) fn count_handed_on(&mut self, n: u64) {
        self.counters.allocs += n;
        self.counters.frees += n;
        self.counters.cache_hits += n;
        self.counters.front_hits += n;
    }

    /// Counts an out-of-memory of `requested` bytes, calls the observers, and
    /// returns the error describing the pool's state.
    fn oom(&mut self, requested: u64, device_refused: bool) -> Error {
        self.counters.ooms += 1;
        let info = OomInfo {
            requested,
            allocated: self.total.allocated_bytes.current,
            reserved: self.total.reserved_bytes.current,
            cached: self.total.cached_bytes.current,
            pending: self.total.pending_bytes.current,
            in_flight: self.in_flight.load(std::sync::atomic::Ordering::Relaxed),
            limit: self.limit,
            device_refused,
        };
        for o in &self.observers {
            o(&info);
        }
        Error::OutOfMemory(info)
    }
}

impl<B: Backend> Drop for Engine<B> {
    fn drop(&mut self) {
        if let Some(report) = crate::snapshot::leak_report(&self.leaks()) {
            tracing::warn!("{report}");
        }
    }
}
