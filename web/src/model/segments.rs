//! The segment map's data: each segment of a snapshot as a bar of blocks,
//! coloured by what the pool may do with them, with what a hover tells of
//! each block (label, size, offset, and its age where the page knows it).

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
    /// Every kind, in the legend's order.
    pub const ALL: [BlockKind; 4] = [
        BlockKind::Live,
        BlockKind::Cached,
        BlockKind::Free,
        BlockKind::Pending,
    ];

    /// The CSS class of its colour (`index.html`).
    pub fn class(self) -> &'static str {
        match self {
            BlockKind::Live => "live",
            BlockKind::Cached => "cached",
            BlockKind::Free => "free",
            BlockKind::Pending => "pending",
        }
    }

    /// What the legend says it is.
    pub fn meaning(self) -> &'static str {
        match self {
            BlockKind::Live => "live: handed out",
            BlockKind::Cached => "cached: free, in a segment still in use",
            BlockKind::Free => "free: in an unused segment (empty_cache releases it)",
            BlockKind::Pending => "pending: dropped, waiting for a submit",
        }
    }
}

/// One block of a bar.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockView {
    /// Offset in its segment.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Bytes asked for (0 unless live).
    pub requested: u64,
    /// Its colour.
    pub kind: BlockKind,
    /// The allocation's label.
    pub label: Option<String>,
    /// How long it has been live, where the page knows (in the view's unit).
    pub age: Option<u64>,
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
    /// Its blocks, in offset order.
    pub blocks: Vec<BlockView>,
}

/// The segment map of a snapshot (largest segments first, at most `max`),
/// and how many segments it leaves out.
pub fn segment_views(s: &Snapshot, max: usize) -> (Vec<SegmentView>, usize) {
    segment_views_aged(s, max, |_, _| None)
}

/// [`segment_views`], with the age `age(segment, offset)` gives each live block.
pub fn segment_views_aged(
    s: &Snapshot,
    max: usize,
    age: impl Fn(u32, u64) -> Option<u64>,
) -> (Vec<SegmentView>, usize) {
    let mut segs: Vec<&SnapshotSegment> = s.segments.iter().collect();
    segs.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    let hidden = segs.len().saturating_sub(max);
    let views = segs
        .into_iter()
        .take(max)
        .map(|seg| segment_view(seg, &age))
        .collect();
    (views, hidden)
}

fn segment_view(seg: &SnapshotSegment, age: &impl Fn(u32, u64) -> Option<u64>) -> SegmentView {
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
            BlockView {
                offset: b.offset,
                size: b.size,
                requested: b.requested,
                kind,
                label: b.label.clone(),
                age: (kind == BlockKind::Live)
                    .then(|| age(seg.id, b.offset))
                    .flatten(),
            }
        })
        .collect();
    SegmentView {
        id: seg.id,
        pool: seg.pool.clone(),
        size: seg.size,
        blocks,
    }
}

impl SegmentView {
    /// The block drawn at `frac` (0–1) of the bar's width: the one whose
    /// bytes hold that point of the segment, if any.
    pub fn block_at(&self, frac: f64) -> Option<&BlockView> {
        if !(0.0..1.0).contains(&frac) {
            return None;
        }
        let at = (frac * self.size as f64) as u64;
        let i = self.blocks.partition_point(|b| b.offset + b.size <= at);
        self.blocks
            .get(i)
            .filter(|b| b.offset <= at && at < b.offset + b.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(offset: u64, size: u64, kind: BlockKind) -> BlockView {
        BlockView {
            offset,
            size,
            requested: 0,
            kind,
            label: None,
            age: None,
        }
    }

    #[test]
    fn the_block_under_a_point_of_the_bar_is_the_one_holding_its_byte() {
        let seg = SegmentView {
            id: 3,
            pool: "storage".into(),
            size: 1000,
            // A gap at 300..400 (a snapshot always covers its segment, but
            // the lookup must not assume it).
            blocks: vec![
                block(0, 300, BlockKind::Live),
                block(400, 600, BlockKind::Cached),
            ],
        };
        assert_eq!(seg.block_at(0.0).map(|b| b.offset), Some(0));
        assert_eq!(seg.block_at(0.2999).map(|b| b.offset), Some(0));
        assert_eq!(seg.block_at(0.35), None);
        assert_eq!(seg.block_at(0.4).map(|b| b.offset), Some(400));
        assert_eq!(
            seg.block_at(0.9999).map(|b| b.kind),
            Some(BlockKind::Cached)
        );
        assert_eq!(seg.block_at(1.0), None);
        assert_eq!(seg.block_at(-0.1), None);
    }
}
