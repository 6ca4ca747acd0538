//! Per-request samples: what each measured request's latencies were, kept
//! beside the histograms so that two runs can be compared request by
//! request (bootstrap intervals, Mann-Whitney U) and a run's latency drawn
//! over its time line.
//!
//! A [`RequestSample`] is a few numbers per request, derived from its
//! [`RequestRecord`] by the same definitions as the histograms
//! (`docs/metrics.md`); warm-up requests are never sampled. In a report the
//! samples are stored by column (`sent_s: [...]`, `ttft_ms: [...]`, ...),
//! times to the microsecond, about 100 bytes of JSON per request.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ErrorKind, RequestRecord};

/// One measured request, reduced to the values comparisons and plots use.
/// Times are nanoseconds since the run's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestSample {
    pub scheduled_ns: u64,
    pub sent_ns: u64,
    pub end_ns: u64,
    /// First content event minus the send; `None` for a failed request or
    /// one without content.
    pub ttft_ns: Option<u64>,
    /// As [`RequestRecord::tpot_ns`]: completed requests of 2+ tokens.
    pub tpot_ns: Option<u64>,
    /// The largest gap between content events (what an ITL SLO judges a
    /// request by); `None` below two events.
    pub itl_max_ns: Option<u64>,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// `None` for a completed request.
    pub error: Option<ErrorKind>,
}

impl RequestSample {
    /// The sample of a finished request (call it for measured requests only).
    pub fn of(record: &RequestRecord) -> Self {
        let completed = record.succeeded();
        let itl_max_ns = record
            .content_event_ns
            .windows(2)
            .map(|pair| pair[1].saturating_sub(pair[0]))
            .max();
        Self {
            scheduled_ns: record.scheduled_ns,
            sent_ns: record.sent_ns,
            end_ns: record.end_ns,
            ttft_ns: record.ttft_ns().filter(|_| completed),
            tpot_ns: record.tpot_ns(),
            itl_max_ns: itl_max_ns.filter(|_| completed),
            input_tokens: record.input_tokens,
            output_tokens: record.output_tokens,
            error: record.error.as_ref().map(|error| error.kind),
        }
    }

    pub fn completed(&self) -> bool {
        self.error.is_none()
    }

    /// The value of `metric` for this request, in nanoseconds; `None` when
    /// the request has none (failed, one token, no content).
    pub fn value_ns(&self, metric: SampleMetric) -> Option<u64> {
        if !self.completed() {
            return None;
        }
        match metric {
            SampleMetric::Ttft => self.ttft_ns,
            SampleMetric::TtftFromSchedule => self
                .ttft_ns
                .map(|ttft| (self.sent_ns + ttft).saturating_sub(self.scheduled_ns)),
            SampleMetric::Tpot => self.tpot_ns,
            SampleMetric::E2e => Some(self.end_ns.saturating_sub(self.sent_ns)),
            SampleMetric::E2eFromSchedule => Some(self.end_ns.saturating_sub(self.scheduled_ns)),
            SampleMetric::ItlMax => self.itl_max_ns,
        }
    }
}

/// The per-request values samples give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleMetric {
    Ttft,
    TtftFromSchedule,
    Tpot,
    E2e,
    E2eFromSchedule,
    /// A request's largest gap between content events.
    ItlMax,
}

impl SampleMetric {
    /// The name used in tables and plots: `ttft`, `tpot`, `e2e`, ...
    pub fn name(&self) -> &'static str {
        match self {
            SampleMetric::Ttft => "ttft",
            SampleMetric::TtftFromSchedule => "ttft_from_schedule",
            SampleMetric::Tpot => "tpot",
            SampleMetric::E2e => "e2e",
            SampleMetric::E2eFromSchedule => "e2e_from_schedule",
            SampleMetric::ItlMax => "itl_max",
        }
    }
}

/// Every measured request's sample, in the order they finished.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples(pub Vec<RequestSample>);

impl Samples {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The completed requests' values of `metric`, in milliseconds, in
    /// sample order.
    pub fn values_ms(&self, metric: SampleMetric) -> Vec<f64> {
        self.0
            .iter()
            .filter_map(|sample| sample.value_ns(metric))
            .map(|ns| ns as f64 / 1e6)
            .collect()
    }
}

/// The columns of [`Samples`] as stored in a report.
#[derive(Serialize, Deserialize)]
struct Columns {
    count: usize,
    scheduled_s: Vec<f64>,
    sent_s: Vec<f64>,
    end_s: Vec<f64>,
    ttft_ms: Vec<Option<f64>>,
    tpot_ms: Vec<Option<f64>>,
    itl_max_ms: Vec<Option<f64>>,
    input_tokens: Vec<u32>,
    output_tokens: Vec<u32>,
    /// `null` for completed requests, else the error kind's label.
    error: Vec<Option<String>>,
}

/// Nanoseconds as seconds or milliseconds, kept to the microsecond.
fn to_unit(ns: u64, per_unit: f64) -> f64 {
    (ns / 1_000) as f64 * 1_000.0 / per_unit
}

fn from_unit(value: f64, per_unit: f64) -> u64 {
    (value * per_unit).round().max(0.0) as u64
}

const NS_PER_S: f64 = 1e9;
const NS_PER_MS: f64 = 1e6;

impl Serialize for Samples {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let column = |pick: fn(&RequestSample) -> u64, per: f64| -> Vec<f64> {
            self.0.iter().map(|s| to_unit(pick(s), per)).collect()
        };
        let optional = |pick: fn(&RequestSample) -> Option<u64>| -> Vec<Option<f64>> {
            self.0
                .iter()
                .map(|s| pick(s).map(|ns| to_unit(ns, NS_PER_MS)))
                .collect()
        };
        Columns {
            count: self.0.len(),
            scheduled_s: column(|s| s.scheduled_ns, NS_PER_S),
            sent_s: column(|s| s.sent_ns, NS_PER_S),
            end_s: column(|s| s.end_ns, NS_PER_S),
            ttft_ms: optional(|s| s.ttft_ns),
            tpot_ms: optional(|s| s.tpot_ns),
            itl_max_ms: optional(|s| s.itl_max_ns),
            input_tokens: self.0.iter().map(|s| s.input_tokens).collect(),
            output_tokens: self.0.iter().map(|s| s.output_tokens).collect(),
            error: self.0.iter().map(|s| s.error.map(|e| e.label())).collect(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Samples {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let c = Columns::deserialize(deserializer)?;
        let lengths = [
            c.scheduled_s.len(),
            c.sent_s.len(),
            c.end_s.len(),
            c.ttft_ms.len(),
            c.tpot_ms.len(),
            c.itl_max_ms.len(),
            c.input_tokens.len(),
            c.output_tokens.len(),
            c.error.len(),
        ];
        if lengths.iter().any(|&n| n != c.count) {
            return Err(D::Error::custom(format!(
                "samples: every column must hold `count` ({}) values, found {lengths:?}",
                c.count
            )));
        }
        let ms = |v: Option<f64>| v.map(|v| from_unit(v, NS_PER_MS));
        let mut samples = Vec::with_capacity(c.count);
        for i in 0..c.count {
            let error = match &c.error[i] {
                None => None,
                Some(label) => Some(ErrorKind::from_label(label).ok_or_else(|| {
                    D::Error::custom(format!("samples.error[{i}]: unknown error kind `{label}`"))
                })?),
            };
            samples.push(RequestSample {
                scheduled_ns: from_unit(c.scheduled_s[i], NS_PER_S),
                sent_ns: from_unit(c.sent_s[i], NS_PER_S),
                end_ns: from_unit(c.end_s[i], NS_PER_S),
                ttft_ns: ms(c.ttft_ms[i]),
                tpot_ns: ms(c.tpot_ms[i]),
                itl_max_ns: ms(c.itl_max_ms[i]),
                input_tokens: c.input_tokens[i],
                output_tokens: c.output_tokens[i],
                error,
            });
        }
        Ok(Samples(samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestError;

    fn record(index: u64, error: Option<ErrorKind>) -> RequestRecord {
        let mut r = RequestRecord::new(index, false, 1_000_000, 3);
        r.sent_ns = 1_500_000;
        r.content_event_ns
            .extend([21_500_000, 31_500_000, 36_500_000]);
        r.end_ns = 36_600_000;
        r.output_tokens = 3;
        r.input_tokens = 7;
        r.error = error.map(|kind| RequestError {
            kind,
            message: String::new(),
        });
        r
    }

    #[test]
    fn a_sample_follows_the_metric_definitions() {
        let s = RequestSample::of(&record(0, None));
        assert_eq!(s.value_ns(SampleMetric::Ttft), Some(20_000_000));
        assert_eq!(s.value_ns(SampleMetric::TtftFromSchedule), Some(20_500_000));
        assert_eq!(s.value_ns(SampleMetric::Tpot), Some(7_550_000));
        assert_eq!(s.value_ns(SampleMetric::E2e), Some(35_100_000));
        assert_eq!(s.value_ns(SampleMetric::ItlMax), Some(10_000_000));
        let failed = RequestSample::of(&record(1, Some(ErrorKind::StreamCut)));
        assert_eq!(failed.value_ns(SampleMetric::E2e), None);
        assert_eq!(failed.ttft_ns, None);
    }

    #[test]
    fn samples_round_trip_through_their_columns() {
        let samples = Samples(vec![
            RequestSample::of(&record(0, None)),
            RequestSample::of(&record(1, Some(ErrorKind::HttpStatus(429)))),
        ]);
        let json = serde_json::to_value(&samples).unwrap();
        assert_eq!(json["count"], 2);
        assert_eq!(json["ttft_ms"][0], 20.0);
        assert_eq!(json["error"][1], "http_429");
        let back: Samples = serde_json::from_value(json).unwrap();
        assert_eq!(back, samples);
    }

    #[test]
    fn columns_of_different_lengths_are_refused() {
        let mut json =
            serde_json::to_value(Samples(vec![RequestSample::of(&record(0, None))])).unwrap();
        json["sent_s"] = serde_json::json!([]);
        let err = serde_json::from_value::<Samples>(json).unwrap_err();
        assert!(err.to_string().contains("count"), "{err}");
    }
}
