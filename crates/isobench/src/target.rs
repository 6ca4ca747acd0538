//! Where the requests of `run`, `sweep` and `plan` go, and the connection
//! to it: an external endpoint (`--target URL`), or the embedded server,
//! started in-process on 127.0.0.1 with a free port and stopped after the
//! measurements ([`Target`]); then the HTTP backend, checked by a
//! preflight ([`Endpoint::connect`]).
//!
//! [`EndpointArgs`] are the flags every measuring command shares.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use isobench_api::SamplingParams;
use isobench_loadgen::{HttpBackend, HttpBackendConfig, LoadgenError};
use isobench_server::{BatchingConfig, EngineArgs, Server, ServerConfig, ServerHandle};
use isobench_workload::Workload;

use crate::default_model::{DEFAULT_SERVER_MODEL, resolve_model_folder};
use crate::run::precheck;
use crate::tokens::TokenizerCounter;

/// The flags of the endpoint and the client, shared by `run`, `sweep` and `plan`.
#[derive(clap::Args)]
pub struct EndpointArgs {
    /// Base URL of an OpenAI-compatible endpoint (`http://host:port`, with or
    /// without `/v1`). Without it, isobench's own model server is started
    /// in-process on 127.0.0.1 and stopped after the run.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,

    /// Model name sent in every request. Default: the only model the
    /// endpoint lists.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,

    /// Environment variable holding the endpoint's API key (sent as
    /// `Authorization: Bearer`). The key itself is never a flag and never
    /// printed. Without --target, the embedded server's variable (ISOBENCH_API_KEY).
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,

    /// Use HTTP/2 (prior knowledge for http://, ALPN for https://).
    #[arg(long)]
    pub http2: bool,

    /// Ask for `usage` in every stream chunk (vLLM's
    /// `stream_options.continuous_usage_stats`), so that each event's token
    /// count is exact for the per-token ITL view. Always on against the
    /// embedded server; strict endpoints may reject the field.
    #[arg(long)]
    pub usage_per_event: bool,

    /// Tokenizer (`tokenizer.json`) of the endpoint's model: prompts get
    /// exact token counts and streamed text is counted when the server
    /// reports no usage. Default: the workload's `tokenizer`, or the
    /// embedded model's.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,

    /// Model folder of the embedded server (used without --target).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SERVER_MODEL)]
    pub server_model: PathBuf,

    /// Per-request timeout, e.g. `30s`. Default: the workload's (300 s).
    #[arg(long, value_name = "DURATION", value_parser = precheck::positive_duration)]
    pub timeout: Option<Duration>,

    /// The largest streamed event accepted, in bytes; a larger one fails
    /// its request as `malformed_event`.
    #[arg(long, value_name = "BYTES", default_value = "1048576", value_parser = precheck::event_bytes)]
    pub max_event_bytes: usize,

    /// Prometheus metrics to sample during the run into the report's time
    /// line (the server's queue, batch and KV cache). Default: the target's
    /// `/metrics`, when it answers with metrics isobench reads; `none` to
    /// scrape nothing.
    #[arg(long, value_name = "URL|none")]
    pub scrape_metrics: Option<String>,

    /// Time between two scrapes of the metrics.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = precheck::positive_duration)]
    pub scrape_interval: Duration,
}

/// The embedded server's configuration: on a free loopback port, with
/// `batching` (from [`BatchingArgs`], which holds the server's defaults)
/// and the engine's flags.
pub fn embedded_config(
    folder: &Path,
    batching: BatchingConfig,
    engine: &EngineArgs,
) -> ServerConfig {
    let mut config = ServerConfig::new(folder);
    config.port = 0;
    config.batching = batching;
    engine.apply(&mut config);
    config
}

/// Where the requests go.
pub enum Target {
    External(String),
    Embedded {
        server: Box<ServerHandle>,
        folder: PathBuf,
        /// The configuration in words, for the report.
        description: String,
    },
}

impl Target {
    /// `--target`, or else the embedded server `config` describes.
    pub async fn start(
        args: &EndpointArgs,
        embedded: impl FnOnce(&Path) -> ServerConfig,
    ) -> anyhow::Result<Self> {
        if let Some(url) = &args.target {
            return Ok(Target::External(url.clone()));
        }
        let folder = resolve_model_folder(&args.server_model)?;
        Self::embedded(embedded(&folder), folder).await
    }

    /// Starts the embedded server of `config` (whose model is `folder`).
    pub async fn embedded(config: ServerConfig, folder: PathBuf) -> anyhow::Result<Self> {
        let batching = describe_batching(&config.batching);
        eprintln!(
            "no --target: starting the embedded server ({}, {batching})",
            folder.display()
        );
        let server = Server::start(config)
            .await
            .with_context(|| format!("starting the embedded server for {}", folder.display()))?;
        let description = format!(
            "embedded {}, {batching}, KV pool {} blocks",
            folder.display(),
            server.stats().kv_blocks_total
        );
        Ok(Target::Embedded {
            server: Box::new(server),
            folder,
            description,
        })
    }

    pub fn url(&self) -> String {
        match self {
            Target::External(url) => url.clone(),
            Target::Embedded { server, .. } => server.url(),
        }
    }

    /// The embedded server's configuration in words.
    pub fn description(&self) -> Option<String> {
        match self {
            Target::External(_) => None,
            Target::Embedded { description, .. } => Some(description.clone()),
        }
    }

    /// The embedded model's tokenizer, for exact prompt lengths.
    pub fn tokenizer(&self) -> Option<PathBuf> {
        match self {
            Target::External(_) => None,
            Target::Embedded { folder, .. } => Some(folder.join("tokenizer.json")),
        }
    }

    pub async fn stop(self) {
        if let Target::Embedded { server, .. } = self {
            server.shutdown().await;
        }
    }
}

/// The batching policy in words, with every limit that the device's
/// defaults may have set: `continuous batching (max 64 sequences, 512
/// tokens a step)`.
pub fn describe_batching(batching: &BatchingConfig) -> String {
    match *batching {
        BatchingConfig::Static {
            max_batch_size,
            max_num_batched_tokens,
        } => format!(
            "static batching (max batch {max_batch_size}, {max_num_batched_tokens} tokens a step)"
        ),
        BatchingConfig::Dynamic {
            max_batch_size,
            max_wait,
            max_num_batched_tokens,
        } => format!(
            "dynamic batching (max batch {max_batch_size}, max wait {} ms, {max_num_batched_tokens} tokens a step)",
            max_wait.as_millis()
        ),
        BatchingConfig::Continuous {
            max_num_seqs,
            max_num_batched_tokens,
        } => format!(
            "continuous batching (max {max_num_seqs} sequences, {max_num_batched_tokens} tokens a step)"
        ),
    }
}

/// A checked connection to the target.
pub struct Endpoint {
    pub backend: Arc<HttpBackend>,
    pub model: String,
    /// The tokenizer prompts are built with, when known.
    pub tokenizer: Option<PathBuf>,
}

impl Endpoint {
    /// Builds the HTTP backend for `workload` and checks the endpoint.
    pub async fn connect(
        args: &EndpointArgs,
        workload: &Workload,
        target: &Target,
    ) -> anyhow::Result<Self> {
        let tokenizer = args
            .tokenizer
            .clone()
            .or_else(|| workload.tokenizer().map(Path::to_path_buf))
            .or_else(|| target.tokenizer());
        let embedded = matches!(target, Target::Embedded { .. });
        let api_key_env = if embedded {
            isobench_server::config::DEFAULT_API_KEY_ENV.to_owned()
        } else {
            args.api_key_env.clone()
        };
        let sampling = workload.sampling();
        let mut config = HttpBackendConfig::new(target.url(), "");
        config.api = workload.api();
        config.stream = workload.stream();
        config.headers = workload
            .headers()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        config.extra_body = workload.extra_body().clone();
        config.api_key = std::env::var(&api_key_env)
            .ok()
            .filter(|key| !key.is_empty());
        config.timeout = args.timeout.unwrap_or_else(|| workload.timeout());
        config.max_event_bytes = args.max_event_bytes;
        config.http2 = args.http2;
        config.continuous_usage = args.usage_per_event || embedded;
        config.sampling = SamplingParams {
            temperature: sampling.temperature.map(|t| t as f32),
            top_p: sampling.top_p.map(|p| p as f32),
            top_k: sampling.top_k.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
            seed: None,
            ignore_eos: workload.ignore_eos().then_some(true),
            ..SamplingParams::default()
        };
        if let Some(path) = &tokenizer {
            config.token_counter = Some(Arc::new(TokenizerCounter::from_file(path)?));
        }
        let model = match (&args.model, target) {
            (Some(model), _) => model.clone(),
            (None, Target::Embedded { server, .. }) => server.model_name().to_owned(),
            (None, Target::External(_)) => {
                only_listed_model(HttpBackend::new(config.clone())?).await?
            }
        };
        config.model = model.clone();
        let backend = HttpBackend::new(config)?;
        backend.preflight().await?;
        Ok(Self {
            backend: Arc::new(backend),
            model,
            tokenizer,
        })
    }
}

/// Without `--model`: the model an endpoint lists, when it lists exactly one.
async fn only_listed_model(probe: HttpBackend) -> anyhow::Result<String> {
    match probe.preflight().await {
        Err(LoadgenError::UnknownModel { available, url, .. }) => match available.as_slice() {
            [only] => Ok(only.clone()),
            [] => bail!("{url} lists no models: pass --model NAME"),
            many => bail!(
                "{url} serves several models: pass --model with one of: {}",
                many.join(", ")
            ),
        },
        Err(err) => Err(err.into()),
        Ok(_) => bail!("pass --model NAME"),
    }
}
