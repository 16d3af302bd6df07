//! The event log: what the buttons, the replay and the pool did, newest first.

use leptos::prelude::*;

use super::page::Page;
use crate::model::Model;

/// Lines shown.
const SHOWN: usize = 30;

/// The newest lines of `m`'s log, newest first.
pub fn newest_lines(m: &Model) -> Vec<String> {
    m.log.iter().rev().take(SHOWN).cloned().collect()
}

/// The log, as an ordered list.
#[component]
pub fn EventLog() -> impl IntoView {
    let log = expect_context::<Page>().log;
    view! {
        <h2>"Events"</h2>
        <ol id="log">
            {move || log.with(|lines| lines.iter().map(|l| view! { <li>{l.clone()}</li> }).collect_view())}
        </ol>
    }
}
