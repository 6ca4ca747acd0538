//! The recorder against hand-computed timelines: every figure of
//! docs/metrics.md, the per-token ITL split, failures, warm-up, goodput and
//! SLO checks.

use std::time::Duration;

use isobench_metrics::{
    ErrorKind, OutputTokenSource, Recorder, RequestError, RequestRecord, Slo, SourceCount,
    TokenSource,
};

const MS: u64 = 1_000_000;

fn completed(scheduled_ms: u64, sent_ms: u64, events_ms: &[u64], end_ms: u64) -> RequestRecord {
    let mut record = RequestRecord::new(0, false, scheduled_ms * MS, events_ms.len());
    record.sent_ns = sent_ms * MS;
    record
        .content_event_ns
        .extend(events_ms.iter().map(|t| t * MS));
    record.end_ns = end_ms * MS;
    record.output_tokens = events_ms.len() as u32;
    record
}

fn failed(scheduled_ms: u64, sent_ms: u64, end_ms: u64, kind: ErrorKind) -> RequestRecord {
    let mut record = completed(scheduled_ms, sent_ms, &[], end_ms);
    record.error = Some(RequestError {
        kind,
        message: "injected".into(),
    });
    record
}

/// Two completed requests: A streams three tokens, B answers with one.
fn two_requests() -> [RequestRecord; 2] {
    let mut a = completed(0, 2, &[102, 122, 142], 150);
    a.input_tokens = 10;
    a.token_source = TokenSource::Usage;
    let mut b = completed(50, 50, &[250], 250);
    b.input_tokens = 5;
    b.token_source = TokenSource::Tokenizer;
    [a, b]
}

#[test]
fn latencies_follow_the_definitions() {
    let mut recorder = Recorder::new();
    for record in two_requests() {
        recorder.record(&record);
    }
    let summary = recorder.summarize(Duration::from_secs(2));
    let latency = &summary.latency;

    let ttft = latency.ttft.as_ref().unwrap();
    assert_eq!(
        (ttft.count, ttft.min_ms, ttft.max_ms, ttft.mean_ms),
        (2, 100.0, 200.0, 150.0)
    );
    let from_schedule = latency.ttft_from_schedule.as_ref().unwrap();
    assert_eq!((from_schedule.min_ms, from_schedule.max_ms), (102.0, 200.0));

    let itl = latency.itl_per_event.as_ref().unwrap();
    assert_eq!((itl.count, itl.min_ms, itl.max_ms), (2, 20.0, 20.0));
    // TPOT = (E2E - TTFT) / (tokens - 1) = (148 - 100) / 2; B has one token.
    let tpot = latency.tpot.as_ref().unwrap();
    assert_eq!((tpot.count, tpot.mean_ms), (1, 24.0));

    let e2e = latency.e2e.as_ref().unwrap();
    assert_eq!((e2e.min_ms, e2e.max_ms), (148.0, 200.0));
    let e2e_from_schedule = latency.e2e_from_schedule.as_ref().unwrap();
    assert_eq!(
        (e2e_from_schedule.min_ms, e2e_from_schedule.max_ms),
        (150.0, 200.0)
    );
    let lag = latency.dispatch_lag.as_ref().unwrap();
    assert_eq!(
        (lag.count, lag.min_ms, lag.max_ms, lag.mean_ms),
        (2, 0.0, 2.0, 1.0)
    );

    assert_eq!(summary.requests.completed, 2);
    assert_eq!(summary.requests.good, None);
    assert_eq!(summary.tokens.input, 15);
    assert_eq!(summary.tokens.output, 4);
    assert_eq!(summary.throughput.requests_per_s, 1.0);
    assert_eq!(summary.throughput.output_tokens_per_s, 2.0);
    assert_eq!(summary.throughput.total_tokens_per_s, 9.5);
    assert_eq!(summary.throughput.goodput_requests_per_s, None);
}

#[test]
fn token_sources_are_counted_per_request() {
    let mut recorder = Recorder::new();
    let [a, b] = two_requests();
    recorder.record(&a);
    let only_usage = recorder.summarize(Duration::from_secs(1));
    assert_eq!(only_usage.tokens.output_source, OutputTokenSource::Usage);
    recorder.record(&b);
    let summary = recorder.summarize(Duration::from_secs(1));
    assert_eq!(summary.tokens.output_source, OutputTokenSource::Mixed);
    let by_source = summary.tokens.by_source;
    let count = |requests, output_tokens| SourceCount {
        requests,
        output_tokens,
    };
    assert_eq!(by_source.usage, count(1, 3));
    assert_eq!(by_source.tokenizer, count(1, 1));
    assert_eq!(by_source.events, count(0, 0));
    let empty = Recorder::new().summarize(Duration::from_secs(1));
    assert_eq!(empty.tokens.output_source, OutputTokenSource::None);
}

#[test]
fn per_token_itl_splits_each_gap_over_its_tokens() {
    let mut recorder = Recorder::new();
    let mut chunked = completed(0, 0, &[100, 110, 130, 160, 200], 200);
    // 3 tokens arrive with the first event (part of TTFT), then 1, 4, 0, 2.
    chunked.event_tokens = vec![3, 1, 4, 0, 2];
    chunked.output_tokens = 10;
    recorder.record(&chunked);
    let summary = recorder.summarize(Duration::from_secs(1));

    let per_event = summary.latency.itl_per_event.as_ref().unwrap();
    assert_eq!((per_event.count, per_event.mean_ms), (4, 25.0));
    // Per token: 10 | 5 5 5 5 | (no token) | 35 35 (70 ms since the last
    // token-carrying event, over 2 tokens).
    let per_token = summary.latency.itl_per_token.as_ref().unwrap();
    assert_eq!(per_token.count, 7);
    assert_eq!((per_token.min_ms, per_token.max_ms), (5.0, 35.0));
    // Percentiles are the top of a 3-significant-digit bucket: 5 ms reads 5.003.
    assert!(
        (per_token.p50_ms - 5.0).abs() <= 0.005,
        "{}",
        per_token.p50_ms
    );
    assert!((per_token.mean_ms - 100.0 / 7.0).abs() < 1e-9);
    assert_eq!(summary.latency.itl_per_token_unsplit_requests, 0);
}

#[test]
fn per_token_itl_without_token_counts_equals_per_event() {
    let mut recorder = Recorder::new();
    recorder.record(&completed(0, 0, &[100, 110, 130], 130));
    let mut mismatched = completed(0, 0, &[100, 140], 140);
    mismatched.event_tokens = vec![1];
    recorder.record(&mismatched);
    let summary = recorder.summarize(Duration::from_secs(1));
    assert_eq!(summary.latency.itl_per_token, summary.latency.itl_per_event);
    assert_eq!(summary.latency.itl_per_token_unsplit_requests, 2);
}

#[test]
fn failures_are_counted_by_kind_and_give_no_latency() {
    let mut recorder = Recorder::new();
    recorder.record(&completed(0, 0, &[100], 100));
    recorder.record(&failed(0, 3, 30_000, ErrorKind::Timeout));
    recorder.record(&failed(0, 1, 5, ErrorKind::HttpStatus(429)));
    recorder.record(&failed(0, 1, 6, ErrorKind::HttpStatus(429)));
    recorder.record(&failed(0, 0, 900, ErrorKind::Cancelled));
    let summary = recorder.summarize(Duration::from_secs(1));

    let requests = &summary.requests;
    assert_eq!(
        (
            requests.measured,
            requests.completed,
            requests.failed,
            requests.cancelled
        ),
        (5, 1, 3, 1)
    );
    assert_eq!(recorder.measured(), 5);
    let errors: Vec<(&str, u64)> = summary
        .errors
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(errors, [("cancelled", 1), ("http_429", 2), ("timeout", 1)]);
    assert_eq!(summary.latency.e2e.as_ref().unwrap().count, 1);
    assert_eq!(summary.latency.ttft.as_ref().unwrap().max_ms, 100.0);
    // Dispatch lag covers every measured request: it is about the client.
    let lag = summary.latency.dispatch_lag.as_ref().unwrap();
    assert_eq!((lag.count, lag.max_ms), (5, 3.0));
    assert_eq!(summary.throughput.requests_per_s, 1.0);
}

#[test]
fn warmup_is_counted_and_excluded() {
    let mut recorder = Recorder::new();
    let mut warmup = completed(0, 0, &[5_000, 6_000], 7_000);
    warmup.warmup = true;
    warmup.input_tokens = 100;
    recorder.record(&warmup);
    let mut warmup_failure = failed(0, 0, 1, ErrorKind::Connect);
    warmup_failure.warmup = true;
    recorder.record(&warmup_failure);
    recorder.record(&completed(10, 10, &[60], 60));
    let summary = recorder.summarize(Duration::from_secs(1));
    assert_eq!(summary.requests.warmup, 2);
    assert_eq!(summary.requests.measured, 1);
    assert!(summary.errors.is_empty());
    assert_eq!(summary.tokens.input, 0);
    assert_eq!(summary.latency.ttft.as_ref().unwrap().max_ms, 50.0);
    assert_eq!(summary.sending.first_sent_s, Some(0.01));
}

#[test]
fn goodput_counts_requests_meeting_every_threshold() {
    let slos =
        Slo::parse_list("ttft_p99=150ms,ttft_mean=150ms,itl_p99=20ms,tpot_p90=30ms").unwrap();
    let mut recorder = Recorder::with_slos(&slos);
    let [a, b] = two_requests();
    recorder.record(&a); // TTFT 100, gaps 20, TPOT 24: good.
    recorder.record(&b); // TTFT 200: not good.
    recorder.record(&failed(0, 0, 10, ErrorKind::StreamCut));
    recorder.record(&failed(0, 0, 10, ErrorKind::Cancelled));
    let summary = recorder.summarize(Duration::from_secs(2));

    assert_eq!(summary.requests.good, Some(1));
    assert_eq!(summary.throughput.goodput_requests_per_s, Some(0.5));
    // Completed + failed in the denominator; cancelled outside it.
    assert_eq!(summary.throughput.good_fraction, Some(1.0 / 3.0));

    let results: Vec<(String, Option<f64>, bool)> = summary
        .slos
        .iter()
        .map(|r| (r.slo.to_string(), r.measured_ms, r.passed))
        .collect();
    assert_eq!(
        results,
        [
            ("ttft_p99=150ms".to_string(), Some(200.0), false),
            ("ttft_mean=150ms".to_string(), Some(150.0), true),
            ("itl_p99=20ms".to_string(), Some(20.0), true),
            ("tpot_p90=30ms".to_string(), Some(24.0), true),
        ]
    );
    assert_eq!(summary.slos[0].threshold_ms, 150.0);
}

#[test]
fn an_slo_on_a_metric_without_samples_fails() {
    let slos = Slo::parse_list("tpot_p99=50ms").unwrap();
    let mut recorder = Recorder::with_slos(&slos);
    recorder.record(&completed(0, 0, &[100], 100));
    let summary = recorder.summarize(Duration::from_secs(1));
    // The one-token request has no TPOT: it is still good, but the run's
    // TPOT cannot be checked.
    assert_eq!(summary.requests.good, Some(1));
    assert_eq!(summary.slos[0].measured_ms, None);
    assert!(!summary.slos[0].passed);
}

#[test]
fn send_span_and_rates_cover_measured_requests() {
    let mut recorder = Recorder::new();
    assert_eq!(recorder.measured_span(), None);
    // Scheduled every 100 ms; each sent 1 ms late, answered after 50 ms.
    for i in 0..11 {
        recorder.record(&completed(
            i * 100,
            i * 100 + 1,
            &[i * 100 + 51],
            i * 100 + 51,
        ));
    }
    assert_eq!(recorder.measured_span(), Some(Duration::from_millis(1_050)));
    let sending = recorder.summarize(Duration::from_secs(1)).sending;
    assert_eq!(sending.first_scheduled_s, Some(0.0));
    assert_eq!(sending.last_scheduled_s, Some(1.0));
    assert_eq!(sending.first_sent_s, Some(0.001));
    assert_eq!(sending.last_end_s, Some(1.051));
    assert!((sending.achieved_send_rate.unwrap() - 10.0).abs() < 1e-9);
    assert!((sending.scheduled_send_rate.unwrap() - 10.0).abs() < 1e-9);
}

#[test]
fn merge_is_the_same_as_recording_in_one() {
    let slos = Slo::parse_list("ttft_p99=150ms").unwrap();
    let prototype = Recorder::with_slos(&slos);
    let mut one = prototype.clone();
    let mut first = prototype.clone();
    let mut second = prototype;
    let [a, b] = two_requests();
    let failure = failed(0, 0, 10, ErrorKind::Timeout);
    for record in [&a, &b, &failure] {
        one.record(record);
    }
    first.record(&a);
    second.record(&b);
    second.record(&failure);
    first.merge(&second);
    let window = Duration::from_secs(3);
    assert_eq!(first.summarize(window), one.summarize(window));
}

#[test]
fn zero_window_gives_zero_rates_not_nan() {
    let mut recorder = Recorder::new();
    recorder.record(&completed(0, 0, &[1], 1));
    let summary = recorder.summarize(Duration::ZERO);
    assert_eq!(summary.throughput.requests_per_s, 0.0);
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["throughput"]["requests_per_s"], 0.0);
}

#[test]
fn a_fresh_merge_target_adopts_the_workers_slos() {
    let slos = Slo::parse_list("ttft_p99=150ms").unwrap();
    let mut worker = Recorder::with_slos(&slos);
    for record in two_requests() {
        worker.record(&record);
    }
    let mut merged = Recorder::new();
    merged.merge(&worker);
    assert_eq!(merged.slos(), &slos[..]);
    let window = Duration::from_secs(1);
    assert_eq!(merged.summarize(window), worker.summarize(window));
}

/// The worked example at the end of docs/metrics.md, figure by figure.
#[test]
fn the_worked_example_in_the_docs() {
    let mut recorder = Recorder::with_slos(&Slo::parse_list("ttft_p99=150ms").unwrap());
    let [a, b] = two_requests();
    recorder.record(&a);
    recorder.record(&b);
    recorder.record(&failed(100, 101, 30_101, ErrorKind::Timeout));
    let summary = recorder.summarize(Duration::from_secs(2));
    let l = &summary.latency;
    let extremes = |stats: &Option<isobench_metrics::LatencyStats>| {
        let stats = stats.as_ref().unwrap();
        (stats.count, stats.min_ms, stats.max_ms)
    };
    assert_eq!(extremes(&l.ttft), (2, 100.0, 200.0));
    assert_eq!(extremes(&l.ttft_from_schedule), (2, 102.0, 200.0));
    assert_eq!(extremes(&l.itl_per_event), (2, 20.0, 20.0));
    assert_eq!(l.itl_per_token, l.itl_per_event);
    assert_eq!(l.itl_per_token_unsplit_requests, 1);
    assert_eq!(extremes(&l.tpot), (1, 24.0, 24.0));
    assert_eq!(extremes(&l.e2e), (2, 148.0, 200.0));
    assert_eq!(extremes(&l.e2e_from_schedule), (2, 150.0, 200.0));
    assert_eq!(extremes(&l.dispatch_lag), (3, 0.0, 2.0));
    assert_eq!(summary.errors["timeout"], 1);
    let r = &summary.requests;
    assert_eq!((r.measured, r.completed, r.failed), (3, 2, 1));
    assert_eq!((summary.tokens.input, summary.tokens.output), (15, 4));
    let t = &summary.throughput;
    assert_eq!(
        (
            t.requests_per_s,
            t.output_tokens_per_s,
            t.total_tokens_per_s
        ),
        (1.0, 2.0, 9.5)
    );
    assert_eq!(t.goodput_requests_per_s, Some(0.5));
    assert_eq!(t.good_fraction, Some(1.0 / 3.0));
    assert_eq!(summary.slos[0].measured_ms, Some(200.0));
    assert!(!summary.slos[0].passed);
}

/// Retries on a new connection are counted over measured requests, whatever
/// their outcome, survive a merge, and leave the warm-up's out.
#[test]
fn retries_are_counted_for_measured_requests_and_merged() {
    let mut a = Recorder::new();
    let mut retried = completed(0, 0, &[10], 20);
    retried.retries = 1;
    a.record(&retried);
    let mut retried_then_failed = failed(0, 0, 30, ErrorKind::Connect);
    retried_then_failed.retries = 1;
    a.record(&retried_then_failed);
    let mut b = Recorder::new();
    let mut warmup = completed(0, 0, &[5], 6);
    warmup.warmup = true;
    warmup.retries = 1;
    b.record(&warmup);
    let mut other = completed(0, 0, &[7], 8);
    other.retries = 1;
    b.record(&other);
    a.merge(&b);
    let summary = a.summarize(Duration::from_secs(1));
    assert_eq!(summary.requests.retries, 3);
    assert_eq!(summary.requests.completed, 2);
    assert_eq!(summary.requests.failed, 1);
}
