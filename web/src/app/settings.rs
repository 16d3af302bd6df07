//! The settings panel: budget, cache limit and growth mode, and the
//! induced out-of-memory demo (a budget just above what is live, then more
//! allocations).

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::{Growth, fmt_bytes};

use super::allocate::{AllocForm, allocate};
use super::page::{BUSY, Page, RENEWING, REPLAYING, replaying};
use crate::model::{Model, ModelCell, parse_budget, parse_mib};

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

    // Empty is "no limit" for the budget and the cache limit; a budget of 0
    // is refused (it would refuse everything), a cache limit of 0 caches
    // nothing; a preallocation must be given.
    let read_settings = move || -> Result<_, String> {
        let b = parse_budget(&budget.get_untracked())?;
        let c = parse_mib(&cache_limit.get_untracked()).map_err(|e| format!("cache limit {e}"))?;
        let g = if growth.get_untracked() == "preallocate" {
            match parse_mib(&prealloc.get_untracked()) {
                Ok(Some(bytes)) => Growth::Preallocate(bytes),
                Ok(None) => return Err("preallocate: give the MiB to reserve up front".into()),
                Err(e) => return Err(format!("preallocation {e}")),
            }
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
        if page.renewing() {
            return page.fail(RENEWING);
        }
        page.error.set(None);
        let (b, c, g) = match read_settings() {
            Ok(settings) => settings,
            Err(e) => return page.fail(e),
        };
        // Growth changes only with a new pool; so does a new preallocation.
        // New limits alone apply to this pool: its blocks, cache and
        // counters stay.
        let Some(renew) = page.with_model(|m| m.growth() != g) else {
            return;
        };
        let said = move |m: &mut Model, r: Result<(), String>| match r {
            Ok(()) => m.say(format!(
                "settings ({}): budget {}, cache limit {}, growth {g:?}",
                if renew { "a new pool" } else { "this pool" },
                b.map_or("none".into(), fmt_bytes),
                c.map_or("none".into(), fmt_bytes)
            )),
            Err(e) => {
                m.say(format!("settings refused: {e}"));
                page.fail(e);
            }
        };
        if renew {
            // The new pool is made apart, awaiting the device's answer to a
            // preallocation (in the browser), with the GPU claimed meanwhile;
            // one refused leaves this pool and its blocks as they are.
            let Some(claim) = page.claim_gpu() else {
                return page.fail(BUSY);
            };
            let Some(backing) = page.with_model(|m| m.backing()) else {
                return;
            };
            let renewing = page.mark_renewing();
            spawn_local(async move {
                let made = backing.renew_async(Model::pool_config(g, b, c)).await;
                page.with_model(|m| {
                    let r = match made {
                        // Nothing replaces the pool while the claim and the
                        // mark are held; should something, the new pool is
                        // dropped rather than put over it.
                        Ok(_) if !m.uses(&backing) => Err("the pool changed meanwhile".into()),
                        Ok(new) => {
                            m.install(new, g, c);
                            Ok(())
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    said(m, r);
                });
                drop((renewing, claim));
            });
            return;
        }
        page.with_model(|m| {
            // The pool keeps its preallocation whatever the budget (it is
            // pinned): one below it is refused, as a new pool's is.
            let pinned: u64 = m
                .snapshot()
                .segments
                .iter()
                .filter(|s| s.pinned)
                .map(|s| s.size)
                .sum();
            let r = match b.filter(|&b| b < pinned) {
                Some(b) => Err(format!(
                    "a budget of {} is below the {} this pool preallocated: raise the budget, or preallocate less",
                    fmt_bytes(b),
                    fmt_bytes(pinned)
                )),
                None => m.set_limits(b, c).map_err(|e| e.to_string()),
            };
            said(m, r);
        });
    };
    let induce_oom = move |_| {
        // Not under a replay: its figures would be the budget's.
        if replaying(page) {
            return page.fail(REPLAYING);
        }
        if page.renewing() {
            return page.fail(RENEWING);
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
            <label>"budget MiB " <input id="budget" placeholder="none" title="empty: no limit" prop:value=budget on:input=move |e| budget.set(event_target_value(&e)) /></label>
            <label>"cache limit MiB " <input id="cache-limit" placeholder="none" title="empty: no limit; 0: cache nothing" prop:value=cache_limit on:input=move |e| cache_limit.set(event_target_value(&e)) /></label>
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
