//! The replay panel: a bundled trace or the person's own RMM CSV (kept to be
//! compared side by side too), replayed on the page's pool at a chosen
//! speed by its own task through core's replay driver, and the figures it
//! ends with, beside PyTorch's scheme on the same trace (checked by the
//! end-to-end test against the harness).

use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Growth, Trace, fmt_bytes};

use super::page::{Page, RENEWING, TICK, now_s, rest_of_tick, sleep};
use crate::model::{
    MAX_UPLOAD_ROWS, Model, ModelCell, ReplayResult, SAMPLES, advance_replay, parse_speed,
    refuse_upload,
};

/// Events replayed at most per tick, so a slow device falls behind instead of freezing.
const MAX_EVENTS_PER_TICK: usize = 5000;

/// What the replay status shows (written by the tick).
#[derive(Clone, Default, PartialEq)]
pub struct ReplayView {
    /// The trace, events taken and events in all, while a replay runs.
    pub progress: Option<(String, usize, usize)>,
    /// The last replay's figures.
    pub result: Option<ReplayResult>,
}

impl ReplayView {
    /// The replay of `m`.
    pub fn of(m: &Model) -> ReplayView {
        ReplayView {
            progress: m.replay.as_ref().map(|r| {
                let (i, n) = r.progress();
                (r.trace_name().to_string(), i, n)
            }),
            result: m.replay_result.clone(),
        }
    }

    /// The status line: progress, or the last replay's figures, each
    /// naming its trace (the sample picked may since be another).
    fn status(&self) -> String {
        match (&self.progress, &self.result) {
            (Some((name, i, n)), _) => format!("replaying {name}: {i} / {n} events"),
            (None, Some(r)) => {
                let mut line = format!(
                    "{} {}: {} events. vrampool (this pool): peak reserved {} = {:.3} × peak live, {} device allocations, {} cache hits, {} OOMs",
                    r.trace,
                    r.word(),
                    r.ops,
                    fmt_bytes(r.peak_reserved),
                    r.ratio(r.peak_reserved),
                    r.device_allocs,
                    r.cache_hits,
                    r.ooms
                );
                if let Some(t) = r.twin {
                    line.push_str(&format!(
                        ". PyTorch's scheme on the same trace (simulated): peak reserved {} = {:.3} ×, {} device allocations, {} cache hits, {} OOMs",
                        fmt_bytes(t.peak_reserved),
                        r.ratio(t.peak_reserved),
                        t.device_allocs,
                        t.cache_hits,
                        t.ooms
                    ));
                }
                line
            }
            _ => String::new(),
        }
    }
}

/// Drives replay `id` until it ends: each tick, the events due at its speed,
/// holding the GPU meanwhile; between ticks the page draws.
async fn run_replay(page: Page, id: u64) {
    loop {
        let began = now_s();
        let Some(due) = page
            .with_model(|m| m.replay_due(id, began, TICK.as_secs_f64(), MAX_EVENTS_PER_TICK))
            .flatten()
        else {
            return;
        };
        if let Some(_claim) = page.claim_gpu()
            && !advance_replay(&page, id, due).await
        {
            return;
        }
        sleep(rest_of_tick(began)).await;
    }
}

/// Fetches a file served beside the page.
pub async fn fetch_bytes(url: &str) -> Result<Vec<u8>, String> {
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

/// Sample or file, speed, replay / stop, and the replay's status and result.
#[component]
pub fn ReplayPanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let sample = RwSignal::new(SAMPLES[0].to_string());
    let speed = RwSignal::new("10000".to_string());
    let trace_error = RwSignal::new(None::<String>);
    // Stops pressed so far: a replay asked for before one (its trace still
    // read, or its pool still awaited) does not start.
    let stops = StoredValue::new(0u32);
    let stopped_since = move |asked: u32| {
        let stopped = stops.get_value() != asked;
        if stopped {
            page.say("replay stopped before it began".into());
        }
        stopped
    };

    let start = move |trace: Arc<Trace>, asked: u32| {
        if stopped_since(asked) {
            return;
        }
        let speed = match parse_speed(&speed.get_untracked()) {
            Ok(speed) => speed,
            Err(e) => return trace_error.set(Some(e)),
        };
        // Its fresh pool would be replaced, and the replay cut short, when
        // the settings' new pool is installed.
        if page.renewing() {
            return trace_error.set(Some(RENEWING.into()));
        }
        let refused = move |e: String| {
            page.say(format!("cannot replay: {e}"));
            trace_error.set(Some(e));
        };
        let Some(prepared) = page.with_model(|m| {
            let config = m.replay_config(&trace)?;
            Ok::<_, vrampool::Error>((config, m.backing(), m.growth()))
        }) else {
            return trace_error.set(Some(
                "the device is still opening: try again in a moment".into(),
            ));
        };
        let (config, backing, growth) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return refused(e.to_string()),
        };
        if growth == Growth::OnDemand {
            // Nothing to await: the fresh pool at once.
            match backing.renew(config) {
                Ok(new) => {
                    if let Some(id) = page.with_model(|m| m.start_replay_on(new, trace, speed)) {
                        spawn_local(run_replay(page, id));
                    }
                }
                Err(e) => refused(e.to_string()),
            }
            return;
        }
        // A preallocating pool awaits the device's answer for its segments
        // (Pool::new_async), refusing what would change the pool meanwhile.
        let renewing = page.mark_renewing();
        spawn_local(async move {
            let made = backing.renew_async(config).await;
            drop(renewing);
            if stopped_since(asked) {
                return; // its new pool dropped: the old one stays, blocks and all
            }
            let started = page.with_model(|m| match made {
                Ok(_) if !m.uses(&backing) => Err("the pool changed meanwhile".to_string()),
                Ok(new) => Ok(m.start_replay_on(new, trace, speed)),
                Err(e) => Err(e.to_string()),
            });
            match started {
                Some(Ok(id)) => run_replay(page, id).await,
                Some(Err(e)) => refused(e),
                None => {}
            }
        });
    };
    let replay_sample = move |_| {
        trace_error.set(None);
        // The last result stays until the new replay starts: a fetch that
        // fails leaves it shown, with the error (the status names its trace).
        let name = sample.get_untracked();
        let asked = stops.get_value();
        spawn_local(async move {
            let trace = fetch_bytes(&format!("samples/{name}.csv.gz"))
                .await
                .and_then(|bytes| Trace::from_bytes(&name, &bytes).map_err(|e| e.to_string()));
            match trace {
                Ok(t) => start(Arc::new(t), asked),
                Err(e) => trace_error.set(Some(e)),
            }
        });
    };
    let stop = move |_| {
        stops.update_value(|n| *n = n.wrapping_add(1));
        page.with_model(Model::finish_replay);
    };
    let replay_file = move |ev: leptos::ev::Event| {
        trace_error.set(None);
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else {
            return;
        };
        let name = file.name();
        let instead = format!("the harness replays any size: vrampool replay --simulate {name}");
        if let Some(e) = refuse_upload(&name, file.size(), &instead) {
            page.say(format!("trace refused: {e}"));
            trace_error.set(Some(e));
            input.set_value("");
            return;
        }
        let asked = stops.get_value();
        spawn_local(async move {
            let bytes = match wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await {
                Ok(b) => js_sys::Uint8Array::new(&b).to_vec(),
                Err(_) => {
                    trace_error.set(Some(format!("cannot read {name}")));
                    return;
                }
            };
            match Trace::from_bytes_at_most(&name, &bytes, MAX_UPLOAD_ROWS) {
                Ok(t) => {
                    let t = Arc::new(t);
                    page.uploaded.set(Some(t.clone()));
                    start(t, asked);
                }
                Err(e) => {
                    let e = match e {
                        vrampool::trace::TraceError::TooManyRows { path, max } => format!(
                            "{path}: more than {max} rows, the most the page replays in a \
                             browser tab's memory; the harness replays any length: \
                             vrampool replay --simulate {path}"
                        ),
                        e => e.to_string(),
                    };
                    page.say(format!("trace refused: {e}"));
                    trace_error.set(Some(e));
                }
            }
        });
        input.set_value("");
    };

    let replay = page.replay;
    // One `data-*` attribute of `#replay-result`: a figure of the last result.
    let figure = move |get: fn(&ReplayResult) -> Option<u64>| {
        move || {
            replay.with(|r| {
                r.result
                    .as_ref()
                    .and_then(get)
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            })
        }
    };
    view! {
        <h2>"Replay a trace"</h2>
        <div class="row">
            <select id="sample" prop:value=sample on:change=move |e| sample.set(event_target_value(&e))>
                {SAMPLES.iter().map(|n| view! { <option value=*n>{format!("{n} (PyTorch, sizes ÷ 64)")}</option> }).collect_view()}
            </select>
            <label>" ops/s " <input id="speed" prop:value=speed on:input=move |e| speed.set(event_target_value(&e)) /></label>
        </div>
        <div class="row">
            <button id="btn-replay" on:click=replay_sample>"replay"</button>
            <button id="btn-stop" on:click=stop>"stop"</button>
            <label class="file">"or an RMM CSV: " <input id="trace-file" type="file" accept=".csv,.gz" on:change=replay_file /></label>
        </div>
        <p class="error" id="trace-error">{move || trace_error.get()}</p>
        <p id="replay-status">{move || replay.with(ReplayView::status)}</p>
        <div
            id="replay-result"
            data-done=move || replay.with(|r| (r.progress.is_none() && r.result.is_some()).to_string())
            data-ops=figure(|r| Some(r.ops))
            data-peak-reserved=figure(|r| Some(r.peak_reserved))
            data-device-allocs=figure(|r| Some(r.device_allocs))
            data-cache-hits=figure(|r| Some(r.cache_hits))
            data-ooms=figure(|r| Some(r.ooms))
            data-millis=figure(|r| Some(r.millis))
            data-twin-peak-reserved=figure(|r| r.twin.map(|t| t.peak_reserved))
            data-twin-device-allocs=figure(|r| r.twin.map(|t| t.device_allocs))
            data-twin-cache-hits=figure(|r| r.twin.map(|t| t.cache_hits))
        ></div>
    }
}
