//! Datasets: recorded prompts and lengths instead of synthetic ones.
//!
//! ```toml
//! [request.dataset]
//! kind = "sharegpt"            # or "trace"
//! path = "ShareGPT_V3_unfiltered_cleaned_split.json"
//! min_input_tokens = 4         # filters, see below
//! max_input_tokens = 1024
//! max_total_tokens = 2048
//! shuffle = true               # sharegpt only: seeded shuffle (default true)
//! repeat = false               # start over when exhausted (default false)
//! # trace only:
//! timestamp_unit = "ms"        # "s", "ms" (default) or "us"
//! time_scale = 1.0             # offsets x time_scale: 0.5 replays twice as fast
//! ```
//!
//! Filters keep a record when `min_input_tokens <= input <= max_input_tokens`,
//! `min_output_tokens <= output <= max_output_tokens` and
//! `input + output <= max_total_tokens`, on the dataset's own lengths.
//! ShareGPT defaults to vLLM's filter (min 4 and 4, max input 1024, max total
//! 2048, no max output); traces default to no filter.

mod json_array;
mod sharegpt;
mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub(crate) use sharegpt::{ShareGpt, ShareGptReplay};
pub(crate) use trace::{Trace, TraceReplay};

use crate::context::FileContext;
use crate::error::WorkloadError;

/// `[request.dataset]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDataset {
    kind: DatasetKind,
    path: PathBuf,
    min_input_tokens: Option<i64>,
    max_input_tokens: Option<i64>,
    min_output_tokens: Option<i64>,
    max_output_tokens: Option<i64>,
    max_total_tokens: Option<i64>,
    shuffle: Option<bool>,
    #[serde(default)]
    repeat: bool,
    timestamp_unit: Option<TimestampUnit>,
    time_scale: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum DatasetKind {
    Sharegpt,
    Trace,
}

/// The unit of a trace's `timestamp` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub(crate) enum TimestampUnit {
    #[serde(rename = "s")]
    Seconds,
    #[default]
    #[serde(rename = "ms")]
    Milliseconds,
    #[serde(rename = "us")]
    Microseconds,
}

impl TimestampUnit {
    fn seconds(self) -> f64 {
        match self {
            TimestampUnit::Seconds => 1.0,
            TimestampUnit::Milliseconds => 1e-3,
            TimestampUnit::Microseconds => 1e-6,
        }
    }
}

/// A validated, loaded dataset.
#[derive(Debug, Clone)]
pub(crate) enum Dataset {
    ShareGpt(Arc<ShareGpt>),
    Trace(Arc<Trace>),
}

impl Dataset {
    /// Validates `[request.dataset]` and reads its file.
    pub(crate) fn load(raw: &RawDataset, context: &FileContext) -> Result<Self, WorkloadError> {
        const FIELD: &str = "request.dataset";
        let only_for_trace = [
            ("timestamp_unit", raw.timestamp_unit.is_some()),
            ("time_scale", raw.time_scale.is_some()),
        ];
        let only_for_sharegpt = [("shuffle", raw.shuffle.is_some())];
        let (misplaced, kind) = match raw.kind {
            DatasetKind::Sharegpt => (&only_for_trace[..], "sharegpt"),
            DatasetKind::Trace => (&only_for_sharegpt[..], "trace"),
        };
        if let Some((name, _)) = misplaced.iter().find(|(_, present)| *present) {
            return Err(context.field_error(
                &format!("{FIELD}.{name}"),
                format!("not used by kind = \"{kind}\""),
            ));
        }
        let filter = LengthFilter::from_raw(raw, context)?;
        let path = context.resolve(&format!("{FIELD}.path"), &raw.path)?;
        let read_error = |error: String| {
            context.field_error(
                &format!("{FIELD}.path"),
                format!("cannot read `{}`: {error}", path.display()),
            )
        };
        match raw.kind {
            DatasetKind::Sharegpt => {
                let file = crate::input::open_regular(&path).map_err(read_error)?;
                let dataset = ShareGpt::read(&path, file, filter, raw.shuffle.unwrap_or(true))?;
                Ok(Dataset::ShareGpt(Arc::new(dataset.repeating(raw.repeat))))
            }
            DatasetKind::Trace => {
                let time_scale = raw.time_scale.unwrap_or(1.0);
                if !(time_scale.is_finite() && time_scale > 0.0) {
                    return Err(context.field_error(
                        &format!("{FIELD}.time_scale"),
                        format!(
                            "must be a number > 0 (0.5 replays twice as fast), got {time_scale}"
                        ),
                    ));
                }
                let file = crate::input::open_regular(&path).map_err(read_error)?;
                let unit = raw.timestamp_unit.unwrap_or_default();
                let trace = Trace::read(&path, file, unit, time_scale, &filter)?;
                if trace.is_empty() {
                    return Err(context.field_error(
                        FIELD,
                        format!(
                            "no record of `{}` passes the length filters",
                            path.display()
                        ),
                    ));
                }
                Ok(Dataset::Trace(Arc::new(trace.repeating(raw.repeat))))
            }
        }
    }

    /// The dataset's file.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Dataset::ShareGpt(data) => data.path(),
            Dataset::Trace(data) => data.path(),
        }
    }

    /// Whether replay starts over when the dataset is exhausted.
    pub(crate) fn repeats(&self) -> bool {
        match self {
            Dataset::ShareGpt(data) => data.repeats(),
            Dataset::Trace(data) => data.repeats(),
        }
    }
}

/// A JSON error's line (if known) and its message, with serde_json's
/// `at line L column C` suffix turned into `(column C)`.
fn json_error(error: &serde_json::Error) -> (Option<usize>, String) {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match message.strip_suffix(&suffix) {
        Some(stripped) if error.line() > 0 => (
            Some(error.line()),
            format!("{stripped} (column {})", error.column()),
        ),
        _ => (None, message),
    }
}

/// Which records a dataset keeps, by their lengths in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LengthFilter {
    min_input: u32,
    max_input: u32,
    min_output: u32,
    max_output: u32,
    max_total: u64,
}

impl LengthFilter {
    fn from_raw(raw: &RawDataset, context: &FileContext) -> Result<Self, WorkloadError> {
        let bound = |name: &str, value: Option<i64>, default: u32| match value {
            None => Ok(default),
            Some(value) => u32::try_from(value).map_err(|_| {
                context.field_error(
                    &format!("request.dataset.{name}"),
                    format!("must be an integer from 0 to {}, got {value}", u32::MAX),
                )
            }),
        };
        let sharegpt = raw.kind == DatasetKind::Sharegpt;
        let filter = LengthFilter {
            min_input: bound(
                "min_input_tokens",
                raw.min_input_tokens,
                if sharegpt { 4 } else { 0 },
            )?,
            max_input: bound(
                "max_input_tokens",
                raw.max_input_tokens,
                if sharegpt { 1024 } else { u32::MAX },
            )?,
            min_output: bound(
                "min_output_tokens",
                raw.min_output_tokens,
                if sharegpt { 4 } else { 0 },
            )?,
            max_output: bound("max_output_tokens", raw.max_output_tokens, u32::MAX)?,
            max_total: match raw.max_total_tokens {
                None if sharegpt => 2048,
                None => u64::MAX,
                Some(value) => u64::try_from(value).map_err(|_| {
                    context.field_error(
                        "request.dataset.max_total_tokens",
                        format!("must be an integer >= 0, got {value}"),
                    )
                })?,
            },
        };
        for (min, max, name) in [
            (filter.min_input, filter.max_input, "max_input_tokens"),
            (filter.min_output, filter.max_output, "max_output_tokens"),
        ] {
            if min > max {
                return Err(context.field_error(
                    &format!("request.dataset.{name}"),
                    format!("must be >= the matching min_* ({min}), got {max}"),
                ));
            }
        }
        Ok(filter)
    }

    /// Whether a record with these lengths is kept.
    pub(crate) fn keeps(&self, input: u32, output: u32) -> bool {
        (self.min_input..=self.max_input).contains(&input)
            && (self.min_output..=self.max_output).contains(&output)
            && u64::from(input) + u64::from(output) <= self.max_total
    }
}

#[cfg(test)]
impl LengthFilter {
    /// Keeps every record.
    pub(crate) fn none() -> Self {
        LengthFilter {
            min_input: 0,
            max_input: u32::MAX,
            min_output: 0,
            max_output: u32::MAX,
            max_total: u64::MAX,
        }
    }
}
