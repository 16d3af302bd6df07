//! What the page's charts share: the plot area inside an SVG's viewBox,
//! axes with ticks and unit titles, a legend swatch, and where the pointer
//! is along the plot (for the hover readouts).

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::model::axes::Tick;

/// A chart's viewBox and the plot area inside it (margins for the axes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    /// viewBox width.
    pub w: f64,
    /// viewBox height.
    pub h: f64,
    /// Room for the byte labels on the left.
    pub left: f64,
    /// Room on the right.
    pub right: f64,
    /// Room above.
    pub top: f64,
    /// Room for the x labels and title below.
    pub bottom: f64,
}

impl Frame {
    /// A chart `w` × `h` with room for axis labels.
    pub const fn new(w: f64, h: f64) -> Frame {
        Frame {
            w,
            h,
            left: 62.0,
            right: 10.0,
            top: 8.0,
            bottom: 34.0,
        }
    }

    /// The `viewBox` attribute.
    pub fn view_box(self) -> String {
        format!("0 0 {} {}", self.w, self.h)
    }

    /// The plot's width.
    pub fn plot_w(self) -> f64 {
        self.w - self.left - self.right
    }

    /// The plot's height.
    pub fn plot_h(self) -> f64 {
        self.h - self.top - self.bottom
    }

    /// The x of a fraction of the plot's width.
    pub fn x(self, frac: f64) -> f64 {
        self.left + frac.clamp(0.0, 1.0) * self.plot_w()
    }

    /// The y of a fraction of the plot's height (0 at the bottom).
    pub fn y(self, frac: f64) -> f64 {
        self.top + (1.0 - frac.clamp(0.0, 1.0)) * self.plot_h()
    }

    /// The plot's bottom edge.
    pub fn base(self) -> f64 {
        self.top + self.plot_h()
    }
}

/// Gridlines and labels: `y` ticks (values over `y_top`) on the left with
/// `y_title`, `x` ticks placed by `x_of` with `x_title` below.
pub fn axes(
    f: Frame,
    y: Vec<Tick>,
    y_top: f64,
    x: Vec<Tick>,
    x_of: &dyn Fn(f64) -> f64,
    x_title: String,
    y_title: &'static str,
) -> impl IntoView + use<> {
    let y_lines = y
        .into_iter()
        .map(|t| {
            let py = f.y(t.value / y_top);
            view! {
                <line class="gridline" x1=f.left x2=f.w - f.right y1=py y2=py />
                <text class="tick" x=f.left - 4.0 y=py + 3.5 text-anchor="end">{t.label}</text>
            }
        })
        .collect_view();
    let x_lines = x
        .into_iter()
        .map(|t| {
            let px = x_of(t.value);
            view! {
                <line class="gridline" x1=px x2=px y1=f.top y2=f.base() />
                <text class="tick" x=px y=f.base() + 13.0 text-anchor="middle">{t.label}</text>
            }
        })
        .collect_view();
    view! {
        <g class="axes">
            {y_lines}
            {x_lines}
            <line class="axis" x1=f.left x2=f.w - f.right y1=f.base() y2=f.base() />
            <line class="axis" x1=f.left x2=f.left y1=f.top y2=f.base() />
            <text class="axis-title" x=f.left + f.plot_w() / 2.0 y=f.h - 4.0 text-anchor="middle">{x_title}</text>
            <text class="axis-title" transform=format!("translate(11 {}) rotate(-90)", f.top + f.plot_h() / 2.0) text-anchor="middle">{y_title}</text>
        </g>
    }
}

/// Where the pointer is along the plot of the SVG `ev` fired on, from 0
/// (left edge) to 1 (right edge). The SVG keeps its viewBox's aspect, so one
/// scale maps the page's pixels to the viewBox.
pub fn pointer_fraction(ev: &leptos::ev::MouseEvent, f: Frame) -> Option<f64> {
    let el: web_sys::Element = ev.current_target()?.dyn_into().ok()?;
    let r = el.get_bounding_client_rect();
    if r.width() <= 0.0 {
        return None;
    }
    let vx = (f64::from(ev.client_x()) - r.left()) / r.width() * f.w;
    Some(((vx - f.left) / f.plot_w()).clamp(0.0, 1.0))
}

/// A legend entry: a swatch of CSS class `class` and its name.
pub fn swatch(class: &'static str, name: String) -> impl IntoView {
    view! { <span class="key"><i class=format!("sw {class}")></i>{name}</span> }
}
