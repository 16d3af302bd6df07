//! What the engine shows: stats (current and peak, per pool, counters,
//! fragmentation), the `memory_summary()` table, the segment → block
//! snapshot, the leak report, and a segment's payload and label for the
//! binding.

use crate::backend::Backend;
use crate::snapshot::{Leak, Snapshot, SnapshotBlock, SnapshotSegment, SnapshotState};
use crate::stats::{PoolReport, Stats};
use crate::types::SegmentId;

use super::Engine;
use super::store::{BlockState, NONE};

impl<B: Backend> Engine<B> {
    /// The label the device knows a segment by (`vrampool read-write segment 3`).
    pub fn segment_label(&self, seg: SegmentId) -> Option<&str> {
        self.segments
            .get(seg.0 as usize)?
            .as_ref()
            .map(|s| s.label.as_str())
    }

    /// The segment payload (e.g. the `wgpu::Buffer`) of a segment.
    pub fn segment_payload(&self, seg: SegmentId) -> Option<&B::Segment> {
        self.segments
            .get(seg.0 as usize)?
            .as_ref()
            .map(|s| &s.payload)
    }

    /// Figures for all pools, current and peak, and event counters.
    pub fn stats(&self) -> Stats {
        let largest_free_block = self
            .pools
            .iter()
            .filter_map(|p| p.free.largest())
            .max()
            .unwrap_or(0);
        // Releasable bytes, and the free bytes of every segment with no
        // live block (pinned ones too): what is cached but not fragmentation.
        let (releasable_bytes, idle_free) =
            self.segments
                .iter()
                .flatten()
                .fold((0, 0), |(releasable, idle), s| match s.live {
                    0 if s.releasable() => (releasable + s.size, idle + s.size - s.pending),
                    0 => (releasable, idle + s.size - s.pending),
                    _ => (releasable, idle),
                });
        Stats {
            total: self.total,
            // A pool that never held a byte (one a refused request named) is not shown.
            pools: self
                .pools
                .iter()
                .filter(|p| p.used)
                .map(|p| PoolReport {
                    name: p.name.clone(),
                    usage: p.usage,
                    stats: p.stats,
                })
                .collect(),
            counters: self.counters,
            largest_free_block,
            releasable_bytes,
            inactive_split_bytes: self.total.cached_bytes.current - idle_free,
            limit: self.limit,
        }
    }

    /// Resets all peaks to current values, like `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&mut self) {
        self.total.reset_peak();
        for p in &mut self.pools {
            p.stats.reset_peak();
        }
    }

    /// The `memory_summary()` table.
    pub fn memory_summary(&self) -> String {
        self.stats().summary()
    }

    /// Every segment and its blocks.
    pub fn snapshot(&self) -> Snapshot {
        let mut segments = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            let mut blocks = Vec::new();
            let mut b = s.first;
            while b != NONE {
                let block = &self.blocks[b as usize];
                blocks.push(SnapshotBlock {
                    offset: block.offset,
                    size: block.size,
                    requested: block.requested,
                    state: match block.state {
                        BlockState::Live => SnapshotState::Live,
                        BlockState::Pending => SnapshotState::Pending,
                        BlockState::Free | BlockState::Vacant => SnapshotState::Free,
                    },
                    label: block.label.as_deref().map(str::to_string),
                });
                b = block.next;
            }
            let p = &self.pools[s.pool as usize];
            segments.push(SnapshotSegment {
                id: i as u32,
                label: s.label.clone(),
                pool: p.name.clone(),
                usage: p.usage,
                class: s.class,
                size: s.size,
                address: s.address,
                pinned: s.pinned,
                blocks,
            });
        }
        Snapshot { segments }
    }

    /// Blocks still live, with their labels: the leak report.
    pub fn leaks(&self) -> Vec<Leak> {
        self.blocks
            .iter()
            .filter(|b| b.state == BlockState::Live)
            .map(|b| Leak {
                size: b.size,
                pool: self.pools[self.segments[b.segment as usize].as_ref().unwrap().pool as usize]
                    .name
                    .clone(),
                label: b.label.as_deref().map(str::to_string),
            })
            .collect()
    }
}
