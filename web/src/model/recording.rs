//! The page's own recording: every allocate and free its pools made, kept as
//! one RMM CSV that `Trace` reads back (and the harness replays). Each pool
//! records its own log (core's `Recorder`, `Engine::start_recording`); a new
//! pool (new settings, a replay, a new device) starts at the same addresses
//! as the last, and a block of the old one may still be live, so each
//! pool's pointers are moved into a range of their own.

use vrampool::trace::HEADER;

/// Events kept at most (about 50 MB of CSV); recording stops there.
pub const MAX_RECORDED: u64 = 1_000_000;

/// Each pool's pointers are moved up by its number times this (16 TiB, far
/// more than one pool's addresses span).
const POOL_STRIDE: u64 = 1 << 44;

/// The recording so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    csv: String,
    events: u64,
    pool: u64,
    full: bool,
}

impl Default for Recording {
    fn default() -> Self {
        Self::new()
    }
}

impl Recording {
    /// An empty recording (its header only).
    pub fn new() -> Recording {
        let mut csv = String::from(HEADER);
        csv.push('\n');
        Recording {
            csv,
            events: 0,
            pool: 0,
            full: false,
        }
    }

    /// Adds what the current pool recorded since it was last asked (its
    /// log, header first). Returns whether there is room for more; once
    /// full, nothing more is added.
    pub fn add(&mut self, log: &str) -> bool {
        use std::fmt::Write;
        let shift = self.pool * POOL_STRIDE;
        for line in log.lines().skip(1).filter(|l| !l.is_empty()) {
            if self.events >= MAX_RECORDED {
                self.full = true;
                break;
            }
            // `thread,time,action,pointer,size,stream`: only the pointer moves.
            let mut commas = line.match_indices(',').map(|(i, _)| i);
            let (Some(_), Some(_), Some(a), Some(b)) =
                (commas.next(), commas.next(), commas.next(), commas.next())
            else {
                continue;
            };
            let pointer = &line[a + 1..b];
            let Ok(p) = u64::from_str_radix(pointer.trim_start_matches("0x"), 16) else {
                continue;
            };
            let _ = writeln!(self.csv, "{}{:#x}{}", &line[..=a], p + shift, &line[b..]);
            self.events += 1;
        }
        !self.full
    }

    /// The next logs come from a new pool.
    pub fn next_pool(&mut self) {
        self.pool += 1;
    }

    /// Events recorded.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Whether it stopped at [`MAX_RECORDED`].
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// The RMM CSV.
    pub fn csv(&self) -> &str {
        &self.csv
    }
}

#[cfg(test)]
mod tests {
    use vrampool::{Config, Engine, Request, SimulatedDevice, Trace};

    use super::*;

    #[test]
    fn logs_of_two_pools_read_back_as_one_trace() {
        let mut rec = Recording::new();
        let mut held = Vec::new();
        for pool in 0..2 {
            let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default()).unwrap();
            e.start_recording();
            let a = e.allocate(Request::new(1000, 0)).unwrap();
            let b = e.allocate(Request::new(5000, 0)).unwrap();
            e.free(a.id).unwrap();
            // Asked in the middle: the log goes on where it stopped, and
            // `b`'s free, made in the next log, is logged there.
            assert!(rec.add(&e.drain_recording().unwrap()));
            let c = e.allocate(Request::new(3000, 0)).unwrap();
            e.free(c.id).unwrap();
            e.free(b.id).unwrap();
            let b = e.allocate(Request::new(5000, 0)).unwrap();
            // `b` stays live as the next pool starts at the same addresses.
            assert!(rec.add(&e.take_recording().unwrap()));
            held.push((e, b));
            rec.next_pool();
            assert_eq!(rec.events(), 7 * (pool + 1));
        }
        let t = Trace::parse("page", rec.csv().as_bytes()).unwrap();
        assert_eq!(t.events.len() as u64, rec.events());
        assert_eq!(t.peak_live, 5000 * 2 + 3000);
        assert_eq!(t.largest, 5000);
    }

    #[test]
    fn it_stops_when_full() {
        let mut rec = Recording::new();
        let line = "0,1.0,allocate,0x10,256,0x0\n0,1.0,free,0x10,256,0x0\n";
        let log = format!("{HEADER}\n{}", line.repeat(1000));
        while rec.add(&log) {}
        assert!(rec.is_full());
        assert_eq!(rec.events(), MAX_RECORDED);
        assert!(!rec.add(&log));
        assert_eq!(rec.events(), MAX_RECORDED);
    }
}
