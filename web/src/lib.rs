//! `vrampool-web`: the live page. A Leptos (client-side rendered) app that runs
//! the vrampool core on the browser's WebGPU device — or, where there is none,
//! on the simulated device — and shows allocation as it happens: a timeline of
//! allocated / reserved / cached against the budget, per-pool figures and
//! counters, a segment map and an event log; with buttons to allocate, free,
//! `empty_cache`, set limits, replay traces, train an MLP and induce OOM.
//!
//! Build and serve it with `cargo xtask serve` (see the README).

pub mod model;

#[cfg(target_arch = "wasm32")]
mod app;

pub use model::{allocate_and_free_half, simulated_pool};

/// Mounts the page into `<body>` (called by wasm-bindgen when the module loads).
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
