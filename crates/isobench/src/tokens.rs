//! Counting generated tokens with the endpoint's tokenizer, for servers
//! that report no `usage`.

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
    fn count_tokens(&self, text: &str) -> u32 {
        self.0
            .encode_fast(text, false)
            .map_or(0, |encoding| encoding.len() as u32)
    }
}
