//! isobench model: a Candle Llama-family causal LM (Llama 2/3, Mistral,
//! Qwen2) whose attention reads and writes a paged KV cache.
//!
//! The server owns the block allocator and decides which cache slots each
//! sequence uses; the model owns the computation and runs one step over a
//! [`StepBatch`] of sequences, each bringing its new tokens (a prompt chunk
//! or one decode token) and its block table.
//!
//! ```no_run
//! use candle_core::Device;
//! use isobench_model::{KvCache, ModelFolder, SeqStep, StepBatch, load_model};
//!
//! # fn main() -> Result<(), isobench_model::ModelError> {
//! let folder = ModelFolder::open("models/tiny-llama")?;
//! let mut model = load_model(&folder, &Device::Cpu, None)?;
//! let mut cache = KvCache::new(folder.config(), 64, 16, model.device(), model.dtype())?;
//! let prompt = folder.tokenizer().encode("Hello", true)?;
//! let n = prompt.len() as u32;
//! let step = StepBatch {
//!     positions: (0..n).collect(),
//!     slot_mapping: (0..n).collect(), // block 0, offsets 0..n
//!     token_ids: prompt,
//!     seqs: vec![SeqStep { num_new_tokens: n, context_len: n, block_table: vec![0] }],
//! };
//! let logits = model.forward(&step, &mut cache)?; // [1, vocab], f32
//! # Ok(()) }
//! ```
//!
//! On a GPU, open the device with [`parse_device`] and load with
//! [`load_model_with`]: decode steps then replay CUDA graphs captured per
//! batch-size bucket ([`ModelOptions`]), and [`CausalLm::last_step`] says
//! whether they did and how long the step took on the device.
//!
//! A GGUF file (llama.cpp's format) opens like a folder
//! (`ModelFolder::open("model.gguf")`), and [`export_gguf`] writes a folder
//! as one.
//!
//! Inside: `config` parses config.json, `folder` finds the files,
//! `weights` and `seeded` provide tensors (memory-mapped safetensors or
//! deterministic random ones), `gguf` reads and writes GGUF files, `llama`
//! is the network, `cpu` runs it on the CPU with this crate's own kernels
//! (SIMD projections, one thread pool, reused buffers), `rope` its rotary
//! embeddings, `paged_attention` its CPU and CUDA kernels, `decode` the
//! CUDA kernels of single-token steps, `fused` two fused elementwise ops
//! of the other steps (SwiGLU's product, residual add and RMSNorm),
//! `argmax` the greedy token of each row of logits, `sample` a token
//! drawn at random from each, `kernels`
//! loads the CUDA modules and launches the dependent ones, `cache` the KV
//! storage, `step` turns a [`StepBatch`] into tensors, `graph` captures and
//! replays decode steps (CUDA builds), `timer` times steps with CUDA
//! events, `host_copy` brings logits to the host through a reused
//! (on a GPU, page-locked) buffer, `device` opens devices, `tokenizer` and
//! `incremental` handle text. docs/models.md is the user-facing description.

mod argmax;
mod batch;
mod cache;
mod config;
mod cpu;
#[cfg(feature = "cuda")]
mod decode;
mod device;
mod error;
mod folder;
mod fused;
mod gguf;
#[cfg(feature = "cuda")]
mod graph;
mod graph_shapes;
mod host_copy;
mod incremental;
#[cfg(feature = "cuda")]
mod kernels;
mod llama;
mod options;
mod paged_attention;
mod rope;
mod sample;
mod seeded;
mod step;
mod timer;
mod tokenizer;
mod warm_up;
mod weights;

pub use argmax::{argmax, greedy_tokens};
pub use batch::{SeqStep, StepBatch};
pub use cache::KvCache;
pub use config::{Architecture, ModelConfig, RopeScaling, WeightSeed};
pub use device::{DeviceMemory, device_memory, parse_device, release_idle_memory};
pub use error::ModelError;
pub use folder::ModelFolder;
pub use gguf::export::{Exported, GgufType, export_gguf};
pub use graph_shapes::{DEFAULT_GRAPH_TOKEN_BUCKETS, GraphShape, GraphShapes};
pub use host_copy::HostBuffer;
pub use incremental::IncrementalDecoder;
pub use options::{DEFAULT_GRAPH_BUCKETS, ModelOptions, StepStats};
pub use sample::{Draw, sample_tokens};
pub use tokenizer::Tokenizer;
pub use warm_up::{capture_graphs, warm_up};
pub use weights::WeightCache;

pub use candle_core::{DType, Device, Tensor};

/// The paged-attention ops and the fused elementwise kernels over plain
/// tensors, for examples/gpu_kernels.rs (CUDA kernels checked against the
/// CPU's or candle's); not an API.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub mod kernels_for_checks {
    pub use crate::fused::checks::{
        add_rms_norm, rope_write_kv, silu_mul, silu_mul_counted, to_f32_counted,
    };
    pub use crate::paged_attention::checks::{paged_attention, write_kv};
}

use weights::Weights;

/// The instruction set the CPU step's kernels use on this machine:
/// `avx512`, `avx2+fma` or `portable` (see docs/performance.md).
pub fn cpu_kernels() -> &'static str {
    cpu::Isa::detect().name()
}

/// A causal language model that runs steps over a paged KV cache.
pub trait CausalLm: Send {
    fn config(&self) -> &ModelConfig;
    fn device(&self) -> &Device;
    /// The compute dtype; the KV cache must use it too.
    fn dtype(&self) -> DType;
    /// Writes the new tokens' K/V into `cache` at `batch.slot_mapping`,
    /// returns f32 logits [num_seqs, vocab] for each sequence's last new
    /// token. An inconsistent batch (see [`StepBatch`]) or a cache made for
    /// another model is an error, never a panic.
    fn forward(&mut self, batch: &StepBatch, cache: &mut KvCache) -> Result<Tensor, ModelError>;
    /// What the last `forward` did: graph replay, padded batch, and on a
    /// GPU its device time (reading it waits for the step to finish).
    fn last_step(&self) -> StepStats;
    /// The buckets of the step shapes this model replays from CUDA graphs
    /// (each captured at its first step, or ahead by [`capture_graphs`]);
    /// `None` when it replays none (the CPU, graphs off).
    fn graph_shapes(&self) -> Option<GraphShapes>;
}

/// Loads the folder's weights onto `device`, computing in `dtype`; by
/// default f32 on the CPU (whatever the checkpoint's dtype) and the
/// checkpoint's `torch_dtype` elsewhere. CUDA graphs on, with the default
/// buckets (see [`load_model_with`]).
pub fn load_model(
    folder: &ModelFolder,
    device: &Device,
    dtype: Option<DType>,
) -> Result<Box<dyn CausalLm>, ModelError> {
    let options = ModelOptions {
        dtype,
        ..ModelOptions::default()
    };
    load_model_with(folder, device, &options)
}

/// Loads the folder's weights onto `device` as `options` say. On a CUDA
/// device (open it with [`parse_device`]) with `cuda_graphs` on, a step
/// replays a CUDA graph captured, on first use (or ahead, by
/// [`capture_graphs`]), for the smallest buckets that hold it, padded: a
/// decode step (every sequence brings one token) by its sequences, a step
/// with prompt tokens by its sequences and its tokens; a step larger than
/// the largest buckets runs eagerly.
pub fn load_model_with(
    folder: &ModelFolder,
    device: &Device,
    options: &ModelOptions,
) -> Result<Box<dyn CausalLm>, ModelError> {
    load(folder, device, options, None)
}

/// [`load_model_with`], sharing tensors with the other models of `folder`
/// loaded with `cache`: a benchmark or a check that builds several models
/// of one folder (graphs on and off, two kernel paths) reads or generates
/// each tensor once per dtype and device, and holds it once.
pub fn load_model_cached(
    folder: &ModelFolder,
    device: &Device,
    options: &ModelOptions,
    cache: &WeightCache,
) -> Result<Box<dyn CausalLm>, ModelError> {
    load(folder, device, options, Some(cache))
}

fn load(
    folder: &ModelFolder,
    device: &Device,
    options: &ModelOptions,
    cache: Option<&WeightCache>,
) -> Result<Box<dyn CausalLm>, ModelError> {
    let config = folder.config();
    let dtype = options.dtype.unwrap_or(match device {
        Device::Cpu => DType::F32,
        _ => config.torch_dtype.unwrap_or(DType::F32),
    });
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(ModelError::UnsupportedDtype(dtype));
    }
    if let Some(cache) = cache {
        cache.serve(folder.path())?;
    }
    let source = folder.weight_source()?;
    let weights = Weights::new(&source, dtype, device, cache);
    let model = llama::Llama::new(config, &weights, options)?;
    tracing::debug!(
        model = %folder.name(),
        parameters = config.num_parameters(),
        ?dtype,
        cuda_graphs = options.cuda_graphs && device.is_cuda(),
        "model loaded"
    );
    Ok(Box::new(model))
}
