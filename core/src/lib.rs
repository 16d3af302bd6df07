//! # vrampool
//!
//! A caching GPU memory pool for [wgpu](https://wgpu.rs): the habits PyTorch and
//! TensorFlow taught (cache freed blocks and reuse them, `empty_cache()`, grow on
//! demand or preallocate, cap memory, free on drop, weak references, stats and
//! `memory_summary()`), natively and in the browser.
//!
//! Two layers:
//! - the **engine** ([`Engine`]): a pure allocation engine (segments, blocks,
//!   best-fit, split/coalesce, release policies) driving a [`Backend`] that
//!   creates and destroys segments. It knows nothing of wgpu and runs on a
//!   [`SimulatedDevice`] too, so policies are tested and real [traces](Trace)
//!   replayed on any machine;
//! - the **binding** ([`Pool`], feature `wgpu`, on by default): a thin layer over
//!   `wgpu::Device` whose handles ([`PoolBuffer`]) give a buffer range and return
//!   it to the pool on drop. Natively [`Pool::alloc`] returns at once; in the
//!   browser, where WebGPU reports a refused buffer asynchronously, allocations
//!   are [`Pool::alloc_async`] (which exists natively too).
//!
//! ```
//! use vrampool::{Config, Engine, Limit, Request, SimulatedDevice};
//! // A 1 GiB simulated device, capped at 64 MiB.
//! let config = Config { limit: Some(Limit::Bytes(64 << 20)), ..Config::default() };
//! let mut engine = Engine::new(SimulatedDevice::new(1 << 30), config)?;
//! let big = engine.allocate(Request::new(40 << 20, 0))?;
//! // Over the cap: the error says what was asked and what is held.
//! let err = engine.allocate(Request::new(40 << 20, 0)).unwrap_err();
//! assert!(err.to_string().contains("out of memory: tried to allocate 40.00 MiB"));
//! engine.free(big.id)?;
//! engine.allocate(Request::new(40 << 20, 0))?; // reuses the cached block
//! print!("{}", engine.memory_summary());
//! # Ok::<(), vrampool::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod config;
mod engine;
mod error;
pub mod fault;
mod sim;
mod snapshot;
mod stats;
mod suballoc;
pub mod trace;
mod types;

#[cfg(feature = "wgpu")]
mod gpu;

pub use backend::{Backend, DeviceError, SegmentDesc};
pub use config::{Config, Growth, Limit, LimitKind, Placement, ReleaseOrder};
pub use engine::{
    Engine, FollowStats, InvariantError, OomObserver, PinnedPlan, Planned, SegmentPlan,
};
pub use error::{Error, OomInfo, Result, UsageConflict};
pub use sim::{SimSegment, SimulatedDevice};
pub use snapshot::{Leak, Snapshot, SnapshotBlock, SnapshotSegment, SnapshotState, leak_report};
pub use stats::{Counters, PoolReport, PoolStats, Stat, Stats};
#[cfg(not(target_arch = "wasm32"))]
pub use suballoc::DeviceBlocks;
pub use suballoc::Suballocation;
pub use trace::{ReplayReport, Trace, replay, replay_relocatable, replay_submitting};
pub use types::{Allocation, BlockId, Moved, Request, SegmentClass, SegmentId};

#[cfg(feature = "wgpu")]
pub use gpu::*;

/// The largest segment anything here makes or plans, whatever a device
/// says: 2^62 bytes (4 EiB), far above any GPU, so sums of a few such sizes
/// stay within a u64 (the engine, the simulated device and the static plan
/// all hold to it).
pub(crate) const MAX_SEGMENT: u64 = 1 << 62;

/// `x` rounded up to a multiple of `to`; the largest multiple a `u64` holds
/// where that would overflow (a size near `u64::MAX`: callers clamp it).
pub(crate) fn round_up(x: u64, to: u64) -> u64 {
    x.checked_next_multiple_of(to).unwrap_or(u64::MAX / to * to)
}

/// Formats a byte count for people: `1.50 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// The README's examples compile as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
