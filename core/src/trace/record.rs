//! Writing allocate / free events as RMM CSV log lines (what
//! `Engine::start_recording` keeps).

use super::format::HEADER;

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

    /// Appends one event.
    pub fn record(&mut self, allocate: bool, pointer: u64, size: u64) {
        use std::fmt::Write;
        let t = web_time::SystemTime::now()
            .duration_since(web_time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let _ = writeln!(
            self.out,
            "0,{t:.6},{},{pointer:#x},{size},0x0",
            if allocate { "allocate" } else { "free" }
        );
    }

    /// The log text.
    pub fn finish(self) -> String {
        self.out
    }
}
