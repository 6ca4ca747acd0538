//! Turning a request's engine events into the OpenAI response: one JSON
//! body, or a Server-Sent Events stream of chunks.
//!
//! A stream sends one chunk per text delta (chat streams open with a
//! `role: assistant` chunk), then a chunk with the `finish_reason`, then,
//! when `stream_options.include_usage` is set, a chunk with `usage` and no
//! choices, then `data: [DONE]`. A failure after the stream started is sent
//! in-band as `data: {"error": {...}}` before `[DONE]`; so is the end of a
//! request that shutdown cut at `--shutdown-timeout`. Dropping the stream
//! (the client went away) drops the event receiver, which tells the engine
//! to stop the sequence and free its blocks.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
pub use isobench_api::answer::Endpoint;
use isobench_api::answer::{AnswerWriter, Delta};
use isobench_api::{Usage, sse};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::Event;
use crate::error::ServerError;
use crate::http::AppState;
use crate::validate::ValidRequest;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Submits a validated request and answers it.
pub async fn generate(
    state: &AppState,
    endpoint: Endpoint,
    request: ValidRequest,
    arrived: Instant,
) -> Result<Response, ServerError> {
    let stream = request.stream;
    let usage_options = UsageOptions {
        include: request.include_usage,
        continuous: request.continuous_usage,
        prompt_tokens: request.prompt_tokens.len() as u32,
    };
    let events = state.engine.submit(request, arrived)?;
    let number = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let writer = AnswerWriter::new(endpoint, "", number, state.model_card.id.clone());
    let shutting_down = state.shutting_down.clone();
    if stream {
        Ok(streaming(writer, usage_options, events, shutting_down))
    } else {
        whole(writer, events, &shutting_down).await
    }
}

#[derive(Debug, Clone, Copy)]
struct UsageOptions {
    include: bool,
    continuous: bool,
    prompt_tokens: u32,
}

/// Why the engine dropped a request's events without finishing it.
fn engine_gone(shutting_down: &AtomicBool) -> ServerError {
    if shutting_down.load(Ordering::Relaxed) {
        ServerError::ShuttingDown
    } else {
        ServerError::EngineStopped
    }
}

async fn whole(
    writer: AnswerWriter,
    mut events: UnboundedReceiver<Event>,
    shutting_down: &AtomicBool,
) -> Result<Response, ServerError> {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text { text: piece, .. } => text.push_str(&piece),
            Event::Finished { reason, usage } => {
                let body = writer.whole_body(&text, reason, usage);
                return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
            }
            Event::Failed { message } => return Err(ServerError::Generation(message)),
        }
    }
    Err(engine_gone(shutting_down))
}

fn streaming(
    writer: AnswerWriter,
    usage: UsageOptions,
    events: UnboundedReceiver<Event>,
    shutting_down: Arc<AtomicBool>,
) -> Response {
    let opening = match writer.endpoint() {
        Endpoint::Chat => Some(Bytes::from(writer.chunk_event(Delta {
            role: Some("assistant"),
            text: Some(""),
            finish_reason: None,
            usage: usage.continuous.then(|| Usage::new(usage.prompt_tokens, 0)),
        }))),
        Endpoint::Completions => None,
    };
    let chunks = ChunkStream {
        events,
        writer,
        usage,
        opening,
        done: false,
        shutting_down,
    };
    let stream = futures_util::stream::unfold(chunks, ChunkStream::next);
    let body = Body::from_stream(futures_util::StreamExt::map(
        stream,
        Ok::<Bytes, Infallible>,
    ));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The state of one SSE response: the events still to come and how to
/// frame them.
struct ChunkStream {
    events: UnboundedReceiver<Event>,
    writer: AnswerWriter,
    usage: UsageOptions,
    /// The chat stream's role chunk, sent first.
    opening: Option<Bytes>,
    done: bool,
    shutting_down: Arc<AtomicBool>,
}

impl ChunkStream {
    /// The next body chunk, or `None` once `[DONE]` was sent.
    async fn next(mut self) -> Option<(Bytes, Self)> {
        if let Some(first) = self.opening.take() {
            return Some((first, self));
        }
        if self.done {
            return None;
        }
        let bytes = match self.events.recv().await {
            Some(Event::Text {
                text,
                completion_tokens,
            }) => {
                let usage = self
                    .usage
                    .continuous
                    .then(|| Usage::new(self.usage.prompt_tokens, completion_tokens));
                Bytes::from(self.writer.chunk_event(Delta {
                    text: Some(&text),
                    usage,
                    ..Delta::default()
                }))
            }
            Some(Event::Finished { reason, usage }) => {
                self.done = true;
                let mut out = self.writer.chunk_event(Delta {
                    finish_reason: Some(reason),
                    usage: self.usage.continuous.then_some(usage),
                    ..Delta::default()
                });
                if self.usage.include {
                    out.extend_from_slice(&self.writer.usage_event(usage));
                }
                out.extend_from_slice(sse::encode_data("[DONE]").as_bytes());
                Bytes::from(out)
            }
            Some(Event::Failed { message }) => {
                self.done = true;
                error_event(ServerError::Generation(message))
            }
            None => {
                self.done = true;
                error_event(engine_gone(&self.shutting_down))
            }
        };
        Some((bytes, self))
    }
}

fn error_event(error: ServerError) -> Bytes {
    // An error body of strings always serializes.
    let json = serde_json::to_string(&error.to_body()).unwrap_or_default();
    let mut out = sse::encode_data(&json);
    out.push_str(&sse::encode_data("[DONE]"));
    Bytes::from(out)
}
