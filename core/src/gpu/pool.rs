//! [`Pool`]: the engine behind a mutex over a `wgpu::Device` and its queue.
//! It maps descriptions to requests, wraps blocks in handles, zeroes reused
//! bytes, learns of submits ([`Reuse`]), and runs the browser's asynchronous
//! allocation path.

// On wasm32 wgpu's types are neither Send nor Sync; one Arc-based code path
// serves both targets (native needs Send + Sync for Pool and its handles).
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LockResult, Mutex, MutexGuard, TryLockError, TryLockResult, Weak};

use crate::config::{Config, Limit};
use crate::engine::{Engine, FollowStats, InvariantError, PinnedPlan, Planned};
use crate::error::{Error, OomInfo, Result};
use crate::fault::Faults;
use crate::snapshot::{Leak, Snapshot};
use crate::stats::Stats;
use crate::trace::RecordedPlan;
use crate::types::{Allocation, BlockId, Request};

use super::backend::{LostState, WgpuBackend};
use super::desc::{
    AllocDesc, GPU_USAGE, GROUP_READ_ONLY, GROUP_READ_WRITE, READ_WRITE_USAGE, Sharing, mappable,
};
use super::front::{Drain, FrontCache, FrontRef, Key, Parked};
use super::handle::{BufferBlock, PoolBuffer};
use super::lock::{
    DeferredFree, EngineGuard, SubmitMark, held_anywhere, held_here, shielded, submitting_anywhere,
    submitting_here,
};
use super::movable::{MovableBuffer, Movables};
use super::scope::{Scope, ScopeReport};

/// How to build a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The engine's policy.
    pub config: Config,
    /// Serve every request of one [`Sharing`](crate::Sharing) from one pool
    /// created with the widest usage that sharing allows ([`GPU_USAGE`], or
    /// [`READ_WRITE_USAGE`](crate::READ_WRITE_USAGE)): fewer segments. Off
    /// keys pools by the exact usage too. Turn it off on a device without
    /// `DownlevelFlags::UNRESTRICTED_INDEX_BUFFER` or `INDIRECT_EXECUTION`
    /// (GLES 3.0, WebGL2), where wgpu refuses a buffer with every use.
    pub widen_usage: bool,
    /// When a dropped block may be handed to its next owner.
    pub reuse: Reuse,
    /// Keep each thread's dropped blocks in a front cache and hand them to
    /// its next request with the same description without the engine's lock
    /// (jemalloc's tcache): a cache hit then costs tens of nanoseconds, and
    /// threads allocate at once. The engine gets a thread's parked blocks
    /// back before it serves that thread, every thread's before it makes a
    /// segment, and all of them before any figure is read; but it does not
    /// choose which block a front hit gets, so placements (and reserved
    /// bytes) can differ slightly from an engine replay of the same events,
    /// and with several threads a peak of allocated bytes may count blocks
    /// other threads had parked (at most 64 per shard of the front cache;
    /// threads share 4 to 64 shards, by the machine's cores). Off, every
    /// allocation and free goes through the engine, one lock at a time. On
    /// by default; off, whatever this says, while the pool records, follows
    /// a plan or has a cache limit ([`Pool::set_cache_limit`]).
    pub front_cache: bool,
    /// For tests: device refusals to inject (see [`crate::fault`]); they take
    /// the path wgpu's error scopes take, natively and in the browser.
    pub faults: Option<Faults>,
    /// The memory hints the device was opened with
    /// (`DeviceDescriptor::memory_hints`; wgpu's default, and this one's, is
    /// `Performance`). wgpu cannot be asked; on Vulkan they say in which
    /// blocks its allocator places the pool's segments, which the pool sizes
    /// new segments to ([`Config::fit_device_blocks`]). With
    /// [`pool_memory_hints`](crate::pool_memory_hints), pass those.
    pub memory_hints: wgpu::MemoryHints,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            config: Config::default(),
            widen_usage: true,
            reuse: Reuse::AfterSubmit,
            front_cache: true,
            faults: None,
            memory_hints: wgpu::MemoryHints::Performance,
        }
    }
}

/// When a dropped block may be reused: WebGPU's answer to PyTorch's
/// `record_stream`.
///
/// Commands recorded in a `wgpu::CommandEncoder` run only when it is
/// submitted, and `queue.write_buffer` runs at the next submit, ahead of that
/// submit's command buffers. A block dropped after a copy or dispatch using it
/// was recorded, but before that encoder was submitted, must not be handed to
/// another owner (whose `write_buffer` or zeroing would run first) until the
/// submit: the pool cannot see your submits, so you tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    /// A dropped block is *pending* — not reused, not cleared — until the pool
    /// learns that the work recorded before the drop was submitted: submit
    /// through [`Pool::submit`], or call [`Pool::submitted`] after your own
    /// `queue.submit`. Code that does neither stays correct: pending blocks are
    /// never reused, they show in `stats()` and `memory_summary()` as pending,
    /// and `empty_cache` and the out-of-memory ladder release segments that
    /// hold nothing else (wgpu keeps such a buffer alive for commands that
    /// still use it, and frees it after them). A submit the pool learns of,
    /// from any thread, covers every drop before it: with several threads
    /// submitting their own encoders, see [`Pool::submit`].
    #[default]
    AfterSubmit,
    /// A dropped block is reused at once, as PyTorch's allocator does on one
    /// stream. Correct only when every command using a block is submitted
    /// before the block is dropped (each operation submitted as it is made,
    /// as cubecl's stream does), or the block was kept for its encoder,
    /// pass or command buffer ([`PoolBuffer::used_in`]); otherwise a later owner's `write_buffer` or
    /// zeroing can reach a recorded command first.
    Immediate,
}

pub(super) struct Inner {
    pub(super) device: wgpu::Device,
    queue: wgpu::Queue,
    engine: Mutex<Engine<WgpuBackend>>,
    pub(super) lost: Arc<LostState>,
    widen_usage: bool,
    mappable_primary: bool,
    /// Blocks dropped and not yet handed back to the engine (see front.rs).
    pub(super) front: FrontRef,
    /// The movable blocks' places (see movable.rs).
    movables: Mutex<Movables>,
    /// Some movable block was pinned since the last unpinning (set under
    /// the engine's and the table's locks, cleared under both).
    pub(super) movables_pinned: AtomicBool,
    /// `PoolOptions::front_cache`.
    front_enabled: bool,
    /// The pool records (`start_recording`): the front cache is closed.
    recording: AtomicBool,
    /// The engine follows a plan (`Pool::follow`): the front cache is closed.
    following: AtomicBool,
    /// A cache limit is set: the front cache is closed, since a parked
    /// block is live to the engine and its segment past the limit's reach.
    cache_limited: AtomicBool,
    /// Whether the engine may hold blocks waiting for a submit (set before
    /// one is deferred there, cleared under the engine's lock when none is).
    engine_deferred: AtomicBool,
    /// Held by [`Pool::submit`] from its start to its end, so submits finish
    /// in the order they began and the ready epoch never passes one still
    /// under way (a block dropped before it began may be in its command
    /// buffers).
    submit_lock: Mutex<()>,
    /// A [`Pool::submit`] is under way (set and cleared under the submit
    /// lock): a [`Pool::submitted`] that sees it waits for the lock.
    submitting: AtomicBool,
    /// Whether the app ever told the pool of a submit.
    declared: AtomicBool,
    /// Whether the "nothing is ever submitted" warning was given.
    warned: AtomicBool,
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    alloc_gate: async_lock::Mutex<()>,
    /// Frees made from wgpu callbacks while their thread held the engine's
    /// lock, done as it is released (see lock.rs).
    pub(super) reentrant_frees: Mutex<Vec<DeferredFree>>,
    /// Some free waits in `reentrant_frees`.
    pub(super) reentrant_due: AtomicBool,
    /// A submit was learned of where the engine's lock could not be
    /// waited for: its reclaim waits in the queue above.
    pub(super) submit_news: AtomicBool,
    /// `Pool::on_oom`'s observers, called with no lock held.
    oom_observers: Mutex<Vec<OomObserver>>,
}

type OomObserver = Arc<dyn Fn(&OomInfo) + Send + Sync>;

/// Pending bytes above which a pool that was never told of a submit warns.
const PENDING_WARNING: u64 = 64 << 20;

/// How many times [`Pool::empty_cache`] releases again what wgpu callbacks
/// freed during its waits: each wait may run callbacks that free more, and a
/// callback that frees something at every poll must not keep it waiting.
const EMPTY_CACHE_ROUNDS: usize = 3;

impl Inner {
    /// The engine's mutex itself; [`Inner::engine`] (lock.rs) is the way to
    /// take it.
    pub(super) fn engine_lock(&self) -> LockResult<MutexGuard<'_, Engine<WgpuBackend>>> {
        self.engine.lock()
    }

    /// The engine's mutex, if no other thread holds it.
    pub(super) fn engine_try_lock(&self) -> TryLockResult<MutexGuard<'_, Engine<WgpuBackend>>> {
        self.engine.try_lock()
    }

    /// The table of movable blocks; taken with the engine's lock held, or
    /// alone (never the engine's lock while it is held).
    pub(super) fn movables(&self) -> MutexGuard<'_, Movables> {
        self.movables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine with every block of the front cache handed back and every
    /// deferred block a submit has covered reclaimed: the state to report,
    /// to change limits in and to release from.
    fn engine_synced(&self) -> EngineGuard<'_> {
        let mut engine = self.engine();
        self.hand_back_all(&mut engine);
        self.reclaim(&mut engine);
        engine
    }

    /// The engine with this thread's parked blocks handed back and every
    /// deferred block a submit has covered reclaimed: where a request the
    /// front cache missed tries the engine's cache first. Other threads'
    /// parked blocks stay theirs unless a segment would be needed (see
    /// [`Pool::alloc`]): taking them back at every miss would make each
    /// thread's miss another's.
    fn engine_mine(&self) -> EngineGuard<'_> {
        let mut engine = self.engine();
        self.hand_back(&mut engine, Drain::Mine);
        self.reclaim(&mut engine);
        engine
    }

    /// Hands every parked block back to the engine.
    fn hand_back_all(&self, engine: &mut Engine<WgpuBackend>) {
        self.hand_back(engine, Drain::Every);
    }

    /// Gives the blocks parked in the shards `which` names back to the
    /// engine: free, or pending until a submit covers their drop.
    fn hand_back(&self, engine: &mut Engine<WgpuBackend>, which: Drain) {
        let cache = self.front.cache;
        let mark = cache.reusable_mark();
        cache.drain(which, |p| self.hand_back_one(engine, p, mark));
    }

    /// Gives one parked block back to the engine: free, or pending until
    /// `mark` covers its drop.
    fn hand_back_one(&self, engine: &mut Engine<WgpuBackend>, p: Parked, mark: u64) {
        let mut block = p.block;
        let Some(b) = Arc::get_mut(&mut block) else {
            // Cannot happen (a block parks only as its last handle); if it
            // did, the other holder's drop returns the block, so leave it.
            tracing::error!(
                "vrampool: parked block {} still has a handle; left to it",
                block.id
            );
            return;
        };
        // Returned here: the block's own drop must not return it again.
        b.pool = Weak::new();
        self.release(engine, b.id, p.stamp, mark);
    }

    /// A block whose owners are gone goes back to the engine: free when a
    /// finished submit covers its drop `stamp` (`mark`: the stamps covered),
    /// else pending until one does. Both ways back (the front cache's hand
    /// back and a block's own drop) decide here.
    pub(super) fn release(
        &self,
        engine: &mut Engine<WgpuBackend>,
        id: BlockId,
        stamp: u64,
        mark: u64,
    ) {
        let _ = if stamp <= mark {
            engine.free(id)
        } else {
            self.engine_deferred.store(true, Ordering::Release);
            engine.defer_free_at(id, stamp)
        };
    }

    /// Opens the front cache again if nothing needs it closed: it serves
    /// requests without the engine, so while the pool records or follows a
    /// plan every request must reach the engine, in order. Called, as the
    /// flags are changed, with the engine's lock held.
    fn reopen_front(&self) {
        let closed = self.recording.load(Ordering::Acquire)
            || self.following.load(Ordering::Acquire)
            || self.cache_limited.load(Ordering::Acquire);
        self.front.cache.set_open(self.front_enabled && !closed);
    }

    /// Closes the front cache for `why` (`recording`, `following` or
    /// `cache_limited`, set here), with the engine's lock held, and hands every parked block back
    /// to the engine under each shard's lock, so every later request and
    /// drop reaches the engine.
    fn close_front(&self, engine: &mut Engine<WgpuBackend>, why: &AtomicBool) {
        why.store(true, Ordering::Release);
        self.front.cache.set_open(false);
        self.hand_back(engine, Drain::EveryLocked);
    }

    /// Notes that the engine stopped following its plan (used up, given up,
    /// `empty_cache`), and opens the front cache again.
    fn note_follow_end(&self, engine: &Engine<WgpuBackend>) {
        if self.following.load(Ordering::Acquire) && !engine.follow_stats().following {
            self.following.store(false, Ordering::Release);
            self.reopen_front();
        }
    }

    /// The submit lock (see `Inner::submit_lock`), unless this thread holds
    /// a pool's engine lock or is inside a pool's submit (a wgpu callback of
    /// the pool's work) and another thread holds the submit lock: that thread
    /// may be waiting for the lock this one holds (a callback of its submit
    /// dropping a block, or submitting to the other pool).
    fn submit_order_if_safe(&self) -> Option<MutexGuard<'_, ()>> {
        if !held_anywhere() && !submitting_anywhere() {
            return Some(self.submit_lock.lock().unwrap_or_else(|e| e.into_inner()));
        }
        match self.submit_lock.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// What a submit the pool learned of changes: deferred blocks it
    /// covered reclaimed, movable blocks read before it unpinned.
    pub(super) fn learned_of_submit_locked(&self, engine: &mut Engine<WgpuBackend>) {
        self.reclaim(engine);
        if self.any_pinned() {
            self.unpin_movables(engine);
        }
    }

    /// Reclaims the engine's deferred blocks that a submit has covered.
    fn reclaim(&self, engine: &mut Engine<WgpuBackend>) {
        if self.engine_deferred.load(Ordering::Acquire) {
            engine.reclaim_deferred(self.front.cache.reusable_mark());
            if !engine.has_deferred() {
                self.engine_deferred.store(false, Ordering::Release);
            }
        }
    }

    /// [`Inner::engine_synced`], with the requests the front cache served
    /// counted in the engine's counters: the state to report.
    fn engine_reported(&self) -> EngineGuard<'_> {
        let mut engine = self.engine_synced();
        engine.count_handed_on(self.front.cache.take_handed_on());
        engine
    }
}

/// The pool's last reference is gone: parked blocks go back to the engine
/// (so its leak report lists only blocks with live handles), and the front
/// cache to the table for another pool.
impl Drop for Inner {
    fn drop(&mut self) {
        let cache = self.front.cache;
        cache.close();
        // Given back even if a callback's panic is raised below (lock.rs).
        let _give_back = GiveBack(cache);
        let mut engine = self.engine();
        self.hand_back(&mut engine, Drain::EveryLocked);
        engine.count_handed_on(cache.take_handed_on());
        drop(engine);
    }
}

/// Returns a closed front cache to the table when dropped.
struct GiveBack(&'static FrontCache);

impl Drop for GiveBack {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// Clears [`Inner::submitting`] when dropped, also when a callback of the
/// submit panics.
struct Submitting<'a>(&'a AtomicBool);

impl Drop for Submitting<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A caching memory pool over a `wgpu::Device` and its `Queue`. `Send + Sync`:
/// share it by reference or in an `Arc`.
///
/// Dropping the pool releases its cached segments and logs (through `tracing`,
/// at warn level) every block still live, with its label — the leak report.
/// Live handles stay valid: each holds its own reference to its buffer, which
/// wgpu frees when the last one goes.
///
/// ```
/// # let (device, queue) = vrampool::example_device()?;
/// use vrampool::{AllocDesc, Pool, PoolOptions};
/// let pool = Pool::new(device, queue, PoolOptions::default())?;
/// let encoder = pool.device().create_command_encoder(&Default::default());
/// let a = pool.alloc(AllocDesc::storage(1 << 20).label("activations"))?;
/// // ... record passes that bind a.binding(), or copies of a.slice() ...
/// drop(a); // back to the pool, not to the driver
/// pool.submit([encoder.finish()]); // the commands that used it are submitted: reusable
/// let b = pool.alloc(AllocDesc::storage(1 << 20).zeroed())?; // cache hit, cleared
/// assert_eq!(pool.stats().counters.device_allocs, 1);
/// println!("{}", pool.memory_summary());
/// drop(b);
/// let released = pool.empty_cache(); // now the driver gets it back
/// assert_eq!((released, pool.stats().total.reserved_bytes.current), (1 << 20, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Makes a pool over `device`; the largest segment is the device's
    /// `max_buffer_size`, offsets are aligned to its storage and uniform offset
    /// alignments. Fails on a configuration that cannot work (a fraction limit
    /// without [`Config::capacity`], a preallocation the device refuses).
    ///
    /// The preallocation is made synchronously: in a browser, which answers
    /// later, a refused one would be taken unchecked (its blocks then fail
    /// validation where they are used). There, make a pool that
    /// preallocates with [`Pool::new_async`].
    pub fn new(device: wgpu::Device, queue: wgpu::Queue, options: PoolOptions) -> Result<Pool> {
        Self::build(device, queue, options, true)
    }

    /// [`Pool::new`], awaiting the device's answer to the preallocation
    /// ([`Growth::Preallocate`](crate::Growth::Preallocate)) as
    /// [`Pool::alloc_async`] awaits a segment's: the way to make a pool that
    /// preallocates in the browser. A refused preallocation is the error
    /// ([`Error::OutOfMemory`] when the device has no room even after a
    /// second try, [`Error::Device`] for its validation error), and no pool
    /// is made.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{Config, Growth, Pool, PoolOptions};
    /// let options = PoolOptions {
    ///     config: Config { growth: Growth::Preallocate(8 << 20), ..Config::default() },
    ///     ..PoolOptions::default()
    /// };
    /// // In the browser, inside wasm_bindgen_futures::spawn_local; natively, any executor.
    /// let pool = pollster::block_on(Pool::new_async(device, queue, options))?;
    /// assert_eq!(pool.stats().total.reserved_bytes.current, 8 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn new_async(
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: PoolOptions,
    ) -> Result<Pool> {
        let pool = Self::build(device, queue, options, false)?;
        let planned = pool.inner.engine().plan_configured();
        if let Some(plan) = pool.observed(planned)? {
            let made = pool.make_pinned_async(plan).await;
            let (plan, made) = pool.observed(made)?;
            let committed = pool.inner.engine().commit_pinned(plan, made);
            pool.observed(committed)?;
        }
        Ok(pool)
    }

    /// A pool over `device`, its preallocation made (`provision`) or not yet.
    fn build(
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: PoolOptions,
        provision: bool,
    ) -> Result<Pool> {
        let limits = device.limits();
        let mut config = options.config;
        // Before the alignment is raised to the device's, which would hide a bad one.
        config.validate().map_err(Error::Config)?;
        config.alignment = config
            .alignment
            .max(limits.min_storage_buffer_offset_alignment as u64)
            .max(limits.min_uniform_buffer_offset_alignment as u64);
        if config.default_usage == 0 {
            // The preallocation serves read-write blocks: a tensor library's.
            config.default_usage = READ_WRITE_USAGE.bits();
        }
        // Moves only ever touch blocks allocated movable (`Pool::alloc_movable`).
        let mut backend = WgpuBackend::for_hints(&device, config.capacity, &options.memory_hints)
            .with_moves(&queue);
        if let Some(faults) = options.faults {
            backend = backend.with_faults(faults);
        }
        let mut engine = if provision {
            Engine::new(backend, config)?
        } else {
            Engine::unprovisioned(backend, config)?
        };
        engine.name_pool(
            READ_WRITE_USAGE.bits(),
            false,
            GROUP_READ_WRITE,
            "read-write",
        );
        engine.name_pool(GPU_USAGE.bits(), false, GROUP_READ_ONLY, "read-only");
        engine.name_pool(GPU_USAGE.bits(), true, 0, "own buffer");
        let mappable_primary = device
            .features()
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        let lost = Arc::clone(&engine.backend().lost);
        let cache_limited = engine.config().cache_limit.is_some();
        Ok(Pool {
            inner: Arc::new(Inner {
                device,
                queue,
                engine: Mutex::new(engine),
                lost,
                widen_usage: options.widen_usage,
                mappable_primary,
                front: FrontCache::lend(options.reuse, options.front_cache && !cache_limited),
                movables: Mutex::default(),
                movables_pinned: AtomicBool::new(false),
                front_enabled: options.front_cache,
                recording: AtomicBool::new(false),
                following: AtomicBool::new(false),
                cache_limited: AtomicBool::new(cache_limited),
                engine_deferred: AtomicBool::new(false),
                submit_lock: Mutex::new(()),
                submitting: AtomicBool::new(false),
                declared: AtomicBool::new(false),
                warned: AtomicBool::new(false),
                alloc_gate: async_lock::Mutex::new(()),
                reentrant_frees: Mutex::default(),
                reentrant_due: AtomicBool::new(false),
                submit_news: AtomicBool::new(false),
                oom_observers: Mutex::default(),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// The pool's request for `desc`, or [`Error::DeviceLost`] once the device is.
    fn request(&self, desc: &AllocDesc<'_>) -> Result<Request> {
        if let Some(why) = self.device_lost() {
            return Err(Error::DeviceLost(why.to_string()));
        }
        desc.request(self.inner.widen_usage, self.inner.mappable_primary)
    }

    /// The hit path: a block this thread dropped with the same description,
    /// from the front cache, with no lock but the thread's shard's.
    fn front_hit(&self, desc: &AllocDesc<'_>) -> Option<PoolBuffer> {
        if self.inner.lost.why().is_some() {
            return None; // the slow path says why
        }
        let key = Key {
            size: desc
                .size
                .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)?,
            usage: desc.usage,
            sharing: desc.sharing().ok()?,
        };
        let block = self.inner.front.cache.take(key, desc.label)?;
        if desc.zeroed {
            self.zero(&block);
        }
        Some(PoolBuffer::new(block))
    }

    /// Clears a reused block's bytes, at once on the queue.
    fn zero(&self, block: &BufferBlock) {
        self.clear(&block.buffer, block.offset, block.block_size);
    }

    /// Clears `size` bytes of `buffer` from `offset`, at once on the queue.
    fn clear(&self, buffer: &wgpu::Buffer, offset: u64, size: u64) {
        let mut enc = self
            .inner
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("vrampool zero-on-reuse"),
            });
        enc.clear_buffer(buffer, offset, Some(size));
        shielded(|| {
            self.inner.queue.submit([enc.finish()]);
        });
    }

    /// Why the device was lost, once wgpu has said so (from a poll after
    /// `Device::destroy`, or when the driver loses it), or a new segment's
    /// refusal said so (its validation error naming a lost or destroyed
    /// device; an injected [`Fault::Lost`](crate::fault::Fault::Lost)). From then on every
    /// allocation fails with [`Error::DeviceLost`]; frees, stats, snapshots and
    /// `empty_cache` keep working, and handles still live can be dropped.
    pub fn device_lost(&self) -> Option<&str> {
        self.inner.lost.why()
    }

    /// Calls `f` with the reason when the device is lost (at once if it already
    /// is). The pool holds the device's one lost callback (see
    /// [`WgpuBackend::new`]); register here instead. After `Device::destroy`
    /// the observers run from the poll that learns of it, once the thread
    /// holds no pool's lock; a loss the driver reports (a GPU reset), which
    /// wgpu tells inside its own locks, runs them on a thread of their own
    /// (natively), so they may call the pool and the device.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Error, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let held = pool.alloc(AllocDesc::storage(1 << 20))?;
    /// pool.on_device_lost(|why| eprintln!("GPU gone: {why}"));
    /// pool.device().destroy(); // what a driver reset or a lost GPU does
    /// match pool.alloc(AllocDesc::storage(1 << 20)) {
    ///     Err(Error::DeviceLost(_)) => { /* make a new device and a new pool */ }
    ///     other => panic!("expected DeviceLost, got {other:?}"),
    /// }
    /// assert!(pool.device_lost().is_some());
    /// drop(held); // frees and figures still work
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_device_lost(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        self.inner.lost.observe(Arc::new(f));
    }

    /// The handle of an allocation: the lock released, then the block's
    /// bytes cleared if asked and reused (the clear's submit may run wgpu
    /// callbacks, which may drop handles of this pool).
    fn wrap(
        &self,
        engine: EngineGuard<'_>,
        a: Allocation,
        desc: &AllocDesc<'_>,
        req: &Request,
    ) -> PoolBuffer {
        let buffer = self.new_block_buffer(&engine, &a);
        let block = BufferBlock {
            pool: Arc::downgrade(&self.inner),
            front: self.inner.front,
            id: a.id,
            segment: a.segment,
            buffer,
            offset: a.offset,
            size: req.size,
            block_size: a.size,
            usage: desc.usage,
            sharing: Sharing::of(req),
            label: req.label.clone(),
            downgraded: AtomicBool::new(false),
        };
        // The handle first: a panic a callback left for the lock's release
        // (lock.rs) drops it, and the block goes back.
        let handle = PoolBuffer::new(Arc::new(block));
        drop(engine);
        debug_assert!(!req.fresh || a.fresh, "a fresh request got a used block");
        if desc.zeroed && !a.fresh {
            self.zero(&handle);
        }
        handle
    }

    /// `result`, after the out-of-memory observers have seen it if it is
    /// one; called with no lock held, so they may call the pool.
    fn observed<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::OutOfMemory(info)) = &result {
            let observers = self
                .inner
                .oom_observers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for f in observers {
                f(info);
            }
        }
        result
    }

    /// Refuses an allocation made from a wgpu callback that the pool's own
    /// work ran on this thread, whose lock it holds (see lock.rs).
    fn not_reentrant(&self, call: &'static str) -> Result<()> {
        if held_here(&self.inner) {
            return Err(Error::Reentrant(call));
        }
        Ok(())
    }

    /// Allocates a buffer range. Natively the device's answer is known at once:
    /// on out-of-memory the pool releases its cache, retries (under its limit
    /// only where that makes room), calls the OOM
    /// observers and returns [`Error::OutOfMemory`]; it never hands out an
    /// invalid buffer.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Error, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let params = pool.alloc(AllocDesc::uniform(16).label("params"))?;
    /// // A range of a buffer the pool may share: write and bind it at its offset.
    /// pool.queue().write_buffer(params.buffer(), params.offset(), &[0; 16]);
    /// assert_eq!(params.range(), params.offset()..params.offset() + 16);
    /// // What no buffer can hold is an error that says so, never an invalid buffer.
    /// let too_large = pool.device().limits().max_buffer_size + 1;
    /// match pool.alloc(AllocDesc::storage(too_large)) {
    ///     Err(e @ Error::TooLarge { .. }) => println!("{e}"),
    ///     other => panic!("expected TooLarge, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn alloc(&self, desc: AllocDesc<'_>) -> Result<PoolBuffer> {
        if let Some(hit) = self.front_hit(&desc) {
            return Ok(hit);
        }
        let req = self.request(&desc)?;
        let (engine, a) = self.observed(self.allocate_native(&req, "Pool::alloc"))?;
        Ok(self.wrap(engine, a, &desc, &req))
    }

    /// The engine's allocation for `req`, natively: its cache, then (with
    /// every parked block handed back) a segment; moved blocks' handles told.
    #[cfg(not(target_arch = "wasm32"))]
    fn allocate_native(
        &self,
        req: &Request,
        call: &'static str,
    ) -> Result<(EngineGuard<'_>, Allocation)> {
        self.not_reentrant(call)?;
        let mut engine = self.inner.engine_mine();
        if let Some(a) = engine.allocate_cached(req) {
            return Ok((engine, a));
        }
        // A segment would be made: first every block other threads parked.
        self.inner.hand_back_all(&mut engine);
        let a = engine.allocate(req.clone());
        self.inner.apply_moves(&mut engine);
        self.inner.note_follow_end(&engine);
        Ok((engine, a?))
    }

    /// Allocates a buffer range the pool may move while it is live, to make
    /// room for a later request instead of making a segment: see
    /// [`MovableBuffer`] for what that asks of the caller (read its place for
    /// every pass; the place holds until the pool learns of the next submit).
    /// Zeroed on request as [`Pool::alloc`]'s are. A description whose block
    /// could never move (a mappable usage, a buffer of its own) is refused
    /// with [`Error::InvalidUsage`].
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let kv = pool.alloc_movable(AllocDesc::storage(32 << 20).read_write().label("kv"))?;
    /// let place = kv.place(); // where to bind it in this frame's passes
    /// assert!(kv.is_pinned()); // it stays there until the pool learns of a submit
    /// pool.submit([]);
    /// assert!(!kv.is_pinned());
    /// # let _ = place;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn alloc_movable(&self, desc: AllocDesc<'_>) -> Result<MovableBuffer> {
        let req = self.movable_request(&desc)?;
        let (engine, a) = self.observed(self.allocate_native(&req, "Pool::alloc_movable"))?;
        Ok(self.wrap_movable(engine, a, &desc, &req))
    }

    /// The relocatable request for `desc`, refused where the block could
    /// never move: a buffer of its own, or a mappable usage (wgpu copies
    /// into neither kind here).
    fn movable_request(&self, desc: &AllocDesc<'_>) -> Result<Request> {
        let mut req = self.request(desc)?;
        let refuse = |why: &str| {
            Err(Error::InvalidUsage {
                usage: desc.usage.bits(),
                why: why.to_string(),
            })
        };
        if mappable(desc.usage) {
            return refuse(
                "a mappable block never moves (its segment takes no copies): allocate it with Pool::alloc",
            );
        }
        if req.exclusive {
            return refuse(
                "this block gets a buffer of its own, so it never moves: say how passes bind it \
                 (.read_only() or .read_write()) to share buffers, or allocate it with Pool::alloc",
            );
        }
        req.relocatable = true;
        Ok(req)
    }

    /// A movable allocation's handle, its bytes cleared if asked and reused.
    /// Cleared with the lock held, unlike [`Pool::wrap`]'s: once it is
    /// released another allocation may move the block, and the clear must
    /// be queued before that move's copy. (A callback that the clear's
    /// submit runs and that drops a handle of this pool is served as the
    /// lock is released: see lock.rs.)
    fn wrap_movable(
        &self,
        engine: EngineGuard<'_>,
        a: Allocation,
        desc: &AllocDesc<'_>,
        req: &Request,
    ) -> MovableBuffer {
        let buffer = self.new_block_buffer(&engine, &a);
        if desc.zeroed && !a.fresh {
            self.clear(&buffer, a.offset, a.size);
        }
        let handle = self
            .inner
            .wrap_movable(buffer, &a, req.size, req.label.clone());
        drop(engine);
        handle
    }

    /// The buffer of a block just allocated; a new segment warns, once, if
    /// blocks pile up pending in a pool never told of a submit.
    fn new_block_buffer(&self, engine: &Engine<WgpuBackend>, a: &Allocation) -> wgpu::Buffer {
        if a.fresh {
            self.warn_if_never_submitted(engine);
        }
        engine
            .segment_payload(a.segment)
            .expect("a new block's segment exists")
            .clone()
    }

    /// Allocates a buffer range, awaiting the device's error scopes: the way to
    /// allocate in the browser, where they resolve asynchronously. Works
    /// natively too. The engine's ladder is the native path's (the planned
    /// segment, then just the request, then the same after releasing the
    /// cache), one device answer at a time; a refused segment is destroyed
    /// before any handle to it exists, and changes no figure.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// // In the browser, inside wasm_bindgen_futures::spawn_local; natively, any executor.
    /// let weights = pollster::block_on(pool.alloc_async(AllocDesc::storage(4 << 20).read_only()))?;
    /// assert_eq!(weights.size(), 4 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn alloc_async(&self, desc: AllocDesc<'_>) -> Result<PoolBuffer> {
        if let Some(hit) = self.front_hit(&desc) {
            return Ok(hit);
        }
        let req = self.request(&desc)?;
        let (engine, a) = self.observed(self.allocate_async(&req, "Pool::alloc_async").await)?;
        Ok(self.wrap(engine, a, &desc, &req))
    }

    /// [`Pool::alloc_movable`], awaiting the device's error scopes as
    /// [`Pool::alloc_async`] does: the way to allocate one in the browser.
    pub async fn alloc_movable_async(&self, desc: AllocDesc<'_>) -> Result<MovableBuffer> {
        let req = self.movable_request(&desc)?;
        let allocated = self.allocate_async(&req, "Pool::alloc_movable_async").await;
        let (engine, a) = self.observed(allocated)?;
        Ok(self.wrap_movable(engine, a, &desc, &req))
    }

    /// The turn of one allocation awaiting the device (the engine counts
    /// its plan against the limits meanwhile). From a wgpu callback under a
    /// pool's lock, only if no other holds it: that one may be another
    /// thread's, whose own callback waits for the lock this thread holds.
    async fn alloc_gate(&self, call: &'static str) -> Result<async_lock::MutexGuard<'_, ()>> {
        self.not_reentrant(call)?;
        if held_anywhere() {
            self.inner
                .alloc_gate
                .try_lock()
                .ok_or(Error::Reentrant(call))
        } else {
            Ok(self.inner.alloc_gate.lock().await)
        }
    }

    /// Makes `plan`'s pinned segments one device answer at a time, as
    /// [`Pool::alloc_async`] makes a segment, the engine told of each
    /// refusal; after an error the plan is cancelled (the segments made
    /// become ordinary cache).
    async fn make_pinned_async(&self, plan: PinnedPlan) -> Result<(PinnedPlan, Vec<wgpu::Buffer>)> {
        let mut making = Making {
            inner: &self.inner,
            plan: Some(plan),
            made: Vec::new(),
        };
        loop {
            let Some(plan) = making.plan.as_mut() else {
                unreachable!("the plan is taken only on the way out")
            };
            let i = making.made.len();
            if i == plan.len() {
                break;
            }
            let begun = self.inner.engine().backend().begin_create(&plan.desc(i));
            // Dropping this future while it waits gives the segment back (the
            // pending segment's), the segments made before it (`Making`'s
            // drop) and the plan's bytes against the limit.
            let outcome = match begun {
                Ok(pending) => pending.outcome().await,
                Err(refusal) => Err(refusal),
            };
            match outcome {
                Ok(buffer) => making.made.push(buffer),
                Err(refusal) => {
                    let mut engine = self.inner.engine();
                    let plan = making.plan.as_mut().expect("the plan is still being made");
                    if let Err(e) = engine.refused_pinned(plan, i, refusal) {
                        let plan = making.plan.take().expect("the plan is still being made");
                        engine.cancel_pinned(plan, std::mem::take(&mut making.made));
                        return Err(e);
                    }
                }
            }
        }
        let plan = making.plan.take().expect("the plan is still being made");
        Ok((plan, std::mem::take(&mut making.made)))
    }

    /// The engine's allocation for `req`, one device answer awaited at a
    /// time (see [`Pool::alloc_async`]); moved blocks' handles told.
    async fn allocate_async(
        &self,
        req: &Request,
        call: &'static str,
    ) -> Result<(EngineGuard<'_>, Allocation)> {
        let _gate = self.alloc_gate(call).await?;
        // The plan, dropped with the future or as a panic a callback left
        // for the lock's release (lock.rs) unwinds, gives its bytes back. It
        // is moved out here before the lock's guard drops: a block's value is
        // leaked, not dropped, when a local's drop panics (rust-lang/rust#47949).
        let mut plan;
        {
            let mut engine = self.inner.engine_mine();
            if let Some(a) = engine.allocate_cached(req) {
                return Ok((engine, a));
            }
            self.inner.hand_back_all(&mut engine);
            let planned = engine.plan(req.clone());
            self.inner.apply_moves(&mut engine);
            self.inner.note_follow_end(&engine);
            plan = match planned? {
                Planned::Hit(a) => return Ok((engine, a)),
                Planned::Create(p) => p,
            };
        }
        loop {
            let begun = self.inner.engine().backend().begin_create(&plan.desc());
            let pending = match begun {
                Ok(pending) => pending,
                Err(refusal) => {
                    plan = self.inner.engine().refused(plan, refusal)?;
                    continue;
                }
            };
            // Dropping this future while it waits gives the segment back: the
            // buffer and the fault injector's count (the pending segment's),
            // the plan's bytes against the limit (the plan's).
            let outcome = pending.outcome().await;
            let mut engine = self.inner.engine();
            match outcome {
                Ok(buffer) => {
                    let a = engine.commit(plan, buffer)?;
                    return Ok((engine, a));
                }
                Err(refusal) => plan = engine.refused(plan, refusal)?,
            }
        }
    }

    /// Submits `command_buffers` on the pool's queue, then makes the blocks
    /// dropped before this call reusable: their recorded work is now ahead, in
    /// queue order, of anything a next owner does. Use it instead of
    /// `queue.submit` (with [`Reuse::AfterSubmit`], the default). Every
    /// encoder that recorded work on blocks dropped since the last submit must
    /// be among `command_buffers` or submitted before; an encoder kept
    /// unsubmitted across this call must not use blocks that are dropped.
    ///
    /// The rule is the pool's, not a thread's: this call, from any thread,
    /// declares every encoder that used a block dropped before it submitted.
    /// Threads that each record and submit their own encoders must not drop
    /// a block that an encoder of theirs still to be submitted uses while
    /// another thread may submit: call [`PoolBuffer::used_in`] with that
    /// encoder (or the pass on it, or the command buffer it finished into)
    /// before the drop (the block is kept until that work is done), keep the handle until their own submit, record, drop and
    /// submit on one thread, or give each such thread a pool of its own. (Some of those drops wait for a later
    /// submit anyway, parked unstamped in a front-cache shard whose threads
    /// submit; that costs memory for a while and is not to be relied on.)
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let encoder = pool.device().create_command_encoder(&Default::default());
    /// let tmp = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// // ... record passes that use `tmp` ...
    /// drop(tmp); // pending: the encoder is not submitted yet
    /// assert_eq!(pool.stats().total.pending_bytes.current, 1 << 20);
    /// pool.submit([encoder.finish()]); // now its bytes may serve the next request
    /// let next = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// assert_eq!(pool.stats().counters.device_allocs, 1);
    /// # drop(next);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn submit<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        command_buffers: I,
    ) -> wgpu::SubmissionIndex {
        if submitting_here(&self.inner) {
            // From a callback that this pool's own submit ran, after its
            // command buffers: ordered after them, and the blocks dropped
            // since wait for the next submit.
            return self.inner.queue.submit(command_buffers);
        }
        let Some(order) = self.inner.submit_order_if_safe() else {
            // From a wgpu callback under a pool's lock while another thread
            // submits (and may wait for that lock): to the queue at once, and
            // the blocks dropped before wait for the next submit.
            return self.inner.queue.submit(command_buffers);
        };
        let cache = self.inner.front.cache;
        let index = {
            let _order = order;
            let _mark = SubmitMark::new(&self.inner);
            self.inner.submitting.store(true, Ordering::SeqCst);
            let submitting = Submitting(&self.inner.submitting);
            let epoch = cache.submit_begins();
            let index = self.inner.queue.submit(command_buffers);
            cache.submit_done(epoch);
            drop(submitting);
            index
        };
        self.learned_of_submit();
        index
    }

    /// Tells the pool that every command buffer recorded so far has been
    /// submitted (or dropped): blocks dropped before this call become
    /// reusable (a few may wait for a later call; see [`Pool::submit`]). For code that calls `queue.submit` itself; with several
    /// threads, every thread's command buffers recorded before the call must
    /// be submitted, as from one thread. It takes no pool-wide lock: two
    /// atomic operations under the lock of the calling thread's front-cache
    /// shard (to stamp the blocks dropped there since its last submit), the
    /// engine's lock too when a dropped block went the slow way, and the
    /// submit lock only to wait for a [`Pool::submit`] under way on another
    /// thread (whose command buffers a block dropped before may be in).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue.clone(), PoolOptions::default())?;
    /// let mut encoder = pool.device().create_command_encoder(&Default::default());
    /// let tmp = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// encoder.clear_buffer(tmp.buffer(), tmp.offset(), Some(tmp.size()));
    /// drop(tmp);
    /// queue.submit([encoder.finish()]); // your own submit, e.g. a renderer's
    /// pool.submitted(); // then the pool may hand the bytes out again
    /// let next = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// assert_eq!(pool.stats().counters.device_allocs, 1);
    /// # drop(next);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn submitted(&self) {
        if submitting_here(&self.inner) {
            // From a callback that this pool's own submit ran: that submit
            // covers what was dropped before it, and waiting for it here
            // would wait for this thread.
            return;
        }
        // The epoch's advance and the flag's load are sequentially consistent
        // with `Pool::submit`'s store: a submit not seen under way takes its
        // epoch after this call's, so its command buffers are ones recorded
        // before this call and not yet submitted only if the caller broke the
        // promise above, as with any other encoder.
        self.inner.front.cache.submit_now(
            || self.inner.submitting.load(Ordering::SeqCst),
            || self.inner.submit_order_if_safe(),
        );
        self.learned_of_submit();
    }

    fn learned_of_submit(&self) {
        if !self.inner.declared.load(Ordering::Relaxed) {
            self.inner.declared.store(true, Ordering::Relaxed);
        }
        if !self.inner.engine_deferred.load(Ordering::Acquire) && !self.inner.any_pinned() {
            return;
        }
        // Now, or as the lock is released where a wgpu callback of the
        // pool's own work asks (see lock.rs).
        self.inner.learned_of_submit();
    }

    /// Logs once, through `tracing`, when blocks pile up pending in a pool
    /// that was never told of a submit: the app is safe but never reuses.
    fn warn_if_never_submitted(&self, engine: &Engine<WgpuBackend>) {
        let pending = engine.pending_bytes();
        if pending >= PENDING_WARNING
            && !self.inner.declared.load(Ordering::Relaxed)
            && !self.inner.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "vrampool: {} of dropped blocks wait for a submit the pool was never told of, so they are not reused. \
                 Submit with Pool::submit (or call Pool::submitted after queue.submit); or, if every command using a \
                 block is submitted before the block is dropped, set PoolOptions::reuse to Reuse::Immediate",
                crate::fmt_bytes(pending)
            );
        }
    }

    /// Releases every cached segment that holds no live block and waits for the
    /// device to really free them (`torch.cuda.empty_cache()`). Segments that
    /// hold pending blocks are released too: wgpu keeps such a buffer for the
    /// commands that still use it and frees it after them. A segment whose
    /// last block a wgpu callback frees while it runs (a `map_async` or
    /// `on_submitted_work_done` callback its polls fire) is given back too,
    /// for up to three rounds of such frees. Returns the bytes released.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let kept = pool.alloc(AllocDesc::storage(1 << 20).label("weights"))?;
    /// let batch = pool.alloc(AllocDesc::storage(8 << 20).label("batch"))?;
    /// drop(batch);
    /// assert_eq!(pool.empty_cache(), 8 << 20); // the live block's buffer stays
    /// assert_eq!(pool.stats().total.reserved_bytes.current, 1 << 20);
    /// # drop(kept);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn empty_cache(&self) -> u64 {
        let mut released = {
            let mut engine = self.inner.engine_synced();
            let released = engine.empty_cache();
            self.inner.note_follow_end(&engine);
            released
        };
        // A wgpu callback run by the release's poll (its drops wait for the
        // lock's release) or by the wait may free the last block of a
        // segment: that segment goes too, as if freed just before the call.
        for _ in 0..EMPTY_CACHE_ROUNDS {
            let _ = self.inner.device.poll(wgpu::PollType::wait_indefinitely());
            let more = self.inner.engine_synced().empty_cache_continued(released);
            if more == 0 {
                return released;
            }
            released += more;
        }
        let _ = self.inner.device.poll(wgpu::PollType::wait_indefinitely());
        released
    }

    /// Figures: allocated, reserved, cached, … current and peak, and counters.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let x = pool.alloc(AllocDesc::storage(3000).read_only())?;
    /// let stats = pool.stats();
    /// assert_eq!(stats.total.requested_bytes.current, 3000);
    /// assert_eq!(stats.total.allocated_bytes.current, 3072); // 256-byte granules
    /// assert!(stats.total.reserved_bytes.current >= 3072); // the segment holding it
    /// assert_eq!(stats.counters.allocs, 1);
    /// # drop(x);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.engine_reported().stats()
    }

    /// Resets peaks to current values, to measure the peak of one phase
    /// (`torch.cuda.reset_peak_memory_stats()`).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// drop(pool.alloc(AllocDesc::storage(4 << 20))?);
    /// pool.reset_peak_stats();
    /// let x = pool.alloc(AllocDesc::storage(1 << 20))?;
    /// assert_eq!(pool.stats().total.allocated_bytes.peak, 1 << 20);
    /// # drop(x);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_peak_stats(&self) {
        self.inner.engine_reported().reset_peak_stats()
    }

    /// The `memory_summary()` table: PyTorch's, with this pool's figures
    /// per pool of usages.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let x = pool.alloc(AllocDesc::storage(1 << 20).label("x"))?;
    /// let table = pool.memory_summary();
    /// assert!(table.contains("Allocated memory"));
    /// println!("{table}");
    /// # drop(x);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_summary(&self) -> String {
        self.inner.engine_reported().memory_summary()
    }

    /// Segments → blocks, serialisable (`torch.cuda.memory_snapshot()`): the
    /// page's "view snapshot" reads its JSON.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions, SnapshotState};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let a = pool.alloc(AllocDesc::uniform(256).label("camera"))?;
    /// let b = pool.alloc(AllocDesc::uniform(256).label("light"))?;
    /// let snapshot = pool.snapshot();
    /// let live: Vec<_> = snapshot.segments.iter().flat_map(|s| &s.blocks)
    ///     .filter(|b| b.state == SnapshotState::Live)
    ///     .filter_map(|b| b.label.as_deref())
    ///     .collect();
    /// assert_eq!(live, ["camera", "light"]); // one segment, in offset order
    /// let json = serde_json::to_string(&snapshot)?;
    /// # let _ = (a, b, json);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        self.inner.engine_reported().snapshot()
    }

    /// Live blocks with their labels: what the pool logs as leaked if it is
    /// dropped with them.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let cache = pool.alloc(AllocDesc::storage(1 << 20).label("kv cache"))?;
    /// let leaks = pool.leaks();
    /// assert_eq!(leaks.len(), 1);
    /// assert_eq!((leaks[0].label.as_deref(), leaks[0].size), (Some("kv cache"), 1 << 20));
    /// drop(cache);
    /// assert!(pool.leaks().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn leaks(&self) -> Vec<Leak> {
        self.inner.engine_reported().leaks()
    }

    /// Checks the invariants (see ARCHITECTURE.md): every block the front
    /// cache holds is this pool's, live in the engine, parked once and held
    /// by nothing else; then the engine's own. Changes nothing (parked blocks
    /// stay parked); O(blocks), for tests and debugging.
    pub fn check_invariants(&self) -> std::result::Result<(), InvariantError> {
        let engine = self.inner.engine();
        let mut seen = std::collections::HashSet::new();
        let mut wrong = None;
        let this = Arc::as_ptr(&self.inner);
        self.inner.front.cache.visit(|p| {
            let b = &p.block;
            let why = if !std::ptr::eq(b.pool.as_ptr(), this) {
                "parked in another pool's cache"
            } else if !engine.is_live(b.id) {
                "not live in the engine"
            } else if !seen.insert(b.id) {
                "parked twice"
            } else if Arc::strong_count(b) != 1 || Arc::weak_count(b) != 0 {
                "still reachable through another handle"
            } else {
                return;
            };
            wrong.get_or_insert(InvariantError::Parked {
                block: b.id.to_string(),
                why,
            });
        });
        match wrong {
            Some(e) => Err(e),
            None => engine.check_invariants(),
        }
    }

    /// Sets or clears the hard limit; cached memory above it is released. It
    /// is a budget or a ceiling as the configuration's
    /// [`limit_kind`](crate::Config::limit_kind) says.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Error, Limit, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// pool.set_limit(Some(Limit::Bytes(16 << 20)))?;
    /// let a = pool.alloc(AllocDesc::storage(12 << 20))?;
    /// match pool.alloc(AllocDesc::storage(8 << 20)) {
    ///     // Says what was asked, what is held and what to try.
    ///     Err(e @ Error::OutOfMemory(_)) => println!("{e}"),
    ///     other => panic!("expected out of memory, got {other:?}"),
    /// }
    /// drop(a);
    /// pool.submit([]);
    /// // The cached 12 MiB are given back to make room.
    /// let b = pool.alloc(AllocDesc::storage(8 << 20))?;
    /// assert!(pool.stats().total.reserved_bytes.current <= 16 << 20);
    /// # drop(b);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: Option<Limit>) -> Result<()> {
        self.inner.engine_synced().set_limit(limit)
    }

    /// Sets the cache limit: free bytes kept in segments without a live
    /// block (MLX's `set_cache_limit`); above it, such segments are given
    /// back after each free. `Some(0)` caches nothing. While a limit is set
    /// the front cache ([`PoolOptions::front_cache`]) is off: every drop
    /// reaches the engine, which holds the limit.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions, Reuse};
    /// let options = PoolOptions { reuse: Reuse::Immediate, ..Default::default() };
    /// let pool = Pool::new(device, queue, options)?;
    /// pool.set_cache_limit(Some(0));
    /// drop(pool.alloc(AllocDesc::storage(8 << 20))?);
    /// assert_eq!(pool.stats().total.reserved_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_cache_limit(&self, cache_limit: Option<u64>) {
        let inner = &self.inner;
        let mut engine = inner.engine_synced();
        match cache_limit {
            Some(_) => inner.close_front(&mut engine, &inner.cache_limited),
            None => {
                inner.cache_limited.store(false, Ordering::Release);
                inner.reopen_front();
            }
        }
        engine.set_cache_limit(cache_limit)
    }

    /// Sets the soft headroom ([`Config::headroom`]: how far above the
    /// workload's high water of live bytes the pool may hold cache before it
    /// gives segments back; `None` keeps every segment until a limit or
    /// `empty_cache` needs it, the fastest for a loop that fits) and starts
    /// its accounting afresh. A headroom that is negative or not finite is
    /// [`Error::Config`] and changes nothing.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// pool.set_headroom(None)?; // a loop that fits: keep what it made
    /// assert!(pool.set_headroom(Some(-1.0)).is_err());
    /// assert_eq!(pool.config().headroom, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_headroom(&self, headroom: Option<f64>) -> Result<()> {
        self.inner.engine_synced().set_headroom(headroom)
    }

    /// The configuration in force: the alignment raised to the device's,
    /// the limit, cache limit and headroom as last set.
    pub fn config(&self) -> Config {
        self.inner.engine().config().clone()
    }

    /// Calls `f` with the pool's state on every out-of-memory, just before
    /// the allocation returns [`Error::OutOfMemory`], with no lock held: it
    /// may call the pool (`memory_summary()`, `empty_cache()`, ...). The
    /// [`OomInfo`] is the state at the refusal; the pool's own figures may
    /// show frees made since (by other threads, or by wgpu callbacks that
    /// the allocation's polls ran).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
    /// use vrampool::{AllocDesc, Limit, Pool, PoolOptions};
    /// let pool = Arc::new(Pool::new(device, queue, PoolOptions::default())?);
    /// pool.set_limit(Some(Limit::Bytes(4 << 20)))?;
    /// let refused = Arc::new(AtomicU64::new(0));
    /// let (weak, seen) = (Arc::downgrade(&pool), refused.clone());
    /// pool.on_oom(move |info| {
    ///     seen.store(info.requested, Ordering::Relaxed);
    ///     if let Some(pool) = weak.upgrade() {
    ///         eprintln!("{}", pool.memory_summary());
    ///     }
    /// });
    /// assert!(pool.alloc(AllocDesc::storage(8 << 20)).is_err());
    /// assert_eq!(refused.load(Ordering::Relaxed), 8 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_oom(&self, f: impl Fn(&OomInfo) + Send + Sync + 'static) {
        self.inner
            .oom_observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(f));
    }

    /// Starts recording allocate/free events as an RMM CSV log. While it
    /// records, every allocation and free goes through the engine (the front
    /// cache is closed), so the log has each one in order.
    pub fn start_recording(&self) {
        // The flags and the cache change under the engine's lock only, so
        // that `follow`, `take_recording` and a plan's end do not interleave.
        let mut engine = self.inner.engine_reported();
        self.inner.close_front(&mut engine, &self.inner.recording);
        engine.start_recording()
    }

    /// Stops recording and returns the log.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions, Trace};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// pool.start_recording();
    /// drop(pool.alloc(AllocDesc::storage(1 << 20))?);
    /// let log = pool.take_recording().expect("it was recording");
    /// // RMM's CSV: what `vrampool replay` and the page's trace loader read.
    /// assert_eq!(Trace::from_bytes("run.csv", log.as_bytes())?.allocations(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_recording(&self) -> Option<String> {
        let mut engine = self.inner.engine_reported();
        let log = engine.take_recording();
        self.inner.recording.store(false, Ordering::Release);
        self.inner.reopen_front();
        log
    }

    /// The log so far, if recording, and the recording goes on
    /// ([`Engine::drain_recording`]: the logs joined in order, past their
    /// headers, read as one). A recording stopped with
    /// [`Pool::take_recording`] and started again is a new one, which
    /// leaves out the frees of blocks allocated before it.
    pub fn drain_recording(&self) -> Option<String> {
        self.inner.engine_reported().drain_recording()
    }

    /// Plans a recording of a run of this pool's workload
    /// ([`Pool::take_recording`]), pool by pool, with this pool's alignment
    /// and largest buffer: what [`Pool::follow`] takes on a later run. The
    /// plan is serde (save it as JSON and load it in the next process).
    /// Record from the workload's first allocation on: a block allocated
    /// before the recording began is not in the log (nor its free), so the
    /// plan leaves it out.
    ///
    /// A log that is not a valid trace is an [`Error::Trace`]; one with a
    /// stream no pool writes, or an allocation larger than this pool's
    /// largest segment (a recording made on another device), an
    /// [`Error::InvalidArgument`] saying which.
    pub fn plan_recording(&self, log: &str) -> Result<RecordedPlan> {
        let (alignment, max_segment) = {
            let engine = self.inner.engine();
            (engine.config().alignment, engine.max_segment_size())
        };
        Ok(RecordedPlan::from_recording(log, alignment, max_segment)?)
    }

    /// Follows `plan` (a [`Pool::plan_recording`] of an earlier run of the
    /// same workload; see [`Engine::follow_recorded`]): the plan's segments
    /// are made at once, and each request the plan foresaw is placed where
    /// the plan says, so the run holds the plan's bytes in the plan's few
    /// buffers, made once. While the pool follows, every request and drop
    /// goes through the engine (the front cache is closed, as while
    /// recording: the plan matches requests in their order); it follows
    /// until the plan is used up, the workload leaves it (64 requests in a
    /// row it did not foresee, or 4096 of any kind with none foreseen),
    /// [`Pool::stop_following`] or
    /// [`Pool::empty_cache`], and the plan's segments then become ordinary
    /// cache. Requests the plan did not foresee are served as always; a
    /// block is placed at its planned offset only if those bytes are free
    /// there (and, with [`Reuse::AfterSubmit`], no longer pending), so a
    /// plan never makes two owners share bytes, whatever it says. In a
    /// browser the plan's segments are made synchronously, as a
    /// preallocation is, and taken unchecked: a browser that refuses one
    /// says so only as validation errors of the passes using its blocks
    /// (natively the refusal is this call's out-of-memory). There, follow
    /// with [`Pool::follow_async`], which awaits the browser's answer.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let step = |pool: &Pool| -> Result<(), vrampool::Error> {
    ///     let x = pool.alloc(AllocDesc::storage(3 << 20).read_write())?;
    ///     let y = pool.alloc(AllocDesc::storage(5 << 20).read_write())?;
    ///     drop(x);
    ///     let z = pool.alloc(AllocDesc::storage(2 << 20).read_write())?;
    ///     drop((y, z));
    ///     pool.submit([]);
    ///     Ok(())
    /// };
    /// pool.start_recording();
    /// step(&pool)?;
    /// let plan = pool.plan_recording(&pool.take_recording().unwrap())?;
    /// pool.empty_cache();
    /// pool.follow(&plan)?; // the next run: its segments made at once
    /// step(&pool)?;
    /// assert_eq!(pool.follow_stats().placed, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn follow(&self, plan: &RecordedPlan) -> Result<()> {
        let mut engine = self.inner.engine_reported();
        self.inner.close_front(&mut engine, &self.inner.following);
        let followed = engine.follow_recorded(plan);
        self.inner.note_follow_end(&engine);
        drop(engine);
        // A segment the device refused is an out-of-memory the observers hear of.
        self.observed(followed)
    }

    /// [`Pool::follow`], awaiting the device's answer to each of the plan's
    /// segments as [`Pool::alloc_async`] awaits a segment's: the way to
    /// follow a plan in the browser. A refused segment is the error, and
    /// nothing is followed (those made before it become ordinary cache).
    /// While it awaits, `alloc` is served by the policy, and `alloc_async`
    /// waits for it (one allocation awaits the device at a time).
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// pool.start_recording();
    /// let x = pool.alloc(AllocDesc::storage(3 << 20).read_write())?;
    /// drop(x);
    /// pool.submit([]);
    /// let plan = pool.plan_recording(&pool.take_recording().unwrap())?;
    /// pool.empty_cache();
    /// // In the browser, inside wasm_bindgen_futures::spawn_local.
    /// pollster::block_on(pool.follow_async(&plan))?;
    /// assert!(pool.follow_stats().following);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn follow_async(&self, plan: &RecordedPlan) -> Result<()> {
        let _gate = self.alloc_gate("Pool::follow_async").await?;
        let planned = {
            let mut engine = self.inner.engine_reported();
            let planned = engine.plan_follow_recorded(plan);
            // A plan followed before is given up: the front cache is open
            // until this one is followed.
            self.inner.note_follow_end(&engine);
            planned
        };
        let made = self.make_pinned_async(self.observed(planned)?).await;
        let (plan, made) = self.observed(made)?;
        let followed = {
            let mut engine = self.inner.engine_reported();
            self.inner.close_front(&mut engine, &self.inner.following);
            let followed = engine.commit_pinned(plan, made);
            self.inner.note_follow_end(&engine);
            followed
        };
        self.observed(followed)
    }

    /// Stops following the plan [`Pool::follow`] gave, if the pool follows one.
    pub fn stop_following(&self) {
        let mut engine = self.inner.engine();
        engine.stop_following();
        self.inner.note_follow_end(&engine);
    }

    /// How following the plan went ([`Engine::follow_stats`]).
    pub fn follow_stats(&self) -> FollowStats {
        self.inner.engine().follow_stats()
    }

    /// What a usage conflict calls the buffer `block` lives in: its
    /// segment's label, read only for this pool's blocks and only where the
    /// lock can be taken (not from a callback this pool's own work fired,
    /// where waiting would never end).
    pub(super) fn segment_name(&self, block: &BufferBlock) -> String {
        if !std::ptr::eq(block.pool.as_ptr(), Arc::as_ptr(&self.inner)) {
            return "a buffer of another pool".into();
        }
        match self.inner.engine_if_safe() {
            Some(engine) => engine
                .segment_label(block.segment)
                .map_or_else(|| "a released segment".into(), str::to_string),
            // This thread holds the lock (a callback of the pool's own
            // work), or holds another pool's while this one is busy.
            None => format!(
                "segment index {}, whose label cannot be read here without waiting for the \
                 pool's lock",
                block.segment.0
            ),
        }
    }

    /// wgpu's own allocator report (reserved bytes under the pool), where the backend has one.
    pub fn allocator_report(&self) -> Option<wgpu::AllocatorReport> {
        self.inner.device.generate_allocator_report()
    }

    /// Runs `f` with a [`Scope`]: everything allocated through it goes back to
    /// the pool when the scope ends, like TensorFlow's `clear_session`. Handles
    /// cannot outlive the scope (the borrow checker sees to it). Returns `f`'s
    /// value and what the scope allocated.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// let (sum, report) = pool.scope(|s| -> Result<u64, vrampool::Error> {
    ///     let a = s.alloc(AllocDesc::storage(1 << 20))?;
    ///     let b = s.alloc(AllocDesc::storage(2 << 20))?;
    ///     Ok(a.size() + b.size())
    /// });
    /// assert_eq!(sum?, 3 << 20);
    /// assert_eq!((report.allocations, report.bytes, report.returned), (2, 3 << 20, true));
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scope<R>(&self, f: impl FnOnce(&Scope<'_>) -> R) -> (R, ScopeReport) {
        let (scope, before) = self.open_scope();
        let r = f(&scope);
        (r, self.close_scope(scope, before))
    }

    /// [`Pool::scope`] with an async closure, whose allocations await the
    /// device's answer through [`Scope::alloc_async`]: the way to use a
    /// scope in the browser, where [`Scope::alloc`] is not offered. Other
    /// tasks run while the scope awaits, and what they hold at its end
    /// counts against [`ScopeReport::returned`]. A scope whose future is
    /// dropped part-way gives back what it held as its handles drop.
    ///
    /// ```
    /// # let (device, queue) = vrampool::example_device()?;
    /// use vrampool::{AllocDesc, Pool, PoolOptions};
    /// let pool = Pool::new(device, queue, PoolOptions::default())?;
    /// // In the browser, inside wasm_bindgen_futures::spawn_local; natively, any executor.
    /// let (sum, report) = pollster::block_on(pool.scope_async(async |s| {
    ///     let a = s.alloc_async(AllocDesc::storage(1 << 20)).await?;
    ///     let b = s.alloc_async(AllocDesc::storage(2 << 20)).await?;
    ///     Ok::<u64, vrampool::Error>(a.size() + b.size())
    /// }));
    /// assert_eq!(sum?, 3 << 20);
    /// assert_eq!((report.allocations, report.bytes, report.returned), (2, 3 << 20, true));
    /// assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn scope_async<R>(&self, f: impl AsyncFnOnce(&Scope<'_>) -> R) -> (R, ScopeReport) {
        let (scope, before) = self.open_scope();
        let r = f(&scope).await;
        (r, self.close_scope(scope, before))
    }

    /// A new scope and the bytes allocated as it opens.
    fn open_scope(&self) -> (Scope<'_>, u64) {
        let before = self.stats().total.allocated_bytes.current;
        let scope = Scope {
            pool: self,
            report: Mutex::new(ScopeReport::default()),
        };
        (scope, before)
    }

    /// What `scope` allocated, once every handle it gave out is dropped.
    fn close_scope(&self, scope: Scope<'_>, before: u64) -> ScopeReport {
        let mut report = scope.report.into_inner().unwrap_or_else(|e| e.into_inner());
        report.returned = self.stats().total.allocated_bytes.current <= before;
        report
    }
}

/// The engine's figures as they stand, without taking back the blocks the
/// front cache parked (parked blocks count as allocated until the engine has
/// them back, unlike in [`Pool::stats`]; taking the lock may still apply
/// frees other calls queued for it). Inside one of wgpu's callbacks during the pool's own
/// work, where the pool's lock cannot be taken, the figures are left out.
impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Pool");
        match self.inner.engine_if_safe() {
            Some(engine) => {
                let s = engine.stats();
                d.field("allocated", &s.total.allocated_bytes.current)
                    .field("reserved", &s.total.reserved_bytes.current)
                    .finish()
            }
            None => d.finish_non_exhaustive(),
        }
    }
}

/// A pinned plan whose segments [`Pool::make_pinned_async`] is making: if
/// the future is dropped part-way, the segments made so far go to the
/// engine as ordinary cache (`cancel_pinned`), or, where its lock cannot be
/// taken from here (a drop inside a wgpu callback under it), are destroyed.
struct Making<'a> {
    inner: &'a Inner,
    plan: Option<PinnedPlan>,
    made: Vec<wgpu::Buffer>,
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        let Some(plan) = self.plan.take() else {
            return;
        };
        let made = std::mem::take(&mut self.made);
        match self.inner.engine_if_safe() {
            Some(mut engine) => engine.cancel_pinned(plan, made),
            None => {
                for buffer in made {
                    shielded(|| buffer.destroy());
                }
            }
        }
    }
}
