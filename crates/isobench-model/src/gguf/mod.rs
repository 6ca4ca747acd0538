//! GGUF model files, llama.cpp's format: one file holding the weights (f32,
//! f16, bf16 or quantized blocks), the architecture's shapes and the
//! tokenizer, as metadata. `isobench serve --model FILE.gguf` runs the same
//! file as llama.cpp.
//!
//! - The shapes become a [`ModelConfig`] through the same validation as a
//!   config.json (`llama.*` keys; see [`config_from_metadata`]).
//! - The tokenizer is rebuilt from `tokenizer.ggml.*` (see [`tokenizer`]).
//! - Tensors are read with candle's GGUF reader and renamed to the
//!   Hugging Face names the model asks for (`blk.0.attn_q.weight` is
//!   `model.layers.0.self_attn.q_proj.weight`). llama.cpp's converter
//!   permutes the rows of each q and k projection so that its rotary
//!   embedding, which rotates adjacent pairs, matches Hugging Face's, which
//!   rotates the two halves of a head; the reader undoes that permutation
//!   row by row (quantized rows included), so the model is the original.
//! - On the CPU step, f16 and bf16 weights stay as they are (read in half
//!   the bytes) and quantized ones run through candle's quantized matmul;
//!   anywhere else they are dequantized to the compute dtype.
//!
//! [`export`] writes a model folder as such a file (what the llama.cpp
//! comparison and the tests use).

pub(crate) mod export;
mod tokenizer;

use std::borrow::Cow;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{Device, Shape};

use crate::{ModelConfig, ModelError, Tokenizer};

/// The architectures a GGUF file may declare (`general.architecture`).
const ARCHITECTURES: &str = "llama";

/// An open GGUF file: its metadata and tensor index, read at open; tensors
/// are read when the model asks for them.
pub(crate) struct GgufFile {
    path: PathBuf,
    content: Content,
    reader: Mutex<BufReader<File>>,
    config: ModelConfig,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

impl GgufFile {
    /// Reads the header, metadata and tensor index of `path`, and the
    /// model configuration they describe.
    pub(crate) fn open(path: &Path) -> Result<Self, ModelError> {
        let invalid = |message: String| ModelError::InvalidWeights {
            path: path.to_path_buf(),
            message,
        };
        let file = File::open(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader)
            .map_err(|err| invalid(format!("not a readable GGUF file: {err}")))?;
        let file_size = reader
            .get_ref()
            .metadata()
            .map_err(|source| ModelError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        for (name, info) in &content.tensor_infos {
            let elements = info.shape.elem_count();
            let bytes = elements / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
            let end = content.tensor_data_offset + info.offset + bytes as u64;
            if end > file_size {
                return Err(invalid(format!(
                    "tensor `{name}` ends at byte {end}, past the end of the file ({file_size} bytes): the file is truncated"
                )));
            }
        }
        let config = config_from_metadata(path, &content)?;
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader: Mutex::new(reader),
            config,
        })
    }

    pub(crate) fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The tokenizer the metadata describes.
    pub(crate) fn tokenizer(&self) -> Result<Tokenizer, ModelError> {
        tokenizer::from_metadata(&self.path, &self.content.metadata)
    }

    /// The tensor the model calls `hf_name`, checked against `shape`, with
    /// llama.cpp's q/k row permutation undone.
    pub(crate) fn tensor(&self, hf_name: &str, shape: &Shape) -> Result<QTensor, ModelError> {
        let name = gguf_name(hf_name).ok_or_else(|| ModelError::MissingWeight {
            name: hf_name.to_string(),
            files: self.path.display().to_string(),
        })?;
        let Some(info) = self.content.tensor_infos.get(&name) else {
            return Err(ModelError::MissingWeight {
                name: format!("{name} ({hf_name})"),
                files: self.path.display().to_string(),
            });
        };
        if info.shape.dims() != shape.dims() {
            return Err(ModelError::WeightShape {
                path: self.path.clone(),
                name: name.clone(),
                expected: shape.dims().to_vec(),
                found: info.shape.dims().to_vec(),
            });
        }
        let tensor = {
            let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
            info.read(&mut *reader, self.content.tensor_data_offset, &Device::Cpu)
                .map_err(|err| ModelError::InvalidWeights {
                    path: self.path.clone(),
                    message: format!("tensor `{name}`: {err}"),
                })?
        };
        let heads = if name.ends_with("attn_q.weight") {
            self.config.num_attention_heads
        } else if name.ends_with("attn_k.weight") {
            self.config.num_key_value_heads
        } else {
            return Ok(tensor);
        };
        Ok(permute_rows(&tensor, heads, Direction::ToHuggingFace)?)
    }
}

/// Which way [`permute_rows`] goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// llama.cpp's converter's order (adjacent rotary pairs).
    ToGguf,
    /// Its inverse: Hugging Face's order (rotary halves).
    ToHuggingFace,
}

/// Reorders the rows of a q or k projection [heads * head_dim, k]: within
/// each head, Hugging Face row `a * head_dim / 2 + b` (a in 0..2) is GGUF
/// row `2 b + a`. Rows are moved whole, so quantized blocks stay intact.
pub(crate) fn permute_rows(
    tensor: &QTensor,
    heads: usize,
    direction: Direction,
) -> candle_core::Result<QTensor> {
    let (n, k) = tensor.shape().dims2()?;
    let dtype = tensor.dtype();
    let row_bytes = k / dtype.block_size() * dtype.type_size();
    let head_dim = n / heads;
    let half = head_dim / 2;
    let data = tensor.data()?;
    let mut out = vec![0u8; data.len()];
    for head in 0..heads {
        for a in 0..2 {
            for b in 0..half {
                let hf = head * head_dim + a * half + b;
                let gguf = head * head_dim + 2 * b + a;
                let (from, to) = match direction {
                    Direction::ToHuggingFace => (gguf, hf),
                    Direction::ToGguf => (hf, gguf),
                };
                out[to * row_bytes..(to + 1) * row_bytes]
                    .copy_from_slice(&data[from * row_bytes..(from + 1) * row_bytes]);
            }
        }
    }
    QTensor::new(
        QStorage::from_data(Cow::Owned(out), &Device::Cpu, dtype)?,
        (n, k),
    )
}

/// The GGUF name of a Hugging Face Llama tensor name.
pub(crate) fn gguf_name(hf_name: &str) -> Option<String> {
    let fixed = match hf_name {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = hf_name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let tensor = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{tensor}.{kind}"))
}

/// The element types a GGUF tensor may have here.
pub(crate) fn is_dense(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

/// A metadata value as u64/f64/string, or an error naming the key.
struct Metadata<'a> {
    path: &'a Path,
    content: &'a Content,
}

impl Metadata<'_> {
    fn error(&self, key: &str, message: &str) -> ModelError {
        ModelError::InvalidWeights {
            path: self.path.to_path_buf(),
            message: format!("metadata key `{key}` {message}"),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn integer(&self, key: &str) -> Result<Option<u64>, ModelError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let number = match value {
            Value::U8(v) => Some(u64::from(*v)),
            Value::U16(v) => Some(u64::from(*v)),
            Value::U32(v) => Some(u64::from(*v)),
            Value::U64(v) => Some(*v),
            Value::I32(v) => u64::try_from(*v).ok(),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        };
        number
            .map(Some)
            .ok_or_else(|| self.error(key, "must be a non-negative integer"))
    }

    fn required(&self, key: &str) -> Result<u64, ModelError> {
        self.integer(key)?
            .ok_or_else(|| self.error(key, "is missing; the model's shapes need it"))
    }

    fn float(&self, key: &str) -> Result<Option<f64>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(f64::from(*v))),
            Some(Value::F64(v)) => Ok(Some(*v)),
            Some(_) => Err(self.error(key, "must be a float")),
        }
    }

    fn string(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.error(key, "must be a string")),
        }
    }
}

/// The model configuration of a GGUF file's `llama.*` metadata, validated
/// as a config.json would be.
fn config_from_metadata(path: &Path, content: &Content) -> Result<ModelConfig, ModelError> {
    let meta = Metadata { path, content };
    let arch = meta.string("general.architecture")?.unwrap_or("");
    if arch != ARCHITECTURES {
        return Err(meta.error(
            "general.architecture",
            &format!("is `{arch}`; accepted: {ARCHITECTURES}"),
        ));
    }
    let key = |name: &str| format!("{arch}.{name}");
    let heads = meta.required(&key("attention.head_count"))?;
    let hidden = meta.required(&key("embedding_length"))?;
    let embeddings = content
        .tensor_infos
        .get("token_embd.weight")
        .ok_or_else(|| ModelError::MissingWeight {
            name: "token_embd.weight".into(),
            files: path.display().to_string(),
        })?;
    let vocab = match meta.integer(&key("vocab_size"))? {
        Some(vocab) => vocab,
        None => embeddings.shape.dims()[0] as u64,
    };
    if meta.get(&key("rope.scaling.type")).is_some()
        || content.tensor_infos.contains_key("rope_freqs.weight")
    {
        return Err(meta.error(
            &key("rope.scaling.type"),
            "(or a rope_freqs.weight tensor) asks for rotary frequency scaling, which GGUF files do not support here yet; accepted: files without it",
        ));
    }
    let mut config = serde_json::json!({
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": meta.required(&key("feed_forward_length"))?,
        "num_hidden_layers": meta.required(&key("block_count"))?,
        "num_attention_heads": heads,
        "num_key_value_heads": meta.integer(&key("attention.head_count_kv"))?.unwrap_or(heads),
        "rms_norm_eps": meta.float(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
        "rope_theta": meta.float(&key("rope.freq_base"))?.unwrap_or(10_000.0),
        "max_position_embeddings": meta.required(&key("context_length"))?,
        "tie_word_embeddings": !content.tensor_infos.contains_key("output.weight"),
    });
    if let Some(head_dim) = meta.integer(&key("attention.key_length"))? {
        config["head_dim"] = head_dim.into();
    }
    for (field, gguf_key) in [
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
    ] {
        if let Some(id) = meta.integer(gguf_key)? {
            config[field] = id.into();
        }
    }
    ModelConfig::from_json(&config.to_string(), path)
}
