//! Where a request goes: its size class, the size of a new segment for it, and
//! which cached block may serve it (best fit within the class, the
//! preallocation first, large blocks for small requests without a limit, and
//! the fit rules that keep a small block from pinning a big one). The two
//! placement profiles and their measured values are in config.rs.

use crate::backend::Backend;
use crate::config::{Config, LimitKind, Placement};
use crate::types::SegmentClass;

use super::Engine;
use super::store::round_up;

/// Which rule decides whether a cached large block may serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// The placement's: [`Placement::large_fit`], or
    /// [`Placement::GUARDED_FIT`] for a block the split guard covers.
    Placement,
    /// Any block that holds the request.
    Any,
}

/// The free-index key of each class.
fn class_code(c: SegmentClass) -> u8 {
    match c {
        SegmentClass::Small => 0,
        SegmentClass::Medium => 1,
        SegmentClass::Large => 2,
        SegmentClass::Exclusive => 3,
        SegmentClass::Preallocated => 4,
        SegmentClass::Planned => super::free_index::BY_OFFSET,
    }
}

/// The free-index key of medium blocks: large's with
/// [`Config::shared_large_pool`] (PyTorch's large pool), else its own.
pub(super) fn medium_key(config: &Config) -> u8 {
    if config.shared_large_pool {
        class_code(SegmentClass::Large)
    } else {
        class_code(SegmentClass::Medium)
    }
}

impl<B: Backend> Engine<B> {
    /// The free-index key of a class: its own, except that medium and large
    /// blocks share one with [`Config::shared_large_pool`].
    #[inline]
    pub(super) fn key(&self, c: SegmentClass) -> u8 {
        match c {
            SegmentClass::Medium => self.medium_key,
            other => class_code(other),
        }
    }

    pub(super) fn class_of(&self, rounded: u64, exclusive: bool) -> SegmentClass {
        if exclusive {
            SegmentClass::Exclusive
        } else if rounded <= self.placement().small_request {
            SegmentClass::Small
        } else if rounded <= self.medium_request() {
            SegmentClass::Medium
        } else {
            SegmentClass::Large
        }
    }

    /// The largest medium request: [`Placement::medium_request`], or less
    /// for a small workload (see [`Placement::medium_request_fraction`]).
    fn medium_request(&self) -> u64 {
        let p = self.placement();
        if p.medium_request_fraction > 0.0 {
            let scaled = (self.high_water as f64 * p.medium_request_fraction) as u64;
            p.medium_request.min(scaled.max(p.small_request))
        } else {
            p.medium_request
        }
    }

    /// Whether a hard limit set as a [`LimitKind::Budget`] is in force: the
    /// pool then places with [`Config::under_limit`] and the soft headroom
    /// does not act. Under a [`LimitKind::Ceiling`] the pool places as with
    /// no limit, and the limit acts only where a request would pass it.
    pub(super) fn under_budget(&self) -> bool {
        self.limit.is_some() && self.config.limit_kind == LimitKind::Budget
    }

    /// The placement profile in force: [`Config::under_limit`] under a
    /// budget, [`Config::without_limit`] otherwise.
    pub(super) fn placement(&self) -> &Placement {
        if self.under_budget() {
            &self.config.under_limit
        } else {
            &self.config.without_limit
        }
    }

    /// A cached block for a request of `rounded` bytes of `class` in `pool`:
    /// the preallocation first, then best fit in the class, then (without a
    /// hard limit, small and medium requests) the space large tensors left.
    pub(super) fn find_cached(&self, pool: u16, class: SegmentClass, rounded: u64) -> Option<u32> {
        let preallocated = if class != SegmentClass::Exclusive && self.preallocated > 0 {
            self.find_free(pool, SegmentClass::Preallocated, rounded)
        } else {
            None
        };
        preallocated
            .or_else(|| self.find_in_class_then_large(pool, class, rounded, Fit::Placement))
            .or_else(|| {
                // Medium segments made before a budget was set: under one no
                // request may be medium, so any may use their free space.
                let other = !matches!(class, SegmentClass::Medium | SegmentClass::Exclusive);
                if other && self.under_budget() && !self.config.shared_large_pool {
                    self.find_free(pool, SegmentClass::Medium, rounded)
                } else {
                    None
                }
            })
    }

    /// What the soft headroom takes before it releases cached segments to
    /// make room (see [`Config::pack_before_release`](crate::Config::pack_before_release)):
    /// the smallest cached block that holds `rounded` in the request's class,
    /// then (small and medium requests) among large blocks, whatever size it
    /// is (among large blocks, the busiest segment's near the smallest, as
    /// [`Placement::fullest_within`] says). The split guard and `large_fit`
    /// do not apply: the alternative is releasing a free block only to create
    /// another.
    pub(super) fn find_any_fit(&self, pool: u16, class: SegmentClass, rounded: u64) -> Option<u32> {
        match class {
            SegmentClass::Small | SegmentClass::Medium | SegmentClass::Large => {
                self.find_in_class_then_large(pool, class, rounded, Fit::Any)
            }
            SegmentClass::Exclusive | SegmentClass::Preallocated | SegmentClass::Planned => None,
        }
    }

    /// The last place a request may go before it fails out of memory (see
    /// [`Config::any_block_before_oom`](crate::Config::any_block_before_oom)):
    /// the smallest cached block of any shared class (small, medium, large)
    /// in its pool that holds it, whatever the class and fit rules say (of
    /// the large ones, the one [`Placement::fullest_within`] picks near the
    /// smallest).
    pub(super) fn find_last_resort(
        &self,
        pool: u16,
        class: SegmentClass,
        rounded: u64,
    ) -> Option<u32> {
        if class == SegmentClass::Exclusive {
            return None;
        }
        self.shared_classes()
            .filter_map(|c| self.find_free_by(pool, c, rounded, Fit::Any))
            .min_by_key(|&b| (self.blocks[b as usize].size, b))
    }

    /// The shared classes (small, medium, large), each free-index key once:
    /// with [`Config::shared_large_pool`] medium blocks have large's key, so
    /// medium is left out.
    pub(super) fn shared_classes(&self) -> impl Iterator<Item = SegmentClass> + use<B> {
        let shared = self.key(SegmentClass::Medium) == self.key(SegmentClass::Large);
        let medium = (!shared).then_some(SegmentClass::Medium);
        [Some(SegmentClass::Small), medium, Some(SegmentClass::Large)]
            .into_iter()
            .flatten()
    }

    /// Best fit in the request's class, then (small and medium requests,
    /// with [`Placement::reuse_large_blocks`]) among large blocks, large
    /// blocks held to `fit`.
    fn find_in_class_then_large(
        &self,
        pool: u16,
        class: SegmentClass,
        rounded: u64,
        fit: Fit,
    ) -> Option<u32> {
        self.find_free_by(pool, class, rounded, fit).or_else(|| {
            let packed = matches!(class, SegmentClass::Small | SegmentClass::Medium);
            if packed && self.placement().reuse_large_blocks {
                self.find_free_by(pool, SegmentClass::Large, rounded, fit)
            } else {
                None
            }
        })
    }

    /// Best fit: the smallest free block of `class` that holds `rounded`, if
    /// the fit rules let it serve the request. Blocks are ordered by size, so
    /// when the smallest candidate is refused, every larger one would be too.
    fn find_free(&self, pool: u16, class: SegmentClass, rounded: u64) -> Option<u32> {
        self.find_free_by(pool, class, rounded, Fit::Placement)
    }

    /// [`Engine::find_free`] with a large block held to `fit`; among large
    /// blocks, the one in the busiest segment within
    /// [`Placement::fullest_within`] of the best fit.
    fn find_free_by(&self, pool: u16, class: SegmentClass, rounded: u64, fit: Fit) -> Option<u32> {
        let p = &self.pools[pool as usize];
        let key = self.key(class);
        let refused = |size: u64| match class {
            SegmentClass::Exclusive => size > rounded.saturating_add(rounded / 4),
            SegmentClass::Large if fit == Fit::Any => false,
            SegmentClass::Large => {
                let fit = if self.split_guarded(size) {
                    Placement::GUARDED_FIT
                } else {
                    self.placement().large_fit
                };
                (rounded as f64) < size as f64 * fit
            }
            _ => false,
        };
        let mut fits = p.free.fits(key, rounded);
        let (size, index) = fits.next()?;
        if refused(size) {
            return None;
        }
        let within = self.placement().fullest_within;
        if class != SegmentClass::Large || within <= 0.0 {
            return Some(index);
        }
        let limit = size.saturating_add((size as f64 * within) as u64);
        let live = |b: u32| {
            let segment = self.blocks[b as usize].segment as usize;
            self.segments[segment].as_ref().map_or(0, |s| s.live)
        };
        let mut best = (live(index), index);
        for (size, b) in fits.take(Placement::FULLEST_CANDIDATES - 1) {
            if size > limit || refused(size) {
                break;
            }
            let l = live(b);
            if l > best.0 {
                best = (l, b);
            }
        }
        Some(best.1)
    }

    /// Whether a cached large block is too big to be split freely: pinning it
    /// with a small block could by itself cost more than the headroom allows.
    fn split_guarded(&self, block: u64) -> bool {
        self.placement().split_guard.is_some_and(|k| {
            let h = self.config.headroom.unwrap_or(0.0);
            block as f64 >= k * h * self.high_water as f64
        })
    }

    /// The smallest remainder split off a large block: the profile's
    /// [`Placement::min_split_remainder`], or less for a small workload (see
    /// [`Placement::split_remainder_fraction`]).
    pub(super) fn min_split_remainder(&self) -> u64 {
        let p = self.placement();
        if p.split_remainder_fraction > 0.0 {
            let scaled = (self.high_water as f64 * p.split_remainder_fraction) as u64;
            p.min_split_remainder.min(scaled.max(self.config.alignment))
        } else {
            p.min_split_remainder
        }
    }

    /// A new small segment grows with what small segments already hold (see
    /// [`Placement::small_segment_growth`]).
    fn grown_small_segment(&self) -> u64 {
        let p = self.placement();
        let base = p.small_segment;
        if p.small_segment_growth <= 0.0 {
            return base;
        }
        let held: u64 = self
            .segments
            .iter()
            .flatten()
            .filter(|s| s.class == SegmentClass::Small)
            .map(|s| s.size)
            .sum();
        let mut cap = p.max_small_segment;
        if p.small_segment_fraction > 0.0 {
            cap = cap.min(round_up(
                (self.high_water as f64 * p.small_segment_fraction) as u64,
                base,
            ));
        }
        round_up((held as f64 * p.small_segment_growth) as u64, base).clamp(base, cap.max(base))
    }

    /// The size of a new segment of `class` for a request of `rounded` bytes
    /// in `pool`, before the limits are applied.
    pub(super) fn segment_size(&self, pool: u16, rounded: u64, class: SegmentClass) -> u64 {
        let s = match class {
            SegmentClass::Small => self.grown_small_segment().max(rounded),
            SegmentClass::Medium => {
                let p = self.placement();
                let mut seg = p.medium_segment;
                if p.medium_segment_fraction > 0.0 {
                    let cap = round_up(
                        (self.high_water.max(self.total.allocated_bytes.current) as f64
                            * p.medium_segment_fraction) as u64,
                        p.small_segment.max(1),
                    );
                    seg = seg.min(cap.max(p.medium_segment_blocks.saturating_mul(rounded)));
                }
                if let Some(limit) = self.limit
                    && self.under_budget()
                    && self.config.fit_to_limit
                {
                    // A shared segment is at most an eighth of the budget, so a
                    // small budget is not spent on one half-empty segment (a
                    // ceiling changes nothing until it is reached).
                    let blocks = p.medium_segment_blocks.saturating_mul(rounded);
                    seg = seg.min(round_up(limit / 8, p.small_segment.max(1)).max(blocks));
                }
                seg.max(rounded)
            }
            SegmentClass::Large => round_up(rounded, self.placement().large_rounding.max(1)),
            SegmentClass::Exclusive | SegmentClass::Preallocated | SegmentClass::Planned => rounded,
        };
        // Fitted to the device's blocks, but not where a limit takes a
        // segment as its request sizes it or not at all (`fit_to_limit` off).
        let padded = self.limit.is_none() || self.config.fit_to_limit;
        let s = match class {
            SegmentClass::Small | SegmentClass::Medium | SegmentClass::Large if padded => {
                self.fitted(pool, s)
            }
            _ => s,
        };
        // Whole alignment units (a profile's sizes need not be), so every
        // block's offset stays aligned; never above the largest buffer.
        (s.min(self.max_segment) & !(self.config.alignment - 1)).max(rounded)
    }
}
