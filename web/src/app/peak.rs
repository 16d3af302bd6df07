//! What holds memory at the peak: the side-by-side trace's allocations live
//! at its peak, each a band stacked over the whole trace (memory_viz's
//! active memory timeline), coloured by size class, with a legend, a title
//! on every band and the peak marked; a click scrubs there.

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::chart::{Frame, axes, pointer_fraction, swatch};
use super::compare::scrub_to;
use super::page::Page;
use crate::model::axes::{Tick, byte_ticks, event_ticks, grouped, polyline};
use crate::model::{Band, BandKind, PeakStack, SIZE_CLASSES, size_class};

/// The chart's viewBox.
const CHART: Frame = Frame::new(640.0, 270.0);

/// One band as drawn.
#[derive(Clone, PartialEq)]
struct Shape {
    class: String,
    points: String,
    title: String,
}

/// Everything the view draws, from the stack.
#[derive(Clone, PartialEq, Default)]
struct Geometry {
    shapes: Vec<Shape>,
    top: f64,
    events: usize,
    peak_x: f64,
    y_ticks: Vec<Tick>,
    x_ticks: Vec<Tick>,
    caption: String,
}

fn x_of(events: usize, e: usize) -> f64 {
    CHART.x(e as f64 / events.max(1) as f64)
}

fn shape(s: &PeakStack, b: &Band, top: f64) -> Shape {
    let col = |i: usize| x_of(s.events, s.columns[b.first + i]);
    let y = |v: u64| CHART.y(v as f64 / top);
    let mut upper: Vec<(f64, f64)> = Vec::with_capacity(b.edges.len() + 2);
    let mut lower: Vec<(f64, f64)> = Vec::with_capacity(b.edges.len() + 2);
    for (i, &(lo, hi)) in b.edges.iter().enumerate() {
        upper.push((col(i), y(hi)));
        lower.push((col(i), y(lo)));
    }
    if b.edges.len() == 1 {
        // Live at one column only: a sliver, so it can be seen and hovered.
        let (x, (lo, hi)) = (col(0), b.edges[0]);
        upper = vec![(x - 1.0, y(hi)), (x + 1.0, y(hi))];
        lower = vec![(x - 1.0, y(lo)), (x + 1.0, y(lo))];
    }
    let points = polyline(upper.iter().chain(lower.iter().rev()).copied());
    let (class, title) = match b.kind {
        BandKind::One {
            size,
            from,
            to,
            line,
        } => (
            format!("band sc{}", size_class(size)),
            format!(
                "{} ({}), allocated by event {} (trace line {line}), {}",
                fmt_bytes(size),
                SIZE_CLASSES[size_class(size)].1,
                grouped(from as u64),
                to.map_or("still live at the end".into(), |t| format!(
                    "freed by event {}",
                    grouped(t as u64)
                ))
            ),
        ),
        BandKind::Smaller { count, bytes } => (
            "band smaller".into(),
            format!(
                "{count} smaller allocations live at the peak, {} together",
                fmt_bytes(bytes)
            ),
        ),
        BandKind::Others => (
            "band others".into(),
            "live bytes of allocations that are not live at the peak".into(),
        ),
    };
    Shape {
        class,
        points,
        title,
    }
}

impl Geometry {
    fn of(s: &PeakStack) -> Geometry {
        let top = s.peak_live.max(1) as f64 * 1.05;
        let ones = s
            .bands
            .iter()
            .filter(|b| matches!(b.kind, BandKind::One { .. }))
            .count();
        Geometry {
            shapes: s.bands.iter().map(|b| shape(s, b, top)).collect(),
            top,
            events: s.events,
            peak_x: x_of(s.events, s.peak_event),
            y_ticks: byte_ticks(top, 5),
            x_ticks: event_ticks(s.events, 7),
            caption: format!(
                "At the peak (event {}), {} allocations hold {}; the {ones} largest are drawn one band each{}.",
                grouped(s.peak_event as u64),
                grouped(s.live_at_peak as u64),
                fmt_bytes(s.peak_live),
                if ones < s.live_at_peak {
                    ", the rest as one band"
                } else {
                    ""
                }
            ),
        }
    }
}

/// The stacked view of the side-by-side trace.
#[component]
pub fn PeakPanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let geometry = Memo::new(move |_| {
        page.peak
            .with(|p| p.as_ref().map(Geometry::of).unwrap_or_default())
    });
    let click = move |ev: leptos::ev::MouseEvent| {
        if let Some(frac) = pointer_fraction(&ev, CHART) {
            let e = geometry.with_untracked(|g| (frac * g.events as f64).round() as usize);
            scrub_to(page, Some(e));
        }
    };
    view! {
        <div class="chart">
            <svg id="peak-stack" class="plot" viewBox=CHART.view_box()
                 data-bands=move || geometry.with(|g| g.shapes.len().to_string())
                 on:click=click>
                {move || geometry.with(|g| {
                    let events = g.events;
                    let shapes = g.shapes.iter().map(|s| view! {
                        <polygon class=s.class.clone() points=s.points.clone()><title>{s.title.clone()}</title></polygon>
                    }).collect_view();
                    (
                        axes(CHART, g.y_ticks.clone(), g.top, g.x_ticks.clone(), &move |e| x_of(events, e as usize),
                             "trace events; every band is an allocation live at the peak".into(), "bytes"),
                        shapes,
                        view! { <line class="peak-at" x1=g.peak_x x2=g.peak_x y1=CHART.top y2=CHART.base() /> },
                    )
                })}
            </svg>
            <div class="legend">
                {SIZE_CLASSES.iter().enumerate().map(|(i, (_, name))| swatch(["sc0", "sc1", "sc2", "sc3", "sc4"][i], (*name).into())).collect_view()}
                {swatch("smaller", "smaller ones together".into())}
                {swatch("others", "not live at the peak".into())}
            </div>
            <p class="readout">{move || geometry.with(|g| g.caption.clone())}</p>
        </div>
    }
}
