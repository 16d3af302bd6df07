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
use crate::model::{
    BlockKind, BlockView, LABEL, MapLayout, Model, ROW, SegmentView, segment_views,
};

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

/// A segment map on a canvas: a row per segment of `map` (the segments
/// drawn, largest first, and how many smaller ones are left out), each
/// block coloured by its kind; hovering a block outlines it and says what
/// it is (ages in `age_unit`; none shown when empty), hovering a label or
/// a gap says what the segment is. A map redrawn at 5 Hz holds thousands
/// of blocks: as a DOM node each, building, styling and laying them out
/// took frames (BENCHMARKS.md, "The page in the browser"); drawn, a redraw
/// is a rectangle a block. Drawing and hovering share one [`MapLayout`],
/// made anew at each redraw and when the window is resized.
#[component]
pub fn SegmentCanvas(
    #[prop(into)] id: String,
    /// Read by the drawing, the hover and each attribute: pass a `Memo`,
    /// so it is computed once a change.
    #[prop(into)]
    map: Signal<(Vec<SegmentView>, usize)>,
    age_unit: &'static str,
) -> impl IntoView {
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let layout = RwSignal::new(MapLayout::default());
    let pointer = RwSignal::new(None::<(f64, f64)>);
    let resized = Trigger::new();
    let listener = window_event_listener(leptos::ev::resize, move |_| resized.notify());
    on_cleanup(move || listener.remove());
    Effect::new(move |_| {
        resized.track();
        map.with(|(bars, _)| {
            if let Some(c) = canvas.get() {
                layout.set(draw(&c, bars));
            }
        })
    });
    // The segment row and block under the pointer, in what was drawn.
    let hovered = Memo::new(move |_| {
        let (x, y) = pointer.get()?;
        layout.with(|l| l.at(x, y))
    });
    let tip = move || {
        let (row, block) = hovered.get()?;
        map.with(|(bars, _)| {
            let seg = bars.get(row)?;
            Some(match block.and_then(|i| seg.blocks.get(i)) {
                Some(b) => block_tip(b, age_unit),
                None => segment_tip(seg),
            })
        })
    };
    let outline = move || {
        let (row, Some(i)) = hovered.get()? else {
            return None;
        };
        layout.with(|l| {
            let (x0, x1) = *l.rows.get(row)?.get(i)?;
            let (_, y, _, h) = l.bar_rect(row);
            Some(format!(
                "left:{x0:.1}px;top:{y:.1}px;width:{:.1}px;height:{h:.1}px",
                x1 - x0
            ))
        })
    };
    let point = move |ev: leptos::ev::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let r = c.get_bounding_client_rect();
        pointer.set(Some((
            f64::from(ev.client_x()) - r.left(),
            f64::from(ev.client_y()) - r.top(),
        )));
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
    let first_live = move || {
        let at = map.with(|(bars, _)| layout.with(|l| l.first_live(bars)));
        at.map_or(String::new(), |(x, y)| format!("{x:.1},{y:.1}"))
    };
    view! {
        <div class="segcanvas-wrap">
            <canvas id=id class="segcanvas" node_ref=canvas role="img"
                    title=move || tip().unwrap_or_default()
                    aria-label=move || map.with(|(bars, hidden)| format!("{} segments drawn, {hidden} smaller left out", bars.len()))
                    data-segments=move || map.with(|(bars, _)| bars.len().to_string())
                    data-blocks=move || count(None)
                    data-live-blocks=move || count(Some(BlockKind::Live))
                    data-first-live=first_live
                    on:mousemove=point
                    on:mouseleave=move |_| pointer.set(None)>
            </canvas>
            {move || outline().map(|style| view! { <div class="seg-hover" style=style></div> })}
        </div>
        {move || map.with(|(_, hidden)| (*hidden > 0).then(|| view! { <p>{format!("and {hidden} smaller segments")}</p> }))}
    }
}

/// Draws `bars` on `c`, as wide as it is laid out and a row a segment high,
/// and returns where it drew them; the colours are the page's (`--live`
/// and the others, `index.html`).
fn draw(c: &web_sys::HtmlCanvasElement, bars: &[SegmentView]) -> MapLayout {
    use wasm_bindgen::JsCast;
    let height = ROW * bars.len() as f64;
    // The height first: a map taller than its box brings a scrollbar,
    // which narrows the width read next.
    let _ = web_sys::HtmlElement::style(c).set_property("height", &format!("{height}px"));
    let layout = MapLayout::of(bars, c.get_bounding_client_rect().width());
    let Some(window) = web_sys::window() else {
        return layout;
    };
    let dpr = window.device_pixel_ratio().max(1.0);
    // Setting the size clears the canvas and resets its transform.
    c.set_width((layout.width * dpr).round() as u32);
    c.set_height((height * dpr).round() as u32);
    let Some(ctx) = c
        .get_context("2d")
        .ok()
        .flatten()
        .and_then(|x| x.dyn_into::<web_sys::CanvasRenderingContext2d>().ok())
    else {
        return layout;
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
    ctx.set_font("11px ui-monospace, monospace");
    ctx.set_text_baseline("middle");
    for (row, (s, spans)) in bars.iter().zip(&layout.rows).enumerate() {
        let (left, top, span, h) = layout.bar_rect(row);
        ctx.set_fill_style_str("#444");
        let _ = ctx.fill_text_with_max_width(&segment_label(s), 0.0, top + h / 2.0, LABEL);
        ctx.set_fill_style_str("#ccc");
        ctx.fill_rect(left, top, span, h);
        ctx.set_fill_style_str("#f0f0f0");
        ctx.fill_rect(left + 1.0, top + 1.0, span - 2.0, h - 2.0);
        for (b, &(x0, x1)) in s.blocks.iter().zip(spans) {
            if let Some((_, c)) = colours.iter().find(|(k, _)| *k == b.kind) {
                ctx.set_fill_style_str(c);
            }
            ctx.fill_rect(x0, top + 1.0, x1 - x0, h - 2.0);
        }
    }
    layout
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
