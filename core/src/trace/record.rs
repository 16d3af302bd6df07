//! Writing allocate / free events as RMM CSV log lines (what
//! `Engine::start_recording` keeps).

use serde::{Deserialize, Serialize};

use super::format::HEADER;

/// The engine pool a request went to — its usage bits, group and
/// exclusivity: requests of different pools never share a segment — as an
/// engine's recording writes it in the `Stream` column (where PyTorch's logs
/// name the CUDA stream, whose blocks its allocator keeps apart in the same
/// way). Requests made as a trace replay makes them (usage 0, group 0,
/// shared) are stream `0x0`, RMM's default stream.
///
/// ```
/// use vrampool::trace::PoolKey;
/// let key = PoolKey { usage: 0x80, group: 2, exclusive: false };
/// assert_eq!(key.stream(), 0x2_0000_0080);
/// assert_eq!(PoolKey::from_stream(key.stream()), Some(key));
/// assert_eq!(PoolKey::from_stream(1 << 48), None); // not a key an engine writes
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PoolKey {
    /// The requests' usage bits.
    pub usage: u32,
    /// Their group (see [`Request::group`](crate::Request::group)).
    pub group: u8,
    /// Whether each block had a segment of its own.
    pub exclusive: bool,
}

impl PoolKey {
    /// The `Stream` value: usage in bits 0–31, group in 32–39, exclusive in 40.
    pub fn stream(self) -> u64 {
        u64::from(self.usage) | u64::from(self.group) << 32 | u64::from(self.exclusive) << 40
    }

    /// The key a `Stream` value stands for, if it is one [`PoolKey::stream`] makes.
    pub fn from_stream(stream: u64) -> Option<PoolKey> {
        (stream >> 41 == 0).then_some(PoolKey {
            usage: stream as u32,
            group: (stream >> 32) as u8,
            exclusive: stream >> 40 == 1,
        })
    }
}

/// Writes allocate/free events as RMM CSV log lines.
#[derive(Debug, Clone)]
pub struct Recorder {
    out: String,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty log with its header.
    pub fn new() -> Self {
        let mut out = String::with_capacity(4096);
        out.push_str(HEADER);
        out.push('\n');
        Recorder { out }
    }

    /// Appends one event of `stream` (for an engine, its pool's
    /// [`PoolKey::stream`]).
    pub fn record(&mut self, allocate: bool, pointer: u64, size: u64, stream: u64) {
        use std::fmt::Write;
        let t = web_time::SystemTime::now()
            .duration_since(web_time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let _ = writeln!(
            self.out,
            "0,{t:.6},{},{pointer:#x},{size},{stream:#x}",
            if allocate { "allocate" } else { "free" }
        );
    }

    /// The log text.
    pub fn finish(self) -> String {
        self.out
    }
}
