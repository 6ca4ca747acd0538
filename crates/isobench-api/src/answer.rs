//! Writing an answer in either endpoint's shape, for servers: the stream
//! chunks (as SSE events), the usage-only chunk, and the whole response.
//! The embedded server and the mock endpoint both answer through
//! [`AnswerWriter`], so their wire format cannot drift apart.
//!
//! Serialization borrows the writer's id and model: an event costs one
//! allocation, its bytes.

use serde::Serialize;

use crate::chat::{CHAT_CHUNK_OBJECT, CHAT_OBJECT};
use crate::completions::COMPLETION_OBJECT;
use crate::{FinishReason, Usage, sse, unix_now};

/// Which endpoint's shape an answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`: the text in `choices[0].text`.
    Completions,
    /// `/v1/chat/completions`: the text in `choices[0].delta.content`
    /// (streamed) or `choices[0].message.content` (whole).
    Chat,
}

/// What one stream chunk carries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delta<'a> {
    /// Chat only: the speaker, sent in the first chunk (`assistant`).
    pub role: Option<&'a str>,
    /// Generated text (`None` in a chunk that only finishes or opens).
    pub text: Option<&'a str>,
    pub finish_reason: Option<FinishReason>,
    pub usage: Option<Usage>,
}

/// The parts of an answer that stay the same over its chunks.
#[derive(Debug, Clone)]
pub struct AnswerWriter {
    endpoint: Endpoint,
    id: String,
    model: String,
    created: u64,
}

impl AnswerWriter {
    /// An answer numbered `number`: its id is `cmpl-N` or `chatcmpl-N`
    /// after `prefix` (e.g. `mock-`), created now.
    pub fn new(endpoint: Endpoint, prefix: &str, number: u64, model: impl Into<String>) -> Self {
        let kind = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        Self {
            endpoint,
            id: format!("{kind}-{prefix}{number}"),
            model: model.into(),
            created: unix_now(),
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// One stream chunk as an SSE event (`data: {...}\n\n`).
    pub fn chunk_event(&self, delta: Delta<'_>) -> Vec<u8> {
        match self.endpoint {
            Endpoint::Completions => self.event(
                COMPLETION_OBJECT,
                [TextChoice {
                    index: 0,
                    text: delta.text.unwrap_or(""),
                    finish_reason: delta.finish_reason,
                    logprobs: None,
                }],
                delta.usage,
            ),
            Endpoint::Chat => self.event(
                CHAT_CHUNK_OBJECT,
                [DeltaChoice {
                    index: 0,
                    delta: MessageOut {
                        role: delta.role,
                        content: delta.text,
                    },
                    finish_reason: delta.finish_reason,
                }],
                delta.usage,
            ),
        }
    }

    /// The chunk `stream_options.include_usage` asks for after the last
    /// one: no choices, the whole request's usage.
    pub fn usage_event(&self, usage: Usage) -> Vec<u8> {
        let object = match self.endpoint {
            Endpoint::Completions => COMPLETION_OBJECT,
            Endpoint::Chat => CHAT_CHUNK_OBJECT,
        };
        self.event(object, [] as [TextChoice<'_>; 0], Some(usage))
    }

    /// The whole (non-streamed) response as a JSON body.
    pub fn whole_body(&self, text: &str, finish_reason: FinishReason, usage: Usage) -> Vec<u8> {
        match self.endpoint {
            Endpoint::Completions => self.json(
                COMPLETION_OBJECT,
                [TextChoice {
                    index: 0,
                    text,
                    finish_reason: Some(finish_reason),
                    logprobs: None,
                }],
                Some(usage),
            ),
            Endpoint::Chat => self.json(
                CHAT_OBJECT,
                [MessageChoice {
                    index: 0,
                    message: MessageOut {
                        role: Some("assistant"),
                        content: Some(text),
                    },
                    finish_reason: Some(finish_reason),
                }],
                Some(usage),
            ),
        }
    }

    fn event<C: Serialize>(
        &self,
        object: &'static str,
        choices: C,
        usage: Option<Usage>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(sse::DATA_PREFIX);
        self.write(&mut out, object, choices, usage);
        out.extend_from_slice(sse::EVENT_END);
        out
    }

    fn json<C: Serialize>(
        &self,
        object: &'static str,
        choices: C,
        usage: Option<Usage>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.write(&mut out, object, choices, usage);
        out
    }

    fn write<C: Serialize>(
        &self,
        out: &mut Vec<u8>,
        object: &str,
        choices: C,
        usage: Option<Usage>,
    ) {
        let body = Body {
            id: &self.id,
            object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
        };
        // Strings, numbers and options only: writing into a Vec cannot fail.
        let _ = serde_json::to_writer(out, &body);
    }
}

/// The envelope shared by every response and chunk.
#[derive(Serialize)]
struct Body<'a, C> {
    id: &'a str,
    object: &'a str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    finish_reason: Option<FinishReason>,
    logprobs: Option<()>,
}

#[derive(Serialize)]
struct DeltaChoice<'a> {
    index: u32,
    delta: MessageOut<'a>,
    finish_reason: Option<FinishReason>,
}

#[derive(Serialize)]
struct MessageChoice<'a> {
    index: u32,
    message: MessageOut<'a>,
    finish_reason: Option<FinishReason>,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseDecoder;
    use crate::view::ChunkView;
    use crate::{ChatCompletionChunk, ChatCompletionResponse, CompletionChunk, CompletionResponse};

    fn data(event: &[u8]) -> Vec<u8> {
        let mut decoder = SseDecoder::new();
        decoder.push(event);
        let data = decoder
            .next_event()
            .unwrap()
            .expect("one whole event")
            .data
            .to_vec();
        assert!(decoder.pending().is_empty());
        data
    }

    #[test]
    fn completion_chunks_parse_as_the_wire_types() {
        let writer = AnswerWriter::new(Endpoint::Completions, "t-", 7, "m");
        let event = writer.chunk_event(Delta {
            text: Some("a \"quoted\"\nline"),
            usage: Some(Usage::new(3, 1)),
            ..Delta::default()
        });
        let chunk: CompletionChunk = serde_json::from_slice(&data(&event)).unwrap();
        assert_eq!(chunk.id, "cmpl-t-7");
        assert_eq!(chunk.object, COMPLETION_OBJECT);
        assert_eq!(chunk.choices[0].text, "a \"quoted\"\nline");
        assert_eq!(chunk.choices[0].finish_reason, None);
        assert_eq!(chunk.usage, Some(Usage::new(3, 1)));

        let usage: CompletionChunk =
            serde_json::from_slice(&data(&writer.usage_event(Usage::new(3, 5)))).unwrap();
        assert!(usage.choices.is_empty());
        assert_eq!(usage.usage.unwrap().total_tokens, 8);

        let whole: CompletionResponse = serde_json::from_slice(&writer.whole_body(
            "hi",
            FinishReason::Length,
            Usage::new(1, 1),
        ))
        .unwrap();
        assert_eq!(whole.choices[0].text, "hi");
        assert_eq!(whole.choices[0].finish_reason, Some(FinishReason::Length));
    }

    #[test]
    fn chat_chunks_parse_as_the_wire_types_and_the_client_view() {
        let writer = AnswerWriter::new(Endpoint::Chat, "", 1, "m");
        let opening = data(&writer.chunk_event(Delta {
            role: Some("assistant"),
            text: Some(""),
            ..Delta::default()
        }));
        let chunk: ChatCompletionChunk = serde_json::from_slice(&opening).unwrap();
        assert_eq!(chunk.id, "chatcmpl-1");
        assert_eq!(chunk.object, CHAT_CHUNK_OBJECT);
        assert_eq!(chunk.choices[0].delta.role.as_deref(), Some("assistant"));
        assert_eq!(chunk.usage, None);

        let finish = data(&writer.chunk_event(Delta {
            finish_reason: Some(FinishReason::Stop),
            ..Delta::default()
        }));
        let view = ChunkView::parse(&finish).unwrap();
        assert_eq!(view.content(), "");
        assert_eq!(view.finish_reason(), Some("stop"));

        let text = data(&writer.chunk_event(Delta {
            text: Some("é"),
            ..Delta::default()
        }));
        assert_eq!(ChunkView::parse(&text).unwrap().content(), "é");

        let whole: ChatCompletionResponse = serde_json::from_slice(&writer.whole_body(
            "hello",
            FinishReason::Stop,
            Usage::new(2, 1),
        ))
        .unwrap();
        assert_eq!(whole.object, CHAT_OBJECT);
        assert_eq!(whole.choices[0].message.content.text(), "hello");
        assert_eq!(whole.choices[0].message.role, "assistant");
    }
}
