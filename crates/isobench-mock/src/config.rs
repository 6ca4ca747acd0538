//! What the mock injects: latencies, output lengths, chunking, errors and a
//! concurrency limit, each latency or length a [`Distribution`] written as
//! on the command line (`fixed:20`, `uniform:10,30`, `normal:50,5`,
//! `lognormal:50,20`, `exponential:8`).
//!
//! [`MockConfig`] is the raw form (clap flags, or built in code from
//! [`MockConfig::default`], which injects nothing: zero latency, no errors);
//! [`MockConfig::validate`] turns it into the [`Behaviour`] the server runs.

use std::fmt;

use isobench_common::Distribution;

use crate::MockError;

/// Output length when neither `--output-len` nor the request's `max_tokens` gives one.
pub const DEFAULT_OUTPUT_TOKENS: u32 = 16;

/// The environment variable the mock's API key is read from.
pub const API_KEY_ENV: &str = "ISOBENCH_MOCK_API_KEY";

/// The mock's behaviour, as flags. `Debug` never shows the API key.
#[derive(Clone, clap::Args)]
pub struct MockConfig {
    /// A model name the mock serves; repeat for several. Requests for other
    /// models get 404.
    #[arg(long = "model", value_name = "NAME", default_value = "mock")]
    pub models: Vec<String>,

    /// Time to first token, in milliseconds, from the request's arrival.
    #[arg(long, value_name = "DIST", default_value = "fixed:0")]
    pub ttft: Distribution,

    /// Time per output token after the first, in milliseconds, drawn per token.
    #[arg(long, value_name = "DIST", default_value = "fixed:0")]
    pub itl: Distribution,

    /// Output length in tokens (at least 1, at most the request's
    /// `max_tokens`). Default: the request's `max_tokens`, or 16.
    #[arg(long, value_name = "DIST")]
    pub output_len: Option<Distribution>,

    /// Tokens carried by each streamed event (at least 1), drawn per event.
    #[arg(long, value_name = "DIST", default_value = "fixed:1")]
    pub tokens_per_event: Distribution,

    /// Probability in [0, 1] that a request fails at once with HTTP 500.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub error_rate: f64,

    /// Probability in [0, 1] that an answer is cut off mid-body (the
    /// connection is aborted after a random number of events).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub cut_rate: f64,

    /// Requests served at once at most; above it the mock answers 429 with
    /// `Retry-After`. Default: unlimited.
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<usize>,

    /// Answers generated at once at most; more wait in a first-come queue
    /// and start (their TTFT counted from then) when one ends, so the
    /// mock's capacity is N / (TTFT + (tokens - 1) x ITL). Default: unlimited.
    #[arg(long, value_name = "N")]
    pub max_running: Option<usize>,

    /// The `Retry-After` of a 429, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    pub retry_after: u64,

    /// Seed of the draws: the same seed gives the same answers in the same order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// When set, requests must carry `Authorization: Bearer KEY` (else 401).
    /// Read from the ISOBENCH_MOCK_API_KEY environment variable, never a flag.
    #[arg(skip = std::env::var(API_KEY_ENV).ok().filter(|key| !key.is_empty()))]
    pub api_key: Option<String>,

    /// Keep the instant each event was written, per request, for
    /// [`MockHandle::take_write_log`](crate::MockHandle::take_write_log)
    /// (benchmarks that compare measured latencies with the truth).
    #[arg(skip)]
    pub record_writes: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            models: vec!["mock".to_owned()],
            ttft: fixed(0.0),
            itl: fixed(0.0),
            output_len: None,
            tokens_per_event: fixed(1.0),
            error_rate: 0.0,
            cut_rate: 0.0,
            max_concurrency: None,
            max_running: None,
            retry_after: 1,
            seed: 0,
            api_key: None,
            record_writes: false,
        }
    }
}

impl fmt::Debug for MockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockConfig")
            .field("models", &self.models)
            .field("ttft", &self.ttft)
            .field("itl", &self.itl)
            .field("output_len", &self.output_len)
            .field("tokens_per_event", &self.tokens_per_event)
            .field("error_rate", &self.error_rate)
            .field("cut_rate", &self.cut_rate)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_running", &self.max_running)
            .field("retry_after", &self.retry_after)
            .field("seed", &self.seed)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("record_writes", &self.record_writes)
            .finish()
    }
}

/// A constant distribution (constants are always valid).
fn fixed(value: f64) -> Distribution {
    Distribution::fixed(value).expect("a finite non-negative constant is a valid distribution")
}

/// A validated [`MockConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Behaviour {
    pub config: MockConfig,
}

impl MockConfig {
    /// Checks ranges the flag types cannot express.
    pub(crate) fn validate(self) -> Result<Behaviour, MockError> {
        for (flag, value) in [
            ("--error-rate", self.error_rate),
            ("--cut-rate", self.cut_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(MockError::InvalidConfig {
                    flag,
                    value: value.to_string(),
                    expected: "a probability between 0 and 1",
                });
            }
        }
        for (flag, value) in [
            ("--max-concurrency", self.max_concurrency),
            ("--max-running", self.max_running),
        ] {
            if value == Some(0) {
                return Err(MockError::InvalidConfig {
                    flag,
                    value: "0".to_owned(),
                    expected: "a number of requests >= 1",
                });
            }
        }
        if self.models.iter().all(|m| m.trim().is_empty()) {
            return Err(MockError::InvalidConfig {
                flag: "--model",
                value: self.models.join(","),
                expected: "at least one non-empty model name",
            });
        }
        Ok(Behaviour { config: self })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        mock: MockConfig,
    }

    #[test]
    fn flags_parse_into_distributions() {
        let cli = Cli::try_parse_from([
            "mock",
            "--ttft",
            "normal:20,2",
            "--itl",
            "5",
            "--tokens-per-event",
            "fixed:4",
            "--model",
            "a",
            "--model",
            "b",
            "--max-concurrency",
            "8",
        ])
        .unwrap();
        assert_eq!(cli.mock.ttft.to_string(), "normal:20,2");
        assert_eq!(cli.mock.itl.mean(), 5.0);
        assert_eq!(cli.mock.models, ["a", "b"]);
        assert!(cli.mock.validate().is_ok());
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Cli::try_parse_from(["mock", "--itl", "gamma:1"])
            .err()
            .unwrap();
        assert!(err.to_string().contains("--itl"), "{err}");
        let config = MockConfig {
            error_rate: 1.5,
            ..MockConfig::default()
        };
        let err = config.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value `1.5` for --error-rate: expected a probability between 0 and 1"
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let config = MockConfig {
            api_key: Some("sk-mock-secret".into()),
            ..MockConfig::default()
        };
        assert!(!format!("{config:?}").contains("sk-mock-secret"));
    }
}
