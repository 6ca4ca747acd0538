//! The load generator's own performance, against `isobench mock` on this
//! machine, printed (never asserted):
//!
//! 1. **Accuracy.** At 1,000 req/s with injected TTFT 20 ms and ITL 2 ms,
//!    the error of the measured TTFT and ITL, against the injected values
//!    and against the truth: the instants the mock actually wrote each
//!    event (it runs in-process and records them). The mock's own timing
//!    error (its writes against its deadlines) is shown apart.
//! 2. **Sustained rate.** Open-loop Poisson sweeps of 16-token streams; a
//!    rate is sustained when achieved / scheduled send rate >= 0.99,
//!    dispatch-lag p99 < 1 ms and every request completes. It runs after
//!    the accuracy step because its last rates overload the machine.
//! 3. **Ingest.** Streamed tokens/s a closed loop of 64 can take in, one
//!    token per SSE event.
//!
//! The mock runs on its own one-thread runtime, the engine on another.
//! Run: `cargo bench -p isobench-loadgen --bench loadgen` (or
//! `scripts/bench-loadgen.sh`). Environment: `ISOBENCH_BENCH_SECONDS`
//! (per step, default 2), `ISOBENCH_BENCH_CLIENT_THREADS` (default 1),
//! `ISOBENCH_BENCH_RATES` (the sweep, comma-separated req/s),
//! `ISOBENCH_BENCH_TRIALS` (per rate, default 3) and `ISOBENCH_BENCH_PARTS`
//! (which of `rate,accuracy,ingest` to run).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isobench_loadgen::{Clock, HttpBackend, HttpBackendConfig, RunOptions, RunOutcome, run};
use isobench_metrics::Summary;
use isobench_mock::{MockConfig, MockHandle, MockServer, WrittenAnswer};
use isobench_workload::{Distribution, LoadShape, Plan, PlannedRequest, Prompt, PromptTokens};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// The record-keeping backend the timing tests use too.
#[path = "../tests/common/written.rs"]
mod written;
use written::Capture;

const OUTPUT_TOKENS: u32 = 16;

/// The rates tried, in order, until two in a row are not sustained.
const DEFAULT_RATES: [f64; 13] = [
    500.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0, 10000.0, 12000.0,
    15000.0, 20000.0,
];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seconds: f64 = env_or("ISOBENCH_BENCH_SECONDS", 2.0);
    let client_threads: usize = env_or("ISOBENCH_BENCH_CLIENT_THREADS", 1);
    let trials: usize = env_or("ISOBENCH_BENCH_TRIALS", 3).max(1);
    let rates: Vec<f64> = std::env::var("ISOBENCH_BENCH_RATES")
        .ok()
        .and_then(|list| list.split(',').map(|r| r.trim().parse().ok()).collect())
        .unwrap_or_else(|| DEFAULT_RATES.to_vec());
    let parts =
        std::env::var("ISOBENCH_BENCH_PARTS").unwrap_or_else(|_| "rate,accuracy,ingest".into());
    let mock_runtime = runtime(1, "mock");
    let client = runtime(client_threads, "client");
    println!(
        "isobench load generator benchmark: {} CPUs, client runtime {client_threads} thread(s), mock runtime 1 thread, {seconds} s per step",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let timed = start_mock(
        &mock_runtime,
        MockConfig {
            ttft: "fixed:20".parse().unwrap(),
            itl: "fixed:2".parse().unwrap(),
            record_writes: true,
            ..MockConfig::default()
        },
    );
    if parts.contains("accuracy") {
        accuracy(&client, &timed, seconds);
    }
    let fast = start_mock(&mock_runtime, MockConfig::default());
    if parts.contains("rate") {
        sustained_rate(&client, &fast, seconds, &rates, trials);
    }
    if parts.contains("ingest") {
        ingest(&client, &fast, seconds);
    }
    mock_runtime.block_on(async {
        fast.shutdown().await;
        timed.shutdown().await;
    });
}

fn runtime(threads: usize, name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(format!("bench-{name}"))
        .enable_all()
        .build()
        .unwrap()
}

fn start_mock(runtime: &tokio::runtime::Runtime, config: MockConfig) -> MockHandle {
    runtime
        .block_on(MockServer::start(config, "127.0.0.1:0".parse().unwrap()))
        .unwrap()
}

fn backend(mock: &MockHandle) -> HttpBackend {
    HttpBackend::new(HttpBackendConfig::new(mock.url(), "mock")).unwrap()
}

/// A Poisson plan at `rate` for `seconds`, the first half second warm-up.
fn poisson(rate: f64, seconds: f64, max_tokens: u32) -> Plan {
    let gap = Distribution::exponential(1.0 / rate).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let warmup = (rate * 0.5).ceil() as u64;
    let total = warmup + (rate * seconds).ceil() as u64;
    let mut at = 0.0f64;
    let requests = (0..total).map(move |index| {
        let offset = Duration::from_secs_f64(at);
        at += gap.sample(&mut rng);
        request(index, index < warmup, Some(offset), max_tokens)
    });
    Plan {
        shape: LoadShape {
            max_requests: Some(total - warmup),
            warmup,
            offered_rate: Some(rate),
            description: format!("poisson {rate} req/s"),
            ..LoadShape::default()
        },
        prompt_tokens: PromptTokens::Approximate,
        requests: Box::new(requests),
    }
}

fn request(index: u64, warmup: bool, offset: Option<Duration>, max_tokens: u32) -> PlannedRequest {
    PlannedRequest {
        index,
        warmup,
        offset,
        prompt: Prompt::Text(format!("request {index}")),
        input_tokens: 2,
        max_tokens,
    }
}

fn summarize(outcome: &RunOutcome) -> Summary {
    outcome.recorder.summarize(outcome.window_duration())
}

/// One trial at one rate.
struct Trial {
    achieved: f64,
    pace: f64,
    lag_p50_ms: f64,
    lag_p99_ms: f64,
    lag_max_ms: f64,
    errors: u64,
    error_kinds: String,
    tokens_per_s: f64,
}

impl Trial {
    fn sustained(&self) -> bool {
        self.pace >= 0.99 && self.lag_p99_ms < 1.0 && self.errors == 0
    }
}

fn trial(
    client: &tokio::runtime::Runtime,
    backend: &Arc<HttpBackend>,
    rate: f64,
    seconds: f64,
) -> Trial {
    let plan = poisson(rate, seconds, OUTPUT_TOKENS);
    let outcome = client
        .block_on(run(plan, Arc::clone(backend), RunOptions::default()))
        .unwrap();
    let summary = summarize(&outcome);
    let lag = summary.latency.dispatch_lag.as_ref().unwrap();
    let kinds: Vec<String> = summary
        .errors
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    Trial {
        achieved: outcome.sending().achieved_send_rate.unwrap_or(0.0),
        pace: outcome.pace_ratio().unwrap_or(0.0),
        lag_p50_ms: lag.p50_ms,
        lag_p99_ms: lag.p99_ms,
        lag_max_ms: lag.max_ms,
        errors: summary.requests.failed + summary.requests.cancelled,
        error_kinds: kinds.join(", "),
        tokens_per_s: summary.throughput.output_tokens_per_s,
    }
}

/// Each rate runs `trials` times; the trial with the median dispatch-lag
/// p99 is shown and judged, so one disturbance by another process on a
/// shared machine neither makes nor breaks a rate.
fn sustained_rate(
    client: &tokio::runtime::Runtime,
    mock: &MockHandle,
    seconds: f64,
    rates: &[f64],
    trials: usize,
) {
    println!(
        "\n2. Sustained open-loop Poisson rate, {OUTPUT_TOKENS}-token streams (ITL 0), median of {trials} trials"
    );
    println!(
        "{:>9} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>12}  verdict (lag p99 of each trial)",
        "offered",
        "achieved",
        "ach/sched",
        "ach/off",
        "lag p50",
        "lag p99",
        "lag max",
        "errors",
        "tokens/s"
    );
    let backend = Arc::new(backend(mock));
    let mut best = None;
    let mut failures_in_a_row = 0;
    for &rate in rates {
        let mut runs: Vec<Trial> = (0..trials)
            .map(|_| trial(client, &backend, rate, seconds))
            .collect();
        let each: Vec<String> = runs
            .iter()
            .map(|t| format!("{:.2}", t.lag_p99_ms))
            .collect();
        runs.sort_by(|a, b| a.lag_p99_ms.total_cmp(&b.lag_p99_ms));
        let t = &runs[runs.len() / 2];
        println!(
            "{rate:>9.0} {:>10.1} {:>9.4} {:>9.4} {:>7.3}ms {:>8.3}ms {:>8.3}ms {:>8} {:>12.0}  {} ({})",
            t.achieved,
            t.pace,
            t.achieved / rate,
            t.lag_p50_ms,
            t.lag_p99_ms,
            t.lag_max_ms,
            t.errors,
            t.tokens_per_s,
            if t.sustained() {
                "sustained"
            } else {
                "NOT sustained"
            },
            each.join(" / ")
        );
        if !t.error_kinds.is_empty() {
            println!("          errors: {}", t.error_kinds);
        }
        if t.sustained() {
            best = Some((rate, t.tokens_per_s));
            failures_in_a_row = 0;
        } else {
            failures_in_a_row += 1;
            if failures_in_a_row == 2 {
                break;
            }
        }
    }
    match best {
        Some((rate, tokens)) => {
            println!("=> highest sustained rate: {rate:.0} req/s ({tokens:.0} streamed tokens/s)")
        }
        None => println!("=> no rate sustained"),
    }
}

fn accuracy(client: &tokio::runtime::Runtime, mock: &MockHandle, seconds: f64) {
    println!(
        "\n1. Accuracy at 1000 req/s (Poisson), injected TTFT 20 ms, ITL 2 ms, {OUTPUT_TOKENS} tokens"
    );
    let capture = Arc::new(Capture::new(backend(mock)));
    let plan = poisson(1000.0, seconds, OUTPUT_TOKENS);
    let outcome = client
        .block_on(run(plan, Arc::clone(&capture), RunOptions::default()))
        .unwrap();
    let written: HashMap<String, WrittenAnswer> = mock
        .take_write_log()
        .into_iter()
        .map(|answer| (answer.prompt.clone(), answer))
        .collect();
    let clock = Clock::starting_at(outcome.started);
    let mut ttft_vs_injected = Vec::new();
    let mut ttft_vs_written = Vec::new();
    let mut itl_vs_injected = Vec::new();
    let mut itl_vs_written = Vec::new();
    let mut mock_ttft = Vec::new();
    let mut mock_itl = Vec::new();
    let records = capture.records.lock().unwrap();
    for record in records.iter().filter(|r| !r.warmup && r.succeeded()) {
        let Some(answer) = written.get(&format!("request {}", record.index)) else {
            continue;
        };
        let events = &record.content_event_ns;
        let writes: Vec<u64> = answer.events.iter().map(|at| clock.ns_at(*at)).collect();
        if writes.len() != events.len() {
            continue;
        }
        let received = clock.ns_at(answer.received) as f64;
        mock_ttft.push(writes[0] as f64 - received - 20e6);
        let ttft = events[0] as f64 - record.sent_ns as f64;
        ttft_vs_injected.push(ttft - 20e6);
        ttft_vs_written.push(events[0] as f64 - writes[0] as f64);
        for i in 1..events.len() {
            let measured = (events[i] - events[i - 1]) as f64;
            itl_vs_injected.push(measured - 2e6);
            let written_gap = (writes[i] - writes[i - 1]) as f64;
            itl_vs_written.push(measured - written_gap);
            mock_itl.push(written_gap - 2e6);
        }
    }
    let summary = summarize(&outcome);
    println!(
        "   {} requests matched, dispatch lag p99 {:.3} ms, achieved/scheduled {:.4}",
        ttft_vs_written.len(),
        summary
            .latency
            .dispatch_lag
            .as_ref()
            .map_or(f64::NAN, |l| l.p99_ms),
        outcome.pace_ratio().unwrap_or(f64::NAN)
    );
    println!(
        "   {:<38} {:>9} {:>9} {:>9} {:>9}",
        "error (measured - reference), ms", "p50", "p99", "|p99|", "max"
    );
    for (name, errors) in [
        ("TTFT vs injected 20 ms", &mut ttft_vs_injected),
        ("TTFT vs the mock's first write", &mut ttft_vs_written),
        ("ITL vs injected 2 ms", &mut itl_vs_injected),
        ("ITL vs the mock's write gaps", &mut itl_vs_written),
        ("(mock) first write - receipt vs 20 ms", &mut mock_ttft),
        ("(mock) write gaps vs 2 ms", &mut mock_itl),
    ] {
        let p50 = quantile(errors, 0.5);
        let p99 = quantile(errors, 0.99);
        let mut absolute: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        let abs_p99 = quantile(&mut absolute, 0.99);
        let max = quantile(&mut absolute, 1.0);
        println!(
            "   {name:<38} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            p50 / 1e6,
            p99 / 1e6,
            abs_p99 / 1e6,
            max / 1e6
        );
    }
}

fn quantile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn ingest(client: &tokio::runtime::Runtime, mock: &MockHandle, seconds: f64) {
    const CONCURRENCY: usize = 64;
    const TOKENS: u32 = 256;
    println!(
        "\n3. Ingest: closed loop of {CONCURRENCY}, {TOKENS}-token streams, one token per event, ITL 0"
    );
    let requests = (0..u64::MAX).map(|index| request(index, false, None, TOKENS));
    let plan = Plan {
        shape: LoadShape {
            max_concurrency: Some(CONCURRENCY),
            duration: Some(Duration::from_secs_f64(seconds)),
            description: format!("closed loop, {CONCURRENCY} concurrent"),
            ..LoadShape::default()
        },
        prompt_tokens: PromptTokens::Approximate,
        requests: Box::new(requests),
    };
    let started = Instant::now();
    let outcome = client
        .block_on(run(plan, Arc::new(backend(mock)), RunOptions::default()))
        .unwrap();
    let summary = summarize(&outcome);
    println!(
        "   {} requests in {:.1} s: {:.0} streamed tokens/s ingested ({:.0} req/s), {} failed",
        summary.requests.completed,
        started.elapsed().as_secs_f64(),
        summary.throughput.output_tokens_per_s,
        summary.throughput.requests_per_s,
        summary.requests.failed
    );
}
