//! One latency series: an HDR histogram plus exact moments.
//!
//! Samples arrive in nanoseconds. The histogram stores them rounded to the
//! nearest microsecond with 3 significant digits (so a value is known to
//! within 0.1%, and exactly below 2.048 ms); it starts sized for one hour and
//! grows itself for longer values, so nothing is dropped. A value it still
//! cannot hold is clamped to its highest trackable value and counted in
//! [`LatencySeries::clamped`].
//!
//! Next to the histogram the series keeps the exact count, sum, sum of
//! squares, minimum and maximum in nanoseconds, so the mean and standard
//! deviation are exact and merging two series is exact.
//!
//! Percentiles are read off the histogram by rank: the q-quantile of n
//! samples is the value of rank `ceil(q * n)` (1-based), reported as the
//! highest value equivalent to that histogram bucket and clamped into the
//! exact `[min, max]`.

use std::fmt;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The level of every confidence interval in a summary.
pub const CONFIDENCE_LEVEL: f64 = 0.95;

/// The two-sided standard normal quantile for [`CONFIDENCE_LEVEL`].
const Z_95: f64 = 1.959_963_984_540_054;

/// Histogram precision: 3 significant digits.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Initial histogram range: one hour in microseconds (it grows beyond).
const INITIAL_MAX_MICROS: u64 = 3_600_000_000;

/// Distribution statistics of one latency metric, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub count: u64,
    pub mean_ms: f64,
    /// Population standard deviation (divides by n, as numpy's default).
    pub stddev_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    /// 95% confidence interval of the median.
    pub p50_ci: ConfidenceInterval,
    /// 95% confidence interval of the 99th percentile.
    pub p99_ci: ConfidenceInterval,
}

/// A distribution-free confidence interval of a percentile, from order
/// statistics: the values of ranks `n*q ∓ z*sqrt(n*q*(1-q))`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceInterval {
    pub lower_ms: f64,
    pub upper_ms: f64,
    /// True when a rank fell outside `1..=n`, so the bound shown is the
    /// sample's min or max and the true interval is wider than shown: there
    /// are too few samples to bound this percentile at this level.
    pub saturated: bool,
}

/// A histogram of latencies with exact moments; see the module docs.
#[derive(Clone)]
pub(crate) struct LatencySeries {
    histogram: Histogram<u64>,
    count: u64,
    sum_ns: u128,
    sum_squares_ns: u128,
    min_ns: u64,
    max_ns: u64,
    clamped: u64,
}

/// Summarised: the histogram's raw counts would be tens of thousands of lines.
impl fmt::Debug for LatencySeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencySeries")
            .field("count", &self.count)
            .field("min_ns", &self.min_ns)
            .field("max_ns", &self.max_ns)
            .field("clamped", &self.clamped)
            .finish_non_exhaustive()
    }
}

impl Default for LatencySeries {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencySeries {
    pub(crate) fn new() -> Self {
        let mut histogram = Histogram::new_with_bounds(1, INITIAL_MAX_MICROS, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        histogram.auto(true);
        Self {
            histogram,
            count: 0,
            sum_ns: 0,
            sum_squares_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            clamped: 0,
        }
    }

    /// Adds one sample.
    pub(crate) fn record(&mut self, value_ns: u64) {
        self.record_n(value_ns, 1);
    }

    /// Adds `n` samples of the same value.
    pub(crate) fn record_n(&mut self, value_ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let micros = value_ns.saturating_add(500) / 1_000;
        if self.histogram.record_n(micros, n).is_err() {
            self.histogram.saturating_record_n(micros, n);
            self.clamped += n;
        }
        let value = u128::from(value_ns);
        let weight = u128::from(n);
        self.count += n;
        self.sum_ns = self.sum_ns.saturating_add(value * weight);
        self.sum_squares_ns = self
            .sum_squares_ns
            .saturating_add(value.saturating_mul(value).saturating_mul(weight));
        self.min_ns = self.min_ns.min(value_ns);
        self.max_ns = self.max_ns.max(value_ns);
    }

    /// Folds another series into this one; the result equals having recorded
    /// both sets of samples here.
    pub(crate) fn merge(&mut self, other: &LatencySeries) {
        if other.count == 0 {
            return;
        }
        if self.histogram.add(&other.histogram).is_err() {
            // Only reachable if the other series grew beyond what this one can
            // resize to: clamp its values one bucket at a time and count them.
            for bucket in other.histogram.iter_recorded() {
                let n = bucket.count_at_value();
                self.histogram
                    .saturating_record_n(bucket.value_iterated_to(), n);
                self.clamped += n;
            }
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.sum_squares_ns = self.sum_squares_ns.saturating_add(other.sum_squares_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.clamped += other.clamped;
    }

    /// Samples whose value was out of the histogram's reach and was clamped.
    pub(crate) fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The exact mean, in milliseconds; `None` without samples.
    pub(crate) fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64 / 1e6)
    }

    /// The q-quantile (0 < q <= 1) in milliseconds; `None` without samples.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        (self.count > 0).then(|| self.values_at_ranks_ms([quantile_rank(q, self.count)])[0])
    }

    /// Every statistic of the series; `None` without samples.
    pub(crate) fn stats(&self) -> Option<LatencyStats> {
        let mean_ms = self.mean_ms()?;
        let rank = |q| quantile_rank(q, self.count);
        let (p50_lower, p50_upper, p50_saturated) = self.confidence_ranks(0.50);
        let (p99_lower, p99_upper, p99_saturated) = self.confidence_ranks(0.99);
        let [
            p50,
            p90,
            p95,
            p99,
            p99_9,
            p50_lower,
            p50_upper,
            p99_lower,
            p99_upper,
        ] = self.values_at_ranks_ms([
            rank(0.50),
            rank(0.90),
            rank(0.95),
            rank(0.99),
            rank(0.999),
            p50_lower,
            p50_upper,
            p99_lower,
            p99_upper,
        ]);
        Some(LatencyStats {
            count: self.count,
            mean_ms,
            stddev_ms: self.stddev_ns() / 1e6,
            min_ms: nanos_to_ms(self.min_ns),
            max_ms: nanos_to_ms(self.max_ns),
            p50_ms: p50,
            p90_ms: p90,
            p95_ms: p95,
            p99_ms: p99,
            p99_9_ms: p99_9,
            p50_ci: ConfidenceInterval {
                lower_ms: p50_lower,
                upper_ms: p50_upper,
                saturated: p50_saturated,
            },
            p99_ci: ConfidenceInterval {
                lower_ms: p99_lower,
                upper_ms: p99_upper,
                saturated: p99_saturated,
            },
        })
    }

    /// Population standard deviation in nanoseconds, exact in integers when
    /// the products fit in 128 bits, else in floating point.
    fn stddev_ns(&self) -> f64 {
        let n = u128::from(self.count);
        let variance = match n
            .checked_mul(self.sum_squares_ns)
            .zip(self.sum_ns.checked_mul(self.sum_ns))
        {
            Some((n_sum_squares, sum_squared)) => {
                n_sum_squares.saturating_sub(sum_squared) as f64 / (n * n) as f64
            }
            None => {
                let mean = self.sum_ns as f64 / n as f64;
                (self.sum_squares_ns as f64 / n as f64 - mean * mean).max(0.0)
            }
        };
        variance.sqrt()
    }

    /// The ranks bounding the q-quantile's confidence interval,
    /// `n*q -/+ z*sqrt(n*q*(1-q))` rounded outwards and kept within `1..=n`,
    /// and whether they had to be kept.
    fn confidence_ranks(&self, q: f64) -> (u64, u64, bool) {
        confidence_ranks(self.count, q)
    }

    /// The values of the samples of 1-based `ranks`, in milliseconds, in one
    /// pass over the histogram: each the highest value of its bucket, clamped
    /// into the exact `[min, max]`.
    fn values_at_ranks_ms<const N: usize>(&self, ranks: [u64; N]) -> [f64; N] {
        let mut order: [usize; N] = std::array::from_fn(|i| i);
        order.sort_by_key(|&i| ranks[i]);
        let mut micros = [self.histogram.max(); N];
        let mut next = 0;
        let mut seen = 0u64;
        for bucket in self.histogram.iter_recorded() {
            seen += bucket.count_at_value();
            while next < N && seen >= ranks[order[next]] {
                micros[order[next]] = bucket.value_iterated_to();
                next += 1;
            }
            if next == N {
                break;
            }
        }
        let (min_ms, max_ms) = (nanos_to_ms(self.min_ns), nanos_to_ms(self.max_ns));
        micros.map(|us| (us as f64 / 1e3).clamp(min_ms, max_ms))
    }
}

/// The ranks bounding the q-quantile's confidence interval among `n`
/// samples, `n*q -/+ z*sqrt(n*q*(1-q))` rounded outwards and kept within
/// `1..=n`, and whether they had to be kept (too few samples).
fn confidence_ranks(count: u64, q: f64) -> (u64, u64, bool) {
    let n = count as f64;
    let centre = n * q;
    let spread = Z_95 * (n * q * (1.0 - q)).sqrt();
    let lower = (centre - spread).floor();
    let upper = (centre + spread).ceil();
    let saturated = lower < 1.0 || upper > n;
    (
        lower.clamp(1.0, n) as u64,
        upper.clamp(1.0, n) as u64,
        saturated,
    )
}

/// The fewest samples whose 95% interval of the q-quantile stays within
/// the samples (is not saturated): 381 for the 99th percentile, 8 for the
/// median. Below it a percentile cannot be bounded at this level.
pub(crate) fn fewest_samples_bounding(q: f64) -> u64 {
    (1..=1_000_000)
        .find(|&n| !confidence_ranks(n, q).2)
        .unwrap_or(u64::MAX)
}

/// The 1-based rank of the q-quantile among `n` samples: `ceil(q * n)`,
/// ignoring floating-point noise (0.99 * 100 is rank 99, not 100), within `1..=n`.
fn quantile_rank(q: f64, n: u64) -> u64 {
    let exact = q * n as f64;
    let nearest = exact.round();
    let rank = if (exact - nearest).abs() <= 1e-9 * nearest.max(1.0) {
        nearest
    } else {
        exact.ceil()
    };
    (rank as u64).clamp(1, n.max(1))
}

fn nanos_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn series(values_ms: &[u64]) -> LatencySeries {
        let mut s = LatencySeries::new();
        for v in values_ms {
            s.record(v * 1_000_000);
        }
        s
    }

    #[test]
    fn percentiles_are_ranks_of_the_samples() {
        let s = series(&(1..=100).collect::<Vec<_>>());
        let stats = s.stats().unwrap();
        assert_eq!(stats.count, 100);
        assert_eq!(stats.min_ms, 1.0);
        assert_eq!(stats.max_ms, 100.0);
        assert_eq!(stats.mean_ms, 50.5);
        // Buckets above 2.048 ms are a few microseconds wide: 0.1% at most.
        assert!((stats.p50_ms - 50.0).abs() <= 0.05, "{}", stats.p50_ms);
        assert!((stats.p99_ms - 99.0).abs() <= 0.1, "{}", stats.p99_ms);
        assert_eq!(stats.p99_9_ms, 100.0);
    }

    #[test]
    fn small_values_are_exact_to_the_microsecond() {
        let mut s = LatencySeries::new();
        for us in [250u64, 1_000, 1_999] {
            s.record(us * 1_000);
        }
        let stats = s.stats().unwrap();
        assert_eq!(stats.p50_ms, 1.0);
        assert_eq!(stats.max_ms, 1.999);
    }

    #[test]
    fn stddev_is_the_exact_population_stddev() {
        let s = series(&[2, 4, 4, 4, 5, 5, 7, 9]);
        let stats = s.stats().unwrap();
        assert_eq!(stats.mean_ms, 5.0);
        assert!((stats.stddev_ms - 2.0).abs() < 1e-12);
    }

    #[test]
    fn record_n_weights_the_value() {
        let mut a = LatencySeries::new();
        a.record_n(3_000_000, 4);
        let b = series(&[3, 3, 3, 3]);
        assert_eq!(a.stats(), b.stats());
    }

    #[test]
    fn values_beyond_the_initial_range_grow_the_histogram() {
        let mut s = LatencySeries::new();
        let two_days_ns = 2 * 86_400 * 1_000_000_000u64;
        s.record(two_days_ns);
        assert_eq!(s.clamped(), 0);
        let stats = s.stats().unwrap();
        assert_eq!(stats.max_ms, two_days_ns as f64 / 1e6);
        assert_eq!(stats.p50_ms, stats.max_ms);
    }

    #[test]
    fn empty_series_has_no_statistics() {
        assert_eq!(LatencySeries::new().stats(), None);
        assert_eq!(LatencySeries::new().quantile_ms(0.5), None);
    }

    #[test]
    fn quantile_rank_ignores_float_noise() {
        assert_eq!(quantile_rank(0.99, 100), 99);
        assert_eq!(quantile_rank(0.999, 1000), 999);
        assert_eq!(quantile_rank(0.5, 3), 2);
        assert_eq!(quantile_rank(0.99, 1), 1);
        assert_eq!(quantile_rank(1.0, 7), 7);
    }

    #[test]
    fn confidence_interval_brackets_the_percentile() {
        let s = series(&(1..=1000).collect::<Vec<_>>());
        let stats = s.stats().unwrap();
        // n=1000, q=0.5: ranks 500 -/+ 1.96*sqrt(250) = 469 .. 531.
        assert!(!stats.p50_ci.saturated);
        assert!((stats.p50_ci.lower_ms - 469.0).abs() <= 0.5);
        assert!((stats.p50_ci.upper_ms - 531.0).abs() <= 0.5);
        // q=0.99: ranks 990 -/+ 1.96*sqrt(9.9) = 983 .. 997.
        assert!(!stats.p99_ci.saturated);
        assert!(stats.p99_ci.lower_ms <= stats.p99_ms && stats.p99_ms <= stats.p99_ci.upper_ms);
        assert!((stats.p99_ci.lower_ms - 983.0).abs() <= 1.0);
        assert!((stats.p99_ci.upper_ms - 997.0).abs() <= 1.0);
    }

    #[test]
    fn the_fewest_samples_bounding_a_percentile_are_the_first_unsaturated_count() {
        assert_eq!(fewest_samples_bounding(0.99), 381);
        assert!(confidence_ranks(380, 0.99).2);
        assert!(fewest_samples_bounding(0.5) < 20);
    }

    #[test]
    fn too_few_samples_saturate_the_p99_interval() {
        let stats = series(&(1..=50).collect::<Vec<_>>()).stats().unwrap();
        assert!(stats.p99_ci.saturated);
        assert_eq!(stats.p99_ci.upper_ms, 50.0);
    }

    proptest! {
        #[test]
        fn quantiles_are_monotone_in_q(
            values_us in prop::collection::vec(0u64..10_000_000, 1..200),
            mut qs in prop::collection::vec(0.0001f64..=1.0, 2..8),
        ) {
            let mut s = LatencySeries::new();
            for v in &values_us {
                s.record(v * 1_000);
            }
            qs.sort_by(f64::total_cmp);
            let quantiles: Vec<f64> = qs.iter().map(|q| s.quantile_ms(*q).unwrap()).collect();
            prop_assert!(quantiles.windows(2).all(|w| w[0] <= w[1]), "{:?} {:?}", qs, quantiles);
            let stats = s.stats().unwrap();
            prop_assert!(stats.min_ms <= quantiles[0]);
            prop_assert!(*quantiles.last().unwrap() <= stats.max_ms);
        }
    }
}
