//! Moving live blocks to make room ([`Request::relocatable`](crate::Request::relocatable)): a pool that
//! cannot join two buffers can still copy a block's bytes from one to
//! another, so free space spread over partly live segments serves a request
//! that none of them holds whole. Two places use it:
//! - on a miss, before a new segment: of the ranges of the request's size in
//!   its pool's segments of the classes it may use, the one whose live
//!   blocks hold the fewest bytes (each relocatable, none pending; at most
//!   the request's size in all) has them moved, largest first, to the
//!   smallest free blocks of other segments of the pool that hold them, and
//!   serves the request;
//! - under the soft headroom, when releasing segments that hold no live
//!   block is not enough: the partly live segment with the fewest live bytes
//!   whose blocks fit elsewhere is emptied that way and released.
//!
//! A moved block keeps its slot and id: its record and the free block it
//! moved into trade places in their segments' lists, the bytes copied
//! through [`Backend::move_bytes`]; its old place becomes free (and
//! coalesces). Bytes allocated, cached and reserved are as before the move;
//! which segments are busy, their free blocks and their last use change
//! (and so which block a later request or release picks). The cache limit
//! trims only once a batch is done.
//!
//! Architecture invariant: a block moves only if the caller asked for it to
//! be relocatable and has not pinned it, it is live (never pending), the
//! backend copies, no budget is set, nothing is recorded or followed, and
//! always to another segment of its own pool.

use std::collections::BTreeMap;

use crate::backend::Backend;
use crate::error::Result;
use crate::types::{BlockId, Moved, SegmentClass, SegmentId};

use super::Engine;
use super::release::Released;
use super::store::{BlockState, NONE};

/// The shared classes whose free blocks take moved blocks.
const SHARED: [SegmentClass; 3] = [
    SegmentClass::Small,
    SegmentClass::Medium,
    SegmentClass::Large,
];

impl<B: Backend> Engine<B> {
    /// Pins a live [relocatable](crate::Request::relocatable) block where it is
    /// (`false`) or lets it move again (`true`): a caller pins a block while
    /// commands it recorded and has not submitted use its place, which a
    /// move would give to another request. Refused for a block that is not
    /// live here.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let a = e.allocate(Request { relocatable: true, ..Request::new(4 << 20, 0) })?;
    /// e.set_relocatable(a.id, false)?; // a pass recorded with `a` is not submitted yet
    /// // ... the pass is submitted ...
    /// e.set_relocatable(a.id, true)?;
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn set_relocatable(&mut self, id: BlockId, relocatable: bool) -> Result<()> {
        self.live_block(id)?;
        let block = &mut self.blocks[id.index as usize];
        self.relocatable_live -= u64::from(block.relocatable);
        self.relocatable_live += u64::from(relocatable);
        block.relocatable = relocatable;
        Ok(())
    }

    /// Where a live block is now: its segment and offset, which a move
    /// changes (see [`Request::relocatable`](crate::Request::relocatable)).
    pub fn locate(&self, id: BlockId) -> Result<(SegmentId, u64)> {
        let block = self.live_block(id)?;
        Ok((SegmentId(block.segment), block.offset))
    }

    /// The blocks moved since the last call, oldest first (a block moved
    /// twice is listed twice): a caller that keeps blocks' places (a handle's
    /// buffer and offset) reads them after each allocation that may have
    /// moved some. Empty unless some request was
    /// [relocatable](crate::Request::relocatable); the list grows until it is
    /// taken, so a caller with relocatable requests takes it.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let movable = |size| Request { relocatable: true, ..Request::new(size, 0) };
    /// // Two 24 MiB segments, each split into two 12 MiB blocks.
    /// let (x, y) = (e.allocate(movable(24 << 20))?, e.allocate(movable(24 << 20))?);
    /// e.free(x.id)?;
    /// let (p, q) = (e.allocate(movable(12 << 20))?, e.allocate(movable(12 << 20))?);
    /// e.free(y.id)?;
    /// let (r, s) = (e.allocate(movable(12 << 20))?, e.allocate(movable(12 << 20))?);
    /// e.free(p.id)?;
    /// e.free(s.id)?;
    /// # let _ = (q, r);
    /// // 24 MiB are free, 12 in each segment: a 20 MiB request moves a
    /// // 12 MiB block over instead of making a third segment.
    /// let reserved = e.reserved_bytes();
    /// let c = e.allocate(movable(20 << 20))?;
    /// assert_eq!(e.reserved_bytes(), reserved);
    /// let moves = e.take_moves();
    /// assert_eq!(moves.len(), 1);
    /// assert_ne!(moves[0].to.0, c.segment);
    /// assert_eq!(e.stats().counters.bytes_moved, 12 << 20);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn take_moves(&mut self) -> Vec<Moved> {
        std::mem::take(&mut self.moves)
    }

    /// Whether blocks of `pool` may move now (see the module's doc).
    pub(super) fn relocation_on(&self, pool: u16) -> bool {
        // Not in wasm32 builds: the page's size target, and no browser
        // `Pool` hands out movable blocks (the code is left out whole).
        !cfg!(target_arch = "wasm32")
            && self.relocatable_live > 0
            && self.config.relocate
            && !self.under_budget()
            && self.recorder.is_none()
            && self.following.is_empty()
            && self.backend.can_move(self.pools[pool as usize].usage)
    }

    /// What moving block `b` out of a range costs in bytes: 0 for a free
    /// block, its size for a relocatable live one, `None` for a block that
    /// may not move (pending, or live and not relocatable).
    fn move_cost(&self, b: u32) -> Option<u64> {
        let block = &self.blocks[b as usize];
        match block.state {
            BlockState::Free => Some(0),
            BlockState::Live if block.relocatable => Some(block.size),
            _ => None,
        }
    }

    /// The live blocks from block `b` on, in offset order, that start before
    /// `end` in its segment.
    fn live_from(&self, mut b: u32, end: u64) -> Vec<u32> {
        let mut live = Vec::new();
        while b != NONE && self.blocks[b as usize].offset < end {
            if self.blocks[b as usize].state == BlockState::Live {
                live.push(b);
            }
            b = self.blocks[b as usize].next;
        }
        live
    }

    /// The classes of segments a request of `class` may be placed in.
    fn placeable_in(&self, class: SegmentClass) -> &'static [SegmentClass] {
        let large = self.placement().reuse_large_blocks;
        match class {
            SegmentClass::Small if large => &[SegmentClass::Small, SegmentClass::Large],
            SegmentClass::Medium if large => &[SegmentClass::Medium, SegmentClass::Large],
            SegmentClass::Small => &[SegmentClass::Small],
            SegmentClass::Medium => &[SegmentClass::Medium],
            SegmentClass::Large => &[SegmentClass::Large],
            _ => &[],
        }
    }

    /// Makes a free block of at least `rounded` bytes in `pool` by moving
    /// the live blocks of the cheapest range of that size elsewhere (see the
    /// module's doc); returns it, or `None` with nothing changed.
    pub(super) fn make_room(
        &mut self,
        pool: u16,
        class: SegmentClass,
        rounded: u64,
    ) -> Option<u32> {
        let classes = self.placeable_in(class);
        // (live bytes to move, segment, first block of the range)
        let mut best: Option<(u64, u32, u32)> = None;
        // (block, offset, live bytes to move, blocks that may not move)
        let mut blocks: Vec<(u32, u64, u64, u32)> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            if s.pool != pool || s.pinned || s.live == 0 || s.size < rounded {
                continue;
            }
            if !classes.contains(&s.class) {
                continue;
            }
            blocks.clear();
            let mut b = s.first;
            while b != NONE {
                let (cost, stuck) = self.move_cost(b).map_or((0, 1), |c| (c, 0));
                let block = &self.blocks[b as usize];
                blocks.push((b, block.offset, cost, stuck));
                b = block.next;
            }
            // Ranges start where blocks do; [k, end) are the blocks a range
            // starting at block k overlaps.
            let (mut end, mut cost, mut stuck) = (0, 0u64, 0u32);
            for k in 0..blocks.len() {
                let start = blocks[k].1;
                if start + rounded > s.size {
                    break;
                }
                while end < blocks.len() && blocks[end].1 < start + rounded {
                    cost += blocks[end].2;
                    stuck += blocks[end].3;
                    end += 1;
                }
                if k > 0 {
                    cost -= blocks[k - 1].2;
                    stuck -= blocks[k - 1].3;
                }
                // A range with nothing to move is a free block the fit
                // rules refused: not this step's to override.
                if stuck == 0 && cost > 0 && cost <= rounded && best.is_none_or(|b| cost < b.0) {
                    best = Some((cost, i as u32, blocks[k].0));
                }
            }
        }
        let (_, seg, first) = best?;
        let (start, end) = {
            let offset = self.blocks[first as usize].offset;
            (offset, offset + rounded)
        };
        if !self.move_elsewhere(pool, seg, self.live_from(first, end)) {
            return None;
        }
        self.counters.relocations += 1;
        // The range is inside one free block now (its blocks coalesced).
        let mut b = self.segments[seg as usize].as_ref().unwrap().first;
        while b != NONE {
            let block = &self.blocks[b as usize];
            if block.state == BlockState::Free
                && block.offset <= start
                && block.offset + block.size >= end
            {
                return Some(b);
            }
            b = block.next;
        }
        unreachable!("the range is free once its blocks moved")
    }

    /// Under the soft headroom: empties the partly live segment of `pool`
    /// with the fewest live bytes whose blocks may all move and fit in free
    /// blocks of its other segments, and releases it (the caller flushes the
    /// releases). Returns the bytes released (0: none could be).
    pub(super) fn evacuate_one(&mut self, pool: u16) -> u64 {
        let mut candidates: Vec<(u64, u32)> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            if s.pool != pool || s.pinned || s.live == 0 || s.pending > 0 {
                continue;
            }
            if !SHARED.contains(&s.class) {
                continue;
            }
            let (mut live, mut b) = (Some(0), s.first);
            while b != NONE
                && let Some(bytes) = live
            {
                live = self.move_cost(b).map(|c| bytes + c);
                b = self.blocks[b as usize].next;
            }
            if let Some(live) = live {
                candidates.push((live, i as u32));
            }
        }
        candidates.sort_unstable();
        for (_, seg) in candidates {
            let first = self.segments[seg as usize].as_ref().unwrap().first;
            if !self.move_elsewhere(pool, seg, self.live_from(first, u64::MAX)) {
                continue;
            }
            self.counters.evacuations += 1;
            let class = self.segments[seg as usize].as_ref().unwrap().class;
            let size = self.remove_segment(seg);
            self.remember_released(Released { pool, class, size });
            self.trim_cache();
            return size;
        }
        0
    }

    /// Moves `movers` (live blocks of segment `seg`) to free blocks of the
    /// other segments of `pool`, largest first, each to the smallest that
    /// holds it; checks first that all of them fit, and moves none if not.
    fn move_elsewhere(&mut self, pool: u16, seg: u32, mut movers: Vec<u32>) -> bool {
        movers.sort_by_key(|&m| std::cmp::Reverse(self.blocks[m as usize].size));
        // The same best fit on a tally of the free sizes.
        let mut room: BTreeMap<u64, u32> = BTreeMap::new();
        for key in self.shared_keys() {
            for (size, b) in self.pools[pool as usize].free.fits(key, 0) {
                if self.blocks[b as usize].segment != seg {
                    *room.entry(size).or_default() += 1;
                }
            }
        }
        for &m in &movers {
            let size = self.blocks[m as usize].size;
            let Some((&free, _)) = room.range(size..).next() else {
                return false;
            };
            let n = room.get_mut(&free).unwrap();
            *n -= 1;
            if *n == 0 {
                room.remove(&free);
            }
            if free - size >= self.config.alignment {
                *room.entry(free - size).or_default() += 1;
            }
        }
        for &m in &movers {
            let size = self.blocks[m as usize].size;
            let d = self
                .destination(pool, seg, size)
                .expect("the tally found room for every block");
            self.relocate(m, d);
        }
        self.backend.flush_moves();
        true
    }

    /// The free-index keys of the shared classes, each once.
    fn shared_keys(&self) -> impl Iterator<Item = u8> + '_ {
        self.shared_classes().map(|c| self.key(c))
    }

    /// The smallest free block of a shared class in `pool`, outside segment
    /// `not`, that holds `size` bytes.
    fn destination(&self, pool: u16, not: u32, size: u64) -> Option<u32> {
        self.shared_keys()
            .filter_map(|key| {
                self.pools[pool as usize]
                    .free
                    .fits(key, size)
                    .find(|&(_, b)| self.blocks[b as usize].segment != not)
            })
            .min()
            .map(|(_, b)| b)
    }

    /// Moves live block `m` into free block `d` of another segment (at least
    /// as large): the bytes copied, `m`'s slot and id kept, its old place
    /// free.
    fn relocate(&mut self, m: u32, d: u32) {
        let size = self.blocks[m as usize].size;
        let to_seg = self.blocks[d as usize].segment;
        let (to_pool, key) = {
            let s = self.segments[to_seg as usize].as_ref().unwrap();
            (s.pool as usize, self.key(s.class))
        };
        let entry = self.entry_of(key, d);
        self.pools[to_pool].free.remove(key, entry, d);
        if self.blocks[d as usize].size > size {
            self.split_off(d, size, to_pool, key);
        } else {
            for st in [&mut self.total, &mut self.pools[to_pool].stats] {
                st.free_blocks.sub(1);
            }
        }
        // `make_free` below counts the old place as cached again.
        for st in [&mut self.total, &mut self.pools[to_pool].stats] {
            st.cached_bytes.sub(size);
        }
        let (from_seg, from, to) = (
            self.blocks[m as usize].segment,
            self.blocks[m as usize].offset,
            self.blocks[d as usize].offset,
        );
        {
            let source = &self.segments[from_seg as usize].as_ref().unwrap().payload;
            let target = &self.segments[to_seg as usize].as_ref().unwrap().payload;
            self.backend.move_bytes(source, from, target, to, size);
        }
        self.trade_places(m, d);
        for (s, live) in [(from_seg, -1i32), (to_seg, 1)] {
            let seg = self.segments[s as usize].as_mut().unwrap();
            seg.live = seg.live.wrapping_add_signed(live);
            seg.last_used = self.tick;
        }
        // The old place held the block's bytes. No trim to the cache limit
        // mid-batch: it could release a segment the batch still reads or
        // counted on (the caller trims after).
        self.blocks[d as usize].dirty = true;
        self.make_free_untrimmed(d);
        self.counters.blocks_moved += 1;
        self.counters.bytes_moved += size;
        let block = &self.blocks[m as usize];
        self.moves.push(Moved {
            id: BlockId {
                index: m,
                generation: block.generation,
            },
            from: (SegmentId(from_seg), from),
            to: (SegmentId(to_seg), to),
            size,
        });
    }

    /// Blocks `a` and `b`, of the same size in different segments, trade
    /// places: segment, offset and links, with their neighbours' links and
    /// the segments' first blocks.
    fn trade_places(&mut self, a: u32, b: u32) {
        let place = |x: &super::store::Block| (x.segment, x.offset, x.prev, x.next);
        let (sa, oa, pa, na) = place(&self.blocks[a as usize]);
        let (sb, ob, pb, nb) = place(&self.blocks[b as usize]);
        debug_assert_ne!(sa, sb, "a block moves to another segment");
        {
            let x = &mut self.blocks[a as usize];
            (x.segment, x.offset, x.prev, x.next) = (sb, ob, pb, nb);
        }
        {
            let x = &mut self.blocks[b as usize];
            (x.segment, x.offset, x.prev, x.next) = (sa, oa, pa, na);
        }
        for (prev, next, seg, now) in [(pa, na, sa, b), (pb, nb, sb, a)] {
            if prev == NONE {
                self.segments[seg as usize].as_mut().unwrap().first = now;
            } else {
                self.blocks[prev as usize].next = now;
            }
            if next != NONE {
                self.blocks[next as usize].prev = now;
            }
        }
    }
}
