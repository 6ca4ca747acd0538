//! Streaming detokenization: text for each generated token as soon as it is
//! complete, never half a UTF-8 character.
//!
//! A byte-level token can hold part of a character (é is two bytes, 🎉
//! four), and decoders such as SentencePiece's strip or merge whitespace
//! depending on the neighbouring tokens, so decoding tokens one at a time
//! gives wrong text. The decoder instead keeps a short window of recent
//! tokens (the prefix-offset method of text-generation-inference and of
//! `tokenizers`' own decode stream): it decodes the window, and when the
//! text has grown past the window's already emitted prefix and does not end
//! in U+FFFD (an incomplete character), it emits the growth and slides the
//! window forward. Each push decodes only the few tokens since the last
//! emitted boundary, so its cost does not grow with the sequence.
//!
//! A character spans at most four bytes, so at most four byte tokens. When
//! more tokens than that are held back and the text still ends incomplete,
//! the bytes can never form a character (a model emitting stray bytes): the
//! text is emitted as it decodes, with U+FFFD, and the window starts afresh.
//! Otherwise a stream of such tokens would arrive all at once at the end,
//! and a client would measure its time to first token as its whole latency.

use std::sync::Arc;

use crate::ModelError;

/// Per-sequence streaming decoder; make one with
/// [`crate::Tokenizer::incremental_decoder`].
pub struct IncrementalDecoder {
    tokenizer: Arc<tokenizers::Tokenizer>,
    skip_special_tokens: bool,
    /// Tokens from the start of the window on.
    window: Vec<u32>,
    /// How many tokens at the start of `window` have had their text emitted.
    emitted_tokens: usize,
    /// The text of `window[..emitted_tokens]`, as decoded in this window.
    emitted_text: String,
}

impl std::fmt::Debug for IncrementalDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalDecoder")
            .field("window", &self.window)
            .field("emitted_tokens", &self.emitted_tokens)
            .finish()
    }
}

/// The replacement character a decoder writes for an incomplete sequence.
const INCOMPLETE: char = '\u{FFFD}';

/// Tokens one character can span at most (one byte each).
const MAX_TOKENS_PER_CHAR: usize = 4;

impl IncrementalDecoder {
    pub(crate) fn new(tokenizer: Arc<tokenizers::Tokenizer>, skip_special_tokens: bool) -> Self {
        Self {
            tokenizer,
            skip_special_tokens,
            window: Vec::new(),
            emitted_tokens: 0,
            emitted_text: String::new(),
        }
    }

    /// Adds a generated token; returns the text it completes, if any (a
    /// token that ends mid-character, or a skipped special token, returns
    /// `None` and its text comes with a later token).
    pub fn push(&mut self, token: u32) -> Result<Option<String>, ModelError> {
        self.window.push(token);
        let text = self.decode(&self.window)?;
        if text.len() <= self.emitted_text.len() {
            return Ok(None);
        }
        if text.ends_with(INCOMPLETE) {
            if self.window.len() - self.emitted_tokens <= MAX_TOKENS_PER_CHAR {
                return Ok(None);
            }
            // Stray bytes that no later token can complete.
            let new_text = text.get(self.emitted_text.len()..).map(str::to_string);
            self.window.clear();
            self.emitted_tokens = 0;
            self.emitted_text.clear();
            return Ok(new_text);
        }
        let Some(new_text) = text
            .strip_prefix(self.emitted_text.as_str())
            .map(str::to_string)
        else {
            // The decoder rewrote text it had already produced (it can only
            // happen with decoders that look ahead); wait for more tokens.
            return Ok(None);
        };
        // Slide: the tokens emitted before this push leave the window, the
        // ones just emitted become its prefix.
        self.window.drain(..self.emitted_tokens);
        self.emitted_tokens = self.window.len();
        self.emitted_text = self.decode(&self.window)?;
        Ok(Some(new_text))
    }

    /// Text held back at the end of generation (an incomplete character
    /// shows as U+FFFD, as a full decode would show it), if any.
    pub fn finish(&mut self) -> Result<Option<String>, ModelError> {
        let text = self.decode(&self.window)?;
        let rest = text
            .strip_prefix(self.emitted_text.as_str())
            .filter(|rest| !rest.is_empty())
            .map(str::to_string);
        self.window.clear();
        self.emitted_tokens = 0;
        self.emitted_text.clear();
        Ok(rest)
    }

    fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer
            .decode(ids, self.skip_special_tokens)
            .map_err(|err| ModelError::Tokenize(err.to_string()))
    }
}
