//! A borrowed view of one stream chunk (or one whole response) of either
//! endpoint, for the client's hot path: it reads only the first choice's text
//! (`text` for completions, `delta.content` or `message.content` for chat),
//! its `finish_reason`, `usage` and an in-band `error`, and skips the rest
//! without copying. Text without JSON escapes is borrowed from the input.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::Usage;

#[derive(Debug, Default, Deserialize)]
pub struct ChunkView<'a> {
    /// The first choice; later choices are skipped.
    #[serde(default, borrow, rename = "choices", deserialize_with = "first_choice")]
    pub first_choice: Option<ChoiceView<'a>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    /// An error sent inside the stream (`{"error": {...}}`), as vLLM and
    /// others do when generation fails after the response started.
    #[serde(default, borrow)]
    pub error: Option<ErrorView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ChoiceView<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed_text")]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub delta: Option<MessageView<'a>>,
    #[serde(default, borrow)]
    pub message: Option<MessageView<'a>>,
    #[serde(default, borrow, deserialize_with = "borrowed_text")]
    pub finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct MessageView<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed_text")]
    pub content: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ErrorView<'a> {
    #[serde(default, borrow)]
    pub message: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
}

impl<'a> ChunkView<'a> {
    /// Parses one event's `data` payload or a whole response body.
    pub fn parse(data: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(data)
    }

    /// The generated text this chunk carries (empty when none).
    pub fn content(&self) -> &str {
        let Some(choice) = &self.first_choice else {
            return "";
        };
        let text = choice
            .text
            .as_deref()
            .or_else(|| choice.delta.as_ref().and_then(|d| d.content.as_deref()))
            .or_else(|| choice.message.as_ref().and_then(|m| m.content.as_deref()));
        text.unwrap_or("")
    }

    /// The first choice's `finish_reason`, when set.
    pub fn finish_reason(&self) -> Option<&str> {
        self.first_choice.as_ref()?.finish_reason.as_deref()
    }
}

/// `Option<Cow<str>>` that borrows from the input when the string has no
/// escapes (serde's derive would always copy inside an `Option`).
fn borrowed_text<'de, D>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    struct Text;

    impl<'de> Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or null")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_str(Text)
        }

        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
    }

    deserializer.deserialize_option(Text)
}

fn first_choice<'de, D>(deserializer: D) -> Result<Option<ChoiceView<'de>>, D::Error>
where
    D: Deserializer<'de>,
{
    struct FirstChoice;

    impl<'de> Visitor<'de> for FirstChoice {
        type Value = Option<ChoiceView<'de>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of choices or null")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_seq(FirstChoice)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<ChoiceView<'de>>()?;
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }

    deserializer.deserialize_option(FirstChoice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_chunk_text_is_borrowed() {
        let data = br#"{"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"hello","finish_reason":null,"logprobs":null}]}"#;
        let view = ChunkView::parse(data).unwrap();
        assert_eq!(view.content(), "hello");
        assert!(matches!(
            view.first_choice.unwrap().text,
            Some(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn chat_delta_usage_and_finish_reason() {
        let data = br#"{"choices":[{"index":0,"delta":{"content":"a\nb"},"finish_reason":"length"},{"index":1,"delta":{}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
        let view = ChunkView::parse(data).unwrap();
        assert_eq!(view.content(), "a\nb");
        assert_eq!(view.finish_reason(), Some("length"));
        assert_eq!(view.usage.unwrap().completion_tokens, 2);
    }

    #[test]
    fn usage_only_chunk_and_whole_chat_response() {
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7,"total_tokens":10}}"#;
        let view = ChunkView::parse(usage).unwrap();
        assert_eq!(view.content(), "");
        assert_eq!(view.usage.unwrap().total_tokens, 10);
        let whole = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        assert_eq!(ChunkView::parse(whole).unwrap().content(), "hi");
    }

    #[test]
    fn in_band_error_is_seen() {
        let data = br#"{"error":{"message":"boom","type":"server_error"}}"#;
        let view = ChunkView::parse(data).unwrap();
        assert_eq!(view.error.unwrap().message.as_deref(), Some("boom"));
    }
}
