//! A realistic run for the report tests: 240 requests on an open-loop
//! schedule with streamed, partly chunked answers, failures of several
//! kinds, cancellations and warm-up, recorded by two workers and merged.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use isobench_metrics::{
    ErrorKind, Recorder, RequestError, RequestRecord, Slo, TokenSource,
    assess_validity_with_max_error_rate,
};
use isobench_report::{GpuMeasurement, PromptTokenSource, Report, RunMeta};

const MS: u64 = 1_000_000;

/// A small deterministic generator, so the report is the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

fn record(i: u64, random: &mut Lcg) -> RequestRecord {
    let scheduled = i * 50 * MS;
    let events = 4 + random.next(28) as usize;
    let mut record = RequestRecord::new(i, i < 8, scheduled, events);
    record.sent_ns = scheduled + 50_000 + random.next(200_000);
    let mut t = record.sent_ns + (80 + random.next(60)) * MS;
    for _ in 0..events {
        record.content_event_ns.push(t);
        t += (15 + random.next(10)) * MS;
    }
    record.end_ns = t;
    record.input_tokens = 100 + random.next(400) as u32;
    if i.is_multiple_of(3) {
        record.event_tokens = vec![2; events];
        record.output_tokens = 2 * events as u32;
        record.token_source = TokenSource::Usage;
    } else {
        record.output_tokens = events as u32;
        record.token_source = TokenSource::Events;
    }
    let error = match i % 40 {
        17 => Some(ErrorKind::HttpStatus(429)),
        29 => Some(ErrorKind::Timeout),
        _ if i >= 236 => Some(ErrorKind::Cancelled),
        _ => None,
    };
    // A few requests went out twice after a reused connection closed.
    record.retries = u32::from(i % 40 == 5);
    if let Some(kind) = error {
        record.error = Some(RequestError {
            kind,
            message: format!("injected {}", kind.label()),
        });
    }
    record
}

pub fn run_meta() -> RunMeta {
    RunMeta {
        workload: "chat".into(),
        workload_file: Some("workloads/chat.toml".into()),
        target: "http://127.0.0.1:8000".into(),
        model: "tiny-llama".into(),
        api: "chat".into(),
        streaming: true,
        seed: Some(42),
        load: "constant 20 req/s, 240 requests, 8 warm-up".into(),
        started_at: "2025-01-31T12:00:00.000Z".into(),
        duration_s: 12.8,
        interrupted: false,
        prompt_token_source: PromptTokenSource::Tokenizer,
        server: None,
    }
}

/// The report of the run, with SLOs `ttft_p99=150ms,tpot_p99=30ms,itl_p95=22ms`.
pub fn sample_report() -> Report {
    let slos = Slo::parse_list("ttft_p99=150ms,tpot_p99=30ms,itl_p95=22ms").unwrap();
    let prototype = Recorder::with_slos(&slos);
    let mut workers = [prototype.clone(), prototype];
    let mut random = Lcg(7);
    for i in 0..240 {
        workers[(i % 2) as usize].record(&record(i, &mut random));
    }
    let [mut merged, other] = workers;
    merged.merge(&other);
    let window = merged.measured_span().unwrap_or(Duration::ZERO);
    let summary = merged.summarize(window);
    // 12 of 228 judged requests fail (5.3%): allowed here, so that the
    // fixture is a valid run with failures (as `--max-error-rate 0.1` gives).
    let validity = assess_validity_with_max_error_rate(&summary, Some(20.0), 0.1);
    Report::new(run_meta(), summary, validity)
}

/// The sample run with what `isobench run` adds to it: every measured
/// request's samples and the server's metrics scraped every 250 ms.
pub fn report_with_samples(seed: u64, ttft_scale: f64) -> Report {
    use isobench_metrics::{RequestSample, Samples};
    use isobench_report::ServerMetrics;
    let mut report = sample_report();
    let mut random = Lcg(seed);
    let samples: Vec<RequestSample> = (8..236)
        .map(|i| {
            let mut r = record(i, &mut random);
            // Every event moves with the first: TTFT scaled, the rest kept.
            let ttft = r.content_event_ns[0] - r.sent_ns;
            let shift = (ttft as f64 * (ttft_scale - 1.0)) as i64;
            let moved = |t: u64| t.saturating_add_signed(shift);
            for t in &mut r.content_event_ns {
                *t = moved(*t);
            }
            r.end_ns = moved(r.end_ns);
            RequestSample::of(&r)
        })
        .collect();
    report.samples = Some(Samples(samples));
    let t_s: Vec<f64> = (0..48).map(|k| k as f64 * 0.25).collect();
    let n = t_s.len();
    report.server_metrics = Some(ServerMetrics {
        url: "http://127.0.0.1:8000/metrics".into(),
        source: "isobench".into(),
        interval_s: 0.25,
        running: (0..n).map(|k| Some((k % 6) as f64 + 1.0)).collect(),
        waiting: (0..n).map(|k| Some((k / 8) as f64)).collect(),
        kv_usage: (0..n).map(|k| Some(k as f64 / n as f64)).collect(),
        batch_size: std::iter::once(None)
            .chain((1..n).map(|k| Some((k % 5) as f64 + 1.0)))
            .collect(),
        t_s,
    });
    report
}

/// Steps of a sweep: the run at growing rates, each with its steady state.
pub fn sweep_steps(series: &str) -> Vec<Report> {
    use isobench_metrics::SteadyWindow;
    use isobench_report::{SteadyState, StepKind, StepMeta};
    (0..4u32)
        .map(|index| {
            let mut report =
                report_with_samples(11 + u64::from(index), 1.0 + f64::from(index) * 0.3);
            let samples = report.samples.as_ref().unwrap().0.clone();
            let window = SteadyWindow::of(&samples, Duration::ZERO).unwrap();
            let mut summary = report.summary.clone();
            summary.throughput.requests_per_s *= 1.0 + f64::from(index);
            report.steady_state = Some(SteadyState {
                start_s: window.start_ns as f64 / 1e9,
                end_s: window.end_ns as f64 / 1e9,
                summary,
                saturation: window.saturation(&samples),
            });
            report.step = Some(StepMeta {
                kind: StepKind::Sweep,
                series: series.to_owned(),
                index,
                rate: Some(5.0 * f64::from(index + 1)),
                concurrency: None,
            });
            report
        })
        .collect()
}

/// What an H200 measured over a run, with `energy_j` (none: a GPU without
/// an energy counter), half a second of forwards and a quarter of a second
/// of its engine idle.
pub fn h200(energy_j: Option<f64>) -> GpuMeasurement {
    GpuMeasurement {
        name: "NVIDIA H200".into(),
        index: 0,
        driver: "580.65.06".into(),
        memory_total_bytes: 150_754_820_096,
        peak_memory_bytes: 141_000_000_000,
        energy_j,
        cuda_graph_replays: 900,
        eager_steps: 120,
        device_busy_s: Some(0.5),
        engine_idle_s: Some(0.25),
    }
}
