//! Following a static plan ([`Foresight`]): a workload that runs again as it
//! ran before hands the engine the plan of its recording, and the engine
//! places each request where the plan says — the layout a pool that knew
//! every lifetime would choose, in segments made once — falling back to the
//! policy wherever the workload departs from it.
//!
//! The plan's segments are pinned and of their own class
//! ([`SegmentClass::Planned`]), so no request the plan does not place takes
//! their space and moves a planned block's place out from under it. A
//! request is matched to the plan by size, in the plan's order: the next
//! planned allocation of its rounded size within [`WINDOW`] entries of the
//! last one matched, if its range is free. Once [`GIVE_UP`] requests in a row
//! find no match, or the plan is used up, the engine stops following: the
//! plan's segments become ordinary large segments (unpinned, their free
//! space open to best fit, released as any other).

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::trace::{Foresight, PoolKey, RecordedPlan};
use crate::types::SegmentClass;

use super::Engine;
use super::pinned::{Pinned, PinnedPlan, PinnedSegment};
use super::store::{BlockState, NONE};

/// How many planned allocations past the last match a request may match:
/// a few allocations the recording had and this run lacks are skipped over.
pub(super) const WINDOW: usize = 8;

/// Requests in a row that match nothing before the engine stops following.
pub(super) const GIVE_UP: u32 = 64;

/// Requests (of any pool) that may pass with no plan matching any before the
/// engine gives every plan up: a run that has outlasted its recording, or a
/// pool it no longer uses, must not keep its plans — and the wgpu binding's
/// front cache closed — for good. (While one plan still matches, the others
/// wait: a pool used once a step keeps its plan through a long step.)
pub(super) const STALE: u64 = 4096;

/// A planned segment is under this (1 TiB): its free blocks are indexed by
/// `segment << 40 | offset` (see `free_index::BY_OFFSET`).
const MAX_PLANNED_SEGMENT: u64 = 1 << 40;

/// Engine segment indexes a plan's segments may have (2^24: the index's
/// value holds 64 − 40 bits of segment).
const MAX_PLANNED_INDEX: u32 = 1 << 24;

/// A plan being followed.
pub(super) struct Following {
    /// The pool the plan's requests come from.
    pool: u16,
    /// Every planned allocation, in the plan's order.
    entries: Vec<Entry>,
    /// The next entry to match.
    cursor: usize,
    /// The plan's segments, as engine segment indexes.
    segments: Vec<u32>,
    misses_in_a_row: u32,
    /// The engine's tick at the last match (or when following began).
    last_match: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    size: u64,
    /// An engine segment index (an index into the plan's segments while
    /// the plan is a `PinnedPlan`).
    segment: u32,
    offset: u64,
}

/// How following a plan went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FollowStats {
    /// Requests placed where the plan said.
    pub placed: u64,
    /// Requests of the plan's pool the plan did not place (served by the
    /// policy instead).
    pub unplaced: u64,
    /// Whether the engine follows the plan still.
    pub following: bool,
}

impl<B: Backend> Engine<B> {
    /// Follows `plan` for the requests of `usage` (shared, group 0: the
    /// engine's default requests, as a trace replay makes them): creates the
    /// plan's segments at once, pinned, and from then on places each request
    /// the plan foresaw at its planned offset. The plan must be made with
    /// this engine's alignment (`Foresight::plan(&trace,
    /// engine.config().alignment, ..)`) from a recording of the same
    /// workload (`Engine::start_recording`, or the trace a harness replays).
    /// The plan's segments are pinned and of their own class
    /// ([`SegmentClass::Planned`]): no request the plan does not place takes
    /// their space. A request is matched by size, in the plan's order: the
    /// next planned allocation of its rounded size among the 8 after the
    /// last one matched, if its range is free; a request the plan does not
    /// foresee is served by the policy as always. Once 64 requests in a row
    /// match nothing (the workload has left the plan), or the plan is used
    /// up, or no plan has matched anything in 4096 requests of any pool (the
    /// run no longer makes them), the engine stops following
    /// ([`Engine::stop_following`]), and so
    /// does [`Engine::empty_cache`] (a run that ends before its plan does
    /// gets the plan's memory back there). While a plan is followed the soft
    /// headroom does not act (the plan is the memory the workload was
    /// foreseen to need), and the plan's free space counts as cached but not
    /// in `largest_free_block`. A plan followed before is given up first.
    /// Under a limit, cached segments are released to make room for the
    /// plan's, as a request's would be; a plan that does not fit beside what
    /// cannot be released, or that this engine cannot follow (another
    /// alignment, a segment above [`Engine::max_segment_size`]), is an
    /// [`Error::InvalidArgument`] and pins nothing.
    ///
    /// ```
    /// use vrampool::trace::Foresight;
    /// use vrampool::{Config, Engine, Request, SimulatedDevice, Trace, replay};
    /// // A 3 MiB tensor beside a 1 MiB one, both freed, then a 4 MiB one.
    /// let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
    ///            0,0,allocate,0x1,3145728,0x0\n0,0,allocate,0x2,1048576,0x0\n\
    ///            0,0,free,0x1,3145728,0x0\n0,0,free,0x2,1048576,0x0\n\
    ///            0,0,allocate,0x3,4194304,0x0\n0,0,free,0x3,4194304,0x0\n";
    /// let trace = Trace::parse("recorded", csv.as_bytes())?;
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let plan = Foresight::plan(&trace, e.config().alignment, 1 << 30)?;
    /// e.follow(&plan, 0)?;
    /// let report = replay(&mut e, &trace, 0);
    /// // One 4 MiB segment, made once, serves all three.
    /// assert_eq!((report.peak_reserved, report.device_allocs), (4 << 20, 0));
    /// assert_eq!(e.follow_stats().placed, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn follow(&mut self, plan: &Foresight, usage: u32) -> Result<()> {
        let shared = PoolKey {
            usage,
            ..PoolKey::default()
        };
        self.follow_pools(&[(shared, plan)])
    }

    /// Follows a plan of each pool of a recording ([`RecordedPlan`], from
    /// `RecordedPlan::from_recording` of the log `take_recording` gave on an
    /// earlier run of the same workload), as [`Engine::follow`] follows one:
    /// every pool's plan segments made at once (all or none), each pool's
    /// requests matched to its own plan. The engine follows until every
    /// plan is used up or given up; `follow_stats` counts over all of them.
    /// A plan of an exclusive pool is refused: its blocks are never shared.
    pub fn follow_recorded(&mut self, plan: &RecordedPlan) -> Result<()> {
        let pools: Vec<(PoolKey, &Foresight)> = plan.pools.iter().map(|(k, p)| (*k, p)).collect();
        self.follow_pools(&pools)
    }

    fn follow_pools(&mut self, plans: &[(PoolKey, &Foresight)]) -> Result<()> {
        let plan = self.plan_follow_pools(plans)?;
        self.make_pinned(plan)
    }

    /// The first phase of [`Engine::follow_recorded`] (see `pinned.rs`):
    /// the plan checked, a plan followed before given up, room made under
    /// the limit, and the segments to create. Committed
    /// ([`Engine::commit_pinned`]), the engine follows it.
    pub fn plan_follow_recorded(&mut self, plan: &RecordedPlan) -> Result<PinnedPlan> {
        let pools: Vec<(PoolKey, &Foresight)> = plan.pools.iter().map(|(k, p)| (*k, p)).collect();
        self.plan_follow_pools(&pools)
    }

    fn plan_follow_pools(&mut self, plans: &[(PoolKey, &Foresight)]) -> Result<PinnedPlan> {
        self.check_lost()?;
        self.stop_following();
        let align = self.config.alignment;
        for (i, (key, plan)) in plans.iter().enumerate() {
            if key.exclusive {
                return Err(Error::InvalidArgument(format!(
                    "the plan lays out exclusive requests (usage {:#x}), whose blocks each have a \
                     segment of their own: leave that pool out of the plan",
                    key.usage
                )));
            }
            if plans[..i].iter().any(|(k, _)| k == key) {
                return Err(Error::InvalidArgument(format!(
                    "the plan has two plans for the pool of usage {:#x}, group {}: one plan a pool",
                    key.usage, key.group
                )));
            }
            self.check_plan(plan, align)?;
        }
        // Every pool the plan names made before any segment is, so a plan
        // past the pool cap is refused with nothing made.
        for (key, _) in plans {
            self.pool_index(key.usage, false, key.group, || {
                format!("usage {:#x}", key.usage)
            })?;
        }
        let planned: u64 = plans.iter().map(|(_, p)| p.reserved()).sum();
        if let Some(limit) = self.room_for_pinned(planned) {
            return Err(Error::InvalidArgument(format!(
                "cannot follow a plan of {}: the limit is {} and {}; raise the limit, drop \
                 live blocks, or follow without one",
                crate::fmt_bytes(planned),
                crate::fmt_bytes(limit),
                self.held_words()
            )));
        }
        let mut segments = Vec::new();
        let mut pools = Vec::with_capacity(plans.len());
        for (key, plan) in plans {
            let name = || format!("usage {:#x}", key.usage);
            let pool = self.pool_index(key.usage, false, key.group, name)?;
            let first = segments.len() as u32;
            for (i, &size) in plan.segments.iter().enumerate() {
                segments.push(PinnedSegment {
                    pool,
                    usage: key.usage,
                    label: format!("vrampool planned segment {i}"),
                    class: SegmentClass::Planned,
                    size,
                });
            }
            let entries = plan
                .blocks
                .iter()
                .map(|b| Entry {
                    size: b.size,
                    segment: first + b.segment as u32,
                    offset: b.offset,
                })
                .collect();
            pools.push((pool, entries, first as usize..segments.len()));
        }
        Ok(self.pinned_plan(segments, Pinned::Follow(pools)))
    }

    /// Follows `pools` (each its planned blocks and its range of
    /// `segments`, the plan's pinned segments just made, which the blocks'
    /// segment indexes point into): the second phase of following, from
    /// [`Engine::commit_pinned`].
    pub(super) fn start_following(
        &mut self,
        pools: Vec<(u16, Vec<Entry>, std::ops::Range<usize>)>,
        segments: Vec<u32>,
    ) -> Result<()> {
        // A plan committed after another began (the browser awaits a plan's
        // segments) takes its place.
        self.stop_following();
        if let Some(&s) = segments.iter().find(|&&s| s >= MAX_PLANNED_INDEX) {
            // Those made become ordinary cached segments.
            self.unplan(segments);
            return Err(Error::InvalidArgument(format!(
                "the engine holds {s} segment slots: a plan's segments must have an index \
                 under {MAX_PLANNED_INDEX}; empty the cache first"
            )));
        }
        let mut followed: Vec<Following> = Vec::with_capacity(pools.len());
        for (pool, mut entries, own) in pools {
            for e in &mut entries {
                e.segment = segments[e.segment as usize];
            }
            followed.push(Following {
                pool,
                entries,
                cursor: 0,
                segments: segments[own].to_vec(),
                misses_in_a_row: 0,
                last_match: self.tick,
            });
        }
        // A plan with nothing to place is used up from the start.
        let (followed, used_up): (Vec<_>, Vec<_>) =
            followed.into_iter().partition(|f| !f.entries.is_empty());
        for f in used_up {
            self.unplan(f.segments);
        }
        self.follow_stats = FollowStats {
            following: !followed.is_empty(),
            ..FollowStats::default()
        };
        self.following = followed;
        Ok(())
    }

    /// Refuses a plan this engine cannot follow.
    fn check_plan(&self, plan: &Foresight, align: u64) -> Result<()> {
        if let Some(b) = plan
            .blocks
            .iter()
            .find(|b| b.offset % align != 0 || b.size % align != 0)
        {
            return Err(Error::InvalidArgument(format!(
                "the plan places a block of {} bytes at offset {}, not a multiple of the \
                 engine's alignment {align}: plan with Foresight::plan(&trace, {align}, ..)",
                b.size, b.offset
            )));
        }
        if let Some(b) = plan
            .blocks
            .iter()
            .find(|b| b.segment >= plan.segments.len())
        {
            return Err(Error::InvalidArgument(format!(
                "the plan places a block in segment {} of {}: not a plan Foresight::plan made",
                b.segment,
                plan.segments.len()
            )));
        }
        if let Some(b) = plan.blocks.iter().find(|b| {
            b.size == 0
                || b.offset
                    .checked_add(b.size)
                    .is_none_or(|end| end > plan.segments[b.segment])
        }) {
            return Err(Error::InvalidArgument(format!(
                "the plan places a block of {} bytes at offset {} of segment {}, which is {} \
                 bytes: not a plan Foresight::plan made",
                b.size, b.offset, b.segment, plan.segments[b.segment]
            )));
        }
        if let Some(&s) = plan.segments.iter().find(|&&s| s >= MAX_PLANNED_SEGMENT) {
            return Err(Error::InvalidArgument(format!(
                "the plan has a segment of {}: a plan's segments must be under {} (its free \
                 blocks are indexed by segment << 40 | offset); plan with a smaller max_segment",
                crate::fmt_bytes(s),
                crate::fmt_bytes(MAX_PLANNED_SEGMENT)
            )));
        }
        if let Some(&s) = plan.segments.iter().find(|&&s| s > self.max_segment) {
            return Err(Error::InvalidArgument(format!(
                "the plan has a segment of {}, above the largest this engine may create, {}: \
                 plan with Foresight::plan(&trace, {align}, engine.max_segment_size())",
                crate::fmt_bytes(s),
                crate::fmt_bytes(self.max_segment)
            )));
        }
        Ok(())
    }

    /// Stops following the plan, if one is followed: its segments become
    /// ordinary large segments, unpinned (their free space serves any
    /// request by best fit; the headroom, limits and `empty_cache` release
    /// them once nothing in them is live).
    pub fn stop_following(&mut self) {
        while !self.following.is_empty() {
            self.stop_following_plan(self.following.len() - 1);
        }
    }

    /// Stops following the `i`th plan.
    fn stop_following_plan(&mut self, i: usize) {
        let f = self.following.swap_remove(i);
        self.follow_stats.following = !self.following.is_empty();
        self.unplan(f.segments);
    }

    /// Makes the plan's `segments` ordinary large segments: unpinned, their
    /// free blocks re-indexed by size under the large key.
    fn unplan(&mut self, segments: Vec<u32>) {
        let large = self.key(SegmentClass::Large);
        let planned = self.key(SegmentClass::Planned);
        for s in segments {
            let Some(seg) = self.segments[s as usize].as_ref() else {
                continue;
            };
            let (pool, first) = (seg.pool as usize, seg.first);
            // Re-indexed before the class changes (entry_of reads the key).
            let mut b = first;
            while b != NONE {
                if self.blocks[b as usize].state == BlockState::Free {
                    let entry = self.entry_of(planned, b);
                    let size = self.blocks[b as usize].size;
                    let free = &mut self.pools[pool].free;
                    free.remove(planned, entry, b);
                    free.insert(large, size, b);
                }
                b = self.blocks[b as usize].next;
            }
            let seg = self.segments[s as usize].as_mut().unwrap();
            seg.class = SegmentClass::Large;
            seg.pinned = false;
        }
    }

    /// How following the plan went (see [`Engine::follow`]).
    pub fn follow_stats(&self) -> FollowStats {
        self.follow_stats
    }

    /// The free block at the planned place of a request of `rounded` bytes
    /// in `pool`, cut to start at the planned offset (take it with
    /// `take_block`), if the plan foresaw the request; counts the match or
    /// the miss, and stops following when the plan is used up or the
    /// workload has left it.
    pub(super) fn planned_block(&mut self, pool: u16, rounded: u64) -> Option<u32> {
        if self.following.is_empty() {
            return None;
        }
        if self.tick.is_multiple_of(64) {
            self.give_up_stale_plans();
        }
        let i = self.following.iter().position(|f| f.pool == pool)?;
        let f = &self.following[i];
        let end = (f.cursor + WINDOW).min(f.entries.len());
        let found = (f.cursor..end)
            .find(|&k| f.entries[k].size == rounded)
            .map(|k| (k, f.entries[k]));
        let placed = found.and_then(|(k, e)| {
            Some((k, e, self.free_block_at(pool, e.segment, e.offset, e.size)?))
        });
        let f = &mut self.following[i];
        let Some((k, e, b)) = placed else {
            self.follow_stats.unplaced += 1;
            f.misses_in_a_row += 1;
            if f.misses_in_a_row >= GIVE_UP {
                self.stop_following_plan(i);
            }
            return None;
        };
        f.cursor = k + 1;
        f.misses_in_a_row = 0;
        f.last_match = self.tick;
        self.follow_stats.placed += 1;
        Some(self.cut_at(b, e.offset))
    }

    /// Gives up every plan once none has matched anything in the last
    /// [`STALE`] requests of any pool.
    fn give_up_stale_plans(&mut self) {
        let tick = self.tick;
        if self
            .following
            .iter()
            .all(|f| tick.saturating_sub(f.last_match) > STALE)
        {
            self.stop_following();
        }
    }

    /// Stops following once the last planned allocation was placed (after
    /// its block was taken, under the plan's split rule).
    pub(super) fn stop_following_if_used_up(&mut self) {
        if let Some(i) = self
            .following
            .iter()
            .position(|f| f.cursor == f.entries.len())
        {
            self.stop_following_plan(i);
        }
    }

    /// The free block of `segment` (of the pool `pool`) that holds
    /// `offset..offset + size`: one lookup, since a plan's free blocks are
    /// indexed by segment and offset.
    fn free_block_at(&self, pool: u16, segment: u32, offset: u64, size: u64) -> Option<u32> {
        let key = self.key(SegmentClass::Planned);
        let at = (segment as u64) << 40 | offset;
        let (_, b) = self.pools[pool as usize].free.at_or_below(key, at)?;
        let block = &self.blocks[b as usize];
        let holds = block.segment == segment
            && block.offset <= offset
            && offset + size <= block.offset + block.size;
        holds.then_some(b)
    }

    /// Splits free block `b` so that a free block starts at `offset` (inside
    /// it), and returns that block.
    fn cut_at(&mut self, b: u32, offset: u64) -> u32 {
        let (segment, start) = {
            let block = &self.blocks[b as usize];
            (block.segment, block.offset)
        };
        if offset == start {
            return b;
        }
        let (pool, class) = {
            let s = self.segments[segment as usize].as_ref().unwrap();
            (s.pool as usize, s.class)
        };
        let key = self.key(class);
        debug_assert_eq!(
            key,
            super::free_index::BY_OFFSET,
            "only a plan's blocks are cut"
        );
        // Indexed by offset, `b` keeps its entry: both halves stay free.
        let rest = self.split_off(b, offset - start, pool, key);
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.free_blocks.add(1);
        }
        rest
    }
}
