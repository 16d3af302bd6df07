//! The settings panel: budget, cache limit and growth mode, and the
//! induced out-of-memory demo (a budget just above what is live, then more
//! allocations).

use leptos::prelude::*;
use vrampool::{Growth, fmt_bytes};

use super::allocate::{AllocForm, allocate};
use super::page::{Page, REPLAYING, replaying};
use crate::model::{ModelCell, parse_mib};

const MIB: u64 = 1 << 20;

/// Budget, cache limit, growth; "apply" and "induce OOM".
#[component]
pub fn SettingsPanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let form = expect_context::<AllocForm>();
    let budget = RwSignal::new(String::new());
    let cache_limit = RwSignal::new(String::new());
    let growth = RwSignal::new("on-demand".to_string());
    let prealloc = RwSignal::new("64".to_string());

    let read_settings = move || -> Result<_, String> {
        let b = parse_mib(&budget.get_untracked())?.filter(|&b| b > 0);
        let c = parse_mib(&cache_limit.get_untracked())?;
        let g = if growth.get_untracked() == "preallocate" {
            Growth::Preallocate(parse_mib(&prealloc.get_untracked())?.unwrap_or(64 * MIB))
        } else {
            Growth::OnDemand
        };
        Ok((b, c, g))
    };
    let apply = move |_| {
        // Not under a replay: a new pool would end it, new limits would
        // change its budget halfway (and not its PyTorch twin's).
        if replaying(page) {
            return page.fail(REPLAYING);
        }
        page.error.set(None);
        let (b, c, g) = match read_settings() {
            Ok(settings) => settings,
            Err(e) => return page.fail(e),
        };
        page.with_model(|m| {
            // Growth changes only with a new pool; so does a new preallocation.
            let now_pre = m.snapshot().segments.iter().any(|s| s.pinned);
            let want_pre = matches!(g, Growth::Preallocate(_));
            let r = if now_pre != want_pre || want_pre {
                m.reset(g, b, c)
            } else {
                m.set_limits(b, c)
            };
            match r {
                Ok(()) => m.say(format!(
                    "settings: budget {}, cache limit {}, growth {g:?}",
                    b.map_or("none".into(), fmt_bytes),
                    c.map_or("none".into(), fmt_bytes)
                )),
                Err(e) => {
                    m.say(format!("settings refused: {e}"));
                    page.fail(e.to_string());
                }
            }
        });
    };
    let induce_oom = move |_| {
        // Not under a replay: its figures would be the budget's.
        if replaying(page) {
            return page.fail(REPLAYING);
        }
        // A budget just above what is live: setting it gives the cache back,
        // the next requests fill it, and the first one past it is refused
        // with an out-of-memory (the cache it could not use kept).
        let Some(limit) = page.with_model(|m| {
            let limit = m.stats().total.allocated_bytes.current + 4 * MIB;
            match m.set_budget(Some(limit)) {
                Ok(()) => m.say(format!(
                    "induced OOM: budget set to {} (live + 4 MiB); allocating 16 × 1 MiB",
                    fmt_bytes(limit)
                )),
                Err(e) => m.say(format!("cannot set the budget: {e}")),
            }
            limit
        }) else {
            return;
        };
        budget.set(format!("{:.2}", limit as f64 / MIB as f64));
        form.n.set("16".into());
        form.size.set(MIB.to_string());
        allocate(page, form);
    };
    view! {
        <h2>"Settings"</h2>
        <div class="row">
            <label>"budget MiB " <input id="budget" placeholder="none" prop:value=budget on:input=move |e| budget.set(event_target_value(&e)) /></label>
            <label>"cache limit MiB " <input id="cache-limit" placeholder="none" prop:value=cache_limit on:input=move |e| cache_limit.set(event_target_value(&e)) /></label>
        </div>
        <div class="row">
            <select id="growth" prop:value=growth on:change=move |e| growth.set(event_target_value(&e))>
                <option value="on-demand">"grow on demand"</option>
                <option value="preallocate">"preallocate"</option>
            </select>
            <label>" MiB " <input id="prealloc" prop:value=prealloc on:input=move |e| prealloc.set(event_target_value(&e)) /></label>
            <button id="btn-apply" on:click=apply>"apply"</button>
            <button id="btn-oom" on:click=induce_oom>"induce OOM"</button>
        </div>
    }
}
