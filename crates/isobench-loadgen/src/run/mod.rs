//! The scheduler: replays a [`Plan`] through a [`Backend`] and returns what
//! happened.
//!
//! Three parts, joined by channels: the pacing thread ([`pacer`]) decides
//! when each request goes and stops at the plan's end, `max_requests`,
//! `duration` or cancellation; the workers ([`worker`]) send and record; the
//! request log and the progress display watch from the side. The same code
//! runs every load shape: schedule (offsets or free slots) x backend x stop
//! condition.
//!
//! Ending a run: when sending stops because of `duration` or cancellation,
//! requests in flight get [`RunOptions::drain_timeout`] to finish; those
//! still running then are cancelled and recorded as
//! [`ErrorKind::Cancelled`](isobench_metrics::ErrorKind::Cancelled), counted
//! apart from failures: the run cut them, not the server. When the plan
//! simply ends, every request runs to completion (each is bounded by the
//! backend's timeout) unless the run is cancelled meanwhile.

mod pacer;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isobench_metrics::{Recorder, RequestCounts, RequestRecord, Samples, Sending};
use isobench_workload::{LoadShape, Plan, PromptTokens};
use tokio_util::sync::CancellationToken;

use crate::progress::{LiveCounters, LiveGauge, Progress, ProgressMode};
use crate::request_log::RequestLog;
use crate::{Backend, Clock, LoadgenError};
use pacer::Pacer;
use worker::Sinks;

/// How to run a plan, besides what the plan itself says.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Default: [`ProgressMode::Off`].
    pub progress: ProgressMode,
    /// Where to stream the per-request JSONL log; none by default.
    pub jsonl: Option<PathBuf>,
    /// How long requests in flight may finish once sending stopped for the
    /// duration's end or a cancellation. Default: 10 s.
    pub drain_timeout: Duration,
    /// Trigger it (on Ctrl-C) to stop sending and end the run early.
    pub cancel: CancellationToken,
    /// Worker tasks; default: one per thread of the current runtime.
    pub workers: Option<usize>,
    /// An empty recorder each worker starts from (a clone each), e.g.
    /// [`Recorder::with_slos`] for goodput. Default: [`Recorder::new`].
    pub recorder: Recorder,
    /// Keep every measured request's whole record in
    /// [`RunOutcome::records`] (for a steady-state summary afterwards);
    /// costs memory in proportion to the tokens received. Default: off.
    pub keep_records: bool,
    /// The server's queue, set by a scraper, shown by the progress display.
    pub server_queue: Option<LiveGauge>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            progress: ProgressMode::Off,
            jsonl: None,
            drain_timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
            workers: None,
            recorder: Recorder::new(),
            keep_records: false,
            server_queue: None,
        }
    }
}

/// Why sending stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Every planned request was sent.
    PlanEnd,
    /// `max_requests` measured requests were sent.
    MaxRequests,
    /// The run's duration was reached.
    Duration,
    /// The run was cancelled (Ctrl-C).
    Cancelled,
}

/// What a run produced. Times are nanoseconds on the run's clock.
///
/// Counts, the measured window and the send rates are all derived from the
/// merged [`Recorder`], the one record of what happened.
#[derive(Debug)]
pub struct RunOutcome {
    /// Every worker's recorder, merged.
    pub recorder: Recorder,
    pub shape: LoadShape,
    pub prompt_tokens: PromptTokens,
    /// The run's zero: every record's times count from it.
    pub started: Instant,
    /// From the start to the end of the last request.
    pub elapsed: Duration,
    /// The arrival process's mean rate, req/s (open loop only).
    pub offered_rate: Option<f64>,
    pub stop: StopReason,
    /// Whether the run was cancelled (Ctrl-C) before its natural end.
    pub interrupted: bool,
    /// Lines in the per-request log.
    pub logged: u64,
    /// Every measured request's sample, in the order they finished.
    pub samples: Samples,
    /// Every measured request's record, with [`RunOptions::keep_records`];
    /// empty otherwise.
    pub records: Vec<RequestRecord>,
}

impl RunOutcome {
    /// Requests by outcome; `measured` is every measured request sent.
    pub fn counts(&self) -> RequestCounts {
        self.recorder.counts()
    }

    /// When the measured requests were scheduled and sent, with the
    /// achieved and scheduled send rates: (n - 1) / span, for n >= 2.
    pub fn sending(&self) -> Sending {
        self.recorder.sending()
    }

    /// The measured window: first measured send to last measured end.
    pub fn window(&self) -> Option<(u64, u64)> {
        self.recorder.measured_window()
    }

    /// The measured window's length.
    pub fn window_duration(&self) -> Duration {
        self.recorder.measured_span().unwrap_or(Duration::ZERO)
    }

    /// Whether the client kept pace with its own schedule: achieved over
    /// scheduled rate (1.0 = on time), for open loops of two or more
    /// requests. The scheduled rate differs from `offered_rate` by the
    /// arrival process's sampling.
    pub fn pace_ratio(&self) -> Option<f64> {
        self.offered_rate?;
        let sending = self.sending();
        Some(sending.achieved_send_rate? / sending.scheduled_send_rate?)
    }
}

/// Replays `plan` through `backend`. Must run inside a tokio runtime; the
/// pacing runs on its own OS thread, the requests on the runtime. To end a
/// run early, trigger [`RunOptions::cancel`] and await the outcome; dropping
/// the future instead stops sending but loses the outcome.
pub async fn run<B: Backend>(
    plan: Plan,
    backend: Arc<B>,
    options: RunOptions,
) -> Result<RunOutcome, LoadgenError> {
    let log = RequestLog::create(options.jsonl.as_deref(), options.keep_records)?;
    let worker_count = options
        .workers
        .unwrap_or_else(|| tokio::runtime::Handle::current().metrics().num_workers())
        .max(1);
    let live = Arc::new(LiveCounters::default());
    let (slot_sender, slots) = concurrency_slots(plan.shape.max_concurrency);

    // The clock starts once the first wave is prepared: a closed loop's
    // whole concurrency is scheduled at zero, and preparing it (a tokenizer
    // pass per prompt) is not the client falling behind its schedule.
    let first_wave = plan.shape.max_concurrency.unwrap_or(1);
    let ready = pacer::prepare_ahead(
        Arc::clone(&backend),
        plan.requests,
        first_wave,
        &options.cancel,
    )
    .await
    .map_err(|_| LoadgenError::Thread("preparing"))?;
    let clock = Clock::start_now();
    let (links, handles): (Vec<_>, Vec<_>) = (0..worker_count)
        .map(|_| {
            let sinks = Sinks {
                live: Arc::clone(&live),
                slots: slot_sender.clone(),
                log: log.sender(),
            };
            worker::spawn(Arc::clone(&backend), clock, options.recorder.clone(), sinks)
        })
        .unzip();
    drop(slot_sender);
    let progress = Progress::start(
        options.progress,
        &plan.shape,
        Arc::clone(&live),
        options.server_queue.clone(),
        clock,
    );

    // Stops the pacer if this future is dropped before the run ends.
    let pacer_stop = options.cancel.child_token();
    let _stop_pacer_on_drop = pacer_stop.clone().drop_guard();
    let pacer = Pacer {
        ready,
        max_requests: plan.shape.max_requests,
        duration_ns: plan.shape.duration.map(duration_ns),
        clock,
        cancel: pacer_stop,
        slots,
        workers: links.clone(),
        live,
    };
    let stop = pacer
        .spawn()?
        .await
        .map_err(|_| LoadgenError::Thread("pacer"))?;
    for link in &links {
        link.close();
    }

    let outputs = finish_workers(handles, &links, stop, &options).await?;
    let elapsed = Duration::from_nanos(clock.now_ns());
    progress.finish().await;
    let kept = log.finish()?;

    let mut recorder = options.recorder.clone();
    for output in &outputs {
        recorder.merge(output);
    }
    Ok(RunOutcome {
        recorder,
        offered_rate: plan.shape.offered_rate,
        shape: plan.shape,
        prompt_tokens: plan.prompt_tokens,
        started: clock.start(),
        elapsed,
        stop,
        interrupted: options.cancel.is_cancelled(),
        logged: kept.logged,
        samples: kept.samples,
        records: kept.records,
    })
}

/// The concurrency slots of a capped load: a channel holding one token per
/// free slot, each stamped with when the slot became free.
fn concurrency_slots(
    limit: Option<usize>,
) -> (
    Option<std::sync::mpsc::Sender<u64>>,
    Option<std::sync::mpsc::Receiver<u64>>,
) {
    let Some(limit) = limit else {
        return (None, None);
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    for _ in 0..limit.max(1) {
        let _ = sender.send(0);
    }
    (Some(sender), Some(receiver))
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Waits for the workers to finish what is in flight, cancelling it after
/// the drain timeout when the run was cut (by its duration or by `cancel`).
async fn finish_workers<P>(
    handles: Vec<tokio::task::JoinHandle<Recorder>>,
    links: &[worker::WorkerLink<P>],
    stop: StopReason,
    options: &RunOptions,
) -> Result<Vec<Recorder>, LoadgenError> {
    let joined = futures_util::future::join_all(handles);
    tokio::pin!(joined);
    let drain_expired = async {
        if !matches!(stop, StopReason::Duration | StopReason::Cancelled) {
            options.cancel.cancelled().await;
        }
        tokio::time::sleep(options.drain_timeout).await;
    };
    let results = tokio::select! {
        results = &mut joined => results,
        () = drain_expired => {
            for link in links {
                link.stop();
            }
            joined.await
        }
    };
    results
        .into_iter()
        .map(|result| result.map_err(|_| LoadgenError::Thread("worker")))
        .collect()
}
