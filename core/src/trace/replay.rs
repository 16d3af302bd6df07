//! Replaying a trace through any allocator, one event at a time: the one
//! replay loop the harness's policies, the page and [`replay`] all drive.
//!
//! Architecture invariant: the replayer knows nothing of engines or devices;
//! it hands out steps ([`Replayer::next_step`]) and takes back what the
//! allocator made of them, so a caller may carry a step out at once
//! ([`Replayer::step`] over a [`ReplayTarget`]) or await the device first
//! (the browser).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::PointerMap;

use crate::backend::Backend;
use crate::engine::Engine;
use crate::error::Error;
use crate::types::{BlockId, Request};

use super::format::{Action, Trace};

/// What a replay drives: anything that allocates and frees.
pub trait ReplayTarget {
    /// One allocation.
    type Handle;
    /// Allocates `size` bytes.
    fn allocate(&mut self, size: u64) -> Result<Self::Handle, Error>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
}

/// The engine as a replay target: every request of `usage` (group 0: tensors).
pub struct EngineTarget<'e, B: Backend> {
    /// The engine.
    pub engine: &'e mut Engine<B>,
    /// The usage of every request.
    pub usage: u32,
    /// Every request [relocatable](Request::relocatable): a tensor runtime
    /// that reads a tensor's place anew for each pass it records and submits
    /// what it recorded before the pool moves anything.
    pub relocatable: bool,
}

impl<'e, B: Backend> EngineTarget<'e, B> {
    /// The engine as a target, every request of `usage`, none relocatable.
    pub fn new(engine: &'e mut Engine<B>, usage: u32) -> Self {
        EngineTarget {
            engine,
            usage,
            relocatable: false,
        }
    }
}

impl<B: Backend> ReplayTarget for EngineTarget<'_, B> {
    type Handle = BlockId;
    fn allocate(&mut self, size: u64) -> Result<BlockId, Error> {
        let a = self.engine.allocate(Request {
            relocatable: self.relocatable,
            ..Request::new(size, self.usage)
        })?;
        if self.relocatable {
            // Handles are ids, which a move keeps.
            self.engine.take_moves();
        }
        Ok(a.id)
    }
    fn free(&mut self, handle: BlockId) {
        self.engine
            .free(handle)
            .expect("the replay frees only blocks it allocated");
    }
}

/// One step of a replay, for a caller that carries it out itself.
#[derive(Debug)]
pub enum Step<H> {
    /// Allocate `size` bytes, then report the outcome with [`Replayer::allocated`].
    Allocate {
        /// Bytes.
        size: u64,
        /// The trace line (for messages).
        line: u64,
    },
    /// Free this allocation (the replay no longer holds it).
    Free(H),
    /// The free of an allocation that was refused: nothing to do.
    Skip,
}

/// Allocations, frees and refusals so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayCounts {
    /// Allocations replayed (including refused ones).
    pub allocs: u64,
    /// Frees replayed.
    pub frees: u64,
    /// Allocations refused.
    pub ooms: u64,
}

/// A trace being replayed, one event at a time. A trace made by hand (its
/// fields are public) rather than by [`Trace::parse`] may break what the
/// reader checks: a free of a pointer never allocated is skipped (and frees
/// no live bytes), and a block whose pointer is allocated again while it
/// lives stays live until [`Replayer::take_live`].
///
/// ```
/// use vrampool::trace::{EngineTarget, Replayer};
/// use vrampool::{Config, Engine, SimulatedDevice, Trace};
/// let csv = "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,4096,0x0\n0,0,free,0x10,4096,0x0\n";
/// let trace = Trace::parse("tiny", csv.as_bytes())?;
/// let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// let mut replayer = Replayer::new(&trace);
/// let mut target = EngineTarget::new(&mut engine, 0);
/// while replayer.step(&mut target)? {}
/// assert_eq!(replayer.counts().frees, 1);
/// # Ok::<(), vrampool::Error>(())
/// ```
pub struct Replayer<'t, H> {
    trace: Source<'t>,
    next: usize,
    live: PointerMap<u64, H>,
    /// Blocks whose pointer a hand-made trace allocated again while they
    /// were live: they stay live until [`Replayer::take_live`].
    shadowed: Vec<H>,
    /// Pointers whose allocation was refused, with how many times (a
    /// hand-made trace may refuse one twice): live in the trace, not here.
    refused: PointerMap<u64, u32>,
    /// The pointer of an `Allocate` step whose outcome is awaited.
    waiting: Option<u64>,
    live_bytes: u64,
    counts: ReplayCounts,
}

impl<'t, H> Replayer<'t, H> {
    /// A replay of `trace` from its first event.
    pub fn new(trace: &'t Trace) -> Self {
        Self::from_source(Source::Borrowed(trace))
    }

    fn from_source(trace: Source<'t>) -> Self {
        Replayer {
            trace,
            next: 0,
            live: PointerMap::with_capacity_and_hasher(1024, Default::default()),
            shadowed: Vec::new(),
            refused: PointerMap::default(),
            waiting: None,
            live_bytes: 0,
            counts: ReplayCounts::default(),
        }
    }

    /// A replay that owns its trace (to keep between calls, as the page does).
    pub fn owned(trace: Trace) -> Replayer<'static, H> {
        Replayer::shared(Arc::new(trace))
    }

    /// A replay that shares its trace with others (the page keeps several
    /// replays of one trace between calls, each a step at a time, and a
    /// trace of millions of events is not copied for each).
    pub fn shared(trace: Arc<Trace>) -> Replayer<'static, H> {
        Replayer::from_source(Source::Shared(trace))
    }

    /// The trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Events taken so far.
    pub fn position(&self) -> usize {
        self.next
    }

    /// Whether every event was taken.
    pub fn is_done(&self) -> bool {
        self.next >= self.trace.events.len()
    }

    /// Live bytes the trace asked for, as of the events taken.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Allocations, frees and refusals so far.
    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    /// The next step, or `None` at the end. After an `Allocate`, report its
    /// outcome with [`Replayer::allocated`] before the next step.
    pub fn next_step(&mut self) -> Option<Step<H>> {
        debug_assert!(self.waiting.is_none(), "report the last allocation first");
        let e = *self.trace.events.get(self.next)?;
        self.next += 1;
        Some(match e.action {
            Action::Allocate => {
                self.counts.allocs += 1;
                self.live_bytes = self.live_bytes.saturating_add(e.size);
                self.waiting = Some(e.pointer);
                Step::Allocate {
                    size: e.size,
                    line: e.line,
                }
            }
            Action::Free => {
                self.counts.frees += 1;
                let step = match self.live.remove(&e.pointer) {
                    Some(h) => Step::Free(h),
                    None => Step::Skip,
                };
                // Live in the trace (served or refused), its bytes go; a free
                // of a pointer never allocated (a hand-made trace) frees none.
                if matches!(step, Step::Free(_)) || self.take_refused(e.pointer) {
                    self.live_bytes = self.live_bytes.saturating_sub(e.size);
                }
                step
            }
        })
    }

    /// The outcome of the last `Allocate` step. A refusal for lack of memory
    /// (out of memory, larger than a buffer) is counted and the replay goes
    /// on; any other error is counted as a refusal too and handed back, for
    /// the caller to stop or go on.
    pub fn allocated(&mut self, outcome: Result<H, Error>) -> Result<(), Error> {
        let pointer = self
            .waiting
            .take()
            .expect("allocated() answers an Allocate step");
        match outcome {
            Ok(h) => {
                if let Some(earlier) = self.live.insert(pointer, h) {
                    self.shadowed.push(earlier);
                }
                Ok(())
            }
            Err(e) => {
                self.counts.ooms += 1;
                *self.refused.entry(pointer).or_default() += 1;
                match e {
                    Error::OutOfMemory(_) | Error::TooLarge { .. } => Ok(()),
                    other => Err(other),
                }
            }
        }
    }

    /// Carries out the next step on `target`; `false` at the end. Errors are
    /// [`Replayer::allocated`]'s.
    pub fn step<T: ReplayTarget<Handle = H>>(&mut self, target: &mut T) -> Result<bool, Error> {
        match self.next_step() {
            None => Ok(false),
            Some(Step::Allocate { size, .. }) => {
                let outcome = target.allocate(size);
                self.allocated(outcome).map(|()| true)
            }
            Some(Step::Free(h)) => {
                target.free(h);
                Ok(true)
            }
            Some(Step::Skip) => Ok(true),
        }
    }

    /// Whether `pointer` has a refused allocation not freed yet; counts one
    /// freed.
    fn take_refused(&mut self, pointer: u64) -> bool {
        match self.refused.get_mut(&pointer) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                self.refused.remove(&pointer);
                true
            }
            None => false,
        }
    }

    /// Takes the allocations still live (a trace may end with some), to free.
    pub fn take_live(&mut self) -> Vec<H> {
        let mut live: Vec<H> = self.shadowed.drain(..).collect();
        live.extend(self.live.drain().map(|(_, h)| h));
        live
    }
}

/// Where a [`Replayer`]'s trace lives.
enum Source<'t> {
    Borrowed(&'t Trace),
    Shared(Arc<Trace>),
}

impl std::ops::Deref for Source<'_> {
    type Target = Trace;
    fn deref(&self) -> &Trace {
        match self {
            Source::Borrowed(t) => t,
            Source::Shared(t) => t,
        }
    }
}

/// Figures of one replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The trace's name.
    pub trace: String,
    /// Allocations replayed (including refused ones).
    pub allocs: u64,
    /// Frees replayed.
    pub frees: u64,
    /// Peak live bytes of the trace (requested sizes).
    pub peak_live: u64,
    /// Peak allocated bytes (rounded blocks).
    pub peak_allocated: u64,
    /// Peak reserved bytes (device segments).
    pub peak_reserved: u64,
    /// `peak_reserved / peak_live`.
    pub reserved_ratio: f64,
    /// Device buffers created.
    pub device_allocs: u64,
    /// Device buffers destroyed during the replay.
    pub device_frees: u64,
    /// Bytes of the segments created: what the device spent creating memory.
    pub segment_bytes_created: u64,
    /// Bytes of the segments released during the replay (not counting an
    /// `empty_cache` after it): what the device spent giving memory back.
    pub segment_bytes_released: u64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations that needed a device call.
    pub cache_misses: u64,
    /// Allocations refused: out of memory, or any other error (too large,
    /// device lost).
    pub ooms: u64,
    /// Allocations that had to release cache and retry.
    pub retries: u64,
    /// Wall time of the replay loop, nanoseconds.
    pub elapsed_ns: u64,
    /// Wall time per allocate or free, nanoseconds.
    pub ns_per_op: f64,
    /// Allocations replayed when reserved bytes first reached their peak
    /// (`None` where the replay did not track it).
    #[serde(default)]
    pub peak_reserved_at: Option<u64>,
    /// Allocations replayed when live bytes first reached their peak. With
    /// [`ReplayReport::peak_reserved_at`] at or before it, the pool's peak
    /// was set on the way up to the workload's peak, the first time it got
    /// there: no layout learned from an earlier visit of that peak could
    /// have lowered it (`None` where the replay did not track it).
    #[serde(default)]
    pub peak_live_at: Option<u64>,
    /// Live blocks the pool moved to make room (relocatable replays only,
    /// see [`replay_relocatable`]).
    #[serde(default)]
    pub blocks_moved: u64,
    /// Their bytes: what the device copied.
    #[serde(default)]
    pub bytes_moved: u64,
    /// Batches of moves, each one command buffer submitted: the
    /// relocations and evacuations (`Counters::relocations`,
    /// `Counters::evacuations`).
    #[serde(default)]
    pub move_batches: u64,
}

impl ReplayReport {
    /// Cache hits ÷ allocations served, refused ones left out, as
    /// [`Counters::hit_rate`](crate::Counters::hit_rate) counts them.
    pub fn hit_rate(&self) -> f64 {
        crate::stats::hit_rate(self.cache_hits, self.cache_misses)
    }
}

/// Replays `trace` through `engine`, allocating with `usage`. Allocations the
/// pool refuses are counted as OOMs (and their frees skipped); the replay goes on.
/// The report's counters are this call's: segments the engine made before it
/// (a preallocation among them) are not counted. (`vrampool replay` and
/// `corpus` make an engine for each replay and count its preallocation as
/// the replay's.)
///
/// ```
/// use vrampool::{Config, Engine, SimulatedDevice, Trace, replay};
/// let csv = "Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,4096,0x0\n0,0,free,0x10,4096,0x0\n";
/// let trace = Trace::parse("tiny", csv.as_bytes())?;
/// let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// let report = replay(&mut engine, &trace, 0);
/// assert_eq!((report.allocs, report.frees, report.ooms), (1, 1, 0));
/// # Ok::<(), vrampool::Error>(())
/// ```
pub fn replay<B: Backend>(engine: &mut Engine<B>, trace: &Trace, usage: u32) -> ReplayReport {
    replay_through(engine, trace, usage, false, 0)
}

/// [`replay`] with every request [relocatable](Request::relocatable), as a
/// tensor runtime that reads each tensor's place anew for every pass and
/// submits on the pool's request would make them: the engine may move live
/// blocks to serve a request from memory it holds (see
/// [`Config::relocate`](crate::Config::relocate)); the report counts what
/// it moved.
///
/// ```
/// use vrampool::{Config, Engine, SimulatedDevice, Trace, replay_relocatable};
/// let trace = Trace::open("../data/traces/small_mlp.csv.gz")?;
/// let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// let report = replay_relocatable(&mut engine, &trace, 0);
/// assert!(report.bytes_moved > 0);
/// assert_eq!(engine.backend().moved(), report.bytes_moved);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_relocatable<B: Backend>(
    engine: &mut Engine<B>,
    trace: &Trace,
    usage: u32,
) -> ReplayReport {
    replay_through(engine, trace, usage, true, 0)
}

/// [`replay`] as a `Pool` caller that submits every `every` events sees
/// it: a free takes effect at the next submit (the block dropped before
/// the submit waits for it, [`Engine::defer_free`]), and with `relocatable`
/// each block may move but is pinned from its allocation until the next
/// submit, as [`Pool::alloc_movable`](crate::Pool::alloc_movable) pins a
/// block whose place was read for the command writing it until that command
/// is submitted. Reads of older blocks by later passes (a weight read every
/// step) are not in a trace, so they pin nothing here. `every` 0 frees at
/// once and pins nothing: [`replay`] or [`replay_relocatable`].
///
/// ```
/// use vrampool::{Config, Engine, SimulatedDevice, Trace, replay_submitting};
/// let trace = Trace::open("../data/traces/small_mlp.csv.gz")?;
/// let run = |every| -> Result<_, vrampool::Error> {
///     let mut engine = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
///     Ok(replay_submitting(&mut engine, &trace, 0, true, every))
/// };
/// let (at_once, every_4096) = (run(0)?, run(4096)?);
/// // A submit every 4096 events: most blocks are pinned when a request
/// // would move them, and freed blocks wait for the submit.
/// assert!(every_4096.bytes_moved < at_once.bytes_moved);
/// assert!(every_4096.peak_reserved >= at_once.peak_reserved);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_submitting<B: Backend>(
    engine: &mut Engine<B>,
    trace: &Trace,
    usage: u32,
    relocatable: bool,
    every: u64,
) -> ReplayReport {
    replay_through(engine, trace, usage, relocatable, every)
}

/// Submit points every `every` allocations and frees, as a replay of a
/// `Pool` caller makes them: frees deferred to the next one, blocks pinned
/// from their allocation until it. `every` 0: no submit points, frees at
/// once, nothing pinned. The harness's engine policies and
/// [`replay_submitting`] both keep one.
#[derive(Debug, Default)]
pub struct SubmitClock {
    every: u64,
    events: u64,
    pinned: Vec<BlockId>,
}

impl SubmitClock {
    /// Submit points every `every` events (0: none).
    pub fn new(every: u64) -> Self {
        SubmitClock {
            every,
            ..SubmitClock::default()
        }
    }

    /// Counts an allocation: the block the engine made (`None`: it refused
    /// the request), pinned until the next submit point if it is relocatable.
    pub fn allocated<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        id: Option<BlockId>,
        relocatable: bool,
    ) {
        if let Some(id) = id
            && relocatable
            && self.every > 0
            && engine.set_relocatable(id, false).is_ok()
        {
            self.pinned.push(id);
        }
        self.event(engine);
    }

    /// Frees `id`, at once or at the next submit point.
    pub fn free<B: Backend>(&mut self, engine: &mut Engine<B>, id: BlockId) -> Result<(), Error> {
        if self.every > 0 {
            engine.defer_free(id)?;
        } else {
            engine.free(id)?;
        }
        self.event(engine);
        Ok(())
    }

    /// A submit point now: the deferred frees take effect and the pinned
    /// blocks may move again ([`replay_submitting`] makes the end of a
    /// replay one, when it has submit points).
    pub fn submit<B: Backend>(&mut self, engine: &mut Engine<B>) {
        let mark = engine.defer_mark();
        engine.reclaim_deferred(mark);
        for id in self.pinned.drain(..) {
            // A block freed since is no longer live: its id (with its
            // generation) is refused, and no other block is touched.
            let _ = engine.set_relocatable(id, true);
        }
    }

    fn event<B: Backend>(&mut self, engine: &mut Engine<B>) {
        self.events += 1;
        if self.every > 0 && self.events.is_multiple_of(self.every) {
            self.submit(engine);
        }
    }
}

/// An [`EngineTarget`] with submit points.
struct Submitting<'e, B: Backend> {
    inner: EngineTarget<'e, B>,
    clock: SubmitClock,
}

impl<B: Backend> ReplayTarget for Submitting<'_, B> {
    type Handle = BlockId;
    fn allocate(&mut self, size: u64) -> Result<BlockId, Error> {
        let r = self.inner.allocate(size);
        let relocatable = self.inner.relocatable;
        self.clock
            .allocated(self.inner.engine, r.as_ref().ok().copied(), relocatable);
        r
    }
    fn free(&mut self, handle: BlockId) {
        self.clock
            .free(self.inner.engine, handle)
            .expect("the replay frees only blocks it allocated");
    }
}

fn replay_through<B: Backend>(
    engine: &mut Engine<B>,
    trace: &Trace,
    usage: u32,
    relocatable: bool,
    submit_every: u64,
) -> ReplayReport {
    let before = engine.stats().counters;
    engine.reset_peak_stats();
    let mut replayer = Replayer::new(trace);
    let mut target = Submitting {
        inner: EngineTarget {
            engine,
            usage,
            relocatable,
        },
        clock: SubmitClock::new(submit_every),
    };
    let (mut top_reserved, mut peak_reserved_at) = (target.inner.engine.reserved_bytes(), 0);
    let (mut top_live, mut peak_live_at) = (0, 0);
    let start = web_time::Instant::now();
    loop {
        match replayer.step(&mut target) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => tracing::warn!("replay {}: {e}", trace.name),
        }
        let reserved = target.inner.engine.reserved_bytes();
        if reserved > top_reserved {
            (top_reserved, peak_reserved_at) = (reserved, replayer.counts().allocs);
        }
        if replayer.live_bytes() > top_live {
            (top_live, peak_live_at) = (replayer.live_bytes(), replayer.counts().allocs);
        }
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    // The replay's figures, before the blocks still live are freed and the
    // last submit declared (as the harness reads them): a trim those frees
    // made would not be the trace's.
    let s = target.inner.engine.stats();
    let c = s.counters;
    for h in replayer.take_live() {
        target.free(h);
    }
    if submit_every > 0 {
        target.clock.submit(target.inner.engine);
    }
    let counts = replayer.counts();
    ReplayReport {
        trace: trace.name.clone(),
        allocs: counts.allocs,
        frees: counts.frees,
        peak_live: trace.peak_live,
        peak_allocated: s.total.allocated_bytes.peak,
        peak_reserved: s.total.reserved_bytes.peak,
        reserved_ratio: s.total.reserved_bytes.peak as f64 / trace.peak_live as f64,
        device_allocs: c.device_allocs - before.device_allocs,
        device_frees: c.device_frees - before.device_frees,
        segment_bytes_created: c.bytes_created - before.bytes_created,
        segment_bytes_released: c.bytes_released - before.bytes_released,
        cache_hits: c.cache_hits - before.cache_hits,
        cache_misses: c.cache_misses - before.cache_misses,
        ooms: counts.ooms,
        retries: c.alloc_retries - before.alloc_retries,
        elapsed_ns,
        ns_per_op: elapsed_ns as f64 / (counts.allocs + counts.frees).max(1) as f64,
        peak_reserved_at: Some(peak_reserved_at),
        peak_live_at: Some(peak_live_at),
        blocks_moved: c.blocks_moved - before.blocks_moved,
        bytes_moved: c.bytes_moved - before.bytes_moved,
        move_batches: c.move_batches() - before.move_batches(),
    }
}
