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
//! - [`Pool::submit`](crate::Pool::submit) there goes to the queue at once,
//!   and what it and [`Pool::submitted`](crate::Pool::submitted) teach the
//!   pool (reclaims, unpinning) is done as the lock is released; neither
//!   waits for the submit lock of a thread that may be waiting for this one,
//!   and a submit from a callback of the pool's own submit goes straight to
//!   the queue (the blocks dropped since wait for the next submit);
//! - an allocation there is refused with
//!   [`Error::Reentrant`](crate::Error::Reentrant), but for one the
//!   thread's front cache serves (it takes no engine lock);
//! - device-lost observers run once no pool's lock is held on the thread;
//! - anything else that needs the engine there (`stats()`, `empty_cache()`,
//!   ...) panics with a message saying so, instead of waiting forever.
//!
//! A callback run under one pool's lock may call *another* pool, and then
//! waits for that pool's lock like any caller. That wait could never end if
//! the other pool's holder waits, directly or through other threads, for a
//! lock this thread holds (two threads, each in a callback of its own pool's
//! work, each reading the other pool's `stats()`): such waits are
//! registered ([`Waits`]), and the first thread of a cycle of them to find
//! it panics with a message saying so instead; the others then go on.
//!
//! A callback that panics there (that way, or for its own reasons) does not
//! unwind through the engine's half-done operation: [`shielded`] keeps the
//! panic and the pool raises it again once the operation is whole and the
//! thread holds no pool's lock (a block it was allocating is handed back as
//! the unwinding drops its handle). wgpu drops the callbacks of the same
//! batch that had not run yet.
//!
//! Architecture invariant: nothing here knows the engine's rules; it only
//! delays what a callback asked for until the engine is free.

use std::any::Any;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::ThreadId;
use std::time::Duration;

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
    /// The first panic of a callback that [`shielded`] caught, to raise once
    /// no pool's lock is held.
    static CAUGHT: RefCell<Option<Box<dyn Any + Send>>> = const { RefCell::new(None) };
}

/// A thread that holds pools' engine locks and waits for another pool's.
struct Waiter {
    thread: ThreadId,
    /// The pool whose lock it waits for.
    wants: usize,
    /// The pools whose locks it holds (fixed while it waits).
    holds: Vec<usize>,
}

/// Every thread waiting for a pool's lock while it holds another's. Only
/// such waits can form a cycle (each thread of one holds a lock and waits
/// for the next thread's), and a registered thread is in its wait loop
/// until it deregisters, so a cycle found here is a wait that never ends.
/// The first thread of a cycle to find it (under this mutex) leaves it, so
/// the others then find none and go on.
struct Waits {
    waiters: Vec<Waiter>,
}

static WAITS: Mutex<Waits> = Mutex::new(Waits {
    waiters: Vec::new(),
});

fn waits() -> MutexGuard<'static, Waits> {
    WAITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// This thread's entry in [`Waits`] while it lives: taken out on every way
/// out of the wait, a panic's included.
struct Registered(ThreadId);

impl Registered {
    fn new(waits: &mut Waits, wants: usize) -> Self {
        let thread = std::thread::current().id();
        let holds = HELD.try_with(|h| h.borrow().clone()).unwrap_or_default();
        waits.waiters.push(Waiter {
            thread,
            wants,
            holds,
        });
        Registered(thread)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        waits().waiters.retain(|w| w.thread != self.0);
    }
}

impl Waits {
    /// Whether `me`'s wait is part of a cycle of waits: each thread of it
    /// waits for a lock the next one holds.
    fn in_a_cycle(&self, me: ThreadId) -> bool {
        let Some(start) = self.waiters.iter().find(|w| w.thread == me) else {
            return false;
        };
        let mut wants = start.wants;
        // A cycle has at most one thread per waiter.
        for _ in 0..self.waiters.len() {
            // At most one thread holds a pool's lock; if it is not waiting
            // itself, it will release the lock.
            let Some(holder) = self.waiters.iter().find(|w| w.holds.contains(&wants)) else {
                return false;
            };
            if holder.thread == me {
                return true;
            }
            wants = holder.wants;
        }
        false
    }
}

/// Runs `f`, a wgpu call that may run user callbacks (a submit, a poll, a
/// destroy), so that a callback's panic does not unwind through the pool's
/// operation while this thread holds a pool's lock: it is kept and raised
/// again as the last lock is released ([`EngineGuard`]'s drop).
pub(super) fn shielded(f: impl FnOnce()) {
    if !held_anywhere() {
        f();
        return;
    }
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        let kept = CAUGHT.try_with(|c| {
            let mut c = c.borrow_mut();
            if c.is_none() {
                *c = Some(payload);
            }
        });
        if kept.is_err() {
            tracing::error!("vrampool: a wgpu callback panicked while the thread was ending");
        }
    }
}

/// What a panic says, for a log line.
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

/// Raises `payload` (a panic kept while a pool's lock was held), unless the
/// thread is unwinding already: a second panic would abort.
fn raise(payload: Box<dyn Any + Send>) {
    if std::thread::panicking() {
        tracing::error!(
            "vrampool: a wgpu callback or observer panicked while the thread was unwinding: {}",
            message(&*payload)
        );
        return;
    }
    std::panic::resume_unwind(payload);
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

/// Whether this thread is inside any pool's [`Pool::submit`](crate::Pool::submit).
pub(super) fn submitting_anywhere() -> bool {
    SUBMITTING
        .try_with(|s| !s.borrow().is_empty())
        .unwrap_or(false)
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
    if let Some(payload) = state.notify() {
        raise(payload);
    }
}

/// What waits for the engine's lock when taking it could wait forever.
pub(super) enum DeferredFree {
    /// A block's last handle went: back to the engine, stamped at its drop;
    /// with `retire`, never to serve again ([`Engine::retire`]: a staging
    /// buffer wgpu could not unmap).
    Block {
        id: BlockId,
        stamp: u64,
        retire: bool,
    },
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
        // Orders the unlock before the queue's flag is read, against a
        // deferring thread's flag store before its try-lock (`kick`).
        std::sync::atomic::fence(Ordering::SeqCst);
        self.inner.after_unlock();
        if held_anywhere() {
            // Observers and kept panics wait for the last lock's release.
            return;
        }
        if std::thread::panicking() {
            // No observer on this thread now (its panic would abort), and
            // this thread may be ending: a loss it learned runs its
            // observers on a thread of their own, or never would (wgpu tells
            // a loss once).
            let due = LOST_DUE
                .try_with(|d| std::mem::take(&mut *d.borrow_mut()))
                .unwrap_or_default();
            if !due.is_empty() {
                super::backend::notify_elsewhere(due);
            }
            // A kept panic is logged, not left for an unrelated call to raise.
            if let Ok(Some(payload)) = CAUGHT.try_with(|c| c.borrow_mut().take()) {
                raise(payload);
            }
            return;
        }
        // The kept panic first, so an observer that calls the pool does not
        // meet it; then every due loss's observers; then the first panic.
        let mut first = CAUGHT.try_with(|c| c.borrow_mut().take()).ok().flatten();
        let due = LOST_DUE
            .try_with(|d| std::mem::take(&mut *d.borrow_mut()))
            .unwrap_or_default();
        for state in due {
            if let Some(payload) = state.notify() {
                first.get_or_insert(payload);
            }
        }
        if let Some(payload) = first {
            raise(payload);
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
        if held_anywhere() {
            return self.engine_beside_another();
        }
        // A panic while the lock was held cannot leave the engine half-updated in
        // a way that matters more than losing the pool, so recover the guard.
        EngineGuard::new(self, self.engine_lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The engine's lock for a thread that holds another pool's (a wgpu
    /// callback of that pool's work calling this one): waited for with the
    /// wait registered, and given up with a panic if it closes a cycle of
    /// waits (see the module's docs).
    fn engine_beside_another(&self) -> EngineGuard<'_> {
        let mut registered: Option<Registered> = None;
        let mut tries = 0u32;
        loop {
            if let Some(engine) = self.engine_if_free() {
                drop(registered);
                return engine;
            }
            let mut w = waits();
            match &registered {
                None => registered = Some(Registered::new(&mut w, key(self))),
                Some(me) if w.in_a_cycle(me.0) => {
                    // Out of the registry before its lock is let go, so no
                    // other thread of the cycle finds it too.
                    let me = me.0;
                    w.waiters.retain(|x| x.thread != me);
                    drop(w);
                    panic!(
                        "vrampool: a wgpu callback that runs inside another pool's work on this thread \
                         called this pool, whose lock is held by a thread that waits (directly or \
                         through others) for a pool lock this thread holds: each would wait for the \
                         other forever. Make the call after the callback returns (set a flag or send \
                         a message from the callback)"
                    );
                }
                Some(_) => {}
            }
            drop(w);
            tries += 1;
            if tries < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// The engine's lock if no other thread holds it now (a poisoned one
    /// recovered, as [`Inner::engine`] does).
    fn engine_if_free(&self) -> Option<EngineGuard<'_>> {
        match self.engine_try_lock() {
            Ok(guard) => Some(EngineGuard::new(self, guard)),
            Err(TryLockError::Poisoned(e)) => Some(EngineGuard::new(self, e.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The engine's lock, unless waiting for it could wait forever: this
    /// thread holds it (a callback of the pool's own work), or holds another
    /// pool's and this one is busy (its holder may be waiting for that one).
    pub(super) fn engine_if_safe(&self) -> Option<EngineGuard<'_>> {
        if held_here(self) {
            return None;
        }
        if held_anywhere() {
            return self.engine_if_free();
        }
        Some(self.engine())
    }

    /// Does what waits in the queue if the lock is free now: a holder that
    /// released it before seeing the queue left it there.
    fn kick(&self) {
        if held_here(self) {
            return;
        }
        // Orders the queue's flag store before the try-lock, against the
        // holder's unlock before it reads the flag (`EngineGuard`'s drop).
        std::sync::atomic::fence(Ordering::SeqCst);
        // Released at once: the guard's drop does what waits.
        drop(self.engine_if_free());
    }

    /// Gives back a block whose last handle was dropped, or cancels a plan:
    /// now, or, where waiting for the engine's lock could wait forever, as
    /// it is released.
    pub(super) fn free_from_drop(&self, free: DeferredFree) {
        match self.engine_if_safe() {
            Some(mut engine) => self.free_now(&mut engine, free),
            None => {
                self.defer_free(free);
                self.kick();
            }
        }
    }

    fn free_now(&self, engine: &mut Engine<WgpuBackend>, free: DeferredFree) {
        let mark = self.front.cache.reusable_mark();
        match free {
            DeferredFree::Block {
                id, retire: true, ..
            } => {
                // Its segment is its own and no later owner gets it, so no
                // submit needs to cover the drop.
                let _ = engine.retire(id);
            }
            DeferredFree::Block { id, stamp, .. } => self.release(engine, id, stamp, mark),
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

    /// What a submit the pool learned of changes (deferred blocks
    /// reclaimed, movable blocks unpinned): now, or, where waiting for the
    /// engine's lock could wait forever, as it is released.
    pub(super) fn learned_of_submit(&self) {
        match self.engine_if_safe() {
            Some(mut engine) => self.learned_of_submit_locked(&mut engine),
            None => {
                self.submit_news.store(true, Ordering::SeqCst);
                self.reentrant_due.store(true, Ordering::SeqCst);
                self.kick();
            }
        }
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
        let Some(mut engine) = self.engine_if_safe() else {
            // Another thread holds it now: back in the queue for its release.
            self.reentrant_frees
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(frees);
            if news {
                self.submit_news.store(true, Ordering::SeqCst);
            }
            self.reentrant_due.store(true, Ordering::SeqCst);
            // Its holder may have read the flag before it was set again.
            self.kick();
            return;
        };
        for free in frees {
            self.free_now(&mut engine, free);
        }
        if news {
            self.learned_of_submit_locked(&mut engine);
        }
    }
}
