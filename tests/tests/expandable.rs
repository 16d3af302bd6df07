//! `vrampool::trace::Expandable` against PyTorch itself: every trace of
//! data/traces (and data/traces/heldout) replayed through the simulation of
//! PyTorch's allocator with `expandable_segments:True` must give what
//! PyTorch 2.11 gave replaying the same trace on the H200
//! (`data/traces/pytorch_figures.json`, `scripts/traces/pytorch_figures.py`;
//! scaled down ÷16 and ÷64 the same script with `--scale`,
//! `pytorch_figures_div16.json` and `_div64.json`): the same peak reserved
//! bytes, device allocations and frees with no limit, and at every budget
//! of PyTorch's scans, the same outcome (it fits, or it runs out of memory)
//! with the same device allocations. A figure that differs by one byte
//! fails.

use std::path::PathBuf;

use serde_json::Value;
use vrampool::Trace;
use vrampool::trace::{Expandable, ReplayTarget, Replayer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Replays `t` under `limit`: (no out-of-memory, peak reserved, device
/// allocations, device frees), the frees counted before the trace's last
/// live blocks are freed, as PyTorch's replay counted them.
fn replay(t: &Trace, capacity: u64, limit: Option<u64>) -> (bool, u64, u64, u64) {
    let mut vm = Expandable::new(capacity, limit);
    let mut replayer = Replayer::new(t);
    while replayer.step(&mut vm).expect("only out-of-memory refusals") {
        if replayer.counts().ooms > 0 {
            break;
        }
    }
    let s = vm.stats();
    for h in replayer.take_live() {
        vm.free(h).expect("a live block");
    }
    (
        replayer.counts().ooms == 0,
        s.peak_reserved,
        s.device_allocs,
        s.device_frees,
    )
}

/// PyTorch's limit for a budget of `k` / 1000 × peak live:
/// `set_per_process_memory_fraction(k / 1000 × peak live / total)`, which
/// it multiplies back by the total.
fn limit(k: u64, peak_live: u64, total: u64) -> u64 {
    let fraction = (k as f64 / 1000.0 * peak_live as f64 / total as f64).min(1.0);
    (fraction * total as f64) as u64
}

/// The figures of `file` (written by `pytorch_figures.py`, with `--scale
/// scale` for a scaled one), held against the simulation: with no limit,
/// and at every budget PyTorch's scan tried.
fn holds_to(file: &str, scale: u64) {
    let figures: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("data/traces").join(file)).expect(file),
    )
    .expect("valid JSON");
    assert_eq!(
        figures["meta"]["scale"].as_u64().unwrap_or(1),
        scale,
        "{file}"
    );
    let file_total = figures["meta"]["mem_get_info_total"]
        .as_u64()
        .expect("the device's total memory");
    let traces = figures["traces"].as_object().expect("traces");
    assert_eq!(traces.len(), 27, "{file}: every recorded trace");
    let mut budgets = 0;
    for (name, f) in traces {
        let path = if f["held_out"].as_bool().unwrap_or(false) {
            format!("data/traces/heldout/{name}.csv.gz")
        } else {
            format!("data/traces/{name}.csv.gz")
        };
        let full = Trace::open(root().join(&path)).expect(&path);
        let t = if scale > 1 { full.scaled(scale) } else { full };
        let id = format!("{name} ÷{scale}");
        assert_eq!(
            t.peak_live,
            f["peak_live"].as_u64().unwrap(),
            "{id}: peak live"
        );
        let real = &f["expandable"]["replay"];
        assert_eq!(real["expandable"], true, "{id}: the replay ran expandable");
        // The device the replay ran on (the fourth held-out set's was an
        // H100, the others' the H200 of the file's meta).
        let total = real["mem_get_info_total"].as_u64().unwrap_or(file_total);
        let (ok, peak, allocs, frees) = replay(&t, total, None);
        assert!(ok, "{id}: no limit, no out-of-memory");
        assert_eq!(
            (peak, allocs, frees),
            (
                real["peak_reserved"].as_u64().unwrap(),
                real["device_allocs"].as_u64().unwrap(),
                real["device_frees"].as_u64().unwrap()
            ),
            "{id}: peak reserved, device allocations and frees (unmaps) with no limit"
        );
        let scan = &f["expandable"]["min_budget"];
        let step = (scan["grid_step"].as_f64().unwrap() * 1000.0).round() as u64;
        let top = (scan["grid_to"].as_f64().unwrap() * 1000.0).round() as u64;
        assert_eq!(
            scan["grid_from"].as_f64(),
            Some(1.0),
            "{id}: the grid's start"
        );
        let oks = scan["ok_map"].as_str().expect("the scan's map");
        let at = scan["device_allocs_map"]
            .as_array()
            .expect("its allocations");
        assert!(
            !oks.is_empty() && oks.len() == at.len(),
            "{id}: the scan's map and its allocations"
        );
        assert_eq!(
            1000 + (oks.len() as u64 - 1) * step,
            top,
            "{id}: the map covers the grid"
        );
        for (i, (c, a)) in oks.chars().zip(at).enumerate() {
            let k = 1000 + i as u64 * step;
            let (ok, _, allocs, _) = replay(&t, total, Some(limit(k, t.peak_live, total)));
            assert_eq!(ok, c == '1', "{id}: budget {k} / 1000 fits in PyTorch: {c}");
            if ok {
                assert_eq!(
                    allocs,
                    a.as_u64().unwrap(),
                    "{id}: device allocations at {k}"
                );
            }
            budgets += 1;
        }
    }
    eprintln!("{file}: 27 traces and {budgets} budgets, to the byte");
}

#[test]
fn the_simulation_gives_what_pytorch_gave_on_the_h200_at_full_size() {
    // Every budget on PyTorch's grid of 0.001 (0.002 for the first held-out
    // set, 0.003 for the third) from 1.000 to just above its ratio with no
    // limit.
    holds_to("pytorch_figures.json", 1);
}

#[test]
fn the_simulation_gives_what_pytorch_gave_on_the_h200_scaled_down() {
    // Grids of 0.02 and 0.05 (0.005 for the third held-out set), including
    // two rows where no budget fits up to the grid's top: PyTorch's limit
    // check counts a whole 20 MiB page.
    holds_to("pytorch_figures_div16.json", 16);
    holds_to("pytorch_figures_div64.json", 64);
}

/// Pages unmapped in the middle are mapped again before the segment grows;
/// stale, foreign and impossible requests are errors that change nothing
/// but what PyTorch's last step releases.
#[test]
fn unmapped_holes_are_filled_before_the_segment_grows() {
    let mib = 1u64 << 20;
    let mut vm = Expandable::new(80 << 30, None);
    let a = vm.allocate(40 * mib).unwrap();
    let b = vm.allocate(40 * mib).unwrap();
    assert_eq!(vm.stats().reserved, 80 * mib);
    vm.free(a).unwrap();
    // The first two pages were all a's: unmapped, b stays.
    assert_eq!(vm.empty_cache(), 40 * mib);
    assert_eq!(vm.stats().reserved, 40 * mib);
    let c = vm.allocate(30 * mib).unwrap();
    // Mapped back in the hole (two 20 MiB pages), not after b.
    assert_eq!(vm.stats().reserved, 80 * mib);
    assert_eq!(vm.stats().device_allocs, 3);
    assert_eq!(vm.stats().device_frees, 1);

    // A handle freed twice, even once its address is taken again, and a
    // handle of another allocator are errors; the live block stays live.
    vm.free(c).unwrap();
    let d = vm.allocate(30 * mib).unwrap();
    assert!(vm.free(c).is_err(), "c was freed, and d has its address");
    let mut other = Expandable::new(80 << 30, None);
    let e = other.allocate(30 * mib).unwrap();
    assert!(vm.free(e).is_err(), "another allocator's block");
    assert_eq!(vm.stats().allocated, 70 * mib);
    vm.free(d).unwrap();

    // A request no device holds: the cached pages are released first, as
    // PyTorch's last step before an out-of-memory, and nothing else moves.
    let cached = vm.stats().reserved - vm.stats().allocated;
    assert!(cached > 0);
    assert!(vm.allocate(81 << 30).is_err());
    assert!(vm.allocate(u64::MAX).is_err());
    let s = vm.stats();
    assert_eq!(
        (s.reserved, s.allocated, s.retries),
        (40 * mib, 40 * mib, 2)
    );
    vm.free(b).unwrap();
    assert_eq!(vm.empty_cache(), 40 * mib);
    assert_eq!(vm.stats().reserved, 0);
    assert_eq!(
        vm.allocate(0).unwrap_err().to_string(),
        vrampool::Error::ZeroSize.to_string()
    );
    let _ = ReplayTarget::allocate(&mut vm, mib).unwrap();
}

/// Devices of any size, up to u64::MAX bytes, give an allocator that works.
#[test]
fn any_capacity_is_served_or_refused() {
    for capacity in [0, 1, 20 << 20, 1 << 40, u64::MAX / 2, u64::MAX] {
        let mut vm = Expandable::new(capacity, None);
        match vm.allocate(3 << 20) {
            Ok(b) => {
                assert!(capacity >= 20 << 20, "{capacity}");
                vm.free(b).unwrap();
                assert_eq!(vm.empty_cache(), 20 << 20);
            }
            Err(e) => assert!(capacity < 20 << 20, "{capacity}: {e}"),
        }
    }
}
