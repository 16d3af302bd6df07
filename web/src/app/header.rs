//! The header: which device the pool runs on (`#backend`), and the notice
//! that says why, where the browser has no WebGPU.

use leptos::prelude::*;

use super::device::DeviceView;
use super::page::Page;

/// The title, the device badge and, on the simulated device, the notice.
#[component]
pub fn Header() -> impl IntoView {
    let device = expect_context::<Page>().device;
    let kind = move || device.with(DeviceView::kind);
    view! {
        <header>
            <h1>"vrampool"</h1>
            <span class="tag">"a caching GPU memory pool for wgpu, live"</span>
            <span
                id="backend"
                data-kind=kind
                data-max-buffer=move || device.with(|d| d.max_buffer.to_string())
            >
                {move || device.with(|d| if d.ready { d.backend.clone() } else { "starting…".into() })}
            </span>
        </header>
        <Show when=move || kind() == "simulated">
            <p class="notice" id="no-webgpu">
                "No WebGPU device here, so the page runs the same pool on a simulated device: every figure is real, no shader runs. "
                {move || device.with(|d| format!("Why: {}.", d.note))}
            </p>
        </Show>
    }
}
