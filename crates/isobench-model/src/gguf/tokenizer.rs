//! A GGUF file's tokenizer, rebuilt from its `tokenizer.ggml.*` metadata as
//! a Hugging Face `tokenizers` tokenizer:
//!
//! - `tokenizer.ggml.model` must be `gpt2` (byte-level BPE, what GPT-2,
//!   Llama 3, Qwen2 and this project's models use); `tokens` is the
//!   vocabulary in id order, `merges` the BPE merges (`"a b"`), and
//!   `token_type` marks control (3) and user-defined (4) tokens, which
//!   become added special tokens;
//! - `tokenizer.ggml.pre` picks the pre-tokenizer: `default`, `gpt2` or
//!   `gpt-2` (or none): GPT-2's split; `llama3`, `llama-v3` or `llama-bpe`:
//!   Llama 3's;
//! - `bos_token_id`, `eos_token_id` (and `eot_token_id`) are the special
//!   ids; `add_bos_token` (default true) prepends bos when a prompt is
//!   encoded with special tokens; `tokenizer.chat_template` is the chat
//!   template.
//!
//! Anything else (a SentencePiece `llama` tokenizer, another
//! pre-tokenizer) is an error that names the key and what is accepted.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde_json::json;

use crate::{ModelError, Tokenizer};

/// Llama 3's pre-tokenizer pattern (tokenizer.json of Meta-Llama-3).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

pub(super) fn from_metadata(
    path: &Path,
    metadata: &HashMap<String, Value>,
) -> Result<Tokenizer, ModelError> {
    let error = |key: &str, message: String| ModelError::InvalidTokenizer {
        path: path.to_path_buf(),
        message: format!("metadata key `{key}` {message}"),
    };
    let string = |key: &str| -> Result<Option<&str>, ModelError> {
        match metadata.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(error(key, "must be a string".into())),
        }
    };
    let strings = |key: &str| -> Result<Vec<&str>, ModelError> {
        let Some(Value::Array(values)) = metadata.get(key) else {
            return Err(error(key, "is missing or not an array of strings".into()));
        };
        values
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(error(key, "must hold strings only".into())),
            })
            .collect()
    };
    let id = |key: &str| -> Option<u32> {
        metadata.get(key).and_then(|v| {
            v.to_u32()
                .ok()
                .or_else(|| v.to_i32().ok().map(|i| i as u32))
        })
    };

    let model_key = "tokenizer.ggml.model";
    match string(model_key)? {
        Some("gpt2") => {}
        Some(other) => {
            return Err(error(
                model_key,
                format!("is `{other}`, which is not supported; accepted: gpt2 (byte-level BPE)"),
            ));
        }
        None => return Err(error(model_key, "is missing; accepted: gpt2".into())),
    }
    let pre_key = "tokenizer.ggml.pre";
    let pre_tokenizer = match string(pre_key)? {
        None | Some("default" | "gpt2" | "gpt-2") => json!({
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true
        }),
        Some("llama3" | "llama-v3" | "llama-bpe") => json!({
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]
        }),
        Some(other) => {
            return Err(error(
                pre_key,
                format!(
                    "is `{other}`, which is not supported; accepted: default, gpt2, gpt-2, llama3, llama-v3, llama-bpe"
                ),
            ));
        }
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?;
    let types: Vec<i64> = match metadata.get("tokenizer.ggml.token_type") {
        None => vec![1; tokens.len()],
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| {
                v.to_i32()
                    .map(i64::from)
                    .or_else(|_| v.to_u32().map(i64::from))
            })
            .collect::<Result<_, _>>()
            .map_err(|_| error("tokenizer.ggml.token_type", "must hold integers".into()))?,
        Some(_) => {
            return Err(error(
                "tokenizer.ggml.token_type",
                "must be an array".into(),
            ));
        }
    };
    if types.len() != tokens.len() {
        return Err(error(
            "tokenizer.ggml.token_type",
            format!("has {} entries for {} tokens", types.len(), tokens.len()),
        ));
    }
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), json!(i)))
        .collect();
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, t))| matches!(**t, CONTROL | USER_DEFINED))
        .map(|(i, (content, &kind))| {
            json!({"id": i, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": kind == CONTROL})
        })
        .collect();
    let bos = id("tokenizer.ggml.bos_token_id");
    let add_bos = !matches!(
        metadata.get("tokenizer.ggml.add_bos_token"),
        Some(Value::Bool(false))
    );
    let post_processor = match (bos, add_bos) {
        (Some(bos), true) => {
            let Some(&bos_text) = tokens.get(bos as usize) else {
                return Err(error(
                    "tokenizer.ggml.bos_token_id",
                    format!("is {bos}, outside the {} tokens", tokens.len()),
                ));
            };
            json!({
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos_text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos_text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos_text, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos_text: {"id": bos_text, "ids": [bos], "tokens": [bos_text]}}
            })
        }
        _ => serde_json::Value::Null,
    };
    let spec = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    let inner: tokenizers::Tokenizer = spec.to_string().parse().map_err(|err| {
        error(
            "tokenizer.ggml.tokens",
            format!("and merges do not make a BPE tokenizer: {err}"),
        )
    })?;
    let mut eos = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = id(key).filter(|id| !eos.contains(id)) {
            eos.push(id);
        }
    }
    let template = string("tokenizer.chat_template")?.map(str::to_string);
    Ok(Tokenizer::from_parts(inner, bos, eos, template))
}
