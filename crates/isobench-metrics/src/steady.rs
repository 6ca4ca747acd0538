//! The steady-state window of a run, and whether the endpoint kept up in it.
//!
//! A load step's figures should describe the load, not its edges: the
//! first requests meet an idle server (and a ramp-up, when the workload
//! has one) and the last ones drain alone after sending stopped. The
//! steady window runs from the first measured send plus the larger of
//! [`STEADY_SKIP_FRACTION`] of the sending span and the ramp-up plus the
//! run's median E2E latency (so that the requests ending at its start were
//! sent after the ramp), but never more than half the span, to the last
//! measured send; the requests that *ended* in it are its requests (so its
//! completions per second are what the endpoint delivered under that
//! load, whatever their latency).
//!
//! Saturation, judged in the window; each test asks for a shortfall or a
//! growth well beyond what the arrival process's own randomness gives:
//! - **completions fall behind sends**: completed / sent in the window
//!   below [`COMPLETION_RATIO_MIN`], *and* the shortfall more than three
//!   standard deviations of its noise when the endpoint keeps up: the
//!   requests that straddle each edge of the window are about as many as
//!   are in flight (Little: the window's send rate x the mean E2E), so
//!   the shortfall's noise is about `sqrt(2 x in flight)`. With at least
//!   [`MIN_WINDOW_SENDS`] sends. The endpoint finishes fewer requests than
//!   it is given: its queue grows;
//! - **queueing grows**: the median TTFT from schedule (queueing shows
//!   there first, whatever the answers' lengths) of the requests sent in
//!   the window's last third is more than [`LATENCY_GROWTH_MAX`] times that
//!   of its first third, and Mann-Whitney's test says the last third's are
//!   higher at the 1% level: latency growing without bound.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Recorder, RequestRecord, RequestSample, SampleMetric, Summary};

/// The share of the sending span skipped at its start.
pub const STEADY_SKIP_FRACTION: f64 = 0.1;
/// Completed / sent in the window below this is saturation.
pub const COMPLETION_RATIO_MIN: f64 = 0.95;
/// Last third's median TTFT from schedule over the first third's above this
/// is saturation.
pub const LATENCY_GROWTH_MAX: f64 = 1.5;
/// Sends in the window below this give no completion-ratio verdict.
pub const MIN_WINDOW_SENDS: u64 = 20;
/// Standard deviations of noise a completion shortfall must exceed.
const SHORTFALL_SIGMAS: f64 = 3.0;
/// Mann-Whitney's p-value below which the last third's latencies are higher.
const GROWTH_P_VALUE: f64 = 0.01;

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
        let mut latencies: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.value_ns(SampleMetric::E2e))
            .map(|ns| ns as f64)
            .collect();
        let median = crate::Statistic::P50.of(&mut latencies).unwrap_or(0.0) as u64;
        let ramp = u64::try_from(ramp_up.as_nanos()).unwrap_or(u64::MAX);
        let skip = ((span as f64 * STEADY_SKIP_FRACTION) as u64)
            .max(ramp.saturating_add(median))
            .min(span / 2);
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
        let ended: Vec<&RequestSample> = samples
            .iter()
            .filter(|s| s.completed() && self.holds(s.end_ns))
            .collect();
        let completed = ended.len() as u64;
        let completion_ratio = (sent > 0).then(|| completed as f64 / sent as f64);
        let mean_e2e_s = ended
            .iter()
            .filter_map(|s| s.value_ns(SampleMetric::E2e))
            .map(|ns| ns as f64 / 1e9)
            .sum::<f64>()
            / ended.len().max(1) as f64;
        let in_flight = sent as f64 / self.duration().as_secs_f64().max(1e-9) * mean_e2e_s;
        let noise = (2.0 * in_flight + 1.0).sqrt();
        let shortfall = sent as f64 - completed as f64;
        let mut reasons = Vec::new();
        if let Some(ratio) = completion_ratio
            && sent >= MIN_WINDOW_SENDS
            && ratio < COMPLETION_RATIO_MIN
            && shortfall > SHORTFALL_SIGMAS * noise
        {
            reasons.push(format!(
                "{completed} requests completed in the steady window of {sent} sent in it ({:.0}%, below {:.0}%, and {shortfall:.0} short where chance gives about {noise:.0}): the endpoint fell behind the load",
                ratio * 100.0,
                COMPLETION_RATIO_MIN * 100.0
            ));
        }
        let third = (self.end_ns - self.start_ns) / 3;
        let ttfts = |from: u64, to: u64| -> Vec<f64> {
            samples
                .iter()
                .filter(|s| (from..=to).contains(&s.sent_ns))
                .filter_map(|s| s.value_ns(SampleMetric::TtftFromSchedule))
                .map(|ns| ns as f64)
                .collect()
        };
        let early = ttfts(self.start_ns, self.start_ns + third);
        let late = ttfts(self.end_ns - third, self.end_ns);
        let median = |values: &[f64]| {
            (values.len() >= 5).then(|| crate::Statistic::P50.of(&mut values.to_vec()))?
        };
        let latency_growth = median(&early)
            .zip(median(&late))
            .filter(|(e, _)| *e > 0.0)
            .map(|(e, l)| l / e);
        let growth_is_real = crate::stats::mann_whitney(&early, &late).is_some_and(|test| {
            test.p_value < GROWTH_P_VALUE && test.candidate_lower_probability < 0.5
        });
        if let Some(growth) = latency_growth.filter(|g| *g > LATENCY_GROWTH_MAX && growth_is_real) {
            reasons.push(format!(
                "median TTFT from schedule grew {growth:.1}x from the window's first third to its last: queueing grows without bound"
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
    /// Median TTFT from schedule of the requests sent in the window's last
    /// third over its first third's; `None` below 5 completed requests in
    /// either.
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
        // After a ramp, the requests ending at the start were sent after it.
        let ramped = SteadyWindow::of(&samples, Duration::from_millis(300)).unwrap();
        assert_eq!(ramped.start_ns, 350 * MS);
        // Never more than half the span.
        let long = SteadyWindow::of(&samples, Duration::from_secs(5)).unwrap();
        assert_eq!(long.start_ns, 500 * MS);
        assert_eq!(SteadyWindow::of(&samples[..1], Duration::ZERO), None);
    }

    /// Regression: right after a ramp, requests of long latency completed
    /// at the lower rate of the ramp's sends, and an endpoint keeping up
    /// read as one falling behind.
    #[test]
    fn long_requests_after_a_ramp_are_not_saturation() {
        // A ramp from 0 to 10 req/s over 2 s (sends at t = sqrt(2 T k / R)),
        // then 10 req/s until 10 s; every request takes 1.5 s.
        let ramp_s = 2.0;
        let mut samples = Vec::new();
        for k in 0..10u64 {
            let t = (2.0 * ramp_s * k as f64 / 10.0).sqrt();
            samples.push(sample((t * 1e3) as u64, 1_500));
        }
        samples.extend((0..=80).map(|i| sample(2_000 + i * 100, 1_500)));
        let window = SteadyWindow::of(&samples, Duration::from_secs(2)).unwrap();
        let s = window.saturation(&samples);
        assert!(!s.saturated, "{s:?}");
        assert!(s.completion_ratio.unwrap() >= COMPLETION_RATIO_MIN, "{s:?}");
    }

    /// Regression: with heavy-tailed latencies and a few dozen sends, the
    /// completions of a window fell 5% short of its sends by chance alone.
    #[test]
    fn a_shortfall_within_chance_is_not_saturation() {
        // 60 sends over 6 s, latencies 0.2-2.6 s: 54 end in the window.
        let mut samples: Vec<_> = (0..=66)
            .map(|i| sample(i * 100, 200 + (i % 7) * 400))
            .collect();
        samples.truncate(67);
        let window = SteadyWindow {
            start_ns: 600 * MS,
            end_ns: 6_600 * MS,
        };
        let s = window.saturation(&samples);
        assert!(s.completion_ratio.unwrap() < COMPLETION_RATIO_MIN, "{s:?}");
        assert!(!s.saturated, "{s:?}");
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
        let samples: Vec<_> = (0..=400).map(|i| sample(i * 10, 50 + 2 * i)).collect();
        let window = SteadyWindow::of(&samples, Duration::ZERO).unwrap();
        let s = window.saturation(&samples);
        assert!(s.saturated, "{s:?}");
        assert!(s.completion_ratio.unwrap() < COMPLETION_RATIO_MIN, "{s:?}");
        assert!(s.latency_growth.unwrap() > LATENCY_GROWTH_MAX, "{s:?}");
        assert_eq!(s.reasons.len(), 2, "{s:?}");
    }
}
