//! `bench`: a pool hit against raw `create_buffer` + `destroy` and the
//! engine's own cost per operation — its arguments and its table; the
//! measurements are in measure.rs.

mod measure;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use vrampool::fmt_bytes;

use crate::target::Target;
use crate::{Common, bar};

#[derive(Args)]
pub struct BenchArgs {
    /// Sizes in bytes, comma separated (default: 256 B to 256 MiB, ×16 apart).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Time spent measuring each figure, in milliseconds.
    #[arg(long, default_value_t = 300)]
    time_ms: u64,
    /// Also run this many threads at once on one pool, each running frames
    /// (allocate 16 blocks of 4 KiB, drop them, `Pool::submitted`; and again
    /// on a pool with `Reuse::Immediate`, without the submit), and report
    /// hits per second in all and the scaling over the first count (e.g.
    /// `--threads 1,2,4,8`; on a GPU).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
}

/// Runs `vrampool bench`.
pub fn command(a: &BenchArgs, c: &Common) -> Result<ExitCode> {
    let sizes: Vec<u64> = if a.sizes.is_empty() {
        measure::SIZES.to_vec()
    } else {
        a.sizes.clone()
    };
    if let Some(z) = sizes.iter().find(|&&s| s == 0) {
        usage!("--sizes: a size of {z} bytes cannot be allocated; give sizes of at least 1 byte");
    }
    let target = Target::open(c, 141 << 30, 4 << 30)?;
    if let Some(&big) = sizes.iter().find(|&&s| s > target.max_buffer()) {
        usage!(
            "--sizes: {big} bytes is above {}'s max_buffer_size of {}",
            target.name(),
            target.max_buffer()
        );
    }
    let pb = bar(sizes.len() as u64, c);
    let gpu = match &target {
        Target::Gpu { device, queue, .. } => Some((device, queue)),
        Target::Simulated { .. } => None,
    };
    if let Some(&n) = a.threads.iter().find(|&&n| n == 0 || n > 1024) {
        usage!("--threads: give counts from 1 to 1024 threads, got {n}");
    }
    if !a.threads.is_empty() && gpu.is_none() {
        usage!("--threads measures the pool on a GPU; drop --simulate");
    }
    let budget = Duration::from_millis(a.time_ms);
    let rows = measure::run(gpu, c.hints().wgpu(), &sizes, budget, &pb)?;
    pb.finish_and_clear();
    let mut threads = Vec::new();
    if let Some((device, queue)) = gpu.filter(|_| !a.threads.is_empty()) {
        for reuse in [vrampool::Reuse::AfterSubmit, vrampool::Reuse::Immediate] {
            let options = vrampool::PoolOptions {
                reuse,
                memory_hints: c.hints().wgpu(),
                ..vrampool::PoolOptions::default()
            };
            let pool = vrampool::Pool::new(device.clone(), queue.clone(), options)?;
            threads.extend(measure::threads(&pool, reuse, &a.threads, 4 << 10, budget)?);
        }
    }
    if c.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"device": target.name(), "rows": rows, "threads": threads})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!("on {}", target.name());
    outln!(
        "{:>10} {:>18} {:>12} {:>12} {:>8} | {:>5} {:>12} {:>12} {:>8} | {:>10} {:>10} | {:>12}",
        "size",
        "raw create+destroy",
        "raw + poll",
        "pool hit",
        "ratio",
        "live",
        "raw, N live",
        "pool, N live",
        "ratio",
        "create",
        "destroy",
        "engine ns/op"
    );
    let t = |x: Option<f64>| x.map_or("-".into(), fmt_ns);
    for r in rows {
        let x = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0}x"));
        outln!(
            "{:>10} {:>18} {:>12} {:>12} {:>8} | {:>5} {:>12} {:>12} {:>8} | {:>10} {:>10} | {:>12.1}",
            fmt_bytes(r.size),
            t(r.raw_ns),
            t(r.raw_poll_ns),
            t(r.pool_ns),
            x(r.ratio),
            r.live,
            t(r.raw_live_ns),
            t(r.pool_live_ns),
            x(r.ratio_live),
            t(r.raw_create_ns),
            t(r.raw_destroy_ns),
            r.engine_ns_per_op
        );
    }
    for (reuse, how) in [
        ("after_submit", "allocs, drops, then Pool::submitted"),
        ("immediate", "allocs, then drops; Reuse::Immediate"),
    ] {
        let rows: Vec<_> = threads.iter().filter(|r| r.reuse == reuse).collect();
        if rows.is_empty() {
            continue;
        }
        outln!(
            "threads on one pool, 4 KiB hits (frames of {} {how}):",
            measure::FRAME
        );
        outln!("{:>8} {:>14} {:>8}", "threads", "hits/s", "scaling");
        for r in rows {
            outln!(
                "{:>8} {:>14.0} {:>7.2}x",
                r.threads,
                r.hits_per_s,
                r.scaling
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}
