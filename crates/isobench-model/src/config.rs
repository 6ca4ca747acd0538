//! `config.json`: the Hugging Face model configuration, parsed into a
//! validated [`ModelConfig`].
//!
//! Both config layouts that transformers writes are read: 4.x (`rope_theta`
//! and `rope_scaling` at the top level, `torch_dtype`) and 5.x (one
//! `rope_parameters` object, `dtype`). Unknown fields are ignored, since
//! every Hugging Face config carries many that do not affect inference;
//! the fields that do are checked, and an unusable value is an error that
//! names config.json, the field and what would be accepted.
//!
//! Two isobench fields make a folder with no weight files usable:
//! `isobench_seed` (an unsigned integer) asks for deterministic random
//! weights generated at load, `isobench_init_std` (default 0.02) sets their
//! standard deviation.

use std::path::Path;

use candle_core::DType;
use serde::Deserialize;

use crate::ModelError;

/// The weight layouts this crate implements. All three are Llama-shaped
/// decoders (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    /// Llama with an optional sliding window, which is not applied (see
    /// [`ModelConfig::sliding_window`]).
    Mistral,
    /// Llama with biases on q, k and v, often with tied embeddings.
    Qwen2,
}

impl Architecture {
    /// The `model_type` string of config.json.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
        }
    }
}

/// How rotary frequencies are rescaled for long contexts.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE (`rope_type: default`, or no scaling given).
    None,
    /// Every frequency divided by `factor` (`rope_type: linear`).
    Linear { factor: f64 },
    /// Llama 3.1's band-wise scaling (`rope_type: llama3`): low frequencies
    /// divided by `factor`, high ones kept, a smooth ramp in between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
}

/// Deterministic random weights, asked for by `isobench_seed`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightSeed {
    pub seed: u64,
    /// Standard deviation of the normal draws (`isobench_init_std`).
    pub init_std: f64,
}

/// A validated model configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub model_type: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Equal to `num_attention_heads` when config.json leaves it out.
    pub num_key_value_heads: usize,
    /// `hidden_size / num_attention_heads` when config.json leaves it out.
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// Bias on q_proj, k_proj and v_proj: always for Qwen2, Llama's
    /// `attention_bias` otherwise.
    pub qkv_bias: bool,
    /// Bias on o_proj: Llama's `attention_bias`; never for Qwen2.
    pub o_proj_bias: bool,
    /// Bias on the MLP projections (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Mistral's or Qwen2's sliding attention window, when enabled. It is
    /// not applied: attention always sees the whole context, which is exact
    /// for contexts up to this length.
    pub sliding_window: Option<usize>,
    /// The dtype the checkpoint was saved in (`torch_dtype` or `dtype`).
    pub torch_dtype: Option<DType>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// Set when config.json asks for generated weights.
    pub seed: Option<WeightSeed>,
}

const DEFAULT_INIT_STD: f64 = 0.02;

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<RawRope>,
    rope_parameters: Option<RawRope>,
    max_position_embeddings: usize,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    hidden_act: Option<String>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    bos_token_id: Option<TokenIds>,
    eos_token_id: Option<TokenIds>,
    isobench_seed: Option<u64>,
    isobench_init_std: Option<f64>,
}

#[derive(Deserialize)]
struct RawRope {
    rope_type: Option<String>,
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
}

/// A token id field that Hugging Face writes as one integer or a list.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub(crate) enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    pub(crate) fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

impl ModelConfig {
    /// Reads and validates `path` (a config.json).
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// Parses and validates config.json text; `path` is only used in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, ModelError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|source| ModelError::InvalidJson {
                path: path.to_path_buf(),
                source,
            })?;
        raw.validate(path)
    }

    /// Parameters in the weights (tied embeddings counted once).
    pub fn num_parameters(&self) -> usize {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let q = self.num_attention_heads * self.head_dim;
        let kv = self.num_key_value_heads * self.head_dim;
        let attention = h * q + 2 * h * kv + q * h;
        let attention_bias =
            usize::from(self.qkv_bias) * (q + 2 * kv) + usize::from(self.o_proj_bias) * h;
        let mlp = 3 * h * i + usize::from(self.mlp_bias) * (2 * i + h);
        let layer = attention + attention_bias + mlp + 2 * h;
        let embeddings = self.vocab_size * h * if self.tie_word_embeddings { 1 } else { 2 };
        embeddings + self.num_hidden_layers * layer + h
    }
}

impl RawConfig {
    fn validate(self, path: &Path) -> Result<ModelConfig, ModelError> {
        let bad = |field: &str, message: String| ModelError::config(path, field, message);
        let model_type = match self.model_type.as_deref() {
            Some("llama") => Architecture::Llama,
            Some("mistral") => Architecture::Mistral,
            Some("qwen2") => Architecture::Qwen2,
            Some(other) => {
                return Err(ModelError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    found: other.to_string(),
                });
            }
            None => {
                return Err(bad(
                    "model_type",
                    "missing; accepted model types: llama, mistral, qwen2".into(),
                ));
            }
        };
        for (field, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if value == 0 {
                return Err(bad(field, "must be at least 1".into()));
            }
        }
        if let Some(act) = self.hidden_act.as_deref().filter(|act| *act != "silu") {
            return Err(bad(
                "hidden_act",
                format!("`{act}` is not supported; accepted: silu"),
            ));
        }
        let heads = self.num_attention_heads;
        let kv_heads = self.num_key_value_heads.unwrap_or(heads);
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(
                "num_key_value_heads",
                format!("{kv_heads} must be at least 1 and divide num_attention_heads ({heads})"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(dim) => dim,
            None if self.hidden_size.is_multiple_of(heads) => self.hidden_size / heads,
            None => {
                return Err(bad(
                    "head_dim",
                    format!(
                        "missing, and hidden_size ({}) is not a multiple of num_attention_heads ({heads})",
                        self.hidden_size
                    ),
                ));
            }
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(bad(
                "head_dim",
                format!(
                    "{head_dim} must be a positive even number (rotary embeddings rotate pairs)"
                ),
            ));
        }
        let rms_norm_eps = self.rms_norm_eps.unwrap_or(1e-6);
        if !is_positive(rms_norm_eps) {
            return Err(bad("rms_norm_eps", "must be positive".into()));
        }
        let (rope_field, rope) = match (&self.rope_parameters, &self.rope_scaling) {
            (Some(params), _) => ("rope_parameters", Some(params)),
            (None, scaling) => ("rope_scaling", scaling.as_ref()),
        };
        let rope_theta = self
            .rope_theta
            .or(rope.and_then(|rope| rope.rope_theta))
            .unwrap_or(10_000.0);
        if !is_positive(rope_theta) {
            return Err(bad("rope_theta", "must be positive".into()));
        }
        let rope_scaling = match rope {
            Some(rope) => rope.validate(path, rope_field)?,
            None => RopeScaling::None,
        };
        let torch_dtype = match self.torch_dtype.as_deref().or(self.dtype.as_deref()) {
            None => None,
            Some(name) => Some(parse_dtype(name).ok_or_else(|| {
                bad(
                    "torch_dtype",
                    format!("`{name}` is not supported; accepted: float32, float16, bfloat16"),
                )
            })?),
        };
        let seed = match (self.isobench_seed, self.isobench_init_std) {
            (Some(seed), std) => {
                let init_std = std.unwrap_or(DEFAULT_INIT_STD);
                if !is_positive(init_std) {
                    return Err(bad("isobench_init_std", "must be a positive number".into()));
                }
                Some(WeightSeed { seed, init_std })
            }
            (None, Some(_)) => {
                return Err(bad(
                    "isobench_init_std",
                    "is only used with isobench_seed, which is missing".into(),
                ));
            }
            (None, None) => None,
        };
        let attention_bias = self.attention_bias.unwrap_or(false);
        let is_qwen2 = model_type == Architecture::Qwen2;
        let sliding_window = match (model_type, self.use_sliding_window) {
            (Architecture::Qwen2, Some(false) | None) => None,
            _ => self.sliding_window,
        };
        Ok(ModelConfig {
            model_type,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            max_position_embeddings: self.max_position_embeddings,
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            qkv_bias: is_qwen2 || attention_bias,
            o_proj_bias: !is_qwen2 && attention_bias,
            mlp_bias: self.mlp_bias.unwrap_or(false),
            sliding_window,
            torch_dtype,
            bos_token_id: self
                .bos_token_id
                .and_then(|ids| ids.to_vec().first().copied()),
            eos_token_ids: self
                .eos_token_id
                .map(|ids| ids.to_vec())
                .unwrap_or_default(),
            seed,
        })
    }
}

impl RawRope {
    fn validate(&self, path: &Path, field: &str) -> Result<RopeScaling, ModelError> {
        let rope_type = self
            .rope_type
            .as_deref()
            .or(self.legacy_type.as_deref())
            .unwrap_or("default");
        let required = |name: &str, value: Option<f64>| {
            value.filter(|v| *v > 0.0).ok_or_else(|| {
                ModelError::config(
                    path,
                    &format!("{field}.{name}"),
                    format!("a positive number is required for rope_type `{rope_type}`"),
                )
            })
        };
        match rope_type {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear {
                factor: required("factor", self.factor)?,
            }),
            "llama3" => {
                let low_freq_factor = required("low_freq_factor", self.low_freq_factor)?;
                let high_freq_factor = required("high_freq_factor", self.high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(ModelError::config(
                        path,
                        &format!("{field}.high_freq_factor"),
                        format!(
                            "{high_freq_factor} must be greater than low_freq_factor ({low_freq_factor})"
                        ),
                    ));
                }
                let original = required(
                    "original_max_position_embeddings",
                    self.original_max_position_embeddings.map(|n| n as f64),
                )?;
                Ok(RopeScaling::Llama3 {
                    factor: required("factor", self.factor)?,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings: original as usize,
                })
            }
            other => Err(ModelError::config(
                path,
                &format!("{field}.rope_type"),
                format!("`{other}` is not supported; accepted: default, linear, llama3"),
            )),
        }
    }
}

/// A finite number above zero (false for NaN).
fn is_positive(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

fn parse_dtype(name: &str) -> Option<DType> {
    match name {
        "float32" | "torch.float32" => Some(DType::F32),
        "float16" | "torch.float16" => Some(DType::F16),
        "bfloat16" | "torch.bfloat16" => Some(DType::BF16),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ModelConfig, ModelError> {
        ModelConfig::from_json(json, Path::new("m/config.json"))
    }

    const BASE: &str = r#""vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 1, "num_attention_heads": 4, "max_position_embeddings": 64"#;

    #[test]
    fn defaults_follow_hugging_face() {
        let config = parse(&format!(r#"{{"model_type": "llama", {BASE}}}"#)).unwrap();
        assert_eq!(config.num_key_value_heads, 4);
        assert_eq!(config.head_dim, 4);
        assert_eq!(config.rope_theta, 10_000.0);
        assert_eq!(config.rope_scaling, RopeScaling::None);
        assert!(!config.qkv_bias && !config.tie_word_embeddings);
        assert_eq!(config.seed, None);
    }

    #[test]
    fn reads_transformers_4_rope_scaling_and_eos_lists() {
        let config = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
            "eos_token_id": [5, 7], "bos_token_id": 1,
            "rope_scaling": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
        ))
        .unwrap();
        assert_eq!(config.rope_theta, 500_000.0);
        assert_eq!(config.torch_dtype, Some(DType::BF16));
        assert_eq!(config.eos_token_ids, vec![5, 7]);
        assert_eq!(config.bos_token_id, Some(1));
        assert!(matches!(
            config.rope_scaling,
            RopeScaling::Llama3 {
                original_max_position_embeddings: 8192,
                ..
            }
        ));
    }

    #[test]
    fn qwen2_has_qkv_bias_and_its_disabled_window_is_dropped() {
        let config = parse(&format!(
            r#"{{"model_type": "qwen2", {BASE}, "sliding_window": 4096, "use_sliding_window": false,
            "rope_parameters": {{"rope_type": "default", "rope_theta": 1000000.0}}, "dtype": "float32"}}"#
        ))
        .unwrap();
        assert!(config.qkv_bias && !config.o_proj_bias);
        assert_eq!(config.sliding_window, None);
        assert_eq!(config.rope_theta, 1_000_000.0);
    }

    #[test]
    fn errors_name_the_field_and_what_is_accepted() {
        let unknown = parse(&format!(r#"{{"model_type": "gpt2", {BASE}}}"#)).unwrap_err();
        assert_eq!(unknown.kind(), "unsupported_architecture");
        assert!(unknown.to_string().contains("m/config.json"));
        assert!(unknown.to_string().contains("llama, mistral, qwen2"));

        let rope = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_scaling": {{"type": "yarn", "factor": 4.0}}}}"#
        ))
        .unwrap_err();
        assert!(
            rope.to_string().contains("rope_scaling.rope_type"),
            "{rope}"
        );
        assert!(
            rope.to_string().contains("default, linear, llama3"),
            "{rope}"
        );

        let gqa = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "num_key_value_heads": 3}}"#
        ))
        .unwrap_err();
        assert!(gqa.to_string().contains("num_key_value_heads"), "{gqa}");

        let missing = parse(r#"{"model_type": "llama", "vocab_size": 3}"#).unwrap_err();
        assert!(missing.to_string().contains("missing field"), "{missing}");
    }

    #[test]
    fn seed_fields() {
        let config = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "isobench_seed": 7, "isobench_init_std": 0.5}}"#
        ))
        .unwrap();
        assert_eq!(
            config.seed,
            Some(WeightSeed {
                seed: 7,
                init_std: 0.5
            })
        );
        let orphan = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "isobench_init_std": 0.5}}"#
        ))
        .unwrap_err();
        assert!(orphan.to_string().contains("isobench_seed"), "{orphan}");
    }
}
