//! Measured TTFT, ITL, TPOT and E2E are what the mock really did.
//!
//! The truth is the mock's own record of when it wrote each event (it runs
//! in this process and keeps the instants, `record_writes`), not the
//! injected schedule: on a busy machine the mock may write an event late,
//! and a client that measures that late event exactly is right. So each
//! check has two halves that cannot fail for a loaded machine alone:
//! - the client's error against the writes: it never sees an event before
//!   it was written, and sees it within a millisecond at the median
//!   (loopback, parsing and scheduling on a shared 2-core machine);
//! - the mock honoured the injection: it never wrote an event early.
//!
//! A systematic client error (millisecond timer rounding, timestamping at
//! the wrong point, counting from the wrong send) moves every request and
//! is caught by the medians.

mod common;

use std::time::Duration;

use common::written::*;
use common::*;
use isobench_loadgen::{RunOptions, StopReason};
use isobench_mock::MockConfig;
use isobench_workload::ApiKind;

/// The log's figures are the records' (TTFT from the send, TPOT from the
/// span of the events), so checking the records checks the log.
fn assert_log_matches(lines: &[serde_json::Value], exchanges: &[Exchange]) {
    for exchange in exchanges {
        let line = lines
            .iter()
            .find(|l| l["index"] == exchange.index)
            .unwrap_or_else(|| panic!("request {} is not in the log", exchange.index));
        let ttft = (exchange.seen_ns[0] - exchange.sent_ns) as f64 / 1e6;
        let logged = line["ttft_ms"].as_f64().unwrap();
        assert!((logged - ttft).abs() < 0.01, "{line} vs {ttft}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_latencies_match_what_the_mock_wrote() {
    let _timing = timing_lock().await;
    let mock = mock(MockConfig {
        ttft: dist("fixed:20"),
        itl: dist("fixed:4"),
        record_writes: true,
        ..MockConfig::default()
    })
    .await;
    let plan = open_plan(24, Duration::from_millis(15), 8);
    let (outcome, lines, exchanges) =
        run_against_writes(plan, backend(&mock.url()), RunOptions::default(), &mock).await;

    assert_eq!(outcome.stop, StopReason::MaxRequests);
    assert_eq!(outcome.counts().completed, 24, "{lines:?}");
    assert_eq!(lines.len(), 24);
    assert_eq!(exchanges.len(), 24);
    assert_first_events_seen(&exchanges);
    assert_gaps_seen(&exchanges);
    assert_never_early(&exchanges, 20.0, 4.0);
    assert_log_matches(&lines, &exchanges);
    for line in &lines {
        assert_eq!(line["output_tokens"], 8);
        assert_eq!(line["token_source"], "usage");
        assert_eq!(line["events"], 8);
        assert_eq!(
            line["itl_ms"].as_array().unwrap().len(),
            7,
            "every gap is kept"
        );
    }
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_chat_answers_arrive_when_the_mock_writes_them() {
    let _timing = timing_lock().await;
    let mock = mock(MockConfig {
        ttft: dist("fixed:10"),
        itl: dist("fixed:3"),
        record_writes: true,
        ..MockConfig::default()
    })
    .await;
    let mut config = backend(&mock.url());
    config.api = ApiKind::Chat;
    config.stream = false;
    let plan = open_plan(12, Duration::from_millis(10), 6);
    let (outcome, lines, exchanges) =
        run_against_writes(plan, config, RunOptions::default(), &mock).await;

    assert_eq!(outcome.counts().completed, 12, "{lines:?}");
    // One event: the whole body, written when the last token would have been.
    assert_first_events_seen(&exchanges);
    assert_never_early(&exchanges, 10.0 + 5.0 * 3.0, 0.0);
    for line in &lines {
        assert_eq!(line["ttft_ms"], line["e2e_ms"], "one event: the whole body");
        assert_eq!(line["output_tokens"], 6);
        assert_eq!(line["token_source"], "usage");
    }
    mock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_streams_the_same_answers() {
    let _timing = timing_lock().await;
    let mock = mock(MockConfig {
        ttft: dist("fixed:5"),
        itl: dist("fixed:2"),
        record_writes: true,
        ..MockConfig::default()
    })
    .await;
    let mut config = backend(&mock.url());
    config.http2 = true;
    let plan = open_plan(10, Duration::from_millis(5), 4);
    let (outcome, lines, exchanges) =
        run_against_writes(plan, config, RunOptions::default(), &mock).await;

    assert_eq!(outcome.counts().completed, 10, "{lines:?}");
    assert_first_events_seen(&exchanges);
    assert_gaps_seen(&exchanges);
    assert_never_early(&exchanges, 5.0, 2.0);
    mock.shutdown().await;
}
