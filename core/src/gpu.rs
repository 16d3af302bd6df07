//! The thin binding over `wgpu::Device`: segments are `wgpu::Buffer`s created
//! inside error scopes; handles give a buffer range and return it on drop.

// On wasm32 wgpu's types are neither Send nor Sync; one Arc-based code path
// serves both targets (native needs Send + Sync for Pool and its handles).
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::engine::{
    Backend, BlockId, Config, DeviceError, Engine, Leak, Limit, Request, SegmentDesc, Snapshot,
};
use crate::error::{Error, OomInfo, Result};
use crate::stats::Stats;

/// Usage every non-mappable segment is created with when
/// [`PoolOptions::widen_usage`] is on: one pool serves storage, uniform,
/// vertex, index, indirect and copy requests alike.
pub const GPU_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::UNIFORM)
    .union(wgpu::BufferUsages::VERTEX)
    .union(wgpu::BufferUsages::INDEX)
    .union(wgpu::BufferUsages::INDIRECT)
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// The engine's [`Backend`] over a `wgpu::Device`.
pub struct WgpuBackend {
    device: wgpu::Device,
    max_buffer_size: u64,
    capacity: Option<u64>,
    /// Set by the device's lost callback (see [`WgpuBackend::new`]).
    lost: Arc<LostState>,
    /// When set, segment creation does not wait for the error scopes; their
    /// futures are left here for [`Pool::alloc_async`] to await.
    deferred: Option<Vec<PendingCheck>>,
}

#[cfg(not(target_arch = "wasm32"))]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>> + Send>>;
#[cfg(target_arch = "wasm32")]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>>>>;

#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pool>();
    assert_send_sync::<PoolBuffer>();
    assert_send_sync::<WeakBuffer>();
};

struct PendingCheck {
    oom: ScopeFuture,
    validation: ScopeFuture,
}

fn classify(oom: Option<wgpu::Error>, validation: Option<wgpu::Error>) -> Result<(), DeviceError> {
    if oom.is_some() {
        return Err(DeviceError::OutOfMemory);
    }
    match validation {
        Some(e) => {
            let msg = e.to_string();
            if msg.contains("lost") || msg.contains("destroyed") {
                Err(DeviceError::Lost(msg))
            } else {
                Err(DeviceError::Other(msg))
            }
        }
        None => Ok(()),
    }
}

impl WgpuBackend {
    /// A backend over `device`, whose largest segment is the device's
    /// `max_buffer_size`. `capacity` is the device memory for
    /// [`Limit::Fraction`] (wgpu cannot query it).
    ///
    /// Drive an [`Engine`] with it to replay a trace on a real device:
    /// `vrampool::replay(&mut Engine::new(WgpuBackend::new(&device, None), config)?, &trace, usage)`.
    ///
    /// It takes the device's lost callback (wgpu keeps one per device) to learn
    /// of a loss: register yours through [`Pool::on_device_lost`], not
    /// `Device::set_device_lost_callback`, which would replace it. Make one
    /// pool per device and share it (it is `Send + Sync`): a second backend or
    /// pool on the same device takes the callback over. (wgpu offers no
    /// device identity that holds across instances, so the pools of one
    /// device cannot safely find each other to share it.)
    pub fn new(device: &wgpu::Device, capacity: Option<u64>) -> Self {
        let lost = Arc::<LostState>::default();
        let state = Arc::clone(&lost);
        device.set_device_lost_callback(move |reason, message| {
            state.lose(match reason {
                wgpu::DeviceLostReason::Destroyed => {
                    "the device was destroyed (Device::destroy)".to_string()
                }
                _ if message.is_empty() => "the driver lost the device".to_string(),
                _ => format!("the driver lost the device ({message})"),
            })
        });
        WgpuBackend {
            device: device.clone(),
            max_buffer_size: device.limits().max_buffer_size,
            capacity,
            lost,
            deferred: None,
        }
    }

    /// Why the device was lost, once its lost callback has run.
    fn lost(&self) -> Option<&str> {
        self.lost.why()
    }
}

/// What the device's lost callback reported, shared by the callback, the
/// backend and the pool. wgpu swallows every error of a lost device (WebGPU's
/// rule), so a `create_buffer` on it "succeeds" with an invalid buffer: this
/// is how the pool knows not to hand one out.
#[derive(Default)]
struct LostState {
    why: OnceLock<String>,
    observers: Mutex<Vec<LostObserver>>,
}

type LostObserver = Box<dyn Fn(&str) + Send + Sync>;

impl LostState {
    /// Why the device was lost, once it was.
    fn why(&self) -> Option<&str> {
        self.why.get().map(String::as_str)
    }

    fn lose(&self, why: String) {
        // Under the lock, so an observer registered meanwhile is called once.
        let observers = self.observers.lock().unwrap_or_else(|e| e.into_inner());
        if self.why.set(why).is_err() {
            return; // reported already
        }
        let why = self.why().unwrap_or_default();
        for f in observers.iter() {
            f(why);
        }
    }
}

impl Backend for WgpuBackend {
    type Segment = wgpu::Buffer;

    fn create_segment(&mut self, desc: &SegmentDesc<'_>) -> Result<wgpu::Buffer, DeviceError> {
        // A destroyed device reports its loss from its next poll; poll here,
        // on the slow path, so a new segment is never made on a lost device.
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
        if let Some(why) = self.lost() {
            return Err(DeviceError::Lost(why.to_string()));
        }
        let usage = wgpu::BufferUsages::from_bits_truncate(desc.usage);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(desc.label),
            size: desc.size,
            usage,
            mapped_at_creation: false,
        });
        let oom = oom.pop();
        let validation = validation.pop();
        if let Some(pending) = &mut self.deferred {
            pending.push(PendingCheck {
                oom: Box::pin(oom),
                validation: Box::pin(validation),
            });
            return Ok(buffer);
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let result = classify(pollster::block_on(oom), pollster::block_on(validation));
            if result.is_err() {
                buffer.destroy();
            }
            result.map(|()| buffer)
        }
        #[cfg(target_arch = "wasm32")]
        {
            // In the browser error scopes resolve asynchronously: Pool::alloc_async
            // always runs in deferred mode, so this is not reached.
            drop((oom, validation));
            Ok(buffer)
        }
    }

    fn destroy_segment(&mut self, segment: wgpu::Buffer) {
        segment.destroy();
    }

    fn flush_releases(&mut self) {
        // Lets wgpu free destroyed buffers whose last submission has completed.
        let _ = self.device.poll(wgpu::PollType::Poll);
    }

    fn max_segment_size(&self) -> u64 {
        self.max_buffer_size
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }
}

/// How to build a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The engine's policy.
    pub config: Config,
    /// Serve every non-mappable request from one pool created with
    /// [`GPU_USAGE`] (fewer segments); off keys pools by the exact usage.
    pub widen_usage: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            config: Config::default(),
            widen_usage: true,
        }
    }
}

/// What to allocate.
#[derive(Debug, Clone, Copy)]
pub struct AllocDesc<'a> {
    /// Bytes (rounded up to 4 for the handle's range).
    pub size: u64,
    /// How the range will be used.
    pub usage: wgpu::BufferUsages,
    /// Shown in snapshots and the leak report.
    pub label: Option<&'a str>,
    /// Clear the range to zeros if its bytes were used before (WebGPU's
    /// guarantee for new buffers, kept for reused blocks).
    pub zeroed: bool,
}

impl<'a> AllocDesc<'a> {
    /// `size` bytes of storage (plus copy in and out).
    pub fn storage(size: u64) -> Self {
        AllocDesc {
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            label: None,
            zeroed: false,
        }
    }
    /// Sets the label.
    pub fn label(mut self, label: &'a str) -> Self {
        self.label = Some(label);
        self
    }
    /// Asks for zeroed memory.
    pub fn zeroed(mut self) -> Self {
        self.zeroed = true;
        self
    }
    /// Sets the usage.
    pub fn usage(mut self, usage: wgpu::BufferUsages) -> Self {
        self.usage = usage;
        self
    }

    /// The engine request a [`Pool`] makes for this description: the size
    /// rounded to 4 bytes, the pool it goes to (every non-mappable usage within
    /// [`GPU_USAGE`] shares one pool when `widen_usage`, as
    /// [`PoolOptions::widen_usage`] does), and exclusive segments for mappable
    /// staging buffers. A dry run on the simulated device that calls this makes
    /// exactly the requests the pool will. `mappable_primary`: the device has
    /// `Features::MAPPABLE_PRIMARY_BUFFERS`.
    ///
    /// ```
    /// use vrampool::{AllocDesc, GPU_USAGE};
    /// let r = AllocDesc::storage(1001).request(true, false)?;
    /// assert_eq!((r.size, r.usage, r.exclusive), (1004, GPU_USAGE.bits(), false));
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn request(&self, widen_usage: bool, mappable_primary: bool) -> Result<Request> {
        use wgpu::BufferUsages as U;
        let usage = self.usage;
        let map = usage.intersects(U::MAP_READ | U::MAP_WRITE);
        if usage.is_empty() {
            return Err(Error::InvalidUsage {
                usage: 0,
                why: "no usage given; name at least one, e.g. STORAGE".into(),
            });
        }
        if map && !mappable_primary {
            let allowed = if usage.contains(U::MAP_READ | U::MAP_WRITE) {
                U::empty()
            } else if usage.contains(U::MAP_READ) {
                U::MAP_READ | U::COPY_DST
            } else {
                U::MAP_WRITE | U::COPY_SRC
            };
            if allowed.is_empty() || !allowed.contains(usage) {
                return Err(Error::InvalidUsage {
                    usage: usage.bits(),
                    why: format!(
                        "{usage:?}: MAP_READ combines only with COPY_DST and MAP_WRITE only with COPY_SRC \
                         unless the device has Features::MAPPABLE_PRIMARY_BUFFERS"
                    ),
                });
            }
        }
        let pool_usage = if map {
            usage
        } else if widen_usage && GPU_USAGE.contains(usage) {
            GPU_USAGE
        } else {
            usage | U::COPY_DST
        };
        // Round to 4 bytes; a size that cannot be rounded is too large for any
        // device, which the engine reports (it compares with max_buffer_size).
        let size = self
            .size
            .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .unwrap_or(self.size);
        Ok(Request {
            size,
            usage: pool_usage.bits(),
            exclusive: map,
            label: self.label.map(Arc::from),
            exact_segment: false,
        })
    }
}

struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    engine: Mutex<Engine<WgpuBackend>>,
    lost: Arc<LostState>,
    widen_usage: bool,
    mappable_primary: bool,
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    alloc_gate: async_lock::Mutex<()>,
}

impl Inner {
    fn engine(&self) -> MutexGuard<'_, Engine<WgpuBackend>> {
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
        if !config.alignment.is_power_of_two() {
            return Err(Error::Config(format!(
                "alignment must be a power of two, got {}",
                config.alignment
            )));
        }
        config.alignment = config
            .alignment
            .max(limits.min_storage_buffer_offset_alignment as u64)
            .max(limits.min_uniform_buffer_offset_alignment as u64);
        if config.default_usage == 0 {
            config.default_usage = GPU_USAGE.bits();
        }
        let backend = WgpuBackend::new(&device, config.capacity);
        let mut engine = Engine::new(backend, config)?;
        engine.name_pool(GPU_USAGE.bits(), false, "gpu");
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
        a: crate::engine::Allocation,
        desc: &AllocDesc<'_>,
        req: &Request,
    ) -> PoolBuffer {
        let buffer = engine
            .segment_payload(a.segment)
            .expect("a new block's segment exists")
            .clone();
        let block = BufferBlock {
            pool: Arc::downgrade(&self.inner),
            id: a.id,
            buffer,
            offset: a.offset,
            size: req.size,
            block_size: a.size,
            usage: desc.usage,
            exclusive: req.exclusive,
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
    /// allocate in the browser, where they resolve asynchronously. Works natively too.
    pub async fn alloc_async(&self, desc: AllocDesc<'_>) -> Result<PoolBuffer> {
        let mut req = self.request(&desc)?;
        let _gate = self.inner.alloc_gate.lock().await;
        // The ladder of the native path, one device answer at a time: the pool's
        // choice of segment, then a segment of just the request, then the same
        // after releasing the whole cache.
        for attempt in 0..3 {
            let (a, checks) = {
                let mut engine = self.inner.engine();
                engine.backend_mut().deferred = Some(Vec::new());
                let a = engine.allocate(req.clone());
                let checks = engine.backend_mut().deferred.take().unwrap_or_default();
                (a?, checks)
            };
            let mut failure = Ok(());
            for c in checks {
                let r = classify(c.oom.await, c.validation.await);
                if failure.is_ok() {
                    failure = r;
                }
            }
            let mut engine = self.inner.engine();
            let Err(e) = failure else {
                return Ok(self.wrap(&engine, a, &desc, &req));
            };
            engine.revoke(&a)?;
            match e {
                DeviceError::OutOfMemory if attempt == 0 => req.exact_segment = true,
                DeviceError::OutOfMemory if attempt == 1 => {
                    engine.note_retry();
                    engine.empty_cache();
                }
                DeviceError::OutOfMemory => return Err(engine.out_of_memory(req.size, true)),
                DeviceError::Lost(w) => {
                    engine.mark_lost(w.clone());
                    return Err(Error::DeviceLost(w));
                }
                DeviceError::Other(m) => return Err(Error::Device(m)),
            }
        }
        unreachable!("the third attempt returns")
    }

    /// Releases every cached segment that holds no live block and waits for the
    /// device to really free them (`torch.cuda.empty_cache()`). Returns the bytes released.
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
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
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

/// A block of a pool segment: the buffer, the range, and how to bind it.
pub struct BufferBlock {
    pool: Weak<Inner>,
    id: BlockId,
    buffer: wgpu::Buffer,
    offset: u64,
    size: u64,
    block_size: u64,
    usage: wgpu::BufferUsages,
    exclusive: bool,
    label: Option<Arc<str>>,
}

impl BufferBlock {
    /// The segment's buffer; the block is `offset()..offset() + size()` of it.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
    /// Offset in the buffer (aligned to `min_storage_buffer_offset_alignment`).
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Size of the range (the request rounded up to 4 bytes).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Size of the block held (the request rounded to the pool's granularity).
    pub fn block_size(&self) -> u64 {
        self.block_size
    }
    /// The byte range in the buffer.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }
    /// The usage asked for.
    pub fn usage(&self) -> wgpu::BufferUsages {
        self.usage
    }
    /// The label asked for.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }
    /// A slice of the range, for vertex/index binding, copies or mapping.
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.buffer.slice(self.range())
    }
    /// A `BufferBinding` of the range.
    pub fn buffer_binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        }
    }
    /// A `BindingResource` of the range, for a bind group entry.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(self.buffer_binding())
    }
}

impl Drop for BufferBlock {
    fn drop(&mut self) {
        let Some(inner) = self.pool.upgrade() else {
            return;
        };
        if self.exclusive {
            // A staging buffer goes back only unmapped. Unmapping an unmapped
            // buffer is a validation error in wgpu; the scope swallows it.
            let scope = inner.device.push_error_scope(wgpu::ErrorFilter::Validation);
            self.buffer.unmap();
            drop(scope);
        }
        let _ = inner.engine().free(self.id);
    }
}

/// A strong handle to a pool block. Clones share the block; it returns to the
/// pool when the last clone is dropped (Python's `del`).
#[derive(Clone)]
pub struct PoolBuffer(Arc<BufferBlock>);

impl PoolBuffer {
    /// A weak handle that does not keep the block alive (Python's `weakref`).
    pub fn downgrade(&self) -> WeakBuffer {
        WeakBuffer(Arc::downgrade(&self.0))
    }
}

impl std::ops::Deref for PoolBuffer {
    type Target = BufferBlock;
    fn deref(&self) -> &BufferBlock {
        &self.0
    }
}

impl std::fmt::Debug for PoolBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuffer")
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("label", &self.label)
            .finish()
    }
}

/// A weak handle: [`upgrade`](WeakBuffer::upgrade) works while the block is
/// live and returns `None` after.
#[derive(Clone)]
pub struct WeakBuffer(Weak<BufferBlock>);

impl WeakBuffer {
    /// A strong handle, if the block is still live.
    pub fn upgrade(&self) -> Option<PoolBuffer> {
        self.0.upgrade().map(PoolBuffer)
    }
    /// Whether the block is still live.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// What a [`Pool::scope`] allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeReport {
    /// Allocations made through the scope.
    pub allocations: u64,
    /// Bytes requested through the scope.
    pub bytes: u64,
    /// Whether the pool's allocated bytes were back to (or under) their level
    /// at the scope's start when it ended.
    pub returned: bool,
}

/// Allocates blocks that go back to the pool when the scope ends.
pub struct Scope<'p> {
    pool: &'p Pool,
    report: Mutex<ScopeReport>,
}

/// A block allocated in a [`Scope`]; it cannot outlive the scope.
pub struct ScopedBuffer<'s> {
    inner: PoolBuffer,
    _scope: std::marker::PhantomData<&'s ()>,
}

impl std::ops::Deref for ScopedBuffer<'_> {
    type Target = BufferBlock;
    fn deref(&self) -> &BufferBlock {
        &self.inner
    }
}

impl Scope<'_> {
    /// Allocates a block for the scope's lifetime.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn alloc(&self, desc: AllocDesc<'_>) -> Result<ScopedBuffer<'_>> {
        let inner = self.pool.alloc(desc)?;
        let mut r = self.report.lock().unwrap_or_else(|e| e.into_inner());
        r.allocations += 1;
        r.bytes += desc.size;
        Ok(ScopedBuffer {
            inner,
            _scope: std::marker::PhantomData,
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        self.pool
    }
}
