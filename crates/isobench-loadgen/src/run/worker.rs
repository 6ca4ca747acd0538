//! Workers: async tasks that send the requests the pacer hands them, each
//! with its own [`Recorder`], handed back once at the end.
//!
//! A worker keeps its requests in flight in one `FuturesUnordered`, so a
//! finished request is recorded by the task that owns the recorder: no lock
//! or channel between a response and its statistics. Per finished request
//! it touches a few atomic counters (progress), returns a concurrency slot
//! when the load is capped, and moves the record to the record sink (log and samples).
//!
//! Cancellation is a flag the request futures check each time they are
//! polled (an atomic load, no lock): on [`Msg::Stop`] the worker sets it and
//! polls each request once more, which then ends as
//! [`ErrorKind::Cancelled`] with what it had received.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::Poll;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use isobench_metrics::{ErrorKind, Recorder, RequestRecord};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::backend::fail;
use crate::progress::LiveCounters;
use crate::{Backend, Clock};

/// A prepared request and its record, scheduled time already set.
pub(super) struct Job<P> {
    pub prepared: P,
    pub record: RequestRecord,
}

pub(super) enum Msg<P> {
    /// Send this request now.
    Send(Job<P>),
    /// No more requests will come: finish those in flight, then return.
    Close,
    /// Cancel every request in flight now.
    Stop,
}

/// The pacer's and the run's handle on one worker.
pub(super) struct WorkerLink<P> {
    sender: UnboundedSender<Msg<P>>,
    /// Requests handed to the worker and not finished yet.
    pub in_flight: Arc<AtomicUsize>,
}

impl<P> Clone for WorkerLink<P> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            in_flight: Arc::clone(&self.in_flight),
        }
    }
}

impl<P> WorkerLink<P> {
    pub fn send(&self, job: Job<P>) {
        // A worker only stops receiving after the run told it to.
        let _ = self.sender.send(Msg::Send(job));
    }

    pub fn close(&self) {
        let _ = self.sender.send(Msg::Close);
    }

    pub fn stop(&self) {
        let _ = self.sender.send(Msg::Stop);
    }
}

/// Where a worker puts what it finished, besides its recorder.
pub(super) struct Sinks {
    pub live: Arc<LiveCounters>,
    /// Returns a concurrency slot, stamped with when it became free.
    pub slots: Option<mpsc::Sender<u64>>,
    /// The record sink: the per-request log and the samples.
    pub log: mpsc::Sender<RequestRecord>,
}

/// Starts one worker task on the current runtime, recording into `recorder`.
pub(super) fn spawn<B: Backend>(
    backend: Arc<B>,
    clock: Clock,
    recorder: Recorder,
    sinks: Sinks,
) -> (WorkerLink<B::Prepared>, tokio::task::JoinHandle<Recorder>) {
    let (sender, receiver) = unbounded_channel();
    let link = WorkerLink {
        sender,
        in_flight: Arc::new(AtomicUsize::new(0)),
    };
    let in_flight = Arc::clone(&link.in_flight);
    let handle = tokio::spawn(work(backend, clock, receiver, in_flight, sinks, recorder));
    (link, handle)
}

async fn work<B: Backend>(
    backend: Arc<B>,
    clock: Clock,
    mut receiver: UnboundedReceiver<Msg<B::Prepared>>,
    in_flight_count: Arc<AtomicUsize>,
    sinks: Sinks,
    mut recorder: Recorder,
) -> Recorder {
    let stop = Arc::new(AtomicBool::new(false));
    let mut in_flight = FuturesUnordered::new();
    let mut receiving = true;
    let mut closing = false;
    let mut finish = |record: RequestRecord| {
        recorder.record(&record);
        sinks.live.on_finished(&record);
        in_flight_count.fetch_sub(1, Ordering::Relaxed);
        if let Some(slots) = &sinks.slots {
            let _ = slots.send(record.end_ns);
        }
        let _ = sinks.log.send(record);
    };
    loop {
        if (closing || !receiving) && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            message = receiver.recv(), if receiving => match message {
                Some(Msg::Send(job)) => {
                    let request = execute(Arc::clone(&backend), job, clock, Arc::clone(&stop));
                    in_flight.push(Box::pin(request));
                }
                Some(Msg::Close) => closing = true,
                Some(Msg::Stop) => {
                    stop.store(true, Ordering::Relaxed);
                    for request in std::mem::take(&mut in_flight) {
                        // With the flag set, one poll ends every request.
                        if let Some(record) = request.now_or_never() {
                            finish(record);
                        }
                    }
                    closing = true;
                }
                None => receiving = false,
            },
            Some(record) = in_flight.next(), if !in_flight.is_empty() => finish(record),
        }
    }
    recorder
}

/// Sends one request; ends early, as cancelled, once `stop` is set.
async fn execute<B: Backend>(
    backend: Arc<B>,
    job: Job<B::Prepared>,
    clock: Clock,
    stop: Arc<AtomicBool>,
) -> RequestRecord {
    let mut record = job.record;
    let completed = {
        let mut send = pin!(backend.send(job.prepared, clock, &mut record));
        poll_fn(|cx| {
            if stop.load(Ordering::Relaxed) {
                return Poll::Ready(false);
            }
            send.as_mut().poll(cx).map(|()| true)
        })
        .await
    };
    if !completed {
        let message = "the run stopped before the answer was complete";
        fail(&mut record, ErrorKind::Cancelled, message, clock.now_ns());
    }
    record
}
