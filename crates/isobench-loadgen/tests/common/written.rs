//! The truth a timing check compares with: what the client measured for
//! each request, matched with the instants the in-process mock actually
//! wrote that request's events (`MockConfig::record_writes`).
//!
//! Comparing with the schedule instead (the injected TTFT and ITL) makes a
//! check fail whenever the machine is busy: a mock event written late
//! shifts what the client sees, though the client measured it exactly.
//! Shared by the integration tests and the loadgen benchmark
//! (`#[path]`-included there).

#![allow(dead_code)] // each includer uses its own subset

use std::collections::HashMap;
use std::sync::Mutex;

use isobench_loadgen::{Backend, Clock, RunOutcome};
use isobench_metrics::RequestRecord;
use isobench_mock::{MockHandle, WrittenAnswer};
use isobench_workload::PlannedRequest;

/// A backend that keeps a copy of every finished record.
pub struct Capture<B> {
    pub inner: B,
    pub records: Mutex<Vec<RequestRecord>>,
}

impl<B> Capture<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            records: Mutex::new(Vec::new()),
        }
    }
}

impl<B: Backend> Backend for Capture<B> {
    type Prepared = B::Prepared;

    fn prepare(&self, planned: &PlannedRequest) -> Self::Prepared {
        self.inner.prepare(planned)
    }

    async fn send(&self, prepared: Self::Prepared, clock: Clock, record: &mut RequestRecord) {
        self.inner.send(prepared, clock, record).await;
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record.clone());
    }
}

/// One request as the client saw it and as the mock wrote it, all in
/// nanoseconds on the run's clock.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub index: u64,
    pub sent_ns: u64,
    /// When the client saw each content event.
    pub seen_ns: Vec<u64>,
    /// When the mock received the request.
    pub received_ns: u64,
    /// When the mock wrote each content event (or the whole body).
    pub written_ns: Vec<u64>,
}

impl Exchange {
    /// How late the client saw the first event after the mock wrote it: the
    /// client's TTFT error (its TTFT minus the TTFT a perfect client would
    /// have measured).
    pub fn first_event_delay_ms(&self) -> f64 {
        ms(self.seen_ns[0] as f64 - self.written_ns[0] as f64)
    }

    /// Measured gap minus written gap, for every pair of consecutive events.
    pub fn gap_errors_ms(&self) -> Vec<f64> {
        (1..self.seen_ns.len())
            .map(|i| {
                let seen = self.seen_ns[i] as f64 - self.seen_ns[i - 1] as f64;
                let written = self.written_ns[i] as f64 - self.written_ns[i - 1] as f64;
                ms(seen - written)
            })
            .collect()
    }

    /// Last seen event minus first, against last written minus first.
    pub fn span_error_ms(&self) -> f64 {
        let seen = self.seen_ns[self.seen_ns.len() - 1] as f64 - self.seen_ns[0] as f64;
        let written = self.written_ns[self.written_ns.len() - 1] as f64 - self.written_ns[0] as f64;
        ms(seen - written)
    }
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

/// Median client delay allowed between the mock's write and the client
/// seeing the event, and the median of measured minus written gaps.
pub const DELAY_MEDIAN_MS: f64 = 1.0;
/// The 90th percentile of the same, which leaves room for a busy machine.
pub const DELAY_P90_MS: f64 = 5.0;

/// The client never saw an event before the mock wrote it, and saw the
/// first one soon after.
pub fn assert_first_events_seen(exchanges: &[Exchange]) {
    let delays: Vec<f64> = exchanges
        .iter()
        .map(Exchange::first_event_delay_ms)
        .collect();
    assert!(
        delays.iter().all(|&d| d >= 0.0),
        "an event seen before it was written: {delays:?}"
    );
    assert_small("first-event delay", &delays);
}

/// Every measured gap is the written gap give or take the delivery delay.
pub fn assert_gaps_seen(exchanges: &[Exchange]) {
    let errors: Vec<f64> = exchanges
        .iter()
        .flat_map(Exchange::gap_errors_ms)
        .map(f64::abs)
        .collect();
    assert_small("|measured - written gap|", &errors);
}

/// The mock honoured the injection: event `k` was written no earlier than
/// `ttft + k * gap` after the request arrived, `gap` being the injected
/// time between events (ITL times tokens per event). Its deadlines are
/// absolute, so on a busy machine it can only be late.
pub fn assert_never_early(exchanges: &[Exchange], ttft_ms: f64, gap_ms: f64) {
    for exchange in exchanges {
        for (k, &written) in exchange.written_ns.iter().enumerate() {
            let after_ms = (written - exchange.received_ns) as f64 / 1e6;
            let deadline_ms = ttft_ms + k as f64 * gap_ms;
            assert!(
                after_ms >= deadline_ms - 0.01,
                "request {}: event {k} written {after_ms} ms after arrival, before its {deadline_ms} ms",
                exchange.index
            );
        }
    }
}

pub fn assert_small(what: &str, values: &[f64]) {
    let (median, p90) = (quantile(values, 0.5), quantile(values, 0.9));
    assert!(
        median <= DELAY_MEDIAN_MS,
        "{what}: median {median} ms, expected at most {DELAY_MEDIAN_MS} ms ({values:?})"
    );
    assert!(
        p90 <= DELAY_P90_MS,
        "{what}: p90 {p90} ms, expected at most {DELAY_P90_MS} ms ({values:?})"
    );
}

/// The `p`-quantile (0..=1) of the numbers, nearest rank.
pub fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Matches the successful records with the mock's write log (the planned
/// prompt is `request {index}`). Panics when a successful request has no
/// matching write record or a different number of events: the client and
/// the mock then disagree on what happened, which is a failure in itself.
pub fn match_writes(
    outcome: &RunOutcome,
    records: &[RequestRecord],
    mock: &MockHandle,
) -> Vec<Exchange> {
    let written: HashMap<String, WrittenAnswer> = mock
        .take_write_log()
        .into_iter()
        .map(|answer| (answer.prompt.clone(), answer))
        .collect();
    let clock = Clock::starting_at(outcome.started);
    records
        .iter()
        .filter(|r| !r.warmup && r.succeeded())
        .map(|record| {
            let answer = written
                .get(&format!("request {}", record.index))
                .unwrap_or_else(|| panic!("the mock has no record of request {}", record.index));
            let written_ns: Vec<u64> = answer.events.iter().map(|at| clock.ns_at(*at)).collect();
            assert_eq!(
                written_ns.len(),
                record.content_event_ns.len(),
                "request {}: events written and seen differ",
                record.index
            );
            Exchange {
                index: record.index,
                sent_ns: record.sent_ns,
                seen_ns: record.content_event_ns.clone(),
                received_ns: clock.ns_at(answer.received),
                written_ns,
            }
        })
        .collect()
}
