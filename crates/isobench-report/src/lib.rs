//! isobench reports: what a run measured, presented three ways.
//!
//! - [`Report`]: the versioned JSON result (schema in
//!   `docs/report-schema.md` and `docs/report.schema.json`), with isobench's
//!   nested figures and vLLM's flat keys side by side ([`vllm`]).
//! - [`table::render`]: the plain-text table printed at the end of a run.
//! - [`csv::append`]: one row per run, appended under one header.
//! - [`html::page`]: `isobench report --html`, one self-contained page of
//!   tables and SVG plots (drawn with plotters, [`figures`]) over several
//!   runs; [`html::markdown`] the same tables in Markdown.
//! - [`comparison::compare`]: two runs figure by figure, with bootstrap
//!   intervals, Mann-Whitney U and IQR outliers from their samples.
//!
//! The binary builds a report from the metrics crate's [`Summary`](isobench_metrics::Summary) and
//! [`Validity`](isobench_metrics::Validity) plus the run's [`RunMeta`]:
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use isobench_metrics::{Recorder, assess_validity};
//! use isobench_report::{PromptTokenSource, Report, RunMeta, format_started_at, table};
//!
//! let recorder = Recorder::new(); // merged from the workers, in a real run
//! let summary = recorder.summarize(Duration::from_secs(10));
//! let validity = assess_validity(&summary, Some(5.0));
//! let run = RunMeta {
//!     workload: "quickstart".into(),
//!     workload_file: Some("workloads/quickstart.toml".into()),
//!     target: "http://127.0.0.1:8000".into(),
//!     model: "tiny-llama".into(),
//!     api: "chat".into(),
//!     streaming: true,
//!     seed: Some(7),
//!     load: "poisson 5 req/s, 50 requests".into(),
//!     started_at: format_started_at(SystemTime::now()),
//!     duration_s: 10.4,
//!     interrupted: false,
//!     prompt_token_source: PromptTokenSource::Tokenizer,
//!     server: None,
//! };
//! let report = Report::new(run, summary, validity);
//! assert!(report.to_json().contains("\"p99_ttft_ms\""));
//! assert!(table::render(&report).contains("!! INVALID RUN"));
//! ```

pub mod capacity;
pub mod comparison;
pub mod csv;
mod error;
pub mod figures;
pub mod gpu;
pub mod html;
mod plot;
mod report;
pub mod server_view;
pub mod step;
pub mod table;
pub mod tables;
pub mod vllm;

pub use capacity::{ConfigurationPlan, PLAN_KIND, PlanResult, TrialRecord};
pub use error::ReportError;
pub use gpu::{GpuMeasurement, GpuReport};
pub use report::{
    PromptTokenSource, Report, RunMeta, SCHEMA_VERSION, TOOL, TOOL_VERSION, format_started_at,
};
pub use server_view::ServerMetrics;
pub use step::{SteadyState, StepKind, StepMeta};
pub use tables::NamedReport;
