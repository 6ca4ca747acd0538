//! The report crate's errors: files that cannot be written or read back.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },

    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },

    #[error(
        "{} is not a regular file; accepted: a JSON report written by isobench run, sweep or plan",
        path.display()
    )]
    NotAFile { path: PathBuf },

    #[error("{} is not an isobench JSON report: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },

    #[error(
        "{} has schema_version {found}, but this isobench reads schema versions 1 to {supported}: read it with the isobench that wrote it, or a newer one",
        path.display()
    )]
    SchemaVersion {
        path: PathBuf,
        found: String,
        supported: u32,
    },

    #[error(
        "{} already has a header row that differs from the one this isobench writes (another schema version, or another tool's file): append to a new CSV file instead",
        path.display()
    )]
    CsvHeader { path: PathBuf },
}

impl ReportError {
    /// A stable label for logs and JSON `error_type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ReportError::Write { .. } => "write",
            ReportError::Read { .. } => "read",
            ReportError::NotAFile { .. } => "not_a_file",
            ReportError::Parse { .. } => "parse",
            ReportError::SchemaVersion { .. } => "schema_version",
            ReportError::CsvHeader { .. } => "csv_header",
        }
    }
}
