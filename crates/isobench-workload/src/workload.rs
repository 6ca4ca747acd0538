//! The validated workload: loaded from a TOML file, adjusted by
//! command-line [`Overrides`], planned into a [`Plan`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::context::FileContext;
use crate::dataset::Dataset;
use crate::error::WorkloadError;
use crate::file::RawWorkload;
use crate::load::{ArrivalKind, LoadSettings, Overrides, TraceTimestamps};
use crate::plan::{ApiKind, Plan};
use crate::planner;
use crate::request::{RequestSettings, Requests, Sampling};

/// The per-request timeout when the file gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A validated workload file.
///
/// ```no_run
/// use isobench_workload::{Overrides, Workload};
///
/// let mut workload = Workload::from_file("workloads/short.toml".as_ref())?;
/// workload.apply(&Overrides { rate: Some(20.0), ..Overrides::default() })?;
/// let plan = workload.plan(None)?;
/// println!("{}", plan.shape.description);
/// for request in plan.requests.take(3) {
///     println!("{:?} {} -> {}", request.offset, request.input_tokens, request.max_tokens);
/// }
/// # Ok::<(), isobench_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Workload {
    pub(crate) path: PathBuf,
    name: String,
    description: Option<String>,
    api: ApiKind,
    stream: bool,
    pub(crate) seed: u64,
    tokenizer: Option<PathBuf>,
    timeout: Duration,
    pub(crate) request: RequestSettings,
    pub(crate) load: LoadSettings,
    slo: Vec<(String, String)>,
}

impl Workload {
    /// Reads and validates a workload file.
    pub fn from_file(path: &Path) -> Result<Self, WorkloadError> {
        let text = crate::input::read_workload(path)?;
        Self::from_toml(&text, path)
    }

    /// Validates a workload given as text; `path` names it in errors and
    /// anchors its relative paths (it need not exist).
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, WorkloadError> {
        let context = FileContext::new(path, text.to_string());
        let raw: RawWorkload =
            toml::from_str(context.text()).map_err(|error| context.toml_error(&error))?;
        let name = match raw.name {
            Some(name) if name.trim().is_empty() => {
                return Err(context.field_error("name", "must not be empty"));
            }
            Some(name) => name,
            None => path.file_stem().map_or_else(
                || "workload".to_string(),
                |s| s.to_string_lossy().into_owned(),
            ),
        };
        let timeout = raw.timeout.map_or(DEFAULT_TIMEOUT, |timeout| timeout.0);
        if timeout.is_zero() {
            return Err(context.field_error("timeout", "must be longer than 0s"));
        }
        let tokenizer = raw
            .tokenizer
            .as_deref()
            .map(|written| context.resolve("tokenizer", written))
            .transpose()?;
        let request = RequestSettings::from_raw(&raw.request, &context)?;
        let load = LoadSettings::from_raw(&raw.load, &trace_timestamps(&request), &context)?;
        let mut slo: Vec<_> = raw.slo.into_iter().collect();
        slo.sort_by_key(|(key, _)| key.span().start);
        Ok(Workload {
            path: context.file().to_path_buf(),
            name,
            description: raw.description,
            api: raw.api,
            stream: raw.stream.unwrap_or(true),
            seed: raw.seed.unwrap_or(0),
            tokenizer,
            timeout,
            request,
            load,
            slo: slo
                .into_iter()
                .map(|(key, value)| (key.into_inner(), value))
                .collect(),
        })
    }

    /// Applies command-line overrides; see [`Overrides`] for the rules.
    pub fn apply(&mut self, overrides: &Overrides) -> Result<(), WorkloadError> {
        let trace = trace_timestamps(&self.request);
        self.load.apply(overrides, &trace, &self.path)?;
        if let Some(seed) = overrides.seed {
            self.seed = seed;
        }
        Ok(())
    }

    /// Plans the run. `tokenizer` (e.g. the endpoint's or the embedded
    /// model's `tokenizer.json`) takes precedence over the file's
    /// `tokenizer`; with neither, prompt lengths are approximate.
    ///
    /// Fails when nothing would stop the run, when the tokenizer cannot be
    /// loaded, or when no dataset record passes the filters.
    pub fn plan(&self, tokenizer: Option<&Path>) -> Result<Plan, WorkloadError> {
        planner::build(self, tokenizer.or(self.tokenizer.as_deref()))
    }

    /// The workload file this came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name`, or the file's stem.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Which endpoint the requests go to.
    pub fn api(&self) -> ApiKind {
        self.api
    }

    /// Whether responses are streamed (SSE); default true.
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The seed of prompts, lengths and arrivals (after `--seed`).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The file's tokenizer, resolved to a path that exists.
    pub fn tokenizer(&self) -> Option<&Path> {
        self.tokenizer.as_deref()
    }

    /// The per-request timeout (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether to send `ignore_eos: true`, so that outputs run to `max_tokens`.
    pub fn ignore_eos(&self) -> bool {
        self.request.ignore_eos
    }

    pub fn sampling(&self) -> &Sampling {
        &self.request.sampling
    }

    /// Extra HTTP headers, validated as header names and printable values.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.request.headers
    }

    /// Extra JSON body fields, merged into every request body.
    pub fn extra_body(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.request.extra_body
    }

    /// The `[slo]` table in file order, values unparsed (e.g. `("ttft_p99", "500ms")`).
    pub fn slo(&self) -> &[(String, String)] {
        &self.slo
    }

    /// The arrival process (after overrides).
    pub fn arrival(&self) -> ArrivalKind {
        self.load.arrival.kind()
    }
}

fn trace_timestamps(request: &RequestSettings) -> TraceTimestamps {
    match &request.requests {
        Requests::Dataset {
            dataset: Dataset::Trace(trace),
            ..
        } => match trace.missing_timestamp() {
            _ if trace.repeats() => TraceTimestamps::Unavailable(
                "cannot replay a trace with `repeat = true` at its own timestamps".to_string(),
            ),
            None => TraceTimestamps::Present,
            Some(line) => TraceTimestamps::Unavailable(format!(
                "needs a timestamp on every record, and `{}` line {line} has none",
                trace.path().display()
            )),
        },
        _ => TraceTimestamps::Unavailable(
            "needs request.dataset with kind = \"trace\" (JSONL with timestamps)".to_string(),
        ),
    }
}
