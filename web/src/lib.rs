//! `vrampool-web`: the live page. A Leptos (client-side rendered) app that runs
//! the vrampool core on the browser's WebGPU device — or, where there is none,
//! on the simulated device — and shows allocation as it happens: a timeline of
//! allocated / reserved / cached against the budget, per-pool figures and
//! counters, a segment map and an event log; with buttons to allocate, free,
//! `empty_cache`, set limits, replay traces, train an MLP and induce OOM.
//! Across the top, a trace replayed side by side through vrampool and the
//! PyTorch preset (both reserved lines on one chart, the harness's
//! `--compare` figures, what holds memory at the peak, a scrubber back
//! through the replay); the snapshot and the page's own recording download.
//!
//! `model` is the page's state, natively testable; `app` is the view, one
//! component per panel. Build and serve it with `cargo xtask serve` (see the
//! README).

pub mod model;

#[cfg(target_arch = "wasm32")]
mod app;

pub use model::{allocate_and_free_half, simulated_pool};

/// A device on the browser's WebGPU adapter, with the adapter's own limits
/// (so `max_buffer_size` is the hardware's). The error says plainly why there is
/// none: no `navigator.gpu`, or no adapter behind it.
#[cfg(target_arch = "wasm32")]
pub async fn open_webgpu() -> Result<(wgpu::AdapterInfo, wgpu::Device, wgpu::Queue), String> {
    let has_gpu = web_sys::window()
        .and_then(|w| js_sys::Reflect::get(&w.navigator(), &"gpu".into()).ok())
        .is_some_and(|g| !g.is_undefined() && !g.is_null());
    if !has_gpu {
        return Err("this browser has no WebGPU (navigator.gpu is missing)".into());
    }
    if !wgpu::util::is_browser_webgpu_supported().await {
        return Err(
            "navigator.gpu is there but offers no adapter (WebGPU is disabled, or no GPU it supports)"
                .into(),
        );
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::BROWSER_WEBGPU,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions::default())
        .await
        .map_err(|e| format!("WebGPU found no adapter ({e})"))?;
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("vrampool page"),
            required_limits: adapter.limits(),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("WebGPU refused a device: {e}"))?;
    Ok((adapter.get_info(), device, queue))
}

/// Mounts the page into `<body>` (called by wasm-bindgen when the module loads).
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
