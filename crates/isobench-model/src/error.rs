//! The crate's one error type. Errors a user can cause (a bad model folder)
//! name the file and field and what would be accepted; errors in a step's
//! input (a scheduler bug) say which sequence or token is inconsistent.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{}: missing; {needed}", path.display())]
    MissingFile { path: PathBuf, needed: String },

    #[error("{}: invalid JSON: {source}", path.display())]
    InvalidJson {
        path: PathBuf,
        source: serde_json::Error,
    },

    #[error("{}: field `{field}`: {message}", path.display())]
    InvalidConfig {
        path: PathBuf,
        field: String,
        message: String,
    },

    #[error(
        "{}: model_type `{found}` is not supported; accepted model types: llama, mistral, qwen2",
        path.display()
    )]
    UnsupportedArchitecture { path: PathBuf, found: String },

    #[error(
        "{}: tensor `{name}` has shape {found:?}, but config.json implies {expected:?}",
        path.display()
    )]
    WeightShape {
        path: PathBuf,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("tensor `{name}` is in none of the weight files ({files}); config.json implies it")]
    MissingWeight { name: String, files: String },

    #[error("{}: {message}", path.display())]
    InvalidWeights { path: PathBuf, message: String },

    #[error("{}: {message}", path.display())]
    InvalidTokenizer { path: PathBuf, message: String },

    #[error("tokenizer: {0}")]
    Tokenize(String),

    #[error("invalid step batch: {0}")]
    InvalidBatch(String),

    #[error("cannot compute in {0:?}; accepted dtypes: f32, f16, bf16")]
    UnsupportedDtype(candle_core::DType),

    #[error("KV cache does not fit the model: {0}")]
    CacheMismatch(String),

    /// A device that cannot be opened; the message is one complete line.
    #[error("{0}")]
    Device(String),

    #[error("invalid model options: {0}")]
    InvalidOptions(String),

    #[error("CUDA: {0}")]
    Cuda(String),

    #[error("tensor computation failed: {0}")]
    Tensor(#[from] candle_core::Error),
}

impl ModelError {
    /// A stable label for metrics and error bodies.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Io { .. } => "io",
            ModelError::MissingFile { .. } => "missing_file",
            ModelError::InvalidJson { .. } => "invalid_json",
            ModelError::InvalidConfig { .. } => "invalid_config",
            ModelError::UnsupportedArchitecture { .. } => "unsupported_architecture",
            ModelError::WeightShape { .. } => "weight_shape",
            ModelError::MissingWeight { .. } => "missing_weight",
            ModelError::InvalidWeights { .. } => "invalid_weights",
            ModelError::InvalidTokenizer { .. } => "invalid_tokenizer",
            ModelError::Tokenize(_) => "tokenize",
            ModelError::InvalidBatch(_) => "invalid_batch",
            ModelError::UnsupportedDtype(_) => "unsupported_dtype",
            ModelError::CacheMismatch(_) => "cache_mismatch",
            ModelError::Device(_) => "device",
            ModelError::InvalidOptions(_) => "invalid_options",
            ModelError::Cuda(_) => "cuda",
            ModelError::Tensor(_) => "tensor",
        }
    }

    pub(crate) fn config(path: &std::path::Path, field: &str, message: impl Into<String>) -> Self {
        ModelError::InvalidConfig {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}
