//! Is a difference between two runs real? Two runs' percentiles differ
//! significantly when their 95% confidence intervals do not overlap. This is
//! conservative: non-overlapping 95% intervals correspond to a difference
//! significant at roughly the 0.6% level, so a "no significant difference"
//! verdict can hide a small real one, but a "lower"/"higher" verdict is
//! trustworthy. A saturated interval (too few samples to bound the
//! percentile) gives no verdict.

use serde::{Deserialize, Serialize};

use crate::{ConfidenceInterval, LatencyStats};

/// The percentiles that carry confidence intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Percentile {
    P50,
    P99,
}

/// How the candidate's percentile compares with the baseline's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly lower (better, for a latency).
    Lower,
    /// Significantly higher.
    Higher,
    /// The confidence intervals overlap.
    NoSignificantDifference,
    /// A side has no samples, or too few to bound the percentile.
    NotEnoughSamples,
}

/// One percentile of one metric, baseline against candidate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub baseline_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    /// candidate / baseline - 1; `None` when either is missing or the
    /// baseline is zero.
    pub relative_change: Option<f64>,
    pub verdict: Verdict,
}

/// Compares a percentile of one metric between two runs.
pub fn compare_percentile(
    baseline: Option<&LatencyStats>,
    candidate: Option<&LatencyStats>,
    percentile: Percentile,
) -> Comparison {
    let pick = |stats: &LatencyStats| match percentile {
        Percentile::P50 => (stats.p50_ms, stats.p50_ci),
        Percentile::P99 => (stats.p99_ms, stats.p99_ci),
    };
    let baseline = baseline.map(pick);
    let candidate = candidate.map(pick);
    let baseline_ms = baseline.map(|(value, _)| value);
    let candidate_ms = candidate.map(|(value, _)| value);
    let relative_change = baseline_ms
        .zip(candidate_ms)
        .filter(|(b, _)| *b > 0.0)
        .map(|(b, c)| c / b - 1.0);
    let verdict = match (baseline, candidate) {
        (Some((_, b)), Some((_, c))) => verdict(&b, &c),
        _ => Verdict::NotEnoughSamples,
    };
    Comparison {
        baseline_ms,
        candidate_ms,
        relative_change,
        verdict,
    }
}

fn verdict(baseline: &ConfidenceInterval, candidate: &ConfidenceInterval) -> Verdict {
    if baseline.saturated || candidate.saturated {
        Verdict::NotEnoughSamples
    } else if candidate.upper_ms < baseline.lower_ms {
        Verdict::Lower
    } else if candidate.lower_ms > baseline.upper_ms {
        Verdict::Higher
    } else {
        Verdict::NoSignificantDifference
    }
}
