//! How runs end: cancellation (Ctrl-C) and `duration` stop sending, let
//! requests in flight finish for the drain time, record the rest as
//! cancelled, and leave a complete JSONL log of everything that finished.

mod common;

use std::time::Duration;

use common::*;
use isobench_loadgen::{RunOptions, StopReason};
use isobench_mock::MockConfig;
use isobench_workload::{Plan, PlannedRequest};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_run_keeps_a_complete_log_of_what_finished() {
    let mock = mock(MockConfig {
        itl: dist("fixed:10"),
        ..MockConfig::default()
    })
    .await;
    // 200 requests over 2 s, each streaming for 70 ms; cancelled once ten
    // have completed (whenever a busy machine gets there).
    let plan = open_plan(200, Duration::from_millis(10), 8);
    let cancel = CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        drain_timeout: Duration::from_millis(30),
        ..RunOptions::default()
    };
    let trigger = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while mock.stats().completed < 10 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    };
    let ((outcome, lines), ()) =
        tokio::join!(run_logged(plan, backend(&mock.url()), options), trigger);

    assert!(outcome.interrupted);
    assert_eq!(outcome.stop, StopReason::Cancelled);
    let counts = outcome.counts();
    assert!(
        counts.completed >= 10 && counts.measured < 200,
        "stopped sending after the cancel: {counts:?}"
    );
    assert_eq!(
        counts.measured,
        counts.completed + counts.failed + counts.cancelled
    );
    assert_eq!(counts.failed, 0, "cut requests are not server failures");
    assert!(counts.cancelled > 0, "{counts:?}");
    assert_eq!(
        lines.len() as u64,
        counts.measured,
        "every request has its line"
    );
    assert_eq!(outcome.logged, counts.measured);
    let cancelled = error_kinds(&lines)
        .iter()
        .filter(|k| *k == "cancelled")
        .count();
    assert_eq!(cancelled as u64, counts.cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duration_stops_sending_and_cuts_what_outlives_the_drain() {
    let mock = mock(MockConfig {
        itl: dist("fixed:100"),
        ..MockConfig::default()
    })
    .await;
    let mut plan = open_plan(1000, Duration::from_millis(20), 8);
    plan.shape.max_requests = None;
    plan.shape.duration = Some(Duration::from_millis(200));
    let options = RunOptions {
        drain_timeout: Duration::from_millis(100),
        ..RunOptions::default()
    };
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), options).await;

    assert_eq!(outcome.stop, StopReason::Duration);
    assert!(!outcome.interrupted);
    // Offsets 0, 20, ..., 180 ms fall inside the 200 ms duration.
    assert_eq!(outcome.counts().measured, 10);
    // Each stream lasts 700 ms: the drain cuts them all.
    assert_eq!(outcome.counts().cancelled, 10);
    assert_eq!(lines.len(), 10);
    for line in &lines {
        assert!(
            line["events"].as_u64().unwrap() >= 1,
            "what arrived is kept: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_requests_and_warmups_bound_the_run() {
    let mock = mock(MockConfig::default()).await;
    let requests = (0..50).map(|i| PlannedRequest {
        warmup: i < 2,
        ..planned(i, Some(Duration::from_millis(i)), 2)
    });
    let mut plan: Plan = open_plan(0, Duration::ZERO, 2);
    plan.requests = Box::new(requests);
    plan.shape.max_requests = Some(5);
    plan.shape.warmup = 2;
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!(outcome.stop, StopReason::MaxRequests);
    assert_eq!((outcome.counts().measured, outcome.counts().warmup), (5, 2));
    assert_eq!(lines.len(), 7);
    let warmups = lines.iter().filter(|l| l["warmup"] == true).count();
    assert_eq!(warmups, 2);
}
