//! The segment map: each segment a bar, its blocks coloured live / cached /
//! free / pending (with a legend), and on hover a block's label, size,
//! offset and, where the page knows it, its age. The bars are drawn on a
//! canvas by [`SegmentCanvas`], which the side-by-side view and the
//! imported snapshot use too.

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
        <div class="segmap">
            <SegmentCanvas id="segments" map=Memo::new(move |_| segments.with(|s| (s.bars.clone(), s.hidden))) age_unit="" />
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

/// A row of the map, in CSS pixels: the segment's label, then its bar.
const ROW: f64 = 18.0;
const BAR: f64 = 14.0;
const LABEL: f64 = 190.0;
const GAP: f64 = 8.0;

/// Where a map's bars are across a canvas `width` CSS pixels wide.
fn bar_span(width: f64) -> (f64, f64) {
    (LABEL + GAP, (width - LABEL - GAP).max(1.0))
}

/// A segment map on a canvas: a row per segment of `map` (the segments
/// drawn, largest first, and how many smaller ones are left out), each
/// block coloured by its kind; hovering a block says what it is (ages in
/// `age_unit`; none shown when empty). A map redrawn at 5 Hz holds
/// thousands of blocks: as a DOM node each, building, styling and laying
/// them out took frames (BENCHMARKS.md, "The page in the browser"); drawn,
/// a redraw is a few rectangles a block.
#[component]
pub fn SegmentCanvas(
    #[prop(into)] id: String,
    /// Read by the drawing and by each attribute: a `Memo`, so it is
    /// computed once a change.
    #[prop(into)]
    map: Signal<(Vec<SegmentView>, usize)>,
    age_unit: &'static str,
) -> impl IntoView {
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let tip = RwSignal::new(String::new());
    Effect::new(move |_| {
        map.with(|(bars, _)| {
            if let Some(c) = canvas.get() {
                draw(&c, bars);
            }
        })
    });
    let hover = move |ev: leptos::ev::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let (x, y) = (f64::from(ev.offset_x()), f64::from(ev.offset_y()));
        let (left, width) = bar_span(f64::from(c.client_width()));
        let row = (y / ROW) as usize;
        let text = map.with_untracked(|(bars, _)| {
            let seg = bars.get(row)?;
            if x < left {
                return Some(segment_tip(seg));
            }
            seg.block_at((x - left) / width)
                .map(|b| block_tip(b, age_unit))
        });
        tip.set(text.unwrap_or_default());
    };
    let count = move |kind: Option<BlockKind>| {
        map.with(|(bars, _)| {
            bars.iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| kind.is_none_or(|k| b.kind == k))
                .count()
                .to_string()
        })
    };
    view! {
        <canvas id=id class="segcanvas" node_ref=canvas role="img"
                title=move || tip.get()
                aria-label=move || map.with(|(bars, hidden)| format!("{} segments drawn, {hidden} smaller left out", bars.len()))
                data-segments=move || map.with(|(bars, _)| bars.len().to_string())
                data-blocks=move || count(None)
                data-live-blocks=move || count(Some(BlockKind::Live))
                on:mousemove=hover
                on:mouseleave=move |_| tip.set(String::new())>
        </canvas>
        {move || map.with(|(_, hidden)| (*hidden > 0).then(|| view! { <p>{format!("and {hidden} smaller segments")}</p> }))}
    }
}

/// Draws `bars` on `c`, as wide as it is laid out and a row a segment high;
/// the colours are the page's (`--live` and the others, `index.html`).
/// Notes where the first live block's middle is in `data-first-live`
/// ("x,y" in CSS pixels), for the tests to point at.
fn draw(c: &web_sys::HtmlCanvasElement, bars: &[SegmentView]) {
    use wasm_bindgen::JsCast;
    let Some(window) = web_sys::window() else {
        return;
    };
    let width = f64::from(c.client_width()).max(LABEL + GAP + 40.0);
    let height = ROW * bars.len() as f64;
    let dpr = window.device_pixel_ratio().max(1.0);
    c.set_width((width * dpr).round() as u32);
    c.set_height((height * dpr).round() as u32);
    let _ = web_sys::HtmlElement::style(c).set_property("height", &format!("{height}px"));
    let Some(ctx) = c
        .get_context("2d")
        .ok()
        .flatten()
        .and_then(|x| x.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
    else {
        return;
    };
    let _ = ctx.scale(dpr, dpr);
    let css = window.get_computed_style(c).ok().flatten();
    let colour = |k: BlockKind| {
        css.as_ref()
            .and_then(|s| s.get_property_value(&format!("--{}", k.class())).ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "#888".into())
    };
    let colours = BlockKind::ALL.map(|k| (k, colour(k)));
    let (left, span) = bar_span(width);
    ctx.set_font("11px ui-monospace, monospace");
    ctx.set_text_baseline("middle");
    let mut first_live = None;
    for (i, s) in bars.iter().enumerate() {
        let top = i as f64 * ROW + (ROW - BAR) / 2.0;
        ctx.set_fill_style_str("#444");
        let _ = ctx.fill_text_with_max_width(&segment_label(s), 0.0, top + BAR / 2.0, LABEL);
        ctx.set_fill_style_str("#f0f0f0");
        ctx.fill_rect(left, top, span, BAR);
        let size = s.size.max(1) as f64;
        for b in &s.blocks {
            let x = left + span * b.offset as f64 / size;
            // A white line ends each block, as the DOM map's border did;
            // every block is at least a pixel.
            let w = (span * b.size as f64 / size - 1.0).max(1.0);
            if let Some((_, c)) = colours.iter().find(|(k, _)| *k == b.kind) {
                ctx.set_fill_style_str(c);
            }
            ctx.fill_rect(x, top + 1.0, w, BAR - 2.0);
            if b.kind == BlockKind::Live && first_live.is_none() {
                first_live = Some((x + w / 2.0, top + BAR / 2.0));
            }
        }
        ctx.set_stroke_style_str("#ccc");
        ctx.stroke_rect(left + 0.5, top + 0.5, span - 1.0, BAR - 1.0);
    }
    let at = first_live.map_or(String::new(), |(x, y)| format!("{x:.1},{y:.1}"));
    let _ = c.set_attribute("data-first-live", &at);
}

/// A segment's label on its row.
fn segment_label(s: &SegmentView) -> String {
    format!("#{} {} {}", s.id, s.pool, fmt_bytes(s.size))
}

/// What hovering a segment's label says.
fn segment_tip(s: &SegmentView) -> String {
    format!("segment {} of pool {}: {}", s.id, s.pool, fmt_bytes(s.size))
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
