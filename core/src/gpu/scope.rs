//! [`Pool::scope`]: blocks that go back to the pool when the scope ends
//! (TensorFlow's `clear_session`), with the borrow checker keeping handles
//! inside it.

use std::sync::Mutex;

use crate::error::Result;

use super::desc::AllocDesc;
use super::handle::{BufferBlock, PoolBuffer};
use super::pool::Pool;

/// What a [`Pool::scope`] or [`Pool::scope_async`] allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeReport {
    /// Allocations made through the scope.
    pub allocations: u64,
    /// Bytes requested through the scope.
    pub bytes: u64,
    /// Whether the pool's allocated bytes were back to (or under) their level
    /// at the scope's start when it ended. The whole pool's: what other
    /// threads, or in [`Pool::scope_async`] other tasks running while the
    /// scope awaits, allocated or freed meanwhile counts too.
    pub returned: bool,
}

/// Allocates blocks that go back to the pool when the scope ends.
pub struct Scope<'p> {
    pub(super) pool: &'p Pool,
    pub(super) report: Mutex<ScopeReport>,
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

impl ScopedBuffer<'_> {
    /// [`PoolBuffer::used_in`]: keeps the block past the scope's end until
    /// `work` (an encoder, a pass on it, or the command buffer it finished
    /// into) is done, or dropped unsubmitted. For a scope whose temporaries
    /// feed an encoder submitted after it ends, or on another thread.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn used_in(&self, work: &impl super::handle::RecordsWork) {
        self.inner.used_in(work);
    }
}

impl Scope<'_> {
    /// Allocates a block for the scope's lifetime.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn alloc(&self, desc: AllocDesc<'_>) -> Result<ScopedBuffer<'_>> {
        let inner = self.pool.alloc(desc)?;
        Ok(self.scoped(inner, desc.size))
    }

    /// [`Scope::alloc`], awaiting the device's answer as
    /// [`Pool::alloc_async`] does: the way to allocate in a scope in the
    /// browser (see [`Pool::scope_async`]).
    pub async fn alloc_async(&self, desc: AllocDesc<'_>) -> Result<ScopedBuffer<'_>> {
        let inner = self.pool.alloc_async(desc).await?;
        Ok(self.scoped(inner, desc.size))
    }

    /// Counts a block allocated through the scope and ties it to it.
    fn scoped(&self, inner: PoolBuffer, size: u64) -> ScopedBuffer<'_> {
        let mut r = self.report.lock().unwrap_or_else(|e| e.into_inner());
        r.allocations += 1;
        r.bytes += size;
        ScopedBuffer {
            inner,
            _scope: std::marker::PhantomData,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        self.pool
    }
}
