//! A distribution of non-negative values (latencies in ms, token counts,
//! sizes), written in a compact form that fits on a command line:
//!
//! | form                    | meaning                                               |
//! |-------------------------|-------------------------------------------------------|
//! | `20` or `fixed:20`      | always 20                                             |
//! | `uniform:10,30`         | uniform on [10, 30]                                   |
//! | `normal:50,5`           | normal, mean 50, standard deviation 5; draws below 0 become 0 |
//! | `lognormal:50,20`       | log-normal with **mean** 50 and **standard deviation** 20 |
//! | `exponential:8`         | exponential with mean 8                               |
//!
//! The log-normal is given by the mean and standard deviation of the values
//! themselves (what one measures in a log), not of their logarithm:
//! `sigma² = ln(1 + std²/mean²)`, `mu = ln(mean) - sigma²/2`, so its median is
//! `exp(mu)`, below the mean.
//!
//! [`Distribution`] parses from and prints to this form (`FromStr`,
//! `Display`, serde as a string), and draws with any [`rand::Rng`].

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use rand_distr::{Exp1, StandardNormal};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The accepted compact forms, quoted in error messages.
pub const DISTRIBUTION_FORMS: &str = "V or fixed:V, uniform:MIN,MAX, normal:MEAN,STD, \
     lognormal:MEAN,STD, exponential:MEAN, with values >= 0";

/// A compact distribution string (such as `uniform:10,30`) that is not
/// valid: `input` is the text as given, `message` what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid distribution `{input}`: {message} (accepted: {DISTRIBUTION_FORMS})")]
pub struct DistributionError {
    pub input: String,
    pub message: String,
}

/// A validated distribution of non-negative `f64` values.
///
/// ```
/// use isobench_common::Distribution;
/// use rand::SeedableRng;
///
/// let ttft: Distribution = "normal:50,5".parse().unwrap();
/// let mut rng = rand::rngs::StdRng::seed_from_u64(7);
/// assert!(ttft.sample(&mut rng) >= 0.0);
/// assert_eq!(ttft.to_string(), "normal:50,5");
/// assert_eq!(ttft.mean(), 50.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distribution {
    shape: Shape,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Fixed(f64),
    Uniform {
        min: f64,
        max: f64,
    },
    Normal {
        mean: f64,
        std_dev: f64,
    },
    /// `mean`/`std_dev` as given; `mu`/`sigma` of the underlying normal.
    LogNormal {
        mean: f64,
        std_dev: f64,
        mu: f64,
        sigma: f64,
    },
    Exponential {
        mean: f64,
    },
}

impl Distribution {
    /// Always `value`.
    pub fn fixed(value: f64) -> Result<Self, DistributionError> {
        Self::checked(Shape::Fixed(value), &[("value", value)])
    }

    /// Uniform on `[min, max]`.
    pub fn uniform(min: f64, max: f64) -> Result<Self, DistributionError> {
        let shape = Shape::Uniform { min, max };
        let checked = Self::checked(shape, &[("min", min), ("max", max)])?;
        if min > max {
            return Err(invalid(&shape, "min must not exceed max"));
        }
        Ok(checked)
    }

    /// Normal with the given mean and standard deviation; draws below zero
    /// are clamped to zero.
    pub fn normal(mean: f64, std_dev: f64) -> Result<Self, DistributionError> {
        let shape = Shape::Normal { mean, std_dev };
        Self::checked(shape, &[("mean", mean), ("std", std_dev)])
    }

    /// Log-normal whose values have the given mean and standard deviation.
    pub fn lognormal(mean: f64, std_dev: f64) -> Result<Self, DistributionError> {
        let sigma_squared = (1.0 + (std_dev / mean).powi(2)).ln();
        let shape = Shape::LogNormal {
            mean,
            std_dev,
            mu: mean.ln() - sigma_squared / 2.0,
            sigma: sigma_squared.sqrt(),
        };
        let checked = Self::checked(shape, &[("mean", mean), ("std", std_dev)])?;
        if mean == 0.0 {
            return Err(invalid(&shape, "the mean must be > 0"));
        }
        Ok(checked)
    }

    /// Exponential with the given mean.
    pub fn exponential(mean: f64) -> Result<Self, DistributionError> {
        Self::checked(Shape::Exponential { mean }, &[("mean", mean)])
    }

    /// `shape` if every named parameter is finite and non-negative.
    fn checked(shape: Shape, parameters: &[(&str, f64)]) -> Result<Self, DistributionError> {
        for &(name, value) in parameters {
            if !(value.is_finite() && value >= 0.0) {
                return Err(invalid(
                    &shape,
                    &format!("{name} must be a finite number >= 0, got {value}"),
                ));
            }
        }
        Ok(Distribution { shape })
    }

    /// One draw; never negative, never NaN.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self.shape {
            Shape::Fixed(value) => value,
            Shape::Uniform { min, max } => min + (max - min) * rng.random::<f64>(),
            Shape::Normal { mean, std_dev } => {
                let z: f64 = rng.sample(StandardNormal);
                (mean + std_dev * z).max(0.0)
            }
            Shape::LogNormal { mu, sigma, .. } => {
                let z: f64 = rng.sample(StandardNormal);
                (mu + sigma * z).exp()
            }
            Shape::Exponential { mean } => {
                let unit: f64 = rng.sample(Exp1);
                mean * unit
            }
        }
    }

    /// The nominal mean (for `normal`, before clamping at zero).
    pub fn mean(&self) -> f64 {
        match self.shape {
            Shape::Fixed(value) => value,
            Shape::Uniform { min, max } => (min + max) / 2.0,
            Shape::Normal { mean, .. }
            | Shape::LogNormal { mean, .. }
            | Shape::Exponential { mean } => mean,
        }
    }
}

fn invalid(input: &dyn fmt::Display, message: &str) -> DistributionError {
    DistributionError {
        input: input.to_string(),
        message: message.to_string(),
    }
}

impl FromStr for Distribution {
    type Err = DistributionError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let trimmed = input.trim();
        let (name, args) = trimmed.split_once(':').unwrap_or(("fixed", trimmed));
        let values = args
            .split(',')
            .map(|arg| arg.trim().parse::<f64>())
            .collect::<Result<Vec<f64>, _>>()
            .map_err(|_| invalid(&input, "parameters must be numbers"))?;
        let arity = |expected: usize, names: &str| {
            if values.len() == expected {
                Ok(())
            } else {
                Err(invalid(&input, &format!("`{name}` takes {names}")))
            }
        };
        let parsed = match name.trim() {
            "fixed" => arity(1, "one value").and_then(|()| Distribution::fixed(values[0])),
            "uniform" => {
                arity(2, "MIN,MAX").and_then(|()| Distribution::uniform(values[0], values[1]))
            }
            "normal" => {
                arity(2, "MEAN,STD").and_then(|()| Distribution::normal(values[0], values[1]))
            }
            "lognormal" => {
                arity(2, "MEAN,STD").and_then(|()| Distribution::lognormal(values[0], values[1]))
            }
            "exponential" => arity(1, "MEAN").and_then(|()| Distribution::exponential(values[0])),
            other => Err(invalid(&input, &format!("unknown distribution `{other}`"))),
        };
        // Report the user's text, not the normalised one built by the constructor.
        parsed.map_err(|error| DistributionError {
            input: input.to_string(),
            message: error.message,
        })
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shape.fmt(f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Shape::Fixed(value) => write!(f, "fixed:{value}"),
            Shape::Uniform { min, max } => write!(f, "uniform:{min},{max}"),
            Shape::Normal { mean, std_dev } => write!(f, "normal:{mean},{std_dev}"),
            Shape::LogNormal { mean, std_dev, .. } => write!(f, "lognormal:{mean},{std_dev}"),
            Shape::Exponential { mean } => write!(f, "exponential:{mean}"),
        }
    }
}

impl Serialize for Distribution {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Distribution {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    const DRAWS: usize = 200_000;

    fn moments(distribution: &Distribution) -> (f64, f64) {
        let mut rng = StdRng::seed_from_u64(11);
        let draws: Vec<f64> = (0..DRAWS).map(|_| distribution.sample(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / DRAWS as f64;
        let variance = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / DRAWS as f64;
        (mean, variance.sqrt())
    }

    fn assert_close(actual: f64, expected: f64, relative: f64) {
        assert!(
            (actual - expected).abs() <= relative * expected.abs(),
            "{actual} is not within {relative} of {expected}"
        );
    }

    #[test]
    fn sample_moments_match_the_parameters() {
        let cases = [
            ("fixed:20", 20.0, 0.0),
            ("uniform:10,30", 20.0, 20.0 / 12f64.sqrt()),
            ("normal:50,5", 50.0, 5.0),
            ("lognormal:50,20", 50.0, 20.0),
            ("exponential:8", 8.0, 8.0),
        ];
        for (form, mean, std_dev) in cases {
            let distribution: Distribution = form.parse().unwrap();
            let (sample_mean, sample_std) = moments(&distribution);
            assert_close(sample_mean, mean, 0.01);
            if std_dev == 0.0 {
                assert_eq!(sample_std, 0.0);
            } else {
                assert_close(sample_std, std_dev, 0.03);
            }
            assert_eq!(distribution.mean(), mean, "{form}");
        }
    }

    #[test]
    fn normal_draws_are_clamped_at_zero() {
        let distribution: Distribution = "normal:1,10".parse().unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let draws: Vec<f64> = (0..10_000).map(|_| distribution.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&x| x >= 0.0));
        assert!(draws.contains(&0.0));
    }

    #[test]
    fn compact_form_round_trips_through_display() {
        for form in [
            "fixed:20",
            "uniform:10,30",
            "normal:50,5",
            "lognormal:50,20",
            "exponential:8",
            "fixed:0.25",
        ] {
            let distribution: Distribution = form.parse().unwrap();
            assert_eq!(distribution.to_string(), form);
        }
        let bare: Distribution = " 12.5 ".parse().unwrap();
        assert_eq!(bare, Distribution::fixed(12.5).unwrap());
        let spaced: Distribution = "uniform: 1 , 2".parse().unwrap();
        assert_eq!(spaced, Distribution::uniform(1.0, 2.0).unwrap());
    }

    #[test]
    fn invalid_forms_say_what_is_accepted() {
        for (form, needle) in [
            ("gauss:1,2", "unknown distribution `gauss`"),
            ("uniform:30,10", "min must not exceed max"),
            ("uniform:10", "`uniform` takes MIN,MAX"),
            ("normal:a,b", "parameters must be numbers"),
            ("exponential:-1", "mean must be a finite number >= 0"),
            ("lognormal:0,1", "the mean must be > 0"),
            ("fixed:NaN", "value must be a finite number >= 0"),
        ] {
            let error = form.parse::<Distribution>().unwrap_err();
            let message = error.to_string();
            assert!(message.contains(needle), "{form}: {message}");
            assert!(message.contains(&format!("`{form}`")), "{message}");
            assert!(message.contains("uniform:MIN,MAX"), "{message}");
        }
    }

    #[test]
    fn serde_uses_the_compact_form() {
        let distribution: Distribution =
            serde_json::from_str("\"lognormal:50,20\"").expect("valid form");
        assert_eq!(
            serde_json::to_string(&distribution).unwrap(),
            "\"lognormal:50,20\""
        );
        let error = serde_json::from_str::<Distribution>("\"uniform:3\"").unwrap_err();
        assert!(error.to_string().contains("MIN,MAX"), "{error}");
    }

    #[test]
    fn same_seed_same_draws() {
        let distribution: Distribution = "exponential:3".parse().unwrap();
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..5)
                .map(|_| distribution.sample(&mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }
}
