//! Property tests of the histogram invariants: merging recorders equals
//! recording everything in one, in any split and order; every latency's
//! statistics are ordered (min <= p50 <= ... <= p99.9 <= max, mean within
//! [min, max], each confidence interval around its percentile).

use std::time::Duration;

use isobench_metrics::{
    ErrorKind, LatencyStats, Recorder, RequestError, RequestRecord, Slo, Summary, TokenSource,
};
use proptest::prelude::*;

const ERROR_KINDS: [ErrorKind; 5] = [
    ErrorKind::Timeout,
    ErrorKind::HttpStatus(429),
    ErrorKind::HttpStatus(500),
    ErrorKind::StreamCut,
    ErrorKind::Cancelled,
];

/// A request timeline from generated parts: times in microseconds.
fn request() -> impl Strategy<Value = RequestRecord> {
    (
        (0u64..5_000_000, 0u64..20_000, 1u64..3_000_000),
        prop::collection::vec((0u64..200_000, 0u32..5), 0..12),
        (
            0u64..100_000,
            any::<bool>(),
            prop::option::weighted(0.2, 0..ERROR_KINDS.len()),
        ),
        (prop::bool::weighted(0.1), 0u32..4_000, 0usize..3),
    )
        .prop_map(
            |((scheduled, lag, ttft), gaps, (tail, chunked, error), (warmup, input, source))| {
                let us = 1_000;
                let scheduled_ns = scheduled * us;
                let mut record = RequestRecord::new(0, warmup, scheduled_ns, gaps.len() + 1);
                record.sent_ns = scheduled_ns + lag * us;
                let mut t = record.sent_ns + ttft * us;
                record.content_event_ns.push(t);
                for (gap, _) in &gaps {
                    t += gap * us;
                    record.content_event_ns.push(t);
                }
                if chunked {
                    record.event_tokens.push(1);
                    record.event_tokens.extend(gaps.iter().map(|(_, k)| k));
                }
                record.end_ns = t + tail * us;
                record.output_tokens = record.content_event_ns.len() as u32;
                record.input_tokens = input;
                record.token_source = [
                    TokenSource::Usage,
                    TokenSource::Tokenizer,
                    TokenSource::Events,
                ][source];
                record.error = error.map(|i| RequestError {
                    kind: ERROR_KINDS[i],
                    message: String::new(),
                });
                record
            },
        )
}

fn recorder_of<'a>(
    prototype: &Recorder,
    records: impl IntoIterator<Item = &'a RequestRecord>,
) -> Recorder {
    let mut recorder = prototype.clone();
    for record in records {
        recorder.record(record);
    }
    recorder
}

fn every_latency(summary: &Summary) -> Vec<&LatencyStats> {
    let l = &summary.latency;
    [
        &l.ttft,
        &l.ttft_from_schedule,
        &l.itl_per_event,
        &l.itl_per_token,
        &l.tpot,
        &l.e2e,
        &l.e2e_from_schedule,
        &l.dispatch_lag,
    ]
    .into_iter()
    .flatten()
    .collect()
}

proptest! {
    // Each case builds, clones and merges several recorders: a few dozen
    // cases keep the debug-build test under a second.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn merging_equals_recording_in_one(
        records in prop::collection::vec(request(), 0..40),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 2),
    ) {
        let prototype = Recorder::with_slos(&Slo::parse_list("ttft_p99=1s,itl_p90=100ms").unwrap());
        let (mut a, mut b) = (cuts[0].index(records.len() + 1), cuts[1].index(records.len() + 1));
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        let whole = recorder_of(&prototype, &records);
        let parts = [&records[..a], &records[a..b], &records[b..]].map(|part| recorder_of(&prototype, part));

        let mut forward = parts[0].clone();
        forward.merge(&parts[1]);
        forward.merge(&parts[2]);
        let mut backward = parts[2].clone();
        backward.merge(&parts[0]);
        backward.merge(&parts[1]);

        let window = Duration::from_secs(7);
        prop_assert_eq!(forward.summarize(window), whole.summarize(window));
        prop_assert_eq!(backward.summarize(window), whole.summarize(window));
        prop_assert_eq!(forward.measured_span(), whole.measured_span());
    }

    #[test]
    fn statistics_are_ordered(records in prop::collection::vec(request(), 1..60)) {
        let summary = recorder_of(&Recorder::new(), &records).summarize(Duration::from_secs(1));
        for stats in every_latency(&summary) {
            let ordered = [
                stats.min_ms, stats.p50_ms, stats.p90_ms, stats.p95_ms,
                stats.p99_ms, stats.p99_9_ms, stats.max_ms,
            ];
            prop_assert!(ordered.windows(2).all(|w| w[0] <= w[1]), "{:?}", stats);
            let slack = 1e-9 * stats.max_ms.max(1.0);
            prop_assert!(stats.min_ms - slack <= stats.mean_ms && stats.mean_ms <= stats.max_ms + slack);
            prop_assert!(stats.stddev_ms >= 0.0);
            prop_assert!(stats.p50_ci.lower_ms <= stats.p50_ms && stats.p50_ms <= stats.p50_ci.upper_ms);
            prop_assert!(stats.p99_ci.lower_ms <= stats.p99_ms && stats.p99_ms <= stats.p99_ci.upper_ms);
        }
        let requests = &summary.requests;
        prop_assert_eq!(requests.measured, requests.completed + requests.failed + requests.cancelled);
        prop_assert_eq!(requests.measured + requests.warmup, records.len() as u64);
    }
}
