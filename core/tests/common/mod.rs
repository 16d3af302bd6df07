//! What the engine's tests share: traces made from rows, drawn at random, or
//! read from the repository's `data/traces`, and how many cases a proptest
//! runs.

use std::path::PathBuf;

use proptest::prelude::*;
use vrampool::Trace;

/// A trace from (allocate?, pointer, size) rows.
pub fn trace(rows: &[(bool, u64, u64)]) -> Trace {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for &(alloc, p, size) in rows {
        let action = if alloc { "allocate" } else { "free" };
        csv.push_str(&format!("0,0,{action},{p:#x},{size},0x0\n"));
    }
    Trace::parse("made", csv.as_bytes()).unwrap()
}

/// a (3 MiB) and b (1 MiB) live together, then c (4 MiB) after both are
/// freed: a plan fits all three in one 4 MiB segment.
pub fn beside_then_after() -> Trace {
    const MIB: u64 = 1 << 20;
    trace(&[
        (true, 1, 3 * MIB),
        (true, 2, MIB),
        (false, 1, 3 * MIB),
        (false, 2, MIB),
        (true, 3, 4 * MIB),
        (false, 3, 4 * MIB),
    ])
}

/// A random trace of up to `steps` events of up to 3 MiB: each step
/// allocates a new pointer or frees a live one.
pub fn random_trace(steps: usize) -> impl Strategy<Value = Trace> {
    proptest::collection::vec(
        (any::<bool>(), 1u64..(3 << 20), any::<prop::sample::Index>()),
        1..steps,
    )
    .prop_map(|steps| {
        let (mut rows, mut live, mut next) = (Vec::new(), Vec::<(u64, u64)>::new(), 1u64);
        for (alloc, size, pick) in steps {
            if alloc || live.is_empty() {
                rows.push((true, next, size));
                live.push((next, size));
                next += 1;
            } else {
                let (p, s) = live.swap_remove(pick.index(live.len()));
                rows.push((false, p, s));
            }
        }
        trace(&rows)
    })
}

/// A trace of `data/traces`, every size divided by `scale`.
pub fn shared(name: &str, scale: u64) -> Trace {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../data/traces/{name}.csv.gz"));
    Trace::open(path).unwrap().scaled(scale)
}

/// Cases a proptest runs: `PROPTEST_CASES` if set (a longer search before a
/// release, or a shorter one while iterating), else `default`, what CI runs.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
