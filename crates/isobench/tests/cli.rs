//! The `isobench` binary end to end: real runs against the mock endpoint
//! and the embedded server on 127.0.0.1, Ctrl-C, SLO exit codes and bad
//! input.

mod common;

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Reaped, isobench, loopback_mock, repo_root, stderr, write_file};
use isobench_mock::{MockConfig, MockHandle};
use isobench_report::Report;

/// A mock with 20 ms TTFT and 2 ms between tokens, on a port of its own.
async fn mock() -> MockHandle {
    let config = MockConfig {
        ttft: "fixed:20".parse().unwrap(),
        itl: "fixed:2".parse().unwrap(),
        ..MockConfig::default()
    };
    loopback_mock(config).await
}

fn write_workload(dir: &Path, body: &str) -> PathBuf {
    write_file(dir, "w.toml", body)
}

const SMALL: &str = r#"
name = "cli-test"
[request]
input_tokens = 16
output_tokens = 8
ignore_eos = true
[load]
arrival = "closed"
concurrency = 2
max_requests = 6
"#;

fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every log line is JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_against_the_mock_writes_report_and_log() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), SMALL);
    let report_path = dir.path().join("r.json");
    let csv = dir.path().join("runs.csv");
    let output = isobench()
        .args([
            "run",
            workload.to_str().unwrap(),
            "--quiet",
            "--target",
            &mock.url(),
        ])
        .args(["--model", "mock", "-o", report_path.to_str().unwrap()])
        .args(["--csv", csv.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("TTFT"), "{table}");

    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(report.summary.requests.completed, 6);
    let ttft = report.summary.latency.ttft.as_ref().unwrap();
    assert!(
        (ttft.p50_ms - 20.0).abs() < 5.0,
        "TTFT p50 {} ms, injected 20 ms",
        ttft.p50_ms
    );
    let tpot = report.summary.latency.tpot.as_ref().unwrap();
    assert!(
        (tpot.p50_ms - 2.0).abs() < 1.0,
        "TPOT p50 {} ms, injected 2 ms",
        tpot.p50_ms
    );
    assert_eq!(
        log_lines(&report_path.with_extension("requests.jsonl")).len(),
        6
    );
    let summary = isobench()
        .args(["summary", report_path.to_str().unwrap(), "--baseline", "r"])
        .output()
        .unwrap();
    let summary_text = String::from_utf8_lossy(&summary.stdout);
    assert!(summary.status.success(), "{}", stderr(&summary));
    assert!(
        summary_text.lines().nth(1).unwrap().starts_with("r "),
        "{summary_text}"
    );
    assert!(summary_text.contains("1.00x"), "{summary_text}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(rows.lines().count(), 2, "header and one row: {rows}");
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_command_line_slo_exits_1_and_a_met_one_exits_0() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), SMALL);
    let run = |slo: &str| {
        isobench()
            .args([
                "run",
                workload.to_str().unwrap(),
                "--quiet",
                "--target",
                &mock.url(),
            ])
            .args([
                "-o",
                dir.path().join("r.json").to_str().unwrap(),
                "--slo",
                slo,
            ])
            .output()
            .unwrap()
    };
    let missed = run("ttft_p99=5ms");
    assert_eq!(missed.status.code(), Some(1), "{}", stderr(&missed));
    assert!(
        stderr(&missed).contains("SLO missed: ttft_p99"),
        "{}",
        stderr(&missed)
    );
    let met = run("ttft_p99=2s,tpot_p50=500ms");
    assert_eq!(met.status.code(), Some(0), "{}", stderr(&met));
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_run_and_keeps_what_finished() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "interrupted"
[request]
input_tokens = 16
output_tokens = 50
ignore_eos = true
[load]
arrival = "constant"
rate = 40.0
duration = "60s"
"#,
    );
    let report_path = dir.path().join("r.json");
    let mut child = Reaped(
        isobench()
            .args([
                "run",
                workload.to_str().unwrap(),
                "--quiet",
                "--target",
                &mock.url(),
            ])
            .args(["-o", report_path.to_str().unwrap(), "--drain-timeout", "5s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Interrupt once the run is well under way: the mock has answered a
    // dozen requests (a slow start on a busy machine only delays this).
    let mut stderr_lines = std::io::BufReader::new(child.0.stderr.take().unwrap()).lines();
    let under_way = tokio::time::timeout(Duration::from_secs(30), async {
        while mock.stats().completed < 12 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(under_way.is_ok(), "the run never got under way");
    let status = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    while let Some(Ok(line)) = stderr_lines.next() {
        rest.push_str(&line);
        rest.push('\n');
    }
    let exit = child.0.wait().unwrap();
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(exit.code(), Some(130), "{rest}");

    let report = Report::read_json(&report_path).expect("a valid report after Ctrl-C");
    assert!(report.run.interrupted);
    let completed = report.summary.requests.completed;
    assert!(
        completed >= 12,
        "the mock had answered 12 requests before the interrupt, the report has {completed}"
    );
    let log = log_lines(&report_path.with_extension("requests.jsonl"));
    let logged_ok = log.iter().filter(|line| line["error"].is_null()).count() as u64;
    assert_eq!(
        logged_ok, completed,
        "every completed request is in the log"
    );
    mock.shutdown().await;
}

#[test]
fn bad_workload_file_names_the_file_and_field_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        "[request]\ninput_tokens = 8\noutput_tokens = 8\n[load]\nrate = -5.0\nmax_requests = 3\n",
    );
    let output = isobench()
        .args([
            "run",
            workload.to_str().unwrap(),
            "--target",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("w.toml") && message.contains("load.rate"),
        "{message}"
    );
}

#[test]
fn unreachable_target_fails_fast_with_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), SMALL);
    let output = isobench()
        .args(["run", workload.to_str().unwrap(), "--quiet", "--model", "m"])
        .args(["--target", "http://127.0.0.1:9", "-o"])
        .arg(dir.path().join("r.json"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("127.0.0.1:9"),
        "{}",
        stderr(&output)
    );
    assert!(
        !dir.path().join("r.json").exists(),
        "no report for a run that never started"
    );
}

#[test]
fn without_target_the_embedded_server_answers() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), SMALL);
    let report_path = dir.path().join("r.json");
    let output = isobench()
        .args(["run", workload.to_str().unwrap(), "--quiet"])
        .args([
            "--server-model",
            "models/tiny-llama",
            "-o",
            report_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(report.summary.requests.completed, 6);
    assert_eq!(report.run.model, "tiny-llama");
    assert_eq!(
        report.summary.tokens.output,
        6 * 8,
        "ignore_eos fixes the output length"
    );
}

/// Regression: at high concurrency the client ran out of file descriptors
/// under the default soft limit and recorded `connect` errors; the binary
/// now raises the soft limit to the hard one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_soft_open_file_limit_is_raised() {
    let config = MockConfig {
        ttft: "fixed:300".parse().unwrap(),
        ..MockConfig::default()
    };
    let mock = loopback_mock(config).await;
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "many-sockets"
[request]
input_tokens = 4
output_tokens = 2
[load]
arrival = "closed"
concurrency = 300
max_requests = 300
"#,
    );
    let report_path = dir.path().join("r.json");
    let script = format!(
        "ulimit -Sn 128 && exec \"$0\" run {} --quiet --target {} -o {}",
        workload.display(),
        mock.url(),
        report_path.display()
    );
    let output = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_isobench")])
        .current_dir(repo_root())
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(
        report.summary.requests.completed, 300,
        "{:?}",
        report.summary.errors
    );
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_tells_a_real_ttft_regression_from_noise() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        &SMALL.replace("max_requests = 6", "max_requests = 40"),
    );
    let mut reports = Vec::new();
    for (name, ttft) in [("fast", "fixed:10"), ("slow", "fixed:40")] {
        let config = MockConfig {
            ttft: ttft.parse().unwrap(),
            ..MockConfig::default()
        };
        let mock = loopback_mock(config).await;
        let path = dir.path().join(format!("{name}.json"));
        let output = isobench()
            .args([
                "run",
                workload.to_str().unwrap(),
                "--quiet",
                "--target",
                &mock.url(),
            ])
            .args(["-o", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        reports.push(path);
        mock.shutdown().await;
    }
    let compare = |base: &Path, new: &Path| {
        let output = isobench()
            .arg("compare")
            .args([base, new])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let row = |text: &str, figure: &str| {
        text.lines()
            .find(|line| line.starts_with(figure))
            .unwrap_or_else(|| panic!("no {figure} row in\n{text}"))
            .to_owned()
    };
    let slower = compare(&reports[0], &reports[1]);
    assert!(
        row(&slower, "p50 TTFT").contains("slow's p50 TTFT is")
            && row(&slower, "p50 TTFT").contains("x the baseline's, 95% CI"),
        "{slower}"
    );
    let same = compare(&reports[0], &reports[0]);
    assert!(
        row(&same, "p50 TTFT").contains("no significant difference"),
        "{same}"
    );
}
