//! `--timeline FILE.svg`: live, allocated, reserved, cached and the budget over
//! a run, drawn with plotters.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use crate::replay::Sample;

/// A line of the chart: name, colour, and the value it plots.
type Series = (&'static str, RGBColor, fn(&Sample) -> u64);

const GIB: f64 = (1u64 << 30) as f64;

/// Writes an SVG chart of `samples` to `path`, with the budget as a line when set.
pub fn write(path: &Path, title: &str, samples: &[Sample], budget: Option<u64>) -> Result<()> {
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let last_op = samples.last().map_or(1, |s| s.op).max(1);
        let top = samples
            .iter()
            .map(|s| s.figures.reserved.max(s.live))
            .chain(budget)
            .max()
            .unwrap_or(1) as f64
            / GIB
            * 1.08;
        let (unit, scale) = if top < 1.0 {
            ("MiB", 1024.0)
        } else {
            ("GiB", 1.0)
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0u64..last_op, 0f64..(top * scale).max(1e-3))?;
        chart
            .configure_mesh()
            .x_desc("operation")
            .y_desc(unit)
            .disable_x_mesh()
            .draw()?;
        let series: [Series; 4] = [
            ("reserved", RGBColor(214, 39, 40), |s| s.figures.reserved),
            ("allocated", RGBColor(31, 119, 180), |s| s.figures.allocated),
            ("cached", RGBColor(255, 127, 14), |s| s.figures.cached),
            ("live (trace)", RGBColor(44, 160, 44), |s| s.live),
        ];
        for (name, color, get) in series {
            chart
                .draw_series(LineSeries::new(
                    samples.iter().map(|s| (s.op, get(s) as f64 / GIB * scale)),
                    color.stroke_width(2),
                ))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        if let Some(b) = budget {
            let y = b as f64 / GIB * scale;
            chart
                .draw_series(LineSeries::new(
                    [(0, y), (last_op, y)],
                    BLACK.stroke_width(1),
                ))?
                .label("budget")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK));
        }
        if let Some(peak) = samples.iter().max_by_key(|s| s.figures.reserved) {
            let y = peak.figures.reserved as f64 / GIB * scale;
            chart.draw_series([Circle::new((peak.op, y), 5, RGBColor(214, 39, 40).filled())])?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot write the timeline to {}", path.display()))
}
