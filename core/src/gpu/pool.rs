//! [`Pool`]: the engine behind a mutex over a `wgpu::Device` and its queue.
//! It maps descriptions to requests, wraps blocks in handles, zeroes reused
//! bytes, learns of submits ([`Reuse`]), and runs the browser's asynchronous
//! allocation path.

// On wasm32 wgpu's types are neither Send nor Sync; one Arc-based code path
// serves both targets (native needs Send + Sync for Pool and its handles).
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{Config, Limit};
use crate::engine::{Engine, InvariantError, Planned, SegmentPlan};
use crate::error::{Error, OomInfo, Result};
use crate::fault::Faults;
use crate::snapshot::{Leak, Snapshot};
use crate::stats::Stats;
use crate::types::{Allocation, Request};

use super::backend::{LostState, WgpuBackend};
use super::desc::{
    AllocDesc, GPU_USAGE, GROUP_READ_ONLY, GROUP_READ_WRITE, READ_WRITE_USAGE, Sharing,
};
use super::handle::{BufferBlock, PoolBuffer};
use super::scope::{Scope, ScopeReport};

/// How to build a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The engine's policy.
    pub config: Config,
    /// Serve every request of one [`Sharing`](crate::Sharing) from one pool
    /// created with the widest usage that sharing allows ([`GPU_USAGE`], or
    /// [`READ_WRITE_USAGE`](crate::READ_WRITE_USAGE)): fewer segments. Off
    /// keys pools by the exact usage too.
    pub widen_usage: bool,
    /// When a dropped block may be handed to its next owner.
    pub reuse: Reuse,
    /// For tests: device refusals to inject (see [`crate::fault`]); they take
    /// the path wgpu's error scopes take, natively and in the browser.
    pub faults: Option<Faults>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            config: Config::default(),
            widen_usage: true,
            reuse: Reuse::AfterSubmit,
            faults: None,
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
    /// still use it, and frees it after them).
    #[default]
    AfterSubmit,
    /// A dropped block is reused at once, as PyTorch's allocator does on one
    /// stream. Correct only when every command using a block is submitted
    /// before the block is dropped (each operation submitted as it is made,
    /// as cubecl's stream does); otherwise a later owner's `write_buffer` or
    /// zeroing can reach a recorded command first.
    Immediate,
}

pub(super) struct Inner {
    pub(super) device: wgpu::Device,
    queue: wgpu::Queue,
    engine: Mutex<Engine<WgpuBackend>>,
    lost: Arc<LostState>,
    widen_usage: bool,
    mappable_primary: bool,
    pub(super) reuse: Reuse,
    /// Whether the app ever told the pool of a submit.
    declared: AtomicBool,
    /// Whether the "nothing is ever submitted" warning was given.
    warned: AtomicBool,
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    alloc_gate: async_lock::Mutex<()>,
}

/// Pending bytes above which a pool that was never told of a submit warns.
const PENDING_WARNING: u64 = 64 << 20;

impl Inner {
    pub(super) fn engine(&self) -> MutexGuard<'_, Engine<WgpuBackend>> {
        // A panic while the lock was held cannot leave the engine half-updated in
        // a way that matters more than losing the pool, so recover the guard.
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
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
/// ```no_run
/// # async fn demo(device: wgpu::Device, queue: wgpu::Queue) -> Result<(), vrampool::Error> {
/// use vrampool::{AllocDesc, Pool, PoolOptions};
/// let pool = Pool::new(device, queue, PoolOptions::default())?;
/// let a = pool.alloc(AllocDesc::storage(1 << 20).label("activations"))?;
/// // bind a.binding() in a bind group, or use a.slice(..) ...
/// drop(a); // back to the pool, not to the driver
/// let b = pool.alloc(AllocDesc::storage(1 << 20).zeroed())?; // cache hit, cleared
/// println!("{}", pool.memory_summary());
/// drop(b);
/// let released = pool.empty_cache(); // now the driver gets it back
/// # Ok(()) }
/// ```
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// Makes a pool over `device`; the largest segment is the device's
    /// `max_buffer_size`, offsets are aligned to its storage and uniform offset
    /// alignments. Fails on a configuration that cannot work (a fraction limit
    /// without [`Config::capacity`], a preallocation the device refuses).
    pub fn new(device: wgpu::Device, queue: wgpu::Queue, options: PoolOptions) -> Result<Pool> {
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
        let mut backend = WgpuBackend::new(&device, config.capacity);
        if let Some(faults) = options.faults {
            backend = backend.with_faults(faults);
        }
        let mut engine = Engine::new(backend, config)?;
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
        Ok(Pool {
            inner: Arc::new(Inner {
                device,
                queue,
                engine: Mutex::new(engine),
                lost,
                widen_usage: options.widen_usage,
                mappable_primary,
                reuse: options.reuse,
                declared: AtomicBool::new(false),
                warned: AtomicBool::new(false),
                alloc_gate: async_lock::Mutex::new(()),
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

    /// Why the device was lost, once wgpu has said so (from a poll after
    /// `Device::destroy`, or when the driver loses it). From then on every
    /// allocation fails with [`Error::DeviceLost`]; frees, stats, snapshots and
    /// `empty_cache` keep working, and handles still live can be dropped.
    pub fn device_lost(&self) -> Option<&str> {
        self.inner.lost.why()
    }

    /// Calls `f` with the reason when the device is lost (at once if it already
    /// is). The pool holds the device's one lost callback (see
    /// [`WgpuBackend::new`]); register here instead.
    ///
    /// ```no_run
    /// # fn demo(pool: &vrampool::Pool) {
    /// use vrampool::{AllocDesc, Error};
    /// pool.on_device_lost(|why| eprintln!("GPU gone: {why}"));
    /// match pool.alloc(AllocDesc::storage(1 << 20)) {
    ///     Err(Error::DeviceLost(_)) => { /* make a new device and a new pool */ }
    ///     _ => { /* a buffer, or another error */ }
    /// }
    /// # }
    /// ```
    pub fn on_device_lost(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        let mut observers = self
            .inner
            .lost
            .observers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(why) = self.inner.lost.why() {
            f(why);
        }
        observers.push(Box::new(f));
    }

    fn wrap(
        &self,
        engine: &Engine<WgpuBackend>,
        a: Allocation,
        desc: &AllocDesc<'_>,
        req: &Request,
    ) -> PoolBuffer {
        let buffer = engine
            .segment_payload(a.segment)
            .expect("a new block's segment exists")
            .clone();
        if a.fresh {
            self.warn_if_never_submitted(engine);
        }
        let block = BufferBlock {
            pool: Arc::downgrade(&self.inner),
            id: a.id,
            segment: a.segment,
            buffer,
            offset: a.offset,
            size: req.size,
            block_size: a.size,
            usage: desc.usage,
            sharing: Sharing::of(req),
            label: req.label.clone(),
        };
        if desc.zeroed && !a.fresh {
            let mut enc =
                self.inner
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("vrampool zero-on-reuse"),
                    });
            enc.clear_buffer(&block.buffer, block.offset, Some(block.block_size));
            self.inner.queue.submit([enc.finish()]);
        }
        PoolBuffer(Arc::new(block))
    }

    /// Allocates a buffer range. Natively the device's answer is known at once:
    /// on out-of-memory the pool releases its cache, retries, calls the OOM
    /// observers and returns [`Error::OutOfMemory`]; it never hands out an
    /// invalid buffer.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn alloc(&self, desc: AllocDesc<'_>) -> Result<PoolBuffer> {
        let req = self.request(&desc)?;
        let mut engine = self.inner.engine();
        let a = engine.allocate(req.clone())?;
        Ok(self.wrap(&engine, a, &desc, &req))
    }

    /// Allocates a buffer range, awaiting the device's error scopes: the way to
    /// allocate in the browser, where they resolve asynchronously. Works
    /// natively too. The engine's ladder is the native path's (the planned
    /// segment, then just the request, then the same after releasing the
    /// cache), one device answer at a time; a refused segment is destroyed
    /// before any handle to it exists, and changes no figure.
    pub async fn alloc_async(&self, desc: AllocDesc<'_>) -> Result<PoolBuffer> {
        let req = self.request(&desc)?;
        // One allocation at a time waits for the device (the engine counts
        // the plan against the limits meanwhile).
        let _gate = self.inner.alloc_gate.lock().await;
        let plan = {
            let mut engine = self.inner.engine();
            match engine.plan(req.clone())? {
                Planned::Hit(a) => return Ok(self.wrap(&engine, a, &desc, &req)),
                Planned::Create(plan) => plan,
            }
        };
        let mut plan = PlanGuard {
            inner: &self.inner,
            plan: Some(plan),
        };
        loop {
            let begun = self
                .inner
                .engine()
                .backend()
                .begin_create(&plan.get().desc());
            let (buffer, check) = match begun {
                Ok(created) => created,
                Err(refusal) => {
                    let mut engine = self.inner.engine();
                    let next = engine.refused(plan.take(), refusal)?;
                    plan.put(next);
                    continue;
                }
            };
            let (outcome, counted) = check.outcome().await;
            let mut engine = self.inner.engine();
            match outcome {
                Ok(()) => {
                    let a = engine.commit(plan.take(), buffer);
                    return Ok(self.wrap(&engine, a, &desc, &req));
                }
                Err(refusal) => {
                    engine.backend().discard(buffer, counted);
                    let next = engine.refused(plan.take(), refusal)?;
                    plan.put(next);
                }
            }
        }
    }

    /// Submits `command_buffers` on the pool's queue, then makes every block
    /// dropped before this call reusable: their recorded work is now ahead, in
    /// queue order, of anything a next owner does. Use it instead of
    /// `queue.submit` (with [`Reuse::AfterSubmit`], the default). Every
    /// encoder that recorded work on blocks dropped since the last submit must
    /// be among `command_buffers` or submitted before; an encoder kept
    /// unsubmitted across this call must not use blocks that are dropped.
    ///
    /// ```no_run
    /// # fn frame(pool: &vrampool::Pool) -> Result<(), vrampool::Error> {
    /// use vrampool::AllocDesc;
    /// let mut encoder = pool.device().create_command_encoder(&Default::default());
    /// let tmp = pool.alloc(AllocDesc::storage(1 << 20).read_write())?;
    /// // ... record passes that use `tmp` ...
    /// drop(tmp); // pending: the encoder is not submitted yet
    /// pool.submit([encoder.finish()]); // now its bytes may serve the next request
    /// # Ok(()) }
    /// ```
    pub fn submit<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        command_buffers: I,
    ) -> wgpu::SubmissionIndex {
        let mark = self.inner.engine().defer_mark();
        let index = self.inner.queue.submit(command_buffers);
        self.inner.declared.store(true, Ordering::Relaxed);
        self.inner.engine().reclaim_deferred(mark);
        index
    }

    /// Tells the pool that every command buffer recorded so far has been
    /// submitted (or dropped): blocks dropped before this call become
    /// reusable. For code that calls `queue.submit` itself. Returns the bytes
    /// made reusable.
    pub fn submitted(&self) -> u64 {
        self.inner.declared.store(true, Ordering::Relaxed);
        let mut engine = self.inner.engine();
        let mark = engine.defer_mark();
        engine.reclaim_deferred(mark)
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
    /// commands that still use it and frees it after them. Returns the bytes
    /// released.
    pub fn empty_cache(&self) -> u64 {
        let released = self.inner.engine().empty_cache();
        let _ = self.inner.device.poll(wgpu::PollType::wait_indefinitely());
        released
    }

    /// Figures: allocated, reserved, cached, … current and peak, and counters.
    pub fn stats(&self) -> Stats {
        self.inner.engine().stats()
    }

    /// Resets peaks to current values.
    pub fn reset_peak_stats(&self) {
        self.inner.engine().reset_peak_stats()
    }

    /// The `memory_summary()` table.
    pub fn memory_summary(&self) -> String {
        self.inner.engine().memory_summary()
    }

    /// Segments → blocks, serialisable.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.engine().snapshot()
    }

    /// Live blocks with their labels.
    pub fn leaks(&self) -> Vec<Leak> {
        self.inner.engine().leaks()
    }

    /// Checks the engine's invariants (see ARCHITECTURE.md); O(blocks), for tests
    /// and debugging.
    pub fn check_invariants(&self) -> std::result::Result<(), InvariantError> {
        self.inner.engine().check_invariants()
    }

    /// Sets or clears the hard limit; cached memory above it is released.
    pub fn set_limit(&self, limit: Option<Limit>) -> Result<()> {
        self.inner.engine().set_limit(limit)
    }

    /// Sets the cache limit (bytes kept in fully-free segments).
    pub fn set_cache_limit(&self, cache_limit: Option<u64>) {
        self.inner.engine().set_cache_limit(cache_limit)
    }

    /// Calls `f` with the pool's state on every out-of-memory.
    pub fn on_oom(&self, f: impl Fn(&OomInfo) + Send + Sync + 'static) {
        self.inner.engine().add_oom_observer(Box::new(f))
    }

    /// Starts recording allocate/free events as an RMM CSV log.
    pub fn start_recording(&self) {
        self.inner.engine().start_recording()
    }

    /// Stops recording and returns the log.
    pub fn take_recording(&self) -> Option<String> {
        self.inner.engine().take_recording()
    }

    /// The label of the segment `block` lives in, while the pool has it.
    pub(super) fn segment_label(&self, block: &BufferBlock) -> Option<String> {
        self.inner
            .engine()
            .segment_label(block.segment)
            .map(str::to_string)
    }

    /// wgpu's own allocator report (reserved bytes under the pool), where the backend has one.
    pub fn allocator_report(&self) -> Option<wgpu::AllocatorReport> {
        self.inner.device.generate_allocator_report()
    }

    /// Runs `f` with a [`Scope`]: everything allocated through it goes back to
    /// the pool when the scope ends, like TensorFlow's `clear_session`. Handles
    /// cannot outlive the scope (the borrow checker sees to it). Returns `f`'s
    /// value and what the scope allocated.
    pub fn scope<R>(&self, f: impl FnOnce(&Scope<'_>) -> R) -> (R, ScopeReport) {
        let before = self.stats();
        let scope = Scope {
            pool: self,
            report: Mutex::new(ScopeReport::default()),
        };
        let r = f(&scope);
        let mut report = scope.report.into_inner().unwrap_or_else(|e| e.into_inner());
        let after = self.stats();
        report.returned =
            after.total.allocated_bytes.current <= before.total.allocated_bytes.current;
        (r, report)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct("Pool")
            .field("allocated", &s.total.allocated_bytes.current)
            .field("reserved", &s.total.reserved_bytes.current)
            .finish()
    }
}

/// A plan awaiting the device in [`Pool::alloc_async`]: cancelled in the
/// engine if the future is dropped before the plan is settled.
struct PlanGuard<'p> {
    inner: &'p Inner,
    plan: Option<SegmentPlan>,
}

impl PlanGuard<'_> {
    fn get(&self) -> &SegmentPlan {
        self.plan.as_ref().expect("a plan is held between steps")
    }
    fn take(&mut self) -> SegmentPlan {
        self.plan.take().expect("a plan is held between steps")
    }
    fn put(&mut self, plan: SegmentPlan) {
        self.plan = Some(plan);
    }
}

impl Drop for PlanGuard<'_> {
    fn drop(&mut self) {
        if let Some(plan) = self.plan.take() {
            self.inner.engine().cancel(plan);
        }
    }
}
