//! The page's state, natively testable: the [`Backing`] that hands out
//! blocks (the browser's WebGPU pool or the engine on a simulated device),
//! the blocks held with the buttons, a replay in progress, the timeline, the
//! event log and the page's own recording; beside it, the side-by-side
//! replay of both policies ([`Compare`]) and the views the panels draw
//! (axes, the stacked view at the peak, the segment map). The view (`app/`)
//! reads it; nothing here knows of Leptos.

pub mod axes;
mod backing;
mod budget;
mod compare;
mod lockstep;
mod pace;
mod peak;
mod recording;
mod replay;
mod segments;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use vrampool::{
    Config, Counters, Error, Growth, Limit, READ_WRITE_USAGE, Snapshot, Stats, fmt_bytes,
};

pub use backing::{
    AllocFuture, Backing, Block, SIM_CAPACITY, Simulated, Usage, WEBGPU_MAX_BUFFER,
    allocate_and_free_half, simulated_pool,
};
pub use budget::{Budget, BudgetJob, JobProgress, Whose};
pub use compare::{Compare, MAX_SERIES, Moment, Seek, Series, SeriesPoint};
pub use lockstep::{LaneFigures, Lockstep, POLICIES, Policy, SimDevice, TENSOR_USAGE};
pub use pace::Pace;
pub use peak::{BANDS, Band, BandKind, COLUMNS, PeakStack, SIZE_CLASSES, size_class};
pub use recording::{MAX_RECORDED, Recording};
pub use replay::{Replay, ReplayResult, SAMPLES, TwinResult, advance_replay};
pub use segments::{
    BlockKind, BlockView, LABEL, MapLayout, ROW, SegmentView, segment_views, segment_views_aged,
};

/// Timeline points kept (60 s at 20 Hz).
pub const MAX_POINTS: usize = 1200;
/// Log lines kept.
pub const MAX_LOG: usize = 60;
/// The most blocks one press of "allocate" asks for.
pub const MAX_COUNT: usize = 4096;

/// The form's count of blocks: a whole number from 1 to [`MAX_COUNT`], or
/// a message saying what it must be (never a silent 0 or a clamp).
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) => Ok(n),
        _ => Err(format!(
            "count `{}`: give a whole number of blocks from 1 to {MAX_COUNT}",
            s.trim()
        )),
    }
}

/// A replay speed in operations a second: a number of at least 1, or a
/// message saying what it must be.
pub fn parse_speed(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v),
        _ => Err(format!(
            "speed `{}`: give operations a second, 1 or more (e.g. 10000)",
            s.trim()
        )),
    }
}

/// The most MiB a budget, cache limit or preallocation may be: 2^53 bytes
/// (8 PiB, beyond any device; every byte count up to it exact in an `f64`).
const MAX_MIB: f64 = (1u64 << 33) as f64;

/// A number of MiB typed in a settings field: `None` when empty, or a
/// message saying what it must be.
pub fn parse_mib(s: &str) -> Result<Option<u64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of MiB"))?;
    if !(0.0..=MAX_MIB).contains(&v) {
        return Err(format!("`{s}` must be from 0 to {MAX_MIB} MiB"));
    }
    Ok(Some((v * (1 << 20) as f64) as u64))
}

/// The budget typed in the settings: `None` (no limit) when empty, else a
/// number of MiB above 0, or a message saying what it must be. A budget of
/// 0 would refuse every allocation, and would read as "none" beside a cache
/// limit of 0, which does mean "cache nothing": it is refused, not guessed.
pub fn parse_budget(s: &str) -> Result<Option<u64>, String> {
    match parse_mib(s) {
        Ok(Some(0)) => Err(format!(
            "budget `{}`: a budget of 0 would refuse every allocation; leave it empty for no limit",
            s.trim()
        )),
        Ok(b) => Ok(b),
        Err(e) => Err(format!("budget {e}")),
    }
}

/// The form's bytes a block: a whole number, 1 or more, or a message saying
/// what it must be (never a silent default).
pub fn parse_size(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "size `{}`: give a whole number of bytes a block, 1 or more",
            s.trim()
        )),
    }
}

/// The most rows an uploaded trace may hold: 17 times the largest of the
/// corpus (234 k), at 32 bytes an event well within a tab's memory, where a
/// few MB of gzip can unpack to GBs of rows.
pub const MAX_UPLOAD_ROWS: usize = 4_000_000;

/// The largest file the page reads: a file is read whole into the tab's
/// memory before it is parsed, and a copy past what wasm32 can hold would
/// kill the page. [`MAX_UPLOAD_ROWS`] plain rows of an RMM log are about
/// 240 MB.
pub const MAX_UPLOAD_BYTES: u64 = 512 << 20;

/// Why a picked file of `size` bytes is refused before it is read, if it
/// is; `instead` says what to do with it.
pub fn refuse_upload(name: &str, size: f64, instead: &str) -> Option<String> {
    // A size that is not a number is refused too.
    let fits = size.is_finite() && size <= MAX_UPLOAD_BYTES as f64;
    (!fits).then(|| {
        format!(
            "{name} is {}, more than the {} the page reads into a browser tab's memory; {instead}",
            fmt_bytes(size as u64),
            fmt_bytes(MAX_UPLOAD_BYTES)
        )
    })
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

/// The budget's runs over the timeline: each `(from, to, bytes)` a stretch
/// of samples under one budget, from its first sample's moment to the
/// moment of the sample after its last (the change came between the two),
/// or to its last where it reaches the end; stretches without a budget
/// leave gaps. Each point carries the budget of its moment, so a budget
/// changed a minute ago is not drawn across the whole minute.
pub fn budget_runs<'a>(points: impl IntoIterator<Item = &'a Point>) -> Vec<(f64, f64, u64)> {
    let mut runs: Vec<(f64, f64, u64)> = Vec::new();
    let mut open = false;
    for p in points {
        if let Some(run) = runs.last_mut().filter(|_| open) {
            // The run so far reaches this sample, whatever its budget.
            run.1 = p.t;
            if p.budget == Some(run.2) {
                continue;
            }
        }
        open = p.budget.is_some();
        if let Some(b) = p.budget {
            runs.push((p.t, p.t, b));
        }
    }
    runs
}

/// The page's state.
pub struct Model {
    /// The WebGPU pool or the simulated engine.
    backing: Rc<dyn Backing>,
    /// "WebGPU: <adapter>" or the simulated device's size.
    pub backend: String,
    /// The device's largest buffer.
    pub max_buffer: u64,
    /// Blocks allocated with the buttons (in order).
    held: Vec<Block>,
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
    /// What the current pool's last `empty_cache()` released; `None` until
    /// this pool has had one (a new pool, for new settings or a replay,
    /// starts without: the figure was the old pool's).
    pub released: Option<u64>,
    /// Every allocate and free of the page's pools, as RMM CSV.
    recording: Recording,
    /// Counters at the last sample, to log what the device did in between.
    last_counters: Counters,
    /// The growth and the cache limit the pool was given (kept by a
    /// replay's new pool and by a new budget).
    growth: Growth,
    cache_limit: Option<u64>,
    /// Seed for "free random".
    rng: u64,
}

/// Where a task finds the model between awaits: the page keeps it in Leptos
/// context (`app/page.rs`), the tests in a `RefCell`. An async loop over the
/// model (allocating N blocks, a replay) takes the model for each step and
/// lets go of it while it awaits the device.
pub trait ModelCell {
    /// Runs `f` on the model; `None` when there is none (the device is not
    /// open yet).
    fn with_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R>;
}

impl ModelCell for RefCell<Model> {
    fn with_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R> {
        Some(f(&mut self.borrow_mut()))
    }
}

impl Model {
    /// A model over `backing`, recording what it does.
    pub fn new(backing: Rc<dyn Backing>, backend: String, max_buffer: u64) -> Model {
        backing.start_recording();
        Model {
            backing,
            backend,
            max_buffer,
            held: Vec::new(),
            log: VecDeque::new(),
            points: VecDeque::new(),
            replay: None,
            replay_result: None,
            note: String::new(),
            lost: None,
            released: None,
            recording: Recording::new(),
            last_counters: Counters::default(),
            growth: Growth::OnDemand,
            cache_limit: None,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// A model on the simulated device, saying why.
    pub fn simulated(why: &str) -> Model {
        let sim = Simulated::new(SIM_CAPACITY, Config::default()).expect("default config");
        let mut m = Model::new(
            Rc::new(sim),
            format!("simulated device ({})", fmt_bytes(SIM_CAPACITY)),
            WEBGPU_MAX_BUFFER,
        );
        m.say(format!("using the simulated device: {why}"));
        m.note = why.to_string();
        m
    }

    /// What hands out the blocks (to allocate without holding the model).
    pub fn backing(&self) -> Rc<dyn Backing> {
        self.backing.clone()
    }

    /// Whether `backing` is still the model's (no new pool replaced it).
    pub fn uses(&self, backing: &Rc<dyn Backing>) -> bool {
        Rc::ptr_eq(&self.backing, backing)
    }

    /// Whether the blocks come from a WebGPU device (not the simulated one).
    pub fn on_webgpu(&self) -> bool {
        self.backing.webgpu().is_some()
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
        self.backing.stats()
    }

    /// Segments and blocks.
    pub fn snapshot(&self) -> Snapshot {
        self.backing.snapshot()
    }

    /// Records a timeline point, and logs the segments the pool created or
    /// released since the last one, and any OOM. Returns the stats it read.
    pub fn sample(&mut self, t: f64) -> Stats {
        if self.lost.is_none()
            && let Some(why) = self.backing.device_lost()
        {
            self.say(format!(
                "device lost: {why}. Every allocation now fails with DeviceLost; frees and figures still work. Press \"new device\" to start over"
            ));
            self.lost = Some(why);
        }
        let s = self.stats();
        let (now, was) = (s.counters, self.last_counters);
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

    /// Keeps a block allocated with the buttons.
    pub fn hold(&mut self, block: Block) {
        self.held.push(block);
    }

    /// Frees about half of the held blocks, chosen at random.
    pub fn free_random(&mut self) -> usize {
        let held = std::mem::take(&mut self.held);
        let mut freed = 0;
        for block in held {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if self.rng & 1 == 0 {
                self.backing.free(block);
                freed += 1;
            } else {
                self.held.push(block);
            }
        }
        freed
    }

    /// Frees every held block.
    pub fn free_all(&mut self) -> usize {
        let held = std::mem::take(&mut self.held);
        let n = held.len();
        for block in held {
            self.backing.free(block);
        }
        n
    }

    /// `empty_cache()`: returns the bytes released.
    pub fn empty_cache(&mut self) -> u64 {
        let released = self.backing.empty_cache();
        self.released = Some(released);
        released
    }

    /// The growth the pool was given.
    pub fn growth(&self) -> Growth {
        self.growth
    }

    /// Sets the hard limit and the cache limit.
    pub fn set_limits(
        &mut self,
        budget: Option<u64>,
        cache_limit: Option<u64>,
    ) -> Result<(), Error> {
        self.backing
            .set_limits(budget.map(Limit::Bytes), cache_limit)?;
        self.cache_limit = cache_limit;
        Ok(())
    }

    /// Sets the hard limit, keeping the cache limit.
    pub fn set_budget(&mut self, budget: Option<u64>) -> Result<(), Error> {
        self.set_limits(budget, self.cache_limit)
    }

    /// Drops every block and the pool, and starts a new one with `growth`;
    /// the timeline starts again with it, as its figures do (its peak is the
    /// new pool's).
    pub fn reset(
        &mut self,
        growth: Growth,
        budget: Option<u64>,
        cache_limit: Option<u64>,
    ) -> Result<(), Error> {
        // The new pool first: settings it refuses (a preallocation above the
        // budget or a buffer) leave the blocks held and the replay running.
        let backing = self
            .backing
            .renew(Self::pool_config(growth, budget, cache_limit))?;
        self.install(backing, growth, cache_limit);
        Ok(())
    }

    /// The configuration of the page's pools with these settings.
    pub fn pool_config(growth: Growth, budget: Option<u64>, cache_limit: Option<u64>) -> Config {
        Config {
            growth,
            limit: budget.map(Limit::Bytes),
            cache_limit,
            default_usage: READ_WRITE_USAGE.bits(),
            ..Config::default()
        }
    }

    /// [`Model::reset`]'s second half, for a new pool made apart
    /// ([`Backing::renew_async`], which awaits the device's answer to a
    /// preallocation): drops every block and the old pool.
    pub fn install(&mut self, backing: Rc<dyn Backing>, growth: Growth, cache_limit: Option<u64>) {
        self.free_all();
        // A replay under way ends here, its figures so far logged.
        self.finish_replay();
        self.end_recording();
        self.backing = backing;
        (self.growth, self.cache_limit) = (growth, cache_limit);
        // The new pool's counters start at zero, and it has released nothing.
        self.last_counters = Counters::default();
        self.released = None;
        self.points.clear();
        self.recording.next_pool();
        if !self.recording.is_full() {
            self.backing.start_recording();
        }
    }

    /// Moves what the pool recorded since the last call into the page's
    /// recording (and goes on recording, unless it is full).
    pub fn collect_recording(&mut self) {
        let Some(log) = self.backing.drain_recording() else {
            return;
        };
        if !self.recording.add(&log) {
            let _ = self.backing.take_recording();
            self.say_recording_full();
        }
    }

    /// Ends the pool's recording (it is being replaced): what it logged
    /// since the last collection, the frees still waiting for a submit last
    /// (`Pool::take_recording`), moves into the page's recording.
    fn end_recording(&mut self) {
        if let Some(log) = self.backing.take_recording()
            && !self.recording.add(&log)
        {
            self.say_recording_full();
        }
    }

    fn say_recording_full(&mut self) {
        self.say(format!(
            "recording stopped at {} events (the most the page keeps)",
            self.recording.events()
        ));
    }

    /// The page's recording so far, as RMM CSV, and its events.
    pub fn recording_csv(&mut self) -> (&str, u64) {
        self.collect_recording();
        (self.recording.csv(), self.recording.events())
    }

    /// Events recorded so far (as of the last collection).
    pub fn recorded_events(&self) -> u64 {
        self.recording.events()
    }

    /// Hands the recording over to the model that replaces this one (a new
    /// device); see [`Model::continue_recording`].
    pub fn hand_over_recording(&mut self) -> Recording {
        self.end_recording();
        std::mem::take(&mut self.recording)
    }

    /// Goes on with `earlier`, the recording of the model this one replaces,
    /// its own pool's events after it.
    pub fn continue_recording(&mut self, mut earlier: Recording) {
        earlier.next_pool();
        if let Some(log) = self.backing.drain_recording()
            && !earlier.add(&log)
        {
            let _ = self.backing.take_recording();
        }
        self.recording = earlier;
    }
}

/// "allocate N × size": allocates `n` blocks of `size` bytes one at a time
/// (each awaited, as WebGPU's error scopes must be) and holds them, stopping
/// at the first refusal. Returns how many it holds, and the refusal.
pub async fn allocate_held(
    model: &impl ModelCell,
    n: usize,
    size: u64,
    usage: Usage,
) -> (usize, Option<Error>) {
    let Some(backing) = model.with_model(|m| m.backing()) else {
        return (0, None);
    };
    let mut held = 0;
    for _ in 0..n {
        match backing.allocate(size, usage).await {
            Ok(block) => {
                // A new pool came while the device answered (the settings,
                // a replay): the old pool's block is not the new one's to hold.
                let kept = model.with_model(|m| {
                    let ours = m.uses(&backing);
                    if ours {
                        m.hold(block);
                    } else {
                        backing.free(block);
                    }
                    ours
                });
                if kept != Some(true) {
                    break;
                }
                held += 1;
            }
            Err(e) => return (held, Some(e)),
        }
    }
    (held, None)
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use vrampool::Trace;

    use super::*;

    /// The outcome of a future that is ready at once, as every future on the
    /// simulated backing is.
    fn now<T>(f: impl Future<Output = T>) -> T {
        match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the simulated backing answers at once"),
        }
    }

    /// The first of the page's bundled samples.
    fn first_sample() -> Trace {
        let path = format!(
            "{}/samples/{}.csv.gz",
            env!("CARGO_MANIFEST_DIR"),
            SAMPLES[0]
        );
        Trace::open(path).unwrap()
    }

    fn alloc(m: &Model, size: u64, usage: Usage) -> Result<Block, Error> {
        now(m.backing().allocate(size, usage))
    }

    #[test]
    fn a_file_past_what_a_tab_can_read_is_refused_before_it_is_read() {
        assert_eq!(refuse_upload("t.csv.gz", 0.0, "x"), None);
        assert_eq!(
            refuse_upload("t.csv.gz", MAX_UPLOAD_BYTES as f64, "x"),
            None
        );
        let e = refuse_upload("big.csv", 3e9, "use the harness").unwrap();
        assert!(
            e.starts_with("big.csv is 2.79 GiB, more than the 512.00 MiB"),
            "{e}"
        );
        assert!(e.ends_with("; use the harness"), "{e}");
        assert!(refuse_upload("odd", f64::NAN, "x").is_some());
    }

    #[test]
    fn counts_and_speeds_are_read_or_refused_with_what_they_must_be() {
        assert_eq!(parse_count(" 16 "), Ok(16));
        assert_eq!(parse_count("4096"), Ok(4096));
        for bad in ["abc", "-3", "0", "9999", "", "1.5"] {
            let e = parse_count(bad).unwrap_err();
            assert!(e.contains("from 1 to 4096"), "{bad}: {e}");
        }
        assert_eq!(parse_speed("10000"), Ok(10_000.0));
        assert_eq!(parse_speed("2.5"), Ok(2.5));
        for bad in ["abc", "0", "-5", "inf", "NaN", ""] {
            let e = parse_speed(bad).unwrap_err();
            assert!(e.contains("1 or more"), "{bad}: {e}");
        }
    }

    #[test]
    fn mib_are_read_up_to_2_pow_53_bytes_or_refused() {
        assert_eq!(parse_mib(" "), Ok(None));
        assert_eq!(parse_mib("1.5"), Ok(Some(3 << 19)));
        assert_eq!(parse_mib("8589934592"), Ok(Some(1 << 53)));
        // 1e14 MiB once saturated to u64::MAX, the budget of a frozen chart.
        for bad in ["1e14", "8589934593", "-1", "inf", "NaN"] {
            let e = parse_mib(bad).unwrap_err();
            assert!(e.contains("from 0 to 8589934592 MiB"), "{bad}: {e}");
        }
        assert!(parse_mib("abc").unwrap_err().contains("not a number"));
    }

    #[test]
    fn a_budget_of_0_and_a_size_not_given_are_refused_not_guessed() {
        assert_eq!(parse_budget(""), Ok(None), "empty: no limit");
        assert_eq!(parse_budget("12"), Ok(Some(12 << 20)));
        for zero in ["0", "0.0", " 0 ", "1e-9"] {
            let e = parse_budget(zero).unwrap_err();
            assert!(e.contains("leave it empty for no limit"), "{zero}: {e}");
        }
        assert!(parse_budget("abc").unwrap_err().starts_with("budget `abc`"));
        // A cache limit of 0 is a limit: cache nothing.
        assert_eq!(parse_mib("0"), Ok(Some(0)));
        assert_eq!(parse_size(" 1048576 "), Ok(1 << 20));
        for bad in ["", "0", "-1", "1.5", "1 MiB", "abc"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("whole number of bytes"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_budget_is_drawn_where_each_sample_had_it() {
        let at = |t: f64, budget: Option<u64>| Point {
            t,
            allocated: 0,
            reserved: 0,
            cached: 0,
            budget,
        };
        let points = [
            at(0.0, None),
            at(1.0, Some(8)),
            at(2.0, Some(8)),
            at(3.0, Some(4)),
            at(4.0, None),
            at(5.0, Some(4)),
        ];
        assert_eq!(
            budget_runs(&points),
            vec![(1.0, 3.0, 8), (3.0, 4.0, 4), (5.0, 5.0, 4)]
        );
        assert!(budget_runs(&points[..1]).is_empty());
    }

    #[test]
    fn a_new_pool_starts_a_new_timeline() {
        let mut m = Model::simulated("test");
        let b = alloc(&m, 1 << 20, Usage::Storage).unwrap();
        m.hold(b);
        m.sample(0.0);
        m.sample(0.1);
        m.reset(Growth::OnDemand, None, None).unwrap();
        assert!(m.points.is_empty(), "the old pool's samples are gone");
        m.sample(0.2);
        assert_eq!(m.points.len(), 1);
        assert_eq!(m.points[0].reserved, 0, "the new pool holds nothing");
    }

    #[test]
    fn settings_the_pool_refuses_keep_the_blocks_and_the_replay() {
        let trace = first_sample();
        let model = RefCell::new(Model::simulated("test"));
        // A replay running on its pool, and four blocks held beside it.
        model.borrow_mut().start_replay(trace, 10.0).unwrap();
        let (held, _) = now(allocate_held(&model, 4, 1 << 20, Usage::Storage));
        assert_eq!(held, 4);
        let mut m = model.into_inner();
        let allocated = m.stats().total.allocated_bytes.current;
        for (growth, budget) in [
            (Growth::Preallocate(64 << 20), Some(10 << 20)), // above the budget
            (Growth::Preallocate(100_000 << 20), None),      // above a buffer
        ] {
            assert!(m.reset(growth, budget, None).is_err());
            assert!(m.replay.is_some(), "the replay goes on");
            assert_eq!(m.held.len(), 4);
            assert_eq!(m.stats().total.allocated_bytes.current, allocated);
        }
        // Settings it takes start the new pool, the blocks freed first, and
        // end the replay with a word: its figures so far, logged.
        m.reset(Growth::OnDemand, None, None).unwrap();
        assert!(m.replay.is_none() && m.held.is_empty());
        assert_eq!(m.stats().total.allocated_bytes.current, 0);
        assert!(!m.replay_result.unwrap().done);
        let said = m.log.back().unwrap();
        assert!(said.contains(" stopped in "), "{said}");
    }

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
        let trace = first_sample();
        let model = RefCell::new(Model::simulated("test"));
        let id = model
            .borrow_mut()
            .start_replay(trace.clone(), 10_000.0)
            .unwrap();
        while now(advance_replay(&model, id, 1000)) {}
        let m = model.into_inner();
        assert!(m.replay.is_none());
        let got = m.replay_result.unwrap();
        let mut e = simulated_pool(SIM_CAPACITY, Config::default()).unwrap();
        let want = vrampool::replay(&mut e, &trace, 0);
        assert_eq!(got.ops as usize, trace.events.len());
        assert!(got.done && got.peak_live == trace.peak_live);
        assert_eq!(got.peak_reserved, want.peak_reserved);
        assert_eq!(got.device_allocs, want.device_allocs);
        assert_eq!(got.cache_hits, want.cache_hits);
        assert_eq!(got.ooms, 0);
        // The finished replay also says what PyTorch's scheme makes of it.
        let mut e = SimDevice::PAGE.engine(Config::pytorch()).unwrap();
        let pytorch = vrampool::replay(&mut e, &trace, TENSOR_USAGE);
        let twin = got.twin.unwrap();
        assert_eq!(twin.peak_reserved, pytorch.peak_reserved);
        assert_eq!(twin.device_allocs, pytorch.device_allocs);
        assert_eq!(twin.cache_hits, pytorch.cache_hits);
        assert!(
            m.log
                .back()
                .unwrap()
                .contains("PyTorch's scheme on the same trace")
        );
    }

    #[test]
    fn the_recording_reads_back_with_every_event_of_every_pool() {
        let model = RefCell::new(Model::simulated("test"));
        let (held, _) = now(allocate_held(&model, 4, 1 << 20, Usage::Storage));
        assert_eq!(held, 4);
        model.borrow_mut().free_random();
        // A replay starts a new pool; the blocks still held are freed first.
        let trace = first_sample();
        let id = model.borrow_mut().start_replay(trace.clone(), 1e9).unwrap();
        while now(advance_replay(&model, id, 5000)) {}
        let mut m = model.into_inner();
        let h = alloc(&m, 4096, Usage::Uniform).unwrap();
        m.hold(h);
        let (csv, events) = m.recording_csv();
        let (csv, events) = (csv.to_string(), events);
        let back = Trace::parse("recording", csv.as_bytes()).unwrap();
        assert_eq!(back.events.len() as u64, events);
        // 4 allocations and their frees, the replay, and one more allocation.
        assert_eq!(events, 8 + trace.events.len() as u64 + 1);
        // A new device goes on with the same recording.
        let mut next = Model::simulated("test");
        next.continue_recording(m.hand_over_recording());
        let h = alloc(&next, 4096, Usage::Uniform).unwrap();
        drop(h);
        let (csv, events2) = next.recording_csv();
        assert_eq!(events2, events + 2);
        assert_eq!(
            Trace::parse("r", csv.as_bytes()).unwrap().events.len(),
            events2 as usize
        );
    }

    #[test]
    fn the_log_tells_what_the_device_did() {
        let mut m = Model::simulated("test");
        m.sample(0.0);
        let h = alloc(&m, 1 << 20, Usage::Storage).unwrap();
        m.sample(0.1);
        assert!(m.log.back().unwrap().starts_with("pool created 1 segment"));
        m.backing().free(h);
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
        assert!(alloc(&m, 2 << 20, Usage::Storage).is_err());
        m.sample(0.3);
        assert_eq!(m.log.back().unwrap(), "1 out-of-memory error(s) reported");
        assert_eq!(m.points.len(), 4);
    }

    #[test]
    fn the_log_after_a_reset_counts_the_new_pool_alone() {
        let mut m = Model::simulated("test");
        let b = alloc(&m, 1 << 20, Usage::Storage).unwrap();
        m.hold(b);
        m.sample(0.0);
        m.reset(Growth::OnDemand, None, None).unwrap();
        for usage in [Usage::Storage, Usage::Uniform] {
            let b = alloc(&m, 1 << 20, usage).unwrap();
            m.hold(b);
        }
        m.sample(0.1);
        let said = m.log.back().unwrap();
        assert!(said.starts_with("pool created 2 segment(s)"), "{said}");
    }

    /// A model that a new pool replaces before its `at`-th use, as the
    /// settings or a replay may while an allocation awaits the device.
    struct RenewedAt(RefCell<Model>, std::cell::Cell<u32>, u32);

    impl ModelCell for RenewedAt {
        fn with_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R> {
            self.1.set(self.1.get() + 1);
            if self.1.get() == self.2 {
                self.0
                    .borrow_mut()
                    .reset(Growth::OnDemand, None, None)
                    .unwrap();
            }
            Some(f(&mut self.0.borrow_mut()))
        }
    }

    #[test]
    fn a_block_of_a_replaced_pool_is_not_held_by_the_new_one() {
        // Uses: 1 takes the pool, 2 holds the first block; a new pool, then
        // the second block (the old pool's) comes back.
        let cell = RenewedAt(
            RefCell::new(Model::simulated("test")),
            Default::default(),
            3,
        );
        let (held, refused) = now(allocate_held(&cell, 4, 1 << 20, Usage::Storage));
        assert_eq!(held, 1);
        assert!(refused.is_none(), "{refused:?}");
        let m = cell.0.into_inner();
        assert!(
            m.held.is_empty(),
            "{} blocks of the old pool held",
            m.held.len()
        );
        assert_eq!(m.stats().total.allocated_bytes.current, 0);
    }

    #[test]
    fn the_pytorch_twin_replays_under_the_pages_budget() {
        let trace = first_sample();
        let twin_of = |limit: Option<u64>| {
            let config = Config {
                limit: limit.map(Limit::Bytes),
                ..Config::pytorch()
            };
            let mut e = SimDevice::PAGE.engine(config).unwrap();
            vrampool::replay(&mut e, &trace, TENSOR_USAGE)
        };
        let unlimited = twin_of(None).peak_reserved;
        assert!(unlimited > trace.peak_live);
        let limit = trace.peak_live + (unlimited - trace.peak_live) / 2;
        let model = RefCell::new(Model::simulated("test"));
        model.borrow_mut().set_limits(Some(limit), None).unwrap();
        let id = model.borrow_mut().start_replay(trace.clone(), 1e9).unwrap();
        while now(advance_replay(&model, id, 5000)) {}
        let twin = model.into_inner().replay_result.unwrap().twin.unwrap();
        let want = twin_of(Some(limit));
        assert!(
            twin.peak_reserved <= limit,
            "{} > {limit}",
            twin.peak_reserved
        );
        assert_eq!(
            (
                twin.peak_reserved,
                twin.device_allocs,
                twin.cache_hits,
                twin.ooms
            ),
            (
                want.peak_reserved,
                want.device_allocs,
                want.cache_hits,
                want.ooms
            )
        );
    }

    #[test]
    fn a_replay_keeps_the_growth_and_the_cache_limit() {
        let mut m = Model::simulated("test");
        m.reset(Growth::Preallocate(64 << 20), None, Some(0))
            .unwrap();
        m.start_replay(first_sample(), 1e9).unwrap();
        assert!(
            m.snapshot().segments.iter().any(|s| s.pinned),
            "preallocated"
        );
        // A cache limit of 0: a segment of its own goes back with its block.
        let reserved = m.stats().total.reserved_bytes.current;
        let b = alloc(&m, 100 << 20, Usage::Storage).unwrap();
        m.backing().free(b);
        assert_eq!(m.stats().total.reserved_bytes.current, reserved);
        // So does a new budget ("induce OOM").
        m.set_budget(Some(1 << 30)).unwrap();
        let b = alloc(&m, 100 << 20, Usage::Storage).unwrap();
        m.backing().free(b);
        assert_eq!(m.stats().total.reserved_bytes.current, reserved);
    }

    #[test]
    fn a_stopped_replay_says_so_over_the_live_bytes_it_reached() {
        let trace = first_sample();
        let model = RefCell::new(Model::simulated("test"));
        let id = model.borrow_mut().start_replay(trace.clone(), 1e9).unwrap();
        assert!(now(advance_replay(&model, id, 200)));
        let mut m = model.into_inner();
        m.finish_replay();
        let (mut live, mut peak) = (0u64, 0u64);
        for e in &trace.events[..200] {
            match e.action {
                vrampool::trace::Action::Allocate => live += e.size,
                vrampool::trace::Action::Free => live -= e.size,
            }
            peak = peak.max(live);
        }
        assert!(peak < trace.peak_live);
        let r = m.replay_result.unwrap();
        assert_eq!((r.ops, r.done, r.peak_live), (200, false, peak));
        let said = m.log.back().unwrap();
        assert!(
            said.starts_with(&format!("replay {} stopped", trace.name)),
            "{said}"
        );
    }

    #[test]
    fn allocate_n_holds_blocks_until_the_first_refusal() {
        let model = RefCell::new(Model::simulated("test"));
        model.borrow_mut().set_limits(Some(3 << 20), None).unwrap();
        let (held, refused) = now(allocate_held(&model, 8, 1 << 20, Usage::Storage));
        assert_eq!(held, 3);
        assert!(
            matches!(refused, Some(Error::OutOfMemory(_))),
            "{refused:?}"
        );
        let mut m = model.into_inner();
        assert_eq!(m.stats().total.allocated_bytes.current, 3 << 20);
        assert_eq!(m.free_all(), 3);
        assert_eq!(m.stats().total.allocated_bytes.current, 0);
    }

    #[test]
    fn what_empty_cache_released_is_the_current_pools() {
        let model = RefCell::new(Model::simulated("test"));
        now(allocate_held(&model, 4, 1 << 20, Usage::Storage));
        let mut m = model.into_inner();
        assert_eq!(m.released, None, "no empty_cache yet");
        m.free_all();
        let released = m.empty_cache();
        assert!(released > 0);
        assert_eq!(m.released, Some(released));
        assert_eq!(m.empty_cache(), 0);
        assert_eq!(m.released, Some(0), "the last call's, even when nothing");
        // New settings make a new pool: the old pool's figure is not shown for it.
        m.reset(Growth::OnDemand, Some(64 << 20), None).unwrap();
        assert_eq!(m.released, None);
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
        (Model::new(Rc::new(pool), "Vulkan".into(), max), device)
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_lost_device_is_logged_once_and_shown() {
        let (mut m, device) = native_gpu_model();
        let backing = m.backing();
        let pool = backing.webgpu().unwrap();
        m.hold(Block::new(
            pool.alloc(vrampool::AllocDesc::storage(1 << 20)).unwrap(),
        ));
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
        let a = alloc(&m, 1 << 20, Usage::Tensor).unwrap();
        let b = alloc(&m, 1 << 20, Usage::Tensor).unwrap();
        m.backing().free(a);
        let (views, hidden) = segment_views(&m.snapshot(), 10);
        assert_eq!(hidden, 0);
        let kinds: Vec<BlockKind> = views[0].blocks.iter().map(|b| b.kind).collect();
        assert!(kinds.contains(&BlockKind::Live) && kinds.contains(&BlockKind::Cached));
        m.backing().free(b);
        let (views, _) = segment_views(&m.snapshot(), 10);
        assert!(views[0].blocks.iter().all(|b| b.kind == BlockKind::Free));
        assert!(m.empty_cache() > 0);
        assert!(m.snapshot().segments.is_empty());
    }
}
