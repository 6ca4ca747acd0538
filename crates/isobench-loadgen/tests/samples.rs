//! What a run keeps besides its histograms: one sample per measured
//! request (warm-ups left out) agreeing with the log line of the same
//! request, and the whole records only when asked for.

mod common;

use std::sync::Arc;

use isobench_loadgen::{HttpBackend, RunOptions, run};
use isobench_metrics::SampleMetric;
use isobench_mock::MockConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_measured_request_has_a_sample_and_records_are_kept_on_request() {
    let mock = common::mock(MockConfig {
        ttft: common::dist("fixed:5"),
        itl: common::dist("fixed:1"),
        ..MockConfig::default()
    })
    .await;
    let mut plan = common::closed_plan(12, 3, 4);
    // The first two requests are warm-ups.
    let requests: Vec<_> = plan.requests.by_ref().collect();
    plan.shape.warmup = 2;
    plan.shape.max_requests = Some(10);
    plan.requests = Box::new(requests.into_iter().map(|mut r| {
        r.warmup = r.index < 2;
        r
    }));
    let (outcome, lines) =
        common::run_logged(plan, common::backend(&mock.url()), RunOptions::default()).await;
    assert_eq!(outcome.samples.len(), 10);
    assert!(
        outcome.records.is_empty(),
        "records are kept only when asked for"
    );
    assert_eq!(lines.len(), 12, "the log has the warm-ups too");
    let logged_ttft: Vec<f64> = lines
        .iter()
        .filter(|line| line["warmup"] == false)
        .map(|line| line["ttft_ms"].as_f64().unwrap())
        .collect();
    let sampled = outcome.samples.values_ms(SampleMetric::Ttft);
    assert_eq!(logged_ttft.len(), sampled.len());
    for (logged, sampled) in logged_ttft.iter().zip(&sampled) {
        assert!((logged - sampled).abs() < 1e-3, "{logged} {sampled}");
    }

    let backend = Arc::new(HttpBackend::new(common::backend(&mock.url())).unwrap());
    let options = RunOptions {
        keep_records: true,
        ..RunOptions::default()
    };
    let outcome = run(common::closed_plan(5, 2, 4), backend, options)
        .await
        .unwrap();
    assert_eq!(outcome.records.len(), 5);
    assert!(
        outcome
            .records
            .iter()
            .all(|r| r.content_event_ns.len() == 4)
    );
    mock.shutdown().await;
}
