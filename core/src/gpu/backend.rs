//! The engine's [`Backend`] over a `wgpu::Device`: segments are
//! `wgpu::Buffer`s created inside OutOfMemory and Validation error scopes,
//! and the device's lost callback says when no segment may be made any more.

use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::{Backend, DeviceError, SegmentDesc};
use crate::error::Result;

/// The engine's [`Backend`] over a `wgpu::Device`.
pub struct WgpuBackend {
    device: wgpu::Device,
    max_buffer_size: u64,
    capacity: Option<u64>,
    /// Set by the device's lost callback (see [`WgpuBackend::new`]).
    pub(super) lost: Arc<LostState>,
    /// When set, segment creation does not wait for the error scopes; their
    /// futures are left here for [`Pool::alloc_async`](crate::Pool::alloc_async) to await.
    pub(super) deferred: Option<Vec<PendingCheck>>,
}

#[cfg(not(target_arch = "wasm32"))]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>> + Send>>;
#[cfg(target_arch = "wasm32")]
type ScopeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Option<wgpu::Error>>>>;

pub(super) struct PendingCheck {
    pub(super) oom: ScopeFuture,
    pub(super) validation: ScopeFuture,
}

pub(super) fn classify(
    oom: Option<wgpu::Error>,
    validation: Option<wgpu::Error>,
) -> Result<(), DeviceError> {
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
    /// [`Limit::Fraction`](crate::Limit::Fraction) (wgpu cannot query it).
    ///
    /// Drive an [`Engine`](crate::Engine) with it to replay a trace on a real device:
    /// `vrampool::replay(&mut Engine::new(WgpuBackend::new(&device, None), config)?, &trace, usage)`.
    ///
    /// It takes the device's lost callback (wgpu keeps one per device) to learn
    /// of a loss: register yours through [`Pool::on_device_lost`](crate::Pool::on_device_lost), not
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
pub(super) struct LostState {
    why: OnceLock<String>,
    pub(super) observers: Mutex<Vec<LostObserver>>,
}

type LostObserver = Box<dyn Fn(&str) + Send + Sync>;

impl LostState {
    /// Why the device was lost, once it was.
    pub(super) fn why(&self) -> Option<&str> {
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

    fn abandon_segment(&mut self, segment: wgpu::Buffer) {
        // Commands recorded but not submitted may still use it: dropping the
        // handle (not destroying the buffer) lets wgpu keep it for them and
        // free it after they ran. Natively an idle buffer is freed at once;
        // in the browser, when the page collects it.
        drop(segment);
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
