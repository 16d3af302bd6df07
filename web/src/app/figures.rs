//! The figures: allocated / reserved / cached, peak and the counters, each
//! with its value in `data-value` for the tests.

use leptos::prelude::*;
use vrampool::{Stats, fmt_bytes};

use super::page::Page;

/// The grid of figures.
#[component]
pub fn Figures() -> impl IntoView {
    view! {
        <div class="grid">
            <Figure id="stat-allocated" label="allocated" get=|s| s.total.allocated_bytes.current bytes=true />
            <Figure id="stat-reserved" label="reserved" get=|s| s.total.reserved_bytes.current bytes=true />
            <Figure id="stat-cached" label="cached" get=|s| s.total.cached_bytes.current bytes=true />
            <Figure id="stat-peak-reserved" label="peak reserved" get=|s| s.total.reserved_bytes.peak bytes=true />
            <Figure id="ctr-device-allocs" label="device allocations" get=|s| s.counters.device_allocs />
            <Figure id="ctr-device-frees" label="device frees" get=|s| s.counters.device_frees />
            <Figure id="ctr-hits" label="cache hits" get=|s| s.counters.cache_hits />
            <Figure id="ctr-ooms" label="OOMs" get=|s| s.counters.ooms />
            <Figure id="ctr-retries" label="retries" get=|s| s.counters.alloc_retries />
            <Figure id="ctr-released" label="released by last empty_cache" get=|s| s.counters.last_empty_cache_bytes bytes=true />
        </div>
    }
}

/// One figure: `get` of the stats, in bytes or as a count.
#[component]
fn Figure(
    id: &'static str,
    label: &'static str,
    get: fn(&Stats) -> u64,
    #[prop(optional)] bytes: bool,
) -> impl IntoView {
    let stats = expect_context::<Page>().stats;
    let value = Memo::new(move |_| stats.with(|s| s.as_ref().map_or(0, get)));
    view! {
        <div class="figure">
            <span class="label">{label}</span>
            <span class="value" id=id data-value=move || value.get().to_string()>
                {move || if bytes { fmt_bytes(value.get()) } else { value.get().to_string() }}
            </span>
        </div>
    }
}
