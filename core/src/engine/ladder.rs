//! A request the cache cannot serve, in two phases: [`Engine::plan`] sizes a
//! new segment under the hard limit and the soft headroom (releasing cached
//! segments the limits need back), the caller has the backend create it — at
//! once natively, awaited in the browser — and [`Engine::commit`] takes the
//! segment in, or [`Engine::refused`] takes the next step of the ladder: ask
//! for just the request, then release the whole cache and ask once more, then
//! fail with the pool's state. [`Engine::allocate`] runs the ladder itself.
//!
//! Architecture invariant: this is the only place a device refusal becomes an
//! [`Error`], and nothing a refused plan did is left in the figures but the
//! retry and OOM counters and the cache it released.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{Backend, DeviceError, SegmentDesc};
use crate::error::{Error, Result};
use crate::types::{Allocation, Request, SegmentClass};

use super::Engine;
use super::release::Released;

/// What [`Engine::plan`] decided.
#[derive(Debug)]
pub enum Planned {
    /// Served from the cache.
    Hit(Allocation),
    /// A new segment is needed: have the backend create [`SegmentPlan::desc`],
    /// then [`Engine::commit`] it, or report the refusal to [`Engine::refused`].
    Create(SegmentPlan),
}

/// A segment the engine wants created for one request, and where the request
/// stands on the ladder. Counted against its engine's limits until it is
/// committed, refused to the end, [`cancelled`](Engine::cancel) or dropped:
/// wherever it goes — handed to another engine by mistake, or dropped on an
/// error path — its bytes stop counting in the engine that made it.
#[derive(Debug)]
#[must_use = "commit the created segment, report the refusal, or cancel the plan"]
pub struct SegmentPlan {
    /// The engine that made it (its `generation_start`): a plan goes back
    /// to that engine alone.
    engine: u32,
    req: Request,
    pool: u16,
    class: SegmentClass,
    rounded: u64,
    size: u64,
    /// `size` counted in its engine's bytes in flight, until dropped.
    flight: InFlight,
    usage: u32,
    label: String,
    /// The request was counted in `alloc_retries` (it released cache and tried again).
    retried: bool,
    /// The whole cache was released for it after a device refusal.
    released_all: bool,
}

/// Bytes of a plan counted in its engine's bytes in flight (shared with
/// the engine), taken off when dropped.
#[derive(Debug)]
pub(super) struct InFlight {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl InFlight {
    pub(super) fn new(counter: &Arc<AtomicU64>, bytes: u64) -> Self {
        counter.fetch_add(bytes, Ordering::Relaxed);
        InFlight {
            counter: Arc::clone(counter),
            bytes,
        }
    }

    /// Counts `bytes` (at most what it counts now) from here on.
    pub(super) fn shrink(&mut self, bytes: u64) {
        debug_assert!(bytes <= self.bytes, "a plan's count only shrinks");
        self.counter
            .fetch_sub(self.bytes.saturating_sub(bytes), Ordering::Relaxed);
        self.bytes = bytes.min(self.bytes);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl SegmentPlan {
    /// The segment to create.
    pub fn desc(&self) -> SegmentDesc<'_> {
        SegmentDesc {
            size: self.size,
            usage: self.usage,
            label: &self.label,
        }
    }

    /// The bytes the caller asked for.
    pub fn requested(&self) -> u64 {
        self.req.size
    }
}

impl<B: Backend> Engine<B> {
    /// `DeviceLost` once the device is known lost: by a refused create, or
    /// by the backend (wgpu's lost callback), whose word is kept.
    #[inline]
    pub(super) fn check_lost(&mut self) -> Result<()> {
        if self.lost.is_none() {
            self.lost = self.backend.lost();
        }
        match &self.lost {
            Some(why) => Err(Error::DeviceLost(why.clone())),
            None => Ok(()),
        }
    }

    /// The pool (made on first use), class and rounded size of a request the
    /// engine may serve, or why it may not (device lost, size 0, larger than
    /// a buffer).
    fn admit(&mut self, req: &Request) -> Result<(u16, SegmentClass, u64)> {
        self.check_lost()?;
        if req.size == 0 {
            return Err(Error::ZeroSize);
        }
        let rounded = req
            .size
            .checked_add(self.config.alignment - 1)
            .map(|x| x & !(self.config.alignment - 1))
            .filter(|&r| r <= self.max_segment)
            .ok_or(Error::TooLarge {
                requested: req.size,
                max_buffer_size: self.max_segment,
            })?;
        Ok((
            self.pool_of(req)?,
            self.class_of(rounded, req.exclusive),
            rounded,
        ))
    }

    /// The allocation [`Engine::plan`] would make for `req` if the cache
    /// serves it; `None`, with nothing changed, when it would plan a segment
    /// or refuse (the wgpu binding then first takes back blocks other threads
    /// parked, and plans).
    #[cfg(feature = "wgpu")]
    pub(crate) fn allocate_cached(&mut self, req: &Request) -> Option<Allocation> {
        // While a plan is followed every request takes the full path, which
        // matches it to the plan first; so does a fresh request, which only
        // the full path serves with no used block (Request::fresh).
        if !self.following.is_empty() || req.fresh {
            return None;
        }
        let (pool, class, rounded) = self.admit(req).ok()?;
        let b = self.find_cached(pool, class, rounded)?;
        self.tick += 1;
        self.counters.cache_hits += 1;
        Some(self.take_block(b, rounded, req.clone()))
    }

    /// Reserved bytes plus segments planned and not yet settled.
    pub(super) fn held(&self) -> u64 {
        self.total.reserved_bytes.current + self.in_flight.load(Ordering::Relaxed)
    }

    /// What the hard limit must make room for when a request of `rounded`
    /// bytes of `class` needs a segment: the request, which a segment shrinks
    /// to ([`Config::fit_to_limit`](crate::Config::fit_to_limit)), or else
    /// the whole segment it asks for.
    fn limit_needs(&self, pool: u16, rounded: u64, class: SegmentClass) -> u64 {
        if self.config.fit_to_limit {
            rounded
        } else {
            self.segment_size(pool, rounded, class)
        }
    }

    /// Whether `rounded` more bytes pass the hard limit even with every
    /// releasable segment released: the limit refuses the request, and the
    /// cache it could not use stays.
    fn over_limit_with_cache_released(&self, rounded: u64) -> bool {
        self.limit
            .is_some_and(|limit| self.held() - self.releasable() + rounded > limit)
    }

    /// Step one of an allocation: a cached block, or the segment to create.
    /// Refusals the engine decides alone (device lost, size 0, larger than a
    /// buffer, over the hard limit even with the whole cache released, which
    /// then stays) are errors
    /// here; a request the cache serves changes the figures as
    /// [`Engine::allocate`] does.
    ///
    /// ```
    /// use vrampool::{Backend, Config, Engine, Planned, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let Planned::Create(plan) = e.plan(Request::new(4096, 0))? else { unreachable!() };
    /// let segment = SimulatedDevice::new(1 << 30).create_segment(&plan.desc()).unwrap();
    /// let a = e.commit(plan, segment)?;
    /// assert_eq!(e.stats().counters.cache_misses, 1);
    /// # let _ = a; Ok::<(), vrampool::Error>(())
    /// ```
    pub fn plan(&mut self, req: Request) -> Result<Planned> {
        let (pool, class, rounded) = self.admit(&req)?;
        self.tick += 1;
        // A fresh request takes no block an owner held (Request::fresh).
        let cached = !req.fresh;
        if cached && let Some(b) = self.planned_block(pool, rounded) {
            self.counters.cache_hits += 1;
            let a = self.take_block(b, rounded, req);
            self.stop_following_if_used_up();
            return Ok(Planned::Hit(a));
        }
        if let Some(b) = self.find_cached(pool, class, rounded) {
            if cached || !self.blocks[b as usize].dirty {
                self.counters.cache_hits += 1;
                return Ok(Planned::Hit(self.take_block(b, rounded, req)));
            }
            // A fresh request may not take a used block: the segment it
            // would have served goes back if nothing lives in it, so a loop
            // of fresh requests (zeroed uploads) holds one, not a pile. Not
            // for a request the limit refuses: its cache stays.
            if !self.over_limit_with_cache_released(self.limit_needs(pool, rounded, class)) {
                self.release_segment_of(b);
            }
        }
        // Memory the pool holds, made whole by moving relocatable blocks
        // out of the way, before a new segment.
        if cached
            && self.relocation_on(pool)
            && let Some(b) = self.make_room(pool, class, rounded)
        {
            self.counters.cache_hits += 1;
            let a = self.take_block(b, rounded, req);
            // What the moves left cached, trimmed once the request holds its place.
            self.trim_cache();
            return Ok(Planned::Hit(a));
        }
        let mut size = self.segment_size(pool, rounded, class);
        let mut retried = false;
        // Hard limit: release cached segments, then shrink the segment to the
        // request; or, as PyTorch, release the whole cache and ask once more.
        if let Some(limit) = self.limit
            && self.held() + size > limit
            && !self.config.fit_to_limit
        {
            if self.over_limit_with_cache_released(size) {
                return self.last_resort(pool, class, rounded, req, cached);
            }
            self.counters.alloc_retries += 1;
            retried = true;
            self.release_ordered(self.releasable());
        } else if let Some(limit) = self.limit
            && self.held() + size > limit
        {
            if self.held() + rounded <= limit {
                size = self.fit(pool, size, rounded, limit);
            } else {
                if self.over_limit_with_cache_released(rounded) {
                    // Not even the whole cache would make room (a request
                    // above the limit, or beside live blocks that fill it).
                    return self.last_resort(pool, class, rounded, req, cached);
                }
                self.counters.alloc_retries += 1;
                retried = true;
                self.release_ordered((self.held() + rounded).saturating_sub(limit));
                // Not hopeless: releasing every candidate makes room, and
                // release_ordered stops only once it has.
                debug_assert!(self.held() + rounded <= limit, "the release made room");
                if self.held() + rounded > limit {
                    return Err(self.oom(req.size, false));
                }
                size = self.fit(pool, size, rounded, limit);
            }
        }
        // Soft headroom: keep reserved within (1 + h) × peak allocated.
        if let Some(target) = self.soft_target(rounded)
            && self.held() + size > target
        {
            if size > rounded && self.held() + rounded <= target {
                size = self.fit(pool, size, rounded, target);
            } else if self.config.pack_before_release
                && cached
                && self.recreated
                && let Some(b) = self.find_any_fit(pool, class, rounded)
            {
                // The loop has come back for a segment the headroom released:
                // releasing a free block only to create another buys memory
                // with churn, so a cached block that holds the request serves
                // it, whatever its size.
                self.counters.cache_hits += 1;
                return Ok(Planned::Hit(self.take_block(b, rounded, req)));
            } else {
                let mut target = target;
                if self.churning() {
                    // The headroom has released churn_limit × the high water
                    // since the target last grew: the loop needs more than the
                    // target, so grow it (up to its cap) instead of re-creating.
                    let cap = (self.config.max_headroom_credit * self.high_water as f64) as u64;
                    self.headroom_credit = self.headroom_credit.saturating_add(size).min(cap);
                    self.soft_released = 0;
                    target = self.soft_target(rounded).unwrap_or(target);
                }
                self.soft_released +=
                    self.release_for_headroom((self.held() + size).saturating_sub(target));
                // Still past the target: partly live segments emptied by
                // moving their relocatable blocks, and released.
                let mut evacuated = 0;
                while self.held() + size > target && self.relocation_on(pool) {
                    match self.evacuate_one(pool) {
                        0 => break,
                        released => evacuated += released,
                    }
                }
                if evacuated > 0 {
                    self.soft_released += evacuated;
                    self.backend.flush_releases();
                }
            }
        }
        let label = format!(
            "vrampool {} segment {}",
            self.pools[pool as usize].name, self.counters.device_allocs
        );
        Ok(Planned::Create(SegmentPlan {
            flight: InFlight::new(&self.in_flight, size),
            engine: self.generation_start,
            usage: self.pools[pool as usize].usage,
            req,
            pool,
            class,
            rounded,
            size,
            label,
            retried,
            released_all: false,
        }))
    }

    /// A request the hard limit refuses even with the whole cache released:
    /// a cached block of any class serves it where
    /// [`Config::any_block_before_oom`](crate::Config::any_block_before_oom)
    /// allows (a `cached` request, one that may take a used block), with
    /// nothing released for it; else it runs out of memory, and the cache it
    /// could not use stays.
    fn last_resort(
        &mut self,
        pool: u16,
        class: SegmentClass,
        rounded: u64,
        req: Request,
        cached: bool,
    ) -> Result<Planned> {
        if self.config.any_block_before_oom
            && cached
            && let Some(b) = self.find_last_resort(pool, class, rounded)
        {
            self.counters.cache_hits += 1;
            return Ok(Planned::Hit(self.take_block(b, rounded, req)));
        }
        Err(self.oom(req.size, false))
    }

    /// Takes in the segment the backend created for `plan` and hands out the
    /// request's block in it. A plan another engine made is an error (the
    /// segment is dropped with it, and the plan stops counting in its engine);
    /// so is a device known lost by now (`DeviceLost`: the segment is
    /// destroyed, nothing handed out on it).
    pub fn commit(&mut self, plan: SegmentPlan, segment: B::Segment) -> Result<Allocation> {
        self.check_ours(&plan)?;
        drop(plan.flight);
        // The device was lost while this segment was made (another plan's
        // refusal, or the backend, says so): nothing is handed out on it.
        if let Err(lost) = self.check_lost() {
            self.backend.destroy_segment(segment);
            return Err(lost);
        }
        if !self.under_budget() {
            self.note_recreation(Released {
                pool: plan.pool,
                class: plan.class,
                size: plan.size,
            });
        }
        // The new segment is counted as cached, one free block, until the
        // request takes its block: a passing state, not a peak.
        let pool = plan.pool as usize;
        let peaks = |e: &Self| {
            [&e.total, &e.pools[pool].stats].map(|s| (s.cached_bytes.peak, s.free_blocks.peak))
        };
        let before = peaks(self);
        let index = self.insert_segment(segment, plan.label, plan.pool, plan.class, plan.size);
        self.counters.cache_misses += 1;
        let first = self.segments[index as usize].as_ref().unwrap().first;
        let allocation = self.take_block(first, plan.rounded, plan.req);
        for (st, (cached, free)) in [&mut self.total, &mut self.pools[pool].stats]
            .into_iter()
            .zip(before)
        {
            st.cached_bytes.rewind_peak(cached);
            st.free_blocks.rewind_peak(free);
        }
        Ok(allocation)
    }

    /// Refuses a plan another engine made: its pool, class and bytes in
    /// flight are that engine's (whose count the plan, dropped here, gives
    /// back).
    fn check_ours(&self, plan: &SegmentPlan) -> Result<()> {
        self.check_planned_here(
            plan.engine,
            "a SegmentPlan was handed to an engine other than the one that planned it: \
             commit, refuse or cancel a plan on the engine whose plan() made it",
        )
    }

    /// Refuses, with `message`, what another engine planned (`engine`, its
    /// `generation_start`).
    pub(super) fn check_planned_here(&self, engine: u32, message: &'static str) -> Result<()> {
        if engine == self.generation_start {
            Ok(())
        } else {
            Err(Error::InvalidArgument(message.into()))
        }
    }

    /// The error that ends a request or a pinned plan of `requested` bytes
    /// the device refused for good: out of memory with the pool's state
    /// (counted and told to the observers), device lost (remembered: every
    /// later request fails too, none is served from a dead device's cache),
    /// or the device's own message. The one place a device's refusal
    /// becomes an [`Error`]; the caller has given its bytes in flight back.
    pub(super) fn refusal_error(&mut self, refusal: DeviceError, requested: u64) -> Error {
        match refusal {
            DeviceError::OutOfMemory => self.oom(requested, true),
            DeviceError::Lost(why) => {
                self.lost = Some(why.clone());
                Error::DeviceLost(why)
            }
            DeviceError::Other(message) => Error::Device(message),
        }
    }

    /// The device refused `plan`'s segment: the next plan to try (just the
    /// request instead of a packed segment; then the same after releasing the
    /// whole cache), or the error that ends the request — out of memory with
    /// the pool's state, device lost (every later request fails too), or the
    /// device's own message.
    pub fn refused(&mut self, mut plan: SegmentPlan, refusal: DeviceError) -> Result<SegmentPlan> {
        self.check_ours(&plan)?;
        match refusal {
            DeviceError::OutOfMemory if plan.size > plan.rounded => {
                plan.flight.shrink(plan.rounded);
                plan.size = plan.rounded;
                Ok(plan)
            }
            DeviceError::OutOfMemory if !plan.released_all => {
                // Once per request, even when the hard limit made it release
                // some cache already: what is still cached may be what the
                // device needs back.
                if !plan.retried {
                    self.counters.alloc_retries += 1;
                    plan.retried = true;
                }
                plan.released_all = true;
                self.release(u64::MAX);
                // Whatever was released, now or before (the limit's step,
                // an empty_cache): the device frees it once its work is done.
                self.backend.settle_releases();
                Ok(plan)
            }
            refusal => {
                let requested = plan.req.size;
                drop(plan);
                Err(self.refusal_error(refusal, requested))
            }
        }
    }

    /// Drops a plan the caller will not carry out (its future was cancelled):
    /// its bytes stop counting against the limits. Dropping the plan does
    /// the same; a plan another engine made stops counting in that engine,
    /// with nothing changed here.
    pub fn cancel(&mut self, plan: SegmentPlan) {
        drop(plan);
    }

    /// The soft headroom's cap on reserved bytes if `rounded` more were allocated.
    fn soft_target(&self, rounded: u64) -> Option<u64> {
        let h = self.config.headroom?;
        // While a plan is followed its segments are the memory the workload
        // was foreseen to need: releasing the policy's own segments to keep
        // under a target the plan already fills only churns.
        if self.under_budget() || !self.following.is_empty() {
            return None;
        }
        let peak = self
            .high_water
            .max(self.total.allocated_bytes.current.saturating_add(rounded));
        // The preallocation is memory the caller asked to hold, on top of
        // the headroom: counted against it, a preallocation above about
        // h × the other pools' segments had every miss of another pool
        // release that pool's cached segments first.
        Some(
            ((peak as f64 * (1.0 + h)) as u64)
                .saturating_add(self.headroom_credit)
                .max(self.config.headroom_floor)
                .saturating_add(self.preallocated),
        )
    }

    /// Whether the soft headroom has released [`Config::churn_limit`] × the
    /// high water since its target last grew, and may still grow it.
    fn churning(&mut self) -> bool {
        if self.high_water > self.soft_high {
            // The target grew with the workload: count afresh.
            self.soft_high = self.high_water;
            self.soft_released = 0;
        }
        let high = self.high_water as f64;
        self.config.churn_limit > 0.0
            && self.soft_released as f64 >= self.config.churn_limit * high
            && (self.headroom_credit as f64) < self.config.max_headroom_credit * high
    }

    /// The largest aligned segment size in `rounded..=size` that keeps what is
    /// held under `cap`, fitted to the device's blocks (`fitted_trim`).
    fn fit(&self, pool: u16, size: u64, rounded: u64, cap: u64) -> u64 {
        let room = cap.saturating_sub(self.held()) & !(self.config.alignment - 1);
        self.fitted_trim(pool, room.min(size).max(rounded), rounded)
    }

    /// What a refusal under the limit says is held: the reserved bytes, those
    /// no release could give back, and those being made for other requests.
    pub(super) fn held_words(&self) -> String {
        let reserved = self.total.reserved_bytes.current;
        let mut words = format!(
            "{} is reserved, {} of it in segments that hold live blocks or are pinned",
            crate::fmt_bytes(reserved),
            crate::fmt_bytes(reserved - self.releasable())
        );
        let flight = self.in_flight.load(Ordering::Relaxed);
        if flight > 0 {
            words += &format!(", and {} is being made", crate::fmt_bytes(flight));
        }
        words
    }

    /// Makes room under the limit for `bytes` of pinned segments the caller
    /// asked for (a preallocation, a plan's segments), releasing cached
    /// segments where that is enough, as a request's ladder would. Returns
    /// the limit if even the whole cache would not make room.
    pub(super) fn room_for_pinned(&mut self, bytes: u64) -> Option<u64> {
        let limit = self.limit?;
        let over = self.held().saturating_add(bytes).saturating_sub(limit);
        if over == 0 {
            return None;
        }
        if over <= self.releasable() {
            self.release_ordered(over);
        }
        (self.held().saturating_add(bytes) > limit).then_some(limit)
    }
}
