//! What holds memory at a trace's peak, as PyTorch's memory_viz draws its
//! "active memory timeline": every allocation live at the peak is a band
//! stacked on the ones allocated before it, followed over the whole trace
//! (a band drops when one below it is freed), coloured by size class; the
//! smaller ones merged into one band and everything not live at the peak
//! shown on top, so the stack's height is the trace's live bytes.

use std::collections::HashMap;

use vrampool::Trace;
use vrampool::trace::Action;

/// Moments drawn across the trace (the peak is always one of them).
pub const COLUMNS: usize = 320;
/// Allocations drawn as bands of their own (the largest live at the peak).
pub const BANDS: usize = 120;

/// The size classes bands are coloured by: (upper bound, name).
pub const SIZE_CLASSES: [(u64, &str); 5] = [
    (64 << 10, "< 64 KiB"),
    (1 << 20, "64 KiB – 1 MiB"),
    (16 << 20, "1 – 16 MiB"),
    (256 << 20, "16 – 256 MiB"),
    (u64::MAX, "≥ 256 MiB"),
];

/// The size class of `size` bytes (an index into [`SIZE_CLASSES`]).
pub fn size_class(size: u64) -> usize {
    SIZE_CLASSES
        .iter()
        .position(|&(upper, _)| size < upper)
        .unwrap_or(SIZE_CLASSES.len() - 1)
}

/// What a band stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BandKind {
    /// One allocation live at the peak.
    One {
        /// Bytes.
        size: u64,
        /// Events taken when it became live.
        from: usize,
        /// Events taken when it was freed (`None`: live to the end).
        to: Option<usize>,
        /// Its line in the trace file.
        line: u64,
    },
    /// The smaller allocations live at the peak, together.
    Smaller {
        /// How many.
        count: usize,
        /// Their bytes.
        bytes: u64,
    },
    /// Live bytes of allocations not live at the peak.
    Others,
}

/// One band: its bottom and top (bytes) at each column from `first` on.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// What it stands for.
    pub kind: BandKind,
    /// The first column it spans.
    pub first: usize,
    /// (bottom, top) at columns `first`, `first + 1`, ….
    pub edges: Vec<(u64, u64)>,
}

/// The stacked view of a trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PeakStack {
    /// Events in the trace.
    pub events: usize,
    /// Events taken when live bytes first reached the peak.
    pub peak_event: usize,
    /// The peak's live bytes.
    pub peak_live: u64,
    /// Allocations live at the peak.
    pub live_at_peak: usize,
    /// Events taken at each column, increasing.
    pub columns: Vec<usize>,
    /// Bands, bottom first.
    pub bands: Vec<Band>,
}

/// One allocation of the trace: live while `from <= events taken < to`.
struct Life {
    size: u64,
    from: usize,
    to: Option<usize>,
    line: u64,
}

impl Life {
    fn alive(&self, taken: usize) -> bool {
        self.from <= taken && self.to.is_none_or(|t| taken < t)
    }
}

impl PeakStack {
    /// The stacked view of `trace`.
    pub fn of(trace: &Trace) -> PeakStack {
        let n = trace.events.len();
        let mut lives: Vec<Life> = Vec::new();
        let mut open: HashMap<u64, usize> = HashMap::new();
        let (mut live, mut peak_event) = (0u64, 0usize);
        for (i, e) in trace.events.iter().enumerate() {
            match e.action {
                Action::Allocate => {
                    open.insert(e.pointer, lives.len());
                    lives.push(Life {
                        size: e.size,
                        from: i + 1,
                        to: None,
                        line: e.line,
                    });
                    live += e.size;
                    if live == trace.peak_live && peak_event == 0 {
                        peak_event = i + 1;
                    }
                }
                Action::Free => {
                    if let Some(k) = open.remove(&e.pointer) {
                        lives[k].to = Some(i + 1);
                    }
                    live -= e.size;
                }
            }
        }
        let mut columns: Vec<usize> = (0..COLUMNS)
            // In u64: k × n passes a 32-bit usize past 13 million events.
            .map(|k| {
                ((k as u64 * n as u64 + (COLUMNS as u64 - 1) / 2) / (COLUMNS as u64 - 1)) as usize
            })
            .chain([peak_event])
            .collect();
        columns.sort_unstable();
        columns.dedup();
        // Live bytes at each column.
        let mut live_at = Vec::with_capacity(columns.len());
        let (mut live, mut next) = (0u64, 0usize);
        for &c in &columns {
            while next < c {
                let e = trace.events[next];
                match e.action {
                    Action::Allocate => live += e.size,
                    Action::Free => live -= e.size,
                }
                next += 1;
            }
            live_at.push(live);
        }
        let at_peak: Vec<&Life> = lives.iter().filter(|l| l.alive(peak_event)).collect();
        let mut big = at_peak.clone();
        big.sort_by(|a, b| b.size.cmp(&a.size).then(a.from.cmp(&b.from)));
        let smaller = big.split_off(big.len().min(BANDS));
        big.sort_by_key(|l| l.from);
        // Column range [start, end) where a life is live.
        let span = |l: &Life| {
            let start = columns.partition_point(|&c| c < l.from);
            let end =
                l.to.map_or(columns.len(), |t| columns.partition_point(|&c| c < t));
            start..end
        };
        let mut run = vec![0u64; columns.len()];
        let mut bands = Vec::with_capacity(big.len() + 2);
        for l in &big {
            let cols = span(l);
            let edges = cols
                .clone()
                .map(|c| {
                    let bottom = run[c];
                    run[c] += l.size;
                    (bottom, run[c])
                })
                .collect();
            bands.push(Band {
                kind: BandKind::One {
                    size: l.size,
                    from: l.from,
                    to: l.to,
                    line: l.line,
                },
                first: cols.start,
                edges,
            });
        }
        if !smaller.is_empty() {
            let mut thick = vec![0u64; columns.len()];
            for l in &smaller {
                for t in &mut thick[span(l)] {
                    *t += l.size;
                }
            }
            bands.push(Band {
                kind: BandKind::Smaller {
                    count: smaller.len(),
                    bytes: smaller.iter().map(|l| l.size).sum(),
                },
                first: 0,
                edges: (0..columns.len())
                    .map(|c| {
                        let bottom = run[c];
                        run[c] += thick[c];
                        (bottom, run[c])
                    })
                    .collect(),
            });
        }
        bands.push(Band {
            kind: BandKind::Others,
            first: 0,
            edges: (0..columns.len())
                .map(|c| (run[c], live_at[c].max(run[c])))
                .collect(),
        });
        PeakStack {
            events: n,
            peak_event,
            peak_live: trace.peak_live,
            live_at_peak: at_peak.len(),
            columns,
            bands,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::lockstep::tests::sample;

    #[test]
    fn the_stack_is_the_live_bytes_and_at_the_peak_only_peak_allocations() {
        let trace = sample("resnet_train");
        let s = PeakStack::of(&trace);
        assert_eq!(s.events, trace.events.len());
        assert!(s.columns.len() <= COLUMNS + 1 && s.columns.contains(&s.peak_event));
        assert_eq!(s.columns.first(), Some(&0));
        assert_eq!(s.columns.last(), Some(&trace.events.len()));
        let pc = s.columns.iter().position(|&c| c == s.peak_event).unwrap();
        let others = s.bands.last().unwrap();
        assert_eq!(others.kind, BandKind::Others);
        assert_eq!(others.edges[pc].0, trace.peak_live, "the stack at the peak");
        assert_eq!(
            others.edges[pc].1, trace.peak_live,
            "nothing else live then"
        );
        // Bands tile the stack at every column: each starts where the one below ends.
        for c in 0..s.columns.len() {
            let mut top = 0;
            for b in &s.bands {
                if let Some(&(lo, hi)) = c.checked_sub(b.first).and_then(|i| b.edges.get(i)) {
                    assert_eq!(lo, top, "column {c}");
                    assert!(hi >= lo);
                    top = hi;
                }
            }
        }
        let ones = s
            .bands
            .iter()
            .filter(|b| matches!(b.kind, BandKind::One { .. }))
            .count();
        assert_eq!(ones, s.live_at_peak.min(BANDS));
        // Each band is live at the peak: it spans the peak's column.
        for b in &s.bands {
            assert!(b.first <= pc && pc < b.first + b.edges.len());
        }
    }

    #[test]
    fn size_classes_cover_every_size() {
        assert_eq!(size_class(1), 0);
        assert_eq!(size_class(64 << 10), 1);
        assert_eq!(size_class(3 << 20), 2);
        assert_eq!(size_class(u64::MAX), 4);
    }
}
