//! Where the page's blocks come from: one trait, [`Backing`], over the
//! browser's WebGPU [`Pool`] and the engine on a simulated device, so that
//! allocating, freeing and replaying are written once for both.

use std::any::Any;
use std::cell::RefCell;
use std::future::{Future, ready};
use std::pin::Pin;
use std::rc::{Rc, Weak};

use vrampool::{
    Access, AllocDesc, BlockId, Config, Engine, Error, Limit, Pool, PoolOptions, Request,
    SimulatedDevice, Snapshot, Stats,
};

/// The simulated device's memory.
pub const SIM_CAPACITY: u64 = 4 << 30;
/// WebGPU's default `max_buffer_size`.
pub const WEBGPU_MAX_BUFFER: u64 = 256 << 20;

/// An allocation in flight: on WebGPU it awaits the device's error scopes, on
/// the simulated engine it is ready at once.
pub type AllocFuture<'a> = Pin<Box<dyn Future<Output = Result<Block, Error>> + 'a>>;

/// What [`Backing::renew_async`] returns.
pub type RenewFuture = Pin<Box<dyn Future<Output = Result<Rc<dyn Backing>, Error>>>>;

/// What hands out the page's blocks: the WebGPU [`Pool`], or the engine on a
/// simulated device ([`Simulated`]) where the browser has none.
///
/// Why a trait object with a boxed future: the page picks its backing at run
/// time (WebGPU or not, and again on "new device"), so the model holds an
/// `Rc<dyn Backing>`. Allocating is async on WebGPU (`Pool::alloc_async`
/// awaits the error scopes that say whether a new segment is valid) and sync
/// on the simulated engine. An `async fn` in the trait would be the plain
/// spelling, but it makes the trait unusable as `dyn Backing` (rustc 1.95:
/// "not dyn compatible"), so [`Backing::allocate`] returns a boxed local
/// future; the simulated engine's is ready at once, so awaiting it never
/// yields. Nothing is `Send`: the page runs on wasm's one thread.
///
/// Blocks free themselves when dropped (as a [`vrampool::PoolBuffer`] does),
/// so the trait has no free of its own beyond [`Backing::blocks_dropped`].
/// Every method takes `&self`, so a task can hold the `Rc` across an await
/// without holding the model.
pub trait Backing {
    /// Allocates `size` bytes for `usage`.
    fn allocate(&self, size: u64, usage: Usage) -> AllocFuture<'_>;

    /// Tells the backing that the page dropped blocks no recorded command
    /// uses. On WebGPU this is `Pool::submitted`, so they may be reused at once
    /// (the page records no command with the blocks it frees; training
    /// submits its own through `Pool::submit`).
    fn blocks_dropped(&self) {}

    /// Frees `block`.
    fn free(&self, block: Block) {
        drop(block);
        self.blocks_dropped();
    }

    /// The figures.
    fn stats(&self) -> Stats;

    /// Segments and blocks.
    fn snapshot(&self) -> Snapshot;

    /// `empty_cache()`: returns the bytes released.
    fn empty_cache(&self) -> u64;

    /// Sets the hard limit and the cache limit.
    fn set_limits(&self, limit: Option<Limit>, cache_limit: Option<u64>) -> Result<(), Error>;

    /// Starts the peaks afresh from the current figures.
    fn reset_peak_stats(&self);

    /// A new, empty backing of the same kind (on the same device) with `config`.
    fn renew(&self, config: Config) -> Result<Rc<dyn Backing>, Error>;

    /// [`Backing::renew`], awaiting the device's answer to a preallocation
    /// (`Pool::new_async`: `Pool::new` in the browser takes its segments
    /// unchecked, and one the device refused would hand out invalid buffers).
    fn renew_async(&self, config: Config) -> RenewFuture {
        let renewed = self.renew(config);
        Box::pin(async move { renewed })
    }

    /// Starts recording every allocate and free as RMM CSV.
    fn start_recording(&self);

    /// Stops recording and returns the log (header first), if recording.
    fn take_recording(&self) -> Option<String>;

    /// The log so far (header first), if recording, the recording going on:
    /// the next log continues it (`Engine::drain_recording`).
    fn drain_recording(&self) -> Option<String>;

    /// Why the device was lost, once it was.
    fn device_lost(&self) -> Option<String> {
        None
    }

    /// The WebGPU pool, for what needs a real device: running shaders,
    /// destroying the device.
    fn webgpu(&self) -> Option<&Pool> {
        None
    }
}

/// A block the page holds. Dropping it frees it: a `PoolBuffer` returns its
/// range to its pool, a simulated block frees itself in its engine.
pub struct Block {
    _owner: Box<dyn Any>,
}

impl Block {
    /// Holds `owner`, whose drop frees the block.
    pub fn new(owner: impl Any) -> Block {
        Block {
            _owner: Box::new(owner),
        }
    }
}

impl Backing for Pool {
    fn allocate(&self, size: u64, usage: Usage) -> AllocFuture<'_> {
        Box::pin(async move { self.alloc_async(usage.desc(size)).await.map(Block::new) })
    }
    fn blocks_dropped(&self) {
        self.submitted();
    }
    fn stats(&self) -> Stats {
        Pool::stats(self)
    }
    fn snapshot(&self) -> Snapshot {
        Pool::snapshot(self)
    }
    fn empty_cache(&self) -> u64 {
        Pool::empty_cache(self)
    }
    fn set_limits(&self, limit: Option<Limit>, cache_limit: Option<u64>) -> Result<(), Error> {
        self.set_limit(limit)?;
        self.set_cache_limit(cache_limit);
        Ok(())
    }
    fn reset_peak_stats(&self) {
        Pool::reset_peak_stats(self);
    }
    fn renew(&self, config: Config) -> Result<Rc<dyn Backing>, Error> {
        // The old pool's segments go back to the driver as it is dropped.
        let options = PoolOptions {
            config,
            ..PoolOptions::default()
        };
        let pool = Pool::new(self.device().clone(), self.queue().clone(), options)?;
        Ok(Rc::new(pool))
    }
    fn renew_async(&self, config: Config) -> RenewFuture {
        let (device, queue) = (self.device().clone(), self.queue().clone());
        Box::pin(async move {
            let options = PoolOptions {
                config,
                ..PoolOptions::default()
            };
            Ok(Rc::new(Pool::new_async(device, queue, options).await?) as Rc<dyn Backing>)
        })
    }
    fn start_recording(&self) {
        Pool::start_recording(self);
    }
    fn take_recording(&self) -> Option<String> {
        Pool::take_recording(self)
    }
    fn drain_recording(&self) -> Option<String> {
        Pool::drain_recording(self)
    }
    fn device_lost(&self) -> Option<String> {
        Pool::device_lost(self).map(str::to_owned)
    }
    fn webgpu(&self) -> Option<&Pool> {
        Some(self)
    }
}

/// The engine on a simulated device of a given capacity, with WebGPU's
/// default `max_buffer_size`: what the page runs where the browser has no
/// WebGPU. It only counts bytes; every figure is the engine's own.
pub struct Simulated {
    engine: Rc<RefCell<Engine<SimulatedDevice>>>,
    capacity: u64,
}

impl Simulated {
    /// A simulated device of `capacity` bytes and an engine with `config` on it.
    pub fn new(capacity: u64, config: Config) -> Result<Simulated, Error> {
        Ok(Simulated {
            engine: Rc::new(RefCell::new(simulated_pool(capacity, config)?)),
            capacity,
        })
    }
}

/// A block of a [`Simulated`] engine; frees itself when dropped (if the
/// engine is still there).
struct SimBlock {
    engine: Weak<RefCell<Engine<SimulatedDevice>>>,
    id: BlockId,
}

impl Drop for SimBlock {
    fn drop(&mut self) {
        if let Some(engine) = self.engine.upgrade() {
            let _ = engine.borrow_mut().free(self.id);
        }
    }
}

impl Backing for Simulated {
    fn allocate(&self, size: u64, usage: Usage) -> AllocFuture<'_> {
        // The same request the WebGPU pool makes of its engine (default `widen_usage`).
        let block = usage
            .desc(size)
            .request(PoolOptions::default().widen_usage, false)
            .and_then(|req| self.engine.borrow_mut().allocate(req))
            .map(|a| {
                Block::new(SimBlock {
                    engine: Rc::downgrade(&self.engine),
                    id: a.id,
                })
            });
        Box::pin(ready(block))
    }
    fn stats(&self) -> Stats {
        self.engine.borrow().stats()
    }
    fn snapshot(&self) -> Snapshot {
        self.engine.borrow().snapshot()
    }
    fn empty_cache(&self) -> u64 {
        self.engine.borrow_mut().empty_cache()
    }
    fn set_limits(&self, limit: Option<Limit>, cache_limit: Option<u64>) -> Result<(), Error> {
        let mut engine = self.engine.borrow_mut();
        engine.set_limit(limit)?;
        engine.set_cache_limit(cache_limit);
        Ok(())
    }
    fn reset_peak_stats(&self) {
        self.engine.borrow_mut().reset_peak_stats();
    }
    fn renew(&self, config: Config) -> Result<Rc<dyn Backing>, Error> {
        Ok(Rc::new(Simulated::new(self.capacity, config)?))
    }
    fn start_recording(&self) {
        self.engine.borrow_mut().start_recording();
    }
    fn take_recording(&self) -> Option<String> {
        self.engine.borrow_mut().take_recording()
    }
    fn drain_recording(&self) -> Option<String> {
        self.engine.borrow_mut().drain_recording()
    }
}

/// The engine the page falls back to when `navigator.gpu` or an adapter is
/// missing: a simulated device of `capacity` bytes with WebGPU's default
/// `max_buffer_size` (256 MiB).
pub fn simulated_pool(capacity: u64, config: Config) -> Result<Engine<SimulatedDevice>, Error> {
    Engine::new(
        SimulatedDevice::with_max_buffer_size(capacity, WEBGPU_MAX_BUFFER),
        config,
    )
}

/// Allocates `count` blocks of `size` bytes and frees every other one on the
/// simulated engine: the "allocate N × size" then "free random" buttons.
pub fn allocate_and_free_half(
    engine: &mut Engine<SimulatedDevice>,
    count: usize,
    size: u64,
) -> Result<Stats, Error> {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(engine.allocate(Request::new(size, 0))?.id);
    }
    for id in ids.into_iter().step_by(2) {
        engine.free(id)?;
    }
    Ok(engine.stats())
}

/// What a person can ask for with "allocate".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// STORAGE | COPY_SRC | COPY_DST.
    Storage,
    /// UNIFORM | COPY_DST.
    Uniform,
    /// VERTEX | COPY_DST.
    Vertex,
    /// MAP_READ | COPY_DST: a staging buffer (exclusive).
    Readback,
    /// STORAGE | COPY_SRC | COPY_DST bound only read_write: a replayed
    /// trace's tensors, packed as the harness's replay packs them.
    Tensor,
}

impl Usage {
    /// Parses the `<select>` value.
    pub fn parse(s: &str) -> Usage {
        match s {
            "uniform" => Usage::Uniform,
            "vertex" => Usage::Vertex,
            "readback" => Usage::Readback,
            _ => Usage::Storage,
        }
    }

    fn wgpu(self) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        match self {
            Usage::Storage | Usage::Tensor => U::STORAGE | U::COPY_SRC | U::COPY_DST,
            Usage::Uniform => U::UNIFORM | U::COPY_DST,
            Usage::Vertex => U::VERTEX | U::COPY_DST,
            Usage::Readback => U::MAP_READ | U::COPY_DST,
        }
    }

    /// What the pool is asked for: `size` bytes of this usage, labelled with it.
    pub fn desc(self, size: u64) -> AllocDesc<'static> {
        let access = match self {
            Usage::Tensor => Access::ReadWrite,
            _ => Access::Any,
        };
        AllocDesc::new(size, self.wgpu())
            .access(access)
            .label(self.label())
    }

    fn label(self) -> &'static str {
        match self {
            Usage::Storage => "storage",
            Usage::Uniform => "uniform",
            Usage::Vertex => "vertex",
            Usage::Readback => "readback",
            Usage::Tensor => "tensor",
        }
    }
}
