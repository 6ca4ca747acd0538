//! Turning a request's engine events into the OpenAI response: one JSON
//! body, or a Server-Sent Events stream of chunks.
//!
//! A stream sends one chunk per text delta (chat streams open with a
//! `role: assistant` chunk), then a chunk with the `finish_reason`, then,
//! when `stream_options.include_usage` is set, a chunk with `usage` and no
//! choices, then `data: [DONE]`. A failure after the stream started is sent
//! in-band as `data: {"error": {...}}` before `[DONE]`. Dropping the stream
//! (the client went away) drops the event receiver, which tells the engine
//! to stop the sequence and free its blocks.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use isobench_api::chat::{CHAT_CHUNK_OBJECT, CHAT_OBJECT};
use isobench_api::completions::COMPLETION_OBJECT;
use isobench_api::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionResponse, ChatDelta,
    ChatMessage, CompletionChoice, CompletionResponse, FinishReason, Usage, sse, unix_now,
};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::Event;
use crate::error::ServerError;
use crate::http::AppState;
use crate::validate::ValidRequest;

/// Which API shape to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

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
    let meta = Meta {
        id: match endpoint {
            Endpoint::Completions => format!("cmpl-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            Endpoint::Chat => format!("chatcmpl-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        },
        created: unix_now(),
        model: state.model_card.id.clone(),
        endpoint,
    };
    if stream {
        Ok(streaming(meta, usage_options, events))
    } else {
        whole(meta, events).await
    }
}

/// The parts of every response that do not change between chunks.
#[derive(Debug)]
struct Meta {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
}

#[derive(Debug, Clone, Copy)]
struct UsageOptions {
    include: bool,
    continuous: bool,
    prompt_tokens: u32,
}

async fn whole(meta: Meta, mut events: UnboundedReceiver<Event>) -> Result<Response, ServerError> {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text { text: piece, .. } => text.push_str(&piece),
            Event::Finished { reason, usage } => {
                return Ok(meta.whole_response(text, reason, usage));
            }
            Event::Failed { message } => return Err(ServerError::Generation(message)),
        }
    }
    Err(ServerError::EngineStopped)
}

fn streaming(meta: Meta, usage: UsageOptions, events: UnboundedReceiver<Event>) -> Response {
    let opening = match meta.endpoint {
        Endpoint::Chat => Some(meta.chat_chunk(
            ChatDelta {
                role: Some("assistant".into()),
                content: Some(String::new()),
            },
            None,
            usage.continuous.then(|| Usage::new(usage.prompt_tokens, 0)),
        )),
        Endpoint::Completions => None,
    };
    let chunks = ChunkStream {
        events,
        meta,
        usage,
        opening,
        done: false,
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
    meta: Meta,
    usage: UsageOptions,
    /// The chat stream's role chunk, sent first.
    opening: Option<Bytes>,
    done: bool,
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
                Bytes::from(self.meta.text_chunk(text, usage))
            }
            Some(Event::Finished { reason, usage }) => {
                self.done = true;
                let mut out = self
                    .meta
                    .finish_chunk(reason, self.usage.continuous.then_some(usage));
                if self.usage.include {
                    out.extend_from_slice(&self.meta.usage_chunk(usage));
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
                error_event(ServerError::EngineStopped)
            }
        };
        Some((bytes, self))
    }
}

fn error_event(error: ServerError) -> Bytes {
    let mut out = sse_json(&error.to_body());
    out.extend_from_slice(sse::encode_data("[DONE]").as_bytes());
    Bytes::from(out)
}

fn sse_json(payload: &impl Serialize) -> Vec<u8> {
    let json = serde_json::to_string(payload).unwrap_or_default();
    sse::encode_data(&json).into_bytes()
}

impl Meta {
    fn whole_response(&self, text: String, reason: FinishReason, usage: Usage) -> Response {
        match self.endpoint {
            Endpoint::Completions => Json(CompletionResponse {
                id: self.id.clone(),
                object: COMPLETION_OBJECT.into(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![CompletionChoice {
                    index: 0,
                    text,
                    finish_reason: Some(reason),
                    logprobs: None,
                }],
                usage: Some(usage),
            })
            .into_response(),
            Endpoint::Chat => Json(ChatCompletionResponse {
                id: self.id.clone(),
                object: CHAT_OBJECT.into(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChatChoice {
                    index: 0,
                    message: ChatMessage::new("assistant", text),
                    finish_reason: Some(reason),
                }],
                usage: Some(usage),
            })
            .into_response(),
        }
    }

    fn completion_chunk(
        &self,
        text: String,
        reason: Option<FinishReason>,
        usage: Option<Usage>,
    ) -> Vec<u8> {
        sse_json(&CompletionResponse {
            id: self.id.clone(),
            object: COMPLETION_OBJECT.into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text,
                finish_reason: reason,
                logprobs: None,
            }],
            usage,
        })
    }

    fn chat_chunk(
        &self,
        delta: ChatDelta,
        reason: Option<FinishReason>,
        usage: Option<Usage>,
    ) -> Bytes {
        Bytes::from(sse_json(&ChatCompletionChunk {
            id: self.id.clone(),
            object: CHAT_CHUNK_OBJECT.into(),
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChunkChoice {
                index: 0,
                delta,
                finish_reason: reason,
            }],
            usage,
        }))
    }

    fn text_chunk(&self, text: String, usage: Option<Usage>) -> Vec<u8> {
        match self.endpoint {
            Endpoint::Completions => self.completion_chunk(text, None, usage),
            Endpoint::Chat => self
                .chat_chunk(
                    ChatDelta {
                        role: None,
                        content: Some(text),
                    },
                    None,
                    usage,
                )
                .into(),
        }
    }

    fn finish_chunk(&self, reason: FinishReason, usage: Option<Usage>) -> Vec<u8> {
        match self.endpoint {
            Endpoint::Completions => self.completion_chunk(String::new(), Some(reason), usage),
            Endpoint::Chat => self
                .chat_chunk(ChatDelta::default(), Some(reason), usage)
                .into(),
        }
    }

    /// The final chunk of `include_usage`: no choices, the whole request's usage.
    fn usage_chunk(&self, usage: Usage) -> Vec<u8> {
        match self.endpoint {
            Endpoint::Completions => sse_json(&CompletionResponse {
                id: self.id.clone(),
                object: COMPLETION_OBJECT.into(),
                created: self.created,
                model: self.model.clone(),
                choices: Vec::new(),
                usage: Some(usage),
            }),
            Endpoint::Chat => sse_json(&ChatCompletionChunk {
                id: self.id.clone(),
                object: CHAT_CHUNK_OBJECT.into(),
                created: self.created,
                model: self.model.clone(),
                choices: Vec::new(),
                usage: Some(usage),
            }),
        }
    }
}
