//! CSV: one header row, then one row per run, so that a series of runs
//! (a rate sweep, several batching policies) appends to one file that a
//! spreadsheet or pandas reads directly.
//!
//! Columns: a few run identifiers (`started_at`, `workload`, `target`,
//! `model`, `api`, `streaming`, `load`, `interrupted`, `valid`), then the
//! vLLM-compatible keys in [`crate::vllm::key_names`] order. Cells follow
//! RFC 4180 (quoted when they hold a comma, quote or line break); a `null`
//! is an empty cell.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde_json::Value;

use crate::{Report, ReportError, vllm};

/// The identifying columns before the vLLM keys.
const RUN_COLUMNS: [&str; 9] = [
    "started_at",
    "workload",
    "target",
    "model",
    "api",
    "streaming",
    "load",
    "interrupted",
    "valid",
];

/// The header row, without its line break.
pub fn header() -> String {
    let columns: Vec<String> = RUN_COLUMNS
        .iter()
        .map(|column| column.to_string())
        .chain(vllm::key_names())
        .collect();
    columns.join(",")
}

/// The report's row, without its line break.
pub fn row(report: &Report) -> String {
    let run = &report.run;
    let identifiers = [
        run.started_at.clone(),
        run.workload.clone(),
        run.target.clone(),
        run.model.clone(),
        run.api.clone(),
        run.streaming.to_string(),
        run.load.clone(),
        run.interrupted.to_string(),
        report.validity.valid.to_string(),
    ];
    let metrics = vllm::key_names()
        .into_iter()
        .map(|key| match report.vllm.get(&key) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(value) => value.to_string(),
        });
    let cells: Vec<String> = identifiers
        .into_iter()
        .chain(metrics)
        .map(|cell| quote(&cell))
        .collect();
    cells.join(",")
}

/// Appends the report's row to `path`, writing the header first when the
/// file is new or empty. A file whose header differs is left untouched.
pub fn append(report: &Report, path: &Path) -> Result<(), ReportError> {
    let write_error = |source| ReportError::Write {
        path: path.to_owned(),
        source,
    };
    let header = header();
    let needs_header = match fs::File::open(path) {
        Ok(file) => {
            let mut first_line = String::new();
            BufReader::new(file)
                .read_line(&mut first_line)
                .map_err(|source| ReportError::Read {
                    path: path.to_owned(),
                    source,
                })?;
            let first_line = first_line.trim_end_matches(['\r', '\n']);
            if !first_line.is_empty() && first_line != header {
                return Err(ReportError::CsvHeader {
                    path: path.to_owned(),
                });
            }
            first_line.is_empty()
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => true,
        Err(source) => {
            return Err(ReportError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut text = String::new();
    if needs_header {
        text.push_str(&header);
        text.push('\n');
    }
    text.push_str(&row(report));
    text.push('\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(write_error)?;
    file.write_all(text.as_bytes()).map_err(write_error)
}

/// An RFC 4180 cell: quoted, with quotes doubled, when it needs to be.
fn quote(cell: &str) -> String {
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn cells_are_quoted_only_when_needed() {
        assert_eq!(quote("poisson 20 req/s"), "poisson 20 req/s");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
