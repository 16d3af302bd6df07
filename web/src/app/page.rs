//! What the panels share through Leptos context: the model, the
//! side-by-side replay, the last uploaded trace, the signals the tick and
//! the tasks write, and the claim on the GPU that keeps a replay, a training
//! step and the buttons' allocations from interleaving; with the page's
//! clock and a sleep for those tasks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use vrampool::{Stats, Trace};

use super::compare::CompareView;
use super::device::DeviceView;
use super::replay::ReplayView;
use super::segments::SegmentsView;
use super::training::TrainView;
use crate::model::{Compare, Model, ModelCell, Moment, PeakStack, Point};

/// Said when a button that needs the GPU is pressed while a replay or a
/// training step is awaiting it.
pub const BUSY: &str =
    "busy: a replay, a training step or a new pool is using the GPU; press again in a moment";

/// Said when "allocate", "empty_cache()", "apply", "induce OOM" or "train"
/// is pressed during a replay, whose figures they would change.
pub const REPLAYING: &str = "a replay is running: stop it or let it end first";

/// Said when a button that would change the page's pool is pressed while a
/// new one (the settings', or a replay's that preallocates) awaits the device.
pub const RENEWING: &str = "a new pool is being made: press again in a moment";

/// Whether a replay is running on the page's pool.
pub fn replaying(page: Page) -> bool {
    page.with_model(|m| m.replay.is_some()) == Some(true)
}

/// The tick's period: figures at 20 Hz. Replays and training pace themselves to it.
pub const TICK: Duration = Duration::from_millis(50);

/// The page's shared state, provided once by `App` and read in each panel
/// with `expect_context::<Page>()`. Every field is a handle, so it is `Copy`.
#[derive(Clone, Copy)]
pub struct Page {
    /// The model; `None` until a device is open.
    pub model: StoredValue<Option<Model>, LocalStorage>,
    /// Whether a task is using the GPU pool (see [`Page::claim_gpu`]).
    busy: StoredValue<bool>,
    /// Whether a new pool awaits the device (see [`Page::renewing`]).
    renewing: StoredValue<bool>,
    /// What the last button that failed says (`#error`).
    pub error: RwSignal<Option<String>>,
    /// Which device, and whether it was lost (written by the tick).
    pub device: RwSignal<DeviceView>,
    /// The pool's figures (the tick, 20 Hz).
    pub stats: RwSignal<Option<Stats>>,
    /// What this pool's last `empty_cache()` released (the tick, and the button).
    pub released: RwSignal<Option<u64>>,
    /// The timeline (the tick, 20 Hz).
    pub points: RwSignal<VecDeque<Point>>,
    /// Replay progress and result (the tick).
    pub replay: RwSignal<ReplayView>,
    /// Training (its own loop).
    pub training: RwSignal<TrainView>,
    /// The segment map (the tick, 5 Hz).
    pub segments: RwSignal<SegmentsView>,
    /// The event log, newest first (the tick, 5 Hz).
    pub log: RwSignal<Vec<String>>,
    /// The side-by-side replay of both policies (its own task advances it).
    compare: StoredValue<Option<Compare>, LocalStorage>,
    /// Its figures and chart (the tick, 20 Hz).
    pub compare_view: RwSignal<CompareView>,
    /// What holds memory at its trace's peak (set when it starts).
    pub peak: RwSignal<Option<PeakStack>>,
    /// The event the scrubber is at; `None` follows the replay.
    pub scrub: RwSignal<Option<usize>>,
    /// Both policies at that event (the tick at 5 Hz while following, the
    /// scrubber as it moves).
    pub moment: RwSignal<Moment>,
    /// The last trace the person uploaded (to compare it too), shared by
    /// every replay of it: an upload of millions of events is not copied.
    pub uploaded: RwSignal<Option<Arc<Trace>>>,
    /// Events in the page's own recording, as of the last look.
    pub recorded: RwSignal<u64>,
}

impl Page {
    /// Fresh state, with no model yet.
    pub fn new() -> Page {
        Page {
            model: StoredValue::new_local(None),
            busy: StoredValue::new(false),
            renewing: StoredValue::new(false),
            error: RwSignal::new(None),
            device: RwSignal::new(DeviceView::default()),
            stats: RwSignal::new(None),
            released: RwSignal::new(None),
            points: RwSignal::new(VecDeque::new()),
            replay: RwSignal::new(ReplayView::default()),
            training: RwSignal::new(TrainView::default()),
            segments: RwSignal::new(SegmentsView::default()),
            log: RwSignal::new(Vec::new()),
            compare: StoredValue::new_local(None),
            compare_view: RwSignal::new(CompareView::default()),
            peak: RwSignal::new(None),
            scrub: RwSignal::new(None),
            moment: RwSignal::new(Moment::default()),
            uploaded: RwSignal::new(None),
            recorded: RwSignal::new(0),
        }
    }

    /// Runs `f` on the side-by-side replay; `None` when there is none.
    pub fn with_compare<R>(self, f: impl FnOnce(&mut Compare) -> R) -> Option<R> {
        // One non-generic call, as for the model.
        let (mut f, mut out) = (Some(f), None);
        self.update_compare(&mut |c| out = f.take().map(|f| f(c)));
        out
    }

    /// Replaces the side-by-side replay (its old task stops at its next step).
    pub fn set_compare(self, c: Option<Compare>) {
        self.compare.set_value(c);
    }

    fn update_compare(self, f: &mut dyn FnMut(&mut Compare)) {
        self.compare.update_value(|c| {
            if let Some(c) = c {
                f(c);
            }
        });
    }

    /// Adds a line to the event log.
    pub fn say(self, line: String) {
        self.with_model(|m| m.say(line));
    }

    /// Shows `message` in the error line.
    pub fn fail(self, message: impl Into<String>) {
        self.error.set(Some(message.into()));
    }

    /// Whether a new pool (the settings', or a replay's that preallocates)
    /// awaits the device: what would change the pool meanwhile (new limits,
    /// a replay's fresh pool) would be lost or cut short when it is
    /// installed, and is refused with [`RENEWING`]; what claims the GPU
    /// (allocations, training, a new device) is refused by
    /// [`Page::claim_gpu`].
    pub fn renewing(self) -> bool {
        self.renewing.get_value()
    }

    /// Marks a new pool as awaited until the mark is dropped.
    pub fn mark_renewing(self) -> Renewing {
        self.renewing.set_value(true);
        Renewing(self.renewing)
    }

    /// Claims the GPU pool for one task until the claim is dropped; `None`
    /// while another task holds it, or a new pool awaits the device (its
    /// install would drop what the task allocates). (On the simulated device,
    /// allocations and replay steps never yield, so they hold it only while
    /// they run.)
    pub fn claim_gpu(self) -> Option<GpuClaim> {
        if self.busy.get_value() || self.renewing.get_value() {
            return None;
        }
        self.busy.set_value(true);
        Some(GpuClaim(self.busy))
    }
}

impl ModelCell for Page {
    fn with_model<R>(&self, f: impl FnOnce(&mut Model) -> R) -> Option<R> {
        // Through one non-generic call, so the store's locking is compiled
        // once rather than at each of the page's many call sites.
        let (mut f, mut out) = (Some(f), None);
        self.update_model(&mut |m| out = f.take().map(|f| f(m)));
        out
    }
}

impl Page {
    fn update_model(self, f: &mut dyn FnMut(&mut Model)) {
        self.model.update_value(|m| {
            if let Some(m) = m {
                f(m);
            }
        });
    }
}

/// A new pool awaited ([`Page::mark_renewing`]); done when dropped.
pub struct Renewing(StoredValue<bool>);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.set_value(false);
    }
}

/// The GPU pool, claimed by one task ([`Page::claim_gpu`]); free again when dropped.
pub struct GpuClaim(StoredValue<bool>);

impl Drop for GpuClaim {
    fn drop(&mut self) {
        self.0.set_value(false);
    }
}

/// Sets `signal` to `value` only if it differs (so nothing redraws for nothing).
pub fn set_if_changed<T: PartialEq + Send + Sync + 'static>(signal: RwSignal<T>, value: T) {
    if signal.with_untracked(|v| *v != value) {
        signal.set(value);
    }
}

/// The page's clock: seconds since it loaded.
pub fn now_s() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now() / 1000.0)
}

/// The rest of a [`TICK`] begun at `began` (from [`now_s`]); zero if it is over.
pub fn rest_of_tick(began: f64) -> Duration {
    TICK.saturating_sub(Duration::from_secs_f64((now_s() - began).max(0.0)))
}

/// Yields to the browser for `d` (a `setTimeout`; zero still yields, so the
/// page draws between a task's steps).
pub async fn sleep(d: Duration) {
    let ms = d.as_millis() as i32;
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}
