//! The versioned JSON result of one run.
//!
//! A report holds the schema version, the tool's version, the run's
//! metadata ([`RunMeta`], filled by the binary), the metrics [`Summary`]
//! (SLO results included), the [`Validity`] verdict, the optional `gpu`
//! section ([`crate::gpu`]), the per-request `samples`, the scraped
//! `server_metrics` ([`crate::server_view`]), a load step's `step` and
//! `steady_state` ([`crate::step`]), and beside them the
//! flat keys of vLLM's `bench serve` result (`p99_ttft_ms`,
//! `output_throughput`, ...; see [`crate::vllm`]). docs/report-schema.md
//! documents every key; docs/report.schema.json is its JSON Schema.
//!
//! Version policy: adding a key keeps [`SCHEMA_VERSION`]; renaming or
//! removing a key, or changing a key's meaning or unit, increments it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use isobench_metrics::{Samples, Summary, Validity};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ReportError;
use crate::gpu::{GpuMeasurement, GpuReport};
use crate::server_view::ServerMetrics;
use crate::step::{SteadyState, StepMeta};
use crate::vllm;

/// The version of the JSON layout this crate writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The tool's name and version, as written in every report.
pub const TOOL: &str = "isobench";
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What was run, against what, and how it ended. The binary fills it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The workload's name.
    pub workload: String,
    /// The workload file, when the run came from one.
    pub workload_file: Option<String>,
    /// The endpoint's base URL.
    pub target: String,
    pub model: String,
    /// The API used: `completions` or `chat`.
    pub api: String,
    pub streaming: bool,
    pub seed: Option<u64>,
    /// The load in words: `poisson 20 req/s, 1000 requests`, `closed loop, concurrency 8`.
    pub load: String,
    /// When the run started, RFC 3339 in UTC (see [`format_started_at`]).
    pub started_at: String,
    /// Wall time of the whole run in seconds, warm-up and drain included.
    pub duration_s: f64,
    /// True when Ctrl-C cut the run short: the figures cover what finished.
    pub interrupted: bool,
    /// How prompt lengths were made.
    pub prompt_token_source: PromptTokenSource,
    /// The embedded server's configuration in words (model folder,
    /// batching policy and its limits, KV pool), when the run started one;
    /// `None` for an external target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// How prompts were synthesised to their token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptTokenSource {
    /// With the endpoint's tokenizer: exact counts.
    Tokenizer,
    /// With the documented approximation (no tokenizer given).
    Approximate,
}

/// One run's result; serialises to the documented JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    pub run: RunMeta,
    pub summary: Summary,
    pub validity: Validity,
    /// The GPU the server ran on, its peak memory and energy; only in runs
    /// that used one (see [`Report::with_gpu`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuReport>,
    /// Each measured request's latencies, for comparisons and plots;
    /// absent in reports written before samples were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Samples>,
    /// The endpoint's metrics scraped during the run, when it had any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetrics>,
    /// The sweep or capacity search this run is a step of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepMeta>,
    /// A step's steady-state figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<SteadyState>,
    /// vLLM-compatible flat keys, derived from the summary.
    #[serde(flatten)]
    pub vllm: Map<String, Value>,
}

/// RFC 3339 in UTC with milliseconds, `2025-01-31T12:00:00.123Z`.
pub fn format_started_at(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl Report {
    pub fn new(run: RunMeta, summary: Summary, validity: Validity) -> Self {
        let vllm = vllm::flat_keys(&summary);
        Self {
            schema_version: SCHEMA_VERSION,
            tool: TOOL.to_owned(),
            tool_version: TOOL_VERSION.to_owned(),
            run,
            summary,
            validity,
            gpu: None,
            samples: None,
            server_metrics: None,
            step: None,
            steady_state: None,
            vllm,
        }
    }

    /// Adds the `gpu` section, deriving energy per token and mean power
    /// from the summary.
    pub fn with_gpu(mut self, measured: GpuMeasurement) -> Self {
        self.gpu = Some(GpuReport::new(measured, &self.summary));
        self
    }

    /// The report as pretty-printed JSON, with a final newline.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).expect("a report always serialises");
        json.push('\n');
        json
    }

    /// Writes the JSON report to `path`, through a temporary file in the same
    /// folder renamed into place, so a reader never sees half a report.
    pub fn write_json(&self, path: &Path) -> Result<(), ReportError> {
        let write_error = |source| ReportError::Write {
            path: path.to_owned(),
            source,
        };
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        fs::write(&temporary, self.to_json()).map_err(write_error)?;
        fs::rename(&temporary, path).map_err(write_error)
    }

    /// Reads a report written by this or an earlier schema version.
    /// The file must be a regular file: a device such as `/dev/zero`, or a
    /// FIFO, would be read without end.
    pub fn read_json(path: &Path) -> Result<Report, ReportError> {
        let read_error = |source| ReportError::Read {
            path: path.to_owned(),
            source,
        };
        // `metadata` does not block on a FIFO, where opening it would.
        if !fs::metadata(path).map_err(read_error)?.is_file() {
            return Err(ReportError::NotAFile {
                path: path.to_owned(),
            });
        }
        let text = fs::read_to_string(path).map_err(read_error)?;
        Self::from_json(&text, path)
    }

    /// Parses a report; `path` only names the source in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Report, ReportError> {
        let parse_error = |source| ReportError::Parse {
            path: path.to_owned(),
            source,
        };
        let value: Value = serde_json::from_str(text).map_err(parse_error)?;
        let version = &value["schema_version"];
        let supported = version
            .as_u64()
            .is_some_and(|v| (1..=u64::from(SCHEMA_VERSION)).contains(&v));
        if !supported {
            return Err(ReportError::SchemaVersion {
                path: path.to_owned(),
                found: version.to_string(),
                supported: SCHEMA_VERSION,
            });
        }
        serde_json::from_value(value).map_err(parse_error)
    }
}
