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
    /// Bytes asked for (0 for free blocks).
    pub requested: u64,
    /// Live or free.
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
    let bytes: u64 = leaks.iter().map(|l| l.size).sum();
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
