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

/// A segment map's rows in CSS pixels: each segment's label, then its bar.
pub const ROW: f64 = 18.0;
/// A bar's height.
const BAR: f64 = 14.0;
/// The label's width, and the gap after it.
pub const LABEL: f64 = 190.0;
const GAP: f64 = 8.0;
/// The narrowest bar drawn.
const MIN_BAR: f64 = 40.0;

/// Where a segment map's blocks are drawn, in CSS pixels: what the canvas
/// paints and what hovering finds are one geometry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MapLayout {
    /// The map's width.
    pub width: f64,
    /// Per segment, each block's `[x0, x1)`, in offset order: a block is at
    /// least a pixel wide, so a block narrower than that may paint over
    /// the next one; the one drawn last is on top.
    pub rows: Vec<Vec<(f64, f64)>>,
}

impl MapLayout {
    /// `bars` laid out across `width` (at least the label and a 40 px bar).
    pub fn of(bars: &[SegmentView], width: f64) -> MapLayout {
        let width = width.max(LABEL + GAP + MIN_BAR);
        let (left, span) = MapLayout::bar(width);
        // The blocks sit inside the bar's 1 px frame.
        let (inner, room) = (left + 1.0, span - 2.0);
        let rows = bars
            .iter()
            .map(|s| {
                let size = s.size.max(1) as f64;
                s.blocks
                    .iter()
                    .map(|b| {
                        let x0 = inner + room * b.offset as f64 / size;
                        // A white pixel ends each block; every block keeps one.
                        let w = (room * b.size as f64 / size - 1.0).max(1.0);
                        (x0, x0 + w)
                    })
                    .collect()
            })
            .collect();
        MapLayout { width, rows }
    }

    /// The bar's left edge and width (its frame included) in a map `width` wide.
    fn bar(width: f64) -> (f64, f64) {
        (LABEL + GAP, (width - LABEL - GAP).max(MIN_BAR))
    }

    /// The row's bar, as `(x, y, w, h)`.
    pub fn bar_rect(&self, row: usize) -> (f64, f64, f64, f64) {
        let (left, span) = MapLayout::bar(self.width);
        (left, row as f64 * ROW + (ROW - BAR) / 2.0, span, BAR)
    }

    /// What is at `(x, y)`: the segment's row, and the block painted on top
    /// there (`None` over the label or between blocks).
    pub fn at(&self, x: f64, y: f64) -> Option<(usize, Option<usize>)> {
        if y < 0.0 {
            return None;
        }
        let row = (y / ROW) as usize;
        let spans = self.rows.get(row)?;
        let block = spans.iter().rposition(|&(x0, x1)| x0 <= x && x < x1);
        Some((row, block))
    }

    /// The middle of the first live block that hovering there finds (one
    /// not painted over), as `(x, y)`. Linear in the blocks: they are laid
    /// out in offset order, each at least a pixel wide, so block `i` is on
    /// top at its middle exactly when the next one starts past it (a block
    /// wider than its pixel ends a pixel before the next starts; a later
    /// one that starts at or before the middle of a one-pixel block covers it).
    pub fn first_live(&self, bars: &[SegmentView]) -> Option<(f64, f64)> {
        bars.iter()
            .zip(&self.rows)
            .enumerate()
            .find_map(|(row, (s, spans))| {
                let (_, y, _, h) = self.bar_rect(row);
                s.blocks
                    .iter()
                    .zip(spans)
                    .enumerate()
                    .find_map(|(i, (b, &(x0, x1)))| {
                        let mid = (x0 + x1) / 2.0;
                        (b.kind == BlockKind::Live && spans.get(i + 1).is_none_or(|n| n.0 > mid))
                            .then_some((mid, y + h / 2.0))
                    })
            })
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
    fn hovering_finds_the_block_drawn_there_even_the_narrowest() {
        let seg = SegmentView {
            id: 0,
            pool: "storage".into(),
            size: 1 << 20,
            // A 256-byte live block at 0, far under a pixel, then the rest cached.
            blocks: vec![
                block(0, 256, BlockKind::Live),
                block(256, (1 << 20) - 256, BlockKind::Cached),
            ],
        };
        let free = SegmentView {
            id: 1,
            pool: "storage".into(),
            size: 1 << 20,
            blocks: vec![block(0, 1 << 20, BlockKind::Free)],
        };
        let bars = [seg, free];
        let l = MapLayout::of(&bars, 600.0);
        let (left, y, span, h) = l.bar_rect(0);
        assert_eq!((left, span), (LABEL + GAP, 600.0 - LABEL - GAP));
        // Inside the frame: the first block starts a pixel in and is a pixel wide.
        assert_eq!(l.rows[0][0], (left + 1.0, left + 2.0));
        // The cached block starts under it and is painted on top there, so
        // the live one is found only where it shows: nowhere. The first
        // live block hovering can find is none.
        assert_eq!(l.at(left + 1.5, y + h / 2.0), Some((0, Some(1))));
        assert_eq!(l.first_live(&bars), None);
        assert_eq!(l.at(10.0, y + h / 2.0), Some((0, None)), "over the label");
        assert_eq!(l.at(left + span / 2.0, ROW + ROW / 2.0), Some((1, Some(0))));
        assert_eq!(
            l.at(left + span / 2.0, 2.0 * ROW + 1.0),
            None,
            "below the last row"
        );
        // A live block a few pixels wide is found at its middle.
        let wide = SegmentView {
            id: 2,
            pool: "storage".into(),
            size: 1000,
            blocks: vec![
                block(0, 100, BlockKind::Cached),
                block(100, 50, BlockKind::Live),
                block(150, 850, BlockKind::Free),
            ],
        };
        let bars = [wide];
        let l = MapLayout::of(&bars, 600.0);
        let (x, yy) = l.first_live(&bars).unwrap();
        assert_eq!(l.at(x, yy), Some((0, Some(1))));
        // Too narrow a canvas still draws a 40 px bar.
        assert_eq!(MapLayout::of(&bars, 0.0).width, LABEL + GAP + MIN_BAR);
    }

    #[test]
    fn the_first_live_block_is_the_one_hovering_finds_first_among_thousands() {
        // Blocks from 256 B to 4 KiB in a 2 MiB segment, most far under a
        // pixel, every fifth cached: the linear rule against `at`, the
        // hover itself, block by block.
        let (mut blocks, mut offset, mut n) = (Vec::new(), 0u64, 7u64);
        while offset < 2 << 20 {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let size = (256 << ((n >> 60) % 5)).min((2 << 20) - offset);
            let kind = if blocks.len() % 5 == 4 {
                BlockKind::Cached
            } else {
                BlockKind::Live
            };
            blocks.push(block(offset, size, kind));
            offset += size;
        }
        assert!(blocks.len() > 500, "{}", blocks.len());
        for width in [300.0, 600.0, 1400.0] {
            for skip in [0, 100, 400] {
                let mut bs = blocks.clone();
                bs.iter_mut()
                    .take(skip)
                    .for_each(|b| b.kind = BlockKind::Cached);
                let bars = [SegmentView {
                    id: 0,
                    pool: "storage".into(),
                    size: 2 << 20,
                    blocks: bs,
                }];
                let l = MapLayout::of(&bars, width);
                let (_, y, _, h) = l.bar_rect(0);
                let by_hover = bars[0].blocks.iter().zip(&l.rows[0]).enumerate().find_map(
                    |(i, (b, &(x0, x1)))| {
                        let mid = (x0 + x1) / 2.0;
                        (b.kind == BlockKind::Live && l.at(mid, y + h / 2.0) == Some((0, Some(i))))
                            .then_some((mid, y + h / 2.0))
                    },
                );
                assert!(by_hover.is_some());
                assert_eq!(l.first_live(&bars), by_hover, "width {width}, skip {skip}");
            }
        }
    }
}
