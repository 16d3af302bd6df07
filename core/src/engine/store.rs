//! Where blocks and segments live: two slabs (blocks doubly linked in offset
//! order within their segment, boundary-tag style), one free index per usage
//! pool, and the moves between states — take a free block (splitting off the
//! rest), give a live block back (coalescing with free neighbours), insert and
//! remove whole segments.
//!
//! Architecture invariant: nothing here decides *where* a request goes or
//! *when* a segment is released; placement.rs, ladder.rs and release.rs do,
//! and call these moves, which keep the figures in step with every change.

use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::stats::PoolStats;
use crate::trace::{PoolKey, Recorder};
use crate::types::{Allocation, BlockId, Request, SegmentClass, SegmentId};
use std::collections::HashSet;

use super::Engine;
use super::free_index::{BY_OFFSET, FreeIndex};

/// The most pools an engine holds (one per distinct usage, exclusivity and
/// group): segments name theirs in 16 bits.
pub(super) const MAX_POOLS: usize = 1 << 16;

/// "No block": the end of a segment's list.
pub(super) const NONE: u32 = u32::MAX;

/// The state of one slot of the block slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockState {
    /// Cached: in its pool's free index.
    Free,
    /// Handed out.
    Live,
    /// Freed with [`Engine::defer_free`]: its owner is done, but commands
    /// recorded and not yet submitted may still use it, so it is neither
    /// reused nor coalesced until [`Engine::reclaim_deferred`].
    Pending,
    /// An unused slot.
    Vacant,
}

/// One block: a range of a segment.
#[derive(Debug, Clone)]
pub(super) struct Block {
    pub(super) segment: u32,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) state: BlockState,
    /// Bumped whenever the slot's block stops being live, so a stale
    /// [`BlockId`] is refused.
    pub(super) generation: u32,
    /// Bytes the caller asked for (live blocks).
    pub(super) requested: u64,
    /// Handed out before: its bytes may hold someone's data.
    pub(super) dirty: bool,
    pub(super) label: Option<Arc<str>>,
    /// Live, and the engine may move it (see `relocate.rs`).
    pub(super) relocatable: bool,
}

/// One segment: a device buffer and the blocks that tile it.
pub(super) struct Segment<S> {
    pub(super) payload: S,
    pub(super) size: u64,
    /// Bytes of its pending blocks (see [`Engine::defer_free`]).
    pub(super) pending: u64,
    /// The label the device knows it by (`vrampool read-write segment 3`).
    pub(super) label: String,
    pub(super) pool: u16,
    pub(super) class: SegmentClass,
    pub(super) first: u32,
    pub(super) live: u32,
    pub(super) last_used: u64,
    /// The address recordings use for its first byte.
    pub(super) address: u64,
    pub(super) pinned: bool,
}

/// The segments of one usage, exclusivity and group, and their free blocks.
pub(super) struct UsagePool {
    pub(super) usage: u32,
    pub(super) exclusive: bool,
    pub(super) group: u8,
    pub(super) name: String,
    /// Free blocks by (class key, size, index): best fit is the first at or
    /// above the request (a followed plan's blocks by (key, segment and
    /// offset, index), see `free_index::BY_OFFSET`).
    pub(super) free: FreeIndex,
    pub(super) stats: PoolStats,
    /// Has held a segment: pools only named by refused requests stay out of stats.
    pub(super) used: bool,
}

impl UsagePool {
    /// What a recording writes as the stream of its requests.
    pub(super) fn key(&self) -> PoolKey {
        PoolKey {
            usage: self.usage,
            group: self.group,
            exclusive: self.exclusive,
        }
    }
}

impl<S> Segment<S> {
    /// Whether a release may give it back: it holds no live block and is
    /// not the pinned preallocation.
    pub(super) fn releasable(&self) -> bool {
        self.live == 0 && !self.pinned
    }
}

impl<B: Backend> Engine<B> {
    /// The free-index entry of block `b` of a segment whose class has `key`:
    /// (key, size), or in a plan's segment (key, segment << 40 | offset)
    /// (see [`BY_OFFSET`]).
    #[inline]
    pub(super) fn entry_of(&self, key: u8, b: u32) -> u64 {
        let block = &self.blocks[b as usize];
        if key == BY_OFFSET {
            (block.segment as u64) << 40 | block.offset
        } else {
            block.size
        }
    }
}

/// A free as a recording logs it, kept from the moment its block left its
/// owner (a deferred block's until its bytes become reusable).
#[derive(Debug, Clone, Copy)]
pub(super) struct FreeRow {
    address: u64,
    /// The bytes its allocation asked for, as its allocate row says.
    size: u64,
    stream: u64,
}

/// A recording under way: its log, and the addresses of the blocks it has
/// logged allocated and not yet freed.
pub(super) struct Recording {
    log: Recorder,
    live: HashSet<u64>,
}

impl Recording {
    pub(super) fn new() -> Self {
        Recording {
            log: Recorder::new(),
            live: HashSet::new(),
        }
    }

    pub(super) fn allocated(&mut self, address: u64, size: u64, stream: u64) {
        self.live.insert(address);
        self.log.record(true, address, size, stream);
    }

    pub(super) fn finish(self) -> String {
        self.log.finish()
    }

    /// The log so far; the recording goes on with the same live blocks.
    pub(super) fn drain(&mut self) -> String {
        std::mem::take(&mut self.log).finish()
    }
}

/// Logs `row` in `recording` if its block's allocation is in it: the free
/// of a block allocated before the recording began, or before an earlier
/// recording was taken, has no allocate row there (a log that frees what it
/// never allocated is one no reader takes; `drain_recording` keeps the
/// recording, and so its blocks, going), and one logged already by
/// `take_recording` is gone from `live`. A deferred block's free is logged
/// when its mark is reclaimed (its bytes are reusable from then on) or when
/// its segment is released, whichever comes first; no other block is given
/// its address meanwhile, so a late free names its block.
pub(super) fn log_free(recording: &mut Option<Recording>, row: Option<FreeRow>) {
    if let (Some(r), Some(row)) = (recording, row)
        && r.live.remove(&row.address)
    {
        r.log.record(false, row.address, row.size, row.stream);
    }
}

pub(super) use crate::round_up;

impl<B: Backend> Engine<B> {
    /// The pool of `req`'s usage, exclusivity and group, made (and named) on
    /// first use; an error past [`MAX_POOLS`].
    pub(super) fn pool_of(&mut self, req: &Request) -> Result<u16> {
        self.pool_index(req.usage, req.exclusive, req.group, || {
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
        })
    }

    /// The index of the pool of `usage`, `exclusive` and `group`, made on
    /// first use; an error when that would be a pool past [`MAX_POOLS`]
    /// (segments name their pool in 16 bits).
    pub(super) fn pool_index(
        &mut self,
        usage: u32,
        exclusive: bool,
        group: u8,
        name: impl FnOnce() -> String,
    ) -> Result<u16> {
        if let Some(i) = self
            .pools
            .iter()
            .position(|p| p.usage == usage && p.exclusive == exclusive && p.group == group)
        {
            return Ok(i as u16);
        }
        if self.pools.len() >= MAX_POOLS {
            return Err(Error::InvalidUsage {
                usage,
                why: format!(
                    "the engine already has {MAX_POOLS} pools, one per distinct usage, exclusivity \
                     and group; requests of a new one are refused: use fewer distinct usages"
                ),
            });
        }
        self.pools.push(UsagePool {
            usage,
            exclusive,
            group,
            name: name(),
            free: FreeIndex::default(),
            stats: PoolStats::default(),
            used: false,
        });
        Ok((self.pools.len() - 1) as u16)
    }

    /// Names the pool of requests with this usage, exclusivity and group (for
    /// summaries and segment labels); creates it if needed (past
    /// 65 536 pools, the name goes nowhere: no request of it is served).
    pub fn name_pool(&mut self, usage: u32, exclusive: bool, group: u8, name: &str) {
        if let Ok(i) = self.pool_index(usage, exclusive, group, || name.to_string()) {
            self.pools[i as usize].name = name.to_string();
        }
    }

    pub(super) fn new_block(&mut self, block: Block) -> u32 {
        if let Some(i) = self.vacant_blocks.pop() {
            let generation = self.blocks[i as usize].generation;
            self.blocks[i as usize] = Block {
                generation,
                ..block
            };
            i
        } else {
            self.blocks.push(Block {
                generation: self.generation_start,
                ..block
            });
            (self.blocks.len() - 1) as u32
        }
    }

    /// Takes `payload` in as a new segment of `pool`: one free block.
    pub(super) fn insert_segment(
        &mut self,
        payload: B::Segment,
        label: String,
        pool: u16,
        class: SegmentClass,
        size: u64,
    ) -> u32 {
        self.counters.device_allocs += 1;
        self.counters.bytes_created += size;
        self.pools[pool as usize].used = true;
        let address = self.next_address;
        self.next_address = self.next_address.saturating_add(round_up(size, 2 << 20));
        let index = match self.vacant_segments.pop() {
            Some(i) => i,
            None => {
                self.segments.push(None);
                (self.segments.len() - 1) as u32
            }
        };
        let first = self.new_block(Block {
            segment: index,
            offset: 0,
            size,
            prev: NONE,
            next: NONE,
            state: BlockState::Free,
            generation: 0,
            requested: 0,
            dirty: false,
            label: None,
            relocatable: false,
        });
        self.device_place(pool, index, size);
        self.segments[index as usize] = Some(Segment {
            payload,
            size,
            pending: 0,
            label,
            pool,
            class,
            first,
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
        let entry = self.entry_of(key, first);
        self.pools[pool as usize].free.insert(key, entry, first);
        index
    }

    /// Hands out free block `b` for `rounded` bytes, splitting off the rest.
    pub(super) fn take_block(&mut self, b: u32, rounded: u64, req: Request) -> Allocation {
        let (segment, size, offset) = {
            let block = &self.blocks[b as usize];
            (block.segment, block.size, block.offset)
        };
        let (pool, class) = {
            let s = self.segments[segment as usize].as_ref().unwrap();
            (s.pool as usize, s.class)
        };
        let key = self.key(class);
        let entry = self.entry_of(key, b);
        self.pools[pool].free.remove(key, entry, b);
        let remainder = size - rounded;
        // Nothing to split off an exact fit, whatever the profile's minimum.
        let split = remainder > 0
            && match class {
                SegmentClass::Exclusive => false,
                SegmentClass::Large => remainder >= self.min_split_remainder(),
                SegmentClass::Medium if self.config.shared_large_pool => {
                    remainder >= self.min_split_remainder()
                }
                _ => remainder >= self.config.alignment,
            };
        let block_size = if split {
            self.split_off(b, rounded, pool, key);
            rounded
        } else {
            for st in [&mut self.total, &mut self.pools[pool].stats] {
                st.free_blocks.sub(1);
            }
            size
        };
        let block = &mut self.blocks[b as usize];
        block.state = BlockState::Live;
        block.requested = req.size;
        block.label = req.label;
        block.relocatable = req.relocatable;
        self.relocatable_live += u64::from(req.relocatable);
        let fresh = !block.dirty;
        block.dirty = true;
        let generation = block.generation;
        let seg = self.segments[segment as usize].as_mut().unwrap();
        seg.live += 1;
        let address = seg.address + offset;
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.allocated_bytes.add(block_size);
            st.requested_bytes.add(req.size);
            st.cached_bytes.sub(block_size);
            st.allocations.add(1);
        }
        self.counters.allocs += 1;
        self.high_water = self.high_water.max(self.total.allocated_bytes.current);
        self.allocated_since_reclaim = if self.total.pending_bytes.current == 0 {
            0
        } else {
            self.allocated_since_reclaim.saturating_add(block_size)
        };
        if let Some(r) = &mut self.recorder {
            r.allocated(address, req.size, self.pools[pool].key().stream());
        }
        Allocation {
            id: BlockId {
                index: b,
                generation,
            },
            segment: SegmentId(segment),
            offset,
            size: block_size,
            fresh,
        }
    }

    /// Splits block `b` after its first `len` bytes: the rest becomes a new
    /// free block right after it, linked into the segment and put in the
    /// free index (under `key`, in `pool`); `b`'s own entry and the pool's
    /// block counts are the caller's. Returns the new block.
    #[inline]
    pub(super) fn split_off(&mut self, b: u32, len: u64, pool: usize, key: u8) -> u32 {
        let (segment, offset, size, next, dirty) = {
            let block = &self.blocks[b as usize];
            (
                block.segment,
                block.offset,
                block.size,
                block.next,
                block.dirty,
            )
        };
        let rest = self.new_block(Block {
            segment,
            offset: offset + len,
            size: size - len,
            prev: b,
            next,
            state: BlockState::Free,
            generation: 0,
            requested: 0,
            dirty,
            label: None,
            relocatable: false,
        });
        if next != NONE {
            self.blocks[next as usize].prev = rest;
        }
        self.blocks[b as usize].next = rest;
        self.blocks[b as usize].size = len;
        let entry = self.entry_of(key, rest);
        self.pools[pool].free.insert(key, entry, rest);
        rest
    }

    pub(super) fn live_block(&self, id: BlockId) -> Result<&Block> {
        match self.blocks.get(id.index as usize) {
            Some(b) if b.generation == id.generation && b.state == BlockState::Live => Ok(b),
            _ => Err(Error::UnknownBlock(id.to_string())),
        }
    }

    /// Takes a live block from its owner: the figures of a free, the id made
    /// stale. Returns the block's index, detached (neither live nor free yet).
    /// While recording, also returns the free's row, for the caller to log
    /// ([`log_free`]): at once for a free, when its bytes become reusable for
    /// a deferred one.
    pub(super) fn take_live(&mut self, id: BlockId) -> Result<(u32, Option<FreeRow>)> {
        let block = self.live_block(id)?;
        let (segment, size, requested) = (block.segment, block.size, block.requested);
        let b = id.index;
        let (pool, address) = {
            let s = self.segments[segment as usize].as_mut().unwrap();
            s.live -= 1;
            s.last_used = self.tick;
            (s.pool, s.address + self.blocks[b as usize].offset)
        };
        {
            let block = &mut self.blocks[b as usize];
            block.requested = 0;
            block.generation = block.generation.wrapping_add(1);
            self.relocatable_live -= u64::from(std::mem::take(&mut block.relocatable));
        }
        for st in [&mut self.total, &mut self.pools[pool as usize].stats] {
            st.allocated_bytes.sub(size);
            st.requested_bytes.sub(requested);
            st.allocations.sub(1);
        }
        self.counters.frees += 1;
        let row = self.recorder.is_some().then(|| FreeRow {
            address,
            size: requested,
            stream: self.pools[pool as usize].key().stream(),
        });
        Ok((b, row))
    }

    /// Makes detached block `b` free: cached, coalesced with its free
    /// neighbours, in the free index; then trims to the cache limit.
    pub(super) fn make_free(&mut self, b: u32) {
        self.make_free_untrimmed(b);
        self.trim_cache();
    }

    /// [`Engine::make_free`] without the cache limit's trim: for a move,
    /// whose batch must not see a segment it moves from or into released
    /// under it, and for [`Engine::retire`], which abandons the segment
    /// first (the caller trims after).
    pub(super) fn make_free_untrimmed(&mut self, b: u32) {
        let (pool, key) = {
            let block = &mut self.blocks[b as usize];
            block.state = BlockState::Free;
            block.label = None;
            let s = self.segments[block.segment as usize].as_ref().unwrap();
            (s.pool as usize, self.key(s.class))
        };
        let size = self.blocks[b as usize].size;
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.cached_bytes.add(size);
            st.free_blocks.add(1);
        }
        // Coalesce with the next, then the previous neighbour. Only the
        // neighbour is in the free index: the block being freed is not yet.
        let mut merged = b;
        let next = self.blocks[merged as usize].next;
        if next != NONE && self.blocks[next as usize].state == BlockState::Free {
            let entry = self.entry_of(key, next);
            self.pools[pool].free.remove(key, entry, next);
            self.merge(merged, next, pool);
        }
        let prev = self.blocks[merged as usize].prev;
        if prev != NONE && self.blocks[prev as usize].state == BlockState::Free {
            let entry = self.entry_of(key, prev);
            self.pools[pool].free.remove(key, entry, prev);
            self.merge(prev, merged, pool);
            merged = prev;
        }
        let entry = self.entry_of(key, merged);
        self.pools[pool].free.insert(key, entry, merged);
    }

    /// Absorbs free block `b` into its free predecessor `a`; neither is in
    /// the free index (the caller took them out).
    fn merge(&mut self, a: u32, b: u32, pool: usize) {
        let b_size = self.blocks[b as usize].size;
        let b_next = self.blocks[b as usize].next;
        let b_dirty = self.blocks[b as usize].dirty;
        let block = &mut self.blocks[a as usize];
        block.size += b_size;
        block.next = b_next;
        block.dirty |= b_dirty;
        if b_next != NONE {
            self.blocks[b_next as usize].prev = a;
        }
        let gone = &mut self.blocks[b as usize];
        gone.state = BlockState::Vacant;
        gone.generation = gone.generation.wrapping_add(1);
        self.vacant_blocks.push(b);
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.free_blocks.sub(1);
        }
    }

    /// Gives segment `i`, which holds no live block, back to the backend:
    /// destroyed when it is all free, abandoned when it holds pending blocks.
    /// Returns its size.
    pub(super) fn remove_segment(&mut self, i: u32) -> u64 {
        self.remove_segment_as(i, false)
    }

    /// [`Engine::remove_segment`], abandoned whatever it holds with `abandon`.
    pub(super) fn remove_segment_as(&mut self, i: u32, abandon: bool) -> u64 {
        let s = self.segments[i as usize].take().unwrap();
        debug_assert_eq!(s.live, 0);
        let key = self.key(s.class);
        let pool = s.pool as usize;
        let (mut free_blocks, mut pending_blocks) = (0, 0);
        let mut b = s.first;
        while b != NONE {
            let block = &mut self.blocks[b as usize];
            match block.state {
                BlockState::Free => {
                    free_blocks += 1;
                    let entry = self.entry_of(key, b);
                    self.pools[pool].free.remove(key, entry, b);
                }
                // Logged as its entry leaves the deferred queue, below
                // (`forget_released_deferred`).
                BlockState::Pending => pending_blocks += 1,
                BlockState::Live | BlockState::Vacant => {
                    unreachable!("a released segment holds no live block")
                }
            }
            let block = &mut self.blocks[b as usize];
            block.state = BlockState::Vacant;
            block.generation = block.generation.wrapping_add(1);
            block.label = None;
            self.vacant_blocks.push(b);
            b = block.next;
        }
        self.vacant_segments.push(i);
        self.device_remove(s.pool, i);
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.reserved_bytes.sub(s.size);
            st.cached_bytes.sub(s.size - s.pending);
            st.pending_bytes.sub(s.pending);
            st.pending_blocks.sub(pending_blocks);
            st.segments.sub(1);
            st.free_blocks.sub(free_blocks);
        }
        self.counters.device_frees += 1;
        self.counters.bytes_released += s.size;
        if pending_blocks > 0 {
            self.forget_released_deferred();
        }
        if abandon || s.pending > 0 {
            self.counters.segments_abandoned += 1;
            self.backend.abandon_segment(s.payload);
        } else {
            self.backend.destroy_segment(s.payload);
        }
        s.size
    }
}
