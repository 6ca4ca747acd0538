//! The pacing thread: the one place that decides when each request goes.
//!
//! A preparing thread ([`prepare_ahead`]) runs ahead of it: it draws the
//! planned requests (prompt synthesis can cost a tokenizer pass) and has
//! the backend serialize them, keeping up to [`LOOKAHEAD`] batches ready.
//! Batches grow from one request to [`MAX_BATCH`], so the first requests
//! go out at once and later ones cost the two threads one hand-over per
//! batch rather than one per request. The run's clock starts only once the
//! first wave is ready (`prime` requests: a closed loop's whole
//! concurrency, all scheduled at zero), so the time it takes to prepare
//! them is not counted as the client's dispatch lag. The pacer
//! takes them in plan order, waits for the instant ([`wait_until`]) when
//! the plan gives one, waits for a free slot when concurrency is capped,
//! then hands the request to the least-loaded worker.
//! Open loop, capped open loop and closed loop are the same loop: a closed
//! loop is a plan without offsets and a cap of N slots, and its scheduled
//! time is the moment the slot became free.
//!
//! It stops at the end of the plan, after `max_requests` measured requests,
//! at the run's `duration`, or when the run is cancelled.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use isobench_common::precise::tighten_timer_slack;
use isobench_metrics::RequestRecord;
use isobench_workload::PlannedRequest;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::StopReason;
use super::worker::{Job, WorkerLink};
use crate::clock::wait_until;
use crate::progress::LiveCounters;
use crate::{Backend, Clock, LoadgenError};

/// How often a blocked pacer looks at the stop conditions.
const STOP_POLL: Duration = Duration::from_millis(5);

/// Room for more content events than `max_tokens` is never preallocated
/// beyond this, whatever a workload asks.
const MAX_PREALLOCATED_EVENTS: u32 = 1 << 16;

/// Batches prepared ahead of the pacer at most.
const LOOKAHEAD: usize = 16;

/// The most requests handed over at once.
const MAX_BATCH: usize = 64;

/// A planned request, drawn and serialized, waiting for its turn.
pub(super) struct Ready<P> {
    index: u64,
    warmup: bool,
    offset_ns: Option<u64>,
    input_tokens: u32,
    max_tokens: u32,
    prepared: P,
}

/// Starts the thread that draws and prepares requests ahead of the pacer.
/// It stops at the plan's end or when the pacer drops the receiver.
///
/// Returns once the first `prime` requests are ready, or the plan is
/// exhausted, or the lookahead is full, or `cancel` fires, whichever
/// comes first.
pub(super) async fn prepare_ahead<B: Backend>(
    backend: Arc<B>,
    requests: Box<dyn Iterator<Item = PlannedRequest> + Send>,
    prime: usize,
    cancel: &CancellationToken,
) -> std::io::Result<Receiver<Vec<Ready<B::Prepared>>>> {
    let (sender, receiver) = sync_channel(LOOKAHEAD);
    let (primed_sender, primed) = oneshot::channel();
    std::thread::Builder::new()
        .name("isobench-prepare".into())
        .spawn(move || {
            let primed = Primed {
                after: prime,
                signal: Some(primed_sender),
            };
            prepare_all(&*backend, requests, &sender, primed);
        })?;
    // A message, or the thread's end (a dropped sender), both mean go.
    tokio::select! {
        _ = primed => {}
        () = cancel.cancelled() => {}
    }
    Ok(receiver)
}

/// Says once that the first wave is ready.
struct Primed {
    /// Requests to prepare before saying so.
    after: usize,
    signal: Option<oneshot::Sender<()>>,
}

impl Primed {
    fn tell(&mut self) {
        if let Some(signal) = self.signal.take() {
            let _ = signal.send(());
        }
    }
}

fn prepare_all<B: Backend>(
    backend: &B,
    mut requests: Box<dyn Iterator<Item = PlannedRequest> + Send>,
    ready: &SyncSender<Vec<Ready<B::Prepared>>>,
    mut primed: Primed,
) {
    let mut batch_size = 1;
    let mut prepared = 0usize;
    loop {
        let batch: Vec<_> = requests
            .by_ref()
            .take(batch_size)
            .map(|planned| Ready {
                index: planned.index,
                warmup: planned.warmup,
                offset_ns: planned.offset.map(super::duration_ns),
                input_tokens: planned.input_tokens,
                max_tokens: planned.max_tokens,
                prepared: backend.prepare(&planned),
            })
            .collect();
        let last = batch.len() < batch_size;
        prepared += batch.len();
        if !batch.is_empty() {
            let sent = match ready.try_send(batch) {
                Ok(()) => true,
                Err(TrySendError::Full(batch)) => {
                    // The lookahead is full: the pacer can start.
                    primed.tell();
                    ready.send(batch).is_ok()
                }
                Err(TrySendError::Disconnected(_)) => false,
            };
            if !sent {
                return;
            }
        }
        if prepared >= primed.after {
            primed.tell();
        }
        if last {
            return;
        }
        batch_size = (batch_size * 2).min(MAX_BATCH);
    }
}

pub(super) struct Pacer<P> {
    /// Batches of prepared requests, in plan order.
    pub ready: Receiver<Vec<Ready<P>>>,
    pub max_requests: Option<u64>,
    pub duration_ns: Option<u64>,
    pub clock: Clock,
    /// Stop sending (Ctrl-C, or the run being dropped).
    pub cancel: CancellationToken,
    /// Free concurrency slots, each stamped with when it became free.
    pub slots: Option<Receiver<u64>>,
    pub workers: Vec<WorkerLink<P>>,
    pub live: Arc<LiveCounters>,
}

impl<P: Send + 'static> Pacer<P> {
    /// Starts the pacing thread; the receiver gets why it stopped.
    pub fn spawn(self) -> Result<oneshot::Receiver<StopReason>, LoadgenError> {
        let (done_sender, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("isobench-pacer".into())
            .spawn(move || {
                tighten_timer_slack();
                let _ = done_sender.send(self.run());
            })
            .map_err(|_| LoadgenError::Thread("pacer"))?;
        Ok(done)
    }

    /// Dispatches the plan; returns why it stopped.
    pub fn run(self) -> StopReason {
        let mut measured = 0u64;
        let mut next_worker = 0usize;
        let mut batch = Vec::new().into_iter();
        loop {
            if self.max_requests.is_some_and(|max| measured >= max) {
                return StopReason::MaxRequests;
            }
            let next = match batch.next() {
                Some(next) => next,
                // Ends with the plan (or if the preparing thread died).
                None => match self.ready.recv() {
                    Ok(next_batch) => {
                        batch = next_batch.into_iter();
                        continue;
                    }
                    Err(_) => return StopReason::PlanEnd,
                },
            };
            let offset_ns = next.offset_ns;
            if let (Some(offset), Some(end)) = (offset_ns, self.duration_ns)
                && offset >= end
            {
                return StopReason::Duration;
            }

            if let Some(offset) = offset_ns
                && !wait_until(&self.clock, offset, &|| self.cancel.is_cancelled())
            {
                return StopReason::Cancelled;
            }
            let freed_ns = match self.take_slot() {
                Ok(freed) => freed,
                Err(stop) => return stop,
            };
            if self.cancel.is_cancelled() {
                return StopReason::Cancelled;
            }
            if self
                .duration_ns
                .is_some_and(|end| self.clock.now_ns() >= end)
            {
                return StopReason::Duration;
            }
            let scheduled_ns = offset_ns
                .or(freed_ns)
                .unwrap_or_else(|| self.clock.now_ns());

            let expected = next.max_tokens.min(MAX_PREALLOCATED_EVENTS) as usize + 1;
            let mut record = RequestRecord::new(next.index, next.warmup, scheduled_ns, expected);
            record.input_tokens = next.input_tokens;
            if !next.warmup {
                measured += 1;
            }
            let job = Job {
                prepared: next.prepared,
                record,
            };
            next_worker = self.dispatch(job, next_worker);
        }
    }

    /// Waits for a concurrency slot when the load is capped; returns when
    /// the slot became free.
    fn take_slot(&self) -> Result<Option<u64>, StopReason> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        loop {
            match slots.recv_timeout(STOP_POLL) {
                Ok(freed_ns) => return Ok(Some(freed_ns)),
                Err(RecvTimeoutError::Timeout) => {
                    if self.cancel.is_cancelled() {
                        return Err(StopReason::Cancelled);
                    }
                    if self
                        .duration_ns
                        .is_some_and(|end| self.clock.now_ns() >= end)
                    {
                        return Err(StopReason::Duration);
                    }
                }
                // Every worker is gone: nothing can be sent any more.
                Err(RecvTimeoutError::Disconnected) => return Err(StopReason::Cancelled),
            }
        }
    }

    /// Hands `job` to the worker with the fewest requests in flight,
    /// starting the search after the last one used so that ties rotate.
    fn dispatch(&self, job: Job<P>, start: usize) -> usize {
        let count = self.workers.len();
        let chosen = (0..count)
            .map(|i| (start + i) % count)
            .min_by_key(|&i| self.workers[i].in_flight.load(Ordering::Relaxed))
            .unwrap_or(0);
        let link = &self.workers[chosen];
        link.in_flight.fetch_add(1, Ordering::Relaxed);
        self.live.on_sent();
        link.send(job);
        (chosen + 1) % count
    }
}
