//! Bad workload files give messages that name the file, the field (with its
//! line) and what would be accepted.

mod common;

use std::path::{Path, PathBuf};

use isobench_workload::{Workload, WorkloadError};

const REQUEST: &str = "[request]\ninput_tokens = 16\noutput_tokens = 16\n";

/// Writes `text` to `bad.toml` in a fresh folder and loads it.
fn load_error(text: &str) -> (PathBuf, WorkloadError, tempfile::TempDir) {
    let folder = tempfile::tempdir().expect("temporary folder");
    let path = folder.path().join("bad.toml");
    std::fs::write(&path, text).expect("written");
    let error = Workload::from_file(&path).expect_err("the file is invalid");
    (path, error, folder)
}

/// Asserts that loading `text` fails with `file:line:column: field: ...needle...`.
fn assert_field_error(text: &str, line: usize, field: &str, needle: &str) {
    let (path, error, _folder) = load_error(text);
    let message = error.to_string();
    let prefix = format!("{}:{line}:", path.display());
    assert!(
        message.starts_with(&prefix),
        "expected {prefix}... got: {message}"
    );
    assert!(
        message.contains(&format!(": {field}: ")),
        "expected field {field} in: {message}"
    );
    assert!(
        message.contains(needle),
        "expected `{needle}` in: {message}"
    );
    assert_eq!(error.kind(), "workload_field");
}

#[test]
fn unknown_field() {
    assert_field_error(
        &format!("{REQUEST}[load]\nconcurency = 4\nmax_requests = 3\n"),
        5,
        "load.concurency",
        "unknown field `concurency`, expected one of `arrival`, `rate`",
    );
    assert_field_error(
        &format!("{REQUEST}ignore_eos = true\nmax_token = 3\n"),
        5,
        "request.max_token",
        "unknown field `max_token`",
    );
}

#[test]
fn wrong_type() {
    assert_field_error(
        &format!("{REQUEST}[load]\nrate = \"fast\"\n"),
        5,
        "load.rate",
        "invalid type: string \"fast\", expected a number",
    );
    assert_field_error(
        "stream = \"yes\"\n[request]\ninput_tokens = 1\noutput_tokens = 1\n",
        1,
        "stream",
        "expected a boolean",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\nduration = \"soon\"\n"),
        5,
        "load.duration",
        "`soon` is not a duration",
    );
    assert_field_error(
        &format!("{REQUEST}[slo]\nttft_p99 = 500\n"),
        5,
        "slo.ttft_p99",
        "expected a string",
    );
}

#[test]
fn negative_or_zero_values() {
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"poisson\"\nrate = -5.0\n"),
        6,
        "load.rate",
        "must be a number of requests/s > 0, got -5",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\nconcurrency = 0\n"),
        5,
        "load.concurrency",
        "must be an integer >= 1, got 0",
    );
    assert_field_error(
        "[request]\ninput_tokens = { dist = \"uniform\", min = 0, max = 4 }\noutput_tokens = 3\n",
        2,
        "request.input_tokens.min",
        "must be an integer from 1",
    );
    assert_field_error(
        &format!("timeout = \"0s\"\n{REQUEST}"),
        1,
        "timeout",
        "must be longer than 0s",
    );
}

#[test]
fn fields_that_do_not_fit_the_arrival_process() {
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"closed\"\nrate = 5.0\n"),
        6,
        "load.rate",
        "does not apply to arrival = \"closed\"",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"poisson\"\n"),
        4,
        "load.rate",
        "arrival = \"poisson\" needs a rate",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"burst\"\nburst_interval = \"1s\"\n"),
        4,
        "load",
        "needs burst_size",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"sometimes\"\n"),
        5,
        "load.arrival",
        "unknown variant `sometimes`, expected one of `closed`, `constant`, `poisson`",
    );
    assert_field_error(
        &format!("{REQUEST}[load]\narrival = \"trace\"\n"),
        5,
        "load.arrival",
        "needs request.dataset with kind = \"trace\"",
    );
}

#[test]
fn missing_request_fields() {
    assert_field_error(
        "[request]\ninput_tokens = 5\n",
        1,
        "request",
        "missing `output_tokens`",
    );
    let (path, error, _folder) = load_error("name = \"x\"\n");
    let message = error.to_string();
    let expected = format!("{}:1:1: missing field `request`", path.display());
    assert_eq!(message, expected);
}

#[test]
fn reserved_headers_and_body_fields() {
    assert_field_error(
        &format!("{REQUEST}[request.headers]\nAuthorization = \"Bearer x\"\n"),
        5,
        "request.headers.Authorization",
        "the API key is read only from the environment",
    );
    assert_field_error(
        &format!("{REQUEST}[request.extra_body]\nmax_tokens = 5\n"),
        5,
        "request.extra_body.max_tokens",
        "set from request.output_tokens",
    );
}

#[test]
fn syntax_errors_give_the_line() {
    let (path, error, _folder) = load_error("[request]\ninput_tokens = = 3\n");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}:2:", path.display())),
        "{message}"
    );
}

#[test]
fn missing_stop_condition() {
    let folder = tempfile::tempdir().unwrap();
    let workload = common::workload_in(folder.path(), "endless.toml", REQUEST);
    let error = workload.plan(None).expect_err("nothing stops the run");
    let message = error.to_string();
    assert!(message.starts_with(&folder.path().join("endless.toml").display().to_string()));
    assert!(message.contains("no stop condition"), "{message}");
    assert!(
        message.contains("load.max_requests or load.duration"),
        "{message}"
    );
    assert!(message.contains("--max-requests / --duration"), "{message}");
    assert_eq!(error.kind(), "no_stop_condition");
}

#[test]
fn unreadable_dataset() {
    assert_field_error(
        "[request]\ndataset = { kind = \"sharegpt\", path = \"missing.json\" }\n",
        2,
        "request.dataset.path",
        "no file at `missing.json` (looked in the workload file's folder",
    );
    // A folder where a file is expected: found, but not readable as one.
    let folder = tempfile::tempdir().unwrap();
    std::fs::create_dir(folder.path().join("dump.json")).unwrap();
    let path = folder.path().join("w.toml");
    std::fs::write(
        &path,
        "[request]\ndataset = { kind = \"trace\", path = \"dump.json\" }\n",
    )
    .unwrap();
    let message = Workload::from_file(&path).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}:2:", path.display())),
        "{message}"
    );
    assert!(
        message.contains("request.dataset.path: cannot read"),
        "{message}"
    );
}

#[test]
fn malformed_dataset_records_give_their_line() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(
        folder.path().join("trace.jsonl"),
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5}\n{\"timestamp\": 10, \"input_length\": \"long\", \"output_length\": 5}\n",
    )
    .unwrap();
    let path = folder.path().join("w.toml");
    std::fs::write(
        &path,
        "[request]\ndataset = { kind = \"trace\", path = \"trace.jsonl\" }\n",
    )
    .unwrap();
    let error = Workload::from_file(&path).unwrap_err();
    let message = error.to_string();
    let trace = folder.path().join("trace.jsonl");
    assert!(
        message.starts_with(&format!("{}:2: invalid type", trace.display())),
        "{message}"
    );
    assert_eq!(error.kind(), "data_file");
}

#[test]
fn unreadable_workload_file() {
    let error = Workload::from_file(Path::new("no/such/workload.toml")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cannot read workload file `no/such/workload.toml`")
    );
    assert_eq!(error.kind(), "read");
}

#[test]
fn a_missing_tokenizer_is_named() {
    assert_field_error(
        &format!("tokenizer = \"nowhere/tokenizer.json\"\n{REQUEST}"),
        1,
        "tokenizer",
        "no file at `nowhere/tokenizer.json`",
    );
    let workload = common::workload(&format!("{REQUEST}[load]\nmax_requests = 1\n"));
    let error = workload.plan(Some(Path::new("nowhere.json"))).unwrap_err();
    assert!(
        error.to_string().starts_with("tokenizer `nowhere.json`: "),
        "{error}"
    );
}
