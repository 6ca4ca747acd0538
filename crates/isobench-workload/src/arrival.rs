//! Open-loop arrival processes: the offset (from the start of the run) at
//! which each request is meant to be sent. Offsets never decrease.
//!
//! Rate-driven processes (constant, Poisson, gamma) are built in two steps.
//! First they draw the cumulative *expected number of arrivals* `s`: the
//! first request at `s = 0`, then gaps of mean 1 — exactly 1 (constant),
//! exponential (Poisson), or gamma with shape `b` and scale `1/b` (gamma with
//! burstiness `b`: coefficient of variation `1/sqrt(b)`, `b = 1` is Poisson,
//! `b < 1` burstier, as vLLM's `--burstiness`). Then `s` is mapped to time
//! through the inverse of the integrated rate `Λ(t) = ∫ rate(u) du`. Without
//! a ramp-up `Λ(t) = R t`; with a linear ramp from 0 to `R` over `T`,
//! `Λ(t) = R t² / 2T` for `t <= T` and `R T / 2 + R (t - T)` after, so
//! arrivals follow the ramp exactly (for Poisson this is the inhomogeneous
//! Poisson process of that rate).
//!
//! Bursts send `burst_size` requests at the same offset every
//! `burst_interval`, the first burst at offset 0.

use std::fmt;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use rand_distr::{Exp1, Gamma};

use crate::lengths::LengthDistribution;

/// When requests arrive in an open loop.
pub(crate) trait ArrivalProcess: Send + fmt::Debug {
    /// The offset of the next request; never less than the previous one.
    fn next_offset(&mut self) -> Duration;
}

/// A duration from seconds, saturating instead of panicking.
pub(crate) fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.0)).unwrap_or(Duration::MAX)
}

/// How the gaps between rate-driven arrivals are drawn, in units of the
/// mean gap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gaps {
    Constant,
    Exponential,
    /// Gamma with shape `burstiness` and scale `1 / burstiness`.
    Gamma {
        law: Gamma<f64>,
        burstiness: f64,
    },
}

impl Gaps {
    /// Gamma gaps of shape `burstiness` and mean 1; `None` unless
    /// `burstiness` is a finite number > 0.
    pub(crate) fn gamma(burstiness: f64) -> Option<Self> {
        if !(burstiness.is_finite() && burstiness > 0.0) {
            return None;
        }
        let law = Gamma::new(burstiness, 1.0 / burstiness).ok()?;
        Some(Gaps::Gamma { law, burstiness })
    }

    fn draw(&self, rng: &mut StdRng) -> f64 {
        match self {
            Gaps::Constant => 1.0,
            Gaps::Exponential => rng.sample(Exp1),
            Gaps::Gamma { law, .. } => rng.sample(law),
        }
    }
}

/// Maps the expected number of arrivals to time for a rate that ramps
/// linearly from 0 to `rate` over `ramp_seconds`, then stays.
#[derive(Debug, Clone, Copy)]
struct RateClock {
    rate: f64,
    ramp_seconds: f64,
}

impl RateClock {
    /// `Λ⁻¹(expected)`, in seconds.
    fn time_of(&self, expected: f64) -> f64 {
        let during_ramp = self.rate * self.ramp_seconds / 2.0;
        if expected <= during_ramp {
            (2.0 * self.ramp_seconds * expected / self.rate).sqrt()
        } else {
            self.ramp_seconds + (expected - during_ramp) / self.rate
        }
    }
}

/// Constant, Poisson or gamma arrivals at a (possibly ramped) rate.
#[derive(Debug)]
pub(crate) struct RateProcess {
    gaps: Gaps,
    clock: RateClock,
    /// Expected arrivals up to the last request; `None` before the first.
    expected: Option<f64>,
    rng: StdRng,
}

impl RateProcess {
    /// `rate` in requests/s (> 0), reached after `ramp_up`.
    pub(crate) fn new(gaps: Gaps, rate: f64, ramp_up: Duration, rng: StdRng) -> Self {
        RateProcess {
            gaps,
            clock: RateClock {
                rate,
                ramp_seconds: ramp_up.as_secs_f64(),
            },
            expected: None,
            rng,
        }
    }
}

impl ArrivalProcess for RateProcess {
    fn next_offset(&mut self) -> Duration {
        let expected = match self.expected {
            None => 0.0,
            Some(previous) => previous + self.gaps.draw(&mut self.rng),
        };
        self.expected = Some(expected);
        seconds(self.clock.time_of(expected))
    }
}

/// Bursts of simultaneous requests at a fixed interval.
#[derive(Debug)]
pub(crate) struct BurstProcess {
    size: LengthDistribution,
    interval: Duration,
    /// Index of the burst being sent, and how many of its requests are left.
    burst: u32,
    left_in_burst: u32,
    rng: StdRng,
}

impl BurstProcess {
    pub(crate) fn new(size: LengthDistribution, interval: Duration, rng: StdRng) -> Self {
        BurstProcess {
            size,
            interval,
            burst: 0,
            left_in_burst: 0,
            rng,
        }
    }
}

impl ArrivalProcess for BurstProcess {
    fn next_offset(&mut self) -> Duration {
        if self.left_in_burst == 0 {
            // Sizes are >= 1, so the subtraction below never underflows.
            self.left_in_burst = self.size.sample(&mut self.rng);
            self.burst = self.burst.saturating_add(1);
        }
        self.left_in_burst -= 1;
        self.interval.saturating_mul(self.burst - 1)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn offsets(process: &mut dyn ArrivalProcess, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| process.next_offset().as_secs_f64())
            .collect()
    }

    fn gap_stats(offsets: &[f64]) -> (f64, f64) {
        let gaps: Vec<f64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        (mean, variance.sqrt() / mean)
    }

    fn rate(gaps: Gaps, rate: f64, ramp: f64, seed: u64) -> RateProcess {
        RateProcess::new(gaps, rate, seconds(ramp), StdRng::seed_from_u64(seed))
    }

    #[test]
    fn constant_rate_has_exact_gaps() {
        let offsets = offsets(&mut rate(Gaps::Constant, 4.0, 0.0, 1), 5);
        assert_eq!(offsets, [0.0, 0.25, 0.5, 0.75, 1.0]);
    }

    #[test]
    fn poisson_gaps_have_mean_one_over_rate_and_cv_one() {
        let offsets = offsets(&mut rate(Gaps::Exponential, 20.0, 0.0, 2), 100_001);
        let (mean, cv) = gap_stats(&offsets);
        assert!((mean * 20.0 - 1.0).abs() < 0.01, "mean gap {mean}");
        assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn gamma_burstiness_sets_the_cv() {
        for burstiness in [0.25, 1.0, 4.0] {
            let gaps = Gaps::gamma(burstiness).unwrap();
            let offsets = offsets(&mut rate(gaps, 50.0, 0.0, 3), 100_001);
            let (mean, cv) = gap_stats(&offsets);
            assert!(
                (mean * 50.0 - 1.0).abs() < 0.02,
                "b={burstiness}: mean gap {mean}"
            );
            let expected_cv = 1.0 / burstiness.sqrt();
            assert!(
                (cv / expected_cv - 1.0).abs() < 0.03,
                "b={burstiness}: cv {cv}"
            );
        }
        assert!(Gaps::gamma(0.0).is_none());
        assert!(Gaps::gamma(f64::NAN).is_none());
    }

    #[test]
    fn ramp_up_follows_the_integrated_rate() {
        // Constant arrivals at 10/s after a 4 s ramp: Λ(4 s) = 20 requests.
        let ramped = offsets(&mut rate(Gaps::Constant, 10.0, 4.0, 4), 41);
        for (k, offset) in ramped.iter().enumerate().take(21) {
            let expected = (2.0 * 4.0 * k as f64 / 10.0).sqrt();
            assert!(
                (offset - expected).abs() <= 1e-9,
                "request {k}: {offset} vs {expected}"
            );
        }
        // After the ramp, gaps are 1/rate.
        assert!((ramped[40] - ramped[39] - 0.1).abs() < 1e-9);
        assert!((ramped[40] - 6.0).abs() < 1e-9);
        // Poisson arrivals during the ramp: on average R T / 2 of them.
        let mut process = rate(Gaps::Exponential, 100.0, 10.0, 5);
        let during: Vec<f64> = std::iter::from_fn(|| Some(process.next_offset().as_secs_f64()))
            .take_while(|&t| t < 10.0)
            .collect();
        let half = during.iter().filter(|&&t| t < 5.0).count() as f64;
        assert!(
            (during.len() as f64 / 500.0 - 1.0).abs() < 0.1,
            "{}",
            during.len()
        );
        // A linear ramp puts a quarter of the ramp's arrivals in its first half.
        assert!((half / during.len() as f64 - 0.25).abs() < 0.05, "{half}");
    }

    #[test]
    fn same_seed_same_offsets() {
        let a = offsets(&mut rate(Gaps::Exponential, 7.0, 2.0, 9), 50);
        let b = offsets(&mut rate(Gaps::Exponential, 7.0, 2.0, 9), 50);
        let c = offsets(&mut rate(Gaps::Exponential, 7.0, 2.0, 10), 50);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bursts_share_an_offset() {
        let size = LengthDistribution::fixed(3);
        let mut process = BurstProcess::new(size, Duration::from_secs(2), StdRng::seed_from_u64(1));
        assert_eq!(
            offsets(&mut process, 7),
            [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 4.0]
        );
    }
}
