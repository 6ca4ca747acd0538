//! Failed requests are recorded and counted by kind, never dropped:
//! HTTP 500, 429 from a concurrency limit, timeouts, stream cuts, refused
//! connections, malformed events and in-band errors.

mod common;

use std::time::Duration;

use common::*;
use isobench_loadgen::RunOptions;
use isobench_mock::MockConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_500s_are_counted_with_their_message() {
    let mock = mock(MockConfig {
        error_rate: 1.0,
        ..MockConfig::default()
    })
    .await;
    let plan = open_plan(6, Duration::from_millis(2), 4);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!((outcome.counts().measured, outcome.counts().failed), (6, 6));
    assert_eq!(error_kinds(&lines), vec!["http_500"; 6]);
    let message = lines[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("injected server error"), "{message}");
    assert_eq!(mock.stats().errors, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_shows_as_429s() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:30"),
        max_concurrency: Some(2),
        ..MockConfig::default()
    })
    .await;
    // Five at once against a limit of two: three are turned away.
    let plan = open_plan(5, Duration::ZERO, 2);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    let stats = mock.stats();
    assert_eq!((stats.completed, stats.rejected), (2, 3));
    assert_eq!(
        (outcome.counts().completed, outcome.counts().failed),
        (2, 3)
    );
    assert_eq!(error_kinds(&lines), vec!["http_429"; 3]);
    let message = lines
        .iter()
        .find_map(|l| l["error"]["message"].as_str())
        .unwrap();
    assert!(message.contains("Retry-After: 1"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_answers_time_out() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:2000"),
        ..MockConfig::default()
    })
    .await;
    let mut config = backend(&mock.url());
    config.timeout = Duration::from_millis(100);
    let plan = open_plan(3, Duration::ZERO, 2);
    let (outcome, lines) = run_logged(plan, config, RunOptions::default()).await;

    assert_eq!(outcome.counts().failed, 3);
    assert_eq!(error_kinds(&lines), vec!["timeout"; 3]);
    for e2e in field(&lines, "e2e_ms") {
        assert!((100.0..1000.0).contains(&e2e), "timed out after {e2e} ms");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_streams_and_bodies_are_stream_cuts() {
    let mock = mock(MockConfig {
        cut_rate: 1.0,
        itl: dist("fixed:1"),
        ..MockConfig::default()
    })
    .await;
    let plan = open_plan(5, Duration::from_millis(2), 6);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;
    assert_eq!(outcome.counts().failed, 5, "{lines:?}");
    assert_eq!(error_kinds(&lines), vec!["stream_cut"; 5]);

    let mut whole = backend(&mock.url());
    whole.stream = false;
    let plan = open_plan(3, Duration::from_millis(2), 6);
    let (_, lines) = run_logged(plan, whole, RunOptions::default()).await;
    assert_eq!(error_kinds(&lines), vec!["stream_cut"; 3], "{lines:?}");
    assert_eq!(mock.stats().cut, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_connect_errors() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let plan = open_plan(3, Duration::ZERO, 2);
    let (outcome, lines) = run_logged(plan, backend(&url), RunOptions::default()).await;

    assert_eq!(outcome.counts().failed, 3);
    assert_eq!(error_kinds(&lines), vec!["connect"; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_events_and_in_band_errors_are_told_apart() {
    let malformed = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {not json\n\n".to_owned();
    let url = canned_server(200, "text/event-stream", malformed, &[]).await;
    let (_, lines) = run_logged(
        open_plan(2, Duration::ZERO, 4),
        backend(&url),
        RunOptions::default(),
    )
    .await;
    assert_eq!(error_kinds(&lines), vec!["malformed_event"; 2]);
    assert_eq!(
        lines[0]["events"], 1,
        "the event before the bad one is kept"
    );

    let in_band = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n\
                   data: {\"error\":{\"message\":\"engine died\",\"type\":\"server_error\"}}\n\n"
        .to_owned();
    let url = canned_server(200, "text/event-stream", in_band, &[]).await;
    let (_, lines) = run_logged(
        open_plan(2, Duration::ZERO, 4),
        backend(&url),
        RunOptions::default(),
    )
    .await;
    assert_eq!(error_kinds(&lines), vec!["server_error"; 2]);
    assert_eq!(lines[0]["error"]["message"], "engine died");
}
