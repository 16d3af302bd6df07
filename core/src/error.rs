//! Errors are values with messages a user can act on: what was asked, what was
//! available, and what to try.

use crate::fmt_bytes;

/// The state of the pool at the moment an allocation failed, carried by
/// [`Error::OutOfMemory`] so callers (and OOM observers) can act on it.
///
/// New fields may be added: code outside the crate that builds one (an
/// allocator of its own reporting in vrampool's terms) starts from
/// [`OomInfo::new`] and sets the fields it knows.
///
/// ```
/// let mut info = vrampool::OomInfo::new(4 << 20);
/// info.reserved = 64 << 20;
/// info.limit = Some(64 << 20);
/// let message = vrampool::Error::OutOfMemory(info).to_string();
/// assert!(message.starts_with("out of memory: tried to allocate 4.00 MiB"));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct OomInfo {
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Bytes handed out to live blocks (after rounding).
    pub allocated: u64,
    /// Bytes held in device segments.
    pub reserved: u64,
    /// Reserved bytes not handed out (free space inside segments).
    pub cached: u64,
    /// Bytes of blocks dropped while commands using them may not have been
    /// submitted yet: not reusable until the pool learns of a submit
    /// (`Pool::submit`); counted in `reserved`, not in `cached`.
    pub pending: u64,
    /// Bytes of segments being made for other requests (an `alloc_async`
    /// awaiting the device): counted against the limit, not yet in
    /// `reserved`.
    #[serde(default)]
    pub in_flight: u64,
    /// The hard limit in force, if any.
    pub limit: Option<u64>,
    /// `true` when the device itself refused the segment, `false` when the
    /// pool's own limit did.
    pub device_refused: bool,
}

impl OomInfo {
    /// An out-of-memory of a `requested`-byte request with every other
    /// figure zero, no limit and the refusal the pool's own: set the fields
    /// that apply.
    pub fn new(requested: u64) -> Self {
        Self {
            requested,
            ..Self::default()
        }
    }
}

/// Two blocks of one buffer that one pass or copy uses in ways WebGPU does
/// not allow together (see `Pool::check_usage_scope`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage conflict: {first} and {second} are ranges of one buffer ({segment}), and one {scope} may not use a buffer {how}. {fix}"
)]
pub struct UsageConflict {
    /// The first block: its label and use.
    pub first: String,
    /// The second block: its label and use.
    pub second: String,
    /// The buffer's label.
    pub segment: String,
    /// "pass" or "copy".
    pub scope: &'static str,
    /// How the uses conflict.
    pub how: String,
    /// What to change.
    pub fix: String,
}

/// Everything that can go wrong in vrampool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request could not be served: the device refused it even after
    /// the cache was released, or the limit refused it because not even the
    /// whole cache, released, would make room (the cache is then kept).
    #[error(
        "out of memory: tried to allocate {req}; {alloc} allocated, {res} reserved ({cached} cached, {kept}{pending}), limit {limit}{flight}{who}. \
         Drop live buffers you no longer need, {advice}",
        req = fmt_bytes(.0.requested),
        alloc = fmt_bytes(.0.allocated),
        res = fmt_bytes(.0.reserved),
        cached = fmt_bytes(.0.cached),
        pending = if .0.pending == 0 { String::new() } else {
            format!("; {} pending: dropped, but not reusable until the pool learns their commands were submitted (Pool::submit)", fmt_bytes(.0.pending))
        },
        limit = .0.limit.map(fmt_bytes).unwrap_or_else(|| "none".into()),
        who = if .0.device_refused { "; the device refused the segment" } else { "" },
        flight = if .0.in_flight == 0 { String::new() } else {
            format!(
                "; {} being made for other requests{}",
                fmt_bytes(.0.in_flight),
                if .0.limit.is_some() { ", counted against the limit" } else { "" }
            )
        },
        kept = if .0.device_refused { "not releasable" } else { "kept: releasing it would not make room" },
        advice = if .0.device_refused {
            "call empty_cache() (here, and in other pools on the same device), or use smaller batches: \
             the device itself has no room, so a higher limit would not help"
        } else {
            "raise the limit, or use smaller batches"
        }
    )]
    OutOfMemory(OomInfo),

    /// A single request (rounded up to the alignment) is larger than the
    /// largest segment the pool may create: the device's `max_buffer_size`,
    /// or [`Config::max_segment_size`](crate::Config::max_segment_size)
    /// where that is lower.
    #[error(
        "cannot allocate {req}: larger than the largest segment this pool may create, {max} \
         (the device's max_buffer_size, or Config::max_segment_size where that is lower). \
         Split the tensor, raise max_segment_size, or request a device with a higher max_buffer_size limit",
        req = fmt_bytes(*.requested),
        max = fmt_bytes(*.max_buffer_size)
    )]
    TooLarge {
        /// Bytes asked for (through `Pool`, rounded up to 4
        /// bytes, as every block's range is).
        requested: u64,
        /// The largest single buffer the device allows.
        max_buffer_size: u64,
    },

    /// Zero-byte requests are refused (wgpu cannot bind an empty range).
    #[error("cannot allocate 0 bytes: request at least 1 byte")]
    ZeroSize,

    /// A block handle that the pool does not know (already freed, or from another pool).
    #[error("unknown block {0}: it was already freed, or belongs to another pool")]
    UnknownBlock(String),

    /// The usage flags cannot be served by one buffer.
    #[error("invalid usage {usage:#x}: {why}")]
    InvalidUsage {
        /// The raw usage bits.
        usage: u32,
        /// Why they were refused.
        why: String,
    },

    /// The configuration makes no sense (e.g. a fraction limit without a capacity).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A call's arguments cannot be used as given: a copy that runs past a
    /// block or is not aligned, a bind group entry that is no binding or is
    /// larger than the device binds, a `SegmentPlan` handed to an engine
    /// that did not make it. The message names the argument.
    #[error("{0}")]
    InvalidArgument(String),

    /// Blocks used together in one pass (or one copy) are ranges of one
    /// buffer used in ways WebGPU does not allow within one usage scope.
    #[error("{0}")]
    UsageConflict(Box<UsageConflict>),

    /// The device was lost or destroyed; the pool can no longer create buffers.
    #[error("device lost: {0}. Create a new device and a new pool")]
    DeviceLost(String),

    /// An allocation made from a wgpu callback (`map_async`'s,
    /// `on_submitted_work_done`'s) that wgpu ran inside a submit or poll the
    /// pool made with its lock held: waiting would wait for this thread.
    /// (One the thread's front cache can serve is served.) Also an
    /// asynchronous allocation made from a callback under any pool's lock
    /// while another allocation of the same pool awaits the device: that one
    /// may be another thread's, waiting for the lock this thread holds.
    /// Dropping handles, `Pool::submit` and `Pool::submitted` there are fine:
    /// the pool does them as it finishes.
    #[error(
        "{0} was called from a wgpu callback that ran inside a pool's own submit or poll, \
         while the pool it calls was in the middle of an operation: allocate after the callback \
         returns (dropping handles in a callback is fine)"
    )]
    Reentrant(&'static str),

    /// The device reported an error other than out-of-memory.
    #[error("device error: {0}")]
    Device(String),

    /// A trace could not be read.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A recording that cannot be planned is the caller's argument (the log
/// handed to `Pool::plan_recording`), not the pool's configuration.
impl From<crate::trace::RecordedPlanError> for Error {
    fn from(e: crate::trace::RecordedPlanError) -> Self {
        match e {
            crate::trace::RecordedPlanError::Trace(t) => Error::Trace(t),
            other => Error::InvalidArgument(format!("cannot plan the recording: {other}")),
        }
    }
}
