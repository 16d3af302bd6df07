//! Axis ticks a person can read: byte values on round binary steps
//! (1, 2, 4 … KiB / MiB / GiB) and counts or seconds on 1-2-5 steps, each
//! with its label and unit; and the points of a chart's lines.

/// A tick: where it falls (in the axis's value) and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// The value at the tick.
    pub value: f64,
    /// Its label, with its unit.
    pub label: String,
}

/// A byte count as a short axis label: `0`, `512 B`, `64 KiB`, `1.5 GiB`.
pub fn short_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if b == 0 {
        return "0".into();
    }
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Ticks from 0 to `top` bytes: a power-of-two step (so labels are round in
/// KiB / MiB / GiB) giving at most `most` ticks above zero; they stop at the
/// largest `u64` whatever `top` (the step at most 2^63).
pub fn byte_ticks(top: f64, most: usize) -> Vec<Tick> {
    let most = most.max(1) as f64;
    let mut step = 1u64;
    while (step as f64) * most < top && step < 1 << 63 {
        step *= 2;
    }
    (0..)
        .map_while(|i: u64| i.checked_mul(step))
        .take_while(|&v| v as f64 <= top)
        .map(|v| Tick {
            value: v as f64,
            label: short_bytes(v),
        })
        .collect()
}

/// A count with thin spaces between thousands: `12 345`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// The 1-2-5 step giving at most `most` ticks over a span of `span`.
fn nice_step(span: f64, most: usize) -> f64 {
    let raw = span.max(f64::MIN_POSITIVE) / most.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Ticks over `[from, to]` on 1-2-5 steps (at most `most`), each labelled by
/// `label` of its value.
pub fn linear_ticks(from: f64, to: f64, most: usize, label: impl Fn(f64) -> String) -> Vec<Tick> {
    let step = nice_step(to - from, most);
    let first = (from / step).ceil() as i64;
    let last = (to / step).floor() as i64;
    (first..=last)
        .map(|i| {
            let value = i as f64 * step;
            Tick {
                value,
                label: label(value),
            }
        })
        .collect()
}

/// Ticks over events `[0, n]`, labelled as counts.
pub fn event_ticks(n: usize, most: usize) -> Vec<Tick> {
    linear_ticks(0.0, n.max(1) as f64, most, |v| grouped(v as u64))
}

/// Ticks over seconds `[from, to]`, labelled `12 s`.
pub fn second_ticks(from: f64, to: f64, most: usize) -> Vec<Tick> {
    let step = nice_step(to - from, most);
    linear_ticks(from, to, most, move |v| {
        if step < 1.0 {
            format!("{v:.1} s")
        } else {
            format!("{v:.0} s")
        }
    })
}

/// The `points` attribute of an SVG polyline (or polygon) through `xy`, each coordinate
/// to a tenth of a unit (of the viewBox: a tenth of a pixel or finer). The
/// tenths are written as integers: `format!("{:.1}")`, a float formatting
/// per coordinate, was most of a chart's redraw in wasm.
///
/// ```
/// # use vrampool_web::model::axes::polyline;
/// assert_eq!(polyline([(62.0, 236.04), (70.25, -0.04), (-1.06, 8.0)]), "62.0,236.0 70.3,0.0 -1.1,8.0");
/// ```
pub fn polyline(xy: impl IntoIterator<Item = (f64, f64)>) -> String {
    let mut s = String::new();
    for (x, y) in xy {
        if !s.is_empty() {
            s.push(' ');
        }
        push_tenths(&mut s, x);
        s.push(',');
        push_tenths(&mut s, y);
    }
    s
}

/// `v` to a tenth: ×10 rounded half away from zero (`{:.1}` rounds the
/// exact value, ties to even, so a tie may differ by a tenth; −0 is
/// written 0.0).
fn push_tenths(s: &mut String, v: f64) {
    use std::fmt::Write;
    let tenths = (v * 10.0).round() as i64;
    if tenths < 0 {
        s.push('-');
    }
    let t = tenths.unsigned_abs();
    let _ = write!(s, "{}.{}", t / 10, t % 10);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ticks_are_round_binary_steps() {
        let t = byte_ticks(300.0 * 1024.0 * 1024.0, 5);
        let labels: Vec<_> = t.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["0", "64 MiB", "128 MiB", "192 MiB", "256 MiB"]);
        assert_eq!(byte_ticks(1000.0, 4).last().unwrap().label, "768 B");
        assert_eq!(short_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn byte_ticks_stop_at_the_largest_u64() {
        // A budget of u64::MAX (and more) once wrapped the ticks to 0 and
        // listed them forever (or overflowed, in a debug build).
        for top in [u64::MAX as f64, 1.1 * u64::MAX as f64, f64::INFINITY] {
            let t = byte_ticks(top, 5);
            assert!((2..=6).contains(&t.len()), "{top}: {t:?}");
            assert!(t.windows(2).all(|w| w[0].value < w[1].value), "{top}");
        }
    }

    #[test]
    fn counts_and_seconds_step_one_two_five() {
        let t = event_ticks(7098, 6);
        let labels: Vec<_> = t.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["0", "2\u{2009}000", "4\u{2009}000", "6\u{2009}000"]
        );
        let s = second_ticks(3.2, 11.0, 4);
        assert_eq!(
            s.iter().map(|t| t.label.as_str()).collect::<Vec<_>>(),
            ["4 s", "6 s", "8 s", "10 s"]
        );
        assert_eq!(grouped(1_234_567), "1\u{2009}234\u{2009}567");
    }
}
