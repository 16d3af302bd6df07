//! Giving segments back to the device: what a lowered limit, the cache limit,
//! the ladder and [`Engine::empty_cache`] release, in which order.

use std::cmp::Reverse;

use crate::backend::Backend;
use crate::config::ReleaseOrder;
use crate::types::SegmentClass;

use super::Engine;

/// The soft headroom keeps segments that hold pending blocks while the
/// workload has allocated at most this many × its high water since a
/// pending block was last reclaimed: a caller that submits gets their blocks
/// back at its next submit, while one that never tells the pool of its
/// submits (nothing pending is ever reclaimed) gets them abandoned, the only
/// way their memory comes back. 8: the smallest of 1, 2, 4, 8 with which the
/// corpus replayed with a submit every 16, 64 and 256 events gives the same
/// figures as with no such fallback (at 256, 2 × made 114 s of estimated
/// device time against 10.7); a pool never told of a submit then peaks at
/// 1.96 × peak live in the reliability churn (1.50 × when the headroom
/// abandoned them at once, 358 × and growing when it never did).
pub(super) const PENDING_PATIENCE: f64 = 8.0;

/// How many segments the soft headroom released it remembers.
pub(super) const RELEASED_KEPT: usize = 64;

/// A segment the soft headroom released: which pool and class, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Released {
    pub(super) pool: u16,
    pub(super) class: SegmentClass,
    pub(super) size: u64,
}

/// What a release's `need` is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Measure {
    /// Bytes of whole segments (what the limits count).
    Reserved,
    /// Cached bytes: a segment's size less its pending blocks (what the cache
    /// limit counts).
    Cached,
}

impl<B: Backend> Engine<B> {
    /// Releases unpinned segments that hold no live block, least recently
    /// used first, until at least `need` bytes are released (`u64::MAX`: all
    /// of them). Segments holding pending blocks go last: the backend can only
    /// abandon them. Returns the bytes released. (Largest-first and best-fit
    /// orders were measured on the traces too and hold more memory; see
    /// BENCHMARKS.md.)
    pub(super) fn release(&mut self, need: u64) -> u64 {
        self.release_measured(
            need,
            Measure::Reserved,
            ReleaseOrder::LeastRecentlyUsed,
            false,
        )
    }

    /// What the hard limit releases: [`Engine::release`] in
    /// [`Config::release_order`](crate::Config::release_order); the soft
    /// headroom releases in the same order through
    /// [`Engine::release_for_headroom`]. (The cache limit keeps least recently
    /// used first: it trims after every free, and the segment just freed is
    /// the one a loop wants next.)
    pub(super) fn release_ordered(&mut self, need: u64) -> u64 {
        let order = self.config.release_order;
        self.release_measured(need, Measure::Reserved, order, false)
    }

    /// What the soft headroom releases: [`Engine::release_ordered`], with
    /// each segment released remembered (see [`Engine::note_recreation`]),
    /// and no segment that holds pending blocks while the caller is seen to
    /// submit (see [`PENDING_PATIENCE`]). The backend could only
    /// abandon such a segment, and wgpu keeps an abandoned buffer's memory
    /// for the commands recorded with it until they have run: releasing it
    /// frees nothing now, and the loop then re-creates it. (A pool that
    /// submits every 16 operations re-created 421 GiB of segments on
    /// gan_train ÷1 that way, against 2.5 GiB for PyTorch's scheme under the
    /// same submits; BENCHMARKS.md.) The limits and `empty_cache` still
    /// abandon them, last.
    pub(super) fn release_for_headroom(&mut self, need: u64) -> u64 {
        let order = self.config.release_order;
        self.release_measured(need, Measure::Reserved, order, true)
    }

    /// Remembers a segment the soft headroom released, among the last
    /// [`RELEASED_KEPT`].
    pub(super) fn remember_released(&mut self, released: Released) {
        if self.released.len() == RELEASED_KEPT {
            self.released.pop_front();
        }
        self.released.push_back(released);
    }

    /// Notes a segment the engine just made: if the soft headroom released
    /// one of the same pool, class and size, the loop came back for it.
    pub(super) fn note_recreation(&mut self, made: Released) {
        if let Some(i) = self.released.iter().position(|&r| r == made) {
            self.released.remove(i);
            self.recreated = true;
        }
    }

    /// The bytes [`Engine::release`] could give back: every unpinned segment
    /// that holds no live block.
    pub(super) fn releasable(&self) -> u64 {
        self.segments
            .iter()
            .flatten()
            .filter(|s| s.releasable())
            .map(|s| s.size)
            .sum()
    }

    /// [`Engine::release`] with `need` counted in `measure`; with
    /// `for_headroom`, segments holding pending blocks are kept (within
    /// [`PENDING_PATIENCE`]) and each
    /// segment released joins the last [`RELEASED_KEPT`] the soft headroom
    /// released.
    fn release_measured(
        &mut self,
        need: u64,
        measure: Measure,
        order: ReleaseOrder,
        for_headroom: bool,
    ) -> u64 {
        if need == 0 {
            return 0;
        }
        let keep_pending = for_headroom
            && (self.allocated_since_reclaim as f64) <= PENDING_PATIENCE * self.high_water as f64;
        let mut candidates: Vec<(bool, u64, u64, u32)> = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Some(s) if s.releasable() && !(keep_pending && s.pending > 0) => {
                    Some((s.pending > 0, s.last_used, s.size, i as u32))
                }
                _ => None,
            })
            .collect();
        match order {
            ReleaseOrder::MostRecentlyUsed => {
                candidates.sort_unstable_by_key(|&(pending, used, size, i)| {
                    (pending, Reverse(used), size, i)
                })
            }
            ReleaseOrder::LeastRecentlyUsed => candidates.sort_unstable(),
        }
        let (mut released, mut counted) = (0, 0);
        for (_, _, _, i) in candidates {
            if counted >= need {
                break;
            }
            let (pending, pool, class) = self.segments[i as usize]
                .as_ref()
                .map_or((0, 0, SegmentClass::Large), |s| {
                    (s.pending, s.pool, s.class)
                });
            let size = self.remove_segment(i);
            if for_headroom {
                self.remember_released(Released { pool, class, size });
            }
            released += size;
            counted += match measure {
                Measure::Reserved => size,
                Measure::Cached => size - pending,
            };
        }
        if released > 0 {
            self.backend.flush_releases();
        }
        released
    }

    /// Releases the segment of cached block `b` if it holds no live or
    /// pending block and is not pinned.
    pub(super) fn release_segment_of(&mut self, b: u32) {
        if self.release_segment(self.blocks[b as usize].segment, false) > 0 {
            self.backend.flush_releases();
        }
    }

    /// Releases `segment` (destroyed, or with `abandon` only dropped) if it
    /// is still held, holds no live or pending block and is not pinned.
    /// Returns the bytes released.
    pub(super) fn release_segment(&mut self, segment: u32, abandon: bool) -> u64 {
        if self.segments[segment as usize]
            .as_ref()
            .is_some_and(|s| s.releasable() && s.pending == 0)
        {
            self.remove_segment_as(segment, abandon)
        } else {
            0
        }
    }

    /// Cached bytes in segments a release could give back (no live block,
    /// not pinned): what the cache limit counts. Free space beside live
    /// blocks is not counted: no release can reach it.
    pub(super) fn idle_cached(&self) -> u64 {
        self.segments
            .iter()
            .flatten()
            .filter(|s| s.releasable())
            .map(|s| s.size - s.pending)
            .sum()
    }

    /// Releases what the cache limit says is too much: free bytes in
    /// segments with no live block above the limit.
    pub(super) fn trim_cache(&mut self) {
        // Idle bytes are at most the cached bytes: below the limit, no walk.
        if let Some(limit) = self.config.cache_limit
            && self.total.cached_bytes.current > limit
        {
            let idle = self.idle_cached();
            if idle > limit {
                self.release_measured(
                    idle - limit,
                    Measure::Cached,
                    ReleaseOrder::LeastRecentlyUsed,
                    false,
                );
            }
        }
    }

    /// Releases every cached segment that holds no live block (pinned
    /// preallocations excepted) back to the device, like
    /// `torch.cuda.empty_cache()`. Never touches live blocks. Gives up a
    /// plan being followed first ([`Engine::stop_following`]), so its empty
    /// segments go too. Returns the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        self.stop_following();
        let released = self.release(u64::MAX);
        self.counters.last_empty_cache_bytes = released;
        released
    }

    /// The rest of the same [`Engine::empty_cache`], which has released
    /// `so_far` bytes: releases what became releasable since (blocks freed
    /// while it ran, by a callback its release's poll fired or by another
    /// thread); the call's figure becomes the sum. Returns the bytes
    /// released now.
    #[cfg(feature = "wgpu")]
    pub(crate) fn empty_cache_continued(&mut self, so_far: u64) -> u64 {
        let released = self.release(u64::MAX);
        self.counters.last_empty_cache_bytes = so_far + released;
        released
    }
}
