//! The report's three forms from a real recorded run: vLLM-compatible keys,
//! JSON written and read back, CSV appended, and the terminal table.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use isobench_metrics::{Recorder, RequestRecord, assess_validity};
use isobench_report::{NamedReport, Report, ReportError, SCHEMA_VERSION, csv, table, tables, vllm};
use serde_json::Value;

#[test]
fn vllm_keys_mirror_the_nested_figures() {
    let report = common::sample_report();
    let json = serde_json::to_value(&report).unwrap();
    let summary = &report.summary;
    let ttft = summary.latency.ttft.as_ref().unwrap();
    let itl = summary.latency.itl_per_event.as_ref().unwrap();
    assert_eq!(json["duration"], summary.window_s);
    assert_eq!(json["completed"], summary.requests.completed);
    assert_eq!(
        json["failed"],
        summary.requests.failed + summary.requests.cancelled
    );
    assert_eq!(json["total_output_tokens"], summary.tokens.output);
    assert_eq!(
        json["request_goodput"],
        summary.throughput.goodput_requests_per_s.unwrap()
    );
    assert_eq!(
        json["output_throughput"],
        summary.throughput.output_tokens_per_s
    );
    assert_eq!(json["mean_ttft_ms"], ttft.mean_ms);
    assert_eq!(json["median_ttft_ms"], ttft.p50_ms);
    assert_eq!(json["std_ttft_ms"], ttft.stddev_ms);
    assert_eq!(json["p99.9_ttft_ms"], ttft.p99_9_ms);
    assert_eq!(json["p95_itl_ms"], itl.p95_ms);
    let e2e = summary.latency.e2e.as_ref().unwrap();
    assert_eq!(json["p90_e2el_ms"], e2e.p90_ms);
    for key in vllm::key_names() {
        assert!(json.get(&key).is_some(), "missing {key}");
    }
    assert_eq!(vllm::key_names().len(), 9 + 4 * 8);
}

#[test]
fn vllm_keys_read_zero_for_metrics_without_samples() {
    let mut recorder = Recorder::new();
    // One single-token answer: no ITL, no TPOT.
    let mut record = RequestRecord::new(0, false, 0, 1);
    record.content_event_ns.push(40_000_000);
    record.end_ns = 40_000_000;
    record.output_tokens = 1;
    recorder.record(&record);
    let summary = recorder.summarize(Duration::from_secs(1));
    let validity = assess_validity(&summary, None);
    let report = Report::new(common::run_meta(), summary, validity);
    assert_eq!(report.vllm["p99_tpot_ms"], 0.0);
    assert_eq!(report.vllm["mean_itl_ms"], 0.0);
    assert_eq!(report.vllm["p99_ttft_ms"], 40.0);
    assert_eq!(report.vllm["request_goodput"], Value::Null);
}

#[test]
fn json_is_written_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("result.json");
    let report = common::sample_report();
    report.write_json(&path).unwrap();
    assert!(!dir.path().join("result.json.tmp").exists());
    let back = Report::read_json(&path).unwrap();
    assert_eq!(back.schema_version, SCHEMA_VERSION);
    assert_eq!(back.run, report.run);
    assert_eq!(back.summary.requests, report.summary.requests);
    assert_eq!(back.summary.errors, report.summary.errors);
    assert_eq!(back.validity.valid, report.validity.valid);
    assert_eq!(back.vllm.len(), report.vllm.len());
    let p99 = |r: &Report| r.summary.latency.ttft.as_ref().unwrap().p99_ms;
    assert!((p99(&back) - p99(&report)).abs() < 1e-9);
}

#[test]
fn reading_rejects_newer_schemas_and_non_reports() {
    let report = common::sample_report();
    let mut json: Value = serde_json::from_str(&report.to_json()).unwrap();
    json["schema_version"] = (SCHEMA_VERSION + 1).into();
    let path = Path::new("runs/next.json");
    let error = Report::from_json(&json.to_string(), path).unwrap_err();
    assert_eq!(error.kind(), "schema_version");
    let message = error.to_string();
    assert!(
        message.contains("runs/next.json") && message.contains("schema_version 2"),
        "{message}"
    );

    let error = Report::from_json("{\"schema_version\": 1, \"tool\": 3}", path).unwrap_err();
    assert_eq!(error.kind(), "parse");
    assert!(error.to_string().contains("not an isobench JSON report"));
    let missing = Report::read_json(Path::new("/nonexistent/result.json")).unwrap_err();
    assert_eq!(missing.kind(), "read");
}

#[test]
fn csv_rows_append_under_one_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.csv");
    let report = common::sample_report();
    csv::append(&report, &path).unwrap();
    csv::append(&report, &path).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], csv::header());
    assert_eq!(lines[1], lines[2]);

    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(&header[..3], ["started_at", "workload", "target"]);
    assert!(header.contains(&"p99.9_ttft_ms"));
    // The load description holds commas, so it is quoted: split on the
    // header's own column count after unquoting that one cell.
    let row = lines[1].replace("\"constant 20 req/s, 240 requests, 8 warm-up\"", "LOAD");
    let cells: Vec<&str> = row.split(',').collect();
    assert_eq!(cells.len(), header.len());
    let column = |name: &str| cells[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(column("load"), "LOAD");
    assert_eq!(
        column("completed"),
        report.summary.requests.completed.to_string()
    );
    assert_eq!(column("valid"), "true");
    assert_eq!(
        column("p99_ttft_ms").parse::<f64>().unwrap(),
        report.vllm["p99_ttft_ms"]
    );
}

#[test]
fn csv_refuses_a_file_with_another_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.csv");
    fs::write(&path, "a,b,c\n1,2,3\n").unwrap();
    let error = csv::append(&common::sample_report(), &path).unwrap_err();
    assert!(matches!(error, ReportError::CsvHeader { .. }));
    assert!(error.to_string().contains("other.csv"));
    assert_eq!(fs::read_to_string(&path).unwrap(), "a,b,c\n1,2,3\n");
}

#[test]
fn the_table_shows_every_section() {
    let text = table::render(&common::sample_report());
    for expected in [
        "workload chat (workloads/chat.toml)",
        "216 completed, 12 failed, 4 cancelled (8 warm-up, excluded)",
        "errors    cancelled 4, http_429 6, timeout 6",
        "5 sent again on a new connection", // 6 retried, 1 a warm-up
        "latency (ms)",
        "TTFT from schedule",
        "ITL per event",
        "ITL per token",
        "dispatch lag",
        "req/s",
        "goodput",
        "PASS ttft_p99=150ms",
        "FAIL itl_p95=22ms",
        "prompt lengths: exact (tokenizer)",
        "output counts: mixed",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    assert!(!text.contains("INVALID"), "{text}");
    // Rows are aligned: every latency row is as wide as the header.
    let width = text
        .lines()
        .find(|l| l.starts_with("latency (ms)"))
        .unwrap()
        .len();
    for row in text
        .lines()
        .filter(|l| l.starts_with("TTFT") || l.starts_with("E2E"))
    {
        assert_eq!(row.len(), width, "{row}");
    }
}

#[test]
fn the_table_flags_an_invalid_or_interrupted_run() {
    let mut report = common::sample_report();
    report.run.interrupted = true;
    report.validity = assess_validity(&Recorder::new().summarize(Duration::ZERO), Some(20.0));
    let text = table::render(&report);
    assert!(
        text.contains("!! INVALID RUN: no measured request"),
        "{text}"
    );
    assert!(
        text.contains("warning: the send rate could not be checked"),
        "{text}"
    );
    assert!(text.contains("interrupted"), "{text}");
}

#[test]
fn the_runs_table_has_gpu_columns_only_when_a_run_used_a_gpu() {
    let named = |name: &str, report: Report| NamedReport {
        name: name.into(),
        report,
    };
    let cpu_only = tables::runs(&[named("cpu", common::sample_report())]);
    for gpu_header in ["J/token", "peak GiB", "busy %", "idle %"] {
        assert!(
            !cpu_only.headers.iter().any(|h| h == gpu_header),
            "{cpu_only:?}"
        );
    }

    let gpu = common::sample_report().with_gpu(common::h200(Some(1234.5)));
    let per_token = gpu.gpu.as_ref().unwrap().energy_per_output_token_j.unwrap();
    let busy = 100.0 * 0.5 / gpu.summary.window_s;
    let idle = 100.0 * 0.25 / gpu.summary.window_s;
    let table = tables::runs(&[named("gpu", gpu), named("cpu", common::sample_report())]);
    let column = |header: &str| {
        let index = table.headers.iter().position(|h| h == header);
        let index = index.unwrap_or_else(|| panic!("no `{header}` column: {:?}", table.headers));
        (table.rows[0][index].clone(), table.rows[1][index].clone())
    };
    assert_eq!(column("J/token"), (format!("{per_token:.4}"), "-".into()));
    // 141e9 bytes in GiB.
    assert_eq!(column("peak GiB"), ("131.3".into(), "-".into()));
    assert_eq!(column("busy %"), (format!("{busy:.0}"), "-".into()));
    assert_eq!(column("idle %"), (format!("{idle:.0}"), "-".into()));
    // The other columns keep their places around them.
    assert_eq!(table.headers.last().map(String::as_str), Some("notes"));
    assert!(
        table
            .rows
            .iter()
            .all(|row| row.len() == table.headers.len())
    );
    assert!(table.text().contains("J/token"));
}
