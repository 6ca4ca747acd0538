//! Service-level objectives.
//!
//! An SLO is written `METRIC_STATISTIC=VALUE`: `ttft_p99=500ms`,
//! `tpot_p99=50ms`, `itl_p95=30ms`, `e2el_p50=2s`, `ttft_mean=300ms`;
//! several are joined with commas. Metrics are `ttft`, `tpot`, `itl` and
//! `e2el` (`e2e` is accepted for the latter); statistics are `mean`,
//! `median` (= `p50`) and `pN` for 0 < N < 100; units are `us`, `ms`, `s`.
//!
//! Each SLO is used twice:
//! - **per request**, for goodput: a request is *good* when it succeeded and
//!   each of its own values is within the threshold of every SLO on that
//!   metric (the statistic plays no part here, as in vLLM's `--goodput`). A
//!   request's ITL value is its largest gap between content events; a value
//!   a request does not have (TPOT of a one-token answer, TTFT of an empty
//!   one) does not disqualify it.
//! - **in aggregate**: the run's statistic (from the send-time histograms,
//!   ITL per event) must be within the threshold. The result is reported as
//!   pass/fail with the measured value; a metric without samples fails.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::MetricsError;

/// The latency an SLO constrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SloMetric {
    /// Time to first token, from the send.
    Ttft,
    /// Time per output token after the first.
    Tpot,
    /// Inter-token latency: the gap between consecutive content events.
    Itl,
    /// End-to-end latency, from the send.
    E2el,
}

impl SloMetric {
    /// The name used in SLO text and in vLLM's keys.
    pub fn name(&self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::Itl => "itl",
            SloMetric::E2el => "e2el",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "ttft" => Some(SloMetric::Ttft),
            "tpot" => Some(SloMetric::Tpot),
            "itl" => Some(SloMetric::Itl),
            "e2el" | "e2e" => Some(SloMetric::E2el),
            _ => None,
        }
    }
}

/// Which statistic of the run an SLO checks in aggregate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SloStatistic {
    Mean,
    /// A percentile, 0 < p < 100 (99.9 for p99.9).
    Percentile(f64),
}

impl SloStatistic {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "mean" => Some(SloStatistic::Mean),
            "median" => Some(SloStatistic::Percentile(50.0)),
            _ => {
                let p: f64 = text.strip_prefix('p')?.parse().ok()?;
                (p > 0.0 && p < 100.0).then_some(SloStatistic::Percentile(p))
            }
        }
    }
}

impl fmt::Display for SloStatistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SloStatistic::Mean => f.write_str("mean"),
            SloStatistic::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

/// One service-level objective: `metric`'s `statistic` at most `threshold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub metric: SloMetric,
    pub statistic: SloStatistic,
    pub threshold: Duration,
}

impl Slo {
    /// Parses one SLO, `ttft_p99=500ms`.
    pub fn parse(text: &str) -> Result<Slo, MetricsError> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| MetricsError::SloSyntax {
                input: text.trim().to_owned(),
            })?;
        Self::parse_parts(text.trim(), key, value)
    }

    /// Parses an SLO given as a key and a value, as a workload file's
    /// `[slo]` table holds them: `("ttft_p99", "500ms")`.
    pub fn from_key_value(key: &str, value: &str) -> Result<Slo, MetricsError> {
        Self::parse_parts(&format!("{}={}", key.trim(), value.trim()), key, value)
    }

    /// Parses a comma-separated list, `ttft_p99=500ms,tpot_p99=50ms`.
    /// Empty items are skipped, so an empty string is an empty list.
    pub fn parse_list(text: &str) -> Result<Vec<Slo>, MetricsError> {
        text.split(',')
            .filter(|item| !item.trim().is_empty())
            .map(Slo::parse)
            .collect()
    }

    /// The threshold in milliseconds.
    pub fn threshold_ms(&self) -> f64 {
        self.threshold.as_secs_f64() * 1e3
    }

    fn parse_parts(input: &str, key: &str, value: &str) -> Result<Slo, MetricsError> {
        let key = key.trim().to_ascii_lowercase();
        let (metric, statistic) = key.split_once('_').ok_or_else(|| MetricsError::SloSyntax {
            input: input.to_owned(),
        })?;
        let metric = SloMetric::parse(metric).ok_or_else(|| MetricsError::SloMetric {
            input: input.to_owned(),
            metric: metric.to_owned(),
        })?;
        let statistic =
            SloStatistic::parse(statistic).ok_or_else(|| MetricsError::SloStatistic {
                input: input.to_owned(),
                statistic: statistic.to_owned(),
            })?;
        let threshold = parse_threshold(value.trim()).ok_or_else(|| MetricsError::SloValue {
            input: input.to_owned(),
            value: value.trim().to_owned(),
        })?;
        Ok(Slo {
            metric,
            statistic,
            threshold,
        })
    }
}

/// `500ms`, `1.5s`, `800us` (or `µs`) into a positive duration.
fn parse_threshold(text: &str) -> Option<Duration> {
    let unit_start = text.find(|c: char| c.is_alphabetic())?;
    let (number, unit) = text.split_at(unit_start);
    let number: f64 = number.trim().parse().ok()?;
    let nanos_per_unit = match unit.trim() {
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    let nanos = (number * nanos_per_unit).round();
    (nanos.is_finite() && nanos >= 1.0 && nanos <= u64::MAX as f64)
        .then(|| Duration::from_nanos(nanos as u64))
}

impl FromStr for Slo {
    type Err = MetricsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Slo::parse(text)
    }
}

impl fmt::Display for Slo {
    /// The canonical text: `ttft_p99=500ms`, in the largest unit that keeps
    /// the threshold whole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}=", self.metric.name(), self.statistic)?;
        let ns = self.threshold.as_nanos();
        if ns.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", ns / 1_000_000_000)
        } else if ns.is_multiple_of(1_000_000) {
            write!(f, "{}ms", ns / 1_000_000)
        } else {
            write!(f, "{}us", ns as f64 / 1e3)
        }
    }
}

impl Serialize for Slo {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Slo {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Slo::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The aggregate check of one SLO against a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloResult {
    /// The SLO in its canonical text, `ttft_p99=500ms`.
    pub slo: Slo,
    pub threshold_ms: f64,
    /// The run's statistic; `None` when the metric has no samples.
    pub measured_ms: Option<f64>,
    /// `measured_ms <= threshold_ms`; false without samples.
    pub passed: bool,
}

impl SloResult {
    pub(crate) fn new(slo: Slo, measured_ms: Option<f64>) -> Self {
        let threshold_ms = slo.threshold_ms();
        Self {
            slo,
            threshold_ms,
            measured_ms,
            passed: measured_ms.is_some_and(|m| m <= threshold_ms),
        }
    }
}

/// One request's values that SLO thresholds apply to, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestLatencies {
    pub ttft_ns: Option<u64>,
    pub tpot_ns: Option<u64>,
    pub max_itl_ns: Option<u64>,
    pub e2el_ns: u64,
}

/// The strictest threshold per metric over a set of SLOs: what a single
/// request must meet to count towards goodput.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestThresholds {
    ttft_ns: Option<u64>,
    tpot_ns: Option<u64>,
    itl_ns: Option<u64>,
    e2el_ns: Option<u64>,
}

impl RequestThresholds {
    pub(crate) fn from_slos(slos: &[Slo]) -> Self {
        let mut thresholds = Self::default();
        for slo in slos {
            let ns = u64::try_from(slo.threshold.as_nanos()).unwrap_or(u64::MAX);
            let slot = match slo.metric {
                SloMetric::Ttft => &mut thresholds.ttft_ns,
                SloMetric::Tpot => &mut thresholds.tpot_ns,
                SloMetric::Itl => &mut thresholds.itl_ns,
                SloMetric::E2el => &mut thresholds.e2el_ns,
            };
            *slot = Some(slot.map_or(ns, |current| current.min(ns)));
        }
        thresholds
    }

    /// Whether a successful request with these values is good.
    pub(crate) fn met_by(&self, request: &RequestLatencies) -> bool {
        fn within(value: Option<u64>, threshold: Option<u64>) -> bool {
            match (value, threshold) {
                (Some(value), Some(threshold)) => value <= threshold,
                _ => true,
            }
        }
        within(request.ttft_ns, self.ttft_ns)
            && within(request.tpot_ns, self.tpot_ns)
            && within(request.max_itl_ns, self.itl_ns)
            && within(Some(request.e2el_ns), self.e2el_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let slos = Slo::parse_list(
            "ttft_p99=500ms, tpot_p99=50ms,itl_p95=30ms,e2el_p50=2s,ttft_mean=800us",
        )
        .unwrap();
        let texts: Vec<String> = slos.iter().map(Slo::to_string).collect();
        assert_eq!(
            texts,
            [
                "ttft_p99=500ms",
                "tpot_p99=50ms",
                "itl_p95=30ms",
                "e2el_p50=2s",
                "ttft_mean=800us"
            ]
        );
        assert_eq!(slos[0].threshold, Duration::from_millis(500));
        assert_eq!(slos[4].statistic, SloStatistic::Mean);
    }

    #[test]
    fn accepts_aliases_and_fractions() {
        let slo = Slo::parse("E2E_p99.9=1.5s").unwrap();
        assert_eq!(slo.metric, SloMetric::E2el);
        assert_eq!(slo.statistic, SloStatistic::Percentile(99.9));
        assert_eq!(slo.to_string(), "e2el_p99.9=1500ms");
        let median = Slo::from_key_value("tpot_median", "20 ms").unwrap();
        assert_eq!(median.to_string(), "tpot_p50=20ms");
        assert_eq!(
            Slo::parse("itl_p90=2.5µs").unwrap().to_string(),
            "itl_p90=2.5us"
        );
        assert_eq!(Slo::parse_list(" ").unwrap(), vec![]);
    }

    #[test]
    fn errors_say_what_is_accepted() {
        let cases = [
            ("ttft_p99", "slo_syntax", "METRIC_STATISTIC=VALUE"),
            ("ttft=5ms", "slo_syntax", "ttft_p99=500ms"),
            ("latency_p99=5ms", "slo_metric", "ttft, tpot, itl or e2el"),
            ("ttft_p100=5ms", "slo_statistic", "mean, median, or pN"),
            ("ttft_max=5ms", "slo_statistic", "p99.9"),
            ("ttft_p99=500", "slo_value", "us, ms or s"),
            ("ttft_p99=-1ms", "slo_value", "greater than zero"),
            ("ttft_p99=5min", "slo_value", "500ms"),
        ];
        for (input, kind, hint) in cases {
            let error = Slo::parse(input).unwrap_err();
            assert_eq!(error.kind(), kind, "{input}");
            let message = error.to_string();
            assert!(message.contains(hint), "{input}: {message}");
            assert!(message.contains(input), "{input}: {message}");
        }
    }

    #[test]
    fn serializes_as_canonical_text() {
        let slo = Slo::parse("ttft_p99=0.5s").unwrap();
        let json = serde_json::to_string(&slo).unwrap();
        assert_eq!(json, "\"ttft_p99=500ms\"");
        assert_eq!(serde_json::from_str::<Slo>(&json).unwrap(), slo);
    }

    #[test]
    fn request_thresholds_take_the_strictest_slo_per_metric() {
        let slos = Slo::parse_list("ttft_p99=500ms,ttft_p50=200ms,itl_p99=30ms").unwrap();
        let thresholds = RequestThresholds::from_slos(&slos);
        let request = |ttft_ms: u64, max_itl_ms: u64| RequestLatencies {
            ttft_ns: Some(ttft_ms * 1_000_000),
            tpot_ns: None,
            max_itl_ns: Some(max_itl_ms * 1_000_000),
            e2el_ns: 10_000_000_000,
        };
        assert!(thresholds.met_by(&request(200, 30)));
        assert!(!thresholds.met_by(&request(201, 30)));
        assert!(!thresholds.met_by(&request(100, 31)));
        let one_token = RequestLatencies {
            max_itl_ns: None,
            ..request(100, 0)
        };
        assert!(thresholds.met_by(&one_token));
    }

    #[test]
    fn aggregate_result_needs_samples() {
        let slo = Slo::parse("ttft_p99=500ms").unwrap();
        assert!(SloResult::new(slo, Some(500.0)).passed);
        assert!(!SloResult::new(slo, Some(500.1)).passed);
        assert!(!SloResult::new(slo, None).passed);
    }
}
