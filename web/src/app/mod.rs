//! The page: opens the device, shares the model with the panels through
//! Leptos context, lays the panels out (the side-by-side view across the
//! top, then controls on the left and the pool's live figures on the
//! right) and runs the tick. Each panel is a component of its own file;
//! replays, the side-by-side replay and training run in tasks of their own.

mod allocate;
mod chart;
mod compare;
mod device;
mod exports;
mod figures;
mod header;
mod log;
mod page;
mod peak;
mod pools;
mod replay;
mod segments;
mod settings;
mod timeline;
mod training;

use std::cell::Cell;

use leptos::prelude::*;
use leptos::task::spawn_local;

use allocate::{AllocForm, AllocatePanel};
use compare::{ComparePanel, CompareView, MAPS_SHOWN};
use device::{DeviceControls, DeviceLost, DeviceView, open_model};
use exports::ExportPanel;
use figures::Figures;
use header::Header;
use log::{EventLog, newest_lines};
use page::{Page, TICK, now_s, set_if_changed};
use pools::PoolTable;
use replay::{ReplayPanel, ReplayView};
use segments::{SegmentMap, SegmentsView};
use settings::SettingsPanel;
use timeline::Timeline;
use training::TrainingPanel;

use crate::model::ModelCell;

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let page = Page::new();
    provide_context(page);
    provide_context(AllocForm::new());

    spawn_local(async move {
        let m = open_model().await;
        page.model.set_value(Some(m));
    });
    let ticks = Cell::new(0u64);
    set_interval(
        move || {
            ticks.set(ticks.get() + 1);
            tick(page, ticks.get());
        },
        TICK,
    );

    view! {
        <Header />
        <ComparePanel />
        <main>
            <section class="controls">
                <AllocatePanel />
                <SettingsPanel />
                <DeviceControls />
                <p class="error" id="error">{move || page.error.get()}</p>
                <DeviceLost />
                <ReplayPanel />
                <ExportPanel />
                <TrainingPanel />
                <EventLog />
            </section>
            <section class="figures">
                <Figures />
                <Timeline />
                <PoolTable />
                <SegmentMap />
            </section>
        </main>
    }
}

/// The page's clock, every 50 ms: samples the model and writes the figures,
/// the timeline and the side-by-side figures and chart (20 Hz); on every
/// fourth tick the segment maps and the event log, and gathers the pool's
/// recording (5 Hz). It does no work of its own: allocations,
/// replays and training run in their own tasks.
fn tick(page: Page, n: u64) {
    let t = now_s();
    page.with_model(|m| {
        let stats = m.sample(t);
        set_if_changed(page.stats, Some(stats));
        set_if_changed(page.released, m.released);
        page.points.set(m.points.clone());
        set_if_changed(page.device, DeviceView::of(m));
        set_if_changed(page.replay, ReplayView::of(m));
        if n.is_multiple_of(4) {
            set_if_changed(page.segments, SegmentsView::of(m));
            set_if_changed(page.log, newest_lines(m));
            m.collect_recording();
            set_if_changed(page.recorded, m.recorded_events());
        }
    });
    let follow = page.scrub.get_untracked().is_none() && n.is_multiple_of(4);
    page.with_compare(|c| {
        set_if_changed(page.compare_view, CompareView::of(c));
        if follow {
            set_if_changed(page.moment, c.moment(None, MAPS_SHOWN));
        }
    });
}
