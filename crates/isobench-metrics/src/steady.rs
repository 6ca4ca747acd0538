//! The steady-state window of a run, and whether the endpoint kept up in it.
//!
//! A load step's figures should describe the load, not its edges: the
//! first requests meet an idle server (and a ramp-up, when the workload
//! has one) and the last ones drain alone after sending stopped. The
//! steady window runs from the first measured send plus the larger of
//! [`STEADY_SKIP_FRACTION`] of the sending span and the ramp-up, to the
//! last measured send; the requests that *ended* in it are its requests
//! (so its completions per second are what the endpoint delivered under
//! that load, whatever their latency).
//!
//! Saturation, judged in the window:
//! - **completions fall behind sends**: completed / sent in the window
//!   below [`COMPLETION_RATIO_MIN`] (with at least [`MIN_WINDOW_SENDS`]
//!   sends): the endpoint finishes fewer requests than it is given, so its
//!   queue grows;
//! - **queueing grows**: the median E2E from schedule of the requests
//!   sent in the window's last third is more than [`LATENCY_GROWTH_MAX`]
//!   times that of its first third: latency growing without bound.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Recorder, RequestRecord, RequestSample, SampleMetric, Summary};

/// The share of the sending span skipped at its start.
pub const STEADY_SKIP_FRACTION: f64 = 0.1;
/// Completed / sent in the window below this is saturation.
pub const COMPLETION_RATIO_MIN: f64 = 0.95;
/// Last third's median E2E from schedule over the first third's above this
/// is saturation.
pub const LATENCY_GROWTH_MAX: f64 = 1.5;
/// Sends in the window below this give no completion-ratio verdict.
pub const MIN_WINDOW_SENDS: u64 = 20;

/// The steady-state window, nanoseconds since the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteadyWindow {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl SteadyWindow {
    /// The window of a run's samples (module docs); `None` without two
    /// measured sends.
    pub fn of(samples: &[RequestSample], ramp_up: Duration) -> Option<Self> {
        let first = samples.iter().map(|s| s.sent_ns).min()?;
        let last = samples.iter().map(|s| s.sent_ns).max()?;
        if last <= first {
            return None;
        }
        let span = last - first;
        let ramp = u64::try_from(ramp_up.as_nanos()).unwrap_or(u64::MAX);
        let skip = ((span as f64 * STEADY_SKIP_FRACTION) as u64).max(ramp);
        let start_ns = first.saturating_add(skip);
        (start_ns < last).then_some(Self {
            start_ns,
            end_ns: last,
        })
    }

    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.end_ns - self.start_ns)
    }

    fn holds(&self, t_ns: u64) -> bool {
        (self.start_ns..=self.end_ns).contains(&t_ns)
    }

    /// The summary of the requests that ended in the window, recorded by a
    /// clone of `prototype` (for its SLOs), rates over the window.
    pub fn summarize(&self, records: &[RequestRecord], prototype: &Recorder) -> Summary {
        let mut recorder = prototype.clone();
        for record in records.iter().filter(|r| !r.warmup && self.holds(r.end_ns)) {
            recorder.record(record);
        }
        recorder.summarize(self.duration())
    }

    /// Whether the endpoint kept up with the load in the window.
    pub fn saturation(&self, samples: &[RequestSample]) -> Saturation {
        let sent = samples.iter().filter(|s| self.holds(s.sent_ns)).count() as u64;
        let completed = samples
            .iter()
            .filter(|s| s.completed() && self.holds(s.end_ns))
            .count() as u64;
        let completion_ratio = (sent > 0).then(|| completed as f64 / sent as f64);
        let third = (self.end_ns - self.start_ns) / 3;
        let median_of = |from: u64, to: u64| {
            let mut values: Vec<f64> = samples
                .iter()
                .filter(|s| (from..=to).contains(&s.sent_ns))
                .filter_map(|s| s.value_ns(SampleMetric::E2eFromSchedule))
                .map(|ns| ns as f64)
                .collect();
            (values.len() >= 5).then(|| crate::Statistic::P50.of(&mut values))?
        };
        let early = median_of(self.start_ns, self.start_ns + third);
        let late = median_of(self.end_ns - third, self.end_ns);
        let latency_growth = early.zip(late).filter(|(e, _)| *e > 0.0).map(|(e, l)| l / e);
        let mut reasons = Vec::new();
        if let Some(ratio) = completion_ratio.filter(|r| sent >= MIN_WINDOW_SENDS && *r < COMPLETION_RATIO_MIN)
        {
            reasons.push(format!(
                "{completed} requests completed in the steady window of {sent} sent in it ({:.0}%, below {:.0}%): the endpoint fell behind the load",
                ratio * 100.0,
                COMPLETION_RATIO_MIN * 100.0
            ));
        }
        if let Some(growth) = latency_growth.filter(|g| *g > LATENCY_GROWTH_MAX) {
            reasons.push(format!(
                "median E2E from schedule grew {growth:.1}x from the window's first third to its last: queueing grows without bound"
            ));
        }
        Saturation {
            sent,
            completed,
            completion_ratio,
            latency_growth,
            saturated: !reasons.is_empty(),
            reasons,
        }
    }
}

/// Whether the endpoint kept up in the steady window, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    /// Measured requests sent in the window.
    pub sent: u64,
    /// Requests that completed in the window.
    pub completed: u64,
    /// completed / sent; `None` without sends.
    pub completion_ratio: Option<f64>,
    /// Median E2E from schedule of the window's last third over its first
    /// third's; `None` below 5 completed requests in either.
    pub latency_growth: Option<f64>,
    pub saturated: bool,
    /// Why, as sentences (empty when not saturated).
    pub reasons: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A request sent at `sent_ms`, scheduled then, taking `latency_ms`.
    fn sample(sent_ms: u64, latency_ms: u64) -> RequestSample {
        RequestSample {
            scheduled_ns: sent_ms * MS,
            sent_ns: sent_ms * MS,
            end_ns: (sent_ms + latency_ms) * MS,
            ttft_ns: Some(latency_ms * MS / 2),
            tpot_ns: None,
            itl_max_ns: None,
            input_tokens: 1,
            output_tokens: 1,
            error: None,
        }
    }

    #[test]
    fn the_window_skips_the_start_and_the_drain() {
        let samples: Vec<_> = (0..=100).map(|i| sample(i * 10, 50)).collect();
        let window = SteadyWindow::of(&samples, Duration::ZERO).unwrap();
        assert_eq!((window.start_ns, window.end_ns), (100 * MS, 1_000 * MS));
        let ramped = SteadyWindow::of(&samples, Duration::from_millis(300)).unwrap();
        assert_eq!(ramped.start_ns, 300 * MS);
        assert_eq!(SteadyWindow::of(&samples[..1], Duration::ZERO), None);
    }

    #[test]
    fn an_endpoint_that_keeps_up_is_not_saturated() {
        let samples: Vec<_> = (0..=200).map(|i| sample(i * 10, 50)).collect();
        let window = SteadyWindow::of(&samples, Duration::ZERO).unwrap();
        let s = window.saturation(&samples);
        assert!(!s.saturated, "{s:?}");
        assert!((s.latency_growth.unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_growing_queue_is_saturation() {
        // Sent every 10 ms, served every 12 ms: each waits 2 ms more.
        let samples: Vec<_> = (0..=200).map(|i| sample(i * 10, 50 + 2 * i)).collect();
        let window = SteadyWindow::of(&samples, Duration::ZERO).unwrap();
        let s = window.saturation(&samples);
        assert!(s.saturated, "{s:?}");
        assert!(s.completion_ratio.unwrap() < COMPLETION_RATIO_MIN, "{s:?}");
        assert!(s.latency_growth.unwrap() > LATENCY_GROWTH_MAX, "{s:?}");
        assert_eq!(s.reasons.len(), 2, "{s:?}");
    }
}
