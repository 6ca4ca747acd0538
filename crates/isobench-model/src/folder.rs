//! A model folder in Hugging Face layout, checked when opened.
//!
//! ```text
//! config.json                     required: architecture and shapes
//! tokenizer.json                  required
//! tokenizer_config.json           optional: chat_template, bos/eos tokens
//! chat_template.jinja             optional: chat template, if not in tokenizer_config.json
//! generation_config.json          optional: bos/eos token ids
//! model.safetensors               weights, or
//! model.safetensors.index.json    + the shards its weight_map lists, or
//! (nothing)                       with `isobench_seed` in config.json: generated weights
//! ```
//!
//! A `.gguf` file (llama.cpp's format) opens as a folder too: its metadata
//! holds the configuration and the tokenizer, its tensors the weights (see
//! [`crate::gguf`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::gguf::GgufFile;
use crate::weights::{SafetensorsFiles, WeightSource};
use crate::{ModelConfig, ModelError, Tokenizer};

const INDEX_FILE: &str = "model.safetensors.index.json";
const SINGLE_FILE: &str = "model.safetensors";

#[derive(Debug)]
pub struct ModelFolder {
    path: PathBuf,
    config: ModelConfig,
    weight_files: Vec<PathBuf>,
    tokenizer: Tokenizer,
    /// Set when the model is one GGUF file.
    gguf: Option<Arc<GgufFile>>,
}

#[derive(Deserialize)]
struct RawIndex {
    weight_map: HashMap<String, String>,
}

impl ModelFolder {
    /// Reads and checks the folder: config.json, the tokenizer files, and
    /// which weight files exist (they are memory-mapped later, by
    /// [`crate::load_model`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref().to_path_buf();
        if path.is_file() {
            return Self::open_gguf(path);
        }
        if !path.is_dir() {
            return Err(ModelError::MissingFile {
                path,
                needed: "expected a model folder with config.json, tokenizer.json and weights, or a .gguf file"
                    .into(),
            });
        }
        let config_path = path.join("config.json");
        if !config_path.is_file() {
            return Err(ModelError::MissingFile {
                path: config_path,
                needed: "a model folder needs its Hugging Face config.json".into(),
            });
        }
        let config = ModelConfig::from_file(&config_path)?;
        let weight_files = find_weight_files(&path, &config)?;
        let tokenizer = Tokenizer::from_folder(&path, &config)?;
        Ok(Self {
            path,
            config,
            weight_files,
            tokenizer,
            gguf: None,
        })
    }

    /// A GGUF file: configuration, tokenizer and weights in one.
    fn open_gguf(path: PathBuf) -> Result<Self, ModelError> {
        let file = GgufFile::open(&path)?;
        Ok(Self {
            config: file.config().clone(),
            tokenizer: file.tokenizer()?,
            weight_files: vec![path.clone()],
            path,
            gguf: Some(Arc::new(file)),
        })
    }

    /// Whether the model is a GGUF file.
    pub fn is_gguf(&self) -> bool {
        self.gguf.is_some()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder's name, e.g. `small-llama` (a GGUF file's name without
    /// `.gguf`): a natural model id.
    pub fn name(&self) -> String {
        let name = if self.is_gguf() {
            self.path.file_stem()
        } else {
            self.path.file_name()
        };
        name.map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The safetensors files the weights come from; empty when they are
    /// generated from `isobench_seed`.
    pub fn weight_files(&self) -> &[PathBuf] {
        &self.weight_files
    }

    pub(crate) fn weight_source(&self) -> Result<WeightSource, ModelError> {
        if let Some(file) = &self.gguf {
            return Ok(WeightSource::Gguf(Arc::clone(file)));
        }
        match self.config.seed {
            Some(seed) if self.weight_files.is_empty() => Ok(WeightSource::Seeded(seed)),
            _ => Ok(WeightSource::Files(SafetensorsFiles::open(
                &self.weight_files,
            )?)),
        }
    }
}

/// The index's shards, else model.safetensors, else nothing if the config
/// declares a seed.
fn find_weight_files(dir: &Path, config: &ModelConfig) -> Result<Vec<PathBuf>, ModelError> {
    let index_path = dir.join(INDEX_FILE);
    if index_path.is_file() {
        let text = std::fs::read_to_string(&index_path).map_err(|source| ModelError::Io {
            path: index_path.clone(),
            source,
        })?;
        let index: RawIndex =
            serde_json::from_str(&text).map_err(|source| ModelError::InvalidJson {
                path: index_path.clone(),
                source,
            })?;
        let mut shards: Vec<&String> = index.weight_map.values().collect();
        shards.sort();
        shards.dedup();
        let files: Vec<PathBuf> = shards.into_iter().map(|name| dir.join(name)).collect();
        if let Some(missing) = files.iter().find(|file| !file.is_file()) {
            return Err(ModelError::MissingFile {
                path: missing.clone(),
                needed: format!("{INDEX_FILE} lists it in its weight_map"),
            });
        }
        if files.is_empty() {
            return Err(ModelError::config(
                &index_path,
                "weight_map",
                "lists no files",
            ));
        }
        return Ok(files);
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        if config.seed.is_some() {
            tracing::info!(
                folder = %dir.display(),
                "{SINGLE_FILE} present: loading it and ignoring isobench_seed"
            );
        }
        return Ok(vec![single]);
    }
    if config.seed.is_some() {
        return Ok(Vec::new());
    }
    Err(ModelError::MissingFile {
        path: single,
        needed: format!(
            "weights are needed: {SINGLE_FILE}, shards listed in {INDEX_FILE}, or `isobench_seed` in config.json for generated weights"
        ),
    })
}
