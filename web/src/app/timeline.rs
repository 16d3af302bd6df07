//! The timeline: allocated / reserved / cached against the budget over the
//! last minute, the peak marked. Its geometry (scale, polylines, budget line,
//! peak) is computed once per sample, as a memo.

use std::collections::VecDeque;

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::page::Page;
use crate::model::Point;

/// The chart's viewBox.
const W: f64 = 640.0;
const H: f64 = 200.0;

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
        (t - self.t0) / (self.t1 - self.t0) * W
    }

    fn y(self, v: u64) -> f64 {
        H - v as f64 / self.top * H
    }

    /// The `points` attribute of a polyline through `get` of each point.
    fn polyline(self, points: &VecDeque<Point>, get: fn(&Point) -> u64) -> String {
        points
            .iter()
            .map(|p| format!("{:.1},{:.1}", self.x(p.t), self.y(get(p))))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Everything the chart draws, from the points.
#[derive(Clone, PartialEq)]
struct Geometry {
    scale: Scale,
    reserved: String,
    allocated: String,
    cached: String,
    /// Height of the budget line, if there is a budget.
    budget: Option<f64>,
    /// Where the highest reserved point is, and its value.
    peak: Option<(f64, f64, u64)>,
}

impl Geometry {
    fn of(points: &VecDeque<Point>) -> Geometry {
        let s = Scale::fit(points);
        Geometry {
            scale: s,
            reserved: s.polyline(points, |p| p.reserved),
            allocated: s.polyline(points, |p| p.allocated),
            cached: s.polyline(points, |p| p.cached),
            budget: points.back().and_then(|p| p.budget).map(|b| s.y(b)),
            peak: points
                .iter()
                .max_by_key(|p| p.reserved)
                .map(|p| (s.x(p.t), s.y(p.reserved), p.reserved)),
        }
    }
}

/// The chart and its legend.
#[component]
pub fn Timeline() -> impl IntoView {
    let points = expect_context::<Page>().points;
    // Computed once per sample, however many parts of the chart read it.
    let geometry = Memo::new(move |_| points.with(Geometry::of));
    let line = move |get: fn(&Geometry) -> &String| move || geometry.with(|g| get(g).clone());
    view! {
        <div class="chart">
            <svg id="timeline" viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none"
                 data-points=move || points.with(VecDeque::len).to_string()>
                <polyline id="line-reserved" class="reserved" points=line(|g| &g.reserved) />
                <polyline id="line-allocated" class="allocated" points=line(|g| &g.allocated) />
                <polyline id="line-cached" class="cached" points=line(|g| &g.cached) />
                {move || geometry.with(|g| g.budget).map(|y| view! { <line class="budget" x1="0" x2=W y1=y y2=y /> })}
                {move || geometry.with(|g| g.peak).map(|(x, y, v)| view! {
                    <circle class="peak" cx=x cy=y r="4"><title>{format!("peak reserved {}", fmt_bytes(v))}</title></circle>
                })}
            </svg>
            <div class="legend">
                <span class="reserved">"reserved"</span>
                <span class="allocated">"allocated"</span>
                <span class="cached">"cached"</span>
                <span class="budget">"budget"</span>
                <span class="scale">{move || geometry.with(|g| format!("top {}", fmt_bytes(g.scale.top as u64)))}</span>
            </div>
        </div>
    }
}
