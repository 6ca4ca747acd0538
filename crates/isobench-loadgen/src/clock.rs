//! Time for one run: nanoseconds since a single start [`Instant`], and the
//! precise wait the pacing thread uses.
//!
//! tokio's timer has a 1 ms granularity, which alone would put dispatch lag
//! above a millisecond. The pacer therefore runs on its own OS thread and
//! waits as [`isobench_common::precise`] says: timer slack cut to 1 ns, a
//! sleep until just before the instant, then a short spin.

use std::time::{Duration, Instant};

use isobench_common::precise;

/// The longest single sleep, so that a stop request is seen within this time.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// The run's time base: every time in a record is nanoseconds since `start`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start_now() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A clock whose zero is `start`.
    pub fn starting_at(start: Instant) -> Self {
        Self { start }
    }

    /// The instant that is zero on this clock.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since the start.
    pub fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// Nanoseconds from the start to `instant` (0 when it is earlier).
    pub fn ns_at(&self, instant: Instant) -> u64 {
        let elapsed = instant.saturating_duration_since(self.start);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` nanoseconds after the start.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }
}

/// Blocks the calling OS thread until `target_ns` on `clock`, checking
/// `stop` at least every [`MAX_SLEEP`]. Returns `false` when stopped first.
/// Never call it from an async task: it blocks the thread.
pub(crate) fn wait_until(clock: &Clock, target_ns: u64, stop: &dyn Fn() -> bool) -> bool {
    loop {
        if stop() {
            return false;
        }
        let now = clock.now_ns();
        if now >= target_ns {
            return true;
        }
        match precise::next_wait(Duration::from_nanos(target_ns - now), MAX_SLEEP) {
            Some(sleep) => std::thread::sleep(sleep),
            None => std::hint::spin_loop(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_round_trips_instants() {
        let clock = Clock::start_now();
        let at = clock.instant_at(1_500);
        assert_eq!(clock.ns_at(at), 1_500);
        assert_eq!(clock.ns_at(clock.start() - Duration::from_secs(1)), 0);
    }

    #[test]
    fn wait_until_reaches_the_target_and_honours_stop() {
        let clock = Clock::start_now();
        let target = clock.now_ns() + 2_000_000;
        assert!(wait_until(&clock, target, &|| false));
        assert!(clock.now_ns() >= target);
        assert!(!wait_until(&clock, u64::MAX, &|| true));
    }
}
