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

/// A backend whose preparation is slow (as a tokenizer pass over a long
/// prompt with a 128k vocabulary is), recording when each preparation
/// ended; its requests answer at once.
struct SlowToPrepare {
    prepared_at: std::sync::Mutex<Vec<std::time::Instant>>,
}

impl isobench_loadgen::Backend for SlowToPrepare {
    type Prepared = ();

    fn prepare(&self, _planned: &isobench_workload::PlannedRequest) {
        std::thread::sleep(Duration::from_millis(2));
        self.prepared_at
            .lock()
            .unwrap()
            .push(std::time::Instant::now());
    }

    async fn send(
        &self,
        _prepared: (),
        clock: isobench_loadgen::Clock,
        record: &mut isobench_metrics::RequestRecord,
    ) {
        record.sent_ns = clock.now_ns();
        record.content_event_ns.push(clock.now_ns());
        record.output_tokens = 1;
        record.end_ns = clock.now_ns();
    }
}

/// Regression: the clock started while the first wave was still being
/// prepared, so a closed loop's first requests (all scheduled at zero)
/// showed the preparation as dispatch lag: 20 to 35 ms at p99 with 32 to
/// 128 slots and the Llama-3 tokenizer, which marked GPU runs invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loops_first_wave_is_prepared_before_the_clock_starts() {
    let backend = std::sync::Arc::new(SlowToPrepare {
        prepared_at: std::sync::Mutex::new(Vec::new()),
    });
    let concurrency = 8;
    let plan = closed_plan(12, concurrency, 1);
    let outcome = isobench_loadgen::run(plan, backend.clone(), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.counts().completed, 12);
    let prepared_at = backend.prepared_at.lock().unwrap();
    assert_eq!(prepared_at.len(), 12);
    for (index, at) in prepared_at.iter().take(concurrency).enumerate() {
        assert!(
            *at <= outcome.started,
            "request {index} of the first wave was prepared after the clock started"
        );
    }
}
