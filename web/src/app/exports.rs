//! Export and import: the pool's snapshot as JSON (`Engine::snapshot()`'s
//! serde form) and the page's own recording as RMM CSV, downloaded; a
//! snapshot JSON loaded back and shown as a segment map (a CSV loads back
//! through the replay panel's upload, and can then be compared).

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Snapshot, SnapshotState, fmt_bytes};
use wasm_bindgen::{JsCast, JsValue};

use super::page::Page;
use super::segments::{SHOWN, SegmentCanvas, SegmentLegend};
use crate::model::axes::grouped;
use crate::model::{ModelCell, SegmentView, refuse_upload, segment_views};

/// Makes the browser download `text` as a file called `name`.
fn download(name: &str, mime: &str, text: &str) -> Result<(), String> {
    let failed = |what: &'static str| move |_: JsValue| format!("cannot download {name}: {what}");
    let window = web_sys::window().ok_or("no window")?;
    let document = window.document().ok_or("no document")?;
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options)
        .map_err(failed("no Blob"))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(failed("no URL"))?;
    let a: web_sys::HtmlAnchorElement = document
        .create_element("a")
        .map_err(failed("no <a>"))?
        .dyn_into()
        .map_err(|_| format!("cannot download {name}: not an anchor"))?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    // The click has started the download; the URL may go once it was read.
    set_timeout(
        move || {
            let _ = web_sys::Url::revoke_object_url(&url);
        },
        std::time::Duration::from_secs(10),
    );
    Ok(())
}

/// An imported snapshot, as shown.
#[derive(Clone, PartialEq)]
struct Imported {
    /// Which import this is (1, 2, …): the same file loaded again is a new
    /// one, so `data-import` tells it has been read and shown.
    serial: u64,
    name: String,
    segments: usize,
    blocks: usize,
    reserved: u64,
    live: u64,
    bars: Vec<SegmentView>,
    hidden: usize,
}

impl Imported {
    fn of(serial: u64, name: String, s: &Snapshot) -> Imported {
        let blocks = s.segments.iter().flat_map(|g| &g.blocks);
        let (bars, hidden) = segment_views(s, SHOWN);
        Imported {
            serial,
            name,
            segments: s.segments.len(),
            blocks: blocks.clone().count(),
            reserved: s.segments.iter().map(|g| g.size).sum(),
            live: blocks
                .filter(|b| b.state == SnapshotState::Live)
                .map(|b| b.size)
                .sum(),
            bars,
            hidden,
        }
    }
}

/// The export buttons, the snapshot import and what it shows.
#[component]
pub fn ExportPanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let imported = RwSignal::new(None::<Imported>);
    let import_error = RwSignal::new(None::<String>);
    let export_snapshot = move |_| {
        page.error.set(None);
        let json = page.with_model(|m| serde_json::to_string_pretty(&m.snapshot()));
        match json {
            Some(Ok(json)) => {
                if let Err(e) = download("vrampool-snapshot.json", "application/json", &json) {
                    page.fail(e);
                }
            }
            Some(Err(e)) => page.fail(format!("cannot write the snapshot: {e}")),
            None => page.fail("no pool yet"),
        }
    };
    let export_csv = move |_| {
        page.error.set(None);
        let Some((csv, events)) = page.with_model(|m| {
            let (csv, events) = m.recording_csv();
            (csv.to_string(), events)
        }) else {
            return page.fail("no pool yet");
        };
        page.recorded.set(events);
        if let Err(e) = download("vrampool-recording.csv", "text/csv", &csv) {
            page.fail(e);
        }
    };
    let import = move |ev: leptos::ev::Event| {
        import_error.set(None);
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else {
            return;
        };
        let name = file.name();
        let instead = "pick a snapshot that a pool wrote (download snapshot, Pool::snapshot)";
        if let Some(e) = refuse_upload(&name, file.size(), instead) {
            import_error.set(Some(e));
            input.set_value("");
            return;
        }
        spawn_local(async move {
            let read = wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await;
            let Ok(buf) = read else {
                return import_error.set(Some(format!("cannot read {name}")));
            };
            let bytes = js_sys::Uint8Array::new(&buf).to_vec();
            match serde_json::from_slice::<Snapshot>(&bytes) {
                Ok(s) => match s.validate() {
                    Ok(()) => {
                        let serial =
                            imported.with_untracked(|i| i.as_ref().map_or(0, |i| i.serial));
                        imported.set(Some(Imported::of(serial + 1, name, &s)));
                    }
                    Err(e) => import_error.set(Some(format!(
                        "{name} is not a snapshot a pool could write: {e}"
                    ))),
                },
                Err(e) => import_error.set(Some(format!(
                    "{name} is not a vrampool snapshot (line {}, column {}: {e})",
                    e.line(),
                    e.column()
                ))),
            }
        });
        input.set_value("");
    };
    view! {
        <h2>"Export and import"</h2>
        <div class="row">
            <button id="export-snapshot" on:click=export_snapshot>"download snapshot (JSON)"</button>
            <button id="export-csv" data-events=move || page.recorded.get().to_string() on:click=export_csv>
                "download this page's recording (RMM CSV)"
            </button>
        </div>
        <p class="hint">
            {move || format!("Recorded so far: {} allocations and frees. ", grouped(page.recorded.get()))}
            "A recording loads back through the replay panel's file picker, and can then be compared side by side."
        </p>
        <div class="row">
            <label class="file">"view a snapshot: " <input id="import-snapshot" type="file" accept=".json,application/json" on:change=import /></label>
        </div>
        <p class="error" id="import-error">{move || import_error.get()}</p>
        {move || imported.get().map(|s| view! {
            <div id="imported-snapshot" data-import=s.serial.to_string() data-segments=s.segments.to_string() data-blocks=s.blocks.to_string()>
                <p>{format!(
                    "{}: {} segments, {} blocks, {} reserved, {} live",
                    s.name, s.segments, s.blocks, fmt_bytes(s.reserved), fmt_bytes(s.live)
                )}</p>
                <SegmentLegend />
                <div class="segmap">
                    <SegmentCanvas id="imported-map" map=Signal::stored((s.bars, s.hidden)) age_unit="" />
                </div>
            </div>
        })}
    }
}
