//! Replays, on stable, every input kept for the cargo-fuzz targets: the seeds
//! they start from and each crash they ever found (fuzz/regressions/, one file
//! per finding). The checks are the fuzz targets' own, from fuzz/src/lib.rs.

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::path::Path;

fn inputs(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// Replays every seed and regression of `target`; returns how many of
/// each it replayed.
fn run(target: &str, check: fn(&[u8])) -> (usize, usize) {
    let mut n = [0; 2];
    for (count, kind) in n.iter_mut().zip(["seeds", "regressions"]) {
        for (name, data) in inputs(&format!("{kind}/{target}")) {
            eprintln!("{target}: {name}");
            check(&data);
            *count += 1;
        }
    }
    (n[0], n[1])
}

// The counts are those kept in fuzz/: a folder moved or emptied fails here
// instead of silently replaying nothing. Add to them as findings are kept.

#[test]
fn trace_reader_inputs() {
    assert_eq!(run("trace_reader", checks::trace_reader), (2, 2));
}

#[test]
fn engine_ops_inputs() {
    assert_eq!(run("engine_ops", checks::engine_ops), (2, 1));
}
