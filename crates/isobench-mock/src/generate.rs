//! The two generation endpoints: parse the request, draw this answer's
//! timing, length, chunking and fate, then write it on schedule.
//!
//! Timing: the first content event is written `ttft` after the request
//! arrived (with `--max-running`, after it left the queue for a running
//! slot); every later event carrying `k` tokens is written `k` ITL draws
//! after the previous one. Deadlines are absolute (arrival + sums of
//! draws), kept by the precise timer, so delays never accumulate error. A
//! non-streamed answer is written whole when its last token would have
//! been streamed.
//!
//! Fates, drawn per request from the seeded generator: an immediate HTTP
//! 500 (`--error-rate`), or a cut (`--cut-rate`): after a random number of
//! events (at least one) and before the `finish_reason`, the connection is
//! aborted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use isobench_api::answer::{AnswerWriter, Delta, Endpoint};
use isobench_api::{ChatCompletionRequest, CompletionRequest, FinishReason, PromptInput, Usage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::DEFAULT_OUTPUT_TOKENS;
use crate::server::{ActiveGuard, MockState, Refusal, WrittenAnswer};
use crate::slots::RunSlot;

/// The text of one generated token.
const TOKEN_TEXT: &str = " tok";

pub(crate) async fn completions(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let received = Instant::now();
    state.authorize(&headers)?;
    let request: CompletionRequest = parse(&state, &body)?;
    let prompt = match &request.prompt {
        PromptInput::Text(text) => text.clone(),
        PromptInput::Texts(texts) => texts.join("\n"),
        PromptInput::Tokens(ids) => format!("<{} token ids>", ids.len()),
        PromptInput::TokenLists(lists) => format!("<{} token lists>", lists.len()),
    };
    let prompt_tokens = match &request.prompt {
        PromptInput::Tokens(ids) => ids.len(),
        PromptInput::TokenLists(lists) => lists.iter().map(Vec::len).sum(),
        _ => prompt.split_whitespace().count(),
    };
    let ask = Ask {
        chat: false,
        model: request.model,
        max_tokens: request.sampling.max_tokens,
        stream: request.stream,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
        continuous_usage: request
            .stream_options
            .is_some_and(|o| o.continuous_usage_stats),
        prompt,
        prompt_tokens: u32::try_from(prompt_tokens).unwrap_or(u32::MAX),
    };
    answer(state, ask, received).await
}

pub(crate) async fn chat_completions(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let received = Instant::now();
    state.authorize(&headers)?;
    let request: ChatCompletionRequest = parse(&state, &body)?;
    let prompt_tokens: usize = request
        .messages
        .iter()
        .map(|m| m.content.text().split_whitespace().count())
        .sum();
    let ask = Ask {
        chat: true,
        max_tokens: request.max_tokens(),
        model: request.model,
        stream: request.stream,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
        continuous_usage: request
            .stream_options
            .is_some_and(|o| o.continuous_usage_stats),
        prompt: request
            .messages
            .last()
            .map(|m| m.content.text())
            .unwrap_or_default(),
        prompt_tokens: u32::try_from(prompt_tokens).unwrap_or(u32::MAX),
    };
    answer(state, ask, received).await
}

fn parse<T: serde::de::DeserializeOwned>(state: &MockState, body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        state.counters.invalid.fetch_add(1, Ordering::Relaxed);
        Refusal::BadRequest(format!("the request body is not a valid request: {e}"))
    })
}

/// One request, whichever endpoint it came to.
struct Ask {
    chat: bool,
    model: String,
    max_tokens: Option<u32>,
    stream: bool,
    include_usage: bool,
    continuous_usage: bool,
    /// The prompt (or last message), for the write log.
    prompt: String,
    /// Whitespace-separated words of the prompt: the mock's token estimate.
    prompt_tokens: u32,
}

async fn answer(state: Arc<MockState>, ask: Ask, received: Instant) -> Result<Response, Refusal> {
    state.check_model(&ask.model)?;
    let guard = state.admit()?;
    let run_slot = state.run_slot().await;
    let started = if run_slot.is_some() {
        Instant::now()
    } else {
        received
    };
    let number = state.served.fetch_add(1, Ordering::Relaxed);
    let config = &state.behaviour.config;
    let mut rng = SmallRng::seed_from_u64(config.seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    if rng.random::<f64>() < config.error_rate {
        state.counters.errors.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal::Injected);
    }
    let limit = ask.max_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS).max(1);
    let total = match &config.output_len {
        Some(length) => (length.sample(&mut rng).round() as u32).clamp(1, limit),
        None => limit,
    };
    let cut = rng.random::<f64>() < config.cut_rate;
    let first = started + millis(config.ttft.sample(&mut rng));
    let written = config.record_writes.then(|| WrittenAnswer {
        prompt: ask.prompt.clone(),
        received,
        events: Vec::new(),
    });
    let mut answer = Answer {
        writer: AnswerWriter::new(endpoint(&ask), "mock-", number, ask.model.clone()),
        text: String::new(),
        ask,
        total,
        sent: 0,
        events: 0,
        next_tokens: 0,
        deadline: first,
        cut_after: None,
        phase: Phase::Content,
        written,
        rng,
        state: Arc::clone(&state),
        guard: Some(guard),
        run_slot,
    };
    answer.next_tokens = answer.draw_event_tokens();
    if cut {
        let events_at_most = total.div_ceil(answer.next_tokens.max(1)).max(1);
        answer.cut_after = Some(answer.rng.random_range(1..=events_at_most));
    }
    Ok(if answer.ask.stream {
        stream_answer(answer)
    } else {
        whole_answer(answer).await
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Content,
    Usage,
    Done,
    End,
}

/// One answer in progress.
struct Answer {
    ask: Ask,
    /// Writes the answer in its endpoint's shape.
    writer: AnswerWriter,
    /// The text of the current event, its buffer reused.
    text: String,
    /// Output tokens to write.
    total: u32,
    /// Output tokens written so far.
    sent: u32,
    /// Content events written so far.
    events: u32,
    /// Tokens of the next content event.
    next_tokens: u32,
    /// When the next content event is due.
    deadline: Instant,
    /// Abort the connection once this many events are written.
    cut_after: Option<u32>,
    phase: Phase,
    written: Option<WrittenAnswer>,
    rng: SmallRng,
    state: Arc<MockState>,
    /// Holds the concurrency slot until the answer completes or is dropped.
    guard: Option<ActiveGuard>,
    /// Holds the running slot (`--max-running`) likewise.
    run_slot: Option<RunSlot>,
}

impl Answer {
    fn draw_event_tokens(&mut self) -> u32 {
        let drawn = self
            .state
            .behaviour
            .config
            .tokens_per_event
            .sample(&mut self.rng);
        (drawn.round() as u32).clamp(1, (self.total - self.sent).max(1))
    }

    /// The sum of `tokens` inter-token latency draws.
    fn itl(&mut self, tokens: u32) -> Duration {
        let itl = self.state.behaviour.config.itl;
        (0..tokens).map(|_| millis(itl.sample(&mut self.rng))).sum()
    }

    fn usage(&self) -> Usage {
        Usage::new(self.ask.prompt_tokens, self.sent)
    }

    fn stamp(&mut self) {
        if let Some(written) = &mut self.written {
            written.events.push(Instant::now());
        }
    }

    /// The last step of a complete answer. The slot is given back before the
    /// end is written, so a client that saw the end never finds it taken.
    fn complete(&mut self) {
        self.guard = None;
        self.run_slot = None;
        self.state
            .counters
            .completed
            .fetch_add(1, Ordering::Relaxed);
        if let Some(written) = self.written.take() {
            self.state.log_written(written);
        }
    }

    /// The next piece of the SSE body; `None` once it has ended.
    async fn next_piece(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        match self.phase {
            Phase::Content => {
                if self.cut_after == Some(self.events) {
                    return Some(Err(self.cut().await));
                }
                self.state.timer.sleep_until(self.deadline).await;
                let tokens = self.next_tokens;
                self.sent += tokens;
                self.events += 1;
                let last = self.sent >= self.total;
                let finish = (last && self.cut_after.is_none()).then_some(FinishReason::Length);
                let usage = self.ask.continuous_usage.then(|| self.usage());
                write_tokens(&mut self.text, tokens);
                let chat_opening = self.events == 1 && self.ask.chat;
                let piece = Bytes::from(self.writer.chunk_event(Delta {
                    role: chat_opening.then_some("assistant"),
                    text: Some(&self.text),
                    finish_reason: finish,
                    usage,
                }));
                self.stamp();
                if last && self.cut_after.is_none() {
                    self.phase = if self.ask.include_usage {
                        Phase::Usage
                    } else {
                        Phase::Done
                    };
                } else if !last {
                    self.next_tokens = self.draw_event_tokens();
                    let gap = self.itl(self.next_tokens);
                    self.deadline += gap;
                }
                Some(Ok(piece))
            }
            Phase::Usage => {
                self.phase = Phase::Done;
                Some(Ok(Bytes::from(self.writer.usage_event(self.usage()))))
            }
            Phase::Done => {
                self.phase = Phase::End;
                self.complete();
                Some(Ok(Bytes::from_static(b"data: [DONE]\n\n")))
            }
            Phase::End => None,
        }
    }

    /// Ends the body with an error, which makes the server abort the
    /// connection. Yields once first so that what was written is flushed.
    async fn cut(&mut self) -> std::io::Error {
        self.phase = Phase::End;
        self.state.counters.cut.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
        std::io::Error::other("answer cut off on purpose (--cut-rate)")
    }
}

fn stream_answer(answer: Answer) -> Response {
    let pieces = stream::unfold(answer, |mut answer| async move {
        let piece = answer.next_piece().await?;
        Some((piece, answer))
    });
    let mut response = Body::from_stream(pieces).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn whole_answer(mut answer: Answer) -> Response {
    let rest = answer.itl(answer.total - 1);
    answer.state.timer.sleep_until(answer.deadline + rest).await;
    answer.sent = answer.total;
    answer.events = 1;
    write_tokens(&mut answer.text, answer.total);
    let usage = answer.usage();
    let body = Bytes::from(
        answer
            .writer
            .whole_body(&answer.text, FinishReason::Length, usage),
    );
    answer.stamp();
    let body = if answer.cut_after.is_some() {
        answer.state.counters.cut.fetch_add(1, Ordering::Relaxed);
        cut_body(body.slice(..body.len() / 2))
    } else {
        answer.complete();
        Body::from(body)
    };
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A body that sends `start`, then breaks (the server aborts the connection).
fn cut_body(start: Bytes) -> Body {
    // Some(Some(start)): send the start; Some(None): break; None: ended.
    let pieces = stream::unfold(Some(Some(start)), |step| async move {
        match step? {
            Some(start) => Some((Ok(start), Some(None))),
            None => {
                // Let the start be flushed before the connection is aborted.
                tokio::task::yield_now().await;
                let error = std::io::Error::other("answer cut off on purpose (--cut-rate)");
                Some((Err(error), None))
            }
        }
    });
    Body::from_stream(pieces)
}

/// Milliseconds (a distribution's draw) as a duration; never negative.
fn millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1_000.0).unwrap_or(Duration::ZERO)
}

fn endpoint(ask: &Ask) -> Endpoint {
    if ask.chat {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    }
}

/// Replaces `text` with `tokens` generated tokens, reusing its buffer.
fn write_tokens(text: &mut String, tokens: u32) {
    text.clear();
    for _ in 0..tokens {
        text.push_str(TOKEN_TEXT);
    }
}
