//! isobench-tokenizer: the one way isobench loads a Hugging Face
//! `tokenizer.json`, on both sides of the wire: the workload planner
//! (prompts of an exact token count), the binary's output counter (answers
//! of servers that report no usage) and the embedded server's model (what
//! a prompt really is).
//!
//! A `tokenizer.json` may ask for truncation (`"truncation": {"max_length":
//! ...}`) or padding. Neither belongs in a measurement: truncation would cap
//! a count, or cut a prompt the server then answers as if it were whole,
//! and padding would lengthen it, both without a word. [`load`] turns both
//! off, so a count is the text's, and a prompt longer than the model's
//! context is refused where the server checks lengths.
//!
//! ```
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
//!     .join("../../models/tiny-llama/tokenizer.json");
//! let tokenizer = isobench_tokenizer::load(&path).unwrap();
//! assert!(tokenizer.get_truncation().is_none());
//! assert!(!tokenizer.encode("a few words", false).unwrap().get_ids().is_empty());
//! ```

use std::path::{Path, PathBuf};

pub use tokenizers::Tokenizer;

/// A `tokenizer.json` that could not be loaded: `path` is the file as given.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer `{}`: {message}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

/// Loads `path`, a Hugging Face `tokenizer.json`, with its truncation and
/// padding turned off. The file must be a regular file (not a folder or a
/// device such as `/dev/zero`, which would be read without end).
pub fn load(path: &Path) -> Result<Tokenizer, LoadError> {
    let error = |message: String| LoadError {
        path: path.to_path_buf(),
        message,
    };
    let metadata = std::fs::metadata(path).map_err(|e| error(format!("cannot be read: {e}")))?;
    if !metadata.is_file() {
        return Err(error(
            "is not a regular file; accepted: a tokenizer.json file".into(),
        ));
    }
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| error(format!("not a Hugging Face tokenizer.json: {e}")))?;
    tokenizer
        .with_truncation(None)
        .map_err(|e| error(e.to_string()))?
        .with_padding(None);
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_tokenizer_json() -> serde_json::Value {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/tiny-llama/tokenizer.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// Regression: the counters kept a file's truncation, so a text longer
    /// than `max_length` counted `max_length` tokens.
    #[test]
    fn truncation_and_padding_in_the_file_are_turned_off() {
        let mut json = tiny_tokenizer_json();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
        });
        json["padding"] = serde_json::json!({
            "strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json.to_string()).unwrap();

        let as_written = Tokenizer::from_file(&path).unwrap();
        let text = "the quick brown fox jumps over the lazy dog";
        assert_eq!(as_written.encode(text, false).unwrap().get_ids().len(), 64);

        let loaded = load(&path).unwrap();
        let ids = loaded.encode(text, false).unwrap().get_ids().to_vec();
        assert!(ids.len() > 2 && ids.len() < 64, "{ids:?}");
        assert_eq!(loaded.decode(&ids, false).unwrap(), text);
    }

    #[test]
    fn what_is_not_a_tokenizer_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let empty_object = dir.path().join("tokenizer.json");
        std::fs::write(&empty_object, "{}").unwrap();
        for (path, needle) in [
            (empty_object, "not a Hugging Face tokenizer.json"),
            (dir.path().to_path_buf(), "is not a regular file"),
            (dir.path().join("missing.json"), "cannot be read"),
        ] {
            let message = load(&path).unwrap_err().to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(needle), "{message}");
        }
    }
}
