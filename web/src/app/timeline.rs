//! The timeline: allocated / reserved / cached against the budget over the
//! last minute of the current pool (a new pool starts it again), on a time
//! axis in seconds and a byte axis, the highest reserved sample marked, a
//! legend, and a readout of the moment under the pointer. Its geometry
//! (scale, ticks, polylines, budget runs, highest sample) is computed once
//! per sample, as a memo.

use std::collections::VecDeque;

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::chart::{Frame, axes, pointer_fraction, swatch};
use super::page::Page;
use crate::model::axes::{Tick, byte_ticks, polyline, second_ticks};
use crate::model::{Point, budget_runs};

/// The chart's viewBox.
const FRAME: Frame = Frame::new(800.0, 230.0);

/// Where a moment and a value fall on the chart.
#[derive(Clone, Copy, PartialEq)]
struct Scale {
    /// The first moment shown (seconds).
    t0: f64,
    /// The last (at least a second after the first).
    t1: f64,
    /// The value at the top: 1.1 × the highest reserved or budget (≥ 1 MiB).
    top: f64,
}

impl Scale {
    fn fit(points: &VecDeque<Point>) -> Scale {
        let t0 = points.front().map_or(0.0, |p| p.t);
        let t1 = points.back().map_or(1.0, |p| p.t).max(t0 + 1.0);
        let highest = points
            .iter()
            .map(|p| p.reserved.max(p.budget.unwrap_or(0)))
            .max()
            .unwrap_or(1);
        Scale {
            t0,
            t1,
            top: highest.max(1 << 20) as f64 * 1.1,
        }
    }

    fn x(self, t: f64) -> f64 {
        FRAME.x((t - self.t0) / (self.t1 - self.t0))
    }

    fn y(self, v: u64) -> f64 {
        FRAME.y(v as f64 / self.top)
    }

    /// The `points` attribute of a polyline through `get` of each point.
    fn polyline(self, points: &VecDeque<Point>, get: fn(&Point) -> u64) -> String {
        polyline(points.iter().map(|p| (self.x(p.t), self.y(get(p)))))
    }
}

/// Everything the chart draws, from the points.
#[derive(Clone, PartialEq)]
struct Geometry {
    scale: Scale,
    reserved: String,
    allocated: String,
    cached: String,
    /// The budget where each sample had it: a path of a level per run.
    budget: String,
    /// Where the highest reserved sample is, and its value. Not the pool's
    /// peak (the figures' "peak reserved"): a peak between two samples, or
    /// more than a minute ago, is not among them.
    peak: Option<(f64, f64, u64)>,
    y_ticks: Vec<Tick>,
    x_ticks: Vec<Tick>,
}

impl Geometry {
    fn of(points: &VecDeque<Point>) -> Geometry {
        let s = Scale::fit(points);
        Geometry {
            scale: s,
            reserved: s.polyline(points, |p| p.reserved),
            allocated: s.polyline(points, |p| p.allocated),
            cached: s.polyline(points, |p| p.cached),
            budget: budget_runs(points)
                .into_iter()
                .map(|(t1, t2, b)| {
                    let y = s.y(b);
                    format!("M{}", polyline([(s.x(t1), y), (s.x(t2), y)]))
                })
                .collect(),
            peak: points
                .iter()
                .max_by_key(|p| p.reserved)
                .map(|p| (s.x(p.t), s.y(p.reserved), p.reserved)),
            y_ticks: byte_ticks(s.top, 5),
            x_ticks: second_ticks(s.t0, s.t1, 8),
        }
    }
}

/// The readout of the point nearest `frac` of the way along the chart.
fn readout(points: &VecDeque<Point>, s: Scale, frac: f64) -> Option<(f64, String)> {
    let t = s.t0 + frac * (s.t1 - s.t0);
    let p = points
        .iter()
        .min_by(|a, b| (a.t - t).abs().total_cmp(&(b.t - t).abs()))?;
    let text = format!(
        "at {:.1} s: allocated {}, reserved {}, cached {}{}",
        p.t,
        fmt_bytes(p.allocated),
        fmt_bytes(p.reserved),
        fmt_bytes(p.cached),
        p.budget
            .map(|b| format!(", budget {}", fmt_bytes(b)))
            .unwrap_or_default()
    );
    Some((s.x(p.t), text))
}

/// The chart, its legend and the hover readout.
#[component]
pub fn Timeline() -> impl IntoView {
    let points = expect_context::<Page>().points;
    // Computed once per sample, however many parts of the chart read it.
    let geometry = Memo::new(move |_| points.with(Geometry::of));
    let hover = RwSignal::new(None::<f64>);
    let shown = Memo::new(move |_| {
        let frac = hover.get()?;
        let s = geometry.with(|g| g.scale);
        points.with(|p| readout(p, s, frac))
    });
    let line = move |get: fn(&Geometry) -> &String| move || geometry.with(|g| get(g).clone());
    view! {
        <div class="chart">
            <svg id="timeline" class="plot" viewBox=FRAME.view_box()
                 data-points=move || points.with(VecDeque::len).to_string()
                 data-last-ms=move || points.with(|p| p.back().map_or(0, |x| (x.t * 1000.0) as u64)).to_string()
                 on:mousemove=move |ev| hover.set(pointer_fraction(&ev, FRAME))
                 on:mouseleave=move |_| hover.set(None)>
                {move || geometry.with(|g| {
                    let s = g.scale;
                    axes(FRAME, g.y_ticks.clone(), s.top, g.x_ticks.clone(), &move |t| s.x(t),
                         "time since the page opened".into(), "bytes")
                })}
                <polyline id="line-reserved" class="reserved" points=line(|g| &g.reserved) />
                <polyline id="line-allocated" class="allocated" points=line(|g| &g.allocated) />
                <polyline id="line-cached" class="cached" points=line(|g| &g.cached) />
                // A path, not `line.budget`s: one element however often the budget
                // changed. Styled here as the page's `line.budget` is.
                <path class="budget" d=line(|g| &g.budget)
                      style="fill: none; stroke: var(--budget); stroke-dasharray: 6 4; vector-effect: non-scaling-stroke" />
                {move || geometry.with(|g| g.peak).map(|(x, y, v)| view! {
                    <circle class="peak" cx=x cy=y r="4"><title>{format!(
                        "highest reserved sample {}; the pool's peak, between samples too, is the figure \"peak reserved\"",
                        fmt_bytes(v)
                    )}</title></circle>
                })}
                {move || shown.get().map(|(x, _)| view! { <line class="cursor" x1=x x2=x y1=FRAME.top y2=FRAME.base() /> })}
            </svg>
            <div class="legend">
                {swatch("reserved", "reserved (held from the device)".into())}
                {swatch("allocated", "allocated (handed out)".into())}
                {swatch("cached", "cached (free, kept for reuse)".into())}
                {swatch("budget", "budget".into())}
                {swatch("peak", "highest reserved sample".into())}
            </div>
            <p class="readout" id="timeline-readout">
                {move || shown.get().map_or_else(|| "point at the chart for the figures at that moment".to_string(), |(_, t)| t)}
            </p>
        </div>
    }
}
