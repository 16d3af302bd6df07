//! The training panel: an MLP trained on pool tensors with f32 / f16 / int8
//! weights, step by step in its own task (not in the tick), and the largest
//! batch that fits the budget.

use std::rc::Rc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Pool, fmt_bytes};
use vrampool_workload::{Dtype, MlpConfig, Trainer, find_batch};

use super::page::{BUSY, GpuClaim, Page, REPLAYING, now_s, replaying, rest_of_tick, sleep};
use crate::model::{Backing, ModelCell};

/// What the training status shows.
#[derive(Clone, Default, PartialEq)]
pub struct TrainView {
    /// Which training this is (a stopped one's task ends when it sees a later one).
    run: u64,
    /// Steps are being taken.
    pub running: bool,
    /// Steps done.
    pub step: u32,
    /// (step, loss) of the steps that read the loss back.
    pub losses: Vec<(u32, f32)>,
    /// Bytes of the weights in their dtype.
    pub weight_bytes: u64,
    /// Bytes they would take as f32.
    pub f32_weight_bytes: u64,
}

impl TrainView {
    /// Stops the training (its task ends before its next step).
    pub fn stop(&mut self) {
        self.running = false;
    }

    /// The status line: step, loss first and last read, weight bytes.
    fn status(&self) -> String {
        if self.losses.is_empty() && !self.running {
            return String::new();
        }
        let loss = match (self.losses.first(), self.losses.last()) {
            (Some(a), Some(b)) => format!("loss {:.4} → {:.4}", a.1, b.1),
            _ => "loss …".into(),
        };
        format!(
            "step {}: {loss}; weights {} ({} saved vs f32)",
            self.step,
            fmt_bytes(self.weight_bytes),
            fmt_bytes(self.f32_weight_bytes - self.weight_bytes)
        )
    }
}

/// Makes the trainer (its weights come from the pool, under `claim`, as
/// every allocation of the page's tasks is), then trains.
async fn start_training(page: Page, backing: Rc<dyn Backing>, cfg: MlpConfig, claim: GpuClaim) {
    let Some(pool) = backing.webgpu() else { return };
    let made = Trainer::new(pool, cfg).await;
    // Each step claims the GPU again.
    drop(claim);
    let trainer = match made {
        Ok(t) => t,
        Err(e) => return page.fail(format!("cannot start training: {e}")),
    };
    let mut run = 0;
    page.training.update(|t| {
        run = t.run + 1;
        *t = TrainView {
            run,
            running: true,
            weight_bytes: cfg.weight_bytes(),
            f32_weight_bytes: cfg.f32_weight_bytes(),
            ..TrainView::default()
        };
    });
    page.say(format!(
        "training: batch {}, hidden {}, {:?} weights",
        cfg.batch, cfg.hidden, cfg.dtype
    ));
    train(page, run, &backing, pool, trainer).await;
}

/// Training's own loop: at most one step a tick, each holding the GPU,
/// reading the loss back every fifth step, until it is stopped, a step
/// fails, or a new pool replaces `backing` (the settings, a replay), as a
/// new device stops it.
async fn train(page: Page, run: u64, backing: &Rc<dyn Backing>, pool: &Pool, mut trainer: Trainer) {
    let current = move || page.training.with_untracked(|t| t.running && t.run == run);
    let why = loop {
        if !current() {
            return;
        }
        if page.with_model(|m| m.uses(backing)) != Some(true) {
            break "a new pool replaced its own".to_string();
        }
        let began = now_s();
        if let Some(_claim) = page.claim_gpu() {
            let read_loss = page.training.with_untracked(|t| t.step % 5 == 0);
            match trainer.step(pool, read_loss).await {
                Ok(report) => page.training.update(|t| {
                    if t.run == run {
                        t.step += 1;
                        t.losses.extend(report.loss.map(|l| (report.step, l)));
                    }
                }),
                Err(e) => break e.to_string(),
            }
        }
        sleep(rest_of_tick(began)).await;
    };
    page.training.update(|t| {
        if t.run == run {
            t.stop();
        }
    });
    page.say(format!("training stopped: {why}"));
}

/// Batch size and dtype; train / stop, find the largest batch, and the loss.
#[component]
pub fn TrainingPanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let batch = RwSignal::new("256".to_string());
    let dtype = RwSignal::new("f32".to_string());
    let config = move || MlpConfig {
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
    let train_or_stop = move |_| {
        if page.training.with_untracked(|t| t.running) {
            page.training.update(TrainView::stop);
            return;
        }
        if replaying(page) {
            return page.fail(REPLAYING);
        }
        let Some(backing) = page
            .with_model(|m| m.backing())
            .filter(|b| b.webgpu().is_some())
        else {
            return page.fail("training runs shaders: it needs a WebGPU device");
        };
        let Some(claim) = page.claim_gpu() else {
            return page.fail(BUSY);
        };
        spawn_local(start_training(page, backing, config(), claim));
    };
    let fit_batch = move |_| {
        let Some(limit) = page.with_model(|m| m.stats().limit).flatten() else {
            return page.fail("set a budget first: the batch is fitted to it");
        };
        match find_batch(&config(), limit, 8192) {
            Some(b) => {
                batch.set(b.to_string());
                page.say(format!(
                    "largest batch within {} (dry run on the simulated device): {b}",
                    fmt_bytes(limit)
                ));
            }
            None => page.fail(format!("not even a batch of 1 fits {}", fmt_bytes(limit))),
        }
    };
    let training = page.training;
    view! {
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
            <button id="btn-train" on:click=train_or_stop>{move || if training.with(|t| t.running) { "stop training" } else { "train" }}</button>
            <button id="btn-find-batch" on:click=fit_batch>"find the largest batch that fits"</button>
        </div>
        <p id="train-status" data-step=move || training.with(|t| t.step.to_string())>{move || training.with(TrainView::status)}</p>
    }
}
