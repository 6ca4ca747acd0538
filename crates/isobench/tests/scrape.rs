//! The server's view in a run's report: the embedded server's own
//! `/metrics` scraped during the run into `server_metrics` (batch size,
//! queue and KV gauges on the run's time line).

mod common;

use common::isobench;
use isobench_report::Report;

#[test]
fn a_run_against_the_embedded_server_records_its_batch_queue_and_kv_cache() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("w.toml");
    std::fs::write(
        &workload,
        r#"
name = "scrape-test"
[request]
input_tokens = 16
output_tokens = 24
ignore_eos = true
[load]
arrival = "closed"
concurrency = 6
max_requests = 18
"#,
    )
    .unwrap();
    let report_path = dir.path().join("r.json");
    let output = isobench()
        .args(["run", workload.to_str().unwrap(), "--quiet"])
        .args([
            "--server-model",
            "models/tiny-llama",
            "--batching",
            "continuous",
        ])
        .args([
            "--scrape-interval",
            "20ms",
            "-o",
            report_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = Report::read_json(&report_path).unwrap();
    assert_eq!(report.summary.requests.completed, 18);
    let server = report
        .server_metrics
        .expect("the embedded server's /metrics was scraped");
    assert_eq!(server.source, "isobench");
    assert!(server.url.ends_with("/metrics"), "{}", server.url);
    assert!(server.t_s.len() >= 3, "{:?}", server.t_s);
    for series in [&server.running, &server.waiting, &server.kv_usage] {
        assert_eq!(series.len(), server.t_s.len());
        assert!(series.iter().all(Option::is_some), "{series:?}");
    }
    // Six requests at once were batched: some scrape saw several running,
    // holding KV blocks, and steps of several sequences.
    let peak = server.running.iter().flatten().copied().fold(0.0, f64::max);
    assert!(peak >= 2.0, "{:?}", server.running);
    assert!(
        server
            .kv_usage
            .iter()
            .flatten()
            .any(|&kv| kv > 0.0 && kv <= 1.0),
        "{:?}",
        server.kv_usage
    );
    assert!(
        server.batch_size.iter().flatten().any(|&b| b > 1.0),
        "{:?}",
        server.batch_size
    );
    assert!(
        report
            .run
            .server
            .as_deref()
            .is_some_and(|s| s.contains("continuous batching")),
        "{:?}",
        report.run.server
    );
    // Each measured request has its sample.
    assert_eq!(report.samples.unwrap().len(), 18);
}
