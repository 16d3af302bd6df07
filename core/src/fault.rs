//! Fault injection, for tests: make the device refuse segments on purpose and
//! check what the engine asks of it. [`Faulty`] wraps any [`Backend`]; the
//! wgpu binding takes the same [`Faults`] (`PoolOptions::faults`) and reports
//! its refusals through wgpu's error-scope path, natively and in the browser.
//!
//! A [`Faults`] is shared: the test keeps a clone to program refusals and read
//! what the backend saw — creates attempted, bytes held by an independent
//! count, the most ever held — while every create is checked against the
//! hard limit the test sets with [`Faults::check_limit`].
//!
//! ```
//! use vrampool::fault::{Fault, Faults, Faulty};
//! use vrampool::{Config, Engine, Error, Request, SimulatedDevice};
//! let faults = Faults::new();
//! let mut e = Engine::new(Faulty::new(SimulatedDevice::new(1 << 30), faults.clone()), Config::default())?;
//! faults.refuse(1, Fault::OutOfMemory); // the next create
//! faults.refuse(2, Fault::OutOfMemory); // and the one after
//! faults.refuse(3, Fault::OutOfMemory);
//! // The planned segment, then just the request, then after releasing the cache: all refused.
//! assert!(matches!(e.allocate(Request::new(4096, 0)), Err(Error::OutOfMemory(i)) if i.device_refused));
//! assert_eq!(faults.creates(), 3);
//! # Ok::<(), vrampool::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{Backend, DeviceError, SegmentDesc};
use crate::stats::Stats;

/// How an injected refusal looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The device has no memory for the segment.
    OutOfMemory,
    /// The device is lost: this create and every later one fail.
    Lost,
}

impl Fault {
    /// What the engine sees.
    pub fn device_error(self) -> DeviceError {
        match self {
            Fault::OutOfMemory => DeviceError::OutOfMemory,
            Fault::Lost => DeviceError::Lost("the device was lost (injected)".into()),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Creates attempted (refused ones included).
    creates: u64,
    /// Refusals by create number (1-based, counted from the start).
    refuse: BTreeMap<u64, Fault>,
    /// Every create from this number on is refused.
    refuse_from: Option<(u64, Fault)>,
    /// Lost: every later create fails.
    lost: bool,
    limit: Option<u64>,
    held: u64,
    peak_held: u64,
}

/// Programmed refusals and an independent count of what a backend holds,
/// shared between a test and the backend (clones share one state).
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<State>>);

impl Faults {
    /// No refusals, no limit.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses the `n`th create from now (1: the next one) with `fault`.
    pub fn refuse(&self, n: u64, fault: Fault) {
        let mut s = self.state();
        let at = s.creates + n.max(1);
        s.refuse.insert(at, fault);
    }

    /// Refuses every create from the `n`th from now on.
    pub fn refuse_from(&self, n: u64, fault: Fault) {
        let mut s = self.state();
        s.refuse_from = Some((s.creates + n.max(1), fault));
    }

    /// Forgets every programmed refusal (a loss stays).
    pub fn clear(&self) {
        let mut s = self.state();
        s.refuse.clear();
        s.refuse_from = None;
    }

    /// Checks every later create against `limit`: a create that would take
    /// the bytes held above it panics, naming the sizes (the engine must have
    /// refused the request itself).
    pub fn check_limit(&self, limit: Option<u64>) {
        self.state().limit = limit;
    }

    /// Creates attempted so far, refused ones included.
    pub fn creates(&self) -> u64 {
        self.state().creates
    }

    /// Bytes in segments the backend holds now (created, not yet destroyed
    /// or abandoned), counted here and not by the engine.
    pub fn held(&self) -> u64 {
        self.state().held
    }

    /// The most bytes ever held.
    pub fn peak_held(&self) -> u64 {
        self.state().peak_held
    }

    /// Sets the most ever held to what is held now.
    pub fn reset_peak(&self) {
        let mut s = self.state();
        s.peak_held = s.held;
    }

    /// Decides a create of `size` bytes: counts it, checks the limit, and
    /// returns the refusal programmed for it, if any. Backends call this.
    pub fn on_create(&self, size: u64) -> Option<Fault> {
        let mut s = self.state();
        s.creates += 1;
        let n = s.creates;
        let fault = if s.lost {
            Some(Fault::Lost)
        } else {
            s.refuse.remove(&n).or_else(|| {
                s.refuse_from
                    .and_then(|(from, fault)| (n >= from).then_some(fault))
            })
        };
        if fault == Some(Fault::Lost) {
            s.lost = true;
        }
        if fault.is_none() {
            if let Some(limit) = s.limit {
                assert!(
                    s.held + size <= limit,
                    "a segment of {size} bytes was created with {} held, over the hard limit of {limit}",
                    s.held
                );
            }
            s.held += size;
            s.peak_held = s.peak_held.max(s.held);
        }
        fault
    }

    /// Counts a segment of `size` bytes given back. Backends call this.
    pub fn on_release(&self, size: u64) {
        let mut s = self.state();
        s.held = s.held.checked_sub(size).unwrap_or_else(|| {
            panic!(
                "a segment of {size} bytes was given back with {} held: one the injector \
                 never counted (a refused create kept?)",
                s.held
            )
        });
    }
}

/// A backend that refuses segments as its [`Faults`] say, and otherwise
/// passes everything to the backend it wraps.
#[derive(Debug)]
pub struct Faulty<B: Backend> {
    inner: B,
    faults: Faults,
}

impl<B: Backend> Faulty<B> {
    /// Wraps `inner`; `faults` programs it.
    pub fn new(inner: B, faults: Faults) -> Self {
        Faulty { inner, faults }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

impl<B: Backend> Backend for Faulty<B> {
    type Segment = (B::Segment, u64);

    fn create_segment(&mut self, desc: &SegmentDesc<'_>) -> Result<Self::Segment, DeviceError> {
        if let Some(fault) = self.faults.on_create(desc.size) {
            return Err(fault.device_error());
        }
        match self.inner.create_segment(desc) {
            Ok(segment) => Ok((segment, desc.size)),
            Err(e) => {
                self.faults.on_release(desc.size);
                Err(e)
            }
        }
    }

    fn destroy_segment(&mut self, (segment, size): Self::Segment) {
        self.faults.on_release(size);
        self.inner.destroy_segment(segment);
    }

    fn abandon_segment(&mut self, (segment, size): Self::Segment) {
        self.faults.on_release(size);
        self.inner.abandon_segment(segment);
    }

    fn flush_releases(&mut self) {
        self.inner.flush_releases();
    }

    fn settle_releases(&mut self) {
        self.inner.settle_releases();
    }

    fn can_move(&self, usage: u32) -> bool {
        self.inner.can_move(usage)
    }

    fn move_bytes(
        &mut self,
        (from, _): &Self::Segment,
        from_offset: u64,
        (to, _): &Self::Segment,
        to_offset: u64,
        size: u64,
    ) {
        self.inner
            .move_bytes(from, from_offset, to, to_offset, size);
    }

    fn flush_moves(&mut self) {
        self.inner.flush_moves();
    }

    fn lost(&self) -> Option<String> {
        self.inner.lost()
    }
    fn max_segment_size(&self) -> u64 {
        self.inner.max_segment_size()
    }

    fn capacity(&self) -> Option<u64> {
        self.inner.capacity()
    }

    fn suballocation(&self, usage: u32) -> Option<crate::Suballocation> {
        self.inner.suballocation(usage)
    }
}

/// The stats a request the device refused may leave, from those `before`
/// it and those `after`: `before`, with the OOM count and the retry count
/// one up (the ladder releases the whole cache once per request before it
/// fails), nothing releasable left, and what releasing the cache
/// changes taken from `after` (segments and bytes released, cached and free
/// figures, the largest free block, and the same figures of each pool where
/// no pool was added). Nothing else may move — no miss counted, no pool shown, no peak
/// raised, no pending block abandoned (ARCHITECTURE.md, invariant 9; a test
/// with pending blocks checks those itself) — so a test compares `after`
/// with this whole.
///
/// ```
/// use vrampool::fault::{Fault, Faults, Faulty, stats_after_refusal};
/// use vrampool::{Config, Engine, Request, SimulatedDevice};
/// let faults = Faults::new();
/// let mut e = Engine::new(Faulty::new(SimulatedDevice::new(1 << 30), faults.clone()), Config::default())?;
/// let cached = e.allocate(Request::new(8 << 20, 0))?;
/// e.free(cached.id)?;
/// let before = e.stats();
/// for n in 1..=3 {
///     faults.refuse(n, Fault::OutOfMemory); // every step of the ladder
/// }
/// assert!(e.allocate(Request::new(64 << 20, 0)).is_err());
/// let after = e.stats();
/// assert_eq!(after.counters.bytes_released, before.releasable_bytes);
/// assert_eq!(after, stats_after_refusal(&before, &after));
/// # Ok::<(), vrampool::Error>(())
/// ```
pub fn stats_after_refusal(before: &Stats, after: &Stats) -> Stats {
    let mut expected = before.clone();
    expected.counters.ooms += 1;
    expected.counters.alloc_retries += 1;
    expected.counters.device_frees = after.counters.device_frees;
    expected.counters.bytes_released = after.counters.bytes_released;
    released(&mut expected.total, &after.total);
    expected.releasable_bytes = 0;
    expected.largest_free_block = after.largest_free_block;
    expected.inactive_split_bytes = after.inactive_split_bytes;
    if after.pools.len() == before.pools.len() {
        for (pool, after) in expected.pools.iter_mut().zip(&after.pools) {
            released(&mut pool.stats, &after.stats);
        }
    }
    expected
}

/// What releasing cached segments changes in `stats`, taken from `after`:
/// the current reserved, cached, segment and free block figures. Peaks and
/// every other figure stay.
fn released(stats: &mut crate::PoolStats, after: &crate::PoolStats) {
    stats.reserved_bytes.current = after.reserved_bytes.current;
    stats.cached_bytes.current = after.cached_bytes.current;
    stats.segments.current = after.segments.current;
    stats.free_blocks.current = after.free_blocks.current;
}
