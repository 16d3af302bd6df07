//! The engine's [`Backend`] over a `wgpu::Device`: segments are
//! `wgpu::Buffer`s created inside OutOfMemory and Validation error scopes,
//! and the device's lost callback says when no segment may be made any more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::backend::{Backend, DeviceError, SegmentDesc};

use super::lock::shielded;
use crate::error::Result;
use crate::fault::{Fault, Faults};

use super::blocks::DeviceAllocator;
use super::desc::mappable;

/// The engine's [`Backend`] over a `wgpu::Device`.
pub struct WgpuBackend {
    /// Alive while the backend is: its lost callback, dropped by wgpu with
    /// it alive, was replaced by someone else's (see [`CallbackGuard`]).
    /// First, so it is gone before the device (the last reference to which
    /// may be this backend's) drops the callback uncalled.
    _alive: Arc<()>,
    device: wgpu::Device,
    max_buffer_size: u64,
    capacity: Option<u64>,
    /// Set by the device's lost callback (see [`WgpuBackend::new`]).
    pub(super) lost: Arc<LostState>,
    /// Refusals injected by tests (see [`crate::fault`]).
    faults: Option<Faults>,
    /// Where moved blocks' copies go (see [`WgpuBackend::with_moves`]).
    moves: Option<Moves>,
    /// How wgpu's allocator holds the segments (see
    /// [`WgpuBackend::with_memory_hints`]).
    allocator: Option<DeviceAllocator>,
}

/// The queue that copies moved blocks, and the batch being recorded.
struct Moves {
    queue: wgpu::Queue,
    batch: Option<wgpu::CommandEncoder>,
}

#[cfg(not(target_arch = "wasm32"))]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>> + Send>>;
#[cfg(target_arch = "wasm32")]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>>>>;

/// A new segment whose device answer is not known yet: the buffer, its two
/// error scopes (which resolve at once natively and asynchronously in the
/// browser) and the fault injector's count of its bytes. Until the answer
/// says it may be kept, it is the pool's to give back: dropped (a refusal,
/// or an `alloc_async` future dropped while it waited), the buffer is
/// destroyed at once — in the browser dropping a `wgpu::Buffer` would leave
/// its memory to the page's garbage collector — and the count given back.
pub(super) struct PendingSegment {
    buffer: Option<wgpu::Buffer>,
    oom: Option<ScopeFuture>,
    validation: Option<ScopeFuture>,
    /// The bytes the fault injector counted as held; nothing when no fault
    /// injector is set, or when it refused the segment itself.
    counted: Option<(Faults, u64)>,
    /// A refusal the fault injector made (known at once, unlike the
    /// device's): the browser's synchronous path takes it without awaiting.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    injected: Option<Fault>,
    /// The device's lost state: wgpu swallows the errors of a lost device,
    /// so scopes that come back clean say nothing of a loss met meanwhile.
    lost: Arc<LostState>,
    /// The usage the buffer was made with (a refusal's advice reads it).
    usage: wgpu::BufferUsages,
}

impl PendingSegment {
    /// The segment, once the device says it is good: the engine's from
    /// then on (its bytes stay counted until it is destroyed or abandoned).
    /// A refused one is given back here.
    pub(super) async fn outcome(mut self) -> Result<wgpu::Buffer, DeviceError> {
        let oom = match self.oom.take() {
            Some(scope) => scope.await,
            None => None,
        };
        let validation = match self.validation.take() {
            Some(scope) => scope.await,
            None => None,
        };
        classify(oom, validation)
            .map_err(|refusal| advised(refusal, self.usage))
            .map_err(|refusal| self.told(refusal))?;
        // Lost while it was made (the driver's error, which wgpu reports
        // through the lost callback alone) or while the scopes were awaited.
        if let Some(why) = self.lost.why() {
            return Err(DeviceError::Lost(why.to_string()));
        }
        Ok(self.keep())
    }

    /// The segment, taken without the device's answer (the browser's
    /// synchronous path, which cannot wait for it); a refusal the fault
    /// injector made is known already, and taken.
    #[cfg(target_arch = "wasm32")]
    fn unchecked(mut self) -> Result<wgpu::Buffer, DeviceError> {
        match self.injected.take() {
            Some(fault) => Err(self.told(fault.device_error())),
            None => Ok(self.keep()),
        }
    }

    /// `refusal`, the pool told of it first if it says the device is lost
    /// (the observers are called as for wgpu's lost callback).
    fn told(&self, refusal: DeviceError) -> DeviceError {
        if let DeviceError::Lost(why) = &refusal {
            self.lost.lose(why.clone());
        }
        refusal
    }

    fn keep(mut self) -> wgpu::Buffer {
        self.counted = None;
        self.buffer
            .take()
            .expect("a pending segment holds its buffer")
    }
}

impl Drop for PendingSegment {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            // Nothing has used it: no handle to it was given out.
            shielded(|| buffer.destroy());
        }
        if let Some((faults, size)) = self.counted.take() {
            faults.on_release(size);
        }
    }
}

/// An error scope's result that is known already.
fn answered(error: Option<wgpu::Error>) -> ScopeFuture {
    Box::pin(std::future::ready(error))
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

/// A device's own refusal, with what to do where the pool can tell: a
/// segment of storage beside vertex or index use (the pool widens usages so
/// its blocks share buffers) is what GLES 3.0 and WebGL2 refuse.
fn advised(refusal: DeviceError, usage: wgpu::BufferUsages) -> DeviceError {
    use wgpu::BufferUsages as U;
    match refusal {
        DeviceError::Other(message)
            if usage.contains(U::STORAGE) && usage.intersects(U::INDEX | U::VERTEX) =>
        {
            DeviceError::Other(format!(
                "{message} (the segment's usage is {usage:?}: where a device cannot have \
                 storage beside vertex or index use, as GLES 3.0 and WebGL2 cannot, make the \
                 pool with PoolOptions::widen_usage = false)"
            ))
        }
        refusal => refusal,
    }
}

/// The allocator under `device` opened with `hints`, as the caller says; a
/// `tracing` warning where wgpu's allocator report contradicts them.
fn told(device: &wgpu::Device, hints: &wgpu::MemoryHints) -> Option<DeviceAllocator> {
    DeviceAllocator::of(device, hints).unwrap_or_else(|why| {
        tracing::warn!("vrampool: {why}");
        None
    })
}

impl WgpuBackend {
    /// A backend over `device`, whose largest segment is the device's
    /// `max_buffer_size`. `capacity` is the device memory for
    /// [`Limit::Fraction`](crate::Limit::Fraction) (wgpu cannot query it).
    ///
    /// Drive an [`Engine`](crate::Engine) with it to replay a trace on a real device:
    /// `vrampool::replay(&mut Engine::new(WgpuBackend::new(&device, None), config)?, &trace, usage)`.
    ///
    /// It takes the device's lost callback (wgpu keeps one per device) to learn
    /// of a loss: register yours through [`Pool::on_device_lost`](crate::Pool::on_device_lost), not
    /// `Device::set_device_lost_callback`, which would replace it (the pool
    /// then no longer learns of a loss from wgpu, and a `tracing` warning
    /// says so). A second backend or pool on the same device takes the
    /// callback over and tells the first of a loss too: wgpu drops the
    /// callback it replaces inside the call that replaces it, which is how
    /// the second learns whose it was.
    pub fn new(device: &wgpu::Device, capacity: Option<u64>) -> Self {
        // wgpu's default hints, if the device's blocks may be theirs.
        let allocator = DeviceAllocator::of(device, &wgpu::MemoryHints::Performance)
            .ok()
            .flatten();
        Self::over(device, capacity, allocator)
    }

    /// [`WgpuBackend::new`] followed by [`WgpuBackend::with_memory_hints`],
    /// reading wgpu's allocator report once.
    pub(super) fn for_hints(
        device: &wgpu::Device,
        capacity: Option<u64>,
        hints: &wgpu::MemoryHints,
    ) -> Self {
        Self::over(device, capacity, told(device, hints))
    }

    /// The backend over `device`, whose allocator `allocator` models.
    fn over(
        device: &wgpu::Device,
        capacity: Option<u64>,
        allocator: Option<DeviceAllocator>,
    ) -> Self {
        let lost = Arc::<LostState>::default();
        let alive = Arc::new(());
        let guard = CallbackGuard {
            state: Arc::clone(&lost),
            backend: Arc::downgrade(&alive),
            called: AtomicBool::new(false),
        };
        let displaced = installing(|| {
            device.set_device_lost_callback(move |reason, message| {
                guard.called.store(true, Ordering::Relaxed);
                let state = &guard.state;
                match reason {
                    // wgpu runs this one from a poll, with none of its locks held.
                    wgpu::DeviceLostReason::Destroyed => {
                        state.lose("the device was destroyed (Device::destroy)".to_string())
                    }
                    // This one wgpu runs where it met the loss, inside its own
                    // locks (a submit's, a poll's): an observer calling the
                    // device there would wait for this very thread.
                    _ if message.is_empty() => {
                        state.lose_from_driver("the driver lost the device".to_string())
                    }
                    _ => state.lose_from_driver(format!("the driver lost the device ({message})")),
                }
            })
        });
        // The pools whose callback this one replaced are on this device, and
        // so are those theirs had replaced (kept here: a pool in between
        // may be dropped): told of its loss through this one.
        let mut chained = Vec::new();
        for state in displaced {
            chained.extend(
                state
                    .chained
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned(),
            );
            chained.push(Arc::downgrade(&state));
        }
        *lost.chained.lock().unwrap_or_else(|e| e.into_inner()) = chained;
        WgpuBackend {
            device: device.clone(),
            max_buffer_size: device.limits().max_buffer_size,
            capacity,
            lost,
            faults: None,
            moves: None,
            allocator,
            _alive: alive,
        }
    }

    /// The same backend over a device opened with `hints`
    /// (`DeviceDescriptor::memory_hints`; [`WgpuBackend::new`] takes wgpu's
    /// default, `Performance`): on Vulkan they say in which blocks wgpu's
    /// allocator places the segments, which the engine sizes new segments to
    /// ([`Config::fit_device_blocks`](crate::Config::fit_device_blocks)).
    /// wgpu cannot be asked which hints a device has.
    /// Where wgpu's allocator already holds blocks those hints never make
    /// (a device opened with other hints), segments are not fitted, and a
    /// `tracing` warning says so.
    pub fn with_memory_hints(mut self, hints: &wgpu::MemoryHints) -> Self {
        self.allocator = told(&self.device, hints);
        self
    }

    /// The same backend copying moved blocks on `queue`, so an engine over it
    /// moves [relocatable](crate::Request::relocatable) blocks
    /// ([`Config::relocate`](crate::Config::relocate)). Each batch of moves
    /// is one command buffer submitted at its end: after every command
    /// submitted before it, and before any submitted later (WebGPU's queue
    /// order), so the caller must have submitted every command that uses a
    /// relocatable block's place before it asks for more memory, or pinned
    /// the block ([`Engine::set_relocatable`](crate::Engine::set_relocatable)).
    /// Segments of a usage that is not mappable are made with `COPY_SRC |
    /// COPY_DST` added, which a copy needs. [`Pool`](crate::Pool) builds its
    /// backend with it; only its [`MovableBuffer`](crate::MovableBuffer)s move.
    /// In wasm32 builds the engine moves nothing (`Config::relocate`).
    pub fn with_moves(mut self, queue: &wgpu::Queue) -> Self {
        self.moves = Some(Moves {
            queue: queue.clone(),
            batch: None,
        });
        self
    }

    /// The same backend refusing segments as `faults` say, through the path
    /// wgpu's error scopes take (for tests).
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Creates a segment inside its error scopes without waiting for them:
    /// the segment, to await before handing any of it out.
    /// Polls first, so no segment is made on a device known to be lost.
    pub(super) fn begin_create(
        &self,
        desc: &SegmentDesc<'_>,
    ) -> Result<PendingSegment, DeviceError> {
        // A destroyed device reports its loss from its next poll; poll here,
        // on the slow path, so a new segment is never made on a lost device.
        #[cfg(not(target_arch = "wasm32"))]
        shielded(|| {
            let _ = self.device.poll(wgpu::PollType::Poll);
        });
        if let Some(why) = self.lost.why() {
            return Err(DeviceError::Lost(why.to_string()));
        }
        let injected = self.faults.as_ref().map(|f| f.on_create(desc.size));
        let mut usage = wgpu::BufferUsages::from_bits_truncate(desc.usage);
        if self.moves.is_some() && !mappable(usage) {
            usage |= wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        }
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(desc.label),
            size: desc.size,
            usage,
            mapped_at_creation: false,
        });
        let (oom, validation): (ScopeFuture, ScopeFuture) =
            (Box::pin(oom.pop()), Box::pin(validation.pop()));
        // An injected refusal replaces the scopes' answer with the error wgpu
        // would give, so it takes the same path as a real one.
        let refused = injected.flatten();
        let (oom, validation) = match refused {
            Some(Fault::OutOfMemory) => (
                answered(Some(wgpu::Error::OutOfMemory {
                    source: "out of memory (injected)".into(),
                })),
                validation,
            ),
            Some(Fault::Lost) => (
                oom,
                answered(Some(wgpu::Error::Validation {
                    source: "device lost (injected)".into(),
                    description: "the device was lost (injected)".into(),
                })),
            ),
            None => (oom, validation),
        };
        let counted = match (&self.faults, injected) {
            (Some(faults), Some(None)) => Some((faults.clone(), desc.size)),
            _ => None,
        };
        Ok(PendingSegment {
            usage,
            buffer: Some(buffer),
            oom: Some(oom),
            validation: Some(validation),
            counted,
            injected: refused,
            lost: Arc::clone(&self.lost),
        })
    }
}

/// What the device's lost callback reported, shared by the callback, the
/// backend and the pool. wgpu swallows every error of a lost device (WebGPU's
/// rule), so a `create_buffer` on it "succeeds" with an invalid buffer: this
/// is how the pool knows not to hand one out.
#[derive(Default)]
pub(super) struct LostState {
    why: OnceLock<String>,
    /// The observers, each with whether it has been called.
    observers: Mutex<Vec<(LostObserver, bool)>>,
    /// The states of the pools on the same device whose lost callback this
    /// one's replaced: told of the loss with it.
    chained: Mutex<Vec<Weak<LostState>>>,
}

/// Held by a backend's lost callback. wgpu keeps one callback per device and
/// drops the one a new `set_device_lost_callback` replaces, inside that call:
/// dropped uncalled there while a backend of ours installs its own, it says
/// whose state to chain; dropped so anywhere else with its backend alive,
/// someone else's callback took its place, and the pool can only warn.
struct CallbackGuard {
    state: Arc<LostState>,
    backend: Weak<()>,
    called: AtomicBool,
}

thread_local! {
    /// While a backend installs its lost callback: the states of the
    /// callbacks it replaced.
    static DISPLACED: std::cell::RefCell<Option<Vec<Arc<LostState>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `install` (a `set_device_lost_callback`) and returns the states of
/// our callbacks it replaced.
/// The states come strong: a replaced callback may hold the last reference
/// to its pool's state (the pool dropped), whose own chain must carry on.
fn installing(install: impl FnOnce()) -> Vec<Arc<LostState>> {
    /// Puts the outer list back however `install` ends (a panic in it too).
    struct Restore(Option<Option<Vec<Arc<LostState>>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                let _ = DISPLACED.try_with(|d| *d.borrow_mut() = outer);
            }
        }
    }
    let outer = DISPLACED
        .try_with(|d| d.borrow_mut().replace(Vec::new()))
        .unwrap_or_default();
    let mut restore = Restore(Some(outer));
    install();
    let outer = restore.0.take().unwrap_or_default();
    DISPLACED
        .try_with(|d| std::mem::replace(&mut *d.borrow_mut(), outer))
        .ok()
        .flatten()
        .unwrap_or_default()
}

impl Drop for CallbackGuard {
    fn drop(&mut self) {
        if *self.called.get_mut() {
            return;
        }
        let state = Arc::clone(&self.state);
        let chained = DISPLACED
            .try_with(|d| match d.try_borrow_mut() {
                Ok(mut d) => d.as_mut().map(|d| d.push(state)).is_some(),
                Err(_) => false,
            })
            .unwrap_or(false);
        if !chained && self.backend.strong_count() > 0 && self.state.why().is_none() {
            tracing::warn!(
                "vrampool: the device's lost callback was replaced \
                 (Device::set_device_lost_callback): this pool no longer learns of a device \
                 loss from wgpu; register through Pool::on_device_lost instead"
            );
        }
    }
}

type LostObserver = Arc<dyn Fn(&str) + Send + Sync>;

/// Runs the observers of `states` on a thread of their own; a panic there is
/// that thread's.
#[cfg(not(target_arch = "wasm32"))]
fn spawn_notify(states: Vec<Arc<LostState>>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("vrampool device lost".into())
        .spawn(move || {
            let mut first = None;
            for state in states {
                if let Some(payload) = state.notify() {
                    first.get_or_insert(payload);
                }
            }
            if let Some(payload) = first {
                std::panic::resume_unwind(payload);
            }
        })
        .map(drop)
}

/// Runs the observers of losses a thread learned while it unwinds, which
/// may end it: on a thread of their own natively (a browser's build aborts
/// on a panic, and runs no such thread).
pub(super) fn notify_elsewhere(states: Vec<Arc<LostState>>) {
    #[cfg(not(target_arch = "wasm32"))]
    let _ = spawn_notify(states);
    #[cfg(target_arch = "wasm32")]
    drop(states);
}

impl LostState {
    /// Why the device was lost, once it was.
    pub(super) fn why(&self) -> Option<&str> {
        self.why.get().map(String::as_str)
    }

    fn lose(self: &Arc<Self>, why: String) {
        // Every pool's reason set before any observer runs (one may read
        // another pool).
        for state in self.told(why) {
            super::lock::notify_lost(&state);
        }
    }

    /// Sets `why` in this state and the chained ones; those that had none
    /// before, this one first.
    fn told(self: &Arc<Self>, why: String) -> Vec<Arc<LostState>> {
        let mut told = Vec::new();
        for state in [Arc::clone(self)].into_iter().chain(self.chain()) {
            if state.why.set(why.clone()).is_ok() {
                told.push(state);
            }
        }
        told
    }

    /// The states chained to this one that are still some pool's.
    fn chain(&self) -> Vec<Arc<LostState>> {
        let chained = self.chained.lock().unwrap_or_else(|e| e.into_inner());
        chained.iter().filter_map(Weak::upgrade).collect()
    }

    /// A loss the driver reported, from inside wgpu's own locks: the
    /// observers run on a thread of their own (natively; in a browser
    /// callbacks run from the event loop, outside any lock), so one that
    /// calls the pool or the device does not wait for the thread that holds
    /// them. A panic there is that thread's.
    fn lose_from_driver(self: &Arc<Self>, why: String) {
        let told = self.told(why);
        if told.is_empty() {
            return;
        }
        #[cfg(not(target_arch = "wasm32"))]
        if spawn_notify(told.clone()).is_ok() {
            return;
        }
        for state in &told {
            super::lock::notify_lost(state);
        }
    }

    /// Adds an observer, called at once (see [`super::lock::notify_lost`])
    /// if the device is lost already.
    pub(super) fn observe(self: &Arc<Self>, f: LostObserver) {
        self.observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((f, false));
        if self.why().is_some() {
            super::lock::notify_lost(self);
        }
    }

    /// Calls every observer not called yet, once each, with no engine lock
    /// held: an observer may call the pool, or register another observer.
    /// One that panics does not keep the others from being called; the
    /// first panic is returned, for the caller to raise.
    #[must_use]
    pub(super) fn notify(&self) -> Option<Box<dyn std::any::Any + Send>> {
        let why = self.why()?;
        let mut first = None;
        loop {
            let next = self
                .observers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter_mut()
                .find(|(_, called)| !*called)
                .map(|(f, called)| {
                    *called = true;
                    Arc::clone(f)
                });
            let Some(f) = next else {
                return first;
            };
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(why)))
            {
                first.get_or_insert(payload);
            }
        }
    }
}

impl Backend for WgpuBackend {
    type Segment = wgpu::Buffer;

    fn create_segment(&mut self, desc: &SegmentDesc<'_>) -> Result<wgpu::Buffer, DeviceError> {
        let pending = self.begin_create(desc)?;
        // Natively the scopes have resolved already. In the browser they
        // resolve later: Pool::alloc_async awaits them instead, and only what
        // is made synchronously there (the preallocation, the segments of a
        // plan `Pool::follow` makes at once) is taken unchecked.
        #[cfg(not(target_arch = "wasm32"))]
        {
            pollster::block_on(pending.outcome())
        }
        #[cfg(target_arch = "wasm32")]
        {
            pending.unchecked()
        }
    }

    fn destroy_segment(&mut self, segment: wgpu::Buffer) {
        if let Some(f) = &self.faults {
            f.on_release(segment.size());
        }
        shielded(|| segment.destroy());
    }

    fn abandon_segment(&mut self, segment: wgpu::Buffer) {
        if let Some(f) = &self.faults {
            f.on_release(segment.size());
        }
        // Commands recorded but not submitted may still use it: dropping the
        // handle (not destroying the buffer) lets wgpu keep it for them and
        // free it after they ran. Natively an idle buffer is freed at once;
        // in the browser, when the page collects it.
        shielded(|| drop(segment));
    }

    fn flush_releases(&mut self) {
        // Lets wgpu free destroyed buffers whose last submission has completed.
        shielded(|| {
            let _ = self.device.poll(wgpu::PollType::Poll);
        });
    }

    fn settle_releases(&mut self) {
        // A destroyed buffer that submitted work still uses is freed once
        // that work is done: wait for it (natively; a browser cannot block).
        #[cfg(not(target_arch = "wasm32"))]
        shielded(|| {
            let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        });
    }

    fn lost(&self) -> Option<String> {
        self.lost.why().map(str::to_string)
    }

    fn max_segment_size(&self) -> u64 {
        self.max_buffer_size
    }

    fn suballocation(&self, usage: u32) -> Option<crate::Suballocation> {
        self.allocator.map(|a| a.for_usage(usage))
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Segments of a mappable usage have no `COPY_SRC | COPY_DST` added
    /// (wgpu allows `MAP_READ` with `COPY_DST` alone): their blocks stay.
    fn can_move(&self, usage: u32) -> bool {
        self.moves.is_some() && !mappable(wgpu::BufferUsages::from_bits_truncate(usage))
    }

    fn move_bytes(
        &mut self,
        from: &wgpu::Buffer,
        from_offset: u64,
        to: &wgpu::Buffer,
        to_offset: u64,
        size: u64,
    ) {
        let Some(moves) = &mut self.moves else {
            unreachable!("the engine moves blocks only when the backend supports moves");
        };
        moves
            .batch
            .get_or_insert_with(|| {
                self.device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("vrampool moves"),
                    })
            })
            .copy_buffer_to_buffer(from, from_offset, to, to_offset, size);
    }

    fn flush_moves(&mut self) {
        if let Some(moves) = &mut self.moves
            && let Some(batch) = moves.batch.take()
        {
            shielded(|| {
                moves.queue.submit([batch.finish()]);
            });
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_refused_widened_segment_says_to_stop_widening() {
        use wgpu::BufferUsages as U;
        let refused = || DeviceError::Other("Validation Error: usage".into());
        let widened = advised(refused(), U::STORAGE | U::INDEX | U::COPY_DST);
        assert!(
            matches!(&widened, DeviceError::Other(m) if m.contains("widen_usage = false")),
            "{widened:?}"
        );
        // Storage alone, an out-of-memory and a loss are told as they came.
        assert_eq!(advised(refused(), U::STORAGE), refused());
        let oom = advised(DeviceError::OutOfMemory, U::STORAGE | U::VERTEX);
        assert_eq!(oom, DeviceError::OutOfMemory);
    }

    #[test]
    fn a_driver_loss_runs_observers_outside_the_thread_that_reports_it() {
        // wgpu reports a driver loss inside its own locks; `held` stands in
        // for them. An observer that takes it (as `empty_cache` takes
        // wgpu's snatch lock) waited forever on the reporting thread.
        let held = Arc::new(Mutex::new(()));
        let state = Arc::<LostState>::default();
        let (told, heard) = mpsc::channel();
        let lock = Arc::clone(&held);
        state.observe(Arc::new(move |why: &str| {
            let _wgpu = lock.lock().unwrap();
            told.send(why.to_string()).unwrap();
        }));
        let guard = held.lock().unwrap();
        state.lose_from_driver("the driver lost the device".into());
        // Returned while the lock is held: the observer waits elsewhere.
        assert!(heard.try_recv().is_err());
        drop(guard);
        let why = heard.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(why, "the driver lost the device");
        // Once: a second report changes nothing.
        state.lose_from_driver("again".into());
        assert!(heard.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn a_segment_made_as_the_device_is_lost_is_refused_and_so_is_the_cache() {
        // A driver's loss inside create_buffer reaches the pool through the
        // lost callback alone (wgpu drops the error of a lost device), so
        // the segment's scopes come back clean: its answer was Ok, and the
        // engine, which had heard nothing, handed a block out on it.
        let (device, _queue) = crate::example_device().unwrap();
        let backend = WgpuBackend::new(&device, None);
        let lost = Arc::clone(&backend.lost);
        let desc = SegmentDesc {
            size: 1 << 20,
            usage: wgpu::BufferUsages::STORAGE.bits(),
            label: "test",
        };
        let control = pollster::block_on(backend.begin_create(&desc).unwrap().outcome());
        assert!(control.is_ok(), "{:?}", control.err());
        let mut engine = crate::Engine::new(backend, crate::Config::default()).unwrap();
        let cached = engine
            .allocate(crate::Request::new(4096, desc.usage))
            .unwrap();
        engine.free(cached.id).unwrap();
        let pending = engine.backend().begin_create(&desc).unwrap();
        lost.lose_from_driver("the driver lost the device".into());
        let made = pollster::block_on(pending.outcome());
        assert!(matches!(made, Err(DeviceError::Lost(_))), "{made:?}");
        // The engine takes the backend's word: not even its cache serves.
        let hit = engine.allocate(crate::Request::new(4096, desc.usage));
        assert!(matches!(hit, Err(crate::Error::DeviceLost(_))), "{hit:?}");
    }
}
