//! Server configuration: the validated [`ServerConfig`] the server runs
//! with, and [`ServerArgs`], the raw command-line flags (clap derive, with
//! `ISOBENCH_*` environment fallbacks) that turn into one. [`EngineArgs`]
//! (device, dtype, CUDA graphs, KV pool size, context limit) and
//! [`BatchingArgs`] (the policy and its knobs) are the flags of the
//! engine itself: `isobench serve` has them inside [`ServerArgs`], and
//! `isobench run` flattens the same structs for its embedded server, so
//! both commands share one definition and one set of defaults.
//!
//! Every knob has a documented default, so `ServerConfig::new(model_path)`
//! is a complete configuration; [`ServerArgs::into_config`] rejects
//! combinations that make no sense (a knob of another batching policy, a
//! token budget smaller than the sequence limit) with a message naming the
//! flag and what it accepts.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::ServerError;
use crate::limits::{ConnectionArgs, ConnectionLimits};

/// Default `--block-size`: tokens per KV-cache block.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
/// Default KV pool budget on the CPU when neither `--kv-blocks` nor
/// `--kv-memory` is given.
pub const DEFAULT_KV_MEMORY: ByteSize = ByteSize(512 * 1024 * 1024);
/// Default `--gpu-memory-fraction`: on CUDA, the share of the device's free
/// memory (after loading the weights) that the KV pool takes.
pub const DEFAULT_GPU_MEMORY_FRACTION: f64 = 0.9;
/// The largest `--gpu-memory-fraction`: the rest is kept for activations,
/// cuBLAS workspaces and CUDA-graph memory.
pub const MAX_GPU_MEMORY_FRACTION: f64 = 0.95;
/// Default `--device`.
pub const DEFAULT_DEVICE: &str = "cpu";
/// Default `--max-waiting`: requests queued for admission before 429.
pub const DEFAULT_MAX_WAITING: usize = 1024;
/// Default `--max-wait` of the dynamic policy.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_millis(50);
/// Default `--max-body`: the largest request body accepted.
pub const DEFAULT_MAX_BODY: ByteSize = ByteSize(4 * 1024 * 1024);
/// Default `--api-key-env`.
pub const DEFAULT_API_KEY_ENV: &str = "ISOBENCH_API_KEY";

/// Everything the server needs to start.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Model folder (Hugging Face layout).
    pub model: PathBuf,
    /// Name clients use in `model`; the folder name when `None`.
    pub served_model_name: Option<String>,
    pub host: IpAddr,
    /// 0 picks a free port (see [`crate::ServerHandle::addr`]).
    pub port: u16,
    pub batching: BatchingConfig,
    /// Tokens per KV-cache block.
    pub block_size: u32,
    pub kv_pool: KvPoolSize,
    /// Requests waiting for admission before new ones get 429.
    pub max_waiting: usize,
    /// Context length limit; the model's `max_position_embeddings` when `None`
    /// (a larger value is rejected at start).
    pub max_model_len: Option<u32>,
    /// Environment variable holding the API key; when it is set and not
    /// empty, `/v1/*` requests must send `Authorization: Bearer <key>`.
    pub api_key_env: String,
    /// Device the model runs on: `cpu`, `cuda` or `cuda:N` (parsed by
    /// [`isobench_model::parse_device`] when the server starts).
    pub device: String,
    /// Compute dtype; the model's default (f32 on CPU) when `None`.
    pub dtype: Option<DTypeArg>,
    /// CUDA graphs of model steps; `None` is on. Ignored on the CPU (with
    /// an info log when set).
    pub cuda_graphs: Option<bool>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Timeouts, the connection cap and the shutdown timeout.
    pub limits: ConnectionLimits,
}

impl ServerConfig {
    /// A configuration with every default: continuous batching, 127.0.0.1:8000.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            served_model_name: None,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8000,
            batching: BatchingConfig::default(),
            block_size: DEFAULT_BLOCK_SIZE,
            kv_pool: KvPoolSize::Auto,
            max_waiting: DEFAULT_MAX_WAITING,
            max_model_len: None,
            api_key_env: DEFAULT_API_KEY_ENV.to_owned(),
            device: DEFAULT_DEVICE.to_owned(),
            dtype: None,
            cuda_graphs: None,
            max_body_bytes: DEFAULT_MAX_BODY.0 as usize,
            limits: ConnectionLimits::default(),
        }
    }

    /// Checks the knobs that need no model: positive sizes, budgets that
    /// can hold the sequence limit.
    pub fn validate(&self) -> Result<(), ServerError> {
        let bad = |flag: &'static str, message: String| ServerError::Config { flag, message };
        if self.block_size == 0 || self.block_size > 1024 {
            return Err(bad(
                "--block-size",
                format!("got {}; accepted: 1 to 1024 tokens", self.block_size),
            ));
        }
        match self.kv_pool {
            KvPoolSize::Blocks(0) => {
                return Err(bad(
                    "--kv-blocks",
                    "got 0; accepted: at least 1 block".into(),
                ));
            }
            KvPoolSize::Memory(ByteSize(0)) => {
                return Err(bad(
                    "--kv-memory",
                    "got 0 bytes; accepted: a size such as 512MiB".into(),
                ));
            }
            KvPoolSize::DeviceFraction(fraction)
                if !(fraction > 0.0 && fraction <= MAX_GPU_MEMORY_FRACTION) =>
            {
                return Err(bad(
                    "--gpu-memory-fraction",
                    format!(
                        "got {fraction}; accepted: a number above 0 and at most {MAX_GPU_MEMORY_FRACTION}, e.g. 0.9"
                    ),
                ));
            }
            _ => {}
        }
        if self.max_waiting == 0 {
            return Err(bad(
                "--max-waiting",
                "got 0; accepted: at least 1 request".into(),
            ));
        }
        if self.max_model_len == Some(0) {
            return Err(bad(
                "--max-model-len",
                "got 0; accepted: at least 1 token".into(),
            ));
        }
        if self.max_body_bytes == 0 {
            return Err(bad(
                "--max-body",
                "got 0 bytes; accepted: a size such as 4MiB".into(),
            ));
        }
        if self.api_key_env.is_empty() {
            return Err(bad(
                "--api-key-env",
                "got an empty name; accepted: an environment variable name".into(),
            ));
        }
        self.limits.validate()?;
        self.batching.validate()
    }

    /// The model name clients send: the configured one, else the folder
    /// name (a GGUF file's name without `.gguf`).
    pub fn model_name(&self) -> String {
        if let Some(name) = &self.served_model_name {
            return name.clone();
        }
        let path = self
            .model
            .canonicalize()
            .unwrap_or_else(|_| self.model.clone());
        let name = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            path.file_stem()
        } else {
            path.file_name()
        };
        name.map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_owned())
    }
}

/// Which batching policy runs, with its knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchingConfig {
    /// Take up to `max_batch_size` waiting requests, run them to completion;
    /// each step computes at most `max_num_batched_tokens` tokens, so a
    /// batch whose prompts hold more is prefilled over several steps.
    Static {
        max_batch_size: u32,
        max_num_batched_tokens: u32,
    },
    /// Start a batch at `max_batch_size` requests or once the oldest has
    /// waited `max_wait`; run it to completion, computing at most
    /// `max_num_batched_tokens` tokens a step as static batching does.
    Dynamic {
        max_batch_size: u32,
        max_wait: Duration,
        max_num_batched_tokens: u32,
    },
    /// Admit and retire sequences every step, at most `max_num_seqs` running
    /// and `max_num_batched_tokens` computed per step (prefill is chunked).
    Continuous {
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
    },
}

impl Default for BatchingConfig {
    /// Continuous batching with the CPU's defaults.
    fn default() -> Self {
        let defaults = BatchingDefaults::CPU;
        BatchingConfig::Continuous {
            max_num_seqs: defaults.max_num_seqs,
            max_num_batched_tokens: defaults.max_num_batched_tokens,
        }
    }
}

/// The defaults of the batching knobs on one kind of device. On CUDA
/// every policy may run 128 sequences and continuous batching computes up
/// to 2,048 tokens a step, the limits `scripts/gpu-bench.sh` measures
/// with: a GPU decode step of 128 sequences takes about 1.4 times one of
/// 64 (the 8B shape on an H200: 12.2 against 8.8 ms), so the larger
/// batch is 1.4 times the tokens/s, and docs/performance.md compares the
/// budgets ("A larger token budget does not close the `batched` gap").
/// The CPU keeps the smaller limits its own benchmarks use.
///
/// Static and dynamic batching compute up to 8,192 tokens a step on either
/// device. Their steps once took whole prompts, but a batch of 128 prompts
/// of 512 to 1,024 tokens is about 98,000 tokens in one step, whose
/// activations on the 8B shape did not fit beside a KV pool that took 0.8
/// of an 80 GB GPU's free memory: every such step failed out of memory on
/// an H100 (docs/performance.md, "The full serving grid on an H100").
/// Steps of 8,192 tokens peaked 0.9 GiB above continuous batching's 2,048
/// there, and above about 2,000 tokens a step's GPU time grows in
/// proportion to its tokens, so a batch prefilled in such chunks costs
/// what one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchingDefaults {
    /// `--max-batch-size` of the static and dynamic policies.
    pub max_batch_size: u32,
    /// `--max-num-batched-tokens` of the static and dynamic policies (raised
    /// to `--max-batch-size` when that is larger).
    pub batch_step_tokens: u32,
    /// `--max-num-seqs` of the continuous policy.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens` of the continuous policy (raised to
    /// `--max-num-seqs` when that is larger).
    pub max_num_batched_tokens: u32,
}

impl BatchingDefaults {
    /// On the CPU.
    pub const CPU: Self = Self {
        max_batch_size: 32,
        batch_step_tokens: 8192,
        max_num_seqs: 64,
        max_num_batched_tokens: 512,
    };
    /// On a CUDA device.
    pub const CUDA: Self = Self {
        max_batch_size: 128,
        batch_step_tokens: 8192,
        max_num_seqs: 128,
        max_num_batched_tokens: 2048,
    };

    /// The defaults for a `--device` value: [`Self::CUDA`] for `cuda` and
    /// `cuda:N`, [`Self::CPU`] for anything else (a device that is neither
    /// is rejected when the server starts).
    pub fn for_device(device: &str) -> Self {
        if device.trim().starts_with("cuda") {
            Self::CUDA
        } else {
            Self::CPU
        }
    }
}

impl BatchingConfig {
    pub fn kind(&self) -> BatchingKind {
        match self {
            BatchingConfig::Static { .. } => BatchingKind::Static,
            BatchingConfig::Dynamic { .. } => BatchingKind::Dynamic,
            BatchingConfig::Continuous { .. } => BatchingKind::Continuous,
        }
    }

    /// The most sequences that run at once.
    pub fn max_running(&self) -> u32 {
        match *self {
            BatchingConfig::Static { max_batch_size, .. } => max_batch_size,
            BatchingConfig::Dynamic { max_batch_size, .. } => max_batch_size,
            BatchingConfig::Continuous { max_num_seqs, .. } => max_num_seqs,
        }
    }

    /// The most tokens one step computes (`max_num_batched_tokens`).
    pub fn max_step_tokens(&self) -> u32 {
        match *self {
            BatchingConfig::Static {
                max_num_batched_tokens,
                ..
            }
            | BatchingConfig::Dynamic {
                max_num_batched_tokens,
                ..
            }
            | BatchingConfig::Continuous {
                max_num_batched_tokens,
                ..
            } => max_num_batched_tokens,
        }
    }

    fn validate(&self) -> Result<(), ServerError> {
        let bad = |flag: &'static str, message: String| ServerError::Config { flag, message };
        let flag = match self.kind() {
            BatchingKind::Static | BatchingKind::Dynamic => "--max-batch-size",
            BatchingKind::Continuous => "--max-num-seqs",
        };
        let max_running = self.max_running();
        if max_running == 0 {
            return Err(bad(flag, "got 0; accepted: at least 1".into()));
        }
        let max_num_batched_tokens = self.max_step_tokens();
        if max_num_batched_tokens < max_running {
            return Err(bad(
                "--max-num-batched-tokens",
                format!(
                    "got {max_num_batched_tokens}, fewer than {flag} {max_running}; \
                     accepted: at least one token per running sequence"
                ),
            ));
        }
        Ok(())
    }
}

/// The `--batching` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BatchingKind {
    Static,
    Dynamic,
    #[default]
    Continuous,
}

impl BatchingKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            BatchingKind::Static => "static",
            BatchingKind::Dynamic => "dynamic",
            BatchingKind::Continuous => "continuous",
        }
    }
}

impl fmt::Display for BatchingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How big the KV block pool is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvPoolSize {
    /// The device's default: [`DEFAULT_KV_MEMORY`] on the CPU,
    /// [`DEFAULT_GPU_MEMORY_FRACTION`] of the free memory on CUDA.
    Auto,
    /// Exactly this many blocks.
    Blocks(u32),
    /// As many blocks as fit in this many bytes of cache.
    Memory(ByteSize),
    /// CUDA only: as many blocks as fit in this share of the device's free
    /// memory, measured after the weights are loaded.
    DeviceFraction(f64),
}

/// The `--cuda-graphs` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Toggle {
    On,
    Off,
}

/// The engine's flags: device, dtype, CUDA graphs, the KV pool size and
/// the context limit. [`ServerArgs`] flattens them for `isobench serve`,
/// and `isobench run` for its embedded server.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct EngineArgs {
    /// Device: cpu, cuda (the first GPU) or cuda:N [default: cpu]. CUDA needs
    /// a build with --features cuda (docs/gpu.md).
    #[arg(long, env = "ISOBENCH_DEVICE", value_name = "DEVICE")]
    pub device: Option<String>,
    /// Compute and KV-cache dtype [default: f32 on the CPU, the checkpoint's
    /// torch_dtype on CUDA].
    #[arg(long, value_enum)]
    pub dtype: Option<DTypeArg>,
    /// CUDA graphs of model steps [default: on]; ignored on the CPU.
    #[arg(long, value_enum, value_name = "on|off")]
    pub cuda_graphs: Option<Toggle>,
    /// CUDA: the share of the device's free memory, after loading the
    /// weights, that the KV pool takes; above 0, at most 0.95 [default: 0.9].
    #[arg(long, value_name = "F", conflicts_with_all = ["kv_blocks", "kv_memory"])]
    pub gpu_memory_fraction: Option<f64>,
    /// KV pool size in blocks (instead of --kv-memory or --gpu-memory-fraction).
    #[arg(long, value_name = "N", conflicts_with = "kv_memory")]
    pub kv_blocks: Option<u32>,
    /// KV pool size as a memory budget, e.g. 512MiB or 2GiB [default: 512MiB
    /// on the CPU, --gpu-memory-fraction on CUDA].
    #[arg(long, value_name = "SIZE")]
    pub kv_memory: Option<ByteSize>,
    /// Context limit of a sequence, prompt and output tokens, at most the
    /// model's; it also narrows every step's block table [default: the
    /// model's max_position_embeddings].
    #[arg(long, value_name = "N")]
    pub max_model_len: Option<u32>,
}

impl EngineArgs {
    /// The `--device` value, or the default (`cpu`).
    pub fn device(&self) -> &str {
        self.device.as_deref().unwrap_or(DEFAULT_DEVICE)
    }

    /// Writes these flags into `config`, leaving its values where a flag is
    /// not given; the caller validates the result.
    pub fn apply(&self, config: &mut ServerConfig) {
        if let Some(device) = &self.device {
            config.device = device.trim().to_owned();
        }
        if self.dtype.is_some() {
            config.dtype = self.dtype;
        }
        if let Some(toggle) = self.cuda_graphs {
            config.cuda_graphs = Some(toggle == Toggle::On);
        }
        match (self.kv_blocks, self.kv_memory, self.gpu_memory_fraction) {
            (Some(blocks), _, _) => config.kv_pool = KvPoolSize::Blocks(blocks),
            (None, Some(bytes), _) => config.kv_pool = KvPoolSize::Memory(bytes),
            (None, None, Some(fraction)) => {
                config.kv_pool = KvPoolSize::DeviceFraction(fraction);
            }
            (None, None, None) => {}
        }
        if self.max_model_len.is_some() {
            config.max_model_len = self.max_model_len;
        }
    }
}

/// The batching policy's flags: `isobench serve` has them inside
/// [`ServerArgs`], and `isobench run` flattens the same struct for its
/// embedded server, so both commands share one definition and one set of
/// defaults. A knob of another policy is an error, not ignored.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct BatchingArgs {
    /// Batching policy.
    #[arg(long, value_enum, default_value_t = BatchingKind::Continuous)]
    pub batching: BatchingKind,
    /// static/dynamic: the most requests in one batch [default: 32 on the
    /// CPU, 128 on CUDA].
    #[arg(long)]
    pub max_batch_size: Option<u32>,
    /// dynamic: start a smaller batch once the oldest request waited this long [default: 50ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_wait: Option<Duration>,
    /// continuous: the most sequences running at once [default: 64 on the
    /// CPU, 128 on CUDA].
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Tokens computed per step, decode tokens plus prefill chunks; longer
    /// prompts are prefilled over several steps [default: continuous 512 on
    /// the CPU, 2048 on CUDA; static and dynamic 8192].
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
}

impl BatchingArgs {
    /// The policy these flags describe on `device` (a `--device` value),
    /// with that device's default ([`BatchingDefaults::for_device`]) for
    /// every knob not given; a knob of another policy is rejected by name.
    pub fn to_config(&self, device: &str) -> Result<BatchingConfig, ServerError> {
        let defaults = BatchingDefaults::for_device(device);
        let kind = self.batching;
        let reject = |flag: &'static str, applies_to: &str| ServerError::Config {
            flag,
            message: format!("applies only to --batching {applies_to}, not --batching {kind}"),
        };
        if kind == BatchingKind::Continuous && self.max_batch_size.is_some() {
            return Err(reject("--max-batch-size", "static or dynamic"));
        }
        if kind != BatchingKind::Dynamic && self.max_wait.is_some() {
            return Err(reject("--max-wait", "dynamic"));
        }
        if kind != BatchingKind::Continuous && self.max_num_seqs.is_some() {
            return Err(reject("--max-num-seqs", "continuous"));
        }
        let max_batch_size = self.max_batch_size.unwrap_or(defaults.max_batch_size);
        let batch_step_tokens = self
            .max_num_batched_tokens
            .unwrap_or(defaults.batch_step_tokens.max(max_batch_size));
        Ok(match kind {
            BatchingKind::Static => BatchingConfig::Static {
                max_batch_size,
                max_num_batched_tokens: batch_step_tokens,
            },
            BatchingKind::Dynamic => BatchingConfig::Dynamic {
                max_batch_size,
                max_wait: self.max_wait.unwrap_or(DEFAULT_MAX_WAIT),
                max_num_batched_tokens: batch_step_tokens,
            },
            BatchingKind::Continuous => {
                let max_num_seqs = self.max_num_seqs.unwrap_or(defaults.max_num_seqs);
                BatchingConfig::Continuous {
                    max_num_seqs,
                    max_num_batched_tokens: self
                        .max_num_batched_tokens
                        .unwrap_or(defaults.max_num_batched_tokens.max(max_num_seqs)),
                }
            }
        })
    }
}

/// The `--dtype` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DTypeArg {
    F32,
    Bf16,
    F16,
}

impl DTypeArg {
    pub fn to_candle(self) -> candle_core::DType {
        match self {
            DTypeArg::F32 => candle_core::DType::F32,
            DTypeArg::Bf16 => candle_core::DType::BF16,
            DTypeArg::F16 => candle_core::DType::F16,
        }
    }
}

/// A size in bytes, parsed from `512MiB`, `1GiB`, `64KiB`, `2GB`, `1000000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(split);
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            _ => return Err(byte_size_help(text)),
        };
        let value: f64 = number.parse().map_err(|_| byte_size_help(text))?;
        let bytes = value * multiplier as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(byte_size_help(text));
        }
        Ok(ByteSize(bytes as u64))
    }
}

fn byte_size_help(text: &str) -> String {
    format!(
        "`{text}` is not a size; accepted: a number of bytes with an optional unit (B, KB, KiB, MB, MiB, GB, GiB), e.g. 512MiB"
    )
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (size, unit) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// The server's command-line flags, for `isobench serve` (flatten them into
/// a clap command) and anything else that wants the same flags. Turn them
/// into a [`ServerConfig`] with [`ServerArgs::into_config`].
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Model folder (Hugging Face layout: config.json, tokenizer.json, weights or a seed),
    /// or a llama.cpp GGUF file (f32, f16, bf16, Q8_0, Q4_K, Q6_K, ...).
    #[arg(long, env = "ISOBENCH_MODEL")]
    pub model: PathBuf,
    /// Name clients send in `model` [default: the folder name].
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Address to bind; 0.0.0.0 exposes the server to the network.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to bind; 0 picks a free one.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    #[command(flatten)]
    pub batching: BatchingArgs,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: u32,
    /// Requests waiting for admission before new ones get HTTP 429.
    #[arg(long, default_value_t = DEFAULT_MAX_WAITING)]
    pub max_waiting: usize,
    /// Environment variable holding the API key; when set, requests must send it as a bearer token.
    #[arg(long, default_value = DEFAULT_API_KEY_ENV)]
    pub api_key_env: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Largest request body accepted, e.g. 4MiB.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY)]
    pub max_body: ByteSize,
    #[command(flatten)]
    pub limits: ConnectionArgs,
}

impl ServerArgs {
    /// The validated configuration these flags describe.
    pub fn into_config(self) -> Result<ServerConfig, ServerError> {
        let batching = self.batching.to_config(self.engine.device())?;
        let max_body_bytes = usize::try_from(self.max_body.0).map_err(|_| ServerError::Config {
            flag: "--max-body",
            message: format!("{} is too large for this machine", self.max_body),
        })?;
        let mut config = ServerConfig {
            served_model_name: self.served_model_name,
            host: self.host,
            port: self.port,
            batching,
            block_size: self.block_size,
            max_waiting: self.max_waiting,
            api_key_env: self.api_key_env,
            max_body_bytes,
            limits: self.limits.into_limits(),
            ..ServerConfig::new(self.model)
        };
        self.engine.apply(&mut config);
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerArgs,
    }

    fn parse(args: &[&str]) -> Result<ServerConfig, String> {
        let mut argv = vec!["serve", "--model", "models/tiny-llama"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        cli.server.into_config().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_continuous_on_localhost() {
        let config = parse(&[]).unwrap();
        assert_eq!(config, ServerConfig::new("models/tiny-llama"));
        assert_eq!(config.host.to_string(), "127.0.0.1");
        assert_eq!(config.model_name(), "tiny-llama");
    }

    #[test]
    fn policy_knobs_are_parsed() {
        let config = parse(&[
            "--batching",
            "dynamic",
            "--max-batch-size",
            "8",
            "--max-wait",
            "20ms",
        ])
        .unwrap();
        assert_eq!(
            config.batching,
            BatchingConfig::Dynamic {
                max_batch_size: 8,
                max_wait: Duration::from_millis(20),
                max_num_batched_tokens: 8192
            }
        );
        let config = parse(&[
            "--batching",
            "static",
            "--max-batch-size",
            "8",
            "--max-num-batched-tokens",
            "100",
        ])
        .unwrap();
        assert_eq!(
            config.batching,
            BatchingConfig::Static {
                max_batch_size: 8,
                max_num_batched_tokens: 100
            }
        );
        let config = parse(&["--kv-memory", "64MiB", "--max-num-seqs", "4"]).unwrap();
        assert_eq!(config.kv_pool, KvPoolSize::Memory(ByteSize(64 << 20)));
        assert_eq!(config.batching.max_running(), 4);
    }

    /// A CUDA server's default token budget is the largest token bucket
    /// the model captures graphs for, so that continuous batching's steps
    /// with prompt tokens replay graphs (docs/gpu.md, CUDA graphs).
    #[test]
    fn the_cuda_token_budget_is_the_largest_graph_token_bucket() {
        assert_eq!(
            isobench_model::DEFAULT_GRAPH_TOKEN_BUCKETS.last().copied(),
            Some(BatchingDefaults::CUDA.max_num_batched_tokens as usize)
        );
    }

    #[test]
    fn batching_defaults_follow_the_device() {
        let on = |args: &[&str]| parse(args).unwrap().batching;
        assert_eq!(
            on(&[]),
            BatchingConfig::Continuous {
                max_num_seqs: 64,
                max_num_batched_tokens: 512
            }
        );
        for device in ["cuda", "cuda:1", " cuda:0"] {
            assert_eq!(
                on(&["--device", device]),
                BatchingConfig::Continuous {
                    max_num_seqs: 128,
                    max_num_batched_tokens: 2048
                },
                "{device}"
            );
        }
        assert_eq!(
            on(&["--batching", "static"]),
            BatchingConfig::Static {
                max_batch_size: 32,
                max_num_batched_tokens: 8192
            }
        );
        assert_eq!(
            on(&["--device", "cuda:0", "--batching", "static"]),
            BatchingConfig::Static {
                max_batch_size: 128,
                max_num_batched_tokens: 8192
            }
        );
        assert_eq!(
            on(&["--device", "cuda:0", "--batching", "dynamic"]),
            BatchingConfig::Dynamic {
                max_batch_size: 128,
                max_wait: DEFAULT_MAX_WAIT,
                max_num_batched_tokens: 8192
            }
        );
        // A flag given wins over the device's default; the token budget is
        // raised to a sequence limit above it.
        assert_eq!(
            on(&["--device", "cuda:0", "--max-num-seqs", "16"]),
            BatchingConfig::Continuous {
                max_num_seqs: 16,
                max_num_batched_tokens: 2048
            }
        );
        assert_eq!(
            on(&["--device", "cuda:0", "--max-num-seqs", "4096"]).max_step_tokens(),
            4096
        );
        assert_eq!(
            on(&["--batching", "dynamic", "--max-batch-size", "10000"]).max_step_tokens(),
            10000
        );
    }

    #[test]
    fn knob_of_another_policy_is_rejected_by_name() {
        let err = parse(&["--batching", "static", "--max-wait", "5ms"]).unwrap_err();
        assert!(
            err.contains("--max-wait") && err.contains("dynamic"),
            "{err}"
        );
        let err = parse(&["--max-batch-size", "4"]).unwrap_err();
        assert!(err.contains("--max-batch-size"), "{err}");
        let err = parse(&["--max-num-seqs", "64", "--max-num-batched-tokens", "8"]).unwrap_err();
        assert!(err.contains("--max-num-batched-tokens"), "{err}");
        let err = parse(&[
            "--batching",
            "static",
            "--max-batch-size",
            "16",
            "--max-num-batched-tokens",
            "8",
        ])
        .unwrap_err();
        assert!(
            err.contains("--max-num-batched-tokens") && err.contains("--max-batch-size 16"),
            "{err}"
        );
        let err = parse(&["--kv-blocks", "4", "--kv-memory", "1MiB"]).unwrap_err();
        assert!(err.contains("--kv-memory"), "{err}");
    }

    #[test]
    fn engine_flags_are_parsed() {
        let config = parse(&[
            "--device",
            "cuda:1",
            "--dtype",
            "bf16",
            "--cuda-graphs",
            "off",
            "--gpu-memory-fraction",
            "0.5",
        ])
        .unwrap();
        assert_eq!(config.device, "cuda:1");
        assert_eq!(config.dtype, Some(DTypeArg::Bf16));
        assert_eq!(config.cuda_graphs, Some(false));
        assert_eq!(config.kv_pool, KvPoolSize::DeviceFraction(0.5));
        let config = parse(&["--kv-blocks", "12"]).unwrap();
        assert_eq!(config.kv_pool, KvPoolSize::Blocks(12));
        assert_eq!(config.device, "cpu");
        assert_eq!(config.cuda_graphs, None);
    }

    #[test]
    fn bad_engine_flags_name_the_flag_and_what_is_accepted() {
        for fraction in ["0", "0.96", "-0.5", "NaN"] {
            let flag = format!("--gpu-memory-fraction={fraction}");
            let err = parse(&[&flag]).unwrap_err();
            assert!(
                err.contains("--gpu-memory-fraction") && err.contains("at most 0.95"),
                "{fraction}: {err}"
            );
        }
        let err = parse(&["--gpu-memory-fraction", "0.5", "--kv-blocks", "4"]).unwrap_err();
        assert!(err.contains("--kv-blocks"), "{err}");
        let err = parse(&["--cuda-graphs", "maybe"]).unwrap_err();
        assert!(err.contains("on") && err.contains("off"), "{err}");
    }

    #[test]
    fn byte_sizes_parse_and_print() {
        assert_eq!("512MiB".parse::<ByteSize>().unwrap(), ByteSize(512 << 20));
        assert_eq!("1.5GiB".parse::<ByteSize>().unwrap(), ByteSize(3 << 29));
        assert_eq!("2 GB".parse::<ByteSize>().unwrap(), ByteSize(2_000_000_000));
        assert_eq!("4096".parse::<ByteSize>().unwrap(), ByteSize(4096));
        assert!("lots".parse::<ByteSize>().unwrap_err().contains("512MiB"));
        assert!("5 parsecs".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(4 << 20).to_string(), "4MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
    }
}
