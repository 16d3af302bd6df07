//! What a trace would need with foresight: every allocation's lifetime known
//! before the first one is made, so that each gets a fixed place in a few
//! segments created once and never released — the static memory plan an ML
//! compiler makes for a graph whose tensors it knows (TensorFlow Lite's arena
//! planner; Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net
//! Inference", 2020). No pool serving requests as they come can know this;
//! the plan is the yardstick for one that does not: the part of a policy's
//! peak reserved above the plan's is what not knowing the future costs it
//! (at least; the plan is greedy, so its own excess over peak live is an
//! upper bound on what any static layout of the trace needs).
//!
//! Architecture invariant: like the replay loop, the plan knows nothing of
//! engines or devices; it reads a [`Trace`] and returns figures.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::format::{Action, Trace, TraceError};
use super::record::PoolKey;

/// One allocation of a trace, placed by [`Foresight::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedBlock {
    /// The index of its `allocate` event in [`Trace::events`].
    pub first_event: usize,
    /// The index of its `free` event (the trace's length if it is never
    /// freed): the block is live for `first_event..last_event`.
    pub last_event: usize,
    /// Its planned segment, an index into [`Foresight::segments`].
    pub segment: usize,
    /// Its offset in the segment (a multiple of the alignment).
    pub offset: u64,
    /// Its size, rounded up to the alignment.
    pub size: u64,
}

impl PlannedBlock {
    /// Whether the two are live at the same time.
    pub fn overlaps_in_time(&self, other: &PlannedBlock) -> bool {
        self.first_event < other.last_event && other.first_event < self.last_event
    }
}

/// A static plan of a whole trace: where every allocation goes, in segments
/// made once (see the module's documentation).
///
/// ```
/// use vrampool::Trace;
/// use vrampool::trace::Foresight;
/// // A 4 KiB tensor, freed, then an 8 KiB one: they can share their bytes.
/// let csv = "Thread,Time,Action,Pointer,Size,Stream\n\
///            0,0,allocate,0x10,4096,0x0\n0,0,free,0x10,4096,0x0\n\
///            0,0,allocate,0x20,8192,0x0\n0,0,free,0x20,8192,0x0\n";
/// let trace = Trace::parse("tiny", csv.as_bytes())?;
/// let plan = Foresight::plan(&trace, 256, 1 << 30)?;
/// assert_eq!(plan.segments, vec![8192]);
/// assert_eq!(plan.reserved(), trace.peak_live);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Foresight {
    /// Peak live bytes of the trace (requested sizes).
    pub peak_live: u64,
    /// The size of each planned segment: one device buffer each, created
    /// once and held to the end.
    pub segments: Vec<u64>,
    /// Every allocation of the trace, in the order of its events.
    pub blocks: Vec<PlannedBlock>,
}

/// Why a trace cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForesightError {
    /// The alignment is not a power of two.
    Alignment(u64),
    /// An allocation is larger than the largest segment allowed.
    TooLarge {
        /// The trace line of the allocation.
        line: u64,
        /// Its size, as the trace gives it.
        size: u64,
        /// The largest segment allowed.
        max_segment: u64,
    },
}

impl fmt::Display for ForesightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForesightError::Alignment(a) => {
                write!(f, "the alignment must be a power of two, got {a}")
            }
            ForesightError::TooLarge {
                line,
                size,
                max_segment,
            } => write!(
                f,
                "line {line}: an allocation of {} does not fit in a segment of at most {} \
                 (the device's max_buffer_size, or Config::max_segment_size where that is \
                 lower): plan for a device whose buffers hold it, or scale the trace down \
                 (Trace::scaled)",
                crate::fmt_bytes(*size),
                crate::fmt_bytes(*max_segment)
            ),
        }
    }
}

impl std::error::Error for ForesightError {}

/// A plan of an engine's recording, pool by pool: for each pool the
/// recording's `Stream` column names ([`PoolKey`]), the [`Foresight`] plan of
/// that pool's requests. What [`Engine::follow_recorded`](crate::Engine::follow_recorded)
/// and `Pool::follow` take: a workload recorded once (`start_recording` /
/// `take_recording`) is planned, the plan kept (it is serde: save it as
/// JSON), and the next run of the same workload follows it.
///
/// Pools of exclusive requests are left out: each of their blocks has a
/// buffer of its own, so there is nothing to lay out.
///
/// ```
/// use vrampool::trace::{PoolKey, RecordedPlan};
/// use vrampool::{Config, Engine, Request, SimulatedDevice};
/// // A workload of two pools: storage (usage 0x80) and uniforms (0x40).
/// let run = |e: &mut Engine<SimulatedDevice>| -> Result<(), vrampool::Error> {
///     for _ in 0..3 {
///         let a = e.allocate(Request::new(3 << 20, 0x80))?;
///         let u = e.allocate(Request::new(256, 0x40))?;
///         let b = e.allocate(Request::new(1 << 20, 0x80))?;
///         e.free(a.id)?;
///         let c = e.allocate(Request::new(2 << 20, 0x80))?;
///         for x in [u, b, c] {
///             e.free(x.id)?;
///         }
///     }
///     Ok(())
/// };
/// let mut first = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// first.start_recording();
/// run(&mut first)?;
/// let log = first.take_recording().unwrap();
/// let plan = RecordedPlan::from_recording(&log, 256, 1 << 30)?;
/// assert_eq!(plan.pools.len(), 2);
/// assert_eq!(plan.pools[0].0, PoolKey { usage: 0x80, ..Default::default() });
/// // 3 MiB beside 1 MiB at the peak; the 2 MiB tensor goes where the 3 MiB one was.
/// assert_eq!(plan.pools[0].1.segments, vec![4 << 20]);
///
/// let mut next = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// next.follow_recorded(&plan)?;
/// let made = next.stats().counters.device_allocs; // the plan's segments
/// run(&mut next)?;
/// assert_eq!(next.stats().counters.device_allocs, made); // none more
/// assert_eq!(next.follow_stats().placed, 12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPlan {
    /// Each pool's plan, in the order the pools first appear in the recording.
    pub pools: Vec<(PoolKey, Foresight)>,
}

/// Why a recording cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum RecordedPlanError {
    /// The recording is not a valid log.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A stream is not a pool an engine writes.
    #[error(
        "stream {0:#x} is not a pool an engine's recording names (usage, group, exclusive): \
         plan the log of Engine::take_recording or Pool::take_recording"
    )]
    Stream(u64),
    /// A pool's requests cannot be planned.
    #[error("pool {pool:?}: {why}")]
    Plan {
        /// The pool.
        pool: PoolKey,
        /// Why (in the message, so not also the error's `source()`).
        why: ForesightError,
    },
}

impl RecordedPlan {
    /// Plans each pool of `log` (an engine's recording, RMM CSV) with
    /// [`Foresight::plan`]: `alignment` must be the engine's
    /// (`engine.config().alignment`), `max_segment` its largest segment (a
    /// device's `max_buffer_size`).
    pub fn from_recording(
        log: &str,
        alignment: u64,
        max_segment: u64,
    ) -> Result<RecordedPlan, RecordedPlanError> {
        let text = log.as_bytes();
        let mut pools = Vec::new();
        for stream in Trace::streams("recording", text)? {
            let pool = PoolKey::from_stream(stream).ok_or(RecordedPlanError::Stream(stream))?;
            if pool.exclusive {
                continue;
            }
            let trace = Trace::parse_stream("recording", text, stream)?;
            let plan = Foresight::plan(&trace, alignment, max_segment)
                .map_err(|why| RecordedPlanError::Plan { pool, why })?;
            pools.push((pool, plan));
        }
        Ok(RecordedPlan { pools })
    }

    /// Bytes the plans reserve in all.
    pub fn reserved(&self) -> u64 {
        self.pools.iter().map(|(_, p)| p.reserved()).sum()
    }
}

/// Events per bucket of the time index's finest level: a block is listed in
/// every bucket its lifetime touches, so the blocks live beside a new one
/// are found by reading the buckets of its own lifetime.
const BUCKET: usize = 512;

/// Buckets a block may touch at a level of the time index; a longer-lived
/// one goes to a coarser level, each [`FANOUT`] times coarser than the one
/// below. With one level, N blocks live to the end made N² / 1 024 entries,
/// each read by every later placement: a plan cubic in N.
const SPAN: usize = 4;
const FANOUT: usize = 8;

/// The time index: per level, per bucket, the placed blocks listed there.
struct TimeIndex {
    levels: Vec<Vec<Vec<u32>>>,
}

impl TimeIndex {
    fn new(events: usize) -> TimeIndex {
        let mut levels = Vec::new();
        let mut size = BUCKET;
        loop {
            levels.push(vec![Vec::new(); events / size + 1]);
            if events / size == 0 {
                break TimeIndex { levels };
            }
            size *= FANOUT;
        }
    }

    /// The buckets `b`'s lifetime touches at `level`.
    fn buckets(b: &PlannedBlock, level: usize) -> std::ops::RangeInclusive<usize> {
        let size = BUCKET * FANOUT.pow(level as u32);
        b.first_event / size..=(b.last_event.max(b.first_event + 1) - 1) / size
    }

    /// Lists `b` (block `i`) at the finest level where it touches at most
    /// [`SPAN`] buckets (the top level has one bucket).
    fn insert(&mut self, i: usize, b: &PlannedBlock) {
        let top = self.levels.len() - 1;
        let level = (0..top)
            .find(|&l| {
                let r = TimeIndex::buckets(b, l);
                r.end() - r.start() < SPAN
            })
            .unwrap_or(top);
        for k in TimeIndex::buckets(b, level) {
            self.levels[level][k].push(i as u32);
        }
    }

    /// Every list that may hold a block live beside `b` (a block may be
    /// read more than once).
    fn near<'a>(&'a self, b: &'a PlannedBlock) -> impl Iterator<Item = &'a Vec<u32>> + 'a {
        self.levels
            .iter()
            .enumerate()
            .flat_map(move |(l, buckets)| TimeIndex::buckets(b, l).map(move |k| &buckets[k]))
    }
}

/// The sort key of an order the planner tries (smallest first).
type OrderKey = fn(&PlannedBlock) -> (u64, u64);

impl Foresight {
    /// Plans `trace`: every allocation's size rounded up to `alignment`,
    /// segments of at most `max_segment` bytes (a device's
    /// `max_buffer_size`).
    ///
    /// Greedy, as TensorFlow Lite's planner: the allocations are taken in
    /// an order, and each goes where it raises the planned total least —
    /// the smallest gap between the blocks already placed beside it in time
    /// that holds it, else the top of the segment it raises least, else a
    /// new segment. Three orders are tried (largest first, longest-lived
    /// first, first allocated first) and the plan that reserves least is
    /// kept: on the corpus, largest first wins on most traces, the others
    /// on a few (`llm_decode`'s growing KV cache, for one). The result is a
    /// plan a clairvoyant pool could follow, not the least memory any plan
    /// could reach: it is at least the trace's peak live (rounded), and on
    /// the corpus within 1.08 × of it (BENCHMARKS.md).
    pub fn plan(
        trace: &Trace,
        alignment: u64,
        max_segment: u64,
    ) -> Result<Foresight, ForesightError> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(ForesightError::Alignment(alignment));
        }
        // No segment above 4 EiB (2^62), as no engine makes one: a block's
        // end and a segment's top then always fit a u64.
        let max_segment = max_segment.min(crate::MAX_SEGMENT);
        let blocks = lifetimes(trace, alignment, max_segment)?;
        let orders: [OrderKey; 3] = [
            |b| (u64::MAX - b.size, b.first_event as u64),
            |b| {
                (
                    u64::MAX - (b.last_event - b.first_event) as u64,
                    u64::MAX - b.size,
                )
            },
            |b| (b.first_event as u64, 0),
        ];
        let mut best: Option<Foresight> = None;
        for key in orders {
            let mut order: Vec<usize> = (0..blocks.len()).collect();
            order.sort_by_key(|&i| key(&blocks[i]));
            let plan = place(trace, blocks.clone(), &order, max_segment);
            if best.as_ref().is_none_or(|b| plan.reserved() < b.reserved()) {
                best = Some(plan);
            }
        }
        Ok(best.unwrap_or(Foresight {
            peak_live: trace.peak_live,
            segments: Vec::new(),
            blocks: Vec::new(),
        }))
    }

    /// Bytes the plan reserves: the sum of its segments, held from the
    /// first allocation to the last (so also its bytes created).
    pub fn reserved(&self) -> u64 {
        self.segments.iter().sum()
    }

    /// [`Foresight::reserved`] ÷ peak live (0 for an empty trace).
    pub fn ratio(&self) -> f64 {
        if self.peak_live == 0 {
            0.0
        } else {
            self.reserved() as f64 / self.peak_live as f64
        }
    }
}

/// Every allocation of `trace` with its lifetime, unplaced.
fn lifetimes(
    trace: &Trace,
    alignment: u64,
    max_segment: u64,
) -> Result<Vec<PlannedBlock>, ForesightError> {
    let mut live = std::collections::HashMap::new();
    let mut blocks = Vec::with_capacity(trace.allocations());
    for (i, e) in trace.events.iter().enumerate() {
        match e.action {
            Action::Allocate => {
                let size = e.size.max(1).checked_next_multiple_of(alignment);
                let Some(size) = size.filter(|&s| s <= max_segment) else {
                    return Err(ForesightError::TooLarge {
                        line: e.line,
                        size: e.size,
                        max_segment,
                    });
                };
                live.insert(e.pointer, blocks.len());
                blocks.push(PlannedBlock {
                    first_event: i,
                    last_event: trace.events.len(),
                    segment: 0,
                    offset: 0,
                    size,
                });
            }
            Action::Free => {
                // A validated trace frees only live pointers.
                if let Some(k) = live.remove(&e.pointer) {
                    blocks[k].last_event = i;
                }
            }
        }
    }
    Ok(blocks)
}

/// Places `blocks` in `order` (see [`Foresight::plan`]).
fn place(
    trace: &Trace,
    mut blocks: Vec<PlannedBlock>,
    order: &[usize],
    max_segment: u64,
) -> Foresight {
    let mut index = TimeIndex::new(trace.events.len());
    let mut segments: Vec<u64> = Vec::new();
    // The last block each placed block was found beside, so it is read once.
    let mut seen = vec![u32::MAX; blocks.len()];
    let mut beside: Vec<(usize, u64, u64)> = Vec::new();
    for (n, &i) in order.iter().enumerate() {
        let b = blocks[i];
        beside.clear();
        for listed in index.near(&b) {
            for &j in listed {
                let j = j as usize;
                if seen[j] != n as u32 && blocks[j].overlaps_in_time(&b) {
                    seen[j] = n as u32;
                    let o = &blocks[j];
                    beside.push((o.segment, o.offset, o.offset + o.size));
                }
            }
        }
        beside.sort_unstable();
        // The least raise of its segment's top, then the smallest gap.
        let mut best: Option<(u64, u64, usize, u64)> = None;
        let mut k = 0;
        for (s, &top) in segments.iter().enumerate() {
            let mut consider = |lo: u64, hi: u64| {
                // Blocks are at most max_segment (checked in `lifetimes`), and
                // gaps end at or below it, so `lo + size` overflows only
                // where it would pass max_segment: saturate.
                let end = lo.saturating_add(b.size);
                if hi >= end && end <= max_segment {
                    let raise = end.saturating_sub(top);
                    let gap = if raise > 0 { u64::MAX } else { hi - lo };
                    if best.is_none_or(|(r, g, _, _)| (raise, gap) < (r, g)) {
                        best = Some((raise, gap, s, lo));
                    }
                }
            };
            let mut end = 0;
            while k < beside.len() && beside[k].0 == s {
                let (_, lo, hi) = beside[k];
                if lo > end {
                    consider(end, lo);
                }
                end = end.max(hi);
                k += 1;
            }
            consider(end, max_segment.max(end));
        }
        let (segment, offset) = match best {
            Some((_, _, s, offset)) => (s, offset),
            None => {
                segments.push(0);
                (segments.len() - 1, 0)
            }
        };
        blocks[i].segment = segment;
        blocks[i].offset = offset;
        segments[segment] = segments[segment].max(offset + b.size);
        index.insert(i, &b);
    }
    Foresight {
        peak_live: trace.peak_live,
        segments,
        blocks,
    }
}
