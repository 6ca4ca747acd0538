//! The crate's one error type. Every variant a user can cause names the file,
//! field or flag at fault and what would be accepted; `kind()` is a stable
//! label for logs, metrics and JSON.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a workload could not be loaded, overridden or planned.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The workload file itself could not be read.
    #[error("cannot read workload file `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A field of the workload file is missing, unknown or out of range.
    /// `field` is its TOML path (`load.rate`), empty for a syntax error.
    #[error("{}{}{message}", Location::new(file, *line, *column), FieldPrefix(field))]
    Field {
        file: PathBuf,
        field: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },

    /// A command-line override is invalid or does not fit the workload file.
    #[error("{flag}: {message}")]
    Flag { flag: &'static str, message: String },

    /// A data file (ShareGPT dataset, JSONL trace, empirical length file) is
    /// malformed; `line` is 1-based.
    #[error("{}: {message}", Location::new(path, *line, None))]
    Data {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },

    /// The tokenizer could not be loaded, or cannot synthesise prompts.
    #[error("tokenizer `{}`: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },

    /// A compact distribution string such as `uniform:10,30` is invalid.
    #[error(transparent)]
    Distribution(#[from] isobench_common::DistributionError),

    /// Nothing would ever stop the run.
    #[error(
        "{}: the run has no stop condition: set load.max_requests or load.duration \
         (or pass --max-requests / --duration), or replay a dataset without `repeat`",
        file.display()
    )]
    NoStopCondition { file: PathBuf },
}

impl WorkloadError {
    /// A stable, machine-readable label for the error's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkloadError::Read { .. } => "read",
            WorkloadError::Field { .. } => "workload_field",
            WorkloadError::Flag { .. } => "flag",
            WorkloadError::Data { .. } => "data_file",
            WorkloadError::Tokenizer { .. } => "tokenizer",
            WorkloadError::Distribution(_) => "distribution",
            WorkloadError::NoStopCondition { .. } => "no_stop_condition",
        }
    }

    pub(crate) fn data(path: &Path, line: Option<usize>, message: impl Into<String>) -> Self {
        WorkloadError::Data {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    pub(crate) fn flag(flag: &'static str, message: impl Into<String>) -> Self {
        WorkloadError::Flag {
            flag,
            message: message.into(),
        }
    }
}

/// `path:line:column`, with the parts that are known.
struct Location<'a> {
    path: &'a Path,
    line: Option<usize>,
    column: Option<usize>,
}

impl<'a> Location<'a> {
    fn new(path: &'a Path, line: Option<usize>, column: Option<usize>) -> Self {
        Location { path, line, column }
    }
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        Ok(())
    }
}

/// `: field: ` when the field is known, `: ` otherwise.
struct FieldPrefix<'a>(&'a str);

impl fmt::Display for FieldPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            write!(f, ": ")
        } else {
            write!(f, ": {}: ", self.0)
        }
    }
}
