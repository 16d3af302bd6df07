//! How the engine places and releases memory.

use serde::{Deserialize, Serialize};

/// A hard cap on reserved bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Limit {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this fraction of the capacity (given in [`Config::capacity`] or
    /// reported by the backend), like `set_per_process_memory_fraction`.
    Fraction(f64),
}

/// Whether `f` is a memory fraction a limit may be: in (0, 1], as
/// PyTorch's `set_per_process_memory_fraction` takes.
pub(crate) fn fraction_ok(f: f64) -> Result<(), String> {
    if f > 0.0 && f <= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "a memory fraction must be above 0 and at most 1 (of the device's capacity), got \
             {f}; for a limit in bytes give Limit::Bytes"
        ))
    }
}

/// What a hard limit is for, which decides how the pool places requests
/// under it.
///
/// A budget the workload is meant to fill wants the tightest fit from the
/// first request; a ceiling far above what the workload needs wants the pool
/// to behave as if there were none. No placement does both (BENCHMARKS.md,
/// "A limit as a budget or as a ceiling"): exact segments make the smallest
/// budgets, and re-create segments when the limit is loose.
///
/// ```
/// use vrampool::{Config, Engine, Limit, LimitKind, Request, SimulatedDevice};
/// let engine = |limit_kind| {
///     let config = Config {
///         limit: Some(Limit::Bytes(4 << 30)), // far above what is asked below
///         limit_kind,
///         ..Config::default()
///     };
///     Engine::new(SimulatedDevice::new(8 << 30), config)
/// };
/// let (mut ceiling, mut budget) = (engine(LimitKind::Ceiling)?, engine(LimitKind::Budget)?);
/// for e in [&mut ceiling, &mut budget] {
///     let a = e.allocate(Request::new(3 << 20, 0))?;
///     e.free(a.id)?;
///     let b = e.allocate(Request::new(1 << 20, 0))?; // fills a third of the cached block
///     e.free(b.id)?;
/// }
/// // Under the ceiling, as with no limit, the 1 MiB tensor takes part of the
/// // cached 3 MiB block; under the budget it gets an exact segment of its own.
/// assert_eq!(ceiling.stats().counters.device_allocs, 1);
/// assert_eq!(budget.stats().counters.device_allocs, 2);
/// # Ok::<(), vrampool::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum LimitKind {
    /// A budget to fit the workload into (the default): from the first
    /// request the pool places with [`Config::under_limit`] — exact segments
    /// for all but the smallest requests, a cached block reused only by a
    /// request that fills 90 % of it, no soft headroom — so it never pins
    /// memory the limit may need back. On the corpus the smallest budget
    /// with no OOM is within 1.03 × peak live + 1 MiB on every row.
    /// The price, when the limit is far above what the workload needs: the
    /// cache fills up to the limit with segments of exact sizes and turns
    /// over (at 1.5 × peak live the corpus made 140 784 device allocations,
    /// PyTorch's scheme 3 648).
    #[default]
    Budget,
    /// A ceiling for safety, as PyTorch's `set_per_process_memory_fraction`
    /// is: the pool places with [`Config::without_limit`] and its soft
    /// headroom, as with no limit, and the limit acts only when a request
    /// would pass it (shrink the segment, release cached segments, take any
    /// cached block, then fail). A ceiling the workload never reaches
    /// changes nothing; near peak live it fails sooner than a budget (on
    /// the corpus of 2026-12-01, OOMs at 1.1 × peak live on 17 of its 54
    /// rows, a budget on none, PyTorch's scheme on 35).
    Ceiling,
}

/// Whether the pool grows on demand or reserves memory up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Growth {
    /// Create segments as requests need them (TensorFlow's `set_memory_growth(True)`).
    #[default]
    OnDemand,
    /// Reserve this many bytes in one segment of the default pool at start
    /// (JAX's preallocation). The segment is pinned: trims and `empty_cache()` keep it.
    /// A buffer's usage is fixed when it is made, so it serves the requests
    /// of [`Config::default_usage`] that may share a buffer first (through
    /// `Pool`, blocks allocated `.read_write()`); other usages, and exclusive
    /// requests, get segments of their own. The soft headroom's target is
    /// never below the preallocation, so those are not released to make room
    /// for it.
    Preallocate(u64),
}

/// Which cached segments the soft headroom and the hard limit give back
/// first. (The cache limit always releases the least recently used first:
/// it trims after every free, and the segment just freed is the one a loop
/// wants next. The out-of-memory ladder and `empty_cache` release them all.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ReleaseOrder {
    /// The most recently used first: a training or serving loop needs next
    /// what it used longest ago, so this keeps what the loop wants (the
    /// default; BENCHMARKS.md has what it changed on the trace corpus).
    #[default]
    MostRecentlyUsed,
    /// The least recently used first.
    LeastRecentlyUsed,
}

/// Where requests go: size classes, segment sizes and when a cached block may
/// be split. The engine uses [`Config::under_limit`] while a hard limit is set
/// as a [`LimitKind::Budget`] and [`Config::without_limit`] otherwise; the two
/// defaults are measured on the shared PyTorch traces (BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Requests up to this size are small: packed into small segments.
    pub small_request: u64,
    /// Size of a small segment.
    pub small_segment: u64,
    /// A new small segment is at least this fraction of the bytes small
    /// segments already hold (0 = always `small_segment`), up to
    /// `max_small_segment`: fewer device allocations as a workload grows.
    pub small_segment_growth: f64,
    /// Cap on grown small segments.
    pub max_small_segment: u64,
    /// A grown small segment is also at most this fraction of the most bytes
    /// ever allocated (0 = no such cap): the newest segment is the emptiest,
    /// so in a small workload it must stay small.
    #[serde(default)]
    pub small_segment_fraction: f64,
    /// Requests up to this size (and above `small_request`) share medium segments.
    pub medium_request: u64,
    /// Size of a medium segment.
    pub medium_segment: u64,
    /// Requests above this fraction of the most bytes ever allocated are
    /// large even below `medium_request` (0 = off): a small workload's big
    /// tensors get segments of their own instead of half-filled shared ones.
    #[serde(default)]
    pub medium_request_fraction: f64,
    /// A new medium segment is at most this fraction of the most bytes ever
    /// allocated (but never less than `medium_segment_blocks` × the
    /// request), so a small workload does not reserve a `medium_segment` it
    /// cannot fill; 0 turns the cap off.
    pub medium_segment_fraction: f64,
    /// A new medium segment holds at least this many blocks of the size of
    /// the request it is made for, whatever `medium_segment_fraction` (or,
    /// under a budget, an eighth of the budget) caps, up to `medium_segment` (at
    /// least 1). A whole number, so a size that recurs fills the segment
    /// without a sliver left over; three rather than two, so recurring sizes
    /// share fewer segments (BENCHMARKS.md, "Sweeps over the resized corpus").
    /// A configuration saved without the field reads as 2, as it behaved.
    #[serde(default = "two_blocks")]
    pub medium_segment_blocks: u64,
    /// Larger requests get a segment of their own, rounded up to a multiple of this.
    pub large_rounding: u64,
    /// A large free block is split only if the remainder is at least this big;
    /// smaller remainders stay inside the block.
    pub min_split_remainder: u64,
    /// Scales [`Placement::min_split_remainder`] down for a small workload: a
    /// remainder of at least this fraction of the most bytes ever allocated
    /// is split off too (never less than the alignment; 0 = off, which is
    /// also what a configuration saved without the field reads as). A
    /// remainder left inside a block is allocated bytes no request asked for:
    /// at ÷64 a trace's 1.5–2.4 MiB tensors kept up to 0.9 MiB each.
    #[serde(default)]
    pub split_remainder_fraction: f64,
    /// A cached large block serves a request only if the request fills at least
    /// this fraction of it (0 = any larger block is split).
    pub large_fit: f64,
    /// A cached block of at least `split_guard × headroom × peak allocated`
    /// bytes follows [`Placement::GUARDED_FIT`] whatever `large_fit` says: a small block left
    /// in it would pin more than the headroom. `None` splits every block by
    /// `large_fit`.
    pub split_guard: Option<f64>,
    /// Small and medium requests may split a cached large block before a new
    /// segment is made.
    pub reuse_large_blocks: bool,
    /// Among the cached large blocks that may serve a request and are at most
    /// this fraction larger than the best fit (up to
    /// [`Placement::FULLEST_CANDIDATES`] of them), the one whose segment holds
    /// the most live blocks serves it; ties go to the best fit. Packing into
    /// the busiest segments lets the others empty, so the soft headroom can
    /// release them, and leaves fewer free gaps in partly live segments at
    /// the peak. 0 is best fit alone, as in PyTorch's allocator, and is what a
    /// configuration saved without the field reads as. 1/16 with no limit
    /// or under a ceiling (0 under a budget): on the corpus as recorded
    /// the rows missing the no-limit target went from 15 to 14 of 63, and
    /// from 92 to 84 of the 315 resized × 0.75–1.25 (no gain on sizes
    /// jittered apart: 551 → 553 of 1 512); preferring the segment with the
    /// *fewest* live blocks instead (at 5 %) made them 22 and 112
    /// (BENCHMARKS.md, "The fullest segment first").
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mib = 1u64 << 20;
    /// let served_beside_the_live_block = |fullest_within| {
    ///     let mut config = Config::default();
    ///     config.without_limit.fullest_within = fullest_within;
    ///     let mut e = Engine::new(SimulatedDevice::new(1 << 30), config)?;
    ///     let a = e.allocate(Request::new(66 * mib, 0))?; // segment 0
    ///     let b = e.allocate(Request::new(61 * mib, 0))?; // segment 1
    ///     e.free(a.id)?;
    ///     let small = e.allocate(Request::new(4 * mib, 0))?; // in segment 0, 62 MiB free beside it
    ///     e.free(b.id)?; // segment 1 holds nothing live
    ///     let c = e.allocate(Request::new(58 * mib, 0))?;
    ///     assert_eq!(small.segment, a.segment);
    ///     Ok::<_, vrampool::Error>(c.segment == a.segment)
    /// };
    /// // Best fit alone takes segment 1's 61 MiB: both segments stay partly live.
    /// assert!(!served_beside_the_live_block(0.0)?);
    /// // The default takes the 62 MiB beside the live block (within 1/16 of
    /// // the best fit): segment 1 stays empty, for the headroom to release.
    /// assert!(served_beside_the_live_block(1.0 / 16.0)?);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    #[serde(default)]
    pub fullest_within: f64,
}

impl Placement {
    /// The fit that guarded blocks follow (see [`Placement::split_guard`]).
    pub const GUARDED_FIT: f64 = 0.5;

    /// How many cached large blocks, from the best fit up,
    /// [`Placement::fullest_within`] looks at.
    pub const FULLEST_CANDIDATES: usize = 8;

    /// For a pool under a budget ([`LimitKind::Budget`]): nothing shared that
    /// the limit may need back. Requests above 96 KiB get a segment of their own (there is no
    /// medium class), which the pool can give back whole the moment the limit
    /// needs it; smaller ones share 1 MiB segments; a cached large block serves
    /// only requests that fill 90 % of it, so a small tensor never pins a big
    /// block (the failure PyTorch's `max_split_size` exists for). On the 63
    /// trace × scale rows of data/traces (held-out traces included) this
    /// keeps the smallest budget within 1.03 × peak live + 1 MiB and at or
    /// below the PyTorch preset's on every row (with requests up to 256 KiB
    /// shared, two rows missed it; with 1–4 MiB requests packed into 32 MiB
    /// segments, 30 of the 45 tuned ones; BENCHMARKS.md).
    pub fn under_limit() -> Self {
        Placement {
            small_request: 96 << 10,
            small_segment: 1 << 20,
            small_segment_growth: 0.0,
            max_small_segment: 1 << 20,
            small_segment_fraction: 0.0,
            medium_request: 0,
            medium_segment: 32 << 20,
            medium_segment_fraction: 0.0,
            medium_segment_blocks: 2,
            medium_request_fraction: 0.0,
            large_rounding: 256,
            min_split_remainder: 1 << 20,
            split_remainder_fraction: 0.0,
            large_fit: 0.9,
            split_guard: None,
            reuse_large_blocks: false,
            fullest_within: 0.0,
        }
    }

    /// For a pool that grows on demand: shared segments that follow the
    /// workload, and any cached block split for a smaller request (best fit,
    /// as in PyTorch's allocator, except that among large blocks near the best
    /// fit the busiest segment's serves, see [`Placement::fullest_within`]; no
    /// split guard: with one, the corpus missed the standing targets on more
    /// rows, resized or not). Every size scales with
    /// the most bytes the workload ever allocated (its high water H): requests
    /// above H / 50 (at most 192 MiB) get their own segment; a medium segment
    /// is H / 32 (at least three times the request, up to 384 MiB); small segments
    /// start at 2 MiB and grow by 1/8 of what small segments hold, up to
    /// H / 64 and 32 MiB; a large block's remainder is split off from
    /// H / 2048 (1 MiB from H = 2 GiB up). A 10 MiB workload and a 100 GiB
    /// one both land near their live bytes: on the corpus at ÷1, ÷16 and ÷64
    /// the mean ratio went from 1.92 (fixed 8 MiB / 384 MiB segments) to
    /// 1.22, and to 1.205 with the split remainders; without the split guard
    /// the 54 rows miss the no-limit target on 14 rows instead of 19 and
    /// create 1.04 × PyTorch's bytes of segments at full size instead of
    /// 1.14 ×; with medium segments of at least three requests rather than
    /// two (and the headroom's floor at 8 MiB), 15 of the 63 rows instead of
    /// 18, and 92 of the 315 rows of the corpus resized × 0.75–1.25 instead
    /// of 103; and with the fullest segment first, 14 and 84 (BENCHMARKS.md).
    pub fn without_limit() -> Self {
        Placement {
            small_request: 1 << 20,
            small_segment: 2 << 20,
            small_segment_growth: 0.125,
            max_small_segment: 32 << 20,
            small_segment_fraction: 1.0 / 64.0,
            medium_request: 192 << 20,
            medium_segment: 384 << 20,
            medium_segment_fraction: 1.0 / 32.0,
            medium_segment_blocks: 3,
            medium_request_fraction: 0.02,
            large_rounding: 256,
            min_split_remainder: 1 << 20,
            split_remainder_fraction: 1.0 / 2048.0,
            large_fit: 0.0,
            split_guard: None,
            reuse_large_blocks: true,
            fullest_within: 1.0 / 16.0,
        }
    }
}

/// How the engine places and releases memory. [`Config::default`] is the
/// measured default; see BENCHMARKS.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Hard cap on reserved bytes; `None` means only the device limits.
    pub limit: Option<Limit>,
    /// Whether [`Config::limit`] is a budget to fill or a ceiling for
    /// safety, which decides the placement under it. A configuration saved
    /// without the field reads as [`LimitKind::Budget`], as it behaved.
    #[serde(default)]
    pub limit_kind: LimitKind,
    /// Device capacity for [`Limit::Fraction`], overriding the backend's.
    pub capacity: Option<u64>,
    /// Free bytes in segments that hold no live block (pinned ones
    /// excepted: the preallocation, a followed plan's) above this are
    /// released after each free,
    /// least recently used segment first (MLX's `set_cache_limit`; 0 gives
    /// back every such segment). Free space beside live blocks is not
    /// counted: no release can reach it.
    pub cache_limit: Option<u64>,
    /// Growth on demand or preallocation.
    pub growth: Growth,
    /// Soft headroom: without a hard limit (or under a ceiling), the pool
    /// keeps reserved bytes near `(1 + headroom) ×` the highest allocated
    /// bytes so far by releasing unused cached segments
    /// before it creates a new one (or, with [`Config::pack_before_release`] in
    /// a profile that refuses some splits, by packing the request into a cached
    /// block instead). `None` disables it
    /// (cache everything).
    /// Under a hard limit set as a [`LimitKind::Budget`] it does not act: the
    /// limit is the cap, and releasing below it only re-creates the same
    /// segments (at a limit of 1.5 × peak live it made 1.8 × the device
    /// allocations on the corpus). Under a [`LimitKind::Ceiling`] it acts as
    /// with no limit.
    pub headroom: Option<f64>,
    /// The soft headroom stops buying memory with churn: once it has released
    /// this many × the high water (the most bytes ever allocated) since its
    /// target last grew, the segment it would release for is added to its
    /// target instead, so a loop whose working set is above the target stops
    /// re-creating the same segments every iteration. The count starts again
    /// whenever the high water rises. 0 turns this off.
    #[serde(default)]
    pub churn_limit: f64,
    /// Which cached segments the soft headroom and the hard limit give back first.
    #[serde(default)]
    pub release_order: ReleaseOrder,
    /// Cap on what [`Config::churn_limit`] adds to the soft headroom's target,
    /// as a fraction of the high water.
    #[serde(default)]
    pub max_headroom_credit: f64,
    /// Once the engine has made a segment of the same pool, class and size as
    /// one of the last 64 the soft headroom released (the workload's loop
    /// came back for it), then before the soft headroom releases cached
    /// segments to make room for a new one, it serves the request from any
    /// cached block that holds it, even one the split guard or `large_fit`
    /// would refuse: releasing a free block only to create another buys
    /// memory with churn. Waiting for that evidence keeps a
    /// workload's first pass (where long-lived tensors such as optimizer state
    /// are made) from pinning big blocks. `false` is also what a configuration
    /// saved without the field reads as; BENCHMARKS.md has the figures.
    /// It acts only in a profile that refuses some splits (a
    /// [`Placement::split_guard`] or a `large_fit` above 0): the default
    /// splits any cached block, so there the cache serves such a request
    /// before the headroom is asked.
    #[serde(default)]
    pub pack_before_release: bool,
    /// Under a hard limit, a request that would not fit even with every
    /// cached segment without a live block released takes the smallest
    /// cached block of any shared class (small, medium, large) that holds it,
    /// releasing nothing, rather than fail out of memory while the budget's
    /// bytes sit cached — a large request in the free end of a small segment,
    /// say. PyTorch's allocator has no such step (off in
    /// [`Config::pytorch`]). A device's own refusal does not take it: there
    /// the whole cache is released and the request asked for once more (see
    /// [`Engine::refused`](crate::Engine::refused)). When it was added (c6917dc) it
    /// lowered the smallest budget with no OOM of small_loop ÷16 from 1.417 to
    /// 1.223 × peak live (BENCHMARKS.md; 1.081 with today's placement). `false` is also what a configuration
    /// saved without the field reads as.
    #[serde(default)]
    pub any_block_before_oom: bool,
    /// Under a hard limit, segments are sized to it: a new segment that
    /// would pass the limit is made smaller, down to the request, so the
    /// room left is used before any cached segment is released; and under
    /// a [`LimitKind::Budget`] a shared medium segment is at most an eighth
    /// of the budget. `false` is PyTorch's caching allocator: under a limit
    /// a segment is the size its request asks for (2 MiB, 20 MiB, or the
    /// request rounded to 2 MiB in [`Config::pytorch`]; not padded to the
    /// device's blocks, [`Config::fit_device_blocks`]) or nothing; one that
    /// would pass the limit releases every cached segment with nothing live
    /// in it and is asked once more. If not even that makes room, the
    /// request takes any cached block that holds it where
    /// [`Config::any_block_before_oom`] says so, else runs out of memory
    /// with its cache kept and no retry counted (PyTorch releases the cache
    /// and counts a retry first; a replay's first out-of-memory is all the
    /// smallest budget counts). Off in [`Config::pytorch`], so that the
    /// preset's smallest budgets are PyTorch's: with it on, the preset fitted
    /// small_loop ÷64 in 1.2 × peak live, in one shrunk 746 KiB segment,
    /// where PyTorch needed 3.3 × (one 2 MiB segment), and was within one
    /// step of the grid of PyTorch's own figure on 14 of the 72 rows the
    /// corpus had then (60 with it off; BENCHMARKS.md, "PyTorch's scheme's budgets are
    /// PyTorch's"). A configuration saved without the field reads as
    /// `true`.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Limit, Request, SimulatedDevice};
    /// let fits = |fit_to_limit| {
    ///     let config = Config { limit: Some(Limit::Bytes(1 << 20)), fit_to_limit, ..Config::pytorch() };
    ///     let mut e = Engine::new(SimulatedDevice::new(1 << 30), config)?;
    ///     // A small request asks for a 2 MiB segment: shrunk to the 1 MiB
    ///     // the limit leaves, or refused as PyTorch refuses it.
    ///     Ok::<_, vrampool::Error>(e.allocate(Request::new(4096, 0)).is_ok())
    /// };
    /// assert!(fits(true)?);
    /// assert!(!fits(false)?);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    #[serde(default = "yes")]
    pub fit_to_limit: bool,
    /// The soft headroom does not act while reserved bytes are below this, so
    /// small workloads still pack their blocks into shared segments (8 MiB
    /// by default; 4 MiB before medium segments held three requests, see
    /// [`Placement::medium_segment_blocks`]).
    pub headroom_floor: u64,
    /// Offset alignment and size granularity of blocks (wgpu's
    /// `min_storage_buffer_offset_alignment`, 256).
    pub alignment: u64,
    /// Placement while a hard limit is set as a [`LimitKind::Budget`].
    pub under_limit: Placement,
    /// Placement with no hard limit, or one set as a [`LimitKind::Ceiling`].
    pub without_limit: Placement,
    /// Largest segment the pool will create, if below the backend's limit.
    pub max_segment_size: Option<u64>,
    /// The pool used by [`Growth::Preallocate`].
    pub default_usage: u32,
    /// Medium and large blocks share one best-fit index, as in PyTorch's
    /// "large pool": a request of 1–10 MiB may split a cached large block and a
    /// large request may use a medium segment. Off by default: with the soft
    /// headroom it missed the 1.10 × target on 14 of the 45 tuned rows
    /// against 8 without it (BENCHMARKS.md).
    pub shared_large_pool: bool,
    /// Without a budget, the engine moves [relocatable](crate::Request::relocatable)
    /// blocks to serve a request from memory it holds instead of a new
    /// segment: on a miss, the relocatable blocks of the cheapest range of
    /// the request's size (at most its size in live bytes) go to free blocks
    /// of other segments and the range serves it; and when the soft headroom
    /// would pass its target with nothing left to release, it empties partly
    /// live segments that way and releases them. Only in pools whose segments
    /// the backend can copy between ([`Backend::can_move`](crate::Backend::can_move)). On the
    /// corpus with every tensor relocatable, the rows missing R go from 14 of
    /// 63 to 2 (BENCHMARKS.md, "Relocatable blocks"). It does nothing to a
    /// block not asked as relocatable; off in [`Config::pytorch`]. Under a
    /// budget it does not act: moving a block into a cached segment pins
    /// memory the limit would give back whole (on the corpus, moves under a
    /// budget made 48 rows miss the smallest-budget target). Not in wasm32
    /// builds, which leave the moving code out (the page's size target; a
    /// browser `Pool` has no movable blocks): there nothing moves. A
    /// configuration saved without the field reads as `true`.
    #[serde(default = "yes")]
    pub relocate: bool,
    /// Where the device's own allocator places segments in shared blocks
    /// ([`Backend::suballocation`](crate::Backend::suballocation): wgpu on
    /// Vulkan), a new segment above a quarter of its largest block is sized
    /// to what the device sets aside for it anyway: the free range it would
    /// go to, or a whole new block. Under wgpu's default hints a 150 MiB
    /// segment takes a 256 MiB block of its own; the pool then holds the
    /// 106 MiB beside it for its next requests instead of leaving them to
    /// a segment of a size that may never come, and the segments it releases
    /// leave ranges the next ones fill. A segment the soft headroom or a
    /// ceiling trims is the range the request alone would take, if that is
    /// no larger; and the soft headroom releases cache for the fitted size
    /// (making room only for the unfitted one, and fitting what then fits,
    /// made more device memory and churn on the corpus: 4 886 against 4 684
    /// estimated ms, `data/lab/device-blocks`). Not under a budget (its segments are exact by design),
    /// and nothing on a backend that reports no sub-allocation (the plain
    /// simulated device, Metal, GL, the browser; DX12, which sub-allocates
    /// but is not modelled; wasm32 builds leave it out). On by default; off in [`Config::pytorch`]. BENCHMARKS.md, "What
    /// wgpu's allocator does with the segments", has the H100 figures. A
    /// configuration saved without the field reads as `true`.
    #[serde(default = "yes")]
    pub fit_device_blocks: bool,
}

fn yes() -> bool {
    true
}

impl Config {
    /// PyTorch's CUDA caching allocator, expressed in this engine's terms: a
    /// baseline to compare against, not a recommendation. Sizes round to 512 B;
    /// requests up to 1 MiB share 2 MiB segments, below 10 MiB share 20 MiB
    /// segments, larger ones get their own segment rounded to 2 MiB; medium and
    /// large blocks share one best-fit index (PyTorch's large pool) and split
    /// only if more than 1 MiB is left; small blocks split freely; no soft
    /// headroom, and the cache is released only when a request fails; a
    /// hard limit leaves these sizes as they are ([`Config::fit_to_limit`]
    /// off). A device's own refusal takes the engine's steps all the same:
    /// the request alone, then the whole cache released
    /// ([`Engine::refused`](crate::Engine::refused)), where PyTorch asks
    /// for the same size again after releasing.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::pytorch())?;
    /// e.allocate(Request::new(1000, 0))?;
    /// assert_eq!(e.stats().total.reserved_bytes.current, 2 << 20); // one 2 MiB small segment
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn pytorch() -> Self {
        let placement = Placement {
            small_request: 1 << 20,
            small_segment: 2 << 20,
            small_segment_growth: 0.0,
            max_small_segment: 2 << 20,
            small_segment_fraction: 0.0,
            medium_request: (10 << 20) - 512,
            medium_segment: 20 << 20,
            medium_segment_fraction: 0.0,
            medium_segment_blocks: 2,
            medium_request_fraction: 0.0,
            large_rounding: 2 << 20,
            min_split_remainder: (1 << 20) + 512,
            split_remainder_fraction: 0.0,
            large_fit: 0.0,
            split_guard: None,
            reuse_large_blocks: false,
            fullest_within: 0.0,
        };
        Config {
            headroom: None,
            alignment: 512,
            release_order: ReleaseOrder::LeastRecentlyUsed,
            pack_before_release: false,
            any_block_before_oom: false,
            fit_to_limit: false,
            shared_large_pool: true,
            relocate: false,
            fit_device_blocks: false,
            under_limit: placement.clone(),
            without_limit: placement,
            ..Config::default()
        }
    }
}

/// What a configuration saved without [`Placement::medium_segment_blocks`]
/// reads as.
fn two_blocks() -> u64 {
    2
}

/// Refuses a knob that must be a finite, non-negative number.
fn non_negative(name: &str, x: f64) -> Result<(), String> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be finite and not negative, got {x}"))
    }
}

impl Placement {
    /// Refuses a profile that cannot work, naming the field.
    fn validate(&self, which: &str) -> Result<(), String> {
        let fraction = |name: &str, x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(())
            } else {
                Err(format!(
                    "{which}.{name} must be a fraction in 0..=1, got {x}"
                ))
            }
        };
        fraction("small_segment_fraction", self.small_segment_fraction)?;
        fraction("medium_segment_fraction", self.medium_segment_fraction)?;
        fraction("medium_request_fraction", self.medium_request_fraction)?;
        fraction("split_remainder_fraction", self.split_remainder_fraction)?;
        fraction("large_fit", self.large_fit)?;
        non_negative(
            &format!("{which}.small_segment_growth"),
            self.small_segment_growth,
        )?;
        non_negative(&format!("{which}.fullest_within"), self.fullest_within)?;
        if let Some(k) = self.split_guard
            && !(k.is_finite() && k > 0.0)
        {
            return Err(format!(
                "{which}.split_guard must be finite and positive, got {k}"
            ));
        }
        for (name, v) in [
            ("small_segment", self.small_segment),
            ("large_rounding", self.large_rounding),
        ] {
            if v == 0 {
                return Err(format!("{which}.{name} must be at least 1 byte, got 0"));
            }
        }
        if self.medium_segment_blocks == 0 {
            return Err(format!(
                "{which}.medium_segment_blocks must be at least 1 (a segment holds its own request), got 0"
            ));
        }
        Ok(())
    }
}

impl Config {
    /// The largest segment this configuration lets a pool make on a device
    /// whose largest buffer is `device_max`: [`Config::max_segment_size`]
    /// where that is lower. (An engine also caps it at 2^62 bytes, its
    /// addresses' room: [`Engine::max_segment_size`](crate::Engine::max_segment_size).)
    ///
    /// ```
    /// use vrampool::Config;
    /// let c = Config { max_segment_size: Some(16 << 20), ..Config::default() };
    /// assert_eq!(c.largest_segment(4 << 30), 16 << 20);
    /// assert_eq!(Config::default().largest_segment(4 << 30), 4 << 30);
    /// ```
    pub fn largest_segment(&self, device_max: u64) -> u64 {
        self.max_segment_size
            .map_or(device_max, |m| m.min(device_max))
    }

    /// Refuses a configuration that cannot work, with a message naming the
    /// field and the value ([`Engine::new`](crate::Engine::new) calls it).
    ///
    /// ```
    /// use vrampool::Config;
    /// let bad = Config { churn_limit: f64::NAN, ..Config::default() };
    /// assert!(bad.validate().unwrap_err().contains("churn_limit"));
    /// assert!(Config::default().validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.alignment == 0 || !self.alignment.is_power_of_two() {
            return Err(format!(
                "alignment must be a power of two, got {}",
                self.alignment
            ));
        }
        if let Some(h) = self.headroom {
            non_negative("headroom", h)?;
        }
        if let Some(m) = self.max_segment_size
            && m < self.alignment
        {
            return Err(format!(
                "max_segment_size must be at least the alignment ({} B), got {m}: no segment could hold a block",
                self.alignment
            ));
        }
        if let Some(crate::Limit::Fraction(f)) = self.limit {
            fraction_ok(f).map_err(|why| format!("limit: {why}"))?;
        }
        non_negative("churn_limit", self.churn_limit)?;
        non_negative("max_headroom_credit", self.max_headroom_credit)?;
        self.under_limit.validate("under_limit")?;
        self.without_limit.validate("without_limit")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limit: None,
            limit_kind: LimitKind::Budget,
            capacity: None,
            cache_limit: None,
            growth: Growth::OnDemand,
            headroom: Some(0.085),
            headroom_floor: 8 << 20,
            churn_limit: 2.0,
            release_order: ReleaseOrder::MostRecentlyUsed,
            max_headroom_credit: 0.2,
            pack_before_release: true,
            any_block_before_oom: true,
            fit_to_limit: true,
            alignment: 256,
            under_limit: Placement::under_limit(),
            without_limit: Placement::without_limit(),
            max_segment_size: None,
            default_usage: 0,
            shared_large_pool: false,
            relocate: true,
            fit_device_blocks: true,
        }
    }
}
