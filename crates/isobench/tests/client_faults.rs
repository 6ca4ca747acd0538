//! The binary never loses a run to something it could have checked first,
//! and never calls a run with too many failures a success (issue 7,
//! section 2): unwritable outputs and impossible flag values are refused
//! before the first request, naming the flag; a run whose error rate
//! passes `--max-error-rate`, or where every request failed, exits 3.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{isobench, loopback_mock, stderr, write_file};
use isobench_mock::{MockConfig, MockHandle};
use isobench_report::Report;

async fn mock(error_rate: f64) -> MockHandle {
    let config = MockConfig {
        ttft: "fixed:1".parse().unwrap(),
        itl: "fixed:1".parse().unwrap(),
        error_rate,
        ..MockConfig::default()
    };
    loopback_mock(config).await
}

fn workload(dir: &Path, requests: u32) -> PathBuf {
    let body = format!(
        "name = \"faults\"\n[request]\ninput_tokens = 4\noutput_tokens = 2\n\
         [load]\narrival = \"closed\"\nconcurrency = 2\nmax_requests = {requests}\n"
    );
    write_file(dir, "w.toml", &body)
}

/// `isobench run` of `requests` requests against `url` with `extra` flags.
fn run(dir: &Path, url: &str, requests: u32, extra: &[&str]) -> Output {
    let workload = workload(dir, requests);
    isobench()
        .arg("run")
        .arg(&workload)
        .args(["--quiet", "--target", url])
        .args(extra)
        .output()
        .unwrap()
}

/// Requests the mock answered or failed: none means the run never started.
fn requests_seen(mock: &MockHandle) -> u64 {
    let stats = mock.stats();
    stats.completed + stats.errors
}

/// Regression: a report path that cannot be written was found only after
/// the whole run, and its results were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_outputs_are_refused_before_the_first_request() {
    let mock = mock(0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let under_a_file = blocker.join("r.json");
    let under_a_file = under_a_file.to_str().unwrap();
    let report = dir.path().join("r.json");
    let report = report.to_str().unwrap();
    let foreign_csv = dir.path().join("other.csv");
    std::fs::write(&foreign_csv, "when,what\n1,2\n").unwrap();

    let cases: [(&str, Vec<&str>); 4] = [
        ("--output", vec!["-o", under_a_file]),
        ("--log", vec!["-o", report, "--log", under_a_file]),
        ("--csv", vec!["-o", report, "--csv", under_a_file]),
        (
            "--csv",
            vec!["-o", report, "--csv", foreign_csv.to_str().unwrap()],
        ),
    ];
    for (flag, flags) in cases {
        let output = run(dir.path(), &mock.url(), 4, &flags);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {message}");
        assert!(message.contains(flag), "{flags:?}: {message}");
        assert_eq!(requests_seen(&mock), 0, "{flags:?}: the run started");
    }
    assert_eq!(
        std::fs::read_to_string(&foreign_csv).unwrap(),
        "when,what\n1,2\n",
        "a refused CSV is left as it was"
    );
    mock.shutdown().await;
}

/// Regression: `--timeout 0s` was reported as an unreachable endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_flag_values_name_the_flag() {
    let mock = mock(0.0).await;
    let dir = tempfile::tempdir().unwrap();
    for (flags, expected) in [
        (vec!["--timeout", "0s"], "--timeout"),
        (vec!["--max-error-rate", "1.5"], "--max-error-rate"),
        (vec!["--max-event-bytes", "0"], "--max-event-bytes"),
    ] {
        let output = run(dir.path(), &mock.url(), 2, &flags);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {message}");
        assert!(message.contains(expected), "{flags:?}: {message}");
        assert!(!message.contains("reach"), "{flags:?}: {message}");
    }
    assert_eq!(requests_seen(&mock), 0);
    mock.shutdown().await;
}

/// Regression: a run where every request failed exited 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_where_every_request_failed_exits_3_with_its_report() {
    let mock = mock(1.0).await;
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("r.json");
    let output = run(
        dir.path(),
        &mock.url(),
        6,
        &["-o", report_path.to_str().unwrap(), "--max-error-rate", "1"],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    assert!(!report.validity.valid);
    assert!(report.validity.too_many_errors);
    assert_eq!(report.summary.requests.failed, 6);
    assert!(stderr(&output).contains("--max-error-rate"));
    mock.shutdown().await;
}

/// Half the requests fail: over the default maximum (5%), under a raised one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_rate_decides_the_exit_code() {
    let mock = mock(0.5).await;
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("r.json");
    let report_flag = report_path.to_str().unwrap();
    // 40 draws at 50%: two or fewer failures (5%) has a chance below 1e-9.
    let output = run(dir.path(), &mock.url(), 40, &["-o", report_flag]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(report.validity.max_error_rate, Some(0.05));
    assert!(report.validity.error_rate.unwrap() > 0.05);

    // All 40 failing at 50% has a chance of 1e-12.
    let output = run(
        dir.path(),
        &mock.url(),
        40,
        &["-o", report_flag, "--max-error-rate", "1"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    // Not invalid for its errors (the run may still be for its dispatch
    // lag: a busy machine delays a closed loop's sends, which is judged
    // apart and does not change the exit code).
    assert!(!report.validity.too_many_errors, "{:?}", report.validity);
    assert_eq!(report.validity.max_error_rate, Some(1.0));
    assert!(report.summary.requests.failed > 0);
    mock.shutdown().await;
}
