//! The side-by-side view: a trace (a bundled sample, the person's upload or
//! the page's own recording) replayed at once through vrampool and the
//! PyTorch preset, each on a simulated device like the page's, by its own
//! task; both reserved lines and the live line on one chart with a hover
//! readout, the figures the harness's `replay --compare` prints in
//! `#compare-table` (PyTorch with `expandable_segments` added once every
//! event is replayed; the smallest budgets on request), and `#scrub`, which
//! takes both segment maps and the figures back to any event.

use std::ops::ControlFlow;
use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Trace, fmt_bytes};

use super::chart::{Frame, axes, pointer_fraction, swatch};
use super::page::{Page, TICK, now_s, rest_of_tick, sleep};
use super::peak::PeakPanel;
use super::replay::fetch_bytes;
use super::segments::{SegmentCanvas, SegmentLegend};
use crate::model::axes::{Tick, byte_ticks, event_ticks, grouped, polyline};
use crate::model::{
    Budget, Compare, JobProgress, LaneFigures, ModelCell, Moment, POLICIES, SAMPLES, Seek,
    SeriesPoint, SimDevice, Whose, parse_speed,
};

/// Events taken at most per tick (a long trace at a high speed falls behind
/// rather than holding up the page).
const MAX_EVENTS_PER_TICK: usize = 20_000;
/// The chart's viewBox.
const CHART: Frame = Frame::new(640.0, 270.0);
/// Segments drawn per policy at the scrubbed event.
pub const MAPS_SHOWN: usize = 24;
/// Events a slice of background work (the budgets' replays, a scrub's
/// re-simulation) takes between two looks at the clock.
const EVENTS_PER_SLICE: usize = 4096;
/// Seconds of background work before the page yields to the browser (which
/// draws a frame, then the work goes on): a frame's worth, less drawing.
const WORK_PER_SLICE_S: f64 = 0.010;
/// Events a scrub re-simulates at once, in the slider's own handler: more,
/// and the rest goes on a slice at a time (a trace of millions of events
/// scrubbed back, re-simulated from its start, would freeze the tab for
/// seconds per move).
const SCRUB_AT_ONCE: usize = 16_384;

/// What the panel shows of the replay (written by the tick, 20 Hz).
#[derive(Clone, Default, PartialEq)]
pub struct CompareView {
    /// Which replay.
    pub id: u64,
    /// The trace's name.
    pub trace: String,
    /// Events in the trace.
    pub events: usize,
    /// Events taken.
    pub position: usize,
    /// Every event was taken, or it was stopped.
    pub done: bool,
    /// Each policy's figures (final once done).
    pub figures: [LaneFigures; 2],
    /// Each policy's smallest budget, once found.
    pub budgets: [Option<Budget>; 2],
    /// PyTorch with `expandable_segments` on the whole trace, once done,
    /// and its smallest budget, once found.
    pub expandable: Option<LaneFigures>,
    pub expandable_budget: Option<Budget>,
    /// Where the search for the smallest budgets is, while one is under way.
    pub budget_progress: Option<JobProgress>,
    /// The chart's points.
    pub series: Vec<SeriesPoint>,
    /// Events per chart point.
    pub every: usize,
    /// Wall-clock milliseconds it took, once done.
    pub millis: Option<u64>,
}

impl CompareView {
    /// The view of `c`.
    pub fn of(c: &Compare) -> CompareView {
        let (position, events) = c.progress();
        CompareView {
            id: c.id(),
            trace: c.trace().name.clone(),
            events,
            position,
            done: c.result().is_some(),
            figures: c.figures(),
            budgets: c.budgets(),
            expandable: c.expandable(),
            expandable_budget: c.expandable_budget(),
            budget_progress: c.budget_progress(),
            series: c.series().points(),
            every: c.series().every(),
            millis: c.millis(),
        }
    }

    /// The line a finished replay ends with: both policies' figures.
    pub fn summary(&self) -> String {
        if self.id == 0 {
            return String::new();
        }
        if !self.done {
            return format!(
                "replaying {} through both policies: {} / {} events",
                self.trace,
                grouped(self.position as u64),
                grouped(self.events as u64)
            );
        }
        let [v, p] = self.figures;
        let less = 1.0 - v.peak_reserved as f64 / p.peak_reserved.max(1) as f64;
        format!(
            "{} ({} events{}{}): vrampool reserved at most {} ({:.3} × peak live) with {} device allocations; \
             PyTorch's scheme {} ({:.3} ×) with {}. vrampool held {:.1} % {} at the peak.",
            self.trace,
            grouped(self.position as u64),
            if self.position < self.events {
                ", stopped"
            } else {
                ""
            },
            self.millis.map_or(String::new(), |ms| format!(
                " in {:.2} s",
                ms as f64 / 1000.0
            )),
            fmt_bytes(v.peak_reserved),
            v.ratio(),
            v.device_allocs,
            fmt_bytes(p.peak_reserved),
            p.ratio(),
            p.device_allocs,
            less.abs() * 100.0,
            if less >= 0.0 { "less" } else { "more" }
        )
    }
}

/// Where the chart's points fall.
#[derive(Clone, PartialEq)]
struct Geometry {
    /// Events across the chart.
    events: usize,
    /// Bytes at the top.
    top: f64,
    live: String,
    reserved: [String; 2],
    y_ticks: Vec<Tick>,
    x_ticks: Vec<Tick>,
}

impl Geometry {
    fn x(events: usize, e: f64) -> f64 {
        CHART.x(e / events.max(1) as f64)
    }

    fn of(v: &CompareView) -> Geometry {
        let highest = v
            .series
            .iter()
            .map(|p| p.live.max(p.reserved[0]).max(p.reserved[1]))
            .max()
            .unwrap_or(0);
        let top = highest.max(1 << 20) as f64 * 1.08;
        let line = |get: &dyn Fn(&SeriesPoint) -> u64| {
            polyline(
                std::iter::once((0.0, 0))
                    .chain(v.series.iter().map(|p| (p.event as f64, get(p))))
                    .map(|(e, b)| (Self::x(v.events, e), CHART.y(b as f64 / top))),
            )
        };
        Geometry {
            events: v.events,
            top,
            live: line(&|p| p.live),
            reserved: [line(&|p| p.reserved[0]), line(&|p| p.reserved[1])],
            y_ticks: byte_ticks(top, 5),
            x_ticks: event_ticks(v.events, 7),
        }
    }
}

/// Takes the scrubber and both segment maps to event `at` (`None`: follows
/// the replay), clamped as the slider's range is: for the slider, "follow
/// the replay" and a click on either chart. A scrub that needs more than
/// [`SCRUB_AT_ONCE`] events re-simulated (back: from the start; forward:
/// from where the last left off) goes on in a task of its own, a slice at
/// a time.
pub fn scrub_to(page: Page, at: Option<usize>) {
    if let Some((id, at, seek)) = page.with_compare(|c| {
        let (at, seek) = c.scrub(at, MAPS_SHOWN, SCRUB_AT_ONCE);
        (c.id(), at, seek)
    }) {
        page.scrub.set(at);
        match seek {
            Seek::There(m) => page.moment.set(*m),
            Seek::Started(seek) => spawn_local(drive_seek(page, id, seek)),
            Seek::Going => {}
        }
    }
}

/// Runs `step` on comparison `id` a slice at a time: yields to the browser,
/// then calls it until it breaks or [`WORK_PER_SLICE_S`] has passed, and
/// again, until it breaks with its result; `None` once the comparison is
/// gone (another replaced it).
async fn in_slices<R>(
    page: Page,
    id: u64,
    mut step: impl FnMut(&mut Compare) -> ControlFlow<R>,
) -> Option<R> {
    loop {
        sleep(std::time::Duration::ZERO).await;
        let began = now_s();
        let slice = page.with_compare(|c| {
            loop {
                if c.id() != id {
                    return None;
                }
                if let ControlFlow::Break(r) = step(c) {
                    return Some(Some(r));
                }
                if now_s() - began > WORK_PER_SLICE_S {
                    return Some(None);
                }
            }
        });
        if let Some(r) = slice.flatten()? {
            return Some(r);
        }
    }
}

/// Takes seek `seek` of comparison `id` to its event a slice at a time,
/// then shows both policies there; stops if the seek is called off (a scrub
/// to the end, a new comparison).
async fn drive_seek(page: Page, id: u64, seek: u64) {
    let there = in_slices(page, id, |c| {
        if c.seeking() != Some(seek) {
            return ControlFlow::Break(None);
        }
        match c.resume_seek(MAPS_SHOWN, EVENTS_PER_SLICE) {
            Some(m) => ControlFlow::Break(Some(m)),
            None => ControlFlow::Continue(()),
        }
    })
    .await;
    if let Some(m) = there.flatten() {
        page.moment.set(m);
    }
}

/// Advances comparison `id` each tick by the events due at its speed,
/// until it ends; then says how it ended.
async fn run_compare(page: Page, id: u64) {
    loop {
        let began = now_s();
        let going = page.with_compare(|c| {
            c.id() == id
                && match c.due(began, TICK.as_secs_f64(), MAX_EVENTS_PER_TICK) {
                    Some(n) => c.advance(n),
                    None => false,
                }
        });
        match going {
            Some(true) => sleep(rest_of_tick(began)).await,
            Some(false) => break,
            None => return,
        }
    }
    if let Some(v) = page
        .with_compare(|c| (c.id() == id).then(|| CompareView::of(c)))
        .flatten()
    {
        page.say(v.summary());
    }
}

/// Finds the smallest budgets for comparison `id` (both policies', then
/// PyTorch with `expandable_segments`'), a slice of replays at a time
/// ([`in_slices`]). Each budget shows once found.
async fn find_budgets(page: Page, id: u64, busy: RwSignal<bool>) {
    busy.set(true);
    page.with_compare(|c| {
        if c.id() == id {
            c.find_budgets();
        }
    });
    let ended = in_slices(page, id, |c| match c.advance_budgets(EVENTS_PER_SLICE) {
        Ok(true) => ControlFlow::Continue(()),
        Ok(false) => ControlFlow::Break(Ok(())),
        Err(e) => ControlFlow::Break(Err(e)),
    })
    .await;
    if let Some(Err(e)) = ended {
        page.fail(format!("cannot bisect a budget: {e}"));
    }
    busy.set(false);
}

/// What the budgets' button says while a search is under way.
fn searching(p: Option<JobProgress>) -> String {
    let Some(p) = p else {
        return "finding the smallest budgets…".into();
    };
    let whose = match p.whose {
        Whose::Policy(policy) => policy.name(),
        Whose::Expandable => "expandable_segments",
    };
    format!(
        "finding the smallest budgets: {whose}, replay {} ({:.0} %)…",
        p.replay,
        100.0 * p.events.0 as f64 / p.events.1.max(1) as f64
    )
}

/// The trace picked in `#compare-source`.
async fn load(page: Page, source: &str) -> Result<Arc<Trace>, String> {
    match source {
        "upload" => page
            .uploaded
            .get_untracked()
            .ok_or_else(|| "no uploaded trace: pick an RMM CSV in \"Replay a trace\" first".into()),
        "recording" => {
            let csv = page
                .with_model(|m| m.recording_csv().0.to_string())
                .ok_or("the page has no pool yet")?;
            Trace::parse("page recording", csv.as_bytes())
                .map(Arc::new)
                .map_err(|e| {
                    format!(
                        "the page's recording cannot be replayed yet ({e}): allocate something first"
                    )
                })
        }
        name => {
            let bytes = fetch_bytes(&format!("samples/{name}.csv.gz")).await?;
            Trace::from_bytes(name, &bytes)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }
    }
}

/// Starts comparing the trace from `source` at `speed` operations a second.
async fn start(page: Page, source: String, speed: f64) {
    page.error.set(None);
    let trace = match load(page, &source).await {
        Ok(t) => t,
        Err(e) => return page.fail(e),
    };
    let name = trace.name.clone();
    match Compare::new(trace, SimDevice::PAGE, speed) {
        Ok(mut c) => {
            let id = c.id();
            page.peak.set(Some(c.peak().clone()));
            page.scrub.set(None);
            // The scrubber shows the new comparison at once (its start), not
            // the old one's moment until the tick's next look.
            page.moment.set(c.moment(None, MAPS_SHOWN));
            page.compare_view.set(CompareView::of(&c));
            page.say(format!(
                "comparing {name} side by side: vrampool and PyTorch's scheme, each on a simulated {} device",
                fmt_bytes(SimDevice::PAGE.capacity)
            ));
            page.set_compare(Some(c));
            spawn_local(run_compare(page, id));
        }
        Err(e) => page.fail(format!("cannot compare {name}: {e}")),
    }
}

/// The side-by-side panel; on the page's first look it compares the first sample.
#[component]
pub fn ComparePanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let source = RwSignal::new(SAMPLES[0].to_string());
    let speed = RwSignal::new("10000".to_string());
    let bisecting = RwSignal::new(false);
    let view = page.compare_view;
    let compare = move |_| match parse_speed(&speed.get_untracked()) {
        Ok(speed) => spawn_local(start(page, source.get_untracked(), speed)),
        Err(e) => page.fail(e),
    };
    let stop = move |_| {
        page.with_compare(Compare::stop);
    };
    let budgets = move |_| {
        if bisecting.get_untracked() {
            return;
        }
        match view.with_untracked(|v| (v.id != 0).then_some(v.id)) {
            Some(id) => spawn_local(find_budgets(page, id, bisecting)),
            None => page.fail("press compare first: the budgets are found for its trace"),
        }
    };
    // The first look shows what the project is for: the first sample, compared.
    spawn_local(start(page, SAMPLES[0].to_string(), 10_000.0));
    let upload_name = move || {
        page.uploaded
            .with(|t| t.as_ref().map(|t| format!("your upload: {}", t.name)))
    };
    view! {
        <section class="compare" id="side-by-side">
            <h2>"Side by side: vrampool and PyTorch's caching allocator on the same trace"</h2>
            <div class="row">
                <select id="compare-source" prop:value=source on:change=move |e| source.set(event_target_value(&e))>
                    {SAMPLES.iter().map(|n| view! { <option value=*n>{format!("{n} (PyTorch, sizes ÷ 64)")}</option> }).collect_view()}
                    <option value="upload" disabled=move || upload_name().is_none()>
                        {move || upload_name().unwrap_or_else(|| "your upload (load an RMM CSV below first)".into())}
                    </option>
                    <option value="recording">{move || format!("this page's own recording ({} events so far)", grouped(page.recorded.get()))}</option>
                </select>
                <label>" ops/s " <input id="compare-speed" prop:value=speed on:input=move |e| speed.set(event_target_value(&e)) /></label>
                <button id="compare" class="primary" on:click=compare>"compare"</button>
                <button id="compare-stop" on:click=stop>"stop"</button>
                <button id="compare-budget" on:click=budgets>
                    {move || if bisecting.get() { searching(view.with(|v| v.budget_progress)) } else { "find the smallest budgets".into() }}
                </button>
                <span class="hint">"Both run on a simulated 4 GiB device with WebGPU's 256 MiB largest buffer, as "<code>"vrampool replay --simulate --compare --capacity 4294967296 --max-buffer-size 268435456"</code>" does; once every event is replayed (not after stop), the table adds PyTorch with expandable_segments on the same trace: what virtual memory, which WebGPU lacks, would hold."</span>
            </div>
            <p id="compare-summary" class="summary">{move || view.with(CompareView::summary)}</p>
            <Show when=move || view.with(|v| v.id != 0)>
                <div class="two">
                    <CompareChart />
                    <PeakPanel />
                </div>
                <CompareTable />
                <Scrubber />
            </Show>
        </section>
    }
}

/// Both reserved lines and the live line over the trace's events.
#[component]
fn CompareChart() -> impl IntoView {
    let page = expect_context::<Page>();
    let view = page.compare_view;
    let geometry = Memo::new(move |_| view.with(Geometry::of));
    let hover = RwSignal::new(None::<f64>);
    let under = Memo::new(move |_| {
        let frac = hover.get()?;
        view.with(|v| {
            let e = frac * v.events as f64;
            let i = v.series.partition_point(|p| (p.event as f64) < e);
            v.series
                .get(i.min(v.series.len().saturating_sub(1)))
                .copied()
        })
    });
    let readout = move || match under.get() {
        Some(p) => {
            let every = view.with(|v| v.every);
            format!(
                "events to {}{}: live {}, vrampool reserved {}, PyTorch's scheme reserved {} (click to scrub there)",
                grouped(p.event as u64),
                if every > 1 {
                    format!(" (highest of {every} events)")
                } else {
                    String::new()
                },
                fmt_bytes(p.live),
                fmt_bytes(p.reserved[0]),
                fmt_bytes(p.reserved[1])
            )
        }
        None => "point at the chart for the figures at that event".into(),
    };
    let at = move || {
        let events = geometry.with(|g| g.events);
        let e = page
            .scrub
            .get()
            .unwrap_or_else(|| view.with(|v| v.position));
        Geometry::x(events, e as f64)
    };
    let click = move |ev: leptos::ev::MouseEvent| {
        if let Some(frac) = pointer_fraction(&ev, CHART) {
            let e = view.with_untracked(|v| (frac * v.events as f64).round() as usize);
            scrub_to(page, Some(e));
        }
    };
    let line = move |i: usize| move || geometry.with(|g| g.reserved[i].clone());
    view! {
        <div class="chart">
            <svg id="compare-chart" class="plot" viewBox=CHART.view_box()
                 data-position=move || view.with(|v| v.position.to_string())
                 on:mousemove=move |ev| hover.set(pointer_fraction(&ev, CHART))
                 on:mouseleave=move |_| hover.set(None)
                 on:click=click>
                {move || geometry.with(|g| {
                    let events = g.events;
                    axes(CHART, g.y_ticks.clone(), g.top, g.x_ticks.clone(), &move |e| Geometry::x(events, e),
                         "trace events (allocations and frees)".into(), "bytes")
                })}
                <polyline class="live" points=move || geometry.with(|g| g.live.clone()) />
                <polyline class="reserved" points=line(0) />
                <polyline class="pytorch" points=line(1) />
                <line class="scrub-at" x1=at x2=at y1=CHART.top y2=CHART.base() />
            </svg>
            <div class="legend">
                {swatch("live", "live (what the trace holds)".into())}
                {swatch("reserved", "vrampool reserved".into())}
                {swatch("pytorch", "PyTorch's scheme reserved".into())}
            </div>
            <p class="readout" id="compare-readout">{readout}</p>
        </div>
    }
}

/// One row of `#compare-table`: a policy's figures and smallest budget.
fn row(
    name: &'static str,
    f: LaneFigures,
    budget: Option<Option<(f64, u64)>>,
) -> impl IntoView + use<> {
    let (min, min_allocs) = match budget {
        Some(Some((x, n))) => (format!("{x:.3} ×"), n.to_string()),
        Some(None) => ("> 4 ×".into(), "–".into()),
        None => ("–".into(), "–".into()),
    };
    view! {
        <tr
            data-policy=name
            data-peak-live=f.peak_live.to_string()
            data-peak-reserved=f.peak_reserved.to_string()
            data-ratio=f.ratio().to_string()
            data-device-allocs=f.device_allocs.to_string()
            data-device-frees=f.device_frees.to_string()
            data-cache-hits=f.cache_hits.to_string()
            data-allocs=f.allocs.to_string()
            data-hit-rate=f.hit_rate().to_string()
            data-ooms=f.ooms.to_string()
            data-min-budget=budget.map(|b| b.map_or("none".to_string(), |b| b.0.to_string())).unwrap_or_default()
            data-min-budget-allocs=budget.flatten().map(|b| b.1.to_string()).unwrap_or_default()
        >
            <td>{match name {
                "vrampool" => "vrampool",
                "pytorch" => "PyTorch's scheme (Config::pytorch)",
                _ => "PyTorch with expandable_segments: virtual memory, which WebGPU lacks (simulated)",
            }}</td>
            <td>{fmt_bytes(f.peak_live)}</td>
            <td>{fmt_bytes(f.peak_reserved)}</td>
            <td>{format!("{:.3}", f.ratio())}</td>
            <td>{f.device_allocs}</td>
            <td>{f.device_frees}</td>
            <td>{f.cache_hits}</td>
            <td>{format!("{:.1} %", 100.0 * f.hit_rate())}</td>
            <td>{f.ooms}</td>
            <td>{min}</td>
            <td>{min_allocs}</td>
        </tr>
    }
}

/// The harness's `--compare` figures for both policies.
#[component]
fn CompareTable() -> impl IntoView {
    let view = expect_context::<Page>().compare_view;
    // The table changes with the figures, not with every chart point.
    let rows = Memo::new(move |_| {
        view.with(|v| (v.figures, v.budgets, v.expandable, v.expandable_budget))
    });
    view! {
        <table id="compare-table"
               data-id=move || view.with(|v| v.id.to_string())
               data-done=move || view.with(|v| v.done.to_string())
               data-trace=move || view.with(|v| v.trace.clone())
               data-events=move || view.with(|v| v.position.to_string())
               data-millis=move || view.with(|v| v.millis.map(|m| m.to_string()).unwrap_or_default())>
            <thead><tr>
                <th>"policy"</th><th>"peak live"</th><th>"peak reserved"</th><th>"reserved ÷ live"</th>
                <th>"device allocations"</th><th>"device frees"</th><th>"cache hits"</th><th>"hit rate"</th>
                <th>"OOMs"</th><th>"smallest budget (× peak live)"</th><th>"device allocations at it"</th>
            </tr></thead>
            <tbody>
                {move || rows.with(|(f, b, x, xb)| (
                    row("vrampool", f[0], b[0]),
                    row("pytorch", f[1], b[1]),
                    x.map(|x| row("expandable", x, *xb)),
                ))}
            </tbody>
        </table>
    }
}

/// The figures of one policy at the scrubbed event.
fn lane_figures(name: &'static str, f: LaneFigures) -> impl IntoView + use<> {
    view! {
        <span class="lane" data-policy=name
              data-reserved=f.reserved.to_string()
              data-allocated=f.allocated.to_string()
              data-peak-reserved=f.peak_reserved.to_string()
              data-device-allocs=f.device_allocs.to_string()
              data-cache-hits=f.cache_hits.to_string()>
            {format!(
                "{name}: reserved {} (peak so far {}), {} device allocations, {} cache hits",
                fmt_bytes(f.reserved),
                fmt_bytes(f.peak_reserved),
                f.device_allocs,
                f.cache_hits
            )}
        </span>
    }
}

/// `#scrub`: any event of the replay, with both segment maps and the figures then.
#[component]
fn Scrubber() -> impl IntoView {
    let page = expect_context::<Page>();
    let view = page.compare_view;
    let moment = page.moment;
    let scrubbed = move |ev: leptos::ev::Event| {
        if let Ok(at) = event_target_value(&ev).parse::<usize>() {
            scrub_to(page, Some(at));
        }
    };
    let follow = move |_| scrub_to(page, None);
    let map = move |lane: usize, name: &'static str| {
        let heading = move || {
            moment.with(|m: &Moment| {
                let (bars, hidden) = &m.maps[lane];
                format!(
                    "{name}: {} reserved in {} segments",
                    fmt_bytes(m.figures[lane].reserved),
                    bars.len() + hidden
                )
            })
        };
        view! {
            <div class="lane-map">
                <h3>{heading}</h3>
                <div class="segmap">
                    <SegmentCanvas id=format!("compare-map-{}", POLICIES[lane].name())
                                   map=Memo::new(move |_| moment.with(|m: &Moment| m.maps[lane].clone()))
                                   age_unit="events" />
                </div>
            </div>
        }
    };
    view! {
        <div class="scrubber">
            <div class="row">
                <label for="scrub">"event "</label>
                <input id="scrub" type="range" min="0"
                       max=move || view.with(|v| v.position.to_string())
                       prop:value=move || page.scrub.get().unwrap_or_else(|| view.with(|v| v.position)).to_string()
                       on:input=scrubbed />
                <button id="scrub-live" on:click=follow>"follow the replay"</button>
            </div>
            <p id="scrub-figures"
               data-position=move || moment.with(|m| m.position.to_string())
               data-live=move || moment.with(|m| m.live.to_string())>
                {move || moment.with(|m| format!(
                    "After event {} of {}: live {}. ",
                    grouped(m.position as u64),
                    grouped(view.with(|v| v.events) as u64),
                    fmt_bytes(m.live)
                ))}
                {move || moment.with(|m| (lane_figures("vrampool", m.figures[0]), "; ", lane_figures("pytorch", m.figures[1])))}
            </p>
            // A scrub back on a long trace re-simulates a slice at a time.
            {move || page.scrub.get().filter(|&at| moment.with(|m| m.position != at)).map(|at| view! {
                <p id="scrub-seeking" class="hint">{format!("re-simulating both policies to event {}…", grouped(at as u64))}</p>
            })}
            <SegmentLegend />
            <div class="two">
                {map(0, "vrampool")}
                {map(1, "PyTorch's scheme")}
            </div>
        </div>
    }
}
