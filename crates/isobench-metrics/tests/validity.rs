//! Client validity and run comparison, from summaries of recorded timelines.

use std::time::Duration;

use isobench_metrics::{
    ErrorKind, MAX_ERROR_RATE_DEFAULT, Percentile, Recorder, RequestError, RequestRecord, Summary,
    Verdict, assess_validity, assess_validity_with_max_error_rate, compare_percentile,
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// `n` requests scheduled every `interval_ns`, each sent `lag(i)` late and
/// answered 20 ms after its send.
fn run(n: u64, interval_ns: u64, lag: impl Fn(u64) -> u64) -> Summary {
    let mut recorder = Recorder::new();
    for i in 0..n {
        let scheduled = i * interval_ns;
        let mut record = RequestRecord::new(i, false, scheduled, 1);
        record.sent_ns = scheduled + lag(i);
        record.content_event_ns.push(record.sent_ns + 20 * MS);
        record.end_ns = record.sent_ns + 20 * MS;
        record.output_tokens = 1;
        recorder.record(&record);
    }
    let window = recorder.measured_span().unwrap_or_default();
    recorder.summarize(window)
}

#[test]
fn a_client_on_schedule_is_valid() {
    let summary = run(200, 10 * MS, |_| 100 * US);
    let validity = assess_validity(&summary, Some(100.0));
    assert!(validity.valid, "{validity:?}");
    assert!(validity.warnings.is_empty(), "{validity:?}");
    assert!((validity.achieved_to_offered.unwrap() - 1.0).abs() < 1e-9);
    assert_eq!(validity.dispatch_lag_p99_ms, Some(0.1));
}

#[test]
fn a_client_falling_behind_is_invalid() {
    // Each request leaves 5% later than the last: 95% of the scheduled rate,
    // and a lag that grows to ~100 ms.
    let summary = run(200, 10 * MS, |i| i * 500 * US);
    let validity = assess_validity(&summary, Some(100.0));
    assert!(!validity.valid);
    assert_eq!(validity.reasons.len(), 2, "{validity:?}");
    assert!(
        validity.reasons[0].contains("fell behind its schedule"),
        "{validity:?}"
    );
    assert!(validity.reasons[0].contains("95.24 req/s"), "{validity:?}");
    assert!(
        validity.reasons[1].contains("dispatch lag p99"),
        "{validity:?}"
    );
}

#[test]
fn a_schedule_slower_than_nominal_is_only_a_warning() {
    // The arrival process drew intervals averaging 10.5 ms for a nominal
    // 100 req/s; the client kept that schedule exactly.
    let summary = run(200, 10_500 * US, |_| 50 * US);
    let validity = assess_validity(&summary, Some(100.0));
    assert!(validity.valid, "{validity:?}");
    assert_eq!(validity.warnings.len(), 1, "{validity:?}");
    assert!(validity.warnings[0].contains("not a slow client"));
}

#[test]
fn moderate_dispatch_lag_warns_and_closed_loops_skip_the_rate_check() {
    let summary = run(100, 10 * MS, |_| 5 * MS);
    let validity = assess_validity(&summary, None);
    assert!(validity.valid);
    assert_eq!(validity.achieved_to_offered, None);
    assert_eq!(validity.warnings.len(), 1);
    assert!(validity.warnings[0].contains("5.00 ms"), "{validity:?}");
}

#[test]
fn a_run_without_requests_is_invalid() {
    let summary = Recorder::new().summarize(Duration::from_secs(1));
    let validity = assess_validity(&summary, Some(10.0));
    assert!(!validity.valid);
    assert!(validity.reasons[0].contains("no measured request"));
    assert!(validity.warnings[0].contains("could not be checked"));
}

/// `completed` successes and `failed` failures, one every 10 ms.
fn with_failures(completed: u64, failed: u64) -> Summary {
    let mut recorder = Recorder::new();
    for i in 0..completed + failed {
        let mut record = RequestRecord::new(i, false, i * 10 * MS, 1);
        record.sent_ns = record.scheduled_ns;
        record.end_ns = record.sent_ns + 20 * MS;
        if i < failed {
            record.error = Some(RequestError {
                kind: ErrorKind::HttpStatus(500),
                message: "injected".into(),
            });
        } else {
            record.content_event_ns.push(record.end_ns);
            record.output_tokens = 1;
        }
        recorder.record(&record);
    }
    recorder.summarize(Duration::from_secs(1))
}

#[test]
fn a_run_where_every_request_failed_is_invalid_whatever_the_maximum() {
    let validity = assess_validity_with_max_error_rate(&with_failures(0, 10), None, 1.0);
    assert!(!validity.valid);
    assert!(validity.too_many_errors);
    assert_eq!(validity.error_rate, Some(1.0));
    assert!(
        validity.reasons[0].contains("every one of the 10"),
        "{validity:?}"
    );
}

#[test]
fn the_error_rate_is_judged_against_the_maximum() {
    // 5 of 100 failed: exactly the default maximum, still valid.
    let validity = assess_validity(&with_failures(95, 5), None);
    assert!(validity.valid, "{validity:?}");
    assert_eq!(validity.max_error_rate, Some(MAX_ERROR_RATE_DEFAULT));
    assert!(!validity.too_many_errors);
    // 6 of 100: over it.
    let validity = assess_validity(&with_failures(94, 6), None);
    assert!(!validity.valid);
    assert!(validity.too_many_errors);
    assert!(validity.reasons[0].contains("6 of 100"), "{validity:?}");
    // A lower maximum from the caller.
    let validity = assess_validity_with_max_error_rate(&with_failures(99, 1), None, 0.0);
    assert!(validity.too_many_errors);
}

/// A run whose TTFTs are `base_ms + i * spread_ms / n` for i in 0..n.
fn ttft_run(n: u64, base_ms: f64, spread_ms: f64) -> Summary {
    let mut recorder = Recorder::new();
    for i in 0..n {
        let mut record = RequestRecord::new(i, false, 0, 1);
        let ttft = ((base_ms + spread_ms * i as f64 / n as f64) * 1e6) as u64;
        record.content_event_ns.push(ttft);
        record.end_ns = ttft;
        recorder.record(&record);
    }
    recorder.summarize(Duration::from_secs(1))
}

#[test]
fn comparison_finds_real_differences_only() {
    let baseline = ttft_run(1_000, 100.0, 100.0);
    let slower = ttft_run(1_000, 120.0, 100.0);
    let same = ttft_run(1_000, 101.0, 100.0);
    let ttft = |s: &Summary| s.latency.ttft.clone();

    let p50 = compare_percentile(
        ttft(&baseline).as_ref(),
        ttft(&slower).as_ref(),
        Percentile::P50,
    );
    assert_eq!(p50.verdict, Verdict::Higher);
    assert!(
        (p50.relative_change.unwrap() - 20.0 / 150.0).abs() < 0.01,
        "{p50:?}"
    );
    let back = compare_percentile(
        ttft(&slower).as_ref(),
        ttft(&baseline).as_ref(),
        Percentile::P99,
    );
    assert_eq!(back.verdict, Verdict::Lower);
    let noise = compare_percentile(
        ttft(&baseline).as_ref(),
        ttft(&same).as_ref(),
        Percentile::P50,
    );
    assert_eq!(noise.verdict, Verdict::NoSignificantDifference);
}

#[test]
fn comparison_needs_enough_samples() {
    let small = ttft_run(50, 100.0, 10.0);
    let large = ttft_run(1_000, 500.0, 10.0);
    let p99 = compare_percentile(
        small.latency.ttft.as_ref(),
        large.latency.ttft.as_ref(),
        Percentile::P99,
    );
    assert_eq!(p99.verdict, Verdict::NotEnoughSamples);
    let p50 = compare_percentile(
        small.latency.ttft.as_ref(),
        large.latency.ttft.as_ref(),
        Percentile::P50,
    );
    assert_eq!(p50.verdict, Verdict::Higher);
    let missing = compare_percentile(None, large.latency.ttft.as_ref(), Percentile::P50);
    assert_eq!(missing.verdict, Verdict::NotEnoughSamples);
    assert_eq!(missing.relative_change, None);
}
