//! Where a workload file's errors point: the file, the TOML path of the
//! field (`load.rate`) and its line and column, and how the file's relative
//! paths resolve.
//!
//! Serde reports a byte span; validation reports a TOML path. Both are
//! mapped onto each other through the document's spanned tree
//! ([`toml::de::DeTable`]), which is parsed again only when an error is
//! reported.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::WorkloadError;

/// A workload file being loaded: its path, text and folder.
pub(crate) struct FileContext {
    file: PathBuf,
    text: String,
}

impl FileContext {
    pub(crate) fn new(file: &Path, text: String) -> Self {
        FileContext {
            file: file.to_path_buf(),
            text,
        }
    }

    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// An error about the field at `path`, located at its value when the
    /// file has one (else at the nearest enclosing table that it has).
    pub(crate) fn field_error(&self, path: &str, message: impl Into<String>) -> WorkloadError {
        let span = DeTable::parse(&self.text)
            .ok()
            .and_then(|root| span_of_path(&root, path));
        self.error_at(path.to_string(), span, message.into())
    }

    /// A serde/TOML error, with the field it occurred in.
    pub(crate) fn toml_error(&self, error: &toml::de::Error) -> WorkloadError {
        let span = error.span();
        let path = span
            .as_ref()
            .and_then(|span| {
                let (root, _) = DeTable::parse_recoverable(&self.text);
                path_at(root.get_ref(), span)
            })
            .unwrap_or_default();
        self.error_at(path, span, plain_types(error.message().trim()))
    }

    fn error_at(
        &self,
        field: String,
        span: Option<Range<usize>>,
        message: String,
    ) -> WorkloadError {
        let (line, column) = match span {
            Some(span) => {
                let (line, column) = line_and_column(&self.text, span.start);
                (Some(line), Some(column))
            }
            None => (None, None),
        };
        WorkloadError::Field {
            file: self.file.clone(),
            field,
            line,
            column,
            message,
        }
    }

    /// Resolves a path written in the file: relative paths are looked up in
    /// the workload file's folder first, then in the current directory.
    pub(crate) fn resolve(&self, field: &str, written: &Path) -> Result<PathBuf, WorkloadError> {
        if written.is_absolute() {
            return if written.exists() {
                Ok(written.to_path_buf())
            } else {
                Err(self.field_error(field, format!("no file at `{}`", written.display())))
            };
        }
        let folder = self.file.parent().unwrap_or(Path::new(""));
        let beside_file = folder.join(written);
        if beside_file.exists() {
            return Ok(beside_file);
        }
        if written.exists() {
            return Ok(written.to_path_buf());
        }
        Err(self.field_error(
            field,
            format!(
                "no file at `{}` (looked in the workload file's folder `{}` and in the current directory)",
                written.display(),
                folder.display()
            ),
        ))
    }
}

/// Serde's Rust type names in words.
fn plain_types(message: &str) -> String {
    message
        .replace("expected f64", "expected a number")
        .replace("expected i64", "expected an integer")
        .replace("expected u64", "expected an integer >= 0")
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Whether `outer` covers the non-empty `inner`.
fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && inner.start < inner.end
}

/// The dotted path of the innermost key or value whose span covers `span`.
fn path_at(table: &DeTable<'_>, span: &Range<usize>) -> Option<String> {
    let mut best: Option<String> = None;
    for (key, value) in table {
        let nested = match value.get_ref() {
            DeValue::Table(inner) => path_at(inner, span),
            DeValue::Array(items) => items.iter().enumerate().find_map(|(index, item)| match item
                .get_ref()
            {
                DeValue::Table(inner) => path_at(inner, span).map(|p| format!("{index}.{p}")),
                _ => contains(&item.span(), span).then(|| index.to_string()),
            }),
            _ => None,
        };
        if let Some(nested) = nested {
            return Some(format!("{}.{nested}", key.get_ref()));
        }
        if contains(&key.span(), span) || contains(&value.span(), span) {
            best = Some(key.get_ref().to_string());
        }
    }
    best
}

/// The span of the value at the dotted `path`, or of the deepest enclosing
/// table present in the file.
fn span_of_path(root: &Spanned<DeTable<'_>>, path: &str) -> Option<Range<usize>> {
    let mut table = root.get_ref();
    let mut found = None;
    for segment in path.split('.') {
        let Some((key, value)) = table.get_key_value(segment) else {
            break;
        };
        found = Some(if value.span().is_empty() {
            key.span()
        } else {
            value.span()
        });
        match value.get_ref() {
            DeValue::Table(inner) => table = inner,
            _ => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name = \"x\"\n[load]\nrate = -1\n\n[request]\ninput_tokens = { dist = \"uniform\", min = 3 }\n";

    #[test]
    fn validation_errors_point_at_the_value() {
        let context = FileContext::new(Path::new("w.toml"), TEXT.to_string());
        let message = context.field_error("load.rate", "must be > 0").to_string();
        assert_eq!(message, "w.toml:3:8: load.rate: must be > 0");
        let message = context
            .field_error("request.input_tokens.min", "bad")
            .to_string();
        assert!(message.starts_with("w.toml:6:"), "{message}");
        // A missing field points at its table.
        let message = context.field_error("load.concurrency", "x").to_string();
        assert!(message.starts_with("w.toml:"), "{message}");
    }

    #[test]
    fn serde_errors_name_the_field() {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Load {
            rate: String,
        }
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Doc {
            load: Load,
        }
        let text = "[load]\nrate = 5\n";
        let error = toml::from_str::<Doc>(text).err().expect("wrong type");
        let context = FileContext::new(Path::new("w.toml"), text.to_string());
        let message = context.toml_error(&error).to_string();
        assert!(
            message.starts_with("w.toml:2:8: load.rate: invalid type"),
            "{message}"
        );
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_and_column("a\nbé = 1", 6), (2, 4));
        assert_eq!(line_and_column("", 0), (1, 1));
    }
}
