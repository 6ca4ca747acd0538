//! The engine loop: one OS thread that owns the model, the KV cache and the
//! scheduler [`State`] (with its block pool), and runs steps back to back.
//!
//! HTTP handlers reach it through an [`EngineHandle`]: `submit` takes a
//! slot in the bounded waiting queue (or answers 429), sends the
//! [`ValidRequest`] over an mpsc channel, and returns the receiver of that
//! request's [`Event`]s: text as it is generated (detokenized incrementally,
//! never half a UTF-8 character, held back while it could be the start of a
//! stop string), then one `Finished` or `Failed`.
//!
//! Each loop turn takes new requests, drops sequences whose client went
//! away (their event receiver is closed; their blocks are freed by the
//! drop), plans a step, runs the model on it, samples one token for every
//! sequence whose step reached its last token, and retires finished ones.
//! The text of a step's tokens and the events that carry it are made and
//! sent as its [`EventTiming`] says: on a GPU once the next step's kernels
//! are launched if it replays a graph (before it otherwise: eager
//! launches take milliseconds), so that the GPU does not idle while the
//! engine detokenizes and wakes every request's handler; on the CPU, where
//! a forward returns only when it is computed, at the end of the step.
//! Only a token that may finish its sequence (the end of text, its last
//! allowed token, or any token of a request with stop strings) has its
//! text made at once, so that a finished sequence never takes a row in the
//! next step.
//! With nothing to do the thread sleeps in `recv` (or until the dynamic
//! policy's deadline), counted as the engine's idle time in the
//! [`Metrics`]. It exits once every handle is dropped and the last
//! sequence is done, or at its next turn after [`EngineHandle::stop`].
//!
//! Each model step is recorded in the [`Metrics`]: host-clock phase times,
//! its sequences and tokens, and from the model's `last_step()` whether it
//! replayed a CUDA graph and its GPU time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use isobench_api::{FinishReason, Usage};
use isobench_model::{CausalLm, HostBuffer, IncrementalDecoder, KvCache, Tokenizer};
use rayon::prelude::*;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::error::ServerError;
use crate::metrics::{Metrics, StepPhase};
use crate::outbox::{EventTiming, Outbox, SendAt};
use crate::sampler::Sampler;
use crate::scheduler::{Schedule, Sequence, State, StepSummary};
use crate::step_logits::{RandomRows, RowLogits, StepLogits};
use crate::stop::{StopMatcher, StopOutcome};
use crate::validate::ValidRequest;

/// The longest the engine sleeps on a timer (dynamic batching's
/// `max_wait`) before it checks whether it was stopped.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// What the engine tells a request's handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Newly generated text; `completion_tokens` counts the tokens generated
    /// so far.
    Text {
        text: String,
        completion_tokens: u32,
    },
    Finished {
        reason: FinishReason,
        usage: Usage,
    },
    Failed {
        message: String,
    },
}

/// Requests queued for admission, bounded by `--max-waiting`.
#[derive(Debug)]
struct AdmissionQueue {
    queued: AtomicUsize,
    max: usize,
}

/// A place in the waiting queue, given back on drop: when the request
/// starts running, or is dropped while waiting.
#[derive(Debug)]
struct QueuePermit(Arc<AdmissionQueue>);

impl Drop for QueuePermit {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

struct EngineRequest {
    request: ValidRequest,
    arrived: Instant,
    events: UnboundedSender<Event>,
    permit: QueuePermit,
}

/// The handlers' side of the engine; clones share the queue.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    requests: mpsc::Sender<EngineRequest>,
    queue: Arc<AdmissionQueue>,
    /// Cleared when the engine thread ends (normally or by a panic).
    running: Arc<AtomicBool>,
    /// Set by [`EngineHandle::stop`]: the thread ends at its next turn.
    stop: Arc<AtomicBool>,
}

/// Clears the running flag when the engine thread ends, however it ends.
struct RunningGuard(Arc<AtomicBool>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for EngineRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineRequest")
            .field("prompt_tokens", &self.request.prompt_tokens.len())
            .finish_non_exhaustive()
    }
}

impl EngineHandle {
    /// Whether the engine thread is still serving.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Ends the engine thread at its next loop turn, dropping every
    /// sequence (their receivers see the channel close). For shutdown.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Queues a request; its events arrive on the returned receiver.
    /// Dropping the receiver cancels the request.
    pub fn submit(
        &self,
        request: ValidRequest,
        arrived: Instant,
    ) -> Result<UnboundedReceiver<Event>, ServerError> {
        let queued = self.queue.queued.fetch_add(1, Ordering::Relaxed);
        let permit = QueuePermit(self.queue.clone());
        if queued >= self.queue.max {
            return Err(ServerError::QueueFull {
                max_waiting: self.queue.max,
            });
        }
        let (events, receiver) = unbounded_channel();
        self.requests
            .send(EngineRequest {
                request,
                arrived,
                events,
                permit,
            })
            .map_err(|_| ServerError::EngineStopped)?;
        Ok(receiver)
    }
}

/// Everything the engine thread owns.
pub struct Engine {
    pub model: Box<dyn CausalLm>,
    pub cache: KvCache,
    pub tokenizer: Tokenizer,
    pub state: State<Generation>,
    pub metrics: Arc<Metrics>,
    /// Where each step's logits are read on the host, reused.
    pub logits_buffer: HostBuffer,
    /// The last step's events, not sent yet.
    pub outbox: Outbox,
    /// When they leave.
    pub event_timing: EventTiming,
}

/// The engine's per-sequence data.
pub struct Generation {
    events: UnboundedSender<Event>,
    permit: Option<QueuePermit>,
    sampler: Sampler,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    max_tokens: u32,
    ignore_eos: bool,
    last_token_at: Option<Instant>,
    /// Tokens taken whose text is not made yet (see the module docs), each
    /// with the sequence's count of completion tokens at it.
    unsent: Vec<(u32, u32)>,
    finished: bool,
}

/// Starts the engine thread; `max_waiting` bounds the admission queue.
pub fn spawn(
    engine: impl FnOnce() -> Engine + Send + 'static,
    max_waiting: usize,
) -> (EngineHandle, std::thread::JoinHandle<()>) {
    let (requests, inbox) = mpsc::channel();
    let queue = Arc::new(AdmissionQueue {
        queued: AtomicUsize::new(0),
        max: max_waiting,
    });
    let running = Arc::new(AtomicBool::new(true));
    let guard = RunningGuard(running.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("isobench-engine".into())
        .spawn(move || {
            let _guard = guard;
            engine().run(inbox, &stopped);
        })
        .expect("spawning the engine thread");
    (
        EngineHandle {
            requests,
            queue,
            running,
            stop,
        },
        thread,
    )
}

impl Engine {
    fn run(mut self, inbox: mpsc::Receiver<EngineRequest>, stop: &AtomicBool) {
        let mut handles_open = true;
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if self.state.is_idle() {
                self.flush_events();
                if !handles_open {
                    break;
                }
                match self.metrics.idle(|| inbox.recv()) {
                    Ok(request) => self.enqueue(request),
                    Err(_) => break,
                }
            }
            loop {
                match inbox.try_recv() {
                    Ok(request) => self.enqueue(request),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        handles_open = false;
                        break;
                    }
                }
            }
            self.drop_cancelled();
            let started = Instant::now();
            match self.state.schedule(started) {
                Schedule::Step(summary) => {
                    self.metrics
                        .observe_step(StepPhase::Schedule, started.elapsed());
                    self.run_step(summary);
                }
                Schedule::Idle { wake_at } => {
                    self.flush_events();
                    // Requests wait (dynamic batching's timer, or a pool
                    // still held by sequences being dropped): sleep until
                    // the timer or the next arrival.
                    let timeout = wake_at
                        .map_or(Duration::from_millis(5), |at| {
                            at.saturating_duration_since(started)
                        })
                        .min(STOP_CHECK);
                    match self.metrics.idle(|| inbox.recv_timeout(timeout)) {
                        Ok(request) => self.enqueue(request),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => handles_open = false,
                    }
                }
            }
            self.publish_gauges();
        }
        self.flush_events();
        self.publish_gauges();
    }

    fn enqueue(&mut self, request: EngineRequest) {
        let EngineRequest {
            request,
            arrived,
            events,
            permit,
        } = request;
        let generation = Generation {
            events,
            permit: Some(permit),
            sampler: Sampler::new(request.sampling),
            decoder: self.tokenizer.incremental_decoder(true),
            stop: StopMatcher::new(request.stop),
            max_tokens: request.max_tokens,
            ignore_eos: request.ignore_eos,
            last_token_at: None,
            unsent: Vec::new(),
            finished: false,
        };
        self.state
            .push_waiting(Sequence::new(arrived, request.prompt_tokens, generation));
    }

    /// Drops sequences whose client is gone, freeing their blocks.
    fn drop_cancelled(&mut self) {
        let metrics = &self.metrics;
        self.state.retain(|seq| {
            let gone = seq.payload.events.is_closed();
            if gone {
                metrics.count_request("cancelled");
            }
            !gone
        });
    }

    fn run_step(&mut self, summary: StepSummary) {
        let running = self.state.running().len();
        for seq in &mut self.state.running_mut()[running - summary.admitted..] {
            if seq.payload.permit.take().is_some() {
                self.metrics
                    .prompt_tokens_total
                    .fetch_add(seq.num_prompt as u64, Ordering::Relaxed);
            }
        }
        self.metrics
            .preemptions_total
            .fetch_add(summary.preempted as u64, Ordering::Relaxed);
        self.metrics
            .batch_size
            .observe_count(summary.num_seqs as u64);

        let send_at = self.event_timing.send_at(&summary);
        if send_at == SendAt::BeforeStep {
            self.send_events();
        }
        let forward_started = Instant::now();
        let logits = self.model.forward(self.state.batch(), &mut self.cache);
        let phase = if summary.prefill_tokens > 0 {
            StepPhase::Prefill
        } else {
            StepPhase::Decode
        };
        self.metrics.observe_step(phase, forward_started.elapsed());
        if send_at == SendAt::AfterLaunch {
            self.send_events();
        }
        let read_started = Instant::now();
        let mut buffer = std::mem::take(&mut self.logits_buffer);
        let logits = match logits {
            Ok(logits) => {
                let random = self.random_rows(!logits.device().is_cpu());
                StepLogits::read(&logits, random, &mut buffer)
            }
            Err(err) => Err(err),
        };
        self.metrics
            .observe_step(StepPhase::Logits, read_started.elapsed());
        // Only now: reading the step's device time waits for its kernels,
        // which the logits phase above has already waited for.
        let stats = self.model.last_step();
        self.metrics.observe_forward(
            phase,
            (summary.prefill_tokens + summary.decode_tokens) as u64,
            stats.graph_replayed,
            stats.device_time,
        );
        let sample_started = Instant::now();
        match logits {
            Ok(logits) => {
                self.state.finish_step();
                self.sample_rows(&logits);
            }
            Err(err) => self.fail_step(&err.to_string()),
        }
        self.logits_buffer = buffer;
        self.state.retain(|seq| !seq.payload.finished);
        self.metrics
            .observe_step(StepPhase::Sample, sample_started.elapsed());
        if send_at == SendAt::AfterStep {
            self.send_events();
        }
    }

    /// Makes the text of the tokens that wait for it, then sends the
    /// outbox's events, timed as a step's `text` and `send` phases.
    fn send_events(&mut self) {
        let started = Instant::now();
        if self.make_unsent_text() {
            self.metrics
                .observe_step(StepPhase::Text, started.elapsed());
        }
        let started = Instant::now();
        self.outbox.send_all();
        self.metrics
            .observe_step(StepPhase::Send, started.elapsed());
    }

    /// Makes the text of the tokens that wait for it and sends every event,
    /// untimed: when the engine has no step to run.
    fn flush_events(&mut self) {
        self.make_unsent_text();
        self.outbox.send_all();
    }

    /// Makes the text of every token that waits for it, sequence by
    /// sequence in order, into the outbox; true when there was any.
    fn make_unsent_text(&mut self) -> bool {
        let mut any = false;
        for seq in self.state.sequences_mut() {
            if seq.payload.unsent.is_empty() {
                continue;
            }
            any = true;
            let prompt_tokens = seq.num_prompt as u32;
            seq.payload.make_unsent_text(
                prompt_tokens,
                &self.tokenizer,
                &self.metrics,
                &mut self.outbox,
            );
        }
        any
    }

    /// The rows of this step whose sequences sample at random (the others
    /// are greedy, or not at their last token), ascending; with `draw`
    /// (the device samples), each row's draw, which advances its
    /// sequence's RNG as a draw on the host does.
    fn random_rows(&mut self, draw: bool) -> RandomRows {
        let rows: Vec<u32> = (0..self.state.rows().len())
            .filter(|&index| {
                let row = self.state.rows()[index];
                row.samples
                    && !self.state.running()[row.running_index]
                        .payload
                        .sampler
                        .is_greedy()
            })
            .map(|index| index as u32)
            .collect();
        let draws = if draw {
            rows.iter()
                .map(|&index| {
                    let running_index = self.state.rows()[index as usize].running_index;
                    self.state.running_mut()[running_index]
                        .payload
                        .sampler
                        .draw()
                })
                .collect()
        } else {
            Vec::new()
        };
        RandomRows { rows, draws }
    }

    /// Samples the next token of every row whose step reached its last
    /// token, and makes the text of those that may finish their sequence
    /// (of every token with the CPU's [`EventTiming::AfterStep`]); the
    /// others' text waits for [`Self::send_events`].
    ///
    /// On the CPU, the draws run first, in parallel when more than one row
    /// samples at random (a draw reads a whole row of logits: about half a
    /// millisecond for a 128k vocabulary); on a GPU every token is already
    /// chosen. Each sequence has its own sampler, so what it
    /// draws does not depend on the others or on the order.
    fn sample_rows(&mut self, logits: &StepLogits) {
        let mut row_of_sequence = vec![None; self.state.running().len()];
        for (row_index, row) in self.state.rows().iter().enumerate() {
            if row.samples {
                row_of_sequence[row.running_index] = Some(row_index);
            }
        }
        // (running index, row index, the sequence's sampler) of every row
        // that samples.
        let mut draws: Vec<(usize, usize, &mut Sampler)> = self
            .state
            .running_mut()
            .iter_mut()
            .zip(row_of_sequence)
            .enumerate()
            .filter_map(|(running_index, (seq, row))| {
                row.map(|row_index| (running_index, row_index, &mut seq.payload.sampler))
            })
            .collect();
        let draw = |(running_index, row_index, sampler): &mut (usize, usize, &mut Sampler)| {
            let token = match logits.row(*row_index) {
                RowLogits::Chosen(token) => token,
                RowLogits::Full(row_logits) => sampler.sample(row_logits),
            };
            (*running_index, token)
        };
        let random = draws.iter().filter(|(_, _, s)| !s.is_greedy()).count();
        let tokens: Vec<(usize, u32)> = if random > 1 {
            draws.par_iter_mut().map(draw).collect()
        } else {
            draws.iter_mut().map(draw).collect()
        };
        let defer = self.event_timing != EventTiming::AfterStep;
        let now = Instant::now();
        for (running_index, token) in tokens {
            // Its text, made after this step was launched, failed: the
            // sequence is done, and this row's token is not its own.
            if self.state.running()[running_index].payload.finished {
                continue;
            }
            self.state.append_token(running_index, token);
            let seq = &mut self.state.running_mut()[running_index];
            record_token(seq, now, &self.metrics);
            let prompt_tokens = seq.num_prompt as u32;
            let completion_tokens = seq.output().len() as u32;
            let generation = &mut seq.payload;
            generation.unsent.push((token, completion_tokens));
            if !defer || generation.may_finish(token, completion_tokens, &self.tokenizer) {
                generation.make_unsent_text(
                    prompt_tokens,
                    &self.tokenizer,
                    &self.metrics,
                    &mut self.outbox,
                );
            }
        }
    }

    /// A model error: every sequence of the step fails, and on a GPU the
    /// memory pool's idle memory goes back to the driver, so that a step
    /// that ran out of memory leaves none of it behind for the next.
    fn fail_step(&mut self, message: &str) {
        tracing::error!(error = message, "model step failed");
        if let Err(err) = isobench_model::release_idle_memory(self.model.device()) {
            tracing::error!(error = %err, "cannot release the failed step's memory");
        }
        // The text the requests were owed comes before their failure.
        self.make_unsent_text();
        let rows: Vec<usize> = self
            .state
            .rows()
            .iter()
            .map(|row| row.running_index)
            .collect();
        for index in rows {
            let generation = &mut self.state.running_mut()[index].payload;
            generation.fail(
                &format!("the model step failed: {message}"),
                &self.metrics,
                &mut self.outbox,
            );
        }
    }

    fn publish_gauges(&self) {
        let m = &self.metrics;
        m.requests_running
            .store(self.state.running().len() as u64, Ordering::Relaxed);
        m.requests_waiting
            .store(self.state.waiting().len() as u64, Ordering::Relaxed);
        m.kv_blocks_free
            .store(self.state.pool().num_free() as u64, Ordering::Relaxed);
    }
}

/// Records a sequence's new token (just appended) in the metrics: its time
/// to first token or since the previous token, and the tokens generated.
fn record_token(seq: &mut Sequence<Generation>, now: Instant, metrics: &Metrics) {
    let generation = &mut seq.payload;
    match generation.last_token_at {
        None => metrics
            .time_to_first_token
            .observe_duration(now - seq.arrived),
        Some(previous) => metrics
            .time_per_output_token
            .observe_duration(now - previous),
    }
    generation.last_token_at = Some(now);
    metrics
        .generation_tokens_total
        .fetch_add(1, Ordering::Relaxed);
}

impl Generation {
    /// Whether `token`, this sequence's `completion_tokens`-th, may finish
    /// it: the end of text (unless ignored), its last allowed token, or
    /// any token where stop strings are watched for.
    fn may_finish(&self, token: u32, completion_tokens: u32, tokenizer: &Tokenizer) -> bool {
        (tokenizer.is_eos(token) && !self.ignore_eos)
            || completion_tokens >= self.max_tokens
            || self.stop.has_stops()
    }

    /// Makes the text of the tokens that wait for it, in order, until one
    /// finishes the sequence.
    fn make_unsent_text(
        &mut self,
        prompt_tokens: u32,
        tokenizer: &Tokenizer,
        metrics: &Metrics,
        outbox: &mut Outbox,
    ) {
        for (token, completion_tokens) in std::mem::take(&mut self.unsent) {
            if self.finished {
                break;
            }
            self.make_text(
                token,
                prompt_tokens,
                completion_tokens,
                tokenizer,
                metrics,
                outbox,
            );
        }
    }

    /// Puts the text of `token`, the sequence's `completion_tokens`-th,
    /// in the outbox, and finishes the sequence if the token ends it.
    fn make_text(
        &mut self,
        token: u32,
        prompt_tokens: u32,
        completion_tokens: u32,
        tokenizer: &Tokenizer,
        metrics: &Metrics,
        outbox: &mut Outbox,
    ) {
        let eos = tokenizer.is_eos(token) && !self.ignore_eos;
        let mut finish = eos.then_some(FinishReason::Stop);
        if !eos {
            match self.decoder.push(token) {
                Ok(Some(piece)) => {
                    if self.pass_text(piece, completion_tokens, outbox) {
                        return self.finish(
                            FinishReason::Stop,
                            prompt_tokens,
                            completion_tokens,
                            metrics,
                            outbox,
                        );
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    return self.fail(&format!("detokenizing failed: {err}"), metrics, outbox);
                }
            }
            if completion_tokens >= self.max_tokens {
                finish = Some(FinishReason::Length);
            }
        }
        let Some(mut reason) = finish else { return };
        // Release what is held back: an unfinished character, then text that
        // could have begun a stop string (it may still complete one).
        match self.decoder.finish() {
            Ok(Some(rest)) => {
                if self.pass_text(rest, completion_tokens, outbox) {
                    reason = FinishReason::Stop;
                }
            }
            Ok(None) => {}
            Err(err) => {
                return self.fail(&format!("detokenizing failed: {err}"), metrics, outbox);
            }
        }
        let held = self.stop.flush();
        push_text(outbox, &self.events, held, completion_tokens);
        self.finish(reason, prompt_tokens, completion_tokens, metrics, outbox);
    }

    /// Passes a piece of generated text through the stop-string matcher
    /// into the outbox; true when a stop string appeared (the text before
    /// it goes out).
    fn pass_text(&mut self, piece: String, completion_tokens: u32, outbox: &mut Outbox) -> bool {
        if !self.stop.has_stops() {
            outbox.push(
                &self.events,
                Event::Text {
                    text: piece,
                    completion_tokens,
                },
            );
            return false;
        }
        let (text, stopped) = match self.stop.push(&piece) {
            StopOutcome::Continue(text) => (text, false),
            StopOutcome::Stopped(text) => (text, true),
        };
        push_text(outbox, &self.events, text, completion_tokens);
        stopped
    }

    fn finish(
        &mut self,
        reason: FinishReason,
        prompt_tokens: u32,
        completion_tokens: u32,
        metrics: &Metrics,
        outbox: &mut Outbox,
    ) {
        outbox.push(
            &self.events,
            Event::Finished {
                reason,
                usage: Usage::new(prompt_tokens, completion_tokens),
            },
        );
        metrics.count_request(match reason {
            FinishReason::Length => "length",
            _ => "stop",
        });
        self.finished = true;
    }

    fn fail(&mut self, message: &str, metrics: &Metrics, outbox: &mut Outbox) {
        outbox.push(
            &self.events,
            Event::Failed {
                message: message.to_owned(),
            },
        );
        metrics.count_request("server_error");
        self.finished = true;
    }
}

/// Text for a request's handler, unless it is empty.
fn push_text(outbox: &mut Outbox, to: &UnboundedSender<Event>, text: &str, completion_tokens: u32) {
    if !text.is_empty() {
        outbox.push(
            to,
            Event::Text {
                text: text.to_owned(),
                completion_tokens,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tokio::sync::mpsc::error::TryRecvError;

    use super::*;
    use crate::blocks::BlockPool;
    use crate::config::{KvPoolSize, ServerConfig};
    use crate::load::Loaded;
    use crate::policy;
    use crate::sampler::SamplingParams;

    /// The tiny model's engine, with the given event timing.
    fn tiny_engine(event_timing: EventTiming) -> Engine {
        let mut config = ServerConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny-llama"),
        );
        config.kv_pool = KvPoolSize::Blocks(64);
        let loaded = Loaded::load(&config).expect("the tiny model loads");
        Engine {
            model: loaded.model,
            cache: loaded.cache,
            tokenizer: loaded.tokenizer,
            state: State::new(
                BlockPool::new(loaded.num_blocks, config.block_size),
                policy::from_config(&config.batching),
            ),
            metrics: loaded.metrics,
            logits_buffer: HostBuffer::default(),
            outbox: Outbox::default(),
            event_timing,
        }
    }

    /// The GPU's timing, as if decode steps of one and two sequences
    /// replayed a graph.
    fn decode_graphs_of_two() -> EventTiming {
        EventTiming::AfterGraphLaunch {
            graphs: Some(isobench_model::GraphShapes {
                rows: vec![1, 2],
                tokens: Vec::new(),
            }),
            max_padded_context: 1024,
        }
    }

    /// A greedy request for exactly `max_tokens` tokens.
    fn greedy(prompt_tokens: Vec<u32>, max_tokens: u32) -> ValidRequest {
        ValidRequest {
            prompt_tokens,
            max_tokens,
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            stop: Vec::new(),
            ignore_eos: true,
            stream: true,
            include_usage: false,
            continuous_usage: false,
        }
    }

    /// Every event of a request up to its last, waiting at most a minute
    /// (an event that is never sent fails the test rather than hanging it).
    fn events_until_done(receiver: &mut UnboundedReceiver<Event>) -> Vec<Event> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut events = Vec::new();
        loop {
            match receiver.try_recv() {
                Ok(event) => {
                    let last = !matches!(event, Event::Text { .. });
                    events.push(event);
                    if last {
                        return events;
                    }
                }
                Err(TryRecvError::Empty) => {
                    assert!(
                        Instant::now() < deadline,
                        "no final event after a minute; got {events:?}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryRecvError::Disconnected) => {
                    panic!("the engine dropped the request without a final event: {events:?}")
                }
            }
        }
    }

    /// The requests' text, after checking that their events come in order
    /// and end with `Finished` for the asked number of tokens.
    fn texts(requests: &[(Vec<u32>, u32)], events: &[Vec<Event>]) -> Vec<String> {
        requests
            .iter()
            .zip(events)
            .map(|((prompt, max_tokens), events)| {
                let (last, texts) = events.split_last().expect("at least one event");
                assert_eq!(
                    last,
                    &Event::Finished {
                        reason: FinishReason::Length,
                        usage: Usage::new(prompt.len() as u32, *max_tokens),
                    }
                );
                let mut previous = 0;
                texts
                    .iter()
                    .map(|event| match event {
                        Event::Text {
                            text,
                            completion_tokens,
                        } => {
                            assert!(*completion_tokens > previous, "{events:?}");
                            previous = *completion_tokens;
                            text.as_str()
                        }
                        other => panic!("{other:?} before the last event"),
                    })
                    .collect()
            })
            .collect()
    }

    /// The GPU's timing (events held until the next step, sent after its
    /// launch when it is a decode step of at most two sequences, before
    /// it otherwise) run on the CPU: every request still gets all its
    /// events, in order, the same text as with the CPU's timing, and its
    /// last events leave when the engine goes idle, not at the next
    /// request.
    #[test]
    fn events_held_for_the_next_step_all_leave_in_order() {
        let requests: Vec<(Vec<u32>, u32)> = vec![
            (vec![1, 15, 27, 300], 3),
            (vec![1, 99, 4, 8, 16, 23, 42], 7),
            (vec![1, 500], 11),
            (vec![1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7], 16),
        ];
        let submit = |handle: &EngineHandle, (prompt, max_tokens): &(Vec<u32>, u32)| {
            handle
                .submit(greedy(prompt.clone(), *max_tokens), Instant::now())
                .expect("the queue has room")
        };

        let (handle, thread) = spawn(|| tiny_engine(EventTiming::AfterStep), 16);
        let mut receivers: Vec<_> = requests.iter().map(|r| submit(&handle, r)).collect();
        let after_step: Vec<Vec<Event>> = receivers.iter_mut().map(events_until_done).collect();
        drop(handle);
        thread.join().expect("the engine thread ends");

        let (handle, thread) = spawn(|| tiny_engine(decode_graphs_of_two()), 16);
        // Together: decode steps of three sequences (events leave before
        // them), then two and one (after their launch).
        let mut receivers: Vec<_> = requests[..3].iter().map(|r| submit(&handle, r)).collect();
        let mut held_events: Vec<Vec<Event>> =
            receivers.iter_mut().map(events_until_done).collect();
        // Alone, once the engine has gone idle with the handle open.
        let mut last = submit(&handle, &requests[3]);
        held_events.push(events_until_done(&mut last));
        drop(handle);
        thread.join().expect("the engine thread ends");

        let expected = texts(&requests, &after_step);
        assert!(expected.iter().all(|text| !text.is_empty()));
        assert_eq!(texts(&requests, &held_events), expected);
    }

    /// Every event of each request, submitted together to an engine with
    /// `timing`, and the tokens its steps computed.
    fn run_together(timing: EventTiming, requests: Vec<ValidRequest>) -> (Vec<Vec<Event>>, f64) {
        let (metrics_to, metrics) = mpsc::channel();
        let engine = move || {
            let engine = tiny_engine(timing);
            metrics_to
                .send(engine.metrics.clone())
                .expect("the test waits");
            engine
        };
        let (handle, thread) = spawn(engine, 16);
        let metrics = metrics.recv().expect("the engine starts");
        let mut receivers: Vec<_> = requests
            .into_iter()
            .map(|request| {
                handle
                    .submit(request, Instant::now())
                    .expect("the queue has room")
            })
            .collect();
        let events = receivers.iter_mut().map(events_until_done).collect();
        drop(handle);
        thread.join().expect("the engine thread ends");
        (events, metrics.step_tokens.sum())
    }

    /// With the GPU's timing a token's text is made after the next step's
    /// launch, unless the token may finish its request (its last allowed
    /// token, or a request with stop strings): the events are the same,
    /// one for one, as when every token's text is made at once, a stop
    /// string still ends its request where it appears, and no request
    /// takes a row in a step after it has finished (the steps compute the
    /// same tokens).
    #[test]
    fn text_made_after_the_next_launch_is_the_same_text() {
        let (alone, _) = run_together(
            EventTiming::AfterStep,
            vec![greedy(vec![1, 99, 4, 8, 16, 23, 42], 24)],
        );
        // A stop string from the middle of what the request says alone.
        let pieces: Vec<&str> = alone[0]
            .iter()
            .filter_map(|event| match event {
                Event::Text { text, .. } if !text.trim().is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(pieces.len() >= 8, "{alone:?}");
        let stop = pieces[pieces.len() / 2].to_owned();
        let requests = || {
            let mut stopped = greedy(vec![1, 99, 4, 8, 16, 23, 42], 24);
            stopped.stop = vec![stop.clone()];
            vec![
                stopped,
                greedy(vec![1, 500], 11),
                greedy(vec![1, 15, 27, 300], 3),
            ]
        };
        let (at_once, tokens_at_once) = run_together(EventTiming::AfterStep, requests());
        let (after_launch, tokens_after_launch) = run_together(decode_graphs_of_two(), requests());
        assert_eq!(after_launch, at_once);
        assert_eq!(tokens_after_launch, tokens_at_once);
        match at_once[0].last() {
            Some(Event::Finished {
                reason: FinishReason::Stop,
                usage,
            }) => assert!(usage.completion_tokens < 24, "{usage:?}"),
            other => panic!("the stop string did not end the request: {other:?}"),
        }
        let text: String = at_once[0]
            .iter()
            .filter_map(|event| match event {
                Event::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            !text.contains(&stop),
            "{text:?} holds the stop string {stop:?}"
        );
    }
}
