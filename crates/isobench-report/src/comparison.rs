//! Two runs compared, figure by figure, with a plain verdict on each.
//!
//! From per-request samples (reports that carry `samples`): for TTFT, TPOT
//! and E2E, the p50, p99 and mean of both runs, the candidate's relative
//! difference with a 95% bootstrap interval, judged significant when the
//! interval excludes no change; a Mann-Whitney U test of the whole
//! distributions; and each run's outliers by the IQR rule (counted, never
//! removed). A statistic with too few samples on either side for the
//! stated confidence is flagged, not judged. Warm-up requests are never
//! among the samples.
//!
//! Reports written before samples were kept are compared by their
//! percentiles' order-statistic intervals instead (non-overlapping 95%
//! intervals), which is all they hold.

use isobench_metrics::stats::{
    Difference, MannWhitney, Outliers, bootstrap_differences, fewest_samples, iqr_outliers,
    mann_whitney,
};
use isobench_metrics::{
    LatencyStats, Percentile, SampleMetric, Statistic, Verdict, compare_percentile,
};

use crate::Report;

/// The metrics compared, with their names in verdicts.
pub const METRICS: [(SampleMetric, &str); 3] = [
    (SampleMetric::Ttft, "TTFT"),
    (SampleMetric::Tpot, "TPOT"),
    (SampleMetric::E2e, "E2E"),
];

const STATISTICS: [Statistic; 3] = [Statistic::P50, Statistic::P99, Statistic::Mean];

/// How one statistic of one metric compares.
#[derive(Debug, Clone, PartialEq)]
pub struct StatisticComparison {
    pub statistic: Statistic,
    pub baseline_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    pub outcome: Outcome,
}

/// The judgement of one statistic.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// From samples: the relative difference and its bootstrap interval.
    Judged(Difference),
    /// From the reports' percentile intervals (no samples): whether they overlap.
    Intervals(Verdict),
    /// A side has fewer samples than the statistic needs.
    TooFewSamples { have: usize, needed: usize },
    /// A side has no value (no samples of the metric, or a zero baseline).
    Missing,
}

/// One metric of two runs.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricComparison {
    pub metric: SampleMetric,
    pub name: &'static str,
    pub baseline_n: usize,
    pub candidate_n: usize,
    pub statistics: Vec<StatisticComparison>,
    pub mann_whitney: Option<MannWhitney>,
    pub baseline_outliers: Option<Outliers>,
    pub candidate_outliers: Option<Outliers>,
}

/// Compares every metric of `candidate` with `baseline`.
pub fn compare(baseline: &Report, candidate: &Report) -> Vec<MetricComparison> {
    METRICS
        .iter()
        .map(
            |&(metric, name)| match (&baseline.samples, &candidate.samples) {
                (Some(b), Some(c)) => {
                    from_samples(metric, name, &b.values_ms(metric), &c.values_ms(metric))
                }
                _ => from_intervals(metric, name, baseline, candidate),
            },
        )
        .collect()
}

fn from_samples(
    metric: SampleMetric,
    name: &'static str,
    base: &[f64],
    cand: &[f64],
) -> MetricComparison {
    let differences = bootstrap_differences(base, cand, &STATISTICS);
    let statistics = STATISTICS
        .iter()
        .zip(differences)
        .map(|(&statistic, difference)| {
            let needed = fewest_samples(statistic);
            let have = base.len().min(cand.len());
            let outcome = if have < needed {
                Outcome::TooFewSamples { have, needed }
            } else {
                difference.map_or(Outcome::Missing, Outcome::Judged)
            };
            StatisticComparison {
                statistic,
                baseline_ms: statistic.of(&mut base.to_vec()),
                candidate_ms: statistic.of(&mut cand.to_vec()),
                outcome,
            }
        })
        .collect();
    MetricComparison {
        metric,
        name,
        baseline_n: base.len(),
        candidate_n: cand.len(),
        statistics,
        mann_whitney: mann_whitney(base, cand),
        baseline_outliers: iqr_outliers(base),
        candidate_outliers: iqr_outliers(cand),
    }
}

fn from_intervals(
    metric: SampleMetric,
    name: &'static str,
    base: &Report,
    cand: &Report,
) -> MetricComparison {
    let stats = |report: &Report| -> Option<LatencyStats> {
        let l = &report.summary.latency;
        match metric {
            SampleMetric::Tpot => l.tpot.clone(),
            SampleMetric::E2e => l.e2e.clone(),
            _ => l.ttft.clone(),
        }
    };
    let (b, c) = (stats(base), stats(cand));
    let count = |s: &Option<LatencyStats>| s.as_ref().map_or(0, |s| s.count as usize);
    let statistics = [
        (Statistic::P50, Percentile::P50),
        (Statistic::P99, Percentile::P99),
    ]
    .into_iter()
    .map(|(statistic, percentile)| {
        let comparison = compare_percentile(b.as_ref(), c.as_ref(), percentile);
        StatisticComparison {
            statistic,
            baseline_ms: comparison.baseline_ms,
            candidate_ms: comparison.candidate_ms,
            outcome: Outcome::Intervals(comparison.verdict),
        }
    })
    .collect();
    MetricComparison {
        metric,
        name,
        baseline_n: count(&b),
        candidate_n: count(&c),
        statistics,
        mann_whitney: None,
        baseline_outliers: None,
        candidate_outliers: None,
    }
}

impl StatisticComparison {
    /// The verdict in words: "cand's p99 TTFT is 18% lower, 95% CI 12-24%,
    /// significant" (a candidate twice the baseline or more: "is 3.2x the
    /// baseline's, 95% CI 2.9-3.5x"), "no significant difference in p50
    /// E2E (+1.2%, 95% CI -0.8 to +3.1%)", "p99 TTFT: too few samples (200,
    /// 381 needed for 95%), not judged".
    pub fn verdict(&self, metric: &str, candidate: &str) -> String {
        let figure = format!("{} {metric}", self.statistic.name());
        match &self.outcome {
            Outcome::Judged(d) if d.significant() && d.lower >= 1.0 => format!(
                "{candidate}'s {figure} is {:.1}x the baseline's, 95% CI {:.1}-{:.1}x, significant",
                1.0 + d.relative,
                1.0 + d.lower,
                1.0 + d.upper
            ),
            Outcome::Judged(d) if d.significant() => {
                let (word, sign) = if d.relative < 0.0 {
                    ("lower", -1.0)
                } else {
                    ("higher", 1.0)
                };
                let (a, b) = ordered(sign * d.lower * 100.0, sign * d.upper * 100.0);
                format!(
                    "{candidate}'s {figure} is {:.0}% {word}, 95% CI {}-{}%, significant",
                    (d.relative * 100.0).abs(),
                    one_decimal_if_small(a),
                    one_decimal_if_small(b)
                )
            }
            Outcome::Judged(d) => format!(
                "no significant difference in {figure} ({:+.1}%, 95% CI {:+.1} to {:+.1}%)",
                d.relative * 100.0,
                d.lower * 100.0,
                d.upper * 100.0
            ),
            Outcome::Intervals(Verdict::Lower) => {
                format!(
                    "{candidate}'s {figure} is lower, significant (95% intervals apart; no samples to size it)"
                )
            }
            Outcome::Intervals(Verdict::Higher) => {
                format!(
                    "{candidate}'s {figure} is higher, significant (95% intervals apart; no samples to size it)"
                )
            }
            Outcome::Intervals(Verdict::NoSignificantDifference) => {
                format!("no significant difference in {figure} (95% intervals overlap)")
            }
            Outcome::Intervals(Verdict::NotEnoughSamples) => {
                format!("{figure}: not enough samples to bound it, not judged")
            }
            Outcome::TooFewSamples { have, needed } => {
                format!("{figure}: too few samples ({have}, {needed} needed for 95%), not judged")
            }
            Outcome::Missing => format!("{figure}: no value on one side, not judged"),
        }
    }

    /// Whether the statistic was judged significantly different.
    pub fn significant(&self) -> bool {
        match self.outcome {
            Outcome::Judged(d) => d.significant(),
            Outcome::Intervals(v) => matches!(v, Verdict::Lower | Verdict::Higher),
            _ => false,
        }
    }
}

fn ordered(a: f64, b: f64) -> (f64, f64) {
    if a <= b { (a, b) } else { (b, a) }
}

fn one_decimal_if_small(value: f64) -> String {
    if value.abs() < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

impl MetricComparison {
    /// The Mann-Whitney line: "Mann-Whitney U: p = 0.0003, P(cand lower) = 0.71".
    pub fn mann_whitney_text(&self) -> String {
        match &self.mann_whitney {
            Some(test) => format!(
                "Mann-Whitney U p = {}, P(candidate lower) = {:.2}{}",
                p_value(test.p_value),
                test.candidate_lower_probability,
                if test.significant() {
                    ", significant"
                } else {
                    ""
                }
            ),
            None if self.baseline_n.min(self.candidate_n)
                < isobench_metrics::stats::MIN_SAMPLES =>
            {
                format!(
                    "Mann-Whitney U: too few samples ({} and {}, {} needed)",
                    self.baseline_n,
                    self.candidate_n,
                    isobench_metrics::stats::MIN_SAMPLES
                )
            }
            None => "Mann-Whitney U: no per-request samples in one of the reports".to_owned(),
        }
    }

    /// The outlier line: "outliers (IQR rule, kept): baseline 3 high, candidate 0".
    pub fn outliers_text(&self) -> Option<String> {
        let describe = |o: &Option<Outliers>| match o {
            Some(o) => format!(
                "{} above {:.1} ms, {} below {:.1} ms",
                o.high, o.high_fence, o.low, o.low_fence
            ),
            None => "-".to_owned(),
        };
        self.baseline_outliers
            .as_ref()
            .or(self.candidate_outliers.as_ref())?;
        Some(format!(
            "outliers (IQR rule, kept): baseline {}; candidate {}",
            describe(&self.baseline_outliers),
            describe(&self.candidate_outliers)
        ))
    }
}

fn p_value(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(relative: f64, lower: f64, upper: f64) -> StatisticComparison {
        StatisticComparison {
            statistic: Statistic::P99,
            baseline_ms: Some(100.0),
            candidate_ms: Some(100.0 * (1.0 + relative)),
            outcome: Outcome::Judged(Difference {
                relative,
                lower,
                upper,
            }),
        }
    }

    #[test]
    fn verdicts_read_as_sentences() {
        assert_eq!(
            judged(-0.18, -0.24, -0.12).verdict("TTFT", "B"),
            "B's p99 TTFT is 18% lower, 95% CI 12-24%, significant"
        );
        assert_eq!(
            judged(0.012, -0.008, 0.031).verdict("E2E", "B"),
            "no significant difference in p99 E2E (+1.2%, 95% CI -0.8 to +3.1%)"
        );
        assert_eq!(
            judged(2.2, 1.9, 2.5).verdict("TTFT", "B"),
            "B's p99 TTFT is 3.2x the baseline's, 95% CI 2.9-3.5x, significant"
        );
        let few = StatisticComparison {
            outcome: Outcome::TooFewSamples {
                have: 200,
                needed: 381,
            },
            ..judged(0.0, 0.0, 0.0)
        };
        assert_eq!(
            few.verdict("TTFT", "B"),
            "p99 TTFT: too few samples (200, 381 needed for 95%), not judged"
        );
        assert!(!few.significant());
    }
}
