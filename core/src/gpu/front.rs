//! The front cache: blocks whose last handle was dropped, kept per thread
//! and handed straight to that thread's next request with the same
//! description, without the engine's lock (jemalloc's tcache, PyTorch's
//! per-stream free lists). It is what makes a cache hit cost tens of
//! nanoseconds and lets threads allocate on one pool at once.
//!
//! Architecture invariant: the engine still owns every block. A parked block
//! is live in the engine's books; the pool gives parked blocks back to the
//! engine (as frees, or as deferred frees with their drop's mark): a thread's
//! own before the engine's cache serves it, every thread's before a segment
//! is made, and all of them before every figure, snapshot, leak report,
//! limit change and `empty_cache` (see `Inner::engine_mine` in pool.rs).
//!
//! The caches live in a process-wide table, each lent to one pool at a
//! time: a handle reaches its pool's cache through a `&'static`, with no
//! reference count to touch on the hot path (an `Arc` or `Weak` would make
//! every thread's drop write one shared cache line). The table grows to the
//! most pools alive at once and its caches are reused, never freed. A
//! cache's generation changes when its pool goes, so a handle outliving its
//! pool parks nowhere.
//!
//! Submits are counted here too, as two epochs: a block dropped under
//! [`Reuse::AfterSubmit`] is stamped with `dropped`, and may serve a new
//! owner once `ready` has passed its stamp — after the pool learned of a
//! submit that began after the drop. `ready` only grows; the pool keeps it
//! from passing a [`Pool::submit`](super::Pool::submit) still under way.
//!
//! A shard whose thread submits does not read `dropped` at each drop (every
//! thread's submit writes it, so with several threads submitting most reads
//! would miss the cache): its blocks park unstamped and the next submit from
//! the shard stamps them, under the shard's lock, with the epoch that submit
//! begins. Blocks still unstamped when the shard's take misses, or when a
//! drain takes them, are stamped then with the epoch of that moment, read
//! under the shard's lock after their parks, so never too early.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::relax::Yield;

use super::desc::Sharing;
use super::handle::BufferBlock;
use super::pool::Reuse;

/// Blocks one shard holds at most; a drop past it goes to the engine.
const SHARD_BLOCKS: usize = 64;

/// The stamp of a block parked by a submitting thread before a submit,
/// a miss or a drain stamps it (see the module's doc); never reusable as is.
const UNSTAMPED: u64 = u64::MAX;

/// Which shards [`FrontCache::drain`] empties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drain {
    /// This thread's.
    Mine,
    /// Every shard that shows a block (a park under way may be missed: it
    /// stays parked, still live in the engine's books).
    Every,
    /// Every shard, each under its lock whatever it shows: after closing,
    /// so that a park under way is either taken or refused.
    EveryLocked,
}

/// What makes two requests the same: the pool derives a request from these
/// alone (with its own settings), so a block parked for one serves the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    /// Size rounded to 4 bytes, as the handle's range is.
    pub(super) size: u64,
    /// `AllocDesc::usage`.
    pub(super) usage: wgpu::BufferUsages,
    /// What `AllocDesc::usage` and `AllocDesc::access` make of the block.
    pub(super) sharing: Sharing,
}

/// A block whose last handle was dropped, waiting for its next owner.
pub(super) struct Parked {
    pub(super) block: Arc<BufferBlock>,
    pub(super) key: Key,
    /// The submit epoch of the drop ([`FrontCache::stamp`]), or
    /// [`UNSTAMPED`] while it is in its shard.
    pub(super) stamp: u64,
}

#[derive(Default)]
struct Slot {
    parked: Vec<Parked>,
    /// Requests served from this shard since the engine last counted them.
    handed_on: u64,
    /// The ready epoch as this shard last read it: a finished submit covered
    /// every stamp below it, so a take need not read the shared epoch (which
    /// every submit writes) while its blocks are under it.
    seen_ready: u64,
    /// A thread of this shard submits: drops here park [`UNSTAMPED`] for the
    /// shard's next submit to stamp (any thread sharing the shard, too).
    /// Cleared when another shard's submit would have covered blocks still
    /// unstamped, so a shard whose threads stop submitting goes back to
    /// stamping at the drop.
    lazy: bool,
}

impl Slot {
    /// Stamps the blocks parked unstamped with `epoch`.
    fn stamp_unstamped(&mut self, epoch: u64) {
        for p in self.parked.iter_mut().filter(|p| p.stamp == UNSTAMPED) {
            p.stamp = epoch;
        }
    }

    fn has_unstamped(&self) -> bool {
        self.parked.iter().any(|p| p.stamp == UNSTAMPED)
    }
}

/// One thread's share (threads past the shard count share): its own cache
/// line, so threads do not slow each other down. The lock is a spin lock
/// (yielding while it waits): its owner takes it on every hit and drop, others
/// only to drain it, and its unlock is a store where a `Mutex`'s is an atomic
/// read-modify-write.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    /// Whether `slot` may hold a block, so a drain skips empty shards
    /// without taking their locks.
    occupied: AtomicBool,
    slot: SpinMutex<Slot, Yield>,
}

impl Shard {
    fn lock(&self) -> SpinMutexGuard<'_, Slot> {
        self.slot.lock()
    }
}

/// The submit epochs, on a cache line of their own: every submit writes
/// them, and nothing read on every hit may share their line.
#[repr(align(128))]
struct Epochs {
    /// The stamp of a block dropped now under `Reuse::AfterSubmit`.
    dropped: AtomicU64,
    /// Blocks with a stamp below this may be reused.
    ready: AtomicU64,
}

/// One slot of the table: the front cache of the pool it is lent to.
pub(super) struct FrontCache {
    shards: Box<[Shard]>,
    /// Lent to a pool.
    lent: AtomicBool,
    /// Changes when the slot's pool goes; handles carry the one they were made under.
    generation: AtomicU64,
    /// Parks and takes are allowed (off while the pool records).
    open: AtomicBool,
    /// The pool's `Reuse::Immediate`: blocks are reusable as soon as dropped.
    immediate: AtomicBool,
    epochs: Epochs,
}

/// The cache a pool's handles park in, and the generation they were made under.
#[derive(Clone, Copy)]
pub(super) struct FrontRef {
    pub(super) cache: &'static FrontCache,
    generation: u64,
}

/// Every front cache made so far, lent or free.
#[cfg(not(target_arch = "wasm32"))]
static TABLE: std::sync::Mutex<Vec<&'static FrontCache>> = std::sync::Mutex::new(Vec::new());

#[cfg(target_arch = "wasm32")]
thread_local! {
    /// In the browser (one thread; wgpu's types are neither `Send` nor `Sync`
    /// there, so no `static` may hold them), the table is the thread's own.
    static TABLE: std::cell::RefCell<Vec<&'static FrontCache>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

/// Runs `f` on the table of front caches.
fn with_table<R>(f: impl FnOnce(&mut Vec<&'static FrontCache>) -> R) -> R {
    #[cfg(not(target_arch = "wasm32"))]
    return f(&mut TABLE.lock().unwrap_or_else(|e| e.into_inner()));
    #[cfg(target_arch = "wasm32")]
    return TABLE.with(|t| f(&mut t.borrow_mut()));
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number, which picks its shard (`usize::MAX` until its first use).
    static THREAD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Makes the calling thread use shard `index` (modulo the shard count) of
/// every pool's front cache from now on. For tests that need two threads on
/// two shards (or on one); threads are numbered in order of first use
/// otherwise.
#[doc(hidden)]
pub fn pin_thread_shard(index: usize) {
    THREAD.with(|t| t.set(index));
}

impl FrontCache {
    fn new() -> FrontCache {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = cores.next_power_of_two().clamp(4, 64);
        FrontCache {
            shards: (0..shards).map(|_| Shard::default()).collect(),
            lent: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            open: AtomicBool::new(true),
            immediate: AtomicBool::new(false),
            epochs: Epochs {
                dropped: AtomicU64::new(1),
                ready: AtomicU64::new(1),
            },
        }
    }

    /// Lends a free cache to a new pool (a new one when every cache is lent).
    /// Closed (`open == false`), it parks and hands out nothing.
    pub(super) fn lend(reuse: Reuse, open: bool) -> FrontRef {
        let cache =
            with_table(
                |table| match table.iter().find(|c| !c.lent.load(Ordering::Acquire)) {
                    Some(&cache) => {
                        cache.lent.store(true, Ordering::Release);
                        cache
                    }
                    None => {
                        let cache: &'static FrontCache = Box::leak(Box::new(FrontCache::new()));
                        cache.lent.store(true, Ordering::Release);
                        table.push(cache);
                        cache
                    }
                },
            );
        // The previous pool drained it under each shard's lock after closing
        // it, so nothing is parked; what a stale handle could have left is
        // dropped here anyway (its pool is gone, so it goes nowhere).
        let mut stale = Vec::new();
        cache.drain(Drain::EveryLocked, |p| stale.push(p.block));
        drop(stale);
        cache
            .immediate
            .store(reuse == Reuse::Immediate, Ordering::Relaxed);
        cache.epochs.dropped.store(1, Ordering::Relaxed);
        cache.epochs.ready.store(1, Ordering::Relaxed);
        for shard in cache.shards.iter() {
            let mut slot = shard.lock();
            slot.handed_on = 0;
            slot.seen_ready = 0;
            slot.lazy = false;
        }
        cache.open.store(open, Ordering::Release);
        let generation = cache.generation.load(Ordering::Acquire);
        FrontRef { cache, generation }
    }

    /// Ends the pool's loan: handles of it park nowhere from now on. The
    /// caller drains what is parked, then calls [`FrontCache::give_back`].
    pub(super) fn close(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.open.store(false, Ordering::Release);
    }

    /// Makes the slot free for another pool (after `close` and a drain).
    pub(super) fn give_back(&self) {
        self.lent.store(false, Ordering::Release);
    }

    fn shard(&self) -> &Shard {
        let i = THREAD.with(|t| {
            if t.get() == usize::MAX {
                t.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
            }
            t.get()
        });
        &self.shards[i & (self.shards.len() - 1)]
    }

    /// The mark a block dropped now waits for: 0 (reusable at once) under
    /// `Reuse::Immediate`, else the current drop epoch.
    pub(super) fn stamp(&self) -> u64 {
        if self.immediate.load(Ordering::Relaxed) {
            0
        } else {
            self.epochs.dropped.load(Ordering::Acquire)
        }
    }

    /// The drop epoch now, whatever the reuse: a place read now
    /// ([`MovableBuffer::place`](crate::MovableBuffer::place)) stays pinned
    /// until [`FrontCache::reusable_mark`] reaches it, as a block dropped now
    /// under `Reuse::AfterSubmit` stays pending.
    pub(super) fn epoch(&self) -> u64 {
        self.epochs.dropped.load(Ordering::SeqCst)
    }

    /// The engine mark up to which deferred blocks may be reused.
    pub(super) fn reusable_mark(&self) -> u64 {
        self.epochs.ready.load(Ordering::Acquire) - 1
    }

    /// A submit begins: blocks dropped from now on wait for the next one.
    /// Returns the epoch to pass to [`FrontCache::submit_done`].
    pub(super) fn submit_begins(&self) -> u64 {
        self.begin(&mut self.shard().lock())
    }

    /// A submit begins, under the lock of the calling thread's shard `slot`:
    /// the blocks parked there unstamped take the drop epoch as it is now,
    /// read under that lock and so after their parks (a submit that begins at
    /// it begins after their drops: this one, or one on another thread that
    /// came first), and the shard's later drops park unstamped too. Returns
    /// the epoch this submit begins.
    fn begin(&self, slot: &mut Slot) -> u64 {
        slot.stamp_unstamped(self.epochs.dropped.load(Ordering::SeqCst));
        slot.lazy = true;
        // Sequentially consistent: the pool orders it against the flag of a
        // `Pool::submit` under way (see `Pool::submitted`).
        self.epochs.dropped.fetch_add(1, Ordering::SeqCst)
    }

    /// The submit begun at `epoch` is in the queue: blocks dropped before it
    /// began may be reused.
    pub(super) fn submit_done(&self, epoch: u64) {
        self.done(&mut self.shard().lock(), epoch);
    }

    /// [`FrontCache::submit_done`] under the lock of the calling thread's
    /// shard `slot`.
    fn done(&self, slot: &mut Slot, epoch: u64) {
        self.epochs.ready.fetch_max(epoch + 1, Ordering::AcqRel);
        // This thread's next take finds the blocks just stamped ready
        // without reading the shared epoch.
        slot.seen_ready = slot.seen_ready.max(epoch + 1);
    }

    /// Stamps the blocks `slot` holds unstamped (a miss or a drain found
    /// them before a submit did) with the drop epoch of this moment: read
    /// under the shard's lock, so after their parks, at or past each one's
    /// drop. The shared epoch is read only when there are some. Returns
    /// whether there were.
    fn stamp_late(&self, slot: &mut Slot) -> bool {
        if !slot.has_unstamped() {
            return false;
        }
        slot.stamp_unstamped(self.epochs.dropped.load(Ordering::Acquire));
        true
    }

    /// [`Pool::submitted`](super::Pool::submitted): a submit that begins and
    /// is done at once, under the calling thread's shard lock. `under_way`, read
    /// after the drop epoch's advance, says whether a `Pool::submit` is under
    /// way; if so the ready epoch moves only once `wait` returns, and not at
    /// all if it cannot wait (`None`: the blocks wait for the next submit).
    pub(super) fn submit_now<G>(
        &self,
        under_way: impl FnOnce() -> bool,
        wait: impl FnOnce() -> Option<G>,
    ) {
        let mut slot = self.shard().lock();
        let epoch = self.begin(&mut slot);
        if under_way() {
            drop(slot);
            if let Some(_waited) = wait() {
                self.submit_done(epoch);
            }
        } else {
            self.done(&mut slot, epoch);
        }
    }

    /// A block this thread parked for `key` with the label `label`, whose
    /// drop a submit has covered.
    pub(super) fn take(&self, key: Key, label: Option<&str>) -> Option<Arc<BufferBlock>> {
        let shard = self.shard();
        if !shard.occupied.load(Ordering::Relaxed) {
            return None;
        }
        let mut slot = shard.lock();
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let find = |slot: &Slot, ready: u64| {
            slot.parked
                .iter()
                .rposition(|p| p.key == key && p.stamp < ready && p.block.label() == label)
        };
        let i = match find(&slot, slot.seen_ready) {
            Some(i) => i,
            None => {
                let ready = self.epochs.ready.load(Ordering::Acquire);
                if self.stamp_late(&mut slot) && ready != slot.seen_ready {
                    // Another thread's submit came first: stamping at the
                    // drop would have let the blocks just stamped go now.
                    slot.lazy = false;
                }
                slot.seen_ready = ready;
                find(&slot, slot.seen_ready)?
            }
        };
        // In drop order, so a drain hands blocks back in the order they went.
        // The last one parked is the usual hit (a loop's block, dropped and
        // asked for again): popped, with no call to shift the rest.
        let parked = if i + 1 == slot.parked.len() {
            slot.parked.pop().expect("index i is in the vector")
        } else {
            slot.parked.remove(i)
        };
        slot.handed_on += 1;
        if slot.parked.is_empty() {
            shard.occupied.store(false, Ordering::Relaxed);
        }
        Some(parked.block)
    }

    /// Parks `block` (made under `r`) for this thread's next request of
    /// `key`, or gives it back when the shard is full, the cache is closed,
    /// or the slot has passed to another pool.
    pub(super) fn park(
        r: FrontRef,
        block: Arc<BufferBlock>,
        key: Key,
    ) -> Result<(), Arc<BufferBlock>> {
        let cache = r.cache;
        let shard = cache.shard();
        let mut slot = shard.lock();
        // Checked under the shard's lock: the pool closes before it drains
        // every shard under its lock (`Drain::EveryLocked`), so a block
        // parked here is either drained or refused.
        if cache.generation.load(Ordering::Acquire) != r.generation
            || !cache.open.load(Ordering::Acquire)
            || slot.parked.len() >= SHARD_BLOCKS
        {
            return Err(block);
        }
        let stamp = if slot.lazy && !cache.immediate.load(Ordering::Relaxed) {
            UNSTAMPED
        } else {
            cache.stamp()
        };
        slot.parked.push(Parked { block, key, stamp });
        shard.occupied.store(true, Ordering::Release);
        Ok(())
    }

    /// Takes the blocks parked in the shards `which` names and calls `each`
    /// on them outside the shards' locks (so engine work and the drop of a
    /// buffer never run while a thread waits for its shard).
    pub(super) fn drain(&self, which: Drain, mut each: impl FnMut(Parked)) {
        let shards = match which {
            Drain::Mine => std::slice::from_ref(self.shard()),
            Drain::Every | Drain::EveryLocked => &self.shards[..],
        };
        let mut taken = Vec::new();
        for shard in shards {
            if which != Drain::EveryLocked && !shard.occupied.load(Ordering::Acquire) {
                continue;
            }
            {
                let mut slot = shard.lock();
                shard.occupied.store(false, Ordering::Relaxed);
                self.stamp_late(&mut slot);
                std::mem::swap(&mut slot.parked, &mut taken);
            }
            if taken.is_empty() {
                continue;
            }
            taken.drain(..).for_each(&mut each);
            // Give the shard its own storage back, unless it parked meanwhile.
            let mut slot = shard.lock();
            if slot.parked.is_empty() {
                std::mem::swap(&mut slot.parked, &mut taken);
            }
        }
    }

    /// Requests the shards served since the last call.
    pub(super) fn take_handed_on(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| std::mem::take(&mut s.lock().handed_on))
            .sum()
    }

    /// Visits every parked block, leaving it parked (for invariant checks;
    /// `each` runs under the shard's lock).
    pub(super) fn visit(&self, mut each: impl FnMut(&Parked)) {
        for shard in self.shards.iter() {
            shard.lock().parked.iter().for_each(&mut each);
        }
    }

    /// Opens or closes the cache to parks and takes while the pool keeps it
    /// (closed while the pool records events); the caller drains it.
    pub(super) fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Release);
    }
}
