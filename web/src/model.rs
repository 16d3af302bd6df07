//! What the page drives: a pool on the browser's WebGPU device (or, where
//! there is none, the engine on a simulated device), the blocks it handed out,
//! a trace replay in progress, the MLP, and the figures the view shows.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use vrampool::trace::Action;
use vrampool::{
    Access, AllocDesc, BlockId, Config, Engine, Error, Growth, Limit, Pool, PoolBuffer,
    PoolOptions, READ_WRITE_USAGE, Request, SimulatedDevice, Snapshot, SnapshotState, Stats, Trace,
    fmt_bytes,
};

/// The simulated device's memory, and WebGPU's default `max_buffer_size`.
pub const SIM_CAPACITY: u64 = 4 << 30;
/// WebGPU's default `max_buffer_size`.
pub const WEBGPU_MAX_BUFFER: u64 = 256 << 20;

/// The pool the page falls back to when `navigator.gpu` or an adapter is
/// missing: the engine on a simulated device of `capacity` bytes with WebGPU's
/// default `max_buffer_size` (256 MiB).
pub fn simulated_pool(capacity: u64, config: Config) -> Result<Engine<SimulatedDevice>, Error> {
    Engine::new(
        SimulatedDevice::with_max_buffer_size(capacity, WEBGPU_MAX_BUFFER),
        config,
    )
}

/// Where the blocks come from.
pub enum Device {
    /// A [`Pool`] on a real WebGPU device.
    Gpu(Rc<Pool>),
    /// The engine on the simulated device.
    Sim(Box<Engine<SimulatedDevice>>),
}

/// A block the page holds.
pub enum Handle {
    /// A range of a real buffer; dropping it returns it to the pool.
    Gpu(PoolBuffer),
    /// A simulated block.
    Sim(BlockId),
}

/// What a person can ask for with "allocate".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// STORAGE | COPY_SRC | COPY_DST.
    Storage,
    /// UNIFORM | COPY_DST.
    Uniform,
    /// VERTEX | COPY_DST.
    Vertex,
    /// MAP_READ | COPY_DST: a staging buffer (exclusive).
    Readback,
    /// STORAGE | COPY_SRC | COPY_DST bound only read_write: a replayed
    /// trace's tensors, packed as the harness's replay packs them.
    Tensor,
}

impl Usage {
    /// Parses the `<select>` value.
    pub fn parse(s: &str) -> Usage {
        match s {
            "uniform" => Usage::Uniform,
            "vertex" => Usage::Vertex,
            "readback" => Usage::Readback,
            _ => Usage::Storage,
        }
    }
    fn wgpu(self) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        match self {
            Usage::Storage | Usage::Tensor => U::STORAGE | U::COPY_SRC | U::COPY_DST,
            Usage::Uniform => U::UNIFORM | U::COPY_DST,
            Usage::Vertex => U::VERTEX | U::COPY_DST,
            Usage::Readback => U::MAP_READ | U::COPY_DST,
        }
    }
    /// What the pool is asked for: `size` bytes of this usage, labelled with it.
    pub fn desc(self, size: u64) -> AllocDesc<'static> {
        let access = match self {
            Usage::Tensor => Access::ReadWrite,
            _ => Access::Any,
        };
        AllocDesc::new(size, self.wgpu())
            .access(access)
            .label(self.label())
    }
    fn label(self) -> &'static str {
        match self {
            Usage::Storage => "storage",
            Usage::Uniform => "uniform",
            Usage::Vertex => "vertex",
            Usage::Readback => "readback",
            Usage::Tensor => "tensor",
        }
    }
}

/// One point of the timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds since the page started.
    pub t: f64,
    /// Allocated bytes.
    pub allocated: u64,
    /// Reserved bytes.
    pub reserved: u64,
    /// Cached bytes.
    pub cached: u64,
    /// The hard limit then.
    pub budget: Option<u64>,
}

/// A trace being replayed.
pub struct Replay {
    /// The trace.
    pub trace: Trace,
    /// Next event.
    pub next: usize,
    /// Pointer → handle.
    pub live: HashMap<u64, Handle>,
    /// Operations per second.
    pub speed: f64,
    /// When it started (the page's clock, seconds); `None` until the first tick.
    pub started: Option<f64>,
    /// Allocations refused.
    pub ooms: u64,
    /// Counters when it started (the report is the difference).
    pub start: vrampool::Counters,
    /// Wall clock at the start.
    pub wall: web_time::Instant,
}

/// Final figures of a replay, in the words of the harness's `replay --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayResult {
    /// Trace events replayed.
    pub ops: u64,
    /// Peak live bytes of the trace.
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
}

/// The page's state.
pub struct Model {
    /// The pool or simulated engine.
    pub device: Device,
    /// "WebGPU: <adapter>" or why the simulated device is used.
    pub backend: String,
    /// The device's largest buffer.
    pub max_buffer: u64,
    /// Blocks allocated with the buttons (in order).
    pub held: Vec<(Handle, u64)>,
    /// Newest last.
    pub log: VecDeque<String>,
    /// Timeline, oldest first.
    pub points: VecDeque<Point>,
    /// A replay in progress.
    pub replay: Option<Replay>,
    /// The last replay's result.
    pub replay_result: Option<ReplayResult>,
    /// Why the simulated device is in use (empty on WebGPU).
    pub note: String,
    /// Why the WebGPU device was lost, once it was.
    pub lost: Option<String>,
    /// Counters at the last sample, to log what the device did in between.
    last_counters: vrampool::Counters,
    /// Seed for "free random".
    rng: u64,
}

/// Timeline points kept (60 s at 20 Hz).
pub const MAX_POINTS: usize = 1200;
/// Log lines kept.
pub const MAX_LOG: usize = 60;

impl Model {
    /// A model over `device`.
    pub fn new(device: Device, backend: String, max_buffer: u64) -> Model {
        Model {
            device,
            backend,
            max_buffer,
            held: Vec::new(),
            log: VecDeque::new(),
            points: VecDeque::new(),
            replay: None,
            replay_result: None,
            note: String::new(),
            lost: None,
            last_counters: vrampool::Counters::default(),
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// A model on the simulated device.
    pub fn simulated(why: &str) -> Model {
        let e = simulated_pool(SIM_CAPACITY, Config::default()).expect("default config");
        let mut m = Model::new(
            Device::Sim(Box::new(e)),
            format!("simulated device ({})", fmt_bytes(SIM_CAPACITY)),
            WEBGPU_MAX_BUFFER,
        );
        m.say(format!("using the simulated device: {why}"));
        m.note = why.to_string();
        m
    }

    /// Adds a log line.
    pub fn say(&mut self, line: String) {
        if self.log.len() == MAX_LOG {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }

    /// The pool's figures.
    pub fn stats(&self) -> Stats {
        match &self.device {
            Device::Gpu(p) => p.stats(),
            Device::Sim(e) => e.stats(),
        }
    }

    /// Segments and blocks.
    pub fn snapshot(&self) -> Snapshot {
        match &self.device {
            Device::Gpu(p) => p.snapshot(),
            Device::Sim(e) => e.snapshot(),
        }
    }

    /// The pool behind a real device, for async allocation.
    pub fn gpu_pool(&self) -> Option<Rc<Pool>> {
        match &self.device {
            Device::Gpu(p) => Some(p.clone()),
            Device::Sim(_) => None,
        }
    }

    /// Records a timeline point, and logs the segments the pool created or
    /// released since the last one, and any OOM. Returns the stats it read.
    pub fn sample(&mut self, t: f64) -> Stats {
        if self.lost.is_none()
            && let Device::Gpu(pool) = &self.device
            && let Some(why) = pool.device_lost()
        {
            let why = why.to_string();
            self.say(format!(
                "device lost: {why}. Every allocation now fails with DeviceLost; frees and figures still work. Press \"new device\" to start over"
            ));
            self.lost = Some(why);
        }
        let s = self.stats();
        let (now, was) = (s.counters, self.last_counters);
        if now.device_allocs < was.device_allocs || now.allocs < was.allocs {
            // A new pool: start counting afresh.
            self.last_counters = vrampool::Counters::default();
        }
        let was = self.last_counters;
        if now.device_allocs > was.device_allocs {
            self.say(format!(
                "pool created {} segment(s); {} reserved",
                now.device_allocs - was.device_allocs,
                fmt_bytes(s.total.reserved_bytes.current)
            ));
        }
        if now.device_frees > was.device_frees {
            self.say(format!(
                "pool released {} segment(s), {} back to the device",
                now.device_frees - was.device_frees,
                fmt_bytes(now.bytes_released.saturating_sub(was.bytes_released))
            ));
        }
        if now.alloc_retries > was.alloc_retries {
            self.say(format!(
                "{} allocation(s) released cache and retried",
                now.alloc_retries - was.alloc_retries
            ));
        }
        if now.ooms > was.ooms {
            self.say(format!(
                "{} out-of-memory error(s) reported",
                now.ooms - was.ooms
            ));
        }
        self.last_counters = now;
        if self.points.len() == MAX_POINTS {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            t,
            allocated: s.total.allocated_bytes.current,
            reserved: s.total.reserved_bytes.current,
            cached: s.total.cached_bytes.current,
            budget: s.limit,
        });
        s
    }

    /// Allocates on the simulated device (the GPU path is async: see [`alloc_gpu`]).
    pub fn alloc_sim(&mut self, size: u64, usage: Usage) -> Result<Handle, Error> {
        let Device::Sim(e) = &mut self.device else {
            return Err(Error::Config("not the simulated device".into()));
        };
        // The same request the GPU pool would make (default `widen_usage`).
        let req = usage
            .desc(size)
            .request(PoolOptions::default().widen_usage, false)?;
        Ok(Handle::Sim(e.allocate(req)?.id))
    }

    /// Frees a handle.
    pub fn release(&mut self, h: Handle) {
        match (h, &mut self.device) {
            (Handle::Gpu(b), device) => {
                drop(b);
                // The page records no command with the blocks it frees here
                // (training submits its own through Pool::submit): they may
                // be reused at once.
                if let Device::Gpu(pool) = device {
                    pool.submitted();
                }
            }
            (Handle::Sim(id), Device::Sim(e)) => {
                let _ = e.free(id);
            }
            (Handle::Sim(_), Device::Gpu(_)) => {}
        }
    }

    /// Keeps a block allocated with the buttons.
    pub fn hold(&mut self, h: Handle, size: u64) {
        self.held.push((h, size));
    }

    /// Frees about half of the held blocks, chosen at random.
    pub fn free_random(&mut self) -> usize {
        let held = std::mem::take(&mut self.held);
        let mut freed = 0;
        for (h, size) in held {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if self.rng & 1 == 0 {
                self.release(h);
                freed += 1;
            } else {
                self.held.push((h, size));
            }
        }
        freed
    }

    /// Frees every held block.
    pub fn free_all(&mut self) -> usize {
        let held = std::mem::take(&mut self.held);
        let n = held.len();
        for (h, _) in held {
            self.release(h);
        }
        n
    }

    /// `empty_cache()`: returns the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        match &mut self.device {
            Device::Gpu(p) => p.empty_cache(),
            Device::Sim(e) => e.empty_cache(),
        }
    }

    /// Sets the hard limit and the cache limit.
    pub fn set_limits(
        &mut self,
        budget: Option<u64>,
        cache_limit: Option<u64>,
    ) -> Result<(), Error> {
        let limit = budget.map(Limit::Bytes);
        match &mut self.device {
            Device::Gpu(p) => {
                p.set_limit(limit)?;
                p.set_cache_limit(cache_limit);
            }
            Device::Sim(e) => {
                e.set_limit(limit)?;
                e.set_cache_limit(cache_limit);
            }
        }
        Ok(())
    }

    /// Drops every block and the pool, and starts a new one with `growth`.
    pub fn reset(
        &mut self,
        growth: Growth,
        budget: Option<u64>,
        cache_limit: Option<u64>,
    ) -> Result<(), Error> {
        self.free_all();
        self.replay = None;
        let config = Config {
            growth,
            limit: budget.map(Limit::Bytes),
            cache_limit,
            default_usage: READ_WRITE_USAGE.bits(),
            ..Config::default()
        };
        match &mut self.device {
            Device::Gpu(p) => {
                let (device, queue) = (p.device().clone(), p.queue().clone());
                // The old pool's segments go back to the driver as it is replaced.
                let pool = Pool::new(
                    device,
                    queue,
                    PoolOptions {
                        config,
                        ..PoolOptions::default()
                    },
                )?;
                self.device = Device::Gpu(Rc::new(pool));
            }
            Device::Sim(_) => {
                self.device = Device::Sim(Box::new(simulated_pool(SIM_CAPACITY, config)?));
            }
        }
        Ok(())
    }

    /// Starts replaying `trace` on a fresh pool (so the figures can be checked
    /// against the harness's replay of the same trace).
    pub fn start_replay(&mut self, trace: Trace, speed: f64) -> Result<(), Error> {
        if trace.largest > self.max_buffer {
            return Err(Error::TooLarge {
                requested: trace.largest,
                max_buffer_size: self.max_buffer,
            });
        }
        let limit = self.stats().limit;
        self.reset(Growth::OnDemand, limit, None)?;
        match &mut self.device {
            Device::Gpu(p) => p.reset_peak_stats(),
            Device::Sim(e) => e.reset_peak_stats(),
        }
        self.say(format!(
            "replay {}: {} events, peak live {}",
            trace.name,
            trace.events.len(),
            fmt_bytes(trace.peak_live)
        ));
        self.replay = Some(Replay {
            trace,
            next: 0,
            live: HashMap::new(),
            speed,
            started: None,
            ooms: 0,
            start: self.stats().counters,
            wall: web_time::Instant::now(),
        });
        self.replay_result = None;
        Ok(())
    }

    /// How many events are due at time `t` to keep to the replay's speed (at
    /// most `cap` at once, so a slow device falls behind instead of freezing).
    pub fn replay_due(&mut self, t: f64, cap: usize) -> usize {
        let Some(r) = &mut self.replay else { return 0 };
        let start = *r.started.get_or_insert(t);
        let target = ((t - start) * r.speed).ceil() as usize + 1;
        target.saturating_sub(r.next).clamp(1, cap)
    }

    /// Ends the replay: frees what is still live and records the result.
    pub fn finish_replay(&mut self) {
        let Some(mut r) = self.replay.take() else {
            return;
        };
        for (_, h) in r.live.drain() {
            self.release(h);
        }
        let s = self.stats();
        let res = ReplayResult {
            ops: r.next as u64,
            peak_live: r.trace.peak_live,
            peak_reserved: s.total.reserved_bytes.peak,
            device_allocs: s.counters.device_allocs - r.start.device_allocs,
            cache_hits: s.counters.cache_hits - r.start.cache_hits,
            ooms: r.ooms,
            millis: r.wall.elapsed().as_millis() as u64,
        };
        self.say(format!(
            "replay {} done in {:.2} s: peak reserved {} ({:.3} × peak live), {} device allocations, {} OOMs",
            r.trace.name,
            res.millis as f64 / 1000.0,
            fmt_bytes(res.peak_reserved),
            res.peak_reserved as f64 / res.peak_live as f64,
            res.device_allocs,
            res.ooms
        ));
        self.replay_result = Some(res);
    }

    /// On the simulated device: replays up to `n` events now.
    pub fn replay_sim(&mut self, n: usize) {
        for _ in 0..n {
            let Some(r) = &self.replay else { return };
            let Some(&e) = r.trace.events.get(r.next) else {
                self.finish_replay();
                return;
            };
            match e.action {
                Action::Allocate => match self.alloc_sim(e.size, Usage::Tensor) {
                    Ok(h) => {
                        self.replay
                            .as_mut()
                            .expect("replaying")
                            .live
                            .insert(e.pointer, h);
                    }
                    Err(err) => self.replay_oom(&err),
                },
                Action::Free => {
                    if let Some(h) = self
                        .replay
                        .as_mut()
                        .expect("replaying")
                        .live
                        .remove(&e.pointer)
                    {
                        self.release(h);
                    }
                }
            }
            self.replay.as_mut().expect("replaying").next += 1;
        }
    }

    /// Counts and logs a refused replay allocation.
    pub fn replay_oom(&mut self, err: &Error) {
        if let Some(r) = &mut self.replay {
            r.ooms += 1;
            if r.ooms <= 3 {
                let line = format!("OOM during replay: {err}");
                self.say(line);
            }
        }
    }
}

/// Allocates on the GPU pool, awaiting the device's error scopes (the browser's
/// way): the pool releases its cache and retries before it reports an OOM.
pub async fn alloc_gpu(pool: &Pool, size: u64, usage: Usage) -> Result<PoolBuffer, Error> {
    pool.alloc_async(usage.desc(size)).await
}

/// How a segment's blocks are coloured in the segment map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Handed out.
    Live,
    /// Free, in a segment that still holds live blocks.
    Cached,
    /// In a segment with no live block: `empty_cache` would release it.
    Free,
    /// Dropped while commands recorded before the drop may not have been
    /// submitted: not reused until the pool learns of the submit.
    Pending,
}

/// One bar of the segment map.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentView {
    /// Segment id.
    pub id: u32,
    /// Pool name.
    pub pool: String,
    /// Bytes.
    pub size: u64,
    /// (offset, size, kind, label) of each block.
    pub blocks: Vec<(u64, u64, BlockKind, Option<String>)>,
}

/// The segment map of a snapshot (largest segments first, at most `max`).
pub fn segment_views(s: &Snapshot, max: usize) -> (Vec<SegmentView>, usize) {
    let mut segs: Vec<&vrampool::SnapshotSegment> = s.segments.iter().collect();
    segs.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    let hidden = segs.len().saturating_sub(max);
    let views = segs
        .into_iter()
        .take(max)
        .map(|seg| {
            let any_live = seg.blocks.iter().any(|b| b.state == SnapshotState::Live);
            SegmentView {
                id: seg.id,
                pool: seg.pool.clone(),
                size: seg.size,
                blocks: seg
                    .blocks
                    .iter()
                    .map(|b| {
                        let kind = match (b.state, any_live) {
                            (SnapshotState::Live, _) => BlockKind::Live,
                            (SnapshotState::Pending, _) => BlockKind::Pending,
                            (SnapshotState::Free, true) => BlockKind::Cached,
                            (SnapshotState::Free, false) => BlockKind::Free,
                        };
                        (b.offset, b.size, kind, b.label.clone())
                    })
                    .collect(),
            }
        })
        .collect();
    (views, hidden)
}

/// The built-in sample traces: the shared PyTorch traces with every size ÷ 64,
/// written by `cargo xtask samples` into `web/samples/` and served beside the
/// page as `samples/<name>.csv.gz` (kept out of the wasm, where their
/// already-compressed bytes would cost 88 KB of the download).
pub const SAMPLES: [&str; 3] = ["resnet_train", "gpt_train", "batch_sweep"];

/// Allocates `count` blocks of `size` bytes and frees every other one on the
/// simulated engine: the "allocate N × size" then "free random" buttons.
pub fn allocate_and_free_half(
    engine: &mut Engine<SimulatedDevice>,
    count: usize,
    size: u64,
) -> Result<Stats, Error> {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(engine.allocate(Request::new(size, 0))?.id);
    }
    for id in ids.into_iter().step_by(2) {
        engine.free(id)?;
    }
    Ok(engine.stats())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_move_the_figures() {
        let mut e = simulated_pool(1 << 30, Config::default()).unwrap();
        let s = allocate_and_free_half(&mut e, 10, 100_000).unwrap();
        assert_eq!(s.total.allocations.current, 5);
        assert_eq!(s.counters.allocs, 10);
        assert!(s.total.cached_bytes.current > 0);
        assert!(
            allocate_and_free_half(&mut e, 1, 300 << 20).is_err(),
            "above WebGPU's max_buffer_size"
        );
    }

    #[test]
    fn sample_replay_on_the_simulated_page_matches_the_core_replay() {
        let name = SAMPLES[0];
        let path = format!("{}/samples/{name}.csv.gz", env!("CARGO_MANIFEST_DIR"));
        let trace = Trace::open(path).unwrap();
        let mut m = Model::simulated("test");
        m.start_replay(trace.clone(), 10_000.0).unwrap();
        while m.replay.is_some() {
            m.replay_sim(1000);
        }
        let got = m.replay_result.unwrap();
        let mut e = simulated_pool(SIM_CAPACITY, Config::default()).unwrap();
        let want = vrampool::replay(&mut e, &trace, 0);
        assert_eq!(got.ops as usize, trace.events.len());
        assert_eq!(got.peak_reserved, want.peak_reserved);
        assert_eq!(got.device_allocs, want.device_allocs);
        assert_eq!(got.cache_hits, want.cache_hits);
        assert_eq!(got.ooms, 0);
    }

    #[test]
    fn the_log_tells_what_the_device_did() {
        let mut m = Model::simulated("test");
        m.sample(0.0);
        let h = m.alloc_sim(1 << 20, Usage::Storage).unwrap();
        m.sample(0.1);
        assert!(m.log.back().unwrap().starts_with("pool created 1 segment"));
        m.release(h);
        let released = m.empty_cache();
        m.sample(0.2);
        assert_eq!(
            m.log.back().unwrap(),
            &format!(
                "pool released 1 segment(s), {} back to the device",
                fmt_bytes(released)
            )
        );
        m.set_limits(Some(1 << 20), None).unwrap();
        assert!(m.alloc_sim(2 << 20, Usage::Storage).is_err());
        m.sample(0.3);
        assert_eq!(m.log.back().unwrap(), "1 out-of-memory error(s) reported");
        assert_eq!(m.points.len(), 4);
    }

    /// A pool on the machine's Vulkan adapter (lavapipe in CI), as the page
    /// holds one on the browser's WebGPU device.
    #[cfg(not(target_arch = "wasm32"))]
    fn native_gpu_model() -> (Model, wgpu::Device) {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
            .expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers)");
        let (device, queue) =
            pollster::block_on(adapter.request_device(&Default::default())).unwrap();
        let pool = vrampool::Pool::new(device.clone(), queue, Default::default()).unwrap();
        let max = device.limits().max_buffer_size;
        (
            Model::new(Device::Gpu(Rc::new(pool)), "Vulkan".into(), max),
            device,
        )
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_lost_device_is_logged_once_and_shown() {
        let (mut m, device) = native_gpu_model();
        let pool = m.gpu_pool().unwrap();
        m.hold(
            Handle::Gpu(pool.alloc(vrampool::AllocDesc::storage(1 << 20)).unwrap()),
            1 << 20,
        );
        m.sample(0.0);
        assert!(m.lost.is_none());
        device.destroy();
        let _ = device.poll(wgpu::PollType::Poll);
        m.sample(0.1);
        m.sample(0.2);
        assert!(m.lost.as_deref().unwrap().contains("destroyed"));
        let said: Vec<_> = m
            .log
            .iter()
            .filter(|l| l.starts_with("device lost"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", m.log);
        // Frees and figures keep working.
        assert_eq!(m.free_all(), 1);
        assert_eq!(m.stats().total.allocated_bytes.current, 0);
    }

    #[test]
    fn segment_map_marks_live_cached_and_free() {
        let mut m = Model::simulated("test");
        // Tensors share segments (read_write); storage blocks with no declaration do not.
        let a = m.alloc_sim(1 << 20, Usage::Tensor).unwrap();
        let b = m.alloc_sim(1 << 20, Usage::Tensor).unwrap();
        m.release(a);
        let (views, hidden) = segment_views(&m.snapshot(), 10);
        assert_eq!(hidden, 0);
        let kinds: Vec<BlockKind> = views[0].blocks.iter().map(|b| b.2).collect();
        assert!(kinds.contains(&BlockKind::Live) && kinds.contains(&BlockKind::Cached));
        m.release(b);
        let (views, _) = segment_views(&m.snapshot(), 10);
        assert!(views[0].blocks.iter().all(|b| b.2 == BlockKind::Free));
        assert!(m.empty_cache() > 0);
        assert!(m.snapshot().segments.is_empty());
    }
}
