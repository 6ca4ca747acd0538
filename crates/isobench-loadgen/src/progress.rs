//! Live progress: a terminal bar (indicatif) or plain periodic lines.
//!
//! The engine only bumps atomic counters ([`LiveCounters`]: requests sent
//! and finished, and a coarse TTFT histogram of atomic buckets); a
//! separate task reads them a few times a second and draws the achieved
//! send rate, the requests in flight, the running p50 and p99 TTFT and,
//! when the endpoint's metrics are scraped, the server's queue (a
//! [`LiveGauge`] the scraper sets). Nothing here allocates or locks on the
//! request path.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use isobench_metrics::{ErrorKind, RequestRecord};
use isobench_workload::LoadShape;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Clock;

/// How the run shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar on stderr, redrawn ten times a second.
    Bar,
    /// A plain line on stderr every few seconds (`--quiet`, or not a terminal).
    Lines,
    /// Nothing (tests, benchmarks, embedding).
    Off,
}

impl ProgressMode {
    /// A bar when stderr is a terminal and `quiet` is not set; lines otherwise.
    pub fn detect(quiet: bool) -> Self {
        if !quiet && std::io::stderr().is_terminal() {
            ProgressMode::Bar
        } else {
            ProgressMode::Lines
        }
    }
}

/// Counters the engine bumps as requests go and finish (warm-ups included).
#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    sent: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    ttft: TtftBuckets,
}

impl LiveCounters {
    pub fn on_sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    pub fn on_finished(&self, record: &RequestRecord) {
        let counter = match &record.error {
            None => &self.completed,
            Some(error) if error.kind == ErrorKind::Cancelled => &self.cancelled,
            Some(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if record.error.is_none()
            && let Some(ttft) = record.ttft_ns()
        {
            self.ttft.record(ttft);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let completed = self.completed.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let cancelled = self.cancelled.load(Ordering::Relaxed);
        let sent = self.sent.load(Ordering::Relaxed);
        Snapshot {
            sent,
            finished: completed + failed + cancelled,
            failed,
        }
    }
}

/// Log-spaced TTFT buckets, 4% wide, from 10 µs to beyond 1000 s: a
/// running p50/p99 for the display, never a reported figure (those come
/// from the recorders' HDR histograms).
#[derive(Debug)]
struct TtftBuckets([AtomicU64; TTFT_BUCKETS]);

const TTFT_BUCKETS: usize = 480;
const TTFT_GROWTH: f64 = 1.04;
const TTFT_FIRST_US: f64 = 10.0;

impl Default for TtftBuckets {
    fn default() -> Self {
        Self(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl TtftBuckets {
    fn record(&self, ttft_ns: u64) {
        let us = (ttft_ns as f64 / 1e3).max(TTFT_FIRST_US);
        let bucket = ((us / TTFT_FIRST_US).ln() / TTFT_GROWTH.ln()) as usize;
        self.0[bucket.min(TTFT_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// The upper bounds of the buckets holding the q-quantiles, in ms;
    /// `None` before the first TTFT.
    fn quantiles_ms<const N: usize>(&self, qs: [f64; N]) -> Option<[f64; N]> {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        Some(qs.map(|q| {
            let rank = ((q * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            let bucket = counts
                .iter()
                .position(|&c| {
                    seen += c;
                    seen >= rank
                })
                .unwrap_or(TTFT_BUCKETS - 1);
            TTFT_FIRST_US * TTFT_GROWTH.powi(bucket as i32 + 1) / 1e3
        }))
    }
}

/// A number the scraper sets and the display reads: the server's queue.
/// Clones share it; unset until the first scrape that reported one.
#[derive(Debug, Clone)]
pub struct LiveGauge(Arc<AtomicU64>);

impl Default for LiveGauge {
    fn default() -> Self {
        Self(Arc::new(AtomicU64::new(f64::NAN.to_bits())))
    }
}

impl LiveGauge {
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<f64> {
        let value = f64::from_bits(self.0.load(Ordering::Relaxed));
        (!value.is_nan()).then_some(value)
    }
}

/// The live figures after the counts: TTFT so far and the server's queue.
fn live_figures(live: &LiveCounters, server_queue: Option<&LiveGauge>) -> String {
    let mut text = String::new();
    if let Some([p50, p99]) = live.ttft.quantiles_ms([0.5, 0.99]) {
        text.push_str(&format!(" | TTFT p50 {p50:.0} ms p99 {p99:.0} ms"));
    }
    if let Some(waiting) = server_queue.and_then(LiveGauge::get) {
        text.push_str(&format!(" | server queue {waiting:.0}"));
    }
    text
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    sent: u64,
    finished: u64,
    failed: u64,
}

impl Snapshot {
    fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.finished)
    }
}

/// Nothing is drawn for runs shorter than this.
const BAR_DELAY: Duration = Duration::from_millis(500);
const BAR_PERIOD: Duration = Duration::from_millis(100);
const LINE_PERIOD: Duration = Duration::from_secs(5);

/// The running display; [`Progress::finish`] clears it.
pub(crate) struct Progress {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Progress {
    pub fn start(
        mode: ProgressMode,
        shape: &LoadShape,
        live: Arc<LiveCounters>,
        server_queue: Option<LiveGauge>,
        clock: Clock,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = match mode {
            ProgressMode::Off => None,
            ProgressMode::Bar => Some(tokio::spawn(draw_bar(
                shape.clone(),
                live,
                server_queue,
                clock,
                stop.clone(),
            ))),
            ProgressMode::Lines => Some(tokio::spawn(print_lines(
                live,
                server_queue,
                clock,
                stop.clone(),
            ))),
        };
        Self { stop, task }
    }

    pub async fn finish(self) {
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// Request rate over the last display period.
struct RateMeter {
    last_sent: u64,
    last_ns: u64,
}

impl RateMeter {
    fn rate(&mut self, sent: u64, now_ns: u64) -> f64 {
        let elapsed = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        let rate = if elapsed > 0.0 {
            (sent - self.last_sent) as f64 / elapsed
        } else {
            0.0
        };
        (self.last_sent, self.last_ns) = (sent, now_ns);
        rate
    }
}

async fn draw_bar(
    shape: LoadShape,
    live: Arc<LiveCounters>,
    server_queue: Option<LiveGauge>,
    clock: Clock,
    stop: CancellationToken,
) {
    tokio::select! {
        () = tokio::time::sleep(BAR_DELAY) => {}
        () = stop.cancelled() => return,
    }
    let total = shape.max_requests.map(|n| n + shape.warmup);
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = if total.is_some() {
        "{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}"
    } else {
        "{elapsed_precise} {spinner} {pos} sent {msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut meter = RateMeter {
        last_sent: 0,
        last_ns: clock.now_ns(),
    };
    let mut ticker = tokio::time::interval(BAR_PERIOD);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => break,
        }
        let now = live.snapshot();
        bar.set_position(now.sent);
        bar.set_message(format!(
            "| {:.1} req/s | in flight {}{} | errors {}",
            meter.rate(now.sent, clock.now_ns()),
            now.in_flight(),
            live_figures(&live, server_queue.as_ref()),
            now.failed
        ));
    }
    bar.finish_and_clear();
}

async fn print_lines(
    live: Arc<LiveCounters>,
    server_queue: Option<LiveGauge>,
    clock: Clock,
    stop: CancellationToken,
) {
    let mut meter = RateMeter {
        last_sent: 0,
        last_ns: clock.now_ns(),
    };
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + LINE_PERIOD, LINE_PERIOD);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => break,
        }
        let now = live.snapshot();
        let elapsed = clock.now_ns() as f64 / 1e9;
        eprintln!(
            "isobench: {elapsed:.0} s, {} sent, {} finished, {} errors | {:.1} req/s | in flight {}{}",
            now.sent,
            now.finished,
            now.failed,
            meter.rate(now.sent, clock.now_ns()),
            now.in_flight(),
            live_figures(&live, server_queue.as_ref())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_ttft_quantiles_are_within_a_bucket_of_the_truth() {
        let live = LiveCounters::default();
        assert_eq!(live_figures(&live, None), "");
        for ms in 1..=100u64 {
            let mut record = RequestRecord::new(ms, false, 0, 1);
            record.content_event_ns.push(ms * 1_000_000);
            record.end_ns = ms * 1_000_000;
            live.on_finished(&record);
        }
        let [p50, p99] = live.ttft.quantiles_ms([0.5, 0.99]).unwrap();
        assert!((50.0..=50.0 * TTFT_GROWTH).contains(&p50), "{p50}");
        assert!((99.0..=99.0 * TTFT_GROWTH).contains(&p99), "{p99}");
        let queue = LiveGauge::default();
        assert_eq!(queue.get(), None);
        queue.clone().set(7.0);
        let text = live_figures(&live, Some(&queue));
        assert!(
            text.contains("TTFT p50 5") && text.ends_with("server queue 7"),
            "{text}"
        );
    }
}
