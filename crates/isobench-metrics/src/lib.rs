//! isobench measurement: what happened to each request, and the statistics
//! of a run.
//!
//! A backend fills one [`RequestRecord`] per request (times in nanoseconds
//! since the run's start, one entry per streamed content event). Each worker
//! records its requests into its own [`Recorder`] (HDR histograms at
//! microsecond resolution, 3 significant digits, no allocation per request
//! or token); the recorders are merged exactly at the end and summarised
//! into a [`Summary`]: percentiles with confidence intervals, throughput,
//! goodput and [`Slo`] checks. [`assess_validity`] says whether the client
//! kept up with the offered load, and [`compare_percentile`] whether two
//! runs differ beyond their confidence intervals.
//!
//! Beside the histograms, each measured request can be kept as a compact
//! [`RequestSample`] ([`Samples`]): [`stats`] compares two runs' samples
//! (bootstrap confidence intervals, Mann-Whitney U, IQR outliers), and
//! [`SteadyWindow`] picks a load step's steady state and judges whether
//! the endpoint kept up in it ([`Saturation`]).
//!
//! ```
//! use std::time::Duration;
//! use isobench_metrics::{Recorder, RequestRecord, Slo, TokenSource};
//!
//! let slos = Slo::parse_list("ttft_p99=500ms,tpot_p99=50ms").unwrap();
//! let mut recorder = Recorder::with_slos(&slos);
//!
//! // A request scheduled at 0, sent at 1 ms, first token at 121 ms, three
//! // more tokens 20 ms apart, done at 181 ms.
//! let mut record = RequestRecord::new(0, false, 0, 4);
//! record.sent_ns = 1_000_000;
//! record.content_event_ns.extend([121, 141, 161, 181].map(|ms| ms * 1_000_000));
//! record.end_ns = 181_000_000;
//! record.output_tokens = 4;
//! record.token_source = TokenSource::Usage;
//! recorder.record(&record);
//!
//! let summary = recorder.summarize(Duration::from_secs(1));
//! let ttft = summary.latency.ttft.as_ref().unwrap();
//! assert_eq!(ttft.p50_ms, 120.0);
//! assert_eq!(summary.latency.tpot.as_ref().unwrap().mean_ms, 20.0);
//! assert_eq!(summary.requests.good, Some(1));
//! assert!(summary.slos.iter().all(|result| result.passed));
//! ```
//!
//! The exact definitions are in `docs/metrics.md`.

mod compare;
mod error;
mod record;
mod recorder;
mod samples;
mod series;
mod slo;
pub mod stats;
mod steady;
mod summary;
mod validity;

pub use compare::{Comparison, Percentile, Verdict, compare_percentile};
pub use error::MetricsError;
pub use record::{ErrorKind, RequestError, RequestRecord, TokenSource};
pub use recorder::Recorder;
pub use samples::{RequestSample, SampleMetric, Samples};
pub use series::{CONFIDENCE_LEVEL, ConfidenceInterval, LatencyStats};
pub use slo::{Slo, SloMetric, SloResult, SloStatistic};
pub use stats::Statistic;
pub use steady::{Saturation, SteadyWindow};
pub use summary::{
    Latencies, OutputTokenSource, RequestCounts, Sending, SourceCount, Summary, Throughput,
    TokenCounts, TokensBySource,
};
pub use validity::{
    DISPATCH_LAG_P99_INVALID_MS, DISPATCH_LAG_P99_WARN_MS, MAX_ERROR_RATE_DEFAULT,
    SEND_RATE_RATIO_MIN, Validity, assess_validity, assess_validity_with_max_error_rate,
};
