//! The engine's lock, which knows the thread holding it.
//!
//! wgpu runs user callbacks from inside the calls that the pool makes: a
//! `queue.submit` (the moves' batch, a movable block's zeroing,
//! [`Pool::submit`](crate::Pool::submit)'s own) and a `device.poll` (before a
//! segment is made, after segments are released) fire every `map_async` and
//! `on_submitted_work_done` callback that is due, a poll on a lost device runs
//! its lost callback, and destroying a segment fires its pending map
//! callbacks. Several of those calls are made with the engine's lock held.
//! A callback there that waited for the lock would wait for its own thread,
//! so:
//! - a handle dropped there is freed as the lock is released ([`EngineGuard`]'s
//!   drop); one dropped under *another* pool's lock is freed at once if this
//!   pool's lock is free, else queued the same way (two threads each under
//!   one pool's lock, each dropping a handle of the other, would wait for
//!   each other);
//! - [`Pool::submit`](crate::Pool::submit) and
//!   [`Pool::submitted`](crate::Pool::submitted) there take effect as the
//!   lock is released, and a submit from a callback of the pool's own submit
//!   goes straight to the queue;
//! - an allocation there is refused with
//!   [`Error::Reentrant`](crate::Error::Reentrant);
//! - device-lost observers run once no pool's lock is held on the thread;
//! - anything else that needs the engine there (`stats()`, `empty_cache()`,
//!   ...) panics with a message saying so, instead of waiting forever.
//!
//! Architecture invariant: nothing here knows the engine's rules; it only
//! delays what a callback asked for until the engine is free.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, TryLockError};

use crate::engine::Engine;
use crate::types::BlockId;

use super::backend::{LostState, WgpuBackend};
use super::pool::Inner;

thread_local! {
    /// The pools whose engine lock this thread holds, innermost last (a
    /// callback run under one pool's lock may lock another pool).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The pools inside whose [`Pool::submit`](crate::Pool::submit) this
    /// thread is.
    static SUBMITTING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// Device losses learned while a pool's lock was held: their observers
    /// run once none is.
    static LOST_DUE: RefCell<Vec<Arc<LostState>>> = const { RefCell::new(Vec::new()) };
}

fn key(inner: &Inner) -> usize {
    std::ptr::from_ref(inner) as usize
}

/// Whether `list` holds `k`; false once the thread's locals are gone (a
/// pool dropped by another thread-local's destructor).
fn listed(list: &'static std::thread::LocalKey<RefCell<Vec<usize>>>, k: usize) -> bool {
    list.try_with(|l| l.borrow().contains(&k)).unwrap_or(false)
}

fn push(list: &'static std::thread::LocalKey<RefCell<Vec<usize>>>, k: usize) {
    let _ = list.try_with(|l| l.borrow_mut().push(k));
}

fn remove(list: &'static std::thread::LocalKey<RefCell<Vec<usize>>>, k: usize) {
    let _ = list.try_with(|l| {
        let mut l = l.borrow_mut();
        if let Some(i) = l.iter().rposition(|&x| x == k) {
            l.remove(i);
        }
    });
}

/// Whether this thread holds `inner`'s engine lock: a call from a wgpu
/// callback that the pool's own work ran.
pub(super) fn held_here(inner: &Inner) -> bool {
    listed(&HELD, key(inner))
}

/// Whether this thread holds any pool's engine lock.
pub(super) fn held_anywhere() -> bool {
    HELD.try_with(|h| !h.borrow().is_empty()).unwrap_or(false)
}

/// Whether this thread is inside `inner`'s [`Pool::submit`](crate::Pool::submit).
pub(super) fn submitting_here(inner: &Inner) -> bool {
    listed(&SUBMITTING, key(inner))
}

/// Marks this thread as inside `inner`'s submit while it lives.
pub(super) struct SubmitMark(usize);

impl SubmitMark {
    pub(super) fn new(inner: &Inner) -> Self {
        let k = key(inner);
        push(&SUBMITTING, k);
        SubmitMark(k)
    }
}

impl Drop for SubmitMark {
    fn drop(&mut self) {
        remove(&SUBMITTING, self.0);
    }
}

/// Calls `state`'s observers now, or, while this thread holds a pool's
/// lock, once it holds none.
pub(super) fn notify_lost(state: &Arc<LostState>) {
    if held_anywhere() {
        let queued = LOST_DUE.try_with(|d| d.borrow_mut().push(Arc::clone(state)));
        if queued.is_ok() {
            return;
        }
    }
    state.notify();
}

/// A free that came while the lock was held on its own thread.
pub(super) enum DeferredFree {
    /// A block's last handle went: back to the engine, stamped at its drop.
    Block { id: BlockId, stamp: u64 },
    /// A movable block's last handle went: out of the table too.
    Movable { id: BlockId, stamp: u64 },
}

/// The engine's lock guard: on release, the frees and submits that waited
/// for it are done, and device-lost observers called once no pool's lock
/// is held.
pub(super) struct EngineGuard<'a> {
    inner: &'a Inner,
    guard: Option<MutexGuard<'a, Engine<WgpuBackend>>>,
}

impl<'a> EngineGuard<'a> {
    pub(super) fn new(inner: &'a Inner, guard: MutexGuard<'a, Engine<WgpuBackend>>) -> Self {
        push(&HELD, key(inner));
        EngineGuard {
            inner,
            guard: Some(guard),
        }
    }

    fn engine(&self) -> &Engine<WgpuBackend> {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("an EngineGuard holds its lock until it is dropped"),
        }
    }

    fn engine_mut(&mut self) -> &mut Engine<WgpuBackend> {
        match &mut self.guard {
            Some(guard) => guard,
            None => unreachable!("an EngineGuard holds its lock until it is dropped"),
        }
    }
}

impl Deref for EngineGuard<'_> {
    type Target = Engine<WgpuBackend>;
    fn deref(&self) -> &Engine<WgpuBackend> {
        self.engine()
    }
}

impl DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine<WgpuBackend> {
        self.engine_mut()
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        remove(&HELD, key(self.inner));
        drop(self.guard.take());
        self.inner.after_unlock();
        if !held_anywhere() {
            let due = LOST_DUE
                .try_with(|d| std::mem::take(&mut *d.borrow_mut()))
                .unwrap_or_default();
            for state in due {
                state.notify();
            }
        }
    }
}

impl Inner {
    /// The engine's lock. Called from a wgpu callback that this pool's own
    /// work runs with the lock held on this thread, it panics: waiting would
    /// wait forever (drops, submits and allocations never get here).
    pub(super) fn engine(&self) -> EngineGuard<'_> {
        if held_here(self) {
            panic!(
                "vrampool: the pool was called from a wgpu callback (map_async, on_submitted_work_done, an \
                 uncaptured-error handler) that wgpu ran inside this pool's own work on this thread, while it \
                 holds the pool's lock: only dropping handles, Pool::submit and Pool::submitted are served \
                 there, and allocations fail with Error::Reentrant. Make the call after the callback returns \
                 (set a flag or send a message from the callback)"
            );
        }
        // A panic while the lock was held cannot leave the engine half-updated in
        // a way that matters more than losing the pool, so recover the guard.
        EngineGuard::new(self, self.engine_lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Gives back a block whose last handle was dropped: now, or, where
    /// waiting for the engine's lock could wait forever, as it is released.
    pub(super) fn free_from_drop(&self, free: DeferredFree) {
        if held_here(self) {
            // From a wgpu callback this pool's own work ran on this thread.
            self.defer_free(free);
            return;
        }
        if held_anywhere() {
            // Under another pool's lock: the thread holding this one may be
            // waiting for that one.
            match self.engine_try_lock() {
                Ok(guard) => self.free_now(&mut EngineGuard::new(self, guard), free),
                Err(TryLockError::Poisoned(e)) => {
                    self.free_now(&mut EngineGuard::new(self, e.into_inner()), free)
                }
                Err(TryLockError::WouldBlock) => {
                    self.defer_free(free);
                    // Its holder frees it as it releases the lock; if it
                    // released it before seeing the queue, this does.
                    if let Ok(guard) = self.engine_try_lock() {
                        drop(EngineGuard::new(self, guard));
                    }
                }
            }
            return;
        }
        self.free_now(&mut self.engine(), free);
    }

    fn free_now(&self, engine: &mut Engine<WgpuBackend>, free: DeferredFree) {
        let mark = self.front.cache.reusable_mark();
        match free {
            DeferredFree::Block { id, stamp } => self.release(engine, id, stamp, mark),
            DeferredFree::Movable { id, stamp } => {
                self.forget_movable(id);
                self.release(engine, id, stamp, mark)
            }
        }
    }

    /// Queues a free made while this thread holds the lock.
    fn defer_free(&self, free: DeferredFree) {
        self.reentrant_frees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(free);
        self.reentrant_due.store(true, Ordering::SeqCst);
    }

    /// Notes a submit learned of while this thread holds the lock: its
    /// reclaim and unpinning are done as the lock is released.
    pub(super) fn defer_submit_news(&self) {
        self.submit_news.store(true, Ordering::SeqCst);
        self.reentrant_due.store(true, Ordering::SeqCst);
    }

    /// What waited for the lock: queued frees and submit news, under the
    /// lock again (the guard's release runs whatever they queued in turn).
    fn after_unlock(&self) {
        if !self.reentrant_due.load(Ordering::SeqCst) {
            return;
        }
        // Cleared before the queue is taken: a free queued after the take
        // sets it again.
        self.reentrant_due.store(false, Ordering::SeqCst);
        let frees = std::mem::take(
            &mut *self
                .reentrant_frees
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let news = self.submit_news.swap(false, Ordering::SeqCst);
        if frees.is_empty() && !news {
            return;
        }
        let mut engine = self.engine();
        for free in frees {
            self.free_now(&mut engine, free);
        }
        if news {
            self.learned_of_submit_locked(&mut engine);
        }
    }
}
