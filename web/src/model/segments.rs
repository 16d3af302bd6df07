//! The segment map's data: each segment of a snapshot as a bar of blocks,
//! coloured by what the pool may do with them.

use vrampool::{Snapshot, SnapshotSegment, SnapshotState};

/// How a segment's blocks are coloured in the segment map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Handed out.
    Live,
    /// Free, in a segment that still holds live blocks.
    Cached,
    /// In a segment with no live block: `empty_cache` would release it.
    Free,
    /// Dropped while commands recorded before the drop may not have been
    /// submitted: not reused until the pool learns of the submit.
    Pending,
}

impl BlockKind {
    /// The CSS class of its colour (`index.html`).
    pub fn class(self) -> &'static str {
        match self {
            BlockKind::Live => "live",
            BlockKind::Cached => "cached",
            BlockKind::Free => "free",
            BlockKind::Pending => "pending",
        }
    }
}

/// One bar of the segment map.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentView {
    /// Segment id.
    pub id: u32,
    /// Pool name.
    pub pool: String,
    /// Bytes.
    pub size: u64,
    /// (offset, size, kind, label) of each block.
    pub blocks: Vec<(u64, u64, BlockKind, Option<String>)>,
}

/// The segment map of a snapshot (largest segments first, at most `max`),
/// and how many segments it leaves out.
pub fn segment_views(s: &Snapshot, max: usize) -> (Vec<SegmentView>, usize) {
    let mut segs: Vec<&SnapshotSegment> = s.segments.iter().collect();
    segs.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    let hidden = segs.len().saturating_sub(max);
    let views = segs.into_iter().take(max).map(segment_view).collect();
    (views, hidden)
}

fn segment_view(seg: &SnapshotSegment) -> SegmentView {
    let any_live = seg.blocks.iter().any(|b| b.state == SnapshotState::Live);
    let blocks = seg
        .blocks
        .iter()
        .map(|b| {
            let kind = match (b.state, any_live) {
                (SnapshotState::Live, _) => BlockKind::Live,
                (SnapshotState::Pending, _) => BlockKind::Pending,
                (SnapshotState::Free, true) => BlockKind::Cached,
                (SnapshotState::Free, false) => BlockKind::Free,
            };
            (b.offset, b.size, kind, b.label.clone())
        })
        .collect();
    SegmentView {
        id: seg.id,
        pool: seg.pool.clone(),
        size: seg.size,
        blocks,
    }
}
