//! Pinned segments — a preallocation ([`Engine::preallocate`]) and a
//! followed plan's ([`Engine::follow`]) — made at once, outside the refusal
//! ladder: the caller asked for exactly this memory. In two phases, as a
//! request's segment is ([`Engine::plan`]): [`Engine::plan_preallocate`] or
//! [`Engine::plan_follow_recorded`] checks the request, makes room under the
//! limit and gives a [`PinnedPlan`]; the caller has the backend create each
//! of its segments — at once natively, awaiting the device's answer in the
//! browser — telling [`Engine::refused_pinned`] of a refusal; then
//! [`Engine::commit_pinned`] takes them all in, or [`Engine::cancel_pinned`]
//! takes those made as ordinary cache. `preallocate` and `follow` run the
//! phases themselves.
//!
//! Architecture invariant: a device refusal becomes an [`Error`] through
//! `ladder.rs`'s `refusal_error` alone, as a request's does, and a refused
//! plan pins and follows nothing.

use std::ops::Range;

use crate::backend::{Backend, DeviceError, SegmentDesc};
use crate::error::{Error, Result};
use crate::types::SegmentClass;

use super::Engine;
use super::follow::Entry;
use super::ladder::InFlight;
use super::store::round_up;

/// Pinned segments the engine wants created: a preallocation's or a
/// followed plan's. Counted against its engine's limit until it is
/// committed, cancelled or dropped.
///
/// ```
/// use vrampool::{Config, Engine, SimulatedDevice};
/// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
/// let mut plan = e.plan_preallocate(8 << 20)?.expect("8 MiB to make");
/// let mut made = Vec::new();
/// while made.len() < plan.len() {
///     // At once here; the wgpu binding awaits a browser's answer instead.
///     match e.create_pinned_segment(&plan, made.len()) {
///         Ok(segment) => made.push(segment),
///         Err(refusal) => {
///             if let Err(err) = e.refused_pinned(&mut plan, made.len(), refusal) {
///                 e.cancel_pinned(plan, made);
///                 return Err(err.into());
///             }
///         }
///     }
/// }
/// e.commit_pinned(plan, made)?;
/// assert_eq!(e.stats().total.reserved_bytes.current, 8 << 20);
/// assert!(e.snapshot().segments[0].pinned);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "create its segments and commit them, or cancel the plan"]
pub struct PinnedPlan {
    /// The engine that made it (its `generation_start`).
    engine: u32,
    segments: Vec<PinnedSegment>,
    /// The segments' bytes counted in the engine's bytes in flight.
    flight: InFlight,
    what: Pinned,
    /// The cache was released once for it after a device refusal.
    released_all: bool,
}

#[derive(Debug)]
pub(super) struct PinnedSegment {
    pub(super) pool: u16,
    pub(super) usage: u32,
    pub(super) label: String,
    pub(super) class: SegmentClass,
    pub(super) size: u64,
}

/// What the segments are for.
#[derive(Debug)]
pub(super) enum Pinned {
    Preallocation,
    /// Per followed pool, its index, planned blocks (their `segment` an
    /// index into the plan's segments until committed) and its segments
    /// (a range of the plan's).
    Follow(Vec<(u16, Vec<Entry>, Range<usize>)>),
}

impl PinnedPlan {
    /// How many segments to create, in order.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// Whether there is nothing to create.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The `i`th segment to create.
    ///
    /// # Panics
    /// If `i` is not below [`PinnedPlan::len`].
    pub fn desc(&self, i: usize) -> SegmentDesc<'_> {
        let s = &self.segments[i];
        SegmentDesc {
            size: s.size,
            usage: s.usage,
            label: &s.label,
        }
    }

    /// The bytes of all its segments.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }
}

impl<B: Backend> Engine<B> {
    /// Reserves `bytes` in one pinned segment of the default pool. Under a
    /// limit, cached segments are released to make room if that is enough.
    pub fn preallocate(&mut self, bytes: u64) -> Result<()> {
        match self.plan_preallocate(bytes)? {
            Some(plan) => self.make_pinned(plan),
            None => Ok(()),
        }
    }

    /// The first phase of [`Engine::preallocate`]: `None` for 0 bytes; a
    /// preallocation above the largest segment, or one that does not fit the
    /// limit once the cache is released, is an [`Error::InvalidArgument`].
    pub fn plan_preallocate(&mut self, bytes: u64) -> Result<Option<PinnedPlan>> {
        self.check_lost()?;
        if bytes == 0 {
            return Ok(None);
        }
        // Rounded first, as a request is: the segment made is the rounded size.
        let size = round_up(bytes, self.config.alignment);
        if bytes > self.max_segment || size > self.max_segment {
            return Err(Error::InvalidArgument(format!(
                "cannot preallocate {}: above the largest segment this pool may create, {} (the \
                 device's max_buffer_size, or Config::max_segment_size where that is lower); \
                 preallocate at most that",
                crate::fmt_bytes(bytes),
                crate::fmt_bytes(self.max_segment)
            )));
        }
        if let Some(limit) = self.room_for_pinned(size) {
            return Err(Error::InvalidArgument(format!(
                "cannot preallocate {}: the limit is {} and {}; raise the limit, drop live \
                 blocks, or preallocate less",
                crate::fmt_bytes(size),
                crate::fmt_bytes(limit),
                self.held_words()
            )));
        }
        let usage = self.config.default_usage;
        let pool = self.pool_index(usage, false, 0, || format!("usage {usage:#x}"))?;
        let segment = PinnedSegment {
            pool,
            usage,
            label: "vrampool preallocated segment".to_string(),
            class: SegmentClass::Preallocated,
            size,
        };
        Ok(Some(self.pinned_plan(vec![segment], Pinned::Preallocation)))
    }

    /// A plan of `segments` for `what`, its bytes counted against the limit.
    pub(super) fn pinned_plan(&self, segments: Vec<PinnedSegment>, what: Pinned) -> PinnedPlan {
        let bytes = segments.iter().map(|s| s.size).sum();
        PinnedPlan {
            engine: self.generation_start,
            segments,
            flight: InFlight::new(&self.in_flight, bytes),
            what,
            released_all: false,
        }
    }

    /// Creates `plan`'s `i`th segment on this engine's backend, at once (a
    /// caller whose backend answers later creates [`PinnedPlan::desc`] its
    /// own way). Hand the segment to [`Engine::commit_pinned`] with the
    /// others, or a refusal to [`Engine::refused_pinned`].
    ///
    /// # Panics
    /// If `i` is not below [`PinnedPlan::len`].
    pub fn create_pinned_segment(
        &mut self,
        plan: &PinnedPlan,
        i: usize,
    ) -> std::result::Result<B::Segment, DeviceError> {
        self.backend.create_segment(&plan.desc(i))
    }

    /// Creates `plan`'s segments at once and commits them.
    pub(super) fn make_pinned(&mut self, mut plan: PinnedPlan) -> Result<()> {
        let mut made = Vec::with_capacity(plan.len());
        while made.len() < plan.len() {
            match self.create_pinned_segment(&plan, made.len()) {
                Ok(segment) => made.push(segment),
                Err(refusal) => {
                    if let Err(e) = self.refused_pinned(&mut plan, made.len(), refusal) {
                        self.cancel_pinned(plan, made);
                        return Err(e);
                    }
                }
            }
        }
        self.commit_pinned(plan, made)
    }

    /// The device refused `plan`'s `i`th segment: `Ok` to ask again (after
    /// an out-of-memory, once the whole cache is released: it may be what
    /// the device needs back), or the error that ends the plan — out of
    /// memory with the pool's state (counted and told to the observers as
    /// any is), device lost (every later request fails too), or the device's
    /// own message. Then [`Engine::cancel_pinned`] the plan.
    pub fn refused_pinned(
        &mut self,
        plan: &mut PinnedPlan,
        i: usize,
        refusal: DeviceError,
    ) -> Result<()> {
        self.check_pinned_ours(plan)?;
        match refusal {
            DeviceError::OutOfMemory if !plan.released_all => {
                // Once a plan, as a request's ladder does: the cache may be
                // what the device needs back, and what was released (now or
                // before) is freed once the work using it is done.
                plan.released_all = true;
                self.counters.alloc_retries += 1;
                self.release(u64::MAX);
                self.backend.settle_releases();
                Ok(())
            }
            refusal => {
                // The out-of-memory's bytes in flight are other requests'.
                plan.flight.shrink(0);
                let size = plan.segments.get(i).map_or(0, |s| s.size);
                Err(self.refusal_error(refusal, size))
            }
        }
    }

    /// Takes `made`, every segment of `plan` in order, in: pinned, the
    /// preallocation counted or the plan followed (a plan followed before
    /// given up). After a known device loss they are destroyed instead and
    /// the loss is the error.
    pub fn commit_pinned(&mut self, plan: PinnedPlan, made: Vec<B::Segment>) -> Result<()> {
        // Another engine's segments are not this backend's to destroy.
        self.check_pinned_ours(&plan)?;
        if made.len() != plan.len() {
            let (asked, got) = (plan.len(), made.len());
            self.cancel_pinned(plan, made);
            return Err(Error::InvalidArgument(format!(
                "a pinned plan of {asked} segments was committed with {got}: create every \
                 segment of PinnedPlan::desc, in order, then commit"
            )));
        }
        let bytes = plan.bytes();
        let PinnedPlan {
            segments,
            flight,
            what,
            ..
        } = plan;
        drop(flight);
        if let Err(lost) = self.check_lost() {
            for segment in made {
                self.backend.destroy_segment(segment);
            }
            return Err(lost);
        }
        let indexes: Vec<u32> = segments
            .into_iter()
            .zip(made)
            .map(|(s, payload)| {
                let index = self.insert_segment(payload, s.label, s.pool, s.class, s.size);
                self.segments[index as usize].as_mut().unwrap().pinned = true;
                index
            })
            .collect();
        match what {
            Pinned::Preallocation => {
                self.preallocated += bytes;
                Ok(())
            }
            Pinned::Follow(pools) => self.start_following(pools, indexes),
        }
    }

    /// Gives `plan` up: `made`, the segments created for it before a
    /// refusal, become ordinary cached segments (destroyed instead once the
    /// device is known lost); nothing is pinned or followed.
    pub fn cancel_pinned(&mut self, plan: PinnedPlan, made: Vec<B::Segment>) {
        let ours = self.check_pinned_ours(&plan).is_ok();
        drop(plan.flight);
        if !ours {
            return;
        }
        let lost = self.check_lost().is_err();
        let mut segments = plan.segments.into_iter();
        for payload in made {
            match segments.next() {
                Some(s) if !lost => {
                    self.insert_segment(payload, s.label, s.pool, SegmentClass::Large, s.size);
                }
                _ => self.backend.destroy_segment(payload),
            }
        }
    }

    /// Refuses a pinned plan another engine made.
    fn check_pinned_ours(&self, plan: &PinnedPlan) -> Result<()> {
        self.check_planned_here(
            plan.engine,
            "a PinnedPlan was handed to an engine other than the one that planned it: commit \
             or cancel it on the engine whose plan_preallocate or plan_follow_recorded made it",
        )
    }
}
