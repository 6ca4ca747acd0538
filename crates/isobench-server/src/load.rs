//! Loading what the engine runs: the device from `--device`, the model on
//! it with its options (dtype, CUDA graphs), the KV pool sized from the
//! configuration and allocated on the model's device, the tokenizer and
//! the chat template.
//!
//! Pool size: `--kv-blocks` is taken as it is; `--kv-memory` is divided by
//! the bytes of one block; on CUDA without either, the pool takes
//! `--gpu-memory-fraction` (default 0.9) of the memory the device reports
//! free once the weights are loaded, so the rest stays for activations,
//! cuBLAS and CUDA-graph memory. The chosen size is logged at start.
//!
//! Before the server listens, one short prefill and one decode step run
//! in the pool's first blocks ([`warm_up`]): on a GPU the first step of a
//! process loads the kernels (seconds when the driver has to compile
//! candle's PTX) and captures the batch-1 graph, which would otherwise
//! land on the first request's TTFT. Then, on a GPU with graphs on, the
//! graph of every step shape the batching policy can ask for is captured
//! ([`capture_graphs`]), so that no served step waits for a capture.
//!
//! The server's [`Metrics`] are made here too: on a CUDA device the NVML
//! sampler of the GPU's memory and energy starts before the server
//! listens, so its first `/metrics` answer already describes the GPU.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use isobench_model::{
    CausalLm, Device, KvCache, ModelConfig, ModelFolder, ModelOptions, Tokenizer, capture_graphs,
    device_memory, load_model_with, parse_device, warm_up,
};

use crate::chat_template::ChatTemplate;
use crate::config::{DEFAULT_GPU_MEMORY_FRACTION, DEFAULT_KV_MEMORY, KvPoolSize, ServerConfig};
use crate::error::ServerError;
use crate::metrics::Metrics;

/// What loading the model folder produces.
pub(crate) struct Loaded {
    pub model: Box<dyn CausalLm>,
    pub cache: KvCache,
    pub tokenizer: Tokenizer,
    pub chat_template: ChatTemplate,
    pub template_from_model: bool,
    pub num_blocks: u32,
    pub max_model_len: u32,
    pub vocab_size: u32,
    pub metrics: Arc<Metrics>,
    /// How long the warm-up steps took (`None` when the pool had no room).
    pub warm_up: Option<Duration>,
    /// CUDA graphs captured before listening, and how long that took
    /// (`None` when the model replays none).
    pub graph_captures: Option<(usize, Duration)>,
}

impl Loaded {
    pub fn load(config: &ServerConfig) -> Result<Self, ServerError> {
        let device = parse_device(&config.device).map_err(|err| ServerError::Config {
            flag: "--device",
            message: err.to_string(),
        })?;
        let folder = ModelFolder::open(&config.model)?;
        if folder.is_gguf() && !device.is_cpu() {
            return Err(ServerError::Config {
                flag: "--model",
                message: format!(
                    "{} is a GGUF file, which runs on the CPU only; accepted: --device cpu, or a model folder",
                    config.model.display()
                ),
            });
        }
        if device.is_cpu() && config.cuda_graphs.is_some() {
            tracing::info!("--cuda-graphs is ignored on the CPU");
        }
        let options = ModelOptions {
            dtype: config.dtype.map(|d| d.to_candle()),
            cuda_graphs: config.cuda_graphs.unwrap_or(true),
            ..ModelOptions::default()
        };
        let mut model = load_model_with(&folder, &device, &options)?;
        let model_config = model.config();
        let block_size = config.block_size as usize;
        let num_blocks = pool_blocks(config, model.as_ref())?;
        let context = model_config.max_position_embeddings as u32;
        let max_model_len = match config.max_model_len {
            None => context,
            Some(len) if len <= context => len,
            Some(len) => {
                return Err(ServerError::Config {
                    flag: "--max-model-len",
                    message: format!(
                        "got {len}, but the model's max_position_embeddings is {context}; accepted: at most {context}"
                    ),
                });
            }
        };
        let mut cache = KvCache::new(
            model_config,
            num_blocks as usize,
            block_size,
            model.device(),
            model.dtype(),
        )?
        .with_context_limit(max_model_len as usize);
        let bytes_per_block = KvCache::bytes_per_block(model_config, block_size, model.dtype());
        tracing::info!(
            device = %config.device,
            dtype = ?model.dtype(),
            num_blocks,
            block_size,
            tokens = num_blocks as u64 * block_size as u64,
            bytes = num_blocks as u64 * bytes_per_block as u64,
            "KV pool allocated"
        );
        let metrics = Arc::new(Metrics::default());
        #[cfg(feature = "cuda")]
        crate::nvml::start_sampler(model.device(), &metrics);
        let tokenizer = folder.tokenizer().clone();
        let chat_template = ChatTemplate::new(
            tokenizer.chat_template(),
            &template_source(folder.path()),
            tokenizer.bos_token(),
            tokenizer.eos_token(),
        )?;
        let vocab_size = model_config.vocab_size as u32;
        let warm_up = warm_up(model.as_mut(), &mut cache)?;
        let step_tokens = config.batching.max_step_tokens();
        let graph_captures = capture_graphs(
            model.as_mut(),
            &mut cache,
            config.batching.max_running() as usize,
            step_tokens as usize,
        )?;
        if let Some((graphs, took)) = graph_captures {
            tracing::info!(graphs, seconds = took.as_secs_f64(), "CUDA graphs captured");
        }
        Ok(Self {
            template_from_model: tokenizer.chat_template().is_some(),
            vocab_size,
            model,
            cache,
            tokenizer,
            chat_template,
            num_blocks,
            max_model_len,
            metrics,
            warm_up,
            graph_captures,
        })
    }
}

/// The number of KV blocks the configuration asks for on the model's device.
fn pool_blocks(config: &ServerConfig, model: &dyn CausalLm) -> Result<u32, ServerError> {
    let device = model.device();
    let bytes_per_block =
        KvCache::bytes_per_block(model.config(), config.block_size as usize, model.dtype()) as u64;
    let (flag, budget) = match (config.kv_pool, device) {
        (KvPoolSize::Blocks(blocks), _) => return Ok(blocks),
        (KvPoolSize::Memory(bytes), _) => ("--kv-memory", bytes.0),
        (KvPoolSize::Auto, Device::Cpu) => ("--kv-memory", DEFAULT_KV_MEMORY.0),
        (KvPoolSize::DeviceFraction(_), Device::Cpu) => {
            return Err(ServerError::Config {
                flag: "--gpu-memory-fraction",
                message: "applies only to --device cuda; on the CPU size the pool with --kv-memory or --kv-blocks".into(),
            });
        }
        (KvPoolSize::Auto, _) => (
            "--gpu-memory-fraction",
            free_share(device, DEFAULT_GPU_MEMORY_FRACTION)?,
        ),
        (KvPoolSize::DeviceFraction(fraction), _) => {
            ("--gpu-memory-fraction", free_share(device, fraction)?)
        }
    };
    blocks_in(
        budget,
        bytes_per_block,
        flag,
        model.config(),
        config.block_size,
    )
}

/// `fraction` of the device's free memory, in bytes.
fn free_share(device: &Device, fraction: f64) -> Result<u64, ServerError> {
    let memory = device_memory(device).ok_or_else(|| ServerError::Config {
        flag: "--gpu-memory-fraction",
        message: "the device does not report its free memory; size the pool with --kv-blocks or --kv-memory".into(),
    })?;
    tracing::info!(
        free = memory.free,
        total = memory.total,
        fraction,
        "device memory after loading the weights"
    );
    Ok((memory.free as f64 * fraction) as u64)
}

/// How many blocks of `bytes_per_block` fit in `budget`; none is an error
/// naming the flag that set the budget.
fn blocks_in(
    budget: u64,
    bytes_per_block: u64,
    flag: &'static str,
    model: &ModelConfig,
    block_size: u32,
) -> Result<u32, ServerError> {
    let blocks = budget / bytes_per_block.max(1);
    if blocks == 0 {
        return Err(ServerError::Config {
            flag,
            message: format!(
                "{budget} bytes hold no KV block: one block of {block_size} tokens takes {bytes_per_block} bytes \
                 for this model ({} layers); accepted: a budget of at least {bytes_per_block} bytes",
                model.num_hidden_layers
            ),
        });
    }
    Ok(u32::try_from(blocks).unwrap_or(u32::MAX))
}

/// Where the chat template came from, for its errors.
fn template_source(folder: &Path) -> String {
    if folder.is_file() {
        format!("{} (tokenizer.chat_template)", folder.display())
    } else {
        folder.join("tokenizer_config.json").display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_llama(max_model_len: Option<u32>) -> Loaded {
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/tiny-llama");
        let mut config = ServerConfig::new(folder);
        config.kv_pool = crate::KvPoolSize::Blocks(256);
        config.max_model_len = max_model_len;
        Loaded::load(&config).unwrap()
    }

    /// tiny-llama says 2,048 positions: 128 blocks of 16 a table, unless
    /// `--max-model-len` narrows it (40 tokens: 3 blocks).
    #[test]
    fn max_model_len_narrows_the_block_tables() {
        let full = tiny_llama(None);
        assert_eq!(
            (full.max_model_len, full.cache.max_blocks_per_seq()),
            (2048, 128)
        );
        let limited = tiny_llama(Some(40));
        assert_eq!(
            (limited.max_model_len, limited.cache.max_blocks_per_seq()),
            (40, 3)
        );
    }
}
