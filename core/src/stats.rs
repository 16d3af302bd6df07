//! Statistics in PyTorch's vocabulary: allocated, reserved, active, cached,
//! requested, each current and peak, per pool and in total.

use serde::{Deserialize, Serialize};

use crate::fmt_bytes;

/// A quantity that has a current value and a peak since the last reset.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// Value now.
    pub current: u64,
    /// Highest value since the pool was made or [`reset_peak`](Stat::reset_peak).
    pub peak: u64,
}

impl Stat {
    #[inline]
    pub(crate) fn add(&mut self, n: u64) {
        self.current += n;
        if self.current > self.peak {
            self.peak = self.current;
        }
    }
    #[inline]
    pub(crate) fn sub(&mut self, n: u64) {
        debug_assert!(self.current >= n, "stat underflow");
        self.current -= n;
    }
    /// Takes back a peak set by a passing state no caller could see: the
    /// peak is `before`'s, or the current value if higher.
    #[inline]
    pub(crate) fn rewind_peak(&mut self, before: u64) {
        self.peak = before.max(self.current);
    }
    /// Sets the peak to the current value.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// Byte and count figures of one pool (or of all pools together).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Bytes the callers asked for, of live blocks.
    pub requested_bytes: Stat,
    /// Bytes of live blocks, after rounding to the block granularity.
    pub allocated_bytes: Stat,
    /// Bytes of device segments (buffers) held by the pool.
    pub reserved_bytes: Stat,
    /// Reserved bytes free for reuse (neither allocated nor pending).
    pub cached_bytes: Stat,
    /// Bytes of blocks dropped while commands recorded before the drop may not
    /// have been submitted: not reused until the pool learns they were
    /// (PyTorch's blocks awaiting free). reserved = allocated + pending + cached.
    pub pending_bytes: Stat,
    /// Live blocks.
    pub allocations: Stat,
    /// Device segments.
    pub segments: Stat,
    /// Free blocks inside segments.
    pub free_blocks: Stat,
    /// Pending blocks (see `pending_bytes`).
    pub pending_blocks: Stat,
}

impl PoolStats {
    /// Resets every peak to its current value.
    pub fn reset_peak(&mut self) {
        for s in [
            &mut self.requested_bytes,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.cached_bytes,
            &mut self.pending_bytes,
            &mut self.allocations,
            &mut self.segments,
            &mut self.free_blocks,
            &mut self.pending_blocks,
        ] {
            s.reset_peak();
        }
    }
}

/// Event counters, accumulated since the pool was made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Successful allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Allocations served from cached memory, with no device call.
    pub cache_hits: u64,
    /// Of `cache_hits`, those the wgpu binding's front cache served: a block
    /// the same thread dropped with the same description, handed on without
    /// the engine (see `PoolOptions::front_cache`).
    #[serde(default)]
    pub front_hits: u64,
    /// Allocations that needed a new device segment.
    pub cache_misses: u64,
    /// Device buffers created.
    pub device_allocs: u64,
    /// Device buffers given back: destroyed, or abandoned (dropped while
    /// blocks in them were pending, see `segments_abandoned`).
    pub device_frees: u64,
    /// Allocations that had to release cached memory and try again.
    pub alloc_retries: u64,
    /// Requests refused for lack of memory.
    pub ooms: u64,
    /// Bytes of the segments created: what the device spent making memory.
    pub bytes_created: u64,
    /// Bytes given back to the device by releases (empty_cache, limits, trims).
    pub bytes_released: u64,
    /// Bytes released by the last `empty_cache()`.
    pub last_empty_cache_bytes: u64,
    /// Segments given up rather than destroyed: released while they held
    /// pending blocks, so commands still recorded against them stay valid
    /// (wgpu frees them after those commands), or retired
    /// ([`Engine::retire`](crate::Engine::retire): a staging buffer a view
    /// still maps, freed once the view is gone).
    pub segments_abandoned: u64,
    /// Requests served by moving relocatable blocks out of their way instead
    /// of a new segment (see `Request::relocatable`).
    #[serde(default)]
    pub relocations: u64,
    /// Segments the soft headroom emptied by moving their relocatable blocks
    /// elsewhere, then released.
    #[serde(default)]
    pub evacuations: u64,
    /// Live blocks moved, for either.
    #[serde(default)]
    pub blocks_moved: u64,
    /// Their bytes: what the device copied.
    #[serde(default)]
    pub bytes_moved: u64,
}

/// Cache hits ÷ allocations served (hits and misses; refused requests are
/// neither): 0 with none.
pub(crate) fn hit_rate(hits: u64, misses: u64) -> f64 {
    hits as f64 / (hits + misses).max(1) as f64
}

impl Counters {
    /// Cache hits ÷ allocations served, what [`Stats::summary`] prints.
    pub fn hit_rate(&self) -> f64 {
        hit_rate(self.cache_hits, self.cache_misses)
    }

    /// Batches of moves: each relocation or evacuation copies its blocks
    /// in one command buffer ([`Backend::flush_moves`](crate::Backend::flush_moves)).
    pub fn move_batches(&self) -> u64 {
        self.relocations + self.evacuations
    }
}

/// Per-pool figures: which usage the pool serves and its stats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// Name of the pool, e.g. `storage` or `map_read`.
    pub name: String,
    /// The usage bits segments of this pool are created with.
    pub usage: u32,
    /// Figures of this pool.
    pub stats: PoolStats,
}

/// What [`Engine::stats`](crate::Engine::stats) returns: what
/// `torch.cuda.memory_stats()` gives, and fragmentation.
///
/// PyTorch's *active* bytes include blocks freed but still awaited by a stream;
/// here they are allocated + pending: a block dropped while commands recorded
/// before the drop may not have been submitted is pending until the pool learns
/// of the submit (see `Pool::submit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// All pools together.
    pub total: PoolStats,
    /// One entry per pool, in creation order.
    pub pools: Vec<PoolReport>,
    /// Event counters.
    pub counters: Counters,
    /// The largest free block: the biggest request that can be served without
    /// a device call.
    pub largest_free_block: u64,
    /// Reserved bytes of the segments that hold no live block (their free and
    /// pending blocks; the pinned preallocation and a followed plan's
    /// segments excepted): what `empty_cache()` gives back now, with a
    /// followed plan's empty segments besides (it gives the plan up first).
    pub releasable_bytes: u64,
    /// Cached bytes in segments that also hold live blocks: free but not
    /// releasable (PyTorch's `inactive_split_bytes`), the cost of
    /// fragmentation. A pinned segment with no live block counts in neither.
    pub inactive_split_bytes: u64,
    /// The hard limit in force.
    pub limit: Option<u64>,
}

impl Stats {
    /// Fragmentation: 1 − largest free block ÷ cached bytes (0 when nothing is cached).
    pub fn fragmentation(&self) -> f64 {
        let cached = self.total.cached_bytes.current;
        if cached == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / cached as f64
        }
    }

    /// A text table a person reads, like `torch.cuda.memory_summary()`.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let line = "=".repeat(79);
        let thin = "-".repeat(79);
        let _ = writeln!(s, "{line}");
        let _ = writeln!(s, "{:^79}", "vrampool memory summary");
        let _ = writeln!(s, "{line}");
        let _ = writeln!(
            s,
            "{:<28}|{:>16} |{:>16} |{:>14}",
            "Metric", "Cur usage", "Peak usage", "Pool"
        );
        let _ = writeln!(s, "{thin}");
        let mut rows: Vec<(&str, &PoolStats)> = vec![("all", &self.total)];
        for p in &self.pools {
            rows.push((p.name.as_str(), &p.stats));
        }
        type Getter = fn(&PoolStats) -> (Stat, bool);
        let metrics: [(&str, Getter); 8] = [
            ("Requested memory", |p| (p.requested_bytes, true)),
            ("Allocated memory", |p| (p.allocated_bytes, true)),
            ("Reserved memory", |p| (p.reserved_bytes, true)),
            ("Cached (free in segments)", |p| (p.cached_bytes, true)),
            ("Pending (awaiting submit)", |p| (p.pending_bytes, true)),
            ("Allocations", |p| (p.allocations, false)),
            ("Segments (device buffers)", |p| (p.segments, false)),
            ("Free blocks", |p| (p.free_blocks, false)),
        ];
        for (name, get) in metrics {
            for (pool, st) in &rows {
                let (v, bytes) = get(st);
                let f = |x: u64| if bytes { fmt_bytes(x) } else { x.to_string() };
                let _ = writeln!(
                    s,
                    "{:<28}|{:>16} |{:>16} |{:>14}",
                    name,
                    f(v.current),
                    f(v.peak),
                    pool
                );
            }
            let _ = writeln!(s, "{thin}");
        }
        let c = &self.counters;
        let _ = writeln!(
            s,
            "allocs {}  frees {}  cache hits {}  misses {}  hit rate {:.1}%",
            c.allocs,
            c.frees,
            c.cache_hits,
            c.cache_misses,
            100.0 * c.hit_rate()
        );
        let _ = writeln!(
            s,
            "device allocs {}  device frees {}  retries {}  OOMs {}  released {} (last empty_cache {})",
            c.device_allocs,
            c.device_frees,
            c.alloc_retries,
            c.ooms,
            fmt_bytes(c.bytes_released),
            fmt_bytes(c.last_empty_cache_bytes)
        );
        let _ = writeln!(
            s,
            "largest free block {}  releasable now {}  inactive split {}  fragmentation {:.1}%  limit {}",
            fmt_bytes(self.largest_free_block),
            fmt_bytes(self.releasable_bytes),
            fmt_bytes(self.inactive_split_bytes),
            100.0 * self.fragmentation(),
            self.limit.map(fmt_bytes).unwrap_or_else(|| "none".into())
        );
        let _ = writeln!(s, "{line}");
        s
    }
}
