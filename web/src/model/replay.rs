//! A trace replayed on the page: core's one replay driver
//! ([`Replayer`]) over the page's [`Backing`], paced to a speed in
//! operations per second, ending with the figures the harness reports, and
//! beside them what PyTorch's scheme makes of the same trace (a simulated
//! twin, stepped with the replay: a trace of millions of events is not
//! replayed again in one go at its end).

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vrampool::trace::{EngineTarget, Replayer, Step};
use vrampool::{
    BlockId, Config, Counters, Engine, Error, Limit, SimulatedDevice, Trace, fmt_bytes,
};

use super::{Backing, Block, Model, ModelCell, Pace, SIM_CAPACITY, SimDevice, TENSOR_USAGE, Usage};

/// The built-in sample traces: the shared PyTorch traces with every size ÷ 64,
/// written by `cargo xtask samples` into `web/samples/` and served beside the
/// page as `samples/<name>.csv.gz` (kept out of the wasm, where their
/// already-compressed bytes would cost 88 KB of the download).
pub const SAMPLES: [&str; 3] = ["resnet_train", "gpt_train", "batch_sweep"];

/// A trace being replayed.
pub struct Replay {
    /// Tells this replay from a later one (a task driving it stops when it is gone).
    id: u64,
    /// Core's replay driver: the trace, where it is, pointer → block.
    replayer: Replayer<'static, Block>,
    /// When its events are due.
    pace: Pace,
    /// Counters when it started (the report is the difference).
    start: Counters,
    /// Highest live bytes of the events taken.
    peak_live: u64,
    /// Wall clock at the start.
    wall: web_time::Instant,
    /// Stopped by a refusal other than out-of-memory (a lost device), which
    /// core counts with the refusals and the page does not call an OOM.
    stopped_by_error: bool,
    /// The PyTorch preset over the same trace under the same budget, an
    /// event per event taken here (`None` if its engine could not be made).
    twin: Option<Twin>,
}

impl Replay {
    /// Events taken so far, and events in the trace.
    pub fn progress(&self) -> (usize, usize) {
        (self.replayer.position(), self.replayer.trace().events.len())
    }

    /// The trace's name.
    pub fn trace_name(&self) -> &str {
        &self.replayer.trace().name
    }
}

/// Final figures of a replay, in the words of the harness's `replay --json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayResult {
    /// The trace's name, so its figures are not read as another's.
    pub trace: String,
    /// Trace events replayed.
    pub ops: u64,
    /// Every event was replayed (not stopped).
    pub done: bool,
    /// Peak live bytes of the events replayed.
    pub peak_live: u64,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// Device buffers created.
    pub device_allocs: u64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations refused.
    pub ooms: u64,
    /// Wall-clock milliseconds from start to end.
    pub millis: u64,
    /// The PyTorch preset on a simulated device with the same largest
    /// buffer and budget, over the same trace (only when every event was
    /// replayed).
    pub twin: Option<TwinResult>,
}

impl ReplayResult {
    /// "done", or "stopped" before the last event.
    pub fn word(&self) -> &'static str {
        if self.done { "done" } else { "stopped" }
    }
    /// `bytes` ÷ the peak live bytes of the events replayed (none stopped
    /// before any: read as 1 byte, not a division by zero).
    pub fn ratio(&self, bytes: u64) -> f64 {
        bytes as f64 / self.peak_live.max(1) as f64
    }
}

/// What the PyTorch preset makes of a replayed trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TwinResult {
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// Device buffers created.
    pub device_allocs: u64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations refused.
    pub ooms: u64,
}

/// `Config::pytorch()` replaying a trace on a simulated device of the
/// page's size, an event at a time: what core's `replay` reports of it.
struct Twin {
    engine: Box<Engine<SimulatedDevice>>,
    replayer: Replayer<'static, BlockId>,
}

impl Twin {
    /// The twin of a replay of `trace` under `limit` on a device whose
    /// largest buffer is `max_buffer`.
    fn new(trace: Arc<Trace>, max_buffer: u64, limit: Option<u64>) -> Option<Twin> {
        let device = SimDevice {
            capacity: SIM_CAPACITY,
            max_buffer,
        };
        let config = Config {
            limit: limit.map(Limit::Bytes),
            ..Config::pytorch()
        };
        Some(Twin {
            engine: Box::new(device.engine(config).ok()?),
            replayer: Replayer::shared(trace),
        })
    }

    /// Takes the next event (a refusal is counted and the replay goes on).
    fn step(&mut self) {
        let _ = self
            .replayer
            .step(&mut EngineTarget::new(&mut self.engine, TENSOR_USAGE));
    }

    /// Its figures once every event is taken.
    fn result(mut self) -> TwinResult {
        while !self.replayer.is_done() {
            self.step();
        }
        let s = self.engine.stats();
        TwinResult {
            peak_reserved: s.total.reserved_bytes.peak,
            device_allocs: s.counters.device_allocs,
            cache_hits: s.counters.cache_hits,
            ooms: self.replayer.counts().ooms,
        }
    }
}

/// What [`Model::replay_step`] left to the caller.
enum Next {
    /// Allocate `size` bytes on this backing, then report with [`Model::replay_allocated`].
    Allocate(Rc<dyn Backing>, u64),
    /// A free (or nothing) was carried out.
    Stepped,
    /// The replay is over (ended here, stopped, or replaced by another).
    Over,
}

impl Model {
    /// Starts replaying `trace` on a fresh pool with the page's settings (so
    /// the figures can be checked against the harness's replay of the same
    /// trace). Returns the replay's id, for [`advance_replay`].
    pub fn start_replay(&mut self, trace: impl Into<Arc<Trace>>, speed: f64) -> Result<u64, Error> {
        let trace = trace.into();
        let config = self.replay_config(&trace)?;
        let backing = self.backing.renew(config)?;
        Ok(self.start_replay_on(backing, trace, speed))
    }

    /// The configuration of a replay's fresh pool (the page's settings, the
    /// limit in force), or why `trace` cannot be replayed here.
    pub fn replay_config(&self, trace: &Trace) -> Result<Config, Error> {
        if trace.largest > self.max_buffer {
            return Err(Error::TooLarge {
                requested: trace.largest,
                max_buffer_size: self.max_buffer,
            });
        }
        let limit = self.stats().limit;
        Ok(Self::pool_config(self.growth, limit, self.cache_limit))
    }

    /// [`Model::start_replay`] on a fresh pool made apart from
    /// [`Model::replay_config`] ([`Backing::renew_async`], which awaits the
    /// device's answer to a preallocation).
    pub fn start_replay_on(
        &mut self,
        backing: Rc<dyn Backing>,
        trace: Arc<Trace>,
        speed: f64,
    ) -> u64 {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let (growth, cache_limit) = (self.growth, self.cache_limit);
        self.install(backing, growth, cache_limit);
        // The new pool's limit, which its configuration was given.
        let limit = self.stats().limit;
        self.backing.reset_peak_stats();
        self.say(format!(
            "replay {}: {} events, peak live {}",
            trace.name,
            trace.events.len(),
            fmt_bytes(trace.peak_live)
        ));
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.replay = Some(Replay {
            id,
            twin: Twin::new(trace.clone(), self.max_buffer, limit),
            replayer: Replayer::shared(trace),
            pace: Pace::new(speed),
            start: self.stats().counters,
            peak_live: 0,
            wall: web_time::Instant::now(),
            stopped_by_error: false,
        });
        self.replay_result = None;
        id
    }

    /// How many events of replay `id` to take in the tick that begins at
    /// `t` and lasts `tick` seconds (see [`Pace::due`]); `None` once that
    /// replay is over.
    pub fn replay_due(&mut self, id: u64, t: f64, tick: f64, cap: usize) -> Option<usize> {
        let r = self.replay.as_mut().filter(|r| r.id == id)?;
        Some(r.pace.due(t, tick, r.replayer.position(), cap))
    }

    /// Ends the replay: frees what is still live and records the result.
    pub fn finish_replay(&mut self) {
        let Some(mut r) = self.replay.take() else {
            return;
        };
        for block in r.replayer.take_live() {
            self.backing.free(block);
        }
        let s = self.stats();
        let trace = r.replayer.trace();
        let done = r.replayer.is_done();
        let res = ReplayResult {
            trace: trace.name.clone(),
            ops: r.replayer.position() as u64,
            done,
            peak_live: r.peak_live,
            peak_reserved: s.total.reserved_bytes.peak,
            device_allocs: s.counters.device_allocs - r.start.device_allocs,
            cache_hits: s.counters.cache_hits - r.start.cache_hits,
            ooms: r.replayer.counts().ooms - u64::from(r.stopped_by_error),
            millis: r.wall.elapsed().as_millis() as u64,
            twin: r.twin.take().filter(|_| done).map(Twin::result),
        };
        let twin = res.twin.map_or(String::new(), |t| {
            format!(
                "; PyTorch's scheme on the same trace: {} ({:.3} ×), {} device allocations",
                fmt_bytes(t.peak_reserved),
                res.ratio(t.peak_reserved),
                t.device_allocs
            )
        });
        self.say(format!(
            "replay {} {} in {:.2} s: peak reserved {} ({:.3} × peak live), {} device allocations, {} OOMs{twin}",
            trace.name,
            res.word(),
            res.millis as f64 / 1000.0,
            fmt_bytes(res.peak_reserved),
            res.ratio(res.peak_reserved),
            res.device_allocs,
            res.ooms
        ));
        self.replay_result = Some(res);
    }

    /// Takes the next event of replay `id`: a free is carried out here, an
    /// allocation is left to the caller to await; after the last event the
    /// replay ends.
    fn replay_step(&mut self, id: u64) -> Next {
        let Some(r) = self.replay.as_mut().filter(|r| r.id == id) else {
            return Next::Over;
        };
        let step = r.replayer.next_step();
        r.peak_live = r.peak_live.max(r.replayer.live_bytes());
        if step.is_some()
            && let Some(twin) = &mut r.twin
        {
            twin.step();
        }
        match step {
            None => {
                self.finish_replay();
                Next::Over
            }
            Some(Step::Allocate { size, .. }) => Next::Allocate(self.backing.clone(), size),
            // No command used the block: reusable at once, in trace order.
            Some(Step::Free(block)) => {
                self.backing.free(block);
                Next::Stepped
            }
            Some(Step::Skip) => Next::Stepped,
        }
    }

    /// The outcome of replay `id`'s allocation. An out-of-memory (or too
    /// large) refusal is counted, the first three logged, and the replay
    /// goes on; any other error (a lost device) stops it, logged, and is
    /// not counted as an OOM.
    fn replay_allocated(&mut self, id: u64, outcome: Result<Block, Error>) {
        let Some(r) = self.replay.as_mut().filter(|r| r.id == id) else {
            // Stopped or replaced while the device answered: nobody holds it.
            if let Ok(block) = outcome {
                self.backing.free(block);
            }
            return;
        };
        let refused = outcome.as_ref().err().map(Error::to_string);
        // Core hands back an error other than out-of-memory (a lost device)
        // for the caller to stop or go on: no later request could be served,
        // so the replay stops and says why.
        if let Err(e) = r.replayer.allocated(outcome) {
            r.stopped_by_error = true;
            self.say(format!("replay stopped: {e}"));
            return self.finish_replay();
        }
        let ooms = r.replayer.counts().ooms;
        if let Some(err) = refused
            && ooms <= 3
        {
            self.say(format!("OOM during replay: {err}"));
        }
    }
}

/// The page's replay loop, for either backing: carries out up to `n` events
/// of replay `id` (frees at once, each allocation awaited, so on WebGPU a new
/// segment waits for its error scopes) and ends the replay after its last
/// event. Returns whether replay `id` goes on.
pub async fn advance_replay(model: &impl ModelCell, id: u64, n: usize) -> bool {
    for _ in 0..n {
        let (backing, size) = match model.with_model(|m| m.replay_step(id)) {
            Some(Next::Allocate(backing, size)) => (backing, size),
            Some(Next::Stepped) => continue,
            Some(Next::Over) | None => return false,
        };
        let outcome = backing.allocate(size, Usage::Tensor).await;
        model.with_model(|m| m.replay_allocated(id, outcome));
    }
    true
}

#[cfg(test)]
mod tests {
    use vrampool::{Error, Trace};

    use super::{Model, Next, SAMPLES};

    #[test]
    fn a_refusal_other_than_out_of_memory_stops_the_replay_and_says_why() {
        let path = format!(
            "{}/samples/{}.csv.gz",
            env!("CARGO_MANIFEST_DIR"),
            SAMPLES[0]
        );
        let mut m = Model::simulated("test");
        let id = m.start_replay(Trace::open(path).unwrap(), 1e9).unwrap();
        // Up to the first allocation, which the device answers as lost.
        while !matches!(m.replay_step(id), Next::Allocate(..)) {}
        m.replay_allocated(id, Err(Error::DeviceLost("destroyed".into())));
        assert!(m.replay.is_none(), "no later request could be served");
        let r = m.replay_result.unwrap();
        assert_eq!((r.done, r.ooms), (false, 0), "a lost device is no OOM");
        let log: Vec<&String> = m.log.iter().rev().take(2).collect();
        assert!(
            log[0].contains(" stopped in ") && log[0].contains(", 0 OOMs"),
            "{}",
            log[0]
        );
        assert!(
            log[1].starts_with("replay stopped: ") && log[1].contains("destroyed"),
            "{}",
            log[1]
        );
    }
}
