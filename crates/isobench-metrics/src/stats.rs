//! Statistics on per-request samples: is a difference between two runs
//! real, and which samples stand out?
//!
//! - [`bootstrap_differences`]: the relative difference of a statistic
//!   (p50, p99, mean) between a baseline and a candidate, candidate /
//!   baseline - 1, with a 95% percentile-bootstrap confidence interval:
//!   both sample sets are resampled with replacement [`RESAMPLES`] times
//!   (independently, from a fixed seed, so a comparison is reproducible)
//!   and the interval is the 2.5th to 97.5th percentile of the resampled
//!   differences. The difference is significant when the interval
//!   excludes 0. A percentile needs enough samples for its own interval to
//!   be bounded ([`fewest_samples`]: 381 for p99); fewer are flagged, never
//!   judged.
//! - [`mann_whitney`]: the Mann-Whitney U test (Wilcoxon rank-sum) of
//!   whether one run's values tend to be lower than the other's, two-sided,
//!   normal approximation with tie and continuity corrections, and the
//!   probability that a candidate value is below a baseline value.
//! - [`iqr_outliers`]: Tukey's fences, below Q1 - 1.5 IQR and above
//!   Q3 + 1.5 IQR (quartiles interpolated as numpy's default does).
//!   Outliers are counted and reported, never removed.
//!
//! Each verdict is at the 5% level for that one figure: among the dozen
//! figures of a comparison of two identical configurations, one may come
//! out significant by chance about half the time; read a lone borderline
//! verdict with that in mind.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::series::fewest_samples_bounding;

/// Bootstrap resamples per comparison.
pub const RESAMPLES: usize = 2_000;

/// The fewest samples a side needs for any comparison (Mann-Whitney's
/// normal approximation, a bootstrap of the mean).
pub const MIN_SAMPLES: usize = 20;

/// The bootstrap's seed: the same samples always give the same interval.
const SEED: u64 = 0x1503_BE4C;

/// The statistic of a metric that a comparison judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    P50,
    P99,
    Mean,
}

impl Statistic {
    pub fn name(&self) -> &'static str {
        match self {
            Statistic::P50 => "p50",
            Statistic::P99 => "p99",
            Statistic::Mean => "mean",
        }
    }

    /// The statistic of `values` (any order; sorted in place).
    pub fn of(&self, values: &mut [f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        Some(match self {
            Statistic::Mean => values.iter().sum::<f64>() / values.len() as f64,
            Statistic::P50 => rank_value(values, 0.50),
            Statistic::P99 => rank_value(values, 0.99),
        })
    }
}

/// The fewest samples a side needs for `statistic` to be compared.
pub fn fewest_samples(statistic: Statistic) -> usize {
    let bounding = |q| usize::try_from(fewest_samples_bounding(q)).unwrap_or(usize::MAX);
    match statistic {
        Statistic::Mean => MIN_SAMPLES,
        Statistic::P50 => bounding(0.50).max(MIN_SAMPLES),
        Statistic::P99 => bounding(0.99).max(MIN_SAMPLES),
    }
}

/// The value of rank `ceil(q * n)` (1-based), the rule every isobench
/// percentile follows; reorders `values`.
fn rank_value(values: &mut [f64], q: f64) -> f64 {
    let n = values.len();
    let rank = ((q * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
    let (_, value, _) = values.select_nth_unstable_by(rank - 1, f64::total_cmp);
    *value
}

/// Candidate / baseline - 1 of one statistic, with its 95% bootstrap
/// interval (fractions: -0.18 is 18% lower).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub relative: f64,
    pub lower: f64,
    pub upper: f64,
}

impl Difference {
    /// The interval excludes no change.
    pub fn significant(&self) -> bool {
        self.lower > 0.0 || self.upper < 0.0
    }
}

/// The relative differences of several statistics between two sample
/// sets, each with its bootstrap interval; `None` for a statistic with a
/// zero baseline. Each resample serves every statistic.
pub fn bootstrap_differences(
    baseline: &[f64],
    candidate: &[f64],
    statistics: &[Statistic],
) -> Vec<Option<Difference>> {
    let point = |stat: &Statistic| {
        let base = stat.of(&mut baseline.to_vec())?;
        let cand = stat.of(&mut candidate.to_vec())?;
        (base > 0.0).then(|| cand / base - 1.0)
    };
    let points: Vec<Option<f64>> = statistics.iter().map(point).collect();
    if baseline.is_empty() || candidate.is_empty() {
        return vec![None; statistics.len()];
    }
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut base_resample = vec![0.0; baseline.len()];
    let mut cand_resample = vec![0.0; candidate.len()];
    let mut resampled: Vec<Vec<f64>> = vec![Vec::with_capacity(RESAMPLES); statistics.len()];
    for _ in 0..RESAMPLES {
        resample(baseline, &mut base_resample, &mut rng);
        resample(candidate, &mut cand_resample, &mut rng);
        for (stat, differences) in statistics.iter().zip(&mut resampled) {
            let (Some(base), Some(cand)) =
                (stat.of(&mut base_resample), stat.of(&mut cand_resample))
            else {
                continue;
            };
            if base > 0.0 {
                differences.push(cand / base - 1.0);
            }
        }
    }
    points
        .into_iter()
        .zip(resampled)
        .map(|(relative, mut differences)| {
            let relative = relative?;
            if differences.is_empty() {
                return None;
            }
            differences.sort_by(f64::total_cmp);
            Some(Difference {
                relative,
                lower: interpolated(&differences, 0.025),
                upper: interpolated(&differences, 0.975),
            })
        })
        .collect()
}

fn resample(from: &[f64], into: &mut [f64], rng: &mut ChaCha8Rng) {
    for slot in into.iter_mut() {
        *slot = from[rng.random_range(0..from.len())];
    }
}

/// The q-quantile of sorted values, interpolated between neighbours
/// (numpy's default).
fn interpolated(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(sorted.len() - 1);
    let part = position - below as f64;
    sorted[below] + (sorted[above] - sorted[below]) * part
}

/// The Mann-Whitney U test of a baseline against a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MannWhitney {
    /// U of the candidate: pairs (baseline, candidate) with the candidate
    /// higher, ties counted half.
    pub u: f64,
    /// The normal approximation's z (tie- and continuity-corrected).
    pub z: f64,
    /// Two-sided p-value.
    pub p_value: f64,
    /// The probability that a candidate value is below a baseline value
    /// (ties half): 0.5 when neither tends lower.
    pub candidate_lower_probability: f64,
}

impl MannWhitney {
    pub fn significant(&self) -> bool {
        self.p_value < 0.05
    }
}

/// The Mann-Whitney U test; `None` when a side has fewer than
/// [`MIN_SAMPLES`] values or every value is the same.
pub fn mann_whitney(baseline: &[f64], candidate: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (baseline.len(), candidate.len());
    if n1 < MIN_SAMPLES || n2 < MIN_SAMPLES {
        return None;
    }
    let mut all: Vec<(f64, bool)> = baseline
        .iter()
        .map(|&v| (v, false))
        .chain(candidate.iter().map(|&v| (v, true)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = all.len();
    let mut candidate_rank_sum = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean.
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let ties = (j - i + 1) as f64;
        tie_term += ties * ties * ties - ties;
        candidate_rank_sum += rank * all[i..=j].iter().filter(|(_, c)| *c).count() as f64;
        i = j + 1;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = candidate_rank_sum - n2f * (n2f + 1.0) / 2.0;
    let mean = n1f * n2f / 2.0;
    let variance = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if variance <= 0.0 {
        return None;
    }
    let distance = ((u - mean).abs() - 0.5).max(0.0);
    let z = distance / variance.sqrt() * (u - mean).signum();
    Some(MannWhitney {
        u,
        z,
        p_value: (2.0 * normal_upper_tail(z.abs())).min(1.0),
        candidate_lower_probability: 1.0 - u / (n1f * n2f),
    })
}

/// P(Z > z) for a standard normal Z, from the complementary error function
/// (Numerical Recipes' erfc, relative error below 1.2e-7).
fn normal_upper_tail(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    erfc / 2.0
}

/// The values outside Tukey's fences.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outliers {
    /// Q1 - 1.5 IQR.
    pub low_fence: f64,
    /// Q3 + 1.5 IQR.
    pub high_fence: f64,
    /// Values below the low fence.
    pub low: usize,
    /// Values above the high fence.
    pub high: usize,
}

/// Tukey's IQR rule over `values`; `None` below 4 values.
pub fn iqr_outliers(values: &[f64]) -> Option<Outliers> {
    if values.len() < 4 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (q1, q3) = (interpolated(&sorted, 0.25), interpolated(&sorted, 0.75));
    let iqr = q3 - q1;
    let (low_fence, high_fence) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    Some(Outliers {
        low_fence,
        high_fence,
        low: sorted.iter().filter(|&&v| v < low_fence).count(),
        high: sorted.iter().filter(|&&v| v > high_fence).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic sample of `n` values from a normal(mean, sd).
    fn normal(n: usize, mean: f64, sd: f64, seed: u64) -> Vec<f64> {
        use rand_distr::{Distribution, Normal};
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let normal = Normal::new(mean, sd).unwrap();
        (0..n).map(|_| normal.sample(&mut rng)).collect()
    }

    #[test]
    fn statistics_follow_the_rank_rule() {
        let mut values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(Statistic::P50.of(&mut values), Some(50.0));
        assert_eq!(Statistic::P99.of(&mut values), Some(99.0));
        assert_eq!(Statistic::Mean.of(&mut values), Some(50.5));
        assert_eq!(Statistic::P99.of(&mut []), None);
    }

    #[test]
    fn a_planted_difference_is_found_inside_its_interval() {
        let base = normal(400, 100.0, 10.0, 1);
        let cand: Vec<f64> = normal(400, 100.0, 10.0, 2)
            .iter()
            .map(|v| v * 0.8)
            .collect();
        let [p50, mean] =
            bootstrap_differences(&base, &cand, &[Statistic::P50, Statistic::Mean])[..]
        else {
            unreachable!()
        };
        for difference in [p50.unwrap(), mean.unwrap()] {
            assert!(difference.significant(), "{difference:?}");
            assert!(difference.lower < -0.2 + 0.03 && -0.2 - 0.03 < difference.upper);
            assert!(
                difference.lower <= difference.relative && difference.relative <= difference.upper
            );
        }
        let test = mann_whitney(&base, &cand).unwrap();
        assert!(test.p_value < 1e-6, "{test:?}");
        assert!(test.candidate_lower_probability > 0.9, "{test:?}");
    }

    /// The interval's coverage: over many pairs of samples from one
    /// distribution, about 95% of the intervals contain no change.
    #[test]
    fn intervals_between_samples_of_one_distribution_cover_zero_about_95_percent() {
        let trials = 60;
        let covered = (0..trials)
            .filter(|&t| {
                let a = normal(100, 50.0, 5.0, 100 + t);
                let b = normal(100, 50.0, 5.0, 500 + t);
                let d = bootstrap_differences(&a, &b, &[Statistic::Mean])[0].unwrap();
                !d.significant()
            })
            .count();
        // Binomial(60, 0.95): 51 or more in 99.8% of seeds; these are fixed.
        assert!(covered >= 51, "{covered} of {trials}");
    }

    #[test]
    fn mann_whitney_matches_a_brute_force_count() {
        // Baseline 1..=20, candidate 11..=30: 10 values in common (ties).
        let base: Vec<f64> = (1..=20).map(f64::from).collect();
        let cand: Vec<f64> = (11..=30).map(f64::from).collect();
        let test = mann_whitney(&base, &cand).unwrap();
        let mut u = 0.0;
        for &b in &base {
            for &c in &cand {
                u += if c > b {
                    1.0
                } else if c == b {
                    0.5
                } else {
                    0.0
                };
            }
        }
        assert_eq!(test.u, u);
        assert!(test.z > 0.0 && test.p_value < 0.01, "{test:?}");
        let same = mann_whitney(&base, &base).unwrap();
        assert!((same.p_value - 1.0).abs() < 1e-9, "{same:?}");
        assert_eq!(mann_whitney(&base[..5], &cand), None);
    }

    #[test]
    fn normal_tail_matches_known_values() {
        assert!((normal_upper_tail(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_upper_tail(-1.0) - 0.841_344_7).abs() < 1e-6);
    }

    #[test]
    fn iqr_fences_count_but_keep_outliers() {
        let mut values: Vec<f64> = (1..=20).map(f64::from).collect();
        values.extend([100.0, 120.0, -60.0]);
        let outliers = iqr_outliers(&values).unwrap();
        assert_eq!((outliers.low, outliers.high), (1, 2));
        assert!(outliers.high_fence < 100.0 && outliers.low_fence > -60.0);
        assert_eq!(iqr_outliers(&values[..3]), None);
    }

    #[test]
    fn too_few_samples_for_p99_are_below_its_bounding_count() {
        assert_eq!(fewest_samples(Statistic::Mean), MIN_SAMPLES);
        assert!(fewest_samples(Statistic::P99) > 370);
        assert_eq!(fewest_samples(Statistic::P50), MIN_SAMPLES);
    }
}
