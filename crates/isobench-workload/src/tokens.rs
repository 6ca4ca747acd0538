//! Counting tokens: exactly with a Hugging Face `tokenizer.json`, or by a
//! documented approximation without one.
//!
//! Counts never include special tokens: a BOS token, or the tokens a chat
//! template adds, come on top of them at the server.

use std::path::Path;
use std::sync::Arc;

use tokenizers::Tokenizer;

use crate::error::WorkloadError;
use crate::plan::PromptTokens;

/// Without a tokenizer, a text of `n` characters counts `ceil(n / 4)` tokens,
/// the usual rule of thumb for English text in GPT/Llama-style vocabularies.
const CHARS_PER_TOKEN: usize = 4;

/// Counts the tokens of a text.
#[derive(Clone)]
pub(crate) enum TokenCounter {
    Exact(Arc<Tokenizer>),
    Approximate,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenCounter::Exact(_) => "TokenCounter::Exact",
            TokenCounter::Approximate => "TokenCounter::Approximate",
        })
    }
}

impl TokenCounter {
    /// Loads a `tokenizer.json` for counting, by isobench's one loader
    /// (truncation and padding off: a count is never capped or padded).
    pub(crate) fn load(path: &Path) -> Result<Self, WorkloadError> {
        let tokenizer =
            isobench_tokenizer::load(path).map_err(|error| WorkloadError::Tokenizer {
                path: error.path,
                message: error.message,
            })?;
        Ok(TokenCounter::Exact(Arc::new(tokenizer)))
    }

    /// The token count of `text` (without special tokens); `None` if the
    /// tokenizer fails on it.
    pub(crate) fn count(&self, text: &str) -> Option<u32> {
        match self {
            TokenCounter::Exact(tokenizer) => tokenizer
                .encode_fast(text, false)
                .ok()
                .and_then(|encoding| u32::try_from(encoding.len()).ok()),
            TokenCounter::Approximate => {
                let tokens = text.chars().count().div_ceil(CHARS_PER_TOKEN);
                u32::try_from(tokens).ok()
            }
        }
    }

    /// How the counts were obtained, for the report.
    pub(crate) fn source(&self) -> PromptTokens {
        match self {
            TokenCounter::Exact(_) => PromptTokens::Tokenizer,
            TokenCounter::Approximate => PromptTokens::Approximate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approximate_counts_four_characters_per_token() {
        let counter = TokenCounter::Approximate;
        assert_eq!(counter.count(""), Some(0));
        assert_eq!(counter.count("abcd"), Some(1));
        assert_eq!(counter.count("abcde"), Some(2));
        assert_eq!(counter.count("éééé"), Some(1));
        assert_eq!(counter.source(), PromptTokens::Approximate);
    }

    #[test]
    fn a_missing_tokenizer_names_its_path() {
        let error = TokenCounter::load(Path::new("no/such/tokenizer.json")).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("tokenizer `no/such/tokenizer.json`: ")
        );
        assert_eq!(error.kind(), "tokenizer");
    }
}
