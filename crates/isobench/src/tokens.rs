//! Counting generated tokens with the endpoint's tokenizer: the output of
//! servers that report no `usage`, and each streamed event's share of it.

use std::path::Path;

use anyhow::Context;
use isobench_loadgen::TokenCounter;

/// A Hugging Face `tokenizer.json`, counting tokens without special tokens.
pub struct TokenizerCounter(tokenizers::Tokenizer);

impl TokenizerCounter {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let tokenizer = tokenizers::Tokenizer::from_file(path)
            .map_err(|err| anyhow::anyhow!("{err}"))
            .with_context(|| {
                format!(
                    "{}: not a Hugging Face tokenizer.json the tokenizers crate can load",
                    path.display()
                )
            })?;
        Ok(Self(tokenizer))
    }
}

impl TokenCounter for TokenizerCounter {
    fn token_ends(&self, text: &str) -> Vec<usize> {
        self.0.encode(text, false).map_or_else(
            |_| Vec::new(),
            |encoding| encoding.get_offsets().iter().map(|&(_, end)| end).collect(),
        )
    }
}
