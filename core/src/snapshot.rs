//! Segments → blocks, and the leak report.

use serde::{Deserialize, Serialize};

use crate::types::SegmentClass;

/// The state of one block in a [`Snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotState {
    /// Handed out.
    Live,
    /// Cached, ready for reuse.
    Free,
    /// Dropped by its owner while commands using it may not have been
    /// submitted: not reused until the pool learns they were.
    Pending,
}

/// One block in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBlock {
    /// Offset in its segment.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes asked for (0 for free and pending blocks).
    pub requested: u64,
    /// Live, free, or pending (dropped, awaiting a submit).
    pub state: SnapshotState,
    /// The allocation's label.
    pub label: Option<String>,
}

/// One segment in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSegment {
    /// Segment id.
    pub id: u32,
    /// The label the device knows the segment by (wgpu's buffer label).
    pub label: String,
    /// Pool name.
    pub pool: String,
    /// Usage bits.
    pub usage: u32,
    /// Size class.
    pub class: SegmentClass,
    /// Size in bytes.
    pub size: u64,
    /// The address used in recorded traces.
    pub address: u64,
    /// Pinned: the preallocation, or a plan's segment while it is followed.
    pub pinned: bool,
    /// Blocks in offset order; they tile the segment.
    pub blocks: Vec<SnapshotBlock>,
}

/// Segments → blocks, like `torch.cuda.memory_snapshot()`. Serialisable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    /// Every segment.
    pub segments: Vec<SnapshotSegment>,
}

impl Snapshot {
    /// Refuses a snapshot no pool could have written (one read back from a
    /// file, say), naming the segment and the block: every segment's blocks
    /// must tile it — the first at offset 0, each where the one before ends,
    /// the last ending at the segment's size, none empty — a live block may
    /// not have asked for more than it holds, no two segments share an id, and
    /// the segments' sizes add up within a `u64`.
    ///
    /// ```
    /// use vrampool::{Snapshot, SnapshotBlock, SnapshotSegment, SnapshotState};
    /// use vrampool::SegmentClass;
    /// let block = |offset, size| SnapshotBlock {
    ///     offset, size, requested: 0, state: SnapshotState::Free, label: None,
    /// };
    /// let segment = |blocks| SnapshotSegment {
    ///     id: 0, label: String::new(), pool: "p".into(), usage: 0,
    ///     class: SegmentClass::Small, size: 1024, address: 0, pinned: false, blocks,
    /// };
    /// let good = Snapshot { segments: vec![segment(vec![block(0, 256), block(256, 768)])] };
    /// assert!(good.validate().is_ok());
    /// let past_its_end = Snapshot { segments: vec![segment(vec![block(0, 256), block(256, 999_999)])] };
    /// assert!(past_its_end.validate().unwrap_err().contains("segment 0"));
    /// let huge = |id| SnapshotSegment { id, size: u64::MAX, ..segment(vec![block(0, u64::MAX)]) };
    /// let past_a_u64 = Snapshot { segments: vec![huge(0), huge(1)] };
    /// assert!(past_a_u64.validate().unwrap_err().contains("past what a u64 counts"));
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        let mut total = 0u64;
        for g in &self.segments {
            total = total.checked_add(g.size).ok_or_else(|| {
                format!(
                    "segment {}: the segments' sizes add up past what a u64 counts",
                    g.id
                )
            })?;
            if !ids.insert(g.id) {
                return Err(format!("two segments have the id {}", g.id));
            }
            let mut end = 0u64;
            for (i, b) in g.blocks.iter().enumerate() {
                let at = |what: String| {
                    Err(format!(
                        "segment {} ({} bytes), block {i} at offset {}: {what}",
                        g.id, g.size, b.offset
                    ))
                };
                if b.offset != end {
                    return at(format!("the block before it ends at {end}"));
                }
                if b.size == 0 {
                    return at("it holds 0 bytes".into());
                }
                if b.state == SnapshotState::Live && b.requested > b.size {
                    return at(format!(
                        "it asked for {} bytes but holds {}",
                        b.requested, b.size
                    ));
                }
                end = match b.offset.checked_add(b.size) {
                    Some(e) if e <= g.size => e,
                    _ => return at(format!("its {} bytes pass the segment's end", b.size)),
                };
            }
            if end != g.size {
                return Err(format!(
                    "segment {} ({} bytes): its blocks end at {end}",
                    g.id, g.size
                ));
            }
        }
        Ok(())
    }
}

/// A block still live when the pool was dropped or checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leak {
    /// Size in bytes.
    pub size: u64,
    /// Pool name.
    pub pool: String,
    /// The allocation's label, if it had one.
    pub label: Option<String>,
}

/// One line naming live blocks (the first 16) with labels and sizes, or `None`
/// when there are none: what the pool logs when it is dropped with live blocks.
pub fn leak_report(leaks: &[Leak]) -> Option<String> {
    if leaks.is_empty() {
        return None;
    }
    // Saturating: a hand-made Leak may say any size.
    let bytes = leaks.iter().fold(0u64, |sum, l| sum.saturating_add(l.size));
    let names: Vec<String> = leaks
        .iter()
        .take(16)
        .map(|l| {
            format!(
                "{} ({})",
                l.label.as_deref().unwrap_or("unlabelled"),
                crate::fmt_bytes(l.size)
            )
        })
        .collect();
    Some(format!(
        "vrampool dropped with {} live blocks ({}): {}{}",
        leaks.len(),
        crate::fmt_bytes(bytes),
        names.join(", "),
        if leaks.len() > 16 { ", …" } else { "" }
    ))
}
