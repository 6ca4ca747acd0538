//! Measured TTFT, ITL, TPOT and E2E match what the mock injected.
//!
//! Tolerance: medians within 2 ms of the injected value (TTFT and E2E never
//! below it), p90s within 5 ms above it. The mock keeps its delays to a few microseconds; the
//! rest is loopback, parsing and a shared, noisy CI machine, which the p90
//! bound leaves room for while still catching a systematic error such as
//! millisecond timer rounding.

mod common;

use std::time::Duration;

use common::*;
use isobench_loadgen::{RunOptions, StopReason};
use isobench_mock::MockConfig;
use isobench_workload::ApiKind;

const MEDIAN_TOLERANCE_MS: f64 = 2.0;
const P90_TOLERANCE_MS: f64 = 5.0;

/// A latency from the send (TTFT, E2E): the mock cannot answer before its
/// deadline, so the median is never below the injected value.
fn assert_latency(what: &str, values: &[f64], expected: f64) {
    let median = quantile(values, 0.5);
    assert!(
        median >= expected - 0.05,
        "{what} median {median} ms, below {expected} ms"
    );
    assert_near(what, values, expected);
}

/// A latency or gap within the stated tolerances of `expected` (a gap can
/// also be shorter: a late event shortens the gap after it).
fn assert_near(what: &str, values: &[f64], expected: f64) {
    let (median, p90) = (quantile(values, 0.5), quantile(values, 0.9));
    assert!(
        (median - expected).abs() <= MEDIAN_TOLERANCE_MS,
        "{what} median {median} ms, expected {expected} ms (±{MEDIAN_TOLERANCE_MS})"
    );
    assert!(
        p90 <= expected + P90_TOLERANCE_MS,
        "{what} p90 {p90} ms, expected at most {expected} + {P90_TOLERANCE_MS} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_latencies_match_the_injected_ones() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:20"),
        itl: dist("fixed:4"),
        ..MockConfig::default()
    })
    .await;
    let plan = open_plan(24, Duration::from_millis(15), 8);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!(outcome.stop, StopReason::MaxRequests);
    assert_eq!(outcome.counts.completed, 24, "{lines:?}");
    assert_eq!(lines.len(), 24);
    assert_latency("TTFT", &field(&lines, "ttft_ms"), 20.0);
    let itl: Vec<f64> = lines
        .iter()
        .flat_map(|l| {
            l["itl_ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
        })
        .collect();
    assert_eq!(itl.len(), 24 * 7, "every gap is kept");
    assert_near("ITL", &itl, 4.0);
    assert_near("TPOT", &field(&lines, "tpot_ms"), 4.0);
    assert_latency("E2E", &field(&lines, "e2e_ms"), 20.0 + 7.0 * 4.0);
    for line in &lines {
        assert_eq!(line["output_tokens"], 8);
        assert_eq!(line["token_source"], "usage");
        assert_eq!(line["events"], 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_chat_answers_arrive_when_the_last_token_would() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:10"),
        itl: dist("fixed:3"),
        ..MockConfig::default()
    })
    .await;
    let mut config = backend(&mock.url());
    config.api = ApiKind::Chat;
    config.stream = false;
    let plan = open_plan(12, Duration::from_millis(10), 6);
    let (outcome, lines) = run_logged(plan, config, RunOptions::default()).await;

    assert_eq!(outcome.counts.completed, 12, "{lines:?}");
    assert_latency("E2E", &field(&lines, "e2e_ms"), 10.0 + 5.0 * 3.0);
    for line in &lines {
        assert_eq!(line["ttft_ms"], line["e2e_ms"], "one event: the whole body");
        assert_eq!(line["output_tokens"], 6);
        assert_eq!(line["token_source"], "usage");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_streams_the_same_answers() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:5"),
        itl: dist("fixed:2"),
        ..MockConfig::default()
    })
    .await;
    let mut config = backend(&mock.url());
    config.http2 = true;
    let plan = open_plan(10, Duration::from_millis(5), 4);
    let (outcome, lines) = run_logged(plan, config, RunOptions::default()).await;

    assert_eq!(outcome.counts.completed, 10, "{lines:?}");
    assert_latency("TTFT", &field(&lines, "ttft_ms"), 5.0);
    assert_near("TPOT", &field(&lines, "tpot_ms"), 2.0);
}
