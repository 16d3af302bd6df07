//! The allocate panel: N blocks of a size and usage, free at random or all,
//! `empty_cache()` and what it released.

use leptos::prelude::*;
use leptos::task::spawn_local;
use vrampool::fmt_bytes;

use super::page::{BUSY, Page, REPLAYING, replaying};
use crate::model::{MAX_COUNT, ModelCell, Usage, allocate_held, parse_count, parse_size};

/// The allocate inputs, shared with "induce OOM" (which fills them in).
#[derive(Clone, Copy)]
pub struct AllocForm {
    /// How many blocks.
    pub n: RwSignal<String>,
    /// Bytes each.
    pub size: RwSignal<String>,
    /// The `<select>` value of the usage.
    pub usage: RwSignal<String>,
}

impl AllocForm {
    /// 16 × 1 MiB of STORAGE.
    pub fn new() -> AllocForm {
        AllocForm {
            n: RwSignal::new("16".to_string()),
            size: RwSignal::new((1u64 << 20).to_string()),
            usage: RwSignal::new("storage".to_string()),
        }
    }
}

/// Allocates what the form says, one block at a time, and holds the blocks;
/// the first refusal stops it and is shown.
pub fn allocate(page: Page, form: AllocForm) {
    page.error.set(None);
    let n = match parse_count(&form.n.get_untracked()) {
        Ok(n) => n,
        Err(e) => return page.fail(e),
    };
    let size = match parse_size(&form.size.get_untracked()) {
        Ok(size) => size,
        Err(e) => return page.fail(e),
    };
    let usage = Usage::parse(&form.usage.get_untracked());
    if replaying(page) {
        return page.fail(REPLAYING);
    }
    let Some(claim) = page.claim_gpu() else {
        page.fail(BUSY);
        return;
    };
    spawn_local(async move {
        let (held, refused) = allocate_held(&page, n, size, usage).await;
        if let Some(e) = refused {
            page.say(format!("refused: {e}"));
            page.fail(e.to_string());
        }
        page.say(format!(
            "allocated {held} × {} ({usage:?})",
            fmt_bytes(size)
        ));
        drop(claim);
    });
}

/// Allocate, free, `empty_cache()`.
#[component]
pub fn AllocatePanel() -> impl IntoView {
    let page = expect_context::<Page>();
    let form = expect_context::<AllocForm>();
    let free_random = move |_| {
        page.with_model(|m| {
            let n = m.free_random();
            m.say(format!("freed {n} blocks at random"));
        });
    };
    let free_all = move |_| {
        page.with_model(|m| {
            let n = m.free_all();
            m.say(format!("freed all {n} blocks"));
        });
    };
    let empty_cache = move |_| {
        // Not under a replay: the cache it would give back is the replay's,
        // whose device allocations would then differ from the harness's.
        if replaying(page) {
            return page.fail(REPLAYING);
        }
        let bytes = page.with_model(|m| {
            let before = m.stats().total.reserved_bytes.current;
            let bytes = m.empty_cache();
            let after = m.stats().total.reserved_bytes.current;
            m.say(format!(
                "empty_cache released {} (reserved {} → {})",
                fmt_bytes(bytes),
                fmt_bytes(before),
                fmt_bytes(after)
            ));
            bytes
        });
        if bytes.is_some() {
            page.released.set(bytes);
        }
    };
    view! {
        <h2>"Allocate"</h2>
        <div class="row">
            <input id="alloc-n" type="number" min="1" max=MAX_COUNT.to_string() prop:value=form.n on:input=move |e| form.n.set(event_target_value(&e)) />
            " × "
            <select id="alloc-size" prop:value=form.size on:change=move |e| form.size.set(event_target_value(&e))>
                <option value="256">"256 B"</option>
                <option value="65536">"64 KiB"</option>
                <option value="1048576" selected>"1 MiB"</option>
                <option value="4194304">"4 MiB"</option>
                <option value="16777216">"16 MiB"</option>
                <option value="67108864">"64 MiB"</option>
            </select>
            <select id="alloc-usage" prop:value=form.usage on:change=move |e| form.usage.set(event_target_value(&e))>
                <option value="storage">"STORAGE"</option>
                <option value="uniform">"UNIFORM"</option>
                <option value="vertex">"VERTEX"</option>
                <option value="readback">"MAP_READ (staging)"</option>
            </select>
            <button id="btn-alloc" on:click=move |_| allocate(page, form)>"allocate"</button>
        </div>
        <div class="row">
            <button id="btn-free-random" on:click=free_random>"free random"</button>
            <button id="btn-free-all" on:click=free_all>"free all"</button>
            <button id="btn-empty-cache" on:click=empty_cache>"empty_cache()"</button>
        </div>
        <p id="released" data-bytes=move || page.released.get().map(|r| r.to_string()).unwrap_or_default()>
            {move || page.released.get().map(|r| format!("this pool's last empty_cache released {}", fmt_bytes(r)))}
        </p>
    }
}
