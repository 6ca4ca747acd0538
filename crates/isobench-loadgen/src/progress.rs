//! Live progress: a terminal bar (indicatif) or plain periodic lines.
//!
//! The engine only bumps atomic counters ([`LiveCounters`]); a separate task
//! reads them a few times a second and draws. Nothing here is on the
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
        clock: Clock,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = match mode {
            ProgressMode::Off => None,
            ProgressMode::Bar => Some(tokio::spawn(draw_bar(
                shape.clone(),
                live,
                clock,
                stop.clone(),
            ))),
            ProgressMode::Lines => Some(tokio::spawn(print_lines(live, clock, stop.clone()))),
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
            "| {:.1} req/s | in flight {} | errors {}",
            meter.rate(now.sent, clock.now_ns()),
            now.in_flight(),
            now.failed
        ));
    }
    bar.finish_and_clear();
}

async fn print_lines(live: Arc<LiveCounters>, clock: Clock, stop: CancellationToken) {
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
            "isobench: {elapsed:.0} s, {} sent, {} finished, {} in flight, {} errors, {:.1} req/s",
            now.sent,
            now.finished,
            now.in_flight(),
            now.failed,
            meter.rate(now.sent, clock.now_ns())
        );
    }
}
