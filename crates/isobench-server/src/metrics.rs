//! Server metrics, shared by the engine thread and the HTTP handlers, and
//! their Prometheus text rendering for `GET /metrics`.
//!
//! Everything on a request's or a step's path is a relaxed atomic:
//! recording a token's latency is a few atomic adds, with no lock and no
//! allocation. Histograms have fixed buckets (Prometheus `le` semantics)
//! and keep their sum in nanoseconds.
//!
//! Per engine step: its sequences (`isobench_batch_size`), its tokens
//! (`isobench_step_tokens`), whether it replayed a CUDA graph
//! (`isobench_cuda_graph_replays_total` against
//! `isobench_eager_steps_total`), its host-clock phases
//! (`isobench_step_seconds`) and, on CUDA, its GPU time between CUDA events
//! (`isobench_step_device_seconds`). Between steps, the time the engine
//! slept with nothing it could run (`isobench_engine_idle_seconds_total`,
//! a sleep in progress included, so the counter never jumps when one
//! ends; kept under a lock the engine takes only around its sleeps). The
//! GPU's memory and energy are in [`crate::gpu`].

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::gpu::GpuGauges;

/// Bucket upper bounds (seconds) for time to first token.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Bucket upper bounds (seconds) for per-token and step latencies.
const STEP_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
];
/// Bucket upper bounds (seconds) for a step's GPU time: finer at the low
/// end, where a small model's decode step lies.
const DEVICE_STEP_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01,
    0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0,
];
/// Bucket upper bounds for tokens computed per step.
const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
];
/// Bucket upper bounds for sequences per step.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The `status` label values of `isobench_requests_total`: how requests
/// ended (`stop`, `length`, `cancelled` when the client went away) or the
/// error kind they were refused or failed with.
pub const REQUEST_STATUSES: [&str; 8] = [
    "stop",
    "length",
    "cancelled",
    "invalid_request_error",
    "authentication_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
];

/// A Prometheus histogram with fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket counts (not cumulative); the last is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe_duration(&self, duration: Duration) {
        self.observe_value(duration.as_secs_f64(), duration.as_nanos() as u64);
    }

    /// Records a plain count (such as a batch size); the sum is kept scaled
    /// by 1e9 like durations, so rendering is uniform.
    pub fn observe_count(&self, value: u64) {
        self.observe_value(value as f64, value.saturating_mul(1_000_000_000));
    }

    /// The sum of what was observed (a count's, or seconds).
    #[cfg(test)]
    pub fn sum(&self) -> f64 {
        self.sum_nanos.load(Relaxed) as f64 / 1e9
    }

    fn observe_value(&self, value: f64, scaled: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(scaled, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(self.counts.iter()) {
            cumulative += count.load(Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[self.bounds.len()].load(Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {cumulative}", braces(labels));
    }
}

/// The engine's sleeps: their time so far and the one in progress.
#[derive(Debug, Default)]
struct IdleClock {
    /// The sleeps that ended.
    slept: Duration,
    /// When the sleep in progress began.
    since: Option<Instant>,
}

impl IdleClock {
    fn total(&self, now: Instant) -> Duration {
        self.slept
            + self
                .since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }
}

/// Which part of an engine step a duration measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPhase {
    /// Planning the step: admissions, block allocation, batch building.
    Schedule,
    /// The model forward of a step that carries prompt tokens.
    Prefill,
    /// The model forward of a step of decode tokens only.
    Decode,
    /// Bringing the logits the samplers need to the host: on a GPU this
    /// also waits for the step's kernels to finish.
    Logits,
    /// Taking the step's tokens (sampling them on the CPU), and making the
    /// text of those that may finish their sequence: the end of text, the
    /// last allowed token, a request with stop strings (on the CPU, of
    /// every token).
    Sample,
    /// Making the text of the other tokens (detokenizing): on a GPU the
    /// last step's, at the same moment as `Send`, just before it.
    Text,
    /// Sending the events a step made to the requests' handlers: on a GPU
    /// the last step's, once the next step is launched if it replays a
    /// graph (before an eager step); on the CPU after their step.
    Send,
}

const STEP_PHASES: [(StepPhase, &str); 7] = [
    (StepPhase::Schedule, "schedule"),
    (StepPhase::Prefill, "prefill"),
    (StepPhase::Decode, "decode"),
    (StepPhase::Logits, "logits"),
    (StepPhase::Sample, "sample"),
    (StepPhase::Text, "text"),
    (StepPhase::Send, "send"),
];

/// The phases a model forward belongs to (the `phase` label of the device
/// time histogram).
const FORWARD_PHASES: [(StepPhase, &str); 2] = [
    (StepPhase::Prefill, "prefill"),
    (StepPhase::Decode, "decode"),
];

/// Every figure `/metrics` reports.
#[derive(Debug)]
pub struct Metrics {
    pub requests_running: AtomicU64,
    pub requests_waiting: AtomicU64,
    pub kv_blocks_total: AtomicU64,
    pub kv_blocks_free: AtomicU64,
    pub preemptions_total: AtomicU64,
    pub prompt_tokens_total: AtomicU64,
    pub generation_tokens_total: AtomicU64,
    requests_total: [AtomicU64; REQUEST_STATUSES.len()],
    pub batch_size: Histogram,
    pub step_tokens: Histogram,
    /// Model steps replayed from a CUDA graph.
    pub cuda_graph_replays_total: AtomicU64,
    /// Model steps run eagerly: every step on the CPU; on CUDA steps
    /// above the largest graph buckets, or graphs off.
    pub eager_steps_total: AtomicU64,
    step_seconds: [Histogram; STEP_PHASES.len()],
    step_device_seconds: [Histogram; FORWARD_PHASES.len()],
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
    idle: Mutex<IdleClock>,
    pub gpu: GpuGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests_running: AtomicU64::new(0),
            requests_waiting: AtomicU64::new(0),
            kv_blocks_total: AtomicU64::new(0),
            kv_blocks_free: AtomicU64::new(0),
            preemptions_total: AtomicU64::new(0),
            prompt_tokens_total: AtomicU64::new(0),
            generation_tokens_total: AtomicU64::new(0),
            requests_total: std::array::from_fn(|_| AtomicU64::new(0)),
            batch_size: Histogram::new(BATCH_BUCKETS),
            step_tokens: Histogram::new(TOKEN_BUCKETS),
            cuda_graph_replays_total: AtomicU64::new(0),
            eager_steps_total: AtomicU64::new(0),
            step_seconds: std::array::from_fn(|_| Histogram::new(STEP_BUCKETS)),
            step_device_seconds: std::array::from_fn(|_| Histogram::new(DEVICE_STEP_BUCKETS)),
            time_to_first_token: Histogram::new(TTFT_BUCKETS),
            time_per_output_token: Histogram::new(STEP_BUCKETS),
            idle: Mutex::default(),
            gpu: GpuGauges::default(),
        }
    }
}

impl Metrics {
    /// Counts a request that ended with `status` (one of [`REQUEST_STATUSES`];
    /// anything else counts as `server_error`).
    pub fn count_request(&self, status: &str) {
        let index = REQUEST_STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(REQUEST_STATUSES.len() - 1);
        self.requests_total[index].fetch_add(1, Relaxed);
    }

    #[cfg(test)]
    pub fn requests_with_status(&self, status: &str) -> u64 {
        REQUEST_STATUSES
            .iter()
            .position(|&s| s == status)
            .map_or(0, |i| self.requests_total[i].load(Relaxed))
    }

    pub fn observe_step(&self, phase: StepPhase, duration: Duration) {
        self.step_seconds[phase as usize].observe_duration(duration);
    }

    /// Runs `sleep`, a wait of the engine thread with nothing it can run
    /// (for a request, or for dynamic batching's deadline), as idle time.
    pub fn idle<T>(&self, sleep: impl FnOnce() -> T) -> T {
        self.idle_clock().since = Some(Instant::now());
        let woke = sleep();
        let mut clock = self.idle_clock();
        if let Some(since) = clock.since.take() {
            clock.slept += since.elapsed();
        }
        woke
    }

    /// The engine's idle time so far, a sleep in progress included.
    fn idle_time(&self) -> Duration {
        self.idle_clock().total(Instant::now())
    }

    fn idle_clock(&self) -> std::sync::MutexGuard<'_, IdleClock> {
        // The clock holds no invariant a panic could break.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records what one model forward did: its tokens, whether a CUDA graph
    /// replayed it, and its GPU time (`None` on the CPU). `phase` is
    /// [`StepPhase::Prefill`] or [`StepPhase::Decode`].
    pub fn observe_forward(
        &self,
        phase: StepPhase,
        tokens: u64,
        graph_replayed: bool,
        device_time: Option<Duration>,
    ) {
        self.step_tokens.observe_count(tokens);
        let steps = if graph_replayed {
            &self.cuda_graph_replays_total
        } else {
            &self.eager_steps_total
        };
        steps.fetch_add(1, Relaxed);
        if let (Some(time), Some(index)) = (
            device_time,
            FORWARD_PHASES.iter().position(|(p, _)| *p == phase),
        ) {
            self.step_device_seconds[index].observe_duration(time);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let gauge = |out: &mut String, name: &str, help: &str, value: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                value.load(Relaxed)
            );
        };
        let counter = |out: &mut String, name: &str, help: &str, value: &AtomicU64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Relaxed)
            );
        };
        gauge(
            &mut out,
            "isobench_requests_running",
            "Sequences in the running batch.",
            &self.requests_running,
        );
        gauge(
            &mut out,
            "isobench_requests_waiting",
            "Requests waiting for admission (preempted ones included).",
            &self.requests_waiting,
        );
        gauge(
            &mut out,
            "isobench_kv_blocks_total",
            "KV-cache blocks in the pool.",
            &self.kv_blocks_total,
        );
        gauge(
            &mut out,
            "isobench_kv_blocks_free",
            "KV-cache blocks on the free list.",
            &self.kv_blocks_free,
        );
        let used = self
            .kv_blocks_total
            .load(Relaxed)
            .saturating_sub(self.kv_blocks_free.load(Relaxed));
        let _ = writeln!(
            out,
            "# HELP isobench_kv_blocks_used KV-cache blocks held by sequences.\n# TYPE isobench_kv_blocks_used gauge\nisobench_kv_blocks_used {used}"
        );
        counter(
            &mut out,
            "isobench_preemptions_total",
            "Sequences preempted (blocks freed, recomputed later) because the KV pool ran out.",
            &self.preemptions_total,
        );
        counter(
            &mut out,
            "isobench_cuda_graph_replays_total",
            "Model steps replayed from a CUDA graph.",
            &self.cuda_graph_replays_total,
        );
        counter(
            &mut out,
            "isobench_eager_steps_total",
            "Model steps run eagerly (every step on the CPU; on CUDA steps above the largest graph buckets, or graphs off).",
            &self.eager_steps_total,
        );
        counter(
            &mut out,
            "isobench_prompt_tokens_total",
            "Prompt tokens of admitted requests.",
            &self.prompt_tokens_total,
        );
        counter(
            &mut out,
            "isobench_generation_tokens_total",
            "Tokens generated.",
            &self.generation_tokens_total,
        );

        let _ = writeln!(
            out,
            "# HELP isobench_requests_total Requests by how they ended: finish reason, cancelled, or error kind.\n# TYPE isobench_requests_total counter"
        );
        for (status, count) in REQUEST_STATUSES.iter().zip(&self.requests_total) {
            let _ = writeln!(
                out,
                "isobench_requests_total{{status=\"{status}\"}} {}",
                count.load(Relaxed)
            );
        }

        let _ = writeln!(
            out,
            "# HELP isobench_batch_size Sequences per engine step.\n# TYPE isobench_batch_size histogram"
        );
        self.batch_size.render(&mut out, "isobench_batch_size", "");
        let _ = writeln!(
            out,
            "# HELP isobench_step_tokens Tokens computed per engine step (decode tokens plus prefill chunks).\n# TYPE isobench_step_tokens histogram"
        );
        self.step_tokens
            .render(&mut out, "isobench_step_tokens", "");
        let _ = writeln!(
            out,
            "# HELP isobench_step_seconds Engine step time by phase: schedule, prefill (forward of steps with prompt tokens), decode (forward of decode-only steps), logits (bringing them to the host; on a GPU, waiting for the step), sample (sampling, detokenizing), send (events to the handlers; on a GPU the last step's, while this one runs).\n# TYPE isobench_step_seconds histogram"
        );
        for ((_, label), histogram) in STEP_PHASES.iter().zip(&self.step_seconds) {
            histogram.render(
                &mut out,
                "isobench_step_seconds",
                &format!("phase=\"{label}\""),
            );
        }
        let _ = writeln!(
            out,
            "# HELP isobench_step_device_seconds GPU time of a model forward, between CUDA events (CUDA only), by phase.\n# TYPE isobench_step_device_seconds histogram"
        );
        for ((_, label), histogram) in FORWARD_PHASES.iter().zip(&self.step_device_seconds) {
            histogram.render(
                &mut out,
                "isobench_step_device_seconds",
                &format!("phase=\"{label}\""),
            );
        }
        let _ = writeln!(
            out,
            "# HELP isobench_time_to_first_token_seconds From request receipt to its first generated token.\n# TYPE isobench_time_to_first_token_seconds histogram"
        );
        self.time_to_first_token
            .render(&mut out, "isobench_time_to_first_token_seconds", "");
        let _ = writeln!(
            out,
            "# HELP isobench_time_per_output_token_seconds Gap between consecutive generated tokens of a request.\n# TYPE isobench_time_per_output_token_seconds histogram"
        );
        self.time_per_output_token
            .render(&mut out, "isobench_time_per_output_token_seconds", "");
        let _ = writeln!(
            out,
            "# HELP isobench_engine_idle_seconds_total Time the engine slept with nothing it could run: waiting for requests, or for dynamic batching's deadline (a sleep in progress included).\n# TYPE isobench_engine_idle_seconds_total counter\nisobench_engine_idle_seconds_total {}",
            self.idle_time().as_secs_f64()
        );
        self.gpu.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_le_semantics() {
        let metrics = Metrics::default();
        metrics
            .time_to_first_token
            .observe_duration(Duration::from_millis(5));
        metrics
            .time_to_first_token
            .observe_duration(Duration::from_millis(30));
        metrics
            .time_to_first_token
            .observe_duration(Duration::from_secs(100));
        let text = metrics.render();
        assert!(
            text.contains("isobench_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("isobench_time_to_first_token_seconds_bucket{le=\"0.05\"} 2\n"));
        assert!(text.contains("isobench_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("isobench_time_to_first_token_seconds_sum 100.035\n"));
        assert!(text.contains("isobench_time_to_first_token_seconds_count 3\n"));
    }

    #[test]
    fn labelled_series_and_statuses_render() {
        let metrics = Metrics::default();
        metrics.observe_step(StepPhase::Decode, Duration::from_millis(2));
        metrics.count_request("rate_limit_error");
        metrics.count_request("stop");
        metrics.count_request("something_else");
        metrics.batch_size.observe_count(3);
        metrics.kv_blocks_total.store(10, Relaxed);
        metrics.kv_blocks_free.store(4, Relaxed);
        let text = metrics.render();
        assert!(
            text.contains("isobench_step_seconds_count{phase=\"decode\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("isobench_step_seconds_bucket{phase=\"prefill\",le=\"+Inf\"} 0\n"));
        assert!(text.contains("isobench_requests_total{status=\"rate_limit_error\"} 1\n"));
        assert!(text.contains("isobench_requests_total{status=\"server_error\"} 1\n"));
        assert!(text.contains("isobench_batch_size_bucket{le=\"4\"} 1\n"));
        assert!(text.contains("isobench_batch_size_sum 3\n"));
        assert!(text.contains("isobench_kv_blocks_used 6\n"));
        assert_eq!(metrics.requests_with_status("stop"), 1);
    }

    #[test]
    fn idle_time_counts_sleeps_in_progress_and_ended_and_nothing_else() {
        let metrics = std::sync::Arc::new(Metrics::default());
        assert_eq!(metrics.idle_time(), Duration::ZERO);
        let (started, sleeping) = std::sync::mpsc::channel();
        let (wake, woken) = std::sync::mpsc::channel::<()>();
        let engine = {
            let metrics = metrics.clone();
            std::thread::spawn(move || {
                metrics.idle(|| {
                    started.send(()).unwrap();
                    woken.recv().unwrap();
                })
            })
        };
        sleeping.recv().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let during = metrics.idle_time();
        assert!(during >= Duration::from_millis(30), "{during:?}");
        let text = metrics.render();
        let rendered: f64 = text
            .lines()
            .find_map(|line| line.strip_prefix("isobench_engine_idle_seconds_total "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rendered >= 0.03, "{text}");
        wake.send(()).unwrap();
        engine.join().unwrap();
        // Once the sleep ended, the engine's time awake adds nothing.
        let after = metrics.idle_time();
        assert!(after >= during);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(metrics.idle_time(), after);
    }

    #[test]
    fn forwards_count_graph_replays_apart_from_eager_steps() {
        let metrics = Metrics::default();
        metrics.observe_forward(StepPhase::Prefill, 300, false, None);
        metrics.observe_forward(StepPhase::Decode, 4, true, Some(Duration::from_micros(700)));
        metrics.observe_forward(StepPhase::Decode, 4, true, Some(Duration::from_micros(700)));
        let text = metrics.render();
        assert!(
            text.contains("isobench_cuda_graph_replays_total 2\n"),
            "{text}"
        );
        assert!(text.contains("isobench_eager_steps_total 1\n"));
        assert!(text.contains("isobench_step_tokens_sum 308\n"));
        assert!(text.contains("isobench_step_tokens_bucket{le=\"4\"} 2\n"));
        assert!(
            text.contains(
                "isobench_step_device_seconds_bucket{phase=\"decode\",le=\"0.00075\"} 2\n"
            )
        );
        assert!(text.contains("isobench_step_device_seconds_count{phase=\"prefill\"} 0\n"));
        assert!(!text.contains("isobench_gpu_"), "no GPU described: {text}");
    }
}
