//! The schedule is kept: open-loop offsets are honoured with small dispatch
//! lag, a concurrency cap delays requests (and the lag shows it), and a
//! closed loop never has more requests in flight than its concurrency.

mod common;

use std::time::Duration;

use common::written::quantile;
use common::*;
use isobench_loadgen::RunOptions;
use isobench_mock::MockConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_offsets_are_honoured() {
    let _timing = timing_lock().await;
    let mock = mock(MockConfig::default()).await;
    let plan = open_plan(40, Duration::from_millis(5), 4);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!(outcome.counts().completed, 40);
    for line in &lines {
        let index = line["index"].as_u64().unwrap();
        assert_eq!(line["scheduled_ns"].as_u64().unwrap(), index * 5_000_000);
        assert!(
            line["sent_ns"].as_u64() >= line["scheduled_ns"].as_u64(),
            "never early"
        );
    }
    // Idle mock, so the lag is the pacer's wake-up and a channel hop: tens
    // of microseconds; 2 ms leaves room for a busy CI machine.
    let lag = field(&lines, "dispatch_lag_ms");
    assert!(quantile(&lag, 0.5) < 2.0, "{lag:?}");
    let ratio = outcome.pace_ratio().unwrap();
    assert!(ratio > 0.9, "pace ratio {ratio}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_open_loop_delays_requests_and_shows_the_lag() {
    let mock = mock(MockConfig {
        ttft: dist("fixed:10"),
        ..MockConfig::default()
    })
    .await;
    let mut plan = open_plan(5, Duration::ZERO, 1);
    plan.shape.max_concurrency = Some(1);
    let (outcome, mut lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!(outcome.counts().completed, 5);
    assert_eq!(mock.stats().peak_concurrency, 1);
    lines.sort_by_key(|l| l["index"].as_u64());
    let lag = field(&lines, "dispatch_lag_ms");
    // Each waits for the ones before it: about 10 ms more each time.
    for (i, pair) in lag.windows(2).enumerate() {
        assert!(pair[1] > pair[0] + 8.0, "request {} lag {lag:?}", i + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_keeps_its_concurrency() {
    // The mock turns away (429) anything above 4 at once.
    let mock = mock(MockConfig {
        ttft: dist("uniform:1,4"),
        itl: dist("fixed:0.5"),
        max_concurrency: Some(4),
        ..MockConfig::default()
    })
    .await;
    let plan = closed_plan(60, 4, 4);
    let (outcome, lines) = run_logged(plan, backend(&mock.url()), RunOptions::default()).await;

    assert_eq!(outcome.counts().completed, 60, "{:?}", error_kinds(&lines));
    let stats = mock.stats();
    assert_eq!((stats.rejected, stats.peak_concurrency), (0, 4));
    // A slot's next request is scheduled when the slot frees.
    let mut scheduled: Vec<u64> = lines
        .iter()
        .map(|l| l["scheduled_ns"].as_u64().unwrap())
        .collect();
    scheduled.sort_unstable();
    assert!(scheduled[4] > 0, "only the first four start at once");
    assert_eq!(outcome.pace_ratio(), None, "a closed loop offers no rate");
}
