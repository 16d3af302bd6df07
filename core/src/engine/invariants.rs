//! [`Engine::check_invariants`]: every invariant of ARCHITECTURE.md that the
//! engine's own state can show, recounted from the blocks and segments
//! (O(blocks); for tests, fuzzing and debugging).

use std::collections::HashMap;

use crate::backend::Backend;

use super::Engine;
use super::store::{BlockState, NONE};

/// An invariant the engine's state breaks (see ARCHITECTURE.md,
/// "Invariants"): what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvariantError {
    /// A block's segment field names another segment than the list it is in.
    #[error("block {block} in segment {segment} says segment {says}")]
    WrongSegment {
        /// The block.
        block: u32,
        /// The segment whose list holds it.
        segment: u32,
        /// The segment it names.
        says: u32,
    },
    /// Blocks do not tile the segment: a gap or an overlap (invariant 1).
    #[error("segment {segment}: gap or overlap at offset {expected} (block at {found})")]
    Tiling {
        /// The segment.
        segment: u32,
        /// Where the next block should start.
        expected: u64,
        /// Where it starts.
        found: u64,
    },
    /// A block's back link does not name its predecessor.
    #[error("segment {segment}: broken prev link at block {block}")]
    BrokenLink {
        /// The segment.
        segment: u32,
        /// The block.
        block: u32,
    },
    /// A block's offset is not a multiple of the alignment (invariant 2).
    #[error("block {block} offset {offset} not aligned")]
    Misaligned {
        /// The block.
        block: u32,
        /// Its offset.
        offset: u64,
    },
    /// Two neighbours are both free (invariant 3).
    #[error("segment {segment}: two adjacent free blocks at offset {offset}")]
    Uncoalesced {
        /// The segment.
        segment: u32,
        /// Where the second starts.
        offset: u64,
    },
    /// A free block is missing from its pool's free index (invariant 4).
    #[error("free block {block} missing from the free index")]
    NotIndexed {
        /// The block.
        block: u32,
    },
    /// A pool's free index holds entries that are not its free blocks (invariant 4).
    #[error("pool {pool}: {entries} entries in the free index, {free} free blocks")]
    IndexSize {
        /// The pool.
        pool: String,
        /// Entries in the index.
        entries: u64,
        /// Free blocks found.
        free: u64,
    },
    /// An unused slot is linked into a segment.
    #[error("vacant block {block} linked in segment {segment}")]
    VacantLinked {
        /// The block.
        block: u32,
        /// The segment.
        segment: u32,
    },
    /// The blocks cover less or more than the segment.
    #[error("segment {segment}: blocks cover {covered} of {size} bytes")]
    Coverage {
        /// The segment.
        segment: u32,
        /// Bytes covered.
        covered: u64,
        /// Its size.
        size: u64,
    },
    /// A segment's live or pending count disagrees with its blocks.
    #[error("segment {segment}: {what} says {stored}, its blocks say {counted}")]
    SegmentCount {
        /// The segment.
        segment: u32,
        /// "live blocks" or "pending bytes".
        what: &'static str,
        /// What the segment stores.
        stored: u64,
        /// What its blocks add up to.
        counted: u64,
    },
    /// A pending block is not in the deferred queue exactly once (invariant 10).
    #[error("pending block {block} is listed {times} times among the deferred frees")]
    Deferred {
        /// The block.
        block: u32,
        /// How often it is listed.
        times: u32,
    },
    /// The deferred queue lists frees of blocks no longer pending (released
    /// with their segment): it would grow without bound for a caller that
    /// never reclaims (invariant 10).
    #[error("the deferred queue lists {stale} frees of blocks no longer pending")]
    StaleDeferred {
        /// How many.
        stale: usize,
    },
    /// A block the wgpu binding's front cache holds is not live in the
    /// engine, or is held twice (invariant 12).
    #[error("parked block {block}: {why}")]
    Parked {
        /// The block.
        block: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A figure differs from a recount of the blocks (invariant 5).
    #[error("pool {pool}: {stat}: stats say {stats}, recount says {recount}")]
    Stat {
        /// The pool, or "all".
        pool: String,
        /// The figure.
        stat: &'static str,
        /// What the stats say.
        stats: u64,
        /// What the blocks add up to.
        recount: u64,
    },
}

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

impl Recount {
    fn add(&mut self, r: &Recount) {
        self.allocated += r.allocated;
        self.requested += r.requested;
        self.reserved += r.reserved;
        self.pending += r.pending;
        self.segments += r.segments;
        self.allocations += r.allocations;
        self.free_blocks += r.free_blocks;
        self.pending_blocks += r.pending_blocks;
    }
}

impl<B: Backend> Engine<B> {
    /// Checks every invariant of the engine; returns the first one broken.
    /// Used by tests; O(blocks).
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        use InvariantError as E;
        let mut pools = vec![Recount::default(); self.pools.len()];
        let mut deferred = HashMap::<(u32, u32), u32>::new();
        for d in &self.deferred {
            *deferred.entry((d.block, d.generation)).or_default() += 1;
        }
        let stale = self
            .deferred
            .iter()
            .filter(|d| !d.waits(&self.blocks))
            .count();
        if stale > 0 {
            return Err(E::StaleDeferred { stale });
        }
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            let segment = i as u32;
            let r = &mut pools[s.pool as usize];
            let (mut b, mut offset, mut prev) = (s.first, 0, NONE);
            let (mut live, mut pending) = (0u64, 0u64);
            let mut prev_free = false;
            while b != NONE {
                let block = &self.blocks[b as usize];
                if block.segment != segment {
                    return Err(E::WrongSegment {
                        block: b,
                        segment,
                        says: block.segment,
                    });
                }
                if block.offset != offset {
                    return Err(E::Tiling {
                        segment,
                        expected: offset,
                        found: block.offset,
                    });
                }
                if block.prev != prev {
                    return Err(E::BrokenLink { segment, block: b });
                }
                if !block.offset.is_multiple_of(self.config.alignment) {
                    return Err(E::Misaligned {
                        block: b,
                        offset: block.offset,
                    });
                }
                match block.state {
                    BlockState::Live => {
                        live += 1;
                        r.allocated += block.size;
                        r.requested += block.requested;
                    }
                    BlockState::Free => {
                        if prev_free {
                            return Err(E::Uncoalesced { segment, offset });
                        }
                        let key = self.key(s.class);
                        if !self.pools[s.pool as usize]
                            .free
                            .contains(key, self.entry_of(key, b), b)
                        {
                            return Err(E::NotIndexed { block: b });
                        }
                        r.free_blocks += 1;
                    }
                    BlockState::Pending => {
                        pending += block.size;
                        r.pending_blocks += 1;
                        let times = deferred.get(&(b, block.generation)).copied().unwrap_or(0);
                        if times != 1 {
                            return Err(E::Deferred { block: b, times });
                        }
                    }
                    BlockState::Vacant => return Err(E::VacantLinked { block: b, segment }),
                }
                prev_free = block.state == BlockState::Free;
                offset += block.size;
                prev = b;
                b = block.next;
            }
            if offset != s.size {
                return Err(E::Coverage {
                    segment,
                    covered: offset,
                    size: s.size,
                });
            }
            for (what, stored, counted) in [
                ("live blocks", s.live as u64, live),
                ("pending bytes", s.pending, pending),
            ] {
                if stored != counted {
                    return Err(E::SegmentCount {
                        segment,
                        what,
                        stored,
                        counted,
                    });
                }
            }
            r.reserved += s.size;
            r.pending += pending;
            r.segments += 1;
            r.allocations += live;
        }
        let relocatable = self
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Live && b.relocatable)
            .count() as u64;
        if relocatable != self.relocatable_live {
            return Err(E::Stat {
                pool: "all".into(),
                stat: "relocatable live blocks",
                stats: self.relocatable_live,
                recount: relocatable,
            });
        }
        let mut total = Recount::default();
        for (p, r) in self.pools.iter().zip(&pools) {
            if p.free.len() as u64 != r.free_blocks {
                return Err(E::IndexSize {
                    pool: p.name.clone(),
                    entries: p.free.len() as u64,
                    free: r.free_blocks,
                });
            }
            total.add(r);
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
            for (stat, stats, recount) in checks {
                if stats != recount {
                    return Err(E::Stat {
                        pool: pool.to_string(),
                        stat,
                        stats,
                        recount,
                    });
                }
            }
        }
        Ok(())
    }
}
