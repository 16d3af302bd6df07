//! The segment map: each segment a bar, its blocks coloured live / cached /
//! free / pending, label and size on hover.

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::page::Page;
use crate::model::{Model, SegmentView, segment_views};

/// Bars drawn; the rest are counted.
const SHOWN: usize = 48;

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

/// One bar per segment.
#[component]
pub fn SegmentMap() -> impl IntoView {
    let segments = expect_context::<Page>().segments;
    view! {
        <h2>"Segments"</h2>
        <div id="segments">
            {move || segments.with(|s| {
                let bars = s.bars.iter().map(bar).collect_view();
                let more = (s.hidden > 0).then(|| view! { <p>{format!("and {} smaller segments", s.hidden)}</p> });
                (bars, more)
            })}
        </div>
    }
}

fn bar(s: &SegmentView) -> impl IntoView + use<> {
    let size = s.size.max(1) as f64;
    let blocks = s
        .blocks
        .iter()
        .map(|(off, len, kind, label)| {
            let class = kind.class();
            let tip = format!(
                "{class} {} at +{off}{}",
                fmt_bytes(*len),
                label
                    .as_ref()
                    .map(|l| format!(" — {l}"))
                    .unwrap_or_default()
            );
            let style = format!(
                "left:{:.3}%;width:{:.3}%",
                *off as f64 / size * 100.0,
                *len as f64 / size * 100.0
            );
            view! { <div class=format!("block {class}") title=tip style=style></div> }
        })
        .collect_view();
    view! {
        <div class="segment">
            <span class="seg-label">{format!("#{} {} {}", s.id, s.pool, fmt_bytes(s.size))}</span>
            <div class="bar" title=format!("segment {} of pool {}: {}", s.id, s.pool, fmt_bytes(s.size))>{blocks}</div>
        </div>
    }
}
