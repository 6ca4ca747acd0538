//! Counting generated tokens with the endpoint's tokenizer: the output of
//! servers that report no `usage`, and each streamed event's share of it.

use std::path::Path;

use isobench_loadgen::TokenCounter;

/// A Hugging Face `tokenizer.json`, counting tokens without special tokens,
/// loaded by isobench's one loader (truncation and padding off, so a long
/// answer is never counted at the file's `max_length`).
pub struct TokenizerCounter(isobench_tokenizer::Tokenizer);

impl TokenizerCounter {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        Ok(Self(isobench_tokenizer::load(path)?))
    }
}

impl TokenCounter for TokenizerCounter {
    fn token_ends(&self, text: &str) -> Option<Vec<usize>> {
        match self.0.encode(text, false) {
            Ok(encoding) => Some(encoding.get_offsets().iter().map(|&(_, end)| end).collect()),
            Err(err) => {
                tracing::warn!(error = %err, "the tokenizer could not encode an answer; counting its events instead");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: the counter kept the file's truncation, so an answer
    /// longer than `max_length` counted `max_length` tokens.
    #[test]
    fn counts_are_not_truncated_at_the_files_max_length() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny-llama");
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("tokenizer.json")).unwrap())
                .unwrap();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json.to_string()).unwrap();

        let counter = TokenizerCounter::from_file(&path).unwrap();
        let ends = counter
            .token_ends("the quick brown fox jumps over the lazy dog")
            .unwrap();
        assert!(ends.len() > 2, "{ends:?}");
        assert_eq!(ends.last(), Some(&43));
    }

    #[test]
    fn a_file_that_is_not_a_tokenizer_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, "{}").unwrap();
        let err = TokenizerCounter::from_file(&path)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("tokenizer.json"), "{err}");
    }
}
