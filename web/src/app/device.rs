//! The device: opening the browser's WebGPU device (or the simulated one,
//! saying why, where there is none), and the device-loss demo: destroy it on
//! purpose, watch allocations fail with `DeviceLost`, start over on a new one.

use std::rc::Rc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Pool, PoolOptions, fmt_bytes};

use super::page::{BUSY, Page};
use super::training::TrainView;
use crate::model::{Model, ModelCell};

/// What the header and the device-lost line show.
#[derive(Clone, Default, PartialEq)]
pub struct DeviceView {
    /// A device is open.
    pub ready: bool,
    /// "WebGPU: <adapter>" or the simulated device.
    pub backend: String,
    /// On the browser's WebGPU device (not the simulated one).
    pub webgpu: bool,
    /// The device's largest buffer.
    pub max_buffer: u64,
    /// Why the simulated device is in use.
    pub note: String,
    /// Why the WebGPU device was lost, once it was.
    pub lost: Option<String>,
}

impl DeviceView {
    /// The device of `m`.
    pub fn of(m: &Model) -> DeviceView {
        DeviceView {
            ready: true,
            backend: m.backend.clone(),
            webgpu: m.on_webgpu(),
            max_buffer: m.max_buffer,
            note: m.note.clone(),
            lost: m.lost.clone(),
        }
    }

    /// `#backend`'s `data-kind`: "starting", "webgpu" or "simulated".
    pub fn kind(&self) -> &'static str {
        match (self.ready, self.webgpu) {
            (false, _) => "starting",
            (true, true) => "webgpu",
            (true, false) => "simulated",
        }
    }
}

/// A model on the browser's WebGPU device, or on the simulated one (saying
/// why) where there is none.
pub async fn open_model() -> Model {
    match open_webgpu_model().await {
        Ok(m) => m,
        Err(why) => Model::simulated(&why),
    }
}

async fn open_webgpu_model() -> Result<Model, String> {
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
    let mut m = Model::new(Rc::new(pool), format!("WebGPU: {name}"), max_buffer);
    m.say(format!(
        "WebGPU device on {name}, max_buffer_size {}",
        fmt_bytes(max_buffer)
    ));
    Ok(m)
}

/// "destroy device" and "new device".
#[component]
pub fn DeviceControls() -> impl IntoView {
    let page = expect_context::<Page>();
    // What the pool does when the browser loses the GPU, on purpose.
    let destroy = move |_| {
        page.with_model(|m| match m.backing().webgpu() {
            Some(pool) => {
                pool.device().destroy();
                m.say("Device::destroy() called; the browser reports the loss shortly".into());
            }
            None => m.say("no WebGPU device to destroy (simulated device)".into()),
        });
    };
    let new_device = move |_| {
        let Some(claim) = page.claim_gpu() else {
            page.fail(BUSY);
            return;
        };
        page.error.set(None);
        page.training.update(TrainView::stop);
        let recording = page.with_model(|m| m.hand_over_recording());
        spawn_local(async move {
            let mut m = open_model().await;
            // The recording goes on; the old pool, its blocks and its lost
            // device go with the old model.
            if let Some(r) = recording {
                m.continue_recording(r);
            }
            page.model.set_value(Some(m));
            drop(claim);
        });
    };
    view! {
        <div class="row">
            <button id="btn-destroy-device" on:click=destroy>"destroy device"</button>
            <button id="btn-new-device" on:click=new_device>"new device"</button>
        </div>
    }
}

/// The line that says the device was lost, and why (`#device-lost`).
#[component]
pub fn DeviceLost() -> impl IntoView {
    let device = expect_context::<Page>().device;
    view! {
        <p class="error" id="device-lost" data-lost=move || device.with(|d| d.lost.is_some().to_string())>
            {move || device.with(|d| d.lost.as_ref().map(|w| format!("Device lost: {w}. Allocations fail with DeviceLost until you press \"new device\".")))}
        </p>
    }
}
