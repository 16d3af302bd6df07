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

/// Whether the pool grows on demand or reserves memory up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Growth {
    /// Create segments as requests need them (TensorFlow's `set_memory_growth(True)`).
    #[default]
    OnDemand,
    /// Reserve this many bytes in one segment of the default pool at start
    /// (JAX's preallocation). The segment is pinned: trims and `empty_cache()` keep it.
    Preallocate(u64),
}

/// Where requests go: size classes, segment sizes and when a cached block may
/// be split. The engine uses [`Config::under_limit`] while a hard limit is set
/// and [`Config::without_limit`] otherwise; the two defaults are measured on
/// the shared PyTorch traces (BENCHMARKS.md).
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
    /// Requests up to this size (and above `small_request`) share medium segments.
    pub medium_request: u64,
    /// Size of a medium segment.
    pub medium_segment: u64,
    /// A new medium segment is at most this fraction of the most bytes ever
    /// allocated (but never less than twice the request), so a small workload
    /// does not reserve a `medium_segment` it cannot fill; 0 turns the cap off.
    pub medium_segment_fraction: f64,
    /// Larger requests get a segment of their own, rounded up to a multiple of this.
    pub large_rounding: u64,
    /// A large free block is split only if the remainder is at least this big;
    /// smaller remainders stay inside the block.
    pub min_split_remainder: u64,
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
}

impl Placement {
    /// The fit that guarded blocks follow (see [`Placement::split_guard`]).
    pub const GUARDED_FIT: f64 = 0.5;

    /// For a pool under a hard limit: tight packing that never pins memory the
    /// limit may need back. A small tensor never lands in a large segment, and a
    /// cached large block serves only requests that fill three quarters of it —
    /// the failure PyTorch's `max_split_size` exists for (a 728 MB tensor pinning
    /// a 1.53 GiB logits segment once raised gpt_train's minimum budget from
    /// 1.007 × to 1.10 ×).
    pub fn under_limit() -> Self {
        Placement {
            small_request: 1 << 20,
            small_segment: 2 << 20,
            small_segment_growth: 0.0,
            max_small_segment: 2 << 20,
            medium_request: 4 << 20,
            medium_segment: 32 << 20,
            medium_segment_fraction: 0.0,
            large_rounding: 256,
            min_split_remainder: 1 << 20,
            large_fit: 0.75,
            split_guard: None,
            reuse_large_blocks: false,
        }
    }

    /// For a pool that grows on demand: fewer, bigger segments, and cached
    /// blocks split freely, except blocks so big that pinning one would cost
    /// more than the headroom.
    pub fn without_limit() -> Self {
        Placement {
            small_request: 1 << 20,
            small_segment: 8 << 20,
            small_segment_growth: 0.5,
            max_small_segment: 32 << 20,
            medium_request: 192 << 20,
            medium_segment: 384 << 20,
            medium_segment_fraction: 0.5,
            large_rounding: 256,
            min_split_remainder: 1 << 20,
            large_fit: 0.0,
            split_guard: Some(1.0),
            reuse_large_blocks: true,
        }
    }
}

/// How the engine places and releases memory. [`Config::default`] is the
/// measured default; see BENCHMARKS.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Hard cap on reserved bytes; `None` means only the device limits.
    pub limit: Option<Limit>,
    /// Device capacity for [`Limit::Fraction`], overriding the backend's.
    pub capacity: Option<u64>,
    /// Free bytes in fully-free segments above this are released after each free
    /// (MLX's `set_cache_limit`; 0 turns caching off).
    pub cache_limit: Option<u64>,
    /// Growth on demand or preallocation.
    pub growth: Growth,
    /// Soft headroom: without a hard limit, the pool keeps reserved bytes near
    /// `(1 + headroom) ×` the highest allocated bytes so far by releasing unused cached segments
    /// before it creates a new one. `None` disables it (cache everything).
    pub headroom: Option<f64>,
    /// The soft headroom does not act while reserved bytes are below this, so
    /// small workloads still pack their blocks into shared segments.
    pub headroom_floor: u64,
    /// Offset alignment and size granularity of blocks (wgpu's
    /// `min_storage_buffer_offset_alignment`, 256).
    pub alignment: u64,
    /// Placement while a hard limit is set.
    pub under_limit: Placement,
    /// Placement while no hard limit is set.
    pub without_limit: Placement,
    /// Largest segment the pool will create, if below the backend's limit.
    pub max_segment_size: Option<u64>,
    /// The pool used by [`Growth::Preallocate`].
    pub default_usage: u32,
    /// Medium and large blocks share one best-fit index, as in PyTorch's
    /// "large pool": a request of 1–10 MiB may split a cached large block and a
    /// large request may use a medium segment. Off by default: on the shared
    /// traces it raised the unlimited ratios to 1.080 / 1.067 / 1.051 (BENCHMARKS.md).
    pub shared_large_pool: bool,
}

impl Config {
    /// PyTorch's CUDA caching allocator, expressed in this engine's terms: a
    /// baseline to compare against, not a recommendation. Sizes round to 512 B;
    /// requests up to 1 MiB share 2 MiB segments, below 10 MiB share 20 MiB
    /// segments, larger ones get their own segment rounded to 2 MiB; medium and
    /// large blocks share one best-fit index (PyTorch's large pool) and split
    /// only if more than 1 MiB is left; small blocks split freely; no soft
    /// headroom, and the cache is released only when a request fails.
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
            medium_request: (10 << 20) - 512,
            medium_segment: 20 << 20,
            medium_segment_fraction: 0.0,
            large_rounding: 2 << 20,
            min_split_remainder: (1 << 20) + 512,
            large_fit: 0.0,
            split_guard: None,
            reuse_large_blocks: false,
        };
        Config {
            headroom: None,
            alignment: 512,
            shared_large_pool: true,
            under_limit: placement.clone(),
            without_limit: placement,
            ..Config::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limit: None,
            capacity: None,
            cache_limit: None,
            growth: Growth::OnDemand,
            headroom: Some(0.085),
            headroom_floor: 32 << 20,
            alignment: 256,
            under_limit: Placement::under_limit(),
            without_limit: Placement::without_limit(),
            max_segment_size: None,
            default_usage: 0,
            shared_large_pool: false,
        }
    }
}
