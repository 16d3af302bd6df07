//! The header: which device the pool runs on (`#backend`), and the notice
//! that says why, where the browser has no WebGPU, and how to turn it on in
//! Chrome, Edge and Firefox.

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
            <div class="notice" id="no-webgpu">
                <p>
                    "No WebGPU device here, so the page runs the same pool on a simulated device: every figure is real, no shader runs. "
                    {move || device.with(|d| format!("Why: {}.", d.note))}
                </p>
                <p>"To turn WebGPU on, then reload:"</p>
                <ul id="webgpu-help">
                    <li><b>"Chrome"</b>" 113 or later has it on Windows, macOS, ChromeOS and Android. On Linux, open "<code>"chrome://flags/#enable-unsafe-webgpu"</code>", set it to Enabled (and "<code>"chrome://flags/#enable-vulkan"</code>" too), and relaunch. If it is still off, "<code>"chrome://gpu"</code>" says why: hardware acceleration must be on in Settings › System."</li>
                    <li><b>"Edge"</b>" 113 or later: the same as Chrome, at "<code>"edge://flags/#enable-unsafe-webgpu"</code>" and "<code>"edge://gpu"</code>"."</li>
                    <li><b>"Firefox"</b>" 141 or later has it on Windows. On macOS and Linux, open "<code>"about:config"</code>", set "<code>"dom.webgpu.enabled"</code>" to true and restart (Firefox Nightly has it on already); "<code>"about:support"</code>" shows whether it took."</li>
                </ul>
            </div>
        </Show>
    }
}
