//! The model folder's tokenizer: `tokenizer.json` (Hugging Face tokenizers
//! format) plus what `tokenizer_config.json`, `generation_config.json` and
//! `config.json` say about special tokens and chat formatting.
//!
//! End-of-sequence ids are the union of every source, in this order:
//! generation_config.json's `eos_token_id`, config.json's `eos_token_id`,
//! and tokenizer_config.json's `eos_token` (a Llama 3 instruct folder lists
//! `<|end_of_text|>` in one place and `<|eot_id|>` in another; generation
//! should stop at either). The beginning-of-sequence token comes from the
//! first of the same sources that names one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::config::TokenIds;
use crate::{IncrementalDecoder, ModelConfig, ModelError};

/// A loaded tokenizer with its special tokens and chat template. Cloning is
/// cheap (the vocabulary is shared).
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    bos_token_id: Option<u32>,
    eos_token_ids: Vec<u32>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish()
    }
}

#[derive(Deserialize, Default)]
struct RawTokenizerConfig {
    chat_template: Option<RawChatTemplate>,
    bos_token: Option<RawSpecialToken>,
    eos_token: Option<RawSpecialToken>,
}

/// A chat template is one string, or a list of named templates.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawChatTemplate {
    One(String),
    Named(Vec<NamedTemplate>),
}

#[derive(Deserialize)]
struct NamedTemplate {
    name: String,
    template: String,
}

/// A special token is written as its text or as an added-token object.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSpecialToken {
    Text(String),
    Object { content: String },
}

impl RawSpecialToken {
    fn text(&self) -> &str {
        match self {
            RawSpecialToken::Text(text) | RawSpecialToken::Object { content: text } => text,
        }
    }
}

#[derive(Deserialize, Default)]
struct RawGenerationConfig {
    bos_token_id: Option<TokenIds>,
    eos_token_id: Option<TokenIds>,
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json` with the optional `tokenizer_config.json`
    /// and `generation_config.json` beside it.
    pub fn from_folder(dir: &Path, config: &ModelConfig) -> Result<Self, ModelError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(ModelError::MissingFile {
                path,
                needed: "a model folder needs its tokenizer in Hugging Face tokenizers format"
                    .into(),
            });
        }
        // isobench's one loader: truncation and padding off, so a prompt is
        // never cut silently (validation refuses one over the context).
        let inner =
            isobench_tokenizer::load(&path).map_err(|error| ModelError::InvalidTokenizer {
                path: error.path,
                message: error.message,
            })?;
        let tokenizer_config: RawTokenizerConfig =
            read_optional_json(&dir.join("tokenizer_config.json"))?;
        let generation: RawGenerationConfig =
            read_optional_json(&dir.join("generation_config.json"))?;

        let id_of = |token: &Option<RawSpecialToken>| {
            token.as_ref().and_then(|t| inner.token_to_id(t.text()))
        };
        let mut eos_token_ids = Vec::new();
        let eos_sources = [
            generation.eos_token_id.map(|ids| ids.to_vec()),
            Some(config.eos_token_ids.clone()),
            id_of(&tokenizer_config.eos_token).map(|id| vec![id]),
        ];
        for id in eos_sources.into_iter().flatten().flatten() {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }
        let bos_token_id = generation
            .bos_token_id
            .and_then(|ids| ids.to_vec().first().copied())
            .or(config.bos_token_id)
            .or_else(|| id_of(&tokenizer_config.bos_token));
        let text_of = |configured: &Option<RawSpecialToken>, id: Option<u32>| {
            configured
                .as_ref()
                .map(|t| t.text().to_string())
                .or_else(|| id.and_then(|id| inner.id_to_token(id)))
        };
        let bos_token = text_of(&tokenizer_config.bos_token, bos_token_id);
        let eos_token = text_of(&tokenizer_config.eos_token, eos_token_ids.first().copied());
        let chat_template = match tokenizer_config.chat_template {
            Some(RawChatTemplate::One(text)) => Some(text),
            Some(RawChatTemplate::Named(mut named)) if !named.is_empty() => {
                let default = named.iter().position(|t| t.name == "default").unwrap_or(0);
                Some(named.swap_remove(default).template)
            }
            _ => read_optional_text(&dir.join("chat_template.jinja"))?,
        };
        Ok(Self {
            inner: Arc::new(inner),
            bos_token_id,
            eos_token_ids,
            bos_token,
            eos_token,
            chat_template,
        })
    }

    /// A tokenizer built elsewhere (a GGUF file's metadata), with its
    /// special ids and chat template; the bos and eos texts are the ids'
    /// tokens.
    pub(crate) fn from_parts(
        inner: tokenizers::Tokenizer,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
        chat_template: Option<String>,
    ) -> Self {
        let text = |id: Option<u32>| id.and_then(|id| inner.id_to_token(id));
        Self {
            bos_token: text(bos_token_id),
            eos_token: text(eos_token_ids.first().copied()),
            inner: Arc::new(inner),
            bos_token_id,
            eos_token_ids,
            chat_template,
        }
    }

    /// Token ids of `text`. With `add_special_tokens`, the tokenizer's
    /// post-processor adds what the model expects around a raw prompt (for
    /// the shipped models: `<|begin_of_text|>` in front). Text rendered by
    /// the chat template already carries its special tokens: encode it
    /// without.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ModelError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|err| ModelError::Tokenize(err.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ModelError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|err| ModelError::Tokenize(err.to_string()))
    }

    /// A streaming decoder for one sequence's generated tokens.
    pub fn incremental_decoder(&self, skip_special_tokens: bool) -> IncrementalDecoder {
        IncrementalDecoder::new(Arc::clone(&self.inner), skip_special_tokens)
    }

    /// Ids that end generation (see the module docs for the sources).
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_token_ids.contains(&id)
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// The bos token's text, as chat templates use it (`bos_token`).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    /// The eos token's text, as chat templates use it (`eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Tokens in the vocabulary, added special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The Jinja chat template: tokenizer_config.json's `chat_template` (the
    /// one named `default` when it lists several), else the file
    /// `chat_template.jinja`, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

/// Parses `path` as JSON if it exists; a missing file gives the default.
fn read_optional_json<T: for<'de> Deserialize<'de> + Default>(
    path: &Path,
) -> Result<T, ModelError> {
    let Some(text) = read_optional_text(path)? else {
        return Ok(T::default());
    };
    serde_json::from_str(&text).map_err(|source| ModelError::InvalidJson {
        path: PathBuf::from(path),
        source,
    })
}

/// The contents of `path`, or `None` if there is no such file.
fn read_optional_text(path: &Path) -> Result<Option<String>, ModelError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ModelError::Io {
            path: PathBuf::from(path),
            source,
        }),
    }
}
