//! Integer length distributions: prompt and output lengths in tokens, and
//! burst sizes. Every draw is an integer >= 1, clamped to the optional
//! `min`/`max`.
//!
//! In a workload file a length is an integer (a fixed length) or a table:
//!
//! ```toml
//! input_tokens = 128                                         # fixed
//! input_tokens = { dist = "fixed", value = 128 }
//! input_tokens = { dist = "uniform", min = 16, max = 32 }    # both ends included
//! input_tokens = { dist = "normal", mean = 200, std_dev = 50, min = 8, max = 512 }
//! input_tokens = { dist = "lognormal", mean = 200, std_dev = 150, max = 2048 }
//! input_tokens = { dist = "empirical", path = "lengths.csv", max = 4096 }
//! ```
//!
//! `normal` and `lognormal` draw a real number, round it to the nearest
//! integer and clamp it to `[min, max]` (`min` defaults to 1), so a clamp
//! that cuts much of the mass moves the mean. The log-normal takes the mean
//! and standard deviation of the lengths themselves (see
//! [`Distribution`](crate::Distribution)). An empirical file holds one value
//! per line, or `value,weight` per line (a weight defaults to 1); blank lines
//! and lines starting with `#` are skipped; values are drawn in proportion
//! to their weights.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::distr::Distribution as _;
use rand::distr::weighted::WeightedIndex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::value::MapAccessDeserializer};

use crate::context::FileContext;
use crate::error::WorkloadError;
use isobench_common::Distribution;

/// A length as written in the file: an integer, or a table.
#[derive(Debug)]
pub(crate) enum RawLength {
    Fixed(i64),
    Table(RawLengthTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLengthTable {
    dist: LengthKind,
    value: Option<i64>,
    min: Option<i64>,
    max: Option<i64>,
    mean: Option<f64>,
    std_dev: Option<f64>,
    path: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum LengthKind {
    Fixed,
    Uniform,
    Normal,
    Lognormal,
    Empirical,
}

impl LengthKind {
    fn name(self) -> &'static str {
        match self {
            LengthKind::Fixed => "fixed",
            LengthKind::Uniform => "uniform",
            LengthKind::Normal => "normal",
            LengthKind::Lognormal => "lognormal",
            LengthKind::Empirical => "empirical",
        }
    }

    /// The fields this kind reads, required ones first.
    fn fields(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            LengthKind::Fixed => (&["value"], &[]),
            LengthKind::Uniform => (&["min", "max"], &[]),
            LengthKind::Normal | LengthKind::Lognormal => (&["mean", "std_dev"], &["min", "max"]),
            LengthKind::Empirical => (&["path"], &["min", "max"]),
        }
    }
}

impl<'de> Deserialize<'de> for RawLength {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawLengthVisitor;

        impl<'de> Visitor<'de> for RawLengthVisitor {
            type Value = RawLength;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an integer or a table such as { dist = \"uniform\", min = 16, max = 32 }",
                )
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawLength, E> {
                Ok(RawLength::Fixed(value))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawLength, E> {
                Ok(RawLength::Fixed(i64::try_from(value).unwrap_or(i64::MAX)))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLength, A::Error> {
                RawLengthTable::deserialize(MapAccessDeserializer::new(map)).map(RawLength::Table)
            }
        }

        deserializer.deserialize_any(RawLengthVisitor)
    }
}

/// A validated distribution of integer lengths >= 1.
#[derive(Debug, Clone)]
pub(crate) struct LengthDistribution {
    shape: LengthShape,
    min: u32,
    max: u32,
}

#[derive(Debug, Clone)]
enum LengthShape {
    Fixed(u32),
    /// Uniform on `[min, max]`, both included.
    Uniform,
    /// Rounded and clamped draws of a real distribution.
    Continuous(Distribution),
    Empirical(Arc<Empirical>),
}

#[derive(Debug)]
struct Empirical {
    path: PathBuf,
    values: Vec<u32>,
    weights: WeightedIndex<f64>,
}

impl LengthDistribution {
    /// Always `value` (>= 1).
    pub(crate) fn fixed(value: u32) -> Self {
        let value = value.max(1);
        LengthDistribution {
            shape: LengthShape::Fixed(value),
            min: value,
            max: value,
        }
    }

    /// Validates the file's form of the length at `field` (e.g. `request.input_tokens`).
    pub(crate) fn from_raw(
        raw: &RawLength,
        field: &str,
        context: &FileContext,
    ) -> Result<Self, WorkloadError> {
        let table = match raw {
            RawLength::Fixed(value) => return Ok(Self::fixed(count(*value, field, context)?)),
            RawLength::Table(table) => table,
        };
        let kind = table.dist;
        let (required, optional) = kind.fields();
        let present = [
            ("value", table.value.is_some()),
            ("min", table.min.is_some()),
            ("max", table.max.is_some()),
            ("mean", table.mean.is_some()),
            ("std_dev", table.std_dev.is_some()),
            ("path", table.path.is_some()),
        ];
        let accepted = || {
            required
                .iter()
                .chain(optional)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (name, is_present) in present {
            if is_present && !required.contains(&name) && !optional.contains(&name) {
                return Err(context.field_error(
                    &format!("{field}.{name}"),
                    format!(
                        "not used by dist = \"{}\" (it takes {})",
                        kind.name(),
                        accepted()
                    ),
                ));
            }
            if !is_present && required.contains(&name) {
                return Err(context.field_error(
                    field,
                    format!(
                        "dist = \"{}\" needs `{}` (it takes {})",
                        kind.name(),
                        required.join("` and `"),
                        accepted()
                    ),
                ));
            }
        }
        let bound = |name: &str, value: Option<i64>| {
            value
                .map(|value| count(value, &format!("{field}.{name}"), context))
                .transpose()
        };
        let min = bound("min", table.min)?.unwrap_or(1);
        let max = bound("max", table.max)?.unwrap_or(u32::MAX);
        if min > max {
            return Err(context.field_error(
                &format!("{field}.max"),
                format!("must be >= min ({min}), got {max}"),
            ));
        }
        let shape = match kind {
            LengthKind::Fixed => {
                let value = count(
                    table.value.unwrap_or_default(),
                    &format!("{field}.value"),
                    context,
                )?;
                return Ok(Self::fixed(value));
            }
            LengthKind::Uniform => LengthShape::Uniform,
            LengthKind::Normal | LengthKind::Lognormal => {
                let mean = table.mean.unwrap_or_default();
                let std_dev = table.std_dev.unwrap_or_default();
                let built = if kind == LengthKind::Normal {
                    Distribution::normal(mean, std_dev)
                } else {
                    Distribution::lognormal(mean, std_dev)
                };
                LengthShape::Continuous(
                    built.map_err(|error| context.field_error(field, error.message))?,
                )
            }
            LengthKind::Empirical => {
                let written = table.path.as_deref().unwrap_or(Path::new(""));
                let path = context.resolve(&format!("{field}.path"), written)?;
                let file = crate::input::open_regular(&path).map_err(|error| {
                    context.field_error(
                        &format!("{field}.path"),
                        format!("cannot read `{}`: {error}", path.display()),
                    )
                })?;
                LengthShape::Empirical(Arc::new(Empirical::read(&path, file)?))
            }
        };
        Ok(LengthDistribution { shape, min, max })
    }

    /// One length, >= 1 and within `[min, max]`.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        let drawn = match &self.shape {
            LengthShape::Fixed(value) => return *value,
            LengthShape::Uniform => return rng.random_range(self.min..=self.max),
            LengthShape::Continuous(distribution) => {
                // `as` saturates: huge draws become u32::MAX, then get clamped.
                distribution.sample(rng).round() as u32
            }
            LengthShape::Empirical(empirical) => empirical.values[empirical.weights.sample(rng)],
        };
        drawn.clamp(self.min, self.max)
    }

    /// The mean length: exact for fixed, uniform and empirical lengths; for
    /// normal and log-normal ones an estimate from 20,000 seeded draws, so
    /// that it includes the effect of rounding and clamping.
    pub(crate) fn mean(&self) -> f64 {
        match &self.shape {
            LengthShape::Fixed(value) => f64::from(*value),
            LengthShape::Uniform => (f64::from(self.min) + f64::from(self.max)) / 2.0,
            LengthShape::Empirical(empirical) => {
                let (mut weighted, mut total) = (0.0, 0.0);
                for (index, &value) in empirical.values.iter().enumerate() {
                    let weight = empirical.weights.weight(index).unwrap_or_default();
                    weighted += weight * f64::from(value.clamp(self.min, self.max));
                    total += weight;
                }
                weighted / total
            }
            LengthShape::Continuous(_) => {
                const DRAWS: u32 = 20_000;
                let mut rng = StdRng::seed_from_u64(0);
                let sum: f64 = (0..DRAWS).map(|_| f64::from(self.sample(&mut rng))).sum();
                sum / f64::from(DRAWS)
            }
        }
    }
}

impl fmt::Display for LengthDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            LengthShape::Fixed(value) => return write!(f, "{value}"),
            LengthShape::Uniform => return write!(f, "uniform {}..={}", self.min, self.max),
            LengthShape::Continuous(distribution) => write!(f, "{distribution}")?,
            LengthShape::Empirical(empirical) => {
                write!(f, "empirical `{}`", empirical.path.display())?
            }
        }
        match (self.min, self.max) {
            (1, u32::MAX) => Ok(()),
            (min, u32::MAX) => write!(f, " (min {min})"),
            (min, max) => write!(f, " (in {min}..={max})"),
        }
    }
}

/// An integer >= 1 that fits a `u32`, or an error naming `field`.
fn count(value: i64, field: &str, context: &FileContext) -> Result<u32, WorkloadError> {
    match u32::try_from(value) {
        Ok(count) if count >= 1 => Ok(count),
        _ => Err(context.field_error(
            field,
            format!("must be an integer from 1 to {}, got {value}", u32::MAX),
        )),
    }
}

impl Empirical {
    /// Reads the file line by line (each under [`crate::input::MAX_LINE_BYTES`]).
    fn read(path: &Path, reader: impl std::io::Read) -> Result<Self, WorkloadError> {
        const FORMAT: &str = "each line holds VALUE or VALUE,WEIGHT (VALUE an integer >= 1, \
                              WEIGHT a number >= 0); `#` starts a comment line";
        let mut values = Vec::new();
        let mut weights = Vec::new();
        crate::input::for_each_line(path, reader, |number, line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return Ok(());
            }
            let bad = |what: &str| {
                WorkloadError::data(path, Some(number), format!("{what} in `{line}`; {FORMAT}"))
            };
            let (value, weight) = match line.split_once(',') {
                Some((value, weight)) => (value.trim(), Some(weight.trim())),
                None => (line, None),
            };
            let value = value
                .parse::<u32>()
                .ok()
                .filter(|&value| value >= 1)
                .ok_or_else(|| bad("bad value"))?;
            let weight = match weight {
                Some(weight) => weight
                    .parse::<f64>()
                    .ok()
                    .filter(|weight| weight.is_finite() && *weight >= 0.0)
                    .ok_or_else(|| bad("bad weight"))?,
                None => 1.0,
            };
            values.push(value);
            weights.push(weight);
            Ok(())
        })?;
        let weights = WeightedIndex::new(&weights).map_err(|_| {
            WorkloadError::data(path, None, format!("no value with a weight > 0; {FORMAT}"))
        })?;
        Ok(Empirical {
            path: path.to_path_buf(),
            values,
            weights,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn parse(text: &str) -> Result<LengthDistribution, WorkloadError> {
        parse_in(Path::new("w.toml"), text)
    }

    fn parse_in(file: &Path, text: &str) -> Result<LengthDistribution, WorkloadError> {
        #[derive(Deserialize)]
        struct Doc {
            length: RawLength,
        }
        let context = FileContext::new(file, text.to_string());
        let doc: Doc = toml::from_str(text).map_err(|error| context.toml_error(&error))?;
        LengthDistribution::from_raw(&doc.length, "length", &context)
    }

    fn draws(distribution: &LengthDistribution, n: usize) -> Vec<u32> {
        let mut rng = StdRng::seed_from_u64(1);
        (0..n).map(|_| distribution.sample(&mut rng)).collect()
    }

    fn mean(values: &[u32]) -> f64 {
        values.iter().map(|&v| f64::from(v)).sum::<f64>() / values.len() as f64
    }

    #[test]
    fn fixed_and_uniform_lengths() {
        assert!(
            draws(&parse("length = 32").unwrap(), 100)
                .iter()
                .all(|&v| v == 32)
        );
        let fixed = parse("length = { dist = \"fixed\", value = 7 }").unwrap();
        assert_eq!(fixed.mean(), 7.0);
        let uniform = parse("length = { dist = \"uniform\", min = 16, max = 32 }").unwrap();
        let values = draws(&uniform, 50_000);
        assert_eq!(values.iter().min(), Some(&16));
        assert_eq!(values.iter().max(), Some(&32));
        assert!((mean(&values) - 24.0).abs() < 0.1, "{}", mean(&values));
        assert_eq!(uniform.mean(), 24.0);
    }

    #[test]
    fn normal_and_lognormal_lengths_are_rounded_and_clamped() {
        let normal =
            parse("length = { dist = \"normal\", mean = 100, std_dev = 10, max = 105 }").unwrap();
        let values = draws(&normal, 20_000);
        assert!(values.iter().all(|&v| (1..=105).contains(&v)));
        assert!(values.contains(&105));
        let lognormal =
            parse("length = { dist = \"lognormal\", mean = 200, std_dev = 150 }").unwrap();
        let values = draws(&lognormal, 100_000);
        assert!(
            (mean(&values) / 200.0 - 1.0).abs() < 0.02,
            "{}",
            mean(&values)
        );
        assert!((lognormal.mean() / 200.0 - 1.0).abs() < 0.02);
        // Median below the mean: the long right tail of chat lengths.
        let mut sorted = values.clone();
        sorted.sort_unstable();
        assert!(sorted[sorted.len() / 2] < 180);
    }

    #[test]
    fn empirical_lengths_follow_their_weights() {
        let folder = tempfile::tempdir().unwrap();
        let mut file = std::fs::File::create(folder.path().join("lengths.csv")).unwrap();
        writeln!(file, "# length,weight\n10,1\n\n20,3\n30").unwrap();
        let workload = folder.path().join("w.toml");
        let empirical = parse_in(
            &workload,
            "length = { dist = \"empirical\", path = \"lengths.csv\" }",
        )
        .unwrap();
        let values = draws(&empirical, 50_000);
        let share_of_20 = values.iter().filter(|&&v| v == 20).count() as f64 / 50_000.0;
        assert!((share_of_20 - 0.6).abs() < 0.01, "{share_of_20}");
        assert_eq!(empirical.mean(), (10.0 + 60.0 + 30.0) / 5.0);
    }

    #[test]
    fn malformed_empirical_files_give_the_line() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("bad.txt"), "10\n\nlength\n").unwrap();
        let workload = folder.path().join("w.toml");
        let error = parse_in(
            &workload,
            "length = { dist = \"empirical\", path = \"bad.txt\" }",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("bad.txt:3: bad value in `length`"),
            "{error}"
        );
        let error = parse_in(
            &workload,
            "length = { dist = \"empirical\", path = \"none.txt\" }",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("length.path: no file at `none.txt`"),
            "{error}"
        );
    }

    #[test]
    fn errors_name_the_field_and_what_it_takes() {
        for (text, needle) in [
            ("length = 0", "length: must be an integer from 1"),
            ("length = -4", "length: must be an integer from 1"),
            (
                "length = { dist = \"uniform\", min = 3 }",
                "needs `min` and `max`",
            ),
            (
                "length = { dist = \"uniform\", min = 3, max = 4, mean = 2.0 }",
                "length.mean: not used by dist = \"uniform\" (it takes min, max)",
            ),
            (
                "length = { dist = \"uniform\", min = 9, max = 4 }",
                "length.max: must be >= min (9)",
            ),
            (
                "length = { dist = \"normal\", mean = -1.0, std_dev = 2 }",
                "mean must be a finite",
            ),
            (
                "length = { dist = \"poisson\", mean = 1.0 }",
                "unknown variant `poisson`",
            ),
            (
                "length = { dist = \"fixed\", value = 1, seed = 3 }",
                "unknown field `seed`",
            ),
            ("length = \"many\"", "expected an integer or a table"),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.starts_with("w.toml:1:"), "{text}: {error}");
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn display_describes_the_distribution() {
        let normal =
            parse("length = { dist = \"normal\", mean = 50, std_dev = 5, min = 8, max = 64 }")
                .unwrap();
        assert_eq!(normal.to_string(), "normal:50,5 (in 8..=64)");
        let uniform = parse("length = { dist = \"uniform\", min = 8, max = 32 }").unwrap();
        assert_eq!(uniform.to_string(), "uniform 8..=32");
    }
}
