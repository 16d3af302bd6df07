//! Reliability: what the pool does when memory runs out, the device goes away,
//! input is wrong, many threads pull at once, or a block could hand one user's
//! bytes to another. Each module proves one row group of RELIABILITY.md on a
//! real device (Mesa lavapipe in CI); the `#[ignore]`d tests need a real GPU
//! and were run on the H200 (RELIABILITY.md has their commands and output).

mod bad_input;
mod concurrency;
mod device_loss;
mod integrity;
mod leaks;
mod oom;

use vrampool_tests::pool_with;

/// Reads a count from the environment (to run longer on a real GPU), else `default`.
fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
