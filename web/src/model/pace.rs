//! Pacing a replay to a speed in events a second on the page's clock, from
//! a tick that takes each tick's events at once.

/// When the events of a replay are due: event `i` at `i / speed` seconds
/// after the first tick. Each tick takes the events due before it *ends*,
/// so a replay keeps to its speed whatever the tick's length (taking the
/// events due at its start, a replay ended up to a tick late: 9.4–9.8 k
/// of 10 k ops/s requested on a 0.7 s sample with 50 ms ticks).
///
/// ```
/// # use vrampool_web::model::Pace;
/// let mut pace = Pace::new(10_000.0);
/// assert_eq!(pace.due(0.0, 0.05, 0, 5000), 500); // events 0..500 are due in the first 50 ms
/// assert_eq!(pace.due(0.05, 0.05, 500, 5000), 500);
/// assert_eq!(pace.due(0.2, 0.05, 1000, 5000), 1500); // a late tick catches up
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Events a second (at least 1).
    speed: f64,
    /// The first tick's start (the page's clock, seconds).
    started: Option<f64>,
}

impl Pace {
    /// Paces to `speed` events a second (at least 1).
    pub fn new(speed: f64) -> Pace {
        Pace {
            speed: speed.max(1.0),
            started: None,
        }
    }

    /// How many events after the first `position` to take in the tick that
    /// begins at `t` and lasts `tick` seconds: those due before it ends, at
    /// least one (a replay always moves) and at most `cap` (a slow device
    /// falls behind instead of freezing the page). The first call starts
    /// the clock.
    pub fn due(&mut self, t: f64, tick: f64, position: usize, cap: usize) -> usize {
        let start = *self.started.get_or_insert(t);
        let target = ((t + tick - start) * self.speed).ceil() as usize;
        target.saturating_sub(position).clamp(1, cap.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;

    /// Ticks of 50 ms, some late: after each tick every event due by its end
    /// is taken, and a 7 098-event replay at 10 k/s ends in the tick that
    /// holds its last event's due time (0.7097 s), not after it.
    #[test]
    fn a_paced_replay_is_never_behind_its_speed() {
        let (events, speed, tick) = (7098usize, 10_000.0, 0.05);
        let mut pace = Pace::new(speed);
        let (mut t, mut position, mut ticks, mut last_tick) = (0.0f64, 0usize, 0, 0.0);
        while position < events {
            last_tick = t;
            let n = pace.due(t, tick, position, 5000);
            position = (position + n).min(events);
            let due_by_end = (((t + tick) * speed).ceil() as usize).min(events);
            assert!(
                position >= due_by_end,
                "tick at {t}: {position} < {due_by_end}"
            );
            ticks += 1;
            // Every third tick starts 7 ms late, as a busy page's timers do.
            t += tick + if ticks % 3 == 0 { 0.007 } else { 0.0 };
        }
        let last_due = (events - 1) as f64 / speed;
        assert!(last_tick <= last_due, "ended in the tick at {last_tick}");
    }

    #[test]
    fn a_slow_device_falls_behind_by_the_cap_and_every_tick_moves() {
        let mut pace = Pace::new(1e6);
        assert_eq!(pace.due(0.0, 0.05, 0, 5000), 5000);
        let mut slow = Pace::new(0.5);
        assert_eq!(slow.due(0.0, 0.05, 0, 5000), 1);
        assert_eq!(slow.due(0.05, 0.05, 1, 5000), 1);
    }
}
