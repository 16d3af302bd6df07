//! The segment map: each segment a bar, its blocks coloured live / cached /
//! free / pending (with a legend), and on hover a block's label, size,
//! offset and, where the page knows it, its age. The bars are drawn by
//! [`segment_bars`], which the side-by-side view uses too.

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::chart::swatch;
use super::page::Page;
use crate::model::axes::grouped;
use crate::model::{BlockKind, BlockView, Model, SegmentView, segment_views};

/// Bars drawn; the rest are counted.
pub const SHOWN: usize = 48;

/// The map's content (written by the tick, 5 Hz).
#[derive(Clone, Default, PartialEq)]
pub struct SegmentsView {
    /// The largest segments.
    pub bars: Vec<SegmentView>,
    /// Segments left out.
    pub hidden: usize,
}

impl SegmentsView {
    /// The segments of `m`'s pool.
    pub fn of(m: &Model) -> SegmentsView {
        let (bars, hidden) = segment_views(&m.snapshot(), SHOWN);
        SegmentsView { bars, hidden }
    }
}

/// One bar per segment, under its legend.
#[component]
pub fn SegmentMap() -> impl IntoView {
    let segments = expect_context::<Page>().segments;
    view! {
        <h2>"Segments"</h2>
        <SegmentLegend />
        <div id="segments" class="segmap">
            {move || segments.with(|s| segment_bars(&s.bars, s.hidden, ""))}
        </div>
    }
}

/// What the colours of a segment map mean.
#[component]
pub fn SegmentLegend() -> impl IntoView {
    view! {
        <div class="legend">
            {BlockKind::ALL.map(|k| swatch(k.class(), k.meaning().into())).collect_view()}
        </div>
    }
}

/// The bars of `bars`, and a line for the `hidden` smaller segments; ages
/// are in `age_unit` (none shown when empty).
pub fn segment_bars(
    bars: &[SegmentView],
    hidden: usize,
    age_unit: &'static str,
) -> impl IntoView + use<> {
    let bars = bars.iter().map(|s| bar(s, age_unit)).collect_view();
    let more = (hidden > 0).then(|| view! { <p>{format!("and {hidden} smaller segments")}</p> });
    (bars, more)
}

/// What hovering a block says.
fn block_tip(b: &BlockView, age_unit: &str) -> String {
    let mut tip = format!(
        "{}: {} at offset {}",
        b.kind.class(),
        fmt_bytes(b.size),
        grouped(b.offset)
    );
    if b.requested > 0 && b.requested != b.size {
        tip.push_str(&format!(" ({} asked for)", fmt_bytes(b.requested)));
    }
    if let Some(l) = &b.label {
        tip.push_str(&format!(" — {l}"));
    }
    if let (Some(age), false) = (b.age, age_unit.is_empty()) {
        tip.push_str(&format!("; live for {} {age_unit}", grouped(age)));
    }
    tip
}

fn bar(s: &SegmentView, age_unit: &'static str) -> impl IntoView + use<> {
    let size = s.size.max(1) as f64;
    let blocks = s
        .blocks
        .iter()
        .map(|b| {
            let style = format!(
                "left:{:.3}%;width:{:.3}%",
                b.offset as f64 / size * 100.0,
                b.size as f64 / size * 100.0
            );
            view! { <div class=format!("block {}", b.kind.class()) title=block_tip(b, age_unit) style=style></div> }
        })
        .collect_view();
    view! {
        <div class="segment">
            <span class="seg-label">{format!("#{} {} {}", s.id, s.pool, fmt_bytes(s.size))}</span>
            <div class="bar" title=format!("segment {} of pool {}: {}", s.id, s.pool, fmt_bytes(s.size))>{blocks}</div>
        </div>
    }
}
