//! The Leptos page: controls on the left, live figures on the right. A tick
//! every 50 ms advances the replay or training in progress and redraws the
//! figures and timeline from a [`Frame`] (20 times a second); the segment map
//! and event log are redrawn every fourth tick.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::trace::Action;
use vrampool::{Growth, Pool, PoolOptions, Stats, Trace, fmt_bytes};
use vrampool_workload::{Dtype, MlpConfig, Trainer, find_batch};

use crate::model::{
    BlockKind, Device, Handle, Model, Point, ReplayResult, SAMPLES, SegmentView, Usage, alloc_gpu,
    segment_views,
};

type Shared = Rc<RefCell<Option<Model>>>;

/// Everything the view draws, rebuilt each tick.
#[derive(Clone, Default, PartialEq)]
struct Frame {
    ready: bool,
    backend: String,
    gpu: bool,
    max_buffer: u64,
    stats: Option<Stats>,
    points: Vec<Point>,
    /// Why the simulated device is in use.
    fallback_note: String,
    replay: Option<(usize, usize)>,
    result: Option<ReplayResult>,
    released: Option<u64>,
    train: TrainView,
    /// Why the WebGPU device was lost, once it was.
    lost: Option<String>,
}

#[derive(Clone, Default, PartialEq)]
struct TrainView {
    running: bool,
    step: u32,
    losses: Vec<(u32, f32)>,
    weight_bytes: u64,
    f32_weight_bytes: u64,
    found_batch: Option<u32>,
}

struct Training {
    trainer: Option<Trainer>,
    running: bool,
    view: TrainView,
}

/// Said when a button that needs the GPU is pressed while a replay or a
/// training step is awaiting it.
const BUSY: &str = "busy: a replay or training step is using the GPU; press again in a moment";

fn now_s() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now() / 1000.0)
}

async fn open_gpu() -> Result<Model, String> {
    let (info, device, queue) = crate::open_webgpu().await?;
    let max_buffer = device.limits().max_buffer_size;
    let pool = Pool::new(device, queue, PoolOptions::default())
        .map_err(|e| format!("cannot make a pool: {e}"))?;
    // Browsers often hide the adapter's name; say what kind of device it is.
    let name = if info.name.is_empty() {
        format!("{:?} adapter", info.device_type)
    } else {
        info.name
    };
    let mut m = Model::new(
        Device::Gpu(Rc::new(pool)),
        format!("WebGPU: {name}"),
        max_buffer,
    );
    m.say(format!(
        "WebGPU device on {name}, max_buffer_size {}",
        fmt_bytes(max_buffer)
    ));
    Ok(m)
}

/// A model on the browser's WebGPU device, or on the simulated one (saying why)
/// where there is none.
async fn open_model() -> Model {
    match open_gpu().await {
        Ok(m) => m,
        Err(why) => Model::simulated(&why),
    }
}

/// The segment map and the event log, redrawn less often than the figures.
#[derive(Clone, Default, PartialEq)]
struct MapView {
    segments: Vec<SegmentView>,
    hidden: usize,
    log: Vec<String>,
}

fn frame(m: &Model, stats: Stats, t: &Training) -> Frame {
    Frame {
        ready: true,
        backend: m.backend.clone(),
        gpu: matches!(m.device, Device::Gpu(_)),
        max_buffer: m.max_buffer,
        stats: Some(stats),
        points: m.points.iter().copied().collect(),
        fallback_note: m.note.clone(),
        replay: m.replay.as_ref().map(|r| (r.next, r.trace.events.len())),
        result: m.replay_result,
        released: None,
        train: t.view.clone(),
        lost: m.lost.clone(),
    }
}

/// Replays up to `n` events on the GPU pool, awaiting each new segment's checks.
async fn replay_gpu(model: Shared, n: usize) {
    let Some(pool) = model.borrow().as_ref().and_then(|m| m.gpu_pool()) else {
        return;
    };
    for _ in 0..n {
        let next = {
            let b = model.borrow();
            let Some(r) = b.as_ref().and_then(|m| m.replay.as_ref()) else {
                return;
            };
            r.trace.events.get(r.next).copied()
        };
        let Some(e) = next else {
            if let Some(m) = model.borrow_mut().as_mut() {
                m.finish_replay();
            }
            return;
        };
        match e.action {
            Action::Allocate => {
                let got = alloc_gpu(&pool, e.size, Usage::Tensor).await;
                let mut b = model.borrow_mut();
                let Some(m) = b.as_mut() else { return };
                match got {
                    Ok(buf) => {
                        if let Some(r) = m.replay.as_mut() {
                            r.live.insert(e.pointer, Handle::Gpu(buf));
                        }
                    }
                    Err(err) => m.replay_oom(&err),
                }
            }
            Action::Free => {
                let mut b = model.borrow_mut();
                if let Some(r) = b.as_mut().and_then(|m| m.replay.as_mut()) {
                    r.live.remove(&e.pointer);
                    // No command used it: reusable at once, in trace order.
                    pool.submitted();
                }
            }
        }
        if let Some(r) = model.borrow_mut().as_mut().and_then(|m| m.replay.as_mut()) {
            r.next += 1;
        }
    }
}

/// Fetches a file served beside the page.
async fn fetch_bytes(url: &str) -> Result<Vec<u8>, String> {
    use wasm_bindgen::JsCast;
    let window = web_sys::window().ok_or("no window")?;
    let resp = wasm_bindgen_futures::JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|_| format!("cannot fetch {url}"))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| "not a response")?;
    if !resp.ok() {
        return Err(format!("cannot fetch {url}: HTTP {}", resp.status()));
    }
    let buf = resp
        .array_buffer()
        .map_err(|_| format!("cannot read {url}"))?;
    let buf = wasm_bindgen_futures::JsFuture::from(buf)
        .await
        .map_err(|_| format!("cannot read {url}"))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

fn parse_mib(s: &str) -> Result<Option<u64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of MiB"))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("`{s}` must be zero or more"));
    }
    Ok(Some((v * (1u64 << 20) as f64) as u64))
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let model: Shared = Rc::new(RefCell::new(None));
    let training = Rc::new(RefCell::new(Training {
        trainer: None,
        running: false,
        view: TrainView::default(),
    }));
    let busy = Rc::new(Cell::new(false));
    let view_frame = RwSignal::new(Frame::default());
    let map = RwSignal::new(MapView::default());
    let released = RwSignal::new(None::<u64>);
    let error = RwSignal::new(None::<String>);
    let trace_error = RwSignal::new(None::<String>);

    // Controls' values.
    let alloc_n = RwSignal::new("16".to_string());
    let alloc_size = RwSignal::new((1u64 << 20).to_string());
    let alloc_usage = RwSignal::new("storage".to_string());
    let budget = RwSignal::new(String::new());
    let cache_limit = RwSignal::new(String::new());
    let growth = RwSignal::new("on-demand".to_string());
    let prealloc = RwSignal::new("64".to_string());
    let sample = RwSignal::new(SAMPLES[0].to_string());
    let speed = RwSignal::new("10000".to_string());
    let batch = RwSignal::new("256".to_string());
    let dtype = RwSignal::new("f32".to_string());

    {
        let model = model.clone();
        spawn_local(async move {
            *model.borrow_mut() = Some(open_model().await);
        });
    }

    // The tick: advance work, sample, redraw.
    {
        let (model, training, busy) = (model.clone(), training.clone(), busy.clone());
        let tick_count = Cell::new(0u64);
        set_interval(
            move || {
                let t = now_s();
                let ticks = tick_count.get() + 1;
                tick_count.set(ticks);
                let mut guard = model.borrow_mut();
                let Some(m) = guard.as_mut() else { return };
                if m.replay.is_some() {
                    let n = m.replay_due(t, 5000);
                    if matches!(m.device, Device::Sim(_)) {
                        m.replay_sim(n);
                    } else if !busy.get() {
                        busy.set(true);
                        let (model, busy) = (model.clone(), busy.clone());
                        spawn_local(async move {
                            replay_gpu(model, n).await;
                            busy.set(false);
                        });
                    }
                }
                let running = training.borrow().running;
                if running
                    && !busy.get()
                    && let Some(pool) = m.gpu_pool()
                {
                    busy.set(true);
                    let (training, busy, model) = (training.clone(), busy.clone(), model.clone());
                    spawn_local(async move {
                        let trainer = training.borrow_mut().trainer.take();
                        if let Some(mut tr) = trainer {
                            let step = training.borrow().view.step;
                            let read = step % 5 == 0;
                            let r = tr.step(&pool, read).await;
                            let mut tb = training.borrow_mut();
                            match r {
                                Ok(rep) => {
                                    tb.view.step += 1;
                                    if let Some(l) = rep.loss {
                                        tb.view.losses.push((rep.step, l));
                                    }
                                    tb.trainer = Some(tr);
                                }
                                Err(e) => {
                                    tb.running = false;
                                    tb.view.running = false;
                                    if let Some(m) = model.borrow_mut().as_mut() {
                                        m.say(format!("training stopped: {e}"));
                                    }
                                }
                            }
                        }
                        busy.set(false);
                    });
                }
                // Figures and the timeline at 20 Hz, the segment map and log at 5 Hz.
                {
                    let stats = m.sample(t);
                    let mut f = frame(m, stats, &training.borrow());
                    f.released = released.get_untracked();
                    view_frame.set(f);
                }
                if ticks.is_multiple_of(4) {
                    let (segments, hidden) = segment_views(&m.snapshot(), 48);
                    map.set(MapView {
                        segments,
                        hidden,
                        log: m.log.iter().rev().take(30).cloned().collect(),
                    });
                }
            },
            Duration::from_millis(50),
        );
    }

    let with_model = {
        let model = model.clone();
        move |f: &dyn Fn(&mut Model)| {
            if let Some(m) = model.borrow_mut().as_mut() {
                f(m);
            }
        }
    };

    let on_alloc = {
        let (model, busy) = (model.clone(), busy.clone());
        move |_| {
            error.set(None);
            let n: usize = alloc_n
                .get_untracked()
                .trim()
                .parse()
                .unwrap_or(0)
                .min(4096);
            let size: u64 = alloc_size.get_untracked().parse().unwrap_or(1 << 20);
            let usage = Usage::parse(&alloc_usage.get_untracked());
            let pool = model.borrow().as_ref().and_then(|m| m.gpu_pool());
            match pool {
                None => {
                    if let Some(m) = model.borrow_mut().as_mut() {
                        let mut ok = 0;
                        for _ in 0..n {
                            match m.alloc_sim(size, usage) {
                                Ok(h) => {
                                    m.hold(h, size);
                                    ok += 1;
                                }
                                Err(e) => {
                                    m.say(format!("OOM: {e}"));
                                    error.set(Some(e.to_string()));
                                    break;
                                }
                            }
                        }
                        m.say(format!("allocated {ok} × {} ({usage:?})", fmt_bytes(size)));
                    }
                }
                Some(pool) => {
                    if busy.replace(true) {
                        error.set(Some(BUSY.into()));
                        return;
                    }
                    let (model, busy) = (model.clone(), busy.clone());
                    spawn_local(async move {
                        let mut ok = 0;
                        for _ in 0..n {
                            let r = alloc_gpu(&pool, size, usage).await;
                            let mut b = model.borrow_mut();
                            let Some(m) = b.as_mut() else { break };
                            match r {
                                Ok(buf) => {
                                    m.hold(Handle::Gpu(buf), size);
                                    ok += 1;
                                }
                                Err(e) => {
                                    m.say(format!("refused: {e}"));
                                    error.set(Some(e.to_string()));
                                    break;
                                }
                            }
                        }
                        if let Some(m) = model.borrow_mut().as_mut() {
                            m.say(format!("allocated {ok} × {} ({usage:?})", fmt_bytes(size)));
                        }
                        busy.set(false);
                    });
                }
            }
        }
    };

    let on_free_random = {
        let w = with_model.clone();
        move |_| {
            w(&|m| {
                let n = m.free_random();
                m.say(format!("freed {n} blocks at random"));
            })
        }
    };
    let on_free_all = {
        let w = with_model.clone();
        move |_| {
            w(&|m| {
                let n = m.free_all();
                m.say(format!("freed all {n} blocks"));
            })
        }
    };
    let on_empty = {
        let w = with_model.clone();
        move |_| {
            w(&|m| {
                let before = m.stats().total.reserved_bytes.current;
                let r = m.empty_cache();
                let after = m.stats().total.reserved_bytes.current;
                m.say(format!(
                    "empty_cache released {} (reserved {} → {})",
                    fmt_bytes(r),
                    fmt_bytes(before),
                    fmt_bytes(after)
                ));
                released.set(Some(r));
            })
        }
    };
    let on_apply = {
        let w = with_model.clone();
        move |_| {
            error.set(None);
            let parsed = (|| -> Result<_, String> {
                let b = parse_mib(&budget.get_untracked())?.filter(|&b| b > 0);
                let c = parse_mib(&cache_limit.get_untracked())?;
                let g = if growth.get_untracked() == "preallocate" {
                    Growth::Preallocate(parse_mib(&prealloc.get_untracked())?.unwrap_or(64 << 20))
                } else {
                    Growth::OnDemand
                };
                Ok((b, c, g))
            })();
            match parsed {
                Err(e) => error.set(Some(e)),
                Ok((b, c, g)) => w(&|m| {
                    let now_pre = m.snapshot().segments.iter().any(|s| s.pinned);
                    let want_pre = matches!(g, Growth::Preallocate(_));
                    let r = if now_pre != want_pre || want_pre {
                        m.reset(g, b, c)
                    } else {
                        m.set_limits(b, c)
                    };
                    match r {
                        Ok(()) => m.say(format!(
                            "settings: budget {}, cache limit {}, growth {g:?}",
                            b.map_or("none".into(), fmt_bytes),
                            c.map_or("none".into(), fmt_bytes)
                        )),
                        Err(e) => {
                            m.say(format!("settings refused: {e}"));
                            error.set(Some(e.to_string()));
                        }
                    }
                }),
            }
        }
    };
    // Device loss, on purpose: what the pool does when the browser loses the GPU.
    let on_destroy = {
        let w = with_model.clone();
        move |_| {
            w(&|m| match m.gpu_pool() {
                Some(pool) => {
                    pool.device().destroy();
                    m.say("Device::destroy() called; the browser reports the loss shortly".into());
                }
                None => m.say("no WebGPU device to destroy (simulated device)".into()),
            })
        }
    };
    let on_new_device = {
        let (model, busy, training) = (model.clone(), busy.clone(), training.clone());
        move |_| {
            if busy.replace(true) {
                error.set(Some(BUSY.into()));
                return;
            }
            error.set(None);
            {
                let mut t = training.borrow_mut();
                t.running = false;
                t.view.running = false;
                t.trainer = None;
            }
            let (model, busy) = (model.clone(), busy.clone());
            spawn_local(async move {
                let m = open_model().await;
                // The old pool, its blocks and its lost device go with the old model.
                *model.borrow_mut() = Some(m);
                busy.set(false);
            });
        }
    };
    let on_oom = {
        let (model, on_alloc) = (model.clone(), on_alloc.clone());
        move |ev| {
            // A budget just above what is live: the next requests make the pool
            // release its cache and retry, then report an out-of-memory.
            let limit = {
                let b = model.borrow();
                let Some(m) = b.as_ref() else { return };
                let s = m.stats();
                s.total.allocated_bytes.current + (4 << 20)
            };
            if let Some(m) = model.borrow_mut().as_mut() {
                match m.set_limits(Some(limit), None) {
                    Ok(()) => m.say(format!(
                        "induced OOM: budget set to {} (live + 4 MiB); allocating 16 × 1 MiB",
                        fmt_bytes(limit)
                    )),
                    Err(e) => m.say(format!("cannot set the budget: {e}")),
                }
            }
            budget.set(format!("{:.2}", limit as f64 / (1u64 << 20) as f64));
            alloc_n.set("16".into());
            alloc_size.set((1u64 << 20).to_string());
            on_alloc(ev);
        }
    };
    let start_replay = {
        let model = model.clone();
        move |trace: Trace| {
            let speed: f64 = speed.get_untracked().parse().unwrap_or(10_000.0);
            if let Some(m) = model.borrow_mut().as_mut()
                && let Err(e) = m.start_replay(trace, speed.max(1.0))
            {
                m.say(format!("cannot replay: {e}"));
                trace_error.set(Some(e.to_string()));
            }
        }
    };
    let on_replay = {
        let (start, model) = (start_replay.clone(), model.clone());
        move |_| {
            trace_error.set(None);
            if let Some(m) = model.borrow_mut().as_mut() {
                m.replay_result = None;
            }
            let name = sample.get_untracked();
            let start = start.clone();
            spawn_local(async move {
                match fetch_bytes(&format!("samples/{name}.csv.gz")).await {
                    Ok(bytes) => match Trace::from_bytes(&name, &bytes) {
                        Ok(t) => start(t),
                        Err(e) => trace_error.set(Some(e.to_string())),
                    },
                    Err(e) => trace_error.set(Some(e)),
                }
            });
        }
    };
    let on_stop = {
        let w = with_model.clone();
        move |_| w(&|m| m.finish_replay())
    };
    let on_file = {
        let (start, model) = (start_replay.clone(), model.clone());
        move |ev: leptos::ev::Event| {
            trace_error.set(None);
            let input: web_sys::HtmlInputElement = event_target(&ev);
            let Some(file) = input.files().and_then(|f| f.get(0)) else {
                return;
            };
            let (start, model) = (start.clone(), model.clone());
            spawn_local(async move {
                let name = file.name();
                let bytes = match wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await {
                    Ok(b) => js_sys::Uint8Array::new(&b).to_vec(),
                    Err(_) => {
                        trace_error.set(Some(format!("cannot read {name}")));
                        return;
                    }
                };
                match Trace::from_bytes(&name, &bytes) {
                    Ok(t) => start(t),
                    Err(e) => {
                        if let Some(m) = model.borrow_mut().as_mut() {
                            m.say(format!("trace refused: {e}"));
                        }
                        trace_error.set(Some(e.to_string()));
                    }
                }
            });
            input.set_value("");
        }
    };
    let train_cfg = move || MlpConfig {
        batch: batch
            .get_untracked()
            .parse()
            .unwrap_or(256)
            .clamp(1, 1 << 16),
        hidden: 256,
        dtype: match dtype.get_untracked().as_str() {
            "f16" => Dtype::F16,
            "int8" => Dtype::Int8,
            _ => Dtype::F32,
        },
        ..MlpConfig::default()
    };
    let on_train = {
        let (model, training) = (model.clone(), training.clone());
        move |_| {
            if training.borrow().running {
                let mut t = training.borrow_mut();
                t.running = false;
                t.view.running = false;
                t.trainer = None;
                return;
            }
            let Some(pool) = model.borrow().as_ref().and_then(|m| m.gpu_pool()) else {
                error.set(Some(
                    "training runs shaders: it needs a WebGPU device".into(),
                ));
                return;
            };
            let cfg = train_cfg();
            let (training, model) = (training.clone(), model.clone());
            spawn_local(async move {
                match Trainer::new(&pool, cfg).await {
                    Ok(tr) => {
                        let mut t = training.borrow_mut();
                        t.view = TrainView {
                            running: true,
                            weight_bytes: cfg.weight_bytes(),
                            f32_weight_bytes: cfg.f32_weight_bytes(),
                            found_batch: t.view.found_batch,
                            ..TrainView::default()
                        };
                        t.trainer = Some(tr);
                        t.running = true;
                        if let Some(m) = model.borrow_mut().as_mut() {
                            m.say(format!(
                                "training: batch {}, hidden {}, {:?} weights",
                                cfg.batch, cfg.hidden, cfg.dtype
                            ));
                        }
                    }
                    Err(e) => error.set(Some(format!("cannot start training: {e}"))),
                }
            });
        }
    };
    let on_find = {
        let (model, training) = (model.clone(), training.clone());
        move |_| {
            let limit = model.borrow().as_ref().and_then(|m| m.stats().limit);
            let Some(limit) = limit else {
                error.set(Some("set a budget first: the batch is fitted to it".into()));
                return;
            };
            let cfg = train_cfg();
            let found = find_batch(&cfg, limit, 8192);
            match found {
                Some(b) => {
                    batch.set(b.to_string());
                    training.borrow_mut().view.found_batch = Some(b);
                    if let Some(m) = model.borrow_mut().as_mut() {
                        m.say(format!(
                            "largest batch within {} (dry run on the simulated device): {b}",
                            fmt_bytes(limit)
                        ));
                    }
                }
                None => error.set(Some(format!(
                    "not even a batch of 1 fits {}",
                    fmt_bytes(limit)
                ))),
            }
        }
    };

    let stat =
        move |get: fn(&Stats) -> u64| move || view_frame.with(|f| f.stats.as_ref().map_or(0, get));
    let cell = move |id: &'static str, label: &'static str, get: fn(&Stats) -> u64, bytes: bool| {
        let v = stat(get);
        view! {
            <div class="figure">
                <span class="label">{label}</span>
                <span class="value" id=id data-value=move || v().to_string()>
                    {move || if bytes { fmt_bytes(v()) } else { v().to_string() }}
                </span>
            </div>
        }
    };

    view! {
        <header>
            <h1>"vrampool"</h1>
            <span class="tag">"a caching GPU memory pool for wgpu, live"</span>
            <span
                id="backend"
                data-kind=move || view_frame.with(|f| if !f.ready { "starting" } else if f.gpu { "webgpu" } else { "simulated" })
                data-max-buffer=move || view_frame.with(|f| f.max_buffer.to_string())
            >
                {move || view_frame.with(|f| if f.ready { f.backend.clone() } else { "starting…".into() })}
            </span>
        </header>
        <Show when=move || view_frame.with(|f| f.ready && !f.gpu)>
            <p class="notice" id="no-webgpu">
                "No WebGPU device here, so the page runs the same pool on a simulated device: every figure is real, no shader runs. "
                {move || view_frame.with(|f| format!("Why: {}.", f.fallback_note))}
            </p>
        </Show>
        <main>
            <section class="controls">
                <h2>"Allocate"</h2>
                <div class="row">
                    <input id="alloc-n" type="number" min="1" max="4096" prop:value=alloc_n on:input=move |e| alloc_n.set(event_target_value(&e)) />
                    " × "
                    <select id="alloc-size" prop:value=alloc_size on:change=move |e| alloc_size.set(event_target_value(&e))>
                        <option value="256">"256 B"</option>
                        <option value="65536">"64 KiB"</option>
                        <option value="1048576" selected>"1 MiB"</option>
                        <option value="4194304">"4 MiB"</option>
                        <option value="16777216">"16 MiB"</option>
                        <option value="67108864">"64 MiB"</option>
                    </select>
                    <select id="alloc-usage" prop:value=alloc_usage on:change=move |e| alloc_usage.set(event_target_value(&e))>
                        <option value="storage">"STORAGE"</option>
                        <option value="uniform">"UNIFORM"</option>
                        <option value="vertex">"VERTEX"</option>
                        <option value="readback">"MAP_READ (staging)"</option>
                    </select>
                    <button id="btn-alloc" on:click=on_alloc.clone()>"allocate"</button>
                </div>
                <div class="row">
                    <button id="btn-free-random" on:click=on_free_random>"free random"</button>
                    <button id="btn-free-all" on:click=on_free_all>"free all"</button>
                    <button id="btn-empty-cache" on:click=on_empty>"empty_cache()"</button>
                </div>
                <p id="released" data-bytes=move || released.get().map(|r| r.to_string()).unwrap_or_default()>
                    {move || released.get().map(|r| format!("last empty_cache released {}", fmt_bytes(r)))}
                </p>
                <h2>"Settings"</h2>
                <div class="row">
                    <label>"budget MiB " <input id="budget" placeholder="none" prop:value=budget on:input=move |e| budget.set(event_target_value(&e)) /></label>
                    <label>"cache limit MiB " <input id="cache-limit" placeholder="none" prop:value=cache_limit on:input=move |e| cache_limit.set(event_target_value(&e)) /></label>
                </div>
                <div class="row">
                    <select id="growth" prop:value=growth on:change=move |e| growth.set(event_target_value(&e))>
                        <option value="on-demand">"grow on demand"</option>
                        <option value="preallocate">"preallocate"</option>
                    </select>
                    <label>" MiB " <input id="prealloc" prop:value=prealloc on:input=move |e| prealloc.set(event_target_value(&e)) /></label>
                    <button id="btn-apply" on:click=on_apply>"apply"</button>
                    <button id="btn-oom" on:click=on_oom>"induce OOM"</button>
                </div>
                <div class="row">
                    <button id="btn-destroy-device" on:click=on_destroy>"destroy device"</button>
                    <button id="btn-new-device" on:click=on_new_device>"new device"</button>
                </div>
                <p class="error" id="error">{move || error.get()}</p>
                <p class="error" id="device-lost" data-lost=move || view_frame.with(|f| f.lost.is_some().to_string())>
                    {move || view_frame.with(|f| f.lost.as_ref().map(|w| format!("Device lost: {w}. Allocations fail with DeviceLost until you press \"new device\".")))}
                </p>
                <h2>"Replay a trace"</h2>
                <div class="row">
                    <select id="sample" prop:value=sample on:change=move |e| sample.set(event_target_value(&e))>
                        {SAMPLES.iter().map(|n| view! { <option value=*n>{format!("{n} (PyTorch, sizes ÷ 64)")}</option> }).collect_view()}
                    </select>
                    <label>" ops/s " <input id="speed" prop:value=speed on:input=move |e| speed.set(event_target_value(&e)) /></label>
                </div>
                <div class="row">
                    <button id="btn-replay" on:click=on_replay>"replay"</button>
                    <button id="btn-stop" on:click=on_stop>"stop"</button>
                    <label class="file">"or an RMM CSV: " <input id="trace-file" type="file" accept=".csv,.gz" on:change=on_file /></label>
                </div>
                <p class="error" id="trace-error">{move || trace_error.get()}</p>
                <p id="replay-status">
                    {move || view_frame.with(|f| match (f.replay, f.result) {
                        (Some((i, n)), _) => format!("replaying: {i} / {n} events"),
                        (None, Some(r)) => format!(
                            "done: {} events, peak reserved {} = {:.3} × peak live, {} device allocations, {} cache hits, {} OOMs",
                            r.ops, fmt_bytes(r.peak_reserved), r.peak_reserved as f64 / r.peak_live as f64,
                            r.device_allocs, r.cache_hits, r.ooms),
                        _ => String::new(),
                    })}
                </p>
                <div
                    id="replay-result"
                    data-done=move || view_frame.with(|f| (f.replay.is_none() && f.result.is_some()).to_string())
                    data-ops=move || view_frame.with(|f| f.result.map(|r| r.ops.to_string()).unwrap_or_default())
                    data-peak-reserved=move || view_frame.with(|f| f.result.map(|r| r.peak_reserved.to_string()).unwrap_or_default())
                    data-device-allocs=move || view_frame.with(|f| f.result.map(|r| r.device_allocs.to_string()).unwrap_or_default())
                    data-cache-hits=move || view_frame.with(|f| f.result.map(|r| r.cache_hits.to_string()).unwrap_or_default())
                    data-ooms=move || view_frame.with(|f| f.result.map(|r| r.ooms.to_string()).unwrap_or_default())
                    data-millis=move || view_frame.with(|f| f.result.map(|r| r.millis.to_string()).unwrap_or_default())
                ></div>
                <h2>"Train an MLP on pool tensors"</h2>
                <div class="row">
                    <label>"batch " <input id="batch" type="range" min="1" max="8192" prop:value=batch on:input=move |e| batch.set(event_target_value(&e)) /></label>
                    <span>{move || batch.get()}</span>
                    <select id="dtype" prop:value=dtype on:change=move |e| dtype.set(event_target_value(&e))>
                        <option value="f32">"f32"</option>
                        <option value="f16">"f16"</option>
                        <option value="int8">"int8"</option>
                    </select>
                </div>
                <div class="row">
                    <button id="btn-train" on:click=on_train>{move || view_frame.with(|f| if f.train.running { "stop training" } else { "train" })}</button>
                    <button id="btn-find-batch" on:click=on_find>"find the largest batch that fits"</button>
                </div>
                <p id="train-status" data-step=move || view_frame.with(|f| f.train.step.to_string())>
                    {move || view_frame.with(|f| {
                        let t = &f.train;
                        if t.losses.is_empty() && !t.running { return String::new(); }
                        let loss = match (t.losses.first(), t.losses.last()) {
                            (Some(a), Some(b)) => format!("loss {:.4} → {:.4}", a.1, b.1),
                            _ => "loss …".into(),
                        };
                        format!("step {}: {loss}; weights {} ({} saved vs f32)", t.step, fmt_bytes(t.weight_bytes), fmt_bytes(t.f32_weight_bytes - t.weight_bytes))
                    })}
                </p>
                <h2>"Events"</h2>
                <ol id="log">
                    {move || map.with(|f| f.log.iter().map(|l| view! { <li>{l.clone()}</li> }).collect_view())}
                </ol>
            </section>
            <section class="figures">
                <div class="grid">
                    {cell("stat-allocated", "allocated", |s| s.total.allocated_bytes.current, true)}
                    {cell("stat-reserved", "reserved", |s| s.total.reserved_bytes.current, true)}
                    {cell("stat-cached", "cached", |s| s.total.cached_bytes.current, true)}
                    {cell("stat-peak-reserved", "peak reserved", |s| s.total.reserved_bytes.peak, true)}
                    {cell("ctr-device-allocs", "device allocations", |s| s.counters.device_allocs, false)}
                    {cell("ctr-device-frees", "device frees", |s| s.counters.device_frees, false)}
                    {cell("ctr-hits", "cache hits", |s| s.counters.cache_hits, false)}
                    {cell("ctr-ooms", "OOMs", |s| s.counters.ooms, false)}
                    {cell("ctr-retries", "retries", |s| s.counters.alloc_retries, false)}
                    {cell("ctr-released", "released by last empty_cache", |s| s.counters.last_empty_cache_bytes, true)}
                </div>
                <Timeline frame=view_frame />
                <h2>"Pools"</h2>
                <table id="pools">
                    <thead><tr><th>"pool"</th><th>"allocated"</th><th>"reserved"</th><th>"cached"</th><th>"blocks"</th><th>"segments"</th><th>"peak reserved"</th></tr></thead>
                    <tbody>
                        {move || view_frame.with(|f| f.stats.as_ref().map(|s| s.pools.iter().map(|p| {
                            let st = p.stats;
                            view! { <tr>
                                <td>{p.name.clone()}</td>
                                <td>{fmt_bytes(st.allocated_bytes.current)}</td>
                                <td>{fmt_bytes(st.reserved_bytes.current)}</td>
                                <td>{fmt_bytes(st.cached_bytes.current)}</td>
                                <td>{st.allocations.current}</td>
                                <td>{st.segments.current}</td>
                                <td>{fmt_bytes(st.reserved_bytes.peak)}</td>
                            </tr> }
                        }).collect_view()))}
                    </tbody>
                </table>
                <SegmentMap map=map />
            </section>
        </main>
    }
}

/// Allocated / reserved / cached / budget over the last minute, peaks marked.
#[component]
fn Timeline(frame: RwSignal<Frame>) -> impl IntoView {
    const W: f64 = 640.0;
    const H: f64 = 200.0;
    let geometry = move || {
        frame.with(|f| {
            let pts = &f.points;
            let t0 = pts.first().map_or(0.0, |p| p.t);
            let t1 = pts.last().map_or(1.0, |p| p.t).max(t0 + 1.0);
            let top = pts
                .iter()
                .map(|p| p.reserved.max(p.budget.unwrap_or(0)))
                .max()
                .unwrap_or(1)
                .max(1 << 20) as f64
                * 1.1;
            let x = move |t: f64| (t - t0) / (t1 - t0) * W;
            let y = move |v: u64| H - v as f64 / top * H;
            let line = |get: fn(&Point) -> u64| {
                pts.iter()
                    .map(|p| format!("{:.1},{:.1}", x(p.t), y(get(p))))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let budget = pts.last().and_then(|p| p.budget).map(&y);
            let peak = pts
                .iter()
                .max_by_key(|p| p.reserved)
                .map(|p| (x(p.t), y(p.reserved), p.reserved));
            (
                line(|p| p.reserved),
                line(|p| p.allocated),
                line(|p| p.cached),
                budget,
                peak,
                top,
                pts.len(),
            )
        })
    };
    view! {
        <div class="chart">
            <svg id="timeline" viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none"
                 data-points=move || geometry().6.to_string()>
                <polyline id="line-reserved" class="reserved" points=move || geometry().0 />
                <polyline id="line-allocated" class="allocated" points=move || geometry().1 />
                <polyline id="line-cached" class="cached" points=move || geometry().2 />
                {move || geometry().3.map(|y| view! { <line class="budget" x1="0" x2=W y1=y y2=y /> })}
                {move || geometry().4.map(|(x, y, v)| view! {
                    <circle class="peak" cx=x cy=y r="4"><title>{format!("peak reserved {}", fmt_bytes(v))}</title></circle>
                })}
            </svg>
            <div class="legend">
                <span class="reserved">"reserved"</span>
                <span class="allocated">"allocated"</span>
                <span class="cached">"cached"</span>
                <span class="budget">"budget"</span>
                <span class="scale">{move || format!("top {}", fmt_bytes(geometry().5 as u64))}</span>
            </div>
        </div>
    }
}

/// Each segment a bar, its blocks coloured live / cached / free, label and size on hover.
#[component]
fn SegmentMap(map: RwSignal<MapView>) -> impl IntoView {
    view! {
        <h2>"Segments"</h2>
        <div id="segments">
            {move || map.with(|f| {
                let rows = f.segments.iter().map(|s| {
                    let size = s.size.max(1) as f64;
                    let blocks = s.blocks.iter().map(|(off, len, kind, label)| {
                        let class = match kind {
                            BlockKind::Live => "live",
                            BlockKind::Cached => "cached",
                            BlockKind::Free => "free",
                            BlockKind::Pending => "pending",
                        };
                        let tip = format!(
                            "{} {} at +{}{}",
                            class,
                            fmt_bytes(*len),
                            off,
                            label.as_ref().map(|l| format!(" — {l}")).unwrap_or_default()
                        );
                        view! {
                            <div class=format!("block {class}") title=tip
                                 style=format!("left:{:.3}%;width:{:.3}%", *off as f64 / size * 100.0, *len as f64 / size * 100.0)>
                            </div>
                        }
                    }).collect_view();
                    view! {
                        <div class="segment">
                            <span class="seg-label">{format!("#{} {} {}", s.id, s.pool, fmt_bytes(s.size))}</span>
                            <div class="bar" title=format!("segment {} of pool {}: {}", s.id, s.pool, fmt_bytes(s.size))>{blocks}</div>
                        </div>
                    }
                }).collect_view();
                let more = (f.hidden > 0).then(|| view! { <p>{format!("and {} smaller segments", f.hidden)}</p> });
                (rows, more)
            })}
        </div>
    }
}
