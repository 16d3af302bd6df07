//! Pacing a replay to a speed in events a second on the page's clock, from
//! a tick that takes each tick's events at once.

/// When the events of a replay are due: event `i` at `i / speed` seconds
/// after the first tick. Each tick takes the events due before it *ends*, so
/// a replay is never behind its speed for the tick's length, and at most one
/// tick ahead of it; below one event a tick (20 a second with the page's
/// 50 ms ticks) a tick with none due takes none. (Taking the events due at a tick's start, a replay ended up
/// to a tick late: 9.4–9.8 k of 10 k ops/s requested on a 0.7 s sample.)
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
    /// Paces to `speed` events a second (taken as at least 1).
    pub fn new(speed: f64) -> Pace {
        Pace {
            speed: speed.max(1.0),
            started: None,
        }
    }

    /// How many events after the first `position` to take in the tick that
    /// begins at `t` and lasts `tick` seconds: those due before it ends
    /// (none in a tick that holds no due time, below one event a tick) and
    /// at most `cap` (a slow device falls behind instead of freezing the
    /// page). The first call starts the clock, and takes the first event.
    pub fn due(&mut self, t: f64, tick: f64, position: usize, cap: usize) -> usize {
        let start = *self.started.get_or_insert(t);
        let target = ((t + tick - start) * self.speed).ceil() as usize;
        target.saturating_sub(position).min(cap.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;

    /// Ticks of 50 ms, some late: after each tick every event due by its end
    /// is taken and none due later, so a 7 098-event replay at 10 k/s ends in
    /// the tick that holds its last event's due time (0.7097 s): not after
    /// it, and not a tick before it.
    #[test]
    fn a_paced_replay_keeps_to_its_speed() {
        let (events, speed, tick) = (7098usize, 10_000.0, 0.05);
        let mut pace = Pace::new(speed);
        let (mut t, mut position, mut ticks, mut last_tick) = (0.0f64, 0usize, 0, 0.0);
        while position < events {
            last_tick = t;
            let n = pace.due(t, tick, position, 5000);
            position = (position + n).min(events);
            // Event i is due at i / speed: those due before t + tick (one
            // due at the very end, to rounding, may go either way).
            let due_before = |end: f64| {
                (0..events)
                    .take_while(|&i| (i as f64) / speed < end)
                    .count()
            };
            let (least, most) = (due_before(t + tick - 1e-9), due_before(t + tick + 1e-9));
            assert!(
                (least..=most).contains(&position),
                "tick at {t}: {position} taken, {least}..={most} due"
            );
            ticks += 1;
            // Every third tick starts 7 ms late, as a busy page's timers do.
            t += tick + if ticks % 3 == 0 { 0.007 } else { 0.0 };
        }
        let last_due = (events - 1) as f64 / speed;
        assert!(
            last_tick <= last_due && last_tick > last_due - tick,
            "ended in the tick at {last_tick}, the last event due at {last_due}"
        );
    }

    #[test]
    fn a_slow_device_falls_behind_by_the_cap() {
        // 50 000 events are due in the first tick; the cap takes 5 000.
        let mut fast = Pace::new(1e6);
        assert_eq!(fast.due(0.0, 0.05, 0, 5000), 5000);
        assert_eq!(fast.due(0.05, 0.05, 5000, 5000), 5000);
    }

    /// Below one event a tick, ticks with no event due take none: 2.7
    /// events a second over 2 s of 50 ms ticks is the 6 due at 0, 0.37,
    /// 0.74, 1.11, 1.48 and 1.85 s, not 40.
    #[test]
    fn a_slow_replay_keeps_to_its_speed_too() {
        let mut pace = Pace::new(2.7);
        let mut position = 0;
        for k in 0..40 {
            let n = pace.due(f64::from(k) * 0.05, 0.05, position, 5000);
            assert!(n <= 1, "tick {k}: {n}");
            position += n;
        }
        assert_eq!(position, 6);
        // 5 a second is a quarter of an event a tick: the first tick takes
        // the event due at 0, the next none.
        let mut slow = Pace::new(5.0);
        assert_eq!(slow.due(0.0, 0.05, 0, 5000), 1);
        assert_eq!(slow.due(0.05, 0.05, 1, 5000), 0);
    }
}
