//! Waiting for an instant to within microseconds, on a dedicated OS thread.
//!
//! tokio's timer rounds every sleep up to the next millisecond, which alone
//! would put dispatch lag above a millisecond and distort an injected 2 ms
//! inter-token latency by half. A thread that must act at an instant
//! therefore:
//! 1. cuts its timer slack from Linux's default 50 µs to 1 ns
//!    ([`tighten_timer_slack`]), so the kernel wakes it when it asked to;
//! 2. sleeps (or parks) until [`SPIN_WINDOW`] before the instant;
//! 3. spins for the rest.
//!
//! The window is short on purpose: a thread that wakes from a sleep gets a
//! core back at once even on a busy machine, whereas a long spin (or a yield
//! loop) competes with, or hands the core to, whatever else is running.
//! [`next_wait`] is that rule; the load generator's pacer (which sleeps) and
//! the mock's timer thread (which parks, to be woken by new deadlines) both
//! follow it.

use std::time::Duration;

/// How long before an instant a waiting thread stops sleeping and spins.
/// About what a wake-up from a sleep costs in a virtual machine with 1 ns
/// timer slack.
pub const SPIN_WINDOW: Duration = Duration::from_micros(25);

/// What a precise waiter does next when `remaining` is left before its
/// instant: `Some(d)` sleeps or parks for `d` (at most `longest`, so that
/// it can look at a stop flag or new work in between), `None` spins
/// ([`std::hint::spin_loop`]) and looks again.
pub fn next_wait(remaining: Duration, longest: Duration) -> Option<Duration> {
    (remaining > SPIN_WINDOW).then(|| (remaining - SPIN_WINDOW).min(longest))
}

/// Asks the kernel to wake the calling thread at the time it asked for,
/// instead of up to 50 µs later (Linux's default timer slack, which lets it
/// batch wake-ups). Elsewhere, or when refused, the default stays.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_the_spin_window_then_spins() {
        let long = Duration::from_millis(5);
        assert_eq!(
            next_wait(Duration::from_millis(2), long),
            Some(Duration::from_millis(2) - SPIN_WINDOW)
        );
        assert_eq!(next_wait(Duration::from_secs(1), long), Some(long));
        assert_eq!(next_wait(SPIN_WINDOW, long), None);
        assert_eq!(next_wait(Duration::ZERO, long), None);
    }
}
