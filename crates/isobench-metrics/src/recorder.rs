//! Per-worker recording: finished requests into histograms and counters.
//!
//! Each worker owns one [`Recorder`] (clone a prototype built with the run's
//! SLOs), records every finished request into it, and hands it over once at
//! the end, where the recorders are merged (exactly) and summarised.
//! `record` touches only preallocated histograms and counters: it iterates a
//! request's event times once and allocates nothing, except the first time a
//! new error kind is seen.

use std::time::Duration;

use crate::series::LatencySeries;
use crate::slo::{RequestLatencies, RequestThresholds};
use crate::summary::{
    Latencies, OutputTokenSource, RequestCounts, Sending, SourceCount, Summary, Throughput,
    TokenCounts, TokensBySource,
};
use crate::{ErrorKind, RequestRecord, Slo, SloMetric, SloResult, SloStatistic, TokenSource};

/// Records finished requests into histograms. One per worker; merged at the end.
#[derive(Debug, Clone)]
pub struct Recorder {
    slos: Vec<Slo>,
    thresholds: RequestThresholds,
    latency: LatencySet,
    counts: Counts,
    tokens: TokenTally,
    span: SendSpan,
}

/// The histograms, one per latency metric.
#[derive(Debug, Clone, Default)]
struct LatencySet {
    ttft: LatencySeries,
    ttft_from_schedule: LatencySeries,
    itl_per_event: LatencySeries,
    itl_per_token: LatencySeries,
    itl_per_token_unsplit_requests: u64,
    tpot: LatencySeries,
    e2e: LatencySeries,
    e2e_from_schedule: LatencySeries,
    dispatch_lag: LatencySeries,
}

#[derive(Debug, Clone, Default)]
struct Counts {
    completed: u64,
    failed: u64,
    cancelled: u64,
    warmup: u64,
    good: u64,
    /// Measured requests' retries on a new connection.
    retries: u64,
    /// Failed and cancelled requests per kind; a handful of entries, so a
    /// linear scan beats a map and allocates only for a kind never seen.
    errors: Vec<(ErrorKind, u64)>,
}

#[derive(Debug, Clone, Default)]
struct TokenTally {
    input: u64,
    output: u64,
    by_source: TokensBySource,
}

/// First and last instants of the measured requests, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
struct SendSpan {
    first_scheduled: Option<u64>,
    last_scheduled: Option<u64>,
    first_sent: Option<u64>,
    last_sent: Option<u64>,
    last_end: Option<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder without SLOs: the summary has no goodput.
    pub fn new() -> Self {
        Self::with_slos(&[])
    }

    /// A recorder that counts requests meeting every SLO's per-request
    /// threshold (goodput) and checks each SLO in the summary. Workers'
    /// recorders must be clones of one prototype so that they merge.
    pub fn with_slos(slos: &[Slo]) -> Self {
        Self {
            slos: slos.to_vec(),
            thresholds: RequestThresholds::from_slos(slos),
            latency: LatencySet::default(),
            counts: Counts::default(),
            tokens: TokenTally::default(),
            span: SendSpan::default(),
        }
    }

    /// The SLOs this recorder checks.
    pub fn slos(&self) -> &[Slo] {
        &self.slos
    }

    /// Adds one finished (or failed) request. Warm-up records are only counted.
    ///
    /// Dispatch lag and the send span cover every measured request; the other
    /// latencies, token counts and goodput come from completed requests only.
    pub fn record(&mut self, record: &RequestRecord) {
        if record.warmup {
            self.counts.warmup += 1;
            return;
        }
        self.span.observe(record);
        self.counts.retries += u64::from(record.retries);
        self.latency.dispatch_lag.record(record.dispatch_lag_ns());
        if let Some(error) = &record.error {
            self.counts.count_error(error.kind);
            return;
        }
        self.counts.completed += 1;
        self.tokens.add(record);

        let ttft_ns = record.ttft_ns();
        if let Some(first_event) = record.content_event_ns.first() {
            self.latency
                .ttft
                .record(first_event.saturating_sub(record.sent_ns));
            self.latency
                .ttft_from_schedule
                .record(first_event.saturating_sub(record.scheduled_ns));
        }
        let e2el_ns = record.e2e_ns();
        self.latency.e2e.record(e2el_ns);
        self.latency
            .e2e_from_schedule
            .record(record.end_ns.saturating_sub(record.scheduled_ns));
        let tpot_ns = record.tpot_ns();
        if let Some(tpot) = tpot_ns {
            self.latency.tpot.record(tpot);
        }
        let max_itl_ns = self.latency.record_gaps(record);

        let values = RequestLatencies {
            ttft_ns,
            tpot_ns,
            max_itl_ns,
            e2el_ns,
        };
        if !self.slos.is_empty() && self.thresholds.met_by(&values) {
            self.counts.good += 1;
        }
    }

    /// Folds another worker's recorder into this one. The result is exactly
    /// what one recorder would hold had it recorded both workers' requests.
    ///
    /// The workers' recorders should be clones of one prototype, so that they
    /// judge goodput by the same SLOs. A recorder without SLOs (a fresh
    /// [`Recorder::new`] used as the merge target) adopts the other's.
    pub fn merge(&mut self, other: &Recorder) {
        if self.slos.is_empty() && !other.slos.is_empty() {
            self.slos.clone_from(&other.slos);
            self.thresholds = other.thresholds;
        }
        self.latency.merge(&other.latency);
        self.counts.merge(&other.counts);
        self.tokens.merge(&other.tokens);
        self.span.merge(&other.span);
    }

    /// Requests recorded so far, warm-ups excluded.
    pub fn measured(&self) -> u64 {
        self.counts.completed + self.counts.failed + self.counts.cancelled
    }

    /// The measured window, in nanoseconds on the run's clock: from the
    /// first send to the last end among measured requests.
    pub fn measured_window(&self) -> Option<(u64, u64)> {
        self.span.first_sent.zip(self.span.last_end)
    }

    /// The measured window's length ([`Recorder::measured_window`]).
    pub fn measured_span(&self) -> Option<Duration> {
        let (first, last) = self.measured_window()?;
        Some(Duration::from_nanos(last.saturating_sub(first)))
    }

    /// Requests by outcome so far: the one record of them, which the run's
    /// outcome and its report both read.
    pub fn counts(&self) -> RequestCounts {
        let counts = &self.counts;
        RequestCounts {
            measured: self.measured(),
            completed: counts.completed,
            failed: counts.failed,
            cancelled: counts.cancelled,
            warmup: counts.warmup,
            retries: counts.retries,
            good: (!self.slos.is_empty()).then_some(counts.good),
        }
    }

    /// When the measured requests were scheduled and sent, and the rates
    /// derived from that.
    pub fn sending(&self) -> Sending {
        self.span.summarize(self.measured())
    }

    /// The run's statistics, with rates over `window` (the measured window:
    /// the load engine's, or [`Recorder::measured_span`]).
    pub fn summarize(&self, window: Duration) -> Summary {
        let window_s = window.as_secs_f64();
        let per_second = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
        let counts = &self.counts;
        let has_slos = !self.slos.is_empty();
        let tokens = &self.tokens;
        let judged = counts.completed + counts.failed;
        Summary {
            window_s,
            requests: self.counts(),
            errors: counts
                .errors
                .iter()
                .map(|(kind, n)| (kind.label(), *n))
                .collect(),
            tokens: TokenCounts {
                input: tokens.input,
                output: tokens.output,
                output_source: tokens.output_source(),
                by_source: tokens.by_source,
            },
            throughput: Throughput {
                requests_per_s: per_second(counts.completed as f64),
                output_tokens_per_s: per_second(tokens.output as f64),
                total_tokens_per_s: per_second((tokens.input + tokens.output) as f64),
                goodput_requests_per_s: has_slos.then(|| per_second(counts.good as f64)),
                good_fraction: (has_slos && judged > 0).then(|| counts.good as f64 / judged as f64),
            },
            sending: self.sending(),
            latency: self.latency.summarize(),
            slos: self.slos.iter().map(|slo| self.check(*slo)).collect(),
            clamped_samples: self.latency.clamped(),
        }
    }

    /// The aggregate check of one SLO: ITL is checked per event, the other
    /// metrics from the send.
    fn check(&self, slo: Slo) -> SloResult {
        let series = match slo.metric {
            SloMetric::Ttft => &self.latency.ttft,
            SloMetric::Tpot => &self.latency.tpot,
            SloMetric::Itl => &self.latency.itl_per_event,
            SloMetric::E2el => &self.latency.e2e,
        };
        let measured_ms = match slo.statistic {
            SloStatistic::Mean => series.mean_ms(),
            SloStatistic::Percentile(p) => series.quantile_ms(p / 100.0),
        };
        SloResult::new(slo, measured_ms)
    }
}

impl LatencySet {
    /// Records a completed request's inter-token gaps in both views and
    /// returns its largest gap between content events.
    ///
    /// Per event: every gap between consecutive content events. Per token:
    /// when `event_tokens` gives each event's token count, an event carrying
    /// k >= 1 tokens contributes k gaps of (its time - the previous
    /// token-carrying event's time) / k; an event carrying 0 tokens
    /// contributes none (its time folds into the next one's gap); the first
    /// event's tokens contribute none (they arrived with the first token, in
    /// TTFT). Without per-event counts the per-token view takes the per-event
    /// gaps unsplit.
    fn record_gaps(&mut self, record: &RequestRecord) -> Option<u64> {
        let events = &record.content_event_ns;
        let event_tokens =
            (record.event_tokens.len() == events.len()).then_some(&record.event_tokens[..]);
        if event_tokens.is_none() && events.len() > 1 {
            self.itl_per_token_unsplit_requests += 1;
        }
        let mut previous_token_event = *events.first()?;
        let mut max_gap = None;
        for (i, pair) in events.windows(2).enumerate() {
            let (previous, current) = (pair[0], pair[1]);
            let gap = current.saturating_sub(previous);
            self.itl_per_event.record(gap);
            max_gap = max_gap.max(Some(gap));
            match event_tokens.map(|tokens| u64::from(tokens[i + 1])) {
                None => self.itl_per_token.record(gap),
                Some(0) => {}
                Some(tokens) => {
                    let since = current.saturating_sub(previous_token_event);
                    self.itl_per_token.record_n(since / tokens, tokens);
                    previous_token_event = current;
                }
            }
        }
        max_gap
    }

    fn all_mut(&mut self) -> [&mut LatencySeries; 8] {
        [
            &mut self.ttft,
            &mut self.ttft_from_schedule,
            &mut self.itl_per_event,
            &mut self.itl_per_token,
            &mut self.tpot,
            &mut self.e2e,
            &mut self.e2e_from_schedule,
            &mut self.dispatch_lag,
        ]
    }

    fn all(&self) -> [&LatencySeries; 8] {
        [
            &self.ttft,
            &self.ttft_from_schedule,
            &self.itl_per_event,
            &self.itl_per_token,
            &self.tpot,
            &self.e2e,
            &self.e2e_from_schedule,
            &self.dispatch_lag,
        ]
    }

    fn merge(&mut self, other: &LatencySet) {
        for (mine, theirs) in self.all_mut().into_iter().zip(other.all()) {
            mine.merge(theirs);
        }
        self.itl_per_token_unsplit_requests += other.itl_per_token_unsplit_requests;
    }

    fn clamped(&self) -> u64 {
        self.all().iter().map(|series| series.clamped()).sum()
    }

    fn summarize(&self) -> Latencies {
        Latencies {
            ttft: self.ttft.stats(),
            ttft_from_schedule: self.ttft_from_schedule.stats(),
            itl_per_event: self.itl_per_event.stats(),
            itl_per_token: self.itl_per_token.stats(),
            itl_per_token_unsplit_requests: self.itl_per_token_unsplit_requests,
            tpot: self.tpot.stats(),
            e2e: self.e2e.stats(),
            e2e_from_schedule: self.e2e_from_schedule.stats(),
            dispatch_lag: self.dispatch_lag.stats(),
        }
    }
}

impl Counts {
    fn count_error(&mut self, kind: ErrorKind) {
        if kind == ErrorKind::Cancelled {
            self.cancelled += 1;
        } else {
            self.failed += 1;
        }
        self.add_errors(kind, 1);
    }

    fn add_errors(&mut self, kind: ErrorKind, n: u64) {
        match self.errors.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, count)) => *count += n,
            None => self.errors.push((kind, n)),
        }
    }

    fn merge(&mut self, other: &Counts) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
        self.warmup += other.warmup;
        self.good += other.good;
        self.retries += other.retries;
        for (kind, n) in &other.errors {
            self.add_errors(*kind, *n);
        }
    }
}

impl TokenTally {
    fn add(&mut self, record: &RequestRecord) {
        let output = u64::from(record.output_tokens);
        self.input += u64::from(record.input_tokens);
        self.output += output;
        let source = self.source_mut(record.token_source);
        source.requests += 1;
        source.output_tokens += output;
    }

    fn source_mut(&mut self, source: TokenSource) -> &mut SourceCount {
        match source {
            TokenSource::Usage => &mut self.by_source.usage,
            TokenSource::Tokenizer => &mut self.by_source.tokenizer,
            TokenSource::Events => &mut self.by_source.events,
        }
    }

    fn merge(&mut self, other: &TokenTally) {
        self.input += other.input;
        self.output += other.output;
        for (source, theirs) in [
            (TokenSource::Usage, other.by_source.usage),
            (TokenSource::Tokenizer, other.by_source.tokenizer),
            (TokenSource::Events, other.by_source.events),
        ] {
            let mine = self.source_mut(source);
            mine.requests += theirs.requests;
            mine.output_tokens += theirs.output_tokens;
        }
    }

    fn output_source(&self) -> OutputTokenSource {
        let by = &self.by_source;
        match (by.usage.requests, by.tokenizer.requests, by.events.requests) {
            (0, 0, 0) => OutputTokenSource::None,
            (_, 0, 0) => OutputTokenSource::Usage,
            (0, _, 0) => OutputTokenSource::Tokenizer,
            (0, 0, _) => OutputTokenSource::Events,
            _ => OutputTokenSource::Mixed,
        }
    }
}

impl SendSpan {
    fn observe(&mut self, record: &RequestRecord) {
        let earliest = |slot: &mut Option<u64>, t: u64| *slot = Some(slot.map_or(t, |s| s.min(t)));
        let latest = |slot: &mut Option<u64>, t: u64| *slot = Some(slot.map_or(t, |s| s.max(t)));
        earliest(&mut self.first_scheduled, record.scheduled_ns);
        latest(&mut self.last_scheduled, record.scheduled_ns);
        earliest(&mut self.first_sent, record.sent_ns);
        latest(&mut self.last_sent, record.sent_ns);
        latest(&mut self.last_end, record.end_ns);
    }

    fn merge(&mut self, other: &SendSpan) {
        let earliest = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => a.or(b),
        };
        self.first_scheduled = earliest(self.first_scheduled, other.first_scheduled);
        self.first_sent = earliest(self.first_sent, other.first_sent);
        self.last_scheduled = self.last_scheduled.max(other.last_scheduled);
        self.last_sent = self.last_sent.max(other.last_sent);
        self.last_end = self.last_end.max(other.last_end);
    }

    fn summarize(&self, measured: u64) -> Sending {
        let seconds = |t: Option<u64>| t.map(|ns| ns as f64 / 1e9);
        let rate = |first: Option<u64>, last: Option<u64>| {
            let span_ns = last?.checked_sub(first?)?;
            (measured >= 2 && span_ns > 0).then(|| (measured - 1) as f64 / (span_ns as f64 / 1e9))
        };
        Sending {
            first_scheduled_s: seconds(self.first_scheduled),
            last_scheduled_s: seconds(self.last_scheduled),
            first_sent_s: seconds(self.first_sent),
            last_sent_s: seconds(self.last_sent),
            last_end_s: seconds(self.last_end),
            achieved_send_rate: rate(self.first_sent, self.last_sent),
            scheduled_send_rate: rate(self.first_scheduled, self.last_scheduled),
        }
    }
}
