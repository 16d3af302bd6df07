//! What a trace would need with virtual memory: PyTorch's caching allocator
//! with `expandable_segments:True`, simulated. CUDA lets PyTorch reserve a
//! range of addresses and map physical pages into it as the range fills
//! (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`), so its one segment per
//! pool grows in place and freed blocks coalesce across what would otherwise
//! be separate allocations. WebGPU has nothing like it: a buffer's size is
//! fixed when it is created, and a binding lies inside one buffer. This is
//! the highest bar a pool on WebGPU is held to (`shared/traces/README.md`:
//! "match it without"), as [`Foresight`](super::Foresight) is the bar of
//! knowing the future.
//!
//! The simulation follows PyTorch 2.11's `CUDACachingAllocator.cpp` step for
//! step: sizes rounded up to 512 bytes; requests up to 1 MiB in the small
//! pool (2 MiB pages), larger ones in the large pool (20 MiB pages), each
//! one expandable segment reserving 1⅛ × the device's memory of addresses;
//! best fit among free blocks (by size, then address), passing over the
//! free block that ends where the mapped pages end while a larger free block
//! that does not can serve (its size "can expand to" the unmapped rest);
//! split when at least 512 bytes remain; freed blocks merge with free
//! neighbours; on a miss, pages mapped at the lowest unmapped address whose
//! run of free and unmapped bytes holds the request (in practice the end,
//! merging with a free block there). Under a limit
//! (`set_per_process_memory_fraction`) a miss fails when the bytes mapped
//! plus the request's allocation size (2 MiB small, 20 MiB under 10 MiB,
//! else the request rounded to 2 MiB) would pass it; then every whole free
//! page is unmapped (`release_cached_blocks`) and the miss tried once more.
//! Device allocations are `cuMemMap` calls (`num_device_alloc`). Replayed on
//! the traces of `data/traces` at full size, ÷16 and ÷64, it gives the peak
//! reserved bytes and device allocations PyTorch gave on the H200 with no
//! limit, and at every budget of PyTorch's scans the same outcome with the
//! same device allocations (`data/traces/pytorch_figures*.json`), to the
//! byte (`tests/tests/expandable.rs`). One segment per pool: where PyTorch
//! would reserve a second range of addresses, this reports an out-of-memory
//! (see [`Expandable::new`]).
//!
//! Architecture invariant: like the replay loop and [`Foresight`](super::Foresight),
//! this knows nothing of engines or devices; it is driven as a
//! [`ReplayTarget`] and reports its own figures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::replay::ReplayTarget;
use crate::error::{Error, OomInfo};

/// PyTorch's `kMinBlockSize`: every size is rounded up to a multiple of it.
const ROUNDING: u64 = 512;
/// PyTorch's `kSmallSize`: requests up to it go to the small pool.
const SMALL_REQUEST: u64 = 1 << 20;

/// A block handed out by [`Expandable::allocate`]. Every allocation of every
/// [`Expandable`] gets a handle of its own: a block freed twice, or a
/// handle of another allocator, is an error, even where a later block took
/// the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExpandableBlock {
    large: bool,
    address: u64,
    id: u64,
}

/// The id of the next allocation, over every [`Expandable`] of the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The figures of an [`Expandable`] allocator, as PyTorch's `memory_stats()`
/// would give them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpandableStats {
    /// Bytes in blocks handed out (sizes rounded up to 512 B).
    pub allocated: u64,
    /// The most `allocated` has been.
    pub peak_allocated: u64,
    /// Bytes of pages mapped (PyTorch's reserved bytes).
    pub reserved: u64,
    /// The most `reserved` has been.
    pub peak_reserved: u64,
    /// Page ranges mapped (`cuMemMap` calls: PyTorch's `num_device_alloc`).
    pub device_allocs: u64,
    /// Page ranges unmapped (`num_device_free`).
    pub device_frees: u64,
    /// Bytes of pages mapped, in all.
    pub bytes_mapped: u64,
    /// Bytes of pages unmapped, in all.
    pub bytes_unmapped: u64,
    /// Requests served from free blocks, with no page mapped.
    pub cache_hits: u64,
    /// Bytes of the requests served from free blocks.
    pub reused_bytes: u64,
    /// Of those, bytes of the requests whose block lies across the boundary
    /// between two page ranges mapped apart: reuse that a pool of
    /// fixed-size buffers could not have made without a new buffer (a
    /// binding lies inside one buffer), since the two ranges would be two.
    pub reused_across_maps: u64,
    /// Requests no page could serve (under the limit, on the device) that
    /// had every cached page unmapped first (PyTorch's `num_alloc_retries`).
    pub retries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// In use by the allocation of this id.
    Used(u64),
    Unmapped,
}

/// One expandable segment: a range of addresses tiled by blocks, each free
/// (mapped), in use (mapped) or unmapped.
#[derive(Debug, Clone)]
struct Segment {
    page: u64,
    /// Where page ranges mapped apart meet (each map's start and, after an
    /// unmap, both ends of the hole).
    seams: BTreeSet<u64>,
    /// Offset → (size, state); the blocks tile the whole range.
    blocks: BTreeMap<u64, (u64, State)>,
    /// Free mapped blocks by (size, offset): best fit.
    free: BTreeSet<(u64, u64)>,
    /// Unmapped blocks by offset: the lowest first.
    unmapped: BTreeSet<u64>,
}

impl Segment {
    fn new(page: u64, addresses: u64) -> Segment {
        // Whole pages, at least one, and no more than a u64 of addresses holds.
        let size = addresses.div_ceil(page).clamp(1, u64::MAX / page) * page;
        Segment {
            page,
            seams: BTreeSet::new(),
            blocks: BTreeMap::from([(0, (size, State::Unmapped))]),
            free: BTreeSet::new(),
            unmapped: BTreeSet::from([0]),
        }
    }

    fn block(&self, at: u64) -> Option<(u64, State)> {
        self.blocks.get(&at).copied()
    }

    fn prev(&self, at: u64) -> Option<(u64, u64, State)> {
        self.blocks
            .range(..at)
            .next_back()
            .map(|(&a, &(s, st))| (a, s, st))
    }

    fn put(&mut self, at: u64, size: u64, state: State) {
        self.blocks.insert(at, (size, state));
        match state {
            State::Free => self.free.insert((size, at)),
            State::Unmapped => self.unmapped.insert(at),
            State::Used(_) => true,
        };
    }

    fn take(&mut self, at: u64) -> (u64, State) {
        let (size, state) = self.blocks.remove(&at).expect("a block at this offset");
        match state {
            State::Free => self.free.remove(&(size, at)),
            State::Unmapped => self.unmapped.remove(&at),
            State::Used(_) => true,
        };
        (size, state)
    }

    /// Joins the block at `at` with neighbours of the same state (free or
    /// unmapped); returns where the joined block starts.
    fn merge(&mut self, at: u64) -> u64 {
        let (mut size, state) = self.take(at);
        let mut start = at;
        if let Some((n, _, st)) = self.next_of(at, size)
            && st == state
        {
            size += self.take(n).0;
        }
        if let Some((p, _, st)) = self.prev(at)
            && st == state
        {
            size += self.take(p).0;
            start = p;
        }
        self.put(start, size, state);
        start
    }

    fn next_of(&self, at: u64, size: u64) -> Option<(u64, u64, State)> {
        self.block(at + size).map(|(s, st)| (at + size, s, st))
    }

    /// The size a free block "can expand to": its own, plus the unmapped
    /// block right after it.
    fn expandable_size(&self, at: u64, size: u64) -> u64 {
        match self.next_of(at, size) {
            Some((_, s, State::Unmapped)) => size + s,
            _ => size,
        }
    }

    /// PyTorch's `get_free_block`: the smallest free block that holds
    /// `rounded`, passing over blocks that can expand while the next larger
    /// one expands to less.
    fn best_fit(&self, rounded: u64) -> Option<u64> {
        let mut fits = self.free.range((rounded, 0)..);
        let mut best = *fits.next()?;
        for &next in fits {
            if self.expandable_size(next.1, next.0) < self.expandable_size(best.1, best.0) {
                best = next;
            } else {
                break;
            }
        }
        Some(best.1)
    }

    /// Hands out `rounded` bytes of the free block at `at` to allocation
    /// `id`, splitting off the rest when at least 512 bytes remain; returns
    /// the bytes allocated.
    fn allocate_in(&mut self, at: u64, rounded: u64, id: u64) -> u64 {
        let (size, state) = self.take(at);
        debug_assert!(state == State::Free && size >= rounded);
        if size - rounded >= ROUNDING {
            self.put(at, rounded, State::Used(id));
            self.put(at + rounded, size - rounded, State::Free);
            rounded
        } else {
            self.put(at, size, State::Used(id));
            size
        }
    }

    /// PyTorch's `find_expandable_block`: where a run of free and unmapped
    /// blocks of at least `rounded` bytes starts at the lowest unmapped
    /// block (or the free block just before it).
    fn expandable_run(&self, rounded: u64) -> Option<u64> {
        self.unmapped.iter().find_map(|&u| {
            let start = match self.prev(u) {
                Some((p, _, State::Free)) => p,
                _ => u,
            };
            let (mut at, mut bytes) = (start, 0);
            while bytes < rounded {
                match self.block(at) {
                    Some((s, State::Free | State::Unmapped)) => {
                        debug_assert!(s > 0, "blocks are never empty");
                        bytes += s;
                        at += s;
                    }
                    _ => break,
                }
            }
            (bytes >= rounded).then_some(start)
        })
    }

    /// The page ranges `try_allocate_expandable_block` would map for
    /// `rounded` bytes from `start`: (offset, bytes) of each `cuMemMap`.
    fn maps_for(&self, start: u64, rounded: u64) -> Vec<(u64, u64)> {
        let mut maps = Vec::new();
        let (mut at, mut have) = (start, 0);
        while have < rounded {
            let Some((size, state)) = self.block(at) else {
                break;
            };
            match state {
                State::Free => have += size,
                State::Unmapped => {
                    let want = (rounded - have).min(size);
                    let mapped = (want.div_ceil(self.page) * self.page).min(size);
                    maps.push((at, mapped));
                    have += mapped;
                    // A mapped part shorter than the block leaves the run here.
                    if mapped < size {
                        break;
                    }
                }
                State::Used(_) => break,
            }
            at += size;
        }
        maps
    }

    /// Maps `bytes` at the start of the unmapped block at `at` and joins them
    /// with the free blocks around.
    fn map(&mut self, at: u64, bytes: u64) {
        self.seams.insert(at);
        self.seams.insert(at + bytes);
        let (size, state) = self.take(at);
        debug_assert_eq!(state, State::Unmapped);
        if bytes < size {
            self.put(at + bytes, size - bytes, State::Unmapped);
        }
        self.put(at, bytes, State::Free);
        self.merge(at);
    }

    /// PyTorch's `unmap_block` over every free block: unmaps the whole pages
    /// inside each; returns (page ranges, bytes) unmapped.
    fn unmap_free_pages(&mut self) -> (u64, u64) {
        let frees: Vec<(u64, u64)> = self.free.iter().map(|&(s, a)| (a, s)).collect();
        let (mut ranges, mut bytes) = (0, 0);
        for (at, size) in frees {
            let begin = at.div_ceil(self.page) * self.page;
            let end = (at + size) / self.page * self.page;
            if begin >= end {
                continue;
            }
            self.take(at);
            if begin > at {
                self.put(at, begin - at, State::Free);
            }
            if at + size > end {
                self.put(end, at + size - end, State::Free);
            }
            self.put(begin, end - begin, State::Unmapped);
            self.merge(begin);
            // What is mapped there next is a range of its own.
            let inside: Vec<u64> = self.seams.range(begin + 1..end).copied().collect();
            for seam in inside {
                self.seams.remove(&seam);
            }
            self.seams.extend([begin, end]);
            ranges += 1;
            bytes += end - begin;
        }
        (ranges, bytes)
    }
}

/// PyTorch's caching allocator with `expandable_segments:True`, on simulated
/// virtual memory (see the module's documentation): driven like any
/// allocator ([`ReplayTarget`]), with PyTorch's figures ([`ExpandableStats`]).
///
/// ```
/// use vrampool::trace::Expandable;
/// let mib = 1u64 << 20;
/// let mut vm = Expandable::new(80 << 30, None);
/// // Two 30 MiB tensors: pages of 20 MiB are mapped as the segment grows.
/// let a = vm.allocate(30 * mib)?;
/// let b = vm.allocate(30 * mib)?;
/// assert_eq!(vm.stats().reserved, 60 * mib);
/// // Freed, they are one free block: a 60 MiB tensor fits where they were,
/// // which no pool of fixed-size buffers could do without a new buffer.
/// vm.free(a)?;
/// vm.free(b)?;
/// let c = vm.allocate(60 * mib)?;
/// assert_eq!(vm.stats().peak_reserved, 60 * mib);
/// assert_eq!(vm.stats().device_allocs, 2);
/// // c lies across the two page ranges mapped for a and b.
/// assert_eq!(vm.stats().reused_across_maps, 60 * mib);
/// vm.free(c)?;
/// assert_eq!(vm.empty_cache(), 60 * mib);
/// # Ok::<(), vrampool::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Expandable {
    small: Segment,
    large: Segment,
    capacity: u64,
    limit: Option<u64>,
    stats: ExpandableStats,
}

impl Expandable {
    /// PyTorch's page for the small pool (`kSmallBuffer`).
    pub const SMALL_PAGE: u64 = 2 << 20;
    /// PyTorch's page for the large pool (`kLargeBuffer`).
    pub const LARGE_PAGE: u64 = 20 << 20;

    /// An empty allocator on a device of `capacity` bytes (the total
    /// `cudaMemGetInfo` gives: no more than it is ever mapped, and each pool
    /// reserves 1⅛ × it of addresses), under PyTorch's limit of `limit`
    /// bytes (`set_per_process_memory_fraction(limit / capacity)`). That
    /// limit is PyTorch's, not a hard cap: a miss fails when the bytes
    /// mapped plus the request's allocation size (2 MiB, 20 MiB under
    /// 10 MiB, else the request rounded up to 2 MiB) would pass it, and
    /// whole pages are then mapped, so what is mapped can pass the limit by
    /// less than a page.
    ///
    /// One segment per pool, as PyTorch makes while its first range of
    /// addresses has room. Where PyTorch would reserve a second range (a
    /// request the device's memory holds but no run of free and unmapped
    /// addresses of the first does, which takes a range cut up by pages
    /// unmapped in the middle), this reports an out-of-memory instead; no
    /// replay of the traces comes near it.
    pub fn new(capacity: u64, limit: Option<u64>) -> Expandable {
        let addresses = capacity.saturating_add(capacity / 8);
        Expandable {
            small: Segment::new(Self::SMALL_PAGE, addresses),
            large: Segment::new(Self::LARGE_PAGE, addresses),
            capacity,
            limit,
            stats: ExpandableStats::default(),
        }
    }

    /// The figures so far.
    pub fn stats(&self) -> ExpandableStats {
        self.stats
    }

    /// PyTorch's `get_allocation_size`: what its limit check counts for a
    /// miss of `rounded` bytes.
    fn allocation_size(rounded: u64) -> u64 {
        const ROUND_LARGE: u64 = 2 << 20;
        if rounded <= SMALL_REQUEST {
            Self::SMALL_PAGE
        } else if rounded < 10 << 20 {
            Self::LARGE_PAGE
        } else {
            rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
        }
    }

    fn segment(&mut self, large: bool) -> &mut Segment {
        if large {
            &mut self.large
        } else {
            &mut self.small
        }
    }

    /// Allocates `size` bytes: a free block if one holds it, else pages
    /// mapped at the lowest run of free and unmapped addresses that holds
    /// it (the end of its pool's segment, unless pages were unmapped before
    /// it). A request no page could serve, under the limit or on the
    /// device, first has every cached page unmapped, as in PyTorch.
    pub fn allocate(&mut self, size: u64) -> Result<ExpandableBlock, Error> {
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let Some(rounded) = size.checked_next_multiple_of(ROUNDING) else {
            // No device holds it: PyTorch's last step, then the error.
            self.stats.retries += 1;
            self.empty_cache();
            return Err(self.oom(size, true));
        };
        let large = rounded > SMALL_REQUEST;
        if let Some(at) = self.segment(large).best_fit(rounded) {
            let across = self
                .segment(large)
                .seams
                .range(at + 1..at + rounded)
                .next()
                .is_some();
            let s = &mut self.stats;
            s.cache_hits += 1;
            s.reused_bytes += rounded;
            if across {
                s.reused_across_maps += rounded;
            }
            return Ok(self.hand_out(large, at, rounded));
        }
        let mut planned = self.plan_maps(large, rounded);
        if self.over_limit(rounded) || planned.is_none() {
            // PyTorch's last step before an out-of-memory: release every
            // cached page, then try once more.
            self.stats.retries += 1;
            self.empty_cache();
            planned = self.plan_maps(large, rounded);
            if self.over_limit(rounded) || planned.is_none() {
                return Err(self.oom(size, planned.is_none()));
            }
        }
        let (start, maps) = planned.expect("checked above");
        let seg = self.segment(large);
        for &(at, bytes) in &maps {
            seg.map(at, bytes);
        }
        // The run from `start` is one free block now: the free block before
        // the first unmapped one, if any, absorbed what was mapped.
        debug_assert!(
            seg.block(start)
                .is_some_and(|(s, st)| st == State::Free && s >= rounded)
        );
        let mapped: u64 = maps.iter().map(|m| m.1).sum();
        let s = &mut self.stats;
        s.device_allocs += maps.len() as u64;
        s.bytes_mapped += mapped;
        s.reserved += mapped;
        s.peak_reserved = s.peak_reserved.max(s.reserved);
        Ok(self.hand_out(large, start, rounded))
    }

    /// PyTorch's limit check on a miss: the bytes mapped plus the miss's
    /// allocation size would pass the limit.
    fn over_limit(&self, rounded: u64) -> bool {
        self.limit.is_some_and(|l| {
            self.stats
                .reserved
                .saturating_add(Self::allocation_size(rounded))
                > l
        })
    }

    /// Where a miss of `rounded` bytes would map pages, if the addresses
    /// and the device's memory allow it.
    fn plan_maps(&mut self, large: bool, rounded: u64) -> Option<(u64, Vec<(u64, u64)>)> {
        let reserved = self.stats.reserved;
        let capacity = self.capacity;
        let seg = self.segment(large);
        let start = seg.expandable_run(rounded)?;
        let maps = seg.maps_for(start, rounded);
        let bytes: u64 = maps.iter().map(|m| m.1).sum();
        (reserved.saturating_add(bytes) <= capacity).then_some((start, maps))
    }

    fn hand_out(&mut self, large: bool, at: u64, rounded: u64) -> ExpandableBlock {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let bytes = self.segment(large).allocate_in(at, rounded, id);
        let s = &mut self.stats;
        s.allocated += bytes;
        s.peak_allocated = s.peak_allocated.max(s.allocated);
        ExpandableBlock {
            large,
            address: at,
            id,
        }
    }

    fn oom(&self, size: u64, device_refused: bool) -> Error {
        Error::OutOfMemory(OomInfo {
            requested: size,
            allocated: self.stats.allocated,
            reserved: self.stats.reserved,
            cached: self.stats.reserved - self.stats.allocated,
            pending: 0,
            in_flight: 0,
            limit: self.limit,
            device_refused,
        })
    }

    /// Frees a block: it joins its free neighbours; no page is unmapped. A
    /// block already freed, or another allocator's, is an error that
    /// changes nothing.
    pub fn free(&mut self, block: ExpandableBlock) -> Result<(), Error> {
        let seg = self.segment(block.large);
        match seg.block(block.address) {
            Some((size, State::Used(id))) if id == block.id => {
                seg.take(block.address);
                seg.put(block.address, size, State::Free);
                seg.merge(block.address);
                self.stats.allocated -= size;
                Ok(())
            }
            _ => Err(Error::UnknownBlock(format!(
                "allocation {} ({} pool, offset {:#x})",
                block.id,
                if block.large { "large" } else { "small" },
                block.address
            ))),
        }
    }

    /// `torch.cuda.empty_cache()`: unmaps every whole page of every free
    /// block; returns the bytes unmapped.
    pub fn empty_cache(&mut self) -> u64 {
        let (r1, b1) = self.large.unmap_free_pages();
        let (r2, b2) = self.small.unmap_free_pages();
        let s = &mut self.stats;
        s.device_frees += r1 + r2;
        s.bytes_unmapped += b1 + b2;
        s.reserved -= b1 + b2;
        b1 + b2
    }
}

impl ReplayTarget for Expandable {
    type Handle = ExpandableBlock;
    fn allocate(&mut self, size: u64) -> Result<ExpandableBlock, Error> {
        Expandable::allocate(self, size)
    }
    fn free(&mut self, block: ExpandableBlock) {
        Expandable::free(self, block).expect("the replay frees only blocks it allocated");
    }
}
