//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use isobench_workload::{Plan, PlannedRequest, Prompt, Workload};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shipped workload files' folder.
pub fn workloads() -> PathBuf {
    root().join("workloads")
}

/// The tokenizer of the tiny test model (a Llama-3-style byte-level BPE).
pub fn tiny_tokenizer() -> PathBuf {
    root().join("models/tiny-llama/tokenizer.json")
}

/// Counts tokens as the tests' reference does: without special tokens.
pub fn count_tokens(tokenizer: &tokenizers::Tokenizer, text: &str) -> u32 {
    tokenizer.encode(text, false).expect("text encodes").len() as u32
}

pub fn load_tokenizer() -> tokenizers::Tokenizer {
    tokenizers::Tokenizer::from_file(tiny_tokenizer()).expect("tiny-llama tokenizer loads")
}

/// A workload written into `folder` as `name`, loaded.
pub fn workload_in(folder: &Path, name: &str, text: &str) -> Workload {
    let path = folder.join(name);
    std::fs::write(&path, text).expect("workload written");
    Workload::from_file(&path).unwrap_or_else(|error| panic!("{error}"))
}

/// A workload from text (relative paths resolve against the current directory).
pub fn workload(text: &str) -> Workload {
    Workload::from_toml(text, Path::new("test.toml")).unwrap_or_else(|error| panic!("{error}"))
}

/// The first `n` planned requests.
pub fn first(plan: Plan, n: usize) -> Vec<PlannedRequest> {
    plan.requests.take(n).collect()
}

pub fn text(request: &PlannedRequest) -> &str {
    match &request.prompt {
        Prompt::Text(text) => text,
        Prompt::Chat(turns) => &turns[0].1,
    }
}
