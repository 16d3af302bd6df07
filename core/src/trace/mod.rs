//! Allocation traces in RAPIDS RMM's CSV log format
//! (`Thread,Time,Action,Pointer,Size,Stream`), as wgpu keeps trace/record and
//! trace/replay apart:
//! - `format.rs` — reading (plain or gzip, streamed, validated: [`Trace`]);
//! - `record.rs` — writing ([`Recorder`], what `Engine::start_recording` keeps);
//! - `replay.rs` — the one replay loop ([`Replayer`]) and [`replay`] over an engine;
//! - `budget.rs` — the smallest budget with no OOM, bisected over replays
//!   ([`smallest_budget`], or stepped by the caller: [`BudgetSearch`]);
//! - `cost.rs` — what a replay's device churn would cost ([`DeviceCost`]);
//! - `targets.rs` — the standing targets a replay is held to against a
//!   baseline's ([`Targets`]);
//! - `foresight.rs` — what the trace would need if every lifetime were known
//!   in advance: a static plan ([`Foresight`]), the yardstick for a policy;
//! - `expandable.rs` — what it would need with virtual memory: PyTorch's
//!   allocator with `expandable_segments` ([`Expandable`]), the highest bar
//!   a pool without virtual memory is held to.

mod budget;
mod cost;
mod expandable;
mod foresight;
mod format;
mod record;
mod replay;
mod targets;

pub use budget::{BudgetSearch, smallest_budget};
pub use cost::DeviceCost;
pub use expandable::{Expandable, ExpandableBlock, ExpandableStats};
pub use foresight::{Foresight, ForesightError, PlannedBlock, RecordedPlan, RecordedPlanError};
pub use format::{Action, HEADER, MAX_LINE, Trace, TraceError, TraceEvent};
pub use record::{PoolKey, Recorder};
pub use replay::{
    EngineTarget, ReplayCounts, ReplayReport, ReplayTarget, Replayer, Step, SubmitClock, replay,
    replay_relocatable, replay_submitting,
};
pub use targets::{Missed, RowFigures, Targets};

/// Maps keyed by a trace's pointers: foldhash rather than SipHash, a tenth of a
/// replay's time less. Natively each map is seeded from the process's random
/// state, as std's are; on wasm32 foldhash seeds from addresses alone, as
/// weak as std's keys are there (foldhash claims only minimal DoS resistance).
pub(crate) type PointerMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
