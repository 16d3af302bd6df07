//! The per-pool table: allocated, reserved, cached, blocks, segments and
//! peak reserved of each of the engine's pools.

use leptos::prelude::*;
use vrampool::fmt_bytes;

use super::page::Page;

/// One row per pool.
#[component]
pub fn PoolTable() -> impl IntoView {
    let stats = expect_context::<Page>().stats;
    let rows = move || {
        stats.with(|s| {
            s.iter()
                .flat_map(|s| &s.pools)
                .map(|p| {
                    let st = p.stats;
                    view! {
                        <tr>
                            <td>{p.name.clone()}</td>
                            <td>{fmt_bytes(st.allocated_bytes.current)}</td>
                            <td>{fmt_bytes(st.reserved_bytes.current)}</td>
                            <td>{fmt_bytes(st.cached_bytes.current)}</td>
                            <td>{st.allocations.current}</td>
                            <td>{st.segments.current}</td>
                            <td>{fmt_bytes(st.reserved_bytes.peak)}</td>
                        </tr>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <h2>"Pools"</h2>
        <table id="pools">
            <thead><tr><th>"pool"</th><th>"allocated"</th><th>"reserved"</th><th>"cached"</th><th>"blocks"</th><th>"segments"</th><th>"peak reserved"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}
