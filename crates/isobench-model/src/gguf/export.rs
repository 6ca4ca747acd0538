//! Writes a Llama model folder (safetensors or seeded weights) as a GGUF
//! file that llama.cpp loads: the `llama.*` shapes, the byte-level BPE
//! tokenizer of its tokenizer.json as `tokenizer.ggml.*` (model `gpt2`,
//! pre-tokenizer `gpt-2`), and every tensor under llama.cpp's name, q and k
//! rows permuted as llama.cpp's converter does (see [`super`]).
//!
//! Norm weights and biases are written in f32, like llama.cpp's converter;
//! every matrix in the requested type, except one whose row length is not a
//! multiple of the type's block (32 values for Q8_0, 256 for the K-quants),
//! which falls back to f16, as llama.cpp's quantizer falls back.

use std::io::BufWriter;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device};
use serde_json::Value as Json;

use super::{Direction, gguf_name, permute_rows};
use crate::seeded::Init;
use crate::weights::Weights;
use crate::{ModelError, ModelFolder, RopeScaling};

/// The element type of a written file's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufType {
    F32,
    F16,
    Q8_0,
    Q4K,
    Q6K,
}

impl GgufType {
    /// The names `parse` accepts.
    pub const ACCEPTED: &'static str = "f32, f16, q8_0, q4_k, q6_k";

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "f32" => GgufType::F32,
            "f16" => GgufType::F16,
            "q8_0" => GgufType::Q8_0,
            "q4_k" => GgufType::Q4K,
            "q6_k" => GgufType::Q6K,
            _ => return None,
        })
    }

    fn ggml(self) -> GgmlDType {
        match self {
            GgufType::F32 => GgmlDType::F32,
            GgufType::F16 => GgmlDType::F16,
            GgufType::Q8_0 => GgmlDType::Q8_0,
            GgufType::Q4K => GgmlDType::Q4K,
            GgufType::Q6K => GgmlDType::Q6K,
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_*`).
    fn file_type(self) -> u32 {
        match self {
            GgufType::F32 => 0,
            GgufType::F16 => 1,
            GgufType::Q8_0 => 7,
            GgufType::Q4K => 15,
            GgufType::Q6K => 18,
        }
    }
}

/// What [`export_gguf`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub tensors: usize,
    /// Matrices written in f16 because their rows do not fill whole blocks.
    pub fallbacks: Vec<String>,
}

/// Writes `folder` as a GGUF file at `out`, matrices in `ty`.
pub fn export_gguf(folder: &ModelFolder, out: &Path, ty: GgufType) -> Result<Exported, ModelError> {
    let cfg = folder.config();
    let invalid = |message: String| ModelError::InvalidConfig {
        path: folder.path().join("config.json"),
        field: "rope_scaling".into(),
        message,
    };
    if folder.is_gguf() {
        return Err(ModelError::InvalidOptions(format!(
            "{} is already a GGUF file; export takes a model folder",
            folder.path().display()
        )));
    }
    if cfg.rope_scaling != RopeScaling::None {
        return Err(invalid(
            "rotary scaling is not exported to GGUF; accepted: folders without rope_scaling".into(),
        ));
    }
    let source = folder.weight_source()?;
    let w = Weights::new(&source, DType::F32, &Device::Cpu, None);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut fallbacks = Vec::new();
    let mut matrix =
        |hf: &str, shape: (usize, usize), heads: Option<usize>| -> Result<(), ModelError> {
            let tensor = w.get(shape, hf, Init::Normal)?;
            let block = ty.ggml().block_size();
            let dtype = if shape.1.is_multiple_of(block) {
                ty.ggml()
            } else {
                fallbacks.push(hf.to_string());
                GgmlDType::F16
            };
            let mut q = QTensor::quantize(&tensor, dtype)?;
            if let Some(heads) = heads {
                q = permute_rows(&q, heads, Direction::ToGguf)?;
            }
            tensors.push((name_of(hf)?, q));
            Ok(())
        };
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let q_dim = cfg.num_attention_heads * cfg.head_dim;
    let kv_dim = cfg.num_key_value_heads * cfg.head_dim;
    matrix("model.embed_tokens.weight", (cfg.vocab_size, h), None)?;
    for layer in 0..cfg.num_hidden_layers {
        let p = |name: &str| format!("model.layers.{layer}.{name}");
        matrix(
            &p("self_attn.q_proj.weight"),
            (q_dim, h),
            Some(cfg.num_attention_heads),
        )?;
        matrix(
            &p("self_attn.k_proj.weight"),
            (kv_dim, h),
            Some(cfg.num_key_value_heads),
        )?;
        matrix(&p("self_attn.v_proj.weight"), (kv_dim, h), None)?;
        matrix(&p("self_attn.o_proj.weight"), (h, q_dim), None)?;
        matrix(&p("mlp.gate_proj.weight"), (i, h), None)?;
        matrix(&p("mlp.up_proj.weight"), (i, h), None)?;
        matrix(&p("mlp.down_proj.weight"), (h, i), None)?;
    }
    if !cfg.tie_word_embeddings {
        matrix("lm_head.weight", (cfg.vocab_size, h), None)?;
    }
    let mut vector = |hf: &str, len: usize, init: Init| -> Result<(), ModelError> {
        let tensor = w.get(len, hf, init)?;
        tensors.push((name_of(hf)?, QTensor::quantize(&tensor, GgmlDType::F32)?));
        Ok(())
    };
    vector("model.norm.weight", h, Init::Ones)?;
    for layer in 0..cfg.num_hidden_layers {
        let p = |name: &str| format!("model.layers.{layer}.{name}");
        vector(&p("input_layernorm.weight"), h, Init::Ones)?;
        vector(&p("post_attention_layernorm.weight"), h, Init::Ones)?;
        let biases = [
            ("self_attn.q_proj.bias", q_dim, cfg.qkv_bias),
            ("self_attn.k_proj.bias", kv_dim, cfg.qkv_bias),
            ("self_attn.v_proj.bias", kv_dim, cfg.qkv_bias),
            ("self_attn.o_proj.bias", h, cfg.o_proj_bias),
        ];
        for (name, len, present) in biases {
            if present {
                vector(&p(name), len, Init::Zeros)?;
            }
        }
        if cfg.mlp_bias {
            return Err(ModelError::InvalidOptions(
                "MLP biases are not exported to GGUF (llama.cpp's llama layout has none)".into(),
            ));
        }
    }
    let metadata = metadata(folder, ty)?;
    let file = std::fs::File::create(out).map_err(|source| ModelError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let mut writer = BufWriter::new(file);
    let meta_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut writer, &meta_refs, &tensor_refs)?;
    std::io::Write::flush(&mut writer).map_err(|source| ModelError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(Exported {
        tensors: tensors.len(),
        fallbacks,
    })
}

fn name_of(hf: &str) -> Result<String, ModelError> {
    gguf_name(hf)
        .ok_or_else(|| ModelError::InvalidOptions(format!("no GGUF name for tensor `{hf}`")))
}

/// The `general.*`, `llama.*` and `tokenizer.*` keys.
fn metadata(folder: &ModelFolder, ty: GgufType) -> Result<Vec<(String, Value)>, ModelError> {
    let cfg = folder.config();
    let u32_of = |v: usize| Value::U32(v as u32);
    let mut meta = vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.name", Value::String(folder.name())),
        ("general.file_type", Value::U32(ty.file_type())),
        ("llama.context_length", u32_of(cfg.max_position_embeddings)),
        ("llama.embedding_length", u32_of(cfg.hidden_size)),
        ("llama.block_count", u32_of(cfg.num_hidden_layers)),
        ("llama.feed_forward_length", u32_of(cfg.intermediate_size)),
        (
            "llama.attention.head_count",
            u32_of(cfg.num_attention_heads),
        ),
        (
            "llama.attention.head_count_kv",
            u32_of(cfg.num_key_value_heads),
        ),
        ("llama.attention.key_length", u32_of(cfg.head_dim)),
        ("llama.attention.value_length", u32_of(cfg.head_dim)),
        ("llama.rope.dimension_count", u32_of(cfg.head_dim)),
        ("llama.rope.freq_base", Value::F32(cfg.rope_theta as f32)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(cfg.rms_norm_eps as f32),
        ),
        ("llama.vocab_size", u32_of(cfg.vocab_size)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect::<Vec<_>>();
    meta.extend(tokenizer_metadata(folder)?);
    Ok(meta)
}

/// The folder's tokenizer.json (a byte-level BPE) as `tokenizer.ggml.*`.
fn tokenizer_metadata(folder: &ModelFolder) -> Result<Vec<(String, Value)>, ModelError> {
    let path = folder.path().join("tokenizer.json");
    let invalid = |message: &str| ModelError::InvalidTokenizer {
        path: path.clone(),
        message: format!("{message}; GGUF export takes a byte-level BPE tokenizer"),
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
        path: path.clone(),
        source,
    })?;
    let json: Json = serde_json::from_str(&text).map_err(|source| ModelError::InvalidJson {
        path: path.clone(),
        source,
    })?;
    let model = &json["model"];
    if model["type"] != "BPE" || json["pre_tokenizer"]["type"] != "ByteLevel" {
        return Err(invalid(
            "model.type must be BPE and pre_tokenizer ByteLevel",
        ));
    }
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| invalid("model.vocab is not a map"))?;
    let mut tokens = vec![None; vocab.len()];
    let mut types = vec![1i32; vocab.len()];
    let mut place = |token: &str, id: u64, kind: i32| -> Result<(), ModelError> {
        let id = id as usize;
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
            types.resize(id + 1, 1);
        }
        tokens[id] = Some(token.to_string());
        types[id] = kind;
        Ok(())
    };
    for (token, id) in vocab {
        place(
            token,
            id.as_u64()
                .ok_or_else(|| invalid("a vocab id is not an integer"))?,
            1,
        )?;
    }
    for added in json["added_tokens"].as_array().into_iter().flatten() {
        let (Some(content), Some(id)) = (added["content"].as_str(), added["id"].as_u64()) else {
            return Err(invalid("an added token lacks content or id"));
        };
        let kind = if added["special"].as_bool().unwrap_or(false) {
            3
        } else {
            4
        };
        place(content, id, kind)?;
    }
    let tokens: Vec<Value> = tokens
        .into_iter()
        .enumerate()
        .map(|(id, t)| {
            t.map(Value::String)
                .ok_or_else(|| invalid(&format!("no token has id {id}")))
        })
        .collect::<Result<_, _>>()?;
    let merges: Vec<Value> = model["merges"]
        .as_array()
        .ok_or_else(|| invalid("model.merges is not a list"))?
        .iter()
        .map(|m| match m {
            Json::String(s) => Ok(Value::String(s.clone())),
            Json::Array(pair) if pair.len() == 2 => Ok(Value::String(format!(
                "{} {}",
                pair[0].as_str().unwrap_or_default(),
                pair[1].as_str().unwrap_or_default()
            ))),
            _ => Err(invalid("a merge is neither \"a b\" nor [a, b]")),
        })
        .collect::<Result<_, _>>()?;
    let tokenizer = folder.tokenizer();
    let mut meta = vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("gpt-2".into())),
        ("tokenizer.ggml.tokens", Value::Array(tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", Value::Array(merges)),
    ];
    if let Some(bos) = tokenizer.bos_token_id() {
        let adds_bos = tokenizer.encode("a", true)?.first() == Some(&bos);
        meta.push(("tokenizer.ggml.bos_token_id", Value::U32(bos)));
        meta.push(("tokenizer.ggml.add_bos_token", Value::Bool(adds_bos)));
    }
    let eos = tokenizer.eos_token_ids();
    if let Some(&first) = eos.first() {
        meta.push(("tokenizer.ggml.eos_token_id", Value::U32(first)));
    }
    if let Some(&second) = eos.get(1) {
        meta.push(("tokenizer.ggml.eot_token_id", Value::U32(second)));
    }
    if let Some(template) = tokenizer.chat_template() {
        meta.push((
            "tokenizer.chat_template",
            Value::String(template.to_string()),
        ));
    }
    Ok(meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}
