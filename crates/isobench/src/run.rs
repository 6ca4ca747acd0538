//! `isobench run WORKLOAD`: load the workload, pick the target (an external
//! endpoint, or the embedded server started in-process), replay the plan,
//! and write the report: terminal table, JSON, optional CSV, and the
//! per-request JSONL log that the engine streams while the run goes.
//! Everything the end of the run needs (output paths, flag values) is
//! checked before it starts ([`precheck`]).
//! Against a target that describes its GPU on `/metrics` the report gets
//! a `gpu` section ([`crate::gpu`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use isobench_api::SamplingParams;
use isobench_loadgen::{
    HttpBackend, HttpBackendConfig, LoadgenError, ProgressMode, RunOptions, RunOutcome,
};
use isobench_metrics::{Recorder, Slo, assess_validity_with_max_error_rate};
use isobench_report::{PromptTokenSource, Report, RunMeta, format_started_at, table};
use isobench_server::{BatchingArgs, EngineArgs, Server, ServerConfig, ServerHandle};
use isobench_workload::{ApiKind, ArrivalKind, Overrides, PromptTokens, Workload};
use tokio_util::sync::CancellationToken;

use crate::default_model::{DEFAULT_SERVER_MODEL, resolve_model_folder};
use crate::gpu::GpuProbe;
use crate::tokens::TokenizerCounter;

mod precheck;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The workload file (TOML; see docs/workloads.md).
    workload: PathBuf,

    /// Base URL of an OpenAI-compatible endpoint (`http://host:port`, with or
    /// without `/v1`). Without it, isobench's own model server is started
    /// in-process on 127.0.0.1 and stopped after the run.
    #[arg(long, value_name = "URL")]
    target: Option<String>,

    /// Model name sent in every request. Default: the only model the
    /// endpoint lists.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,

    /// Environment variable holding the endpoint's API key (sent as
    /// `Authorization: Bearer`). The key itself is never a flag and never
    /// printed. Without --target, the embedded server's variable (ISOBENCH_API_KEY).
    #[arg(long, value_name = "VAR", default_value = "OPENAI_API_KEY")]
    api_key_env: String,

    /// Use HTTP/2 (prior knowledge for http://, ALPN for https://).
    #[arg(long)]
    http2: bool,

    /// Ask for `usage` in every stream chunk (vLLM's
    /// `stream_options.continuous_usage_stats`), so that each event's token
    /// count is exact for the per-token ITL view. Always on against the
    /// embedded server; strict endpoints may reject the field.
    #[arg(long)]
    usage_per_event: bool,

    /// Tokenizer (`tokenizer.json`) of the endpoint's model: prompts get
    /// exact token counts and streamed text is counted when the server
    /// reports no usage. Default: the workload's `tokenizer`, or the
    /// embedded model's.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,

    /// Model folder of the embedded server (used without --target).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SERVER_MODEL)]
    server_model: PathBuf,

    /// The embedded server's batching (used without --target): --batching,
    /// --max-batch-size, --max-wait, --max-num-seqs, --max-num-batched-tokens.
    #[command(flatten)]
    batching: BatchingArgs,

    /// The embedded server's engine (used without --target): --device,
    /// --dtype, --cuda-graphs, --gpu-memory-fraction, --kv-blocks, --kv-memory.
    #[command(flatten)]
    engine: EngineArgs,

    /// Closed loop: requests in flight. Open loop: a cap on requests in flight.
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,

    /// Open-loop rate in requests/s (Poisson unless --arrival says otherwise).
    #[arg(long, value_name = "R")]
    rate: Option<f64>,

    /// Arrival process: closed, constant, poisson, gamma, burst or trace.
    #[arg(long, value_name = "KIND")]
    arrival: Option<ArrivalKind>,

    /// Gamma arrivals' burstiness (shape): 1 is Poisson, below 1 burstier.
    #[arg(long, value_name = "B")]
    burstiness: Option<f64>,

    /// Stop after this many requests (warm-up excluded).
    #[arg(long, value_name = "N")]
    max_requests: Option<u64>,

    /// Stop sending after this long, e.g. `60s`, `5m`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,

    /// Warm-up requests, sent first and excluded from every figure.
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,

    /// Seed of prompts, lengths and arrival times.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,

    /// Service-level objectives, e.g. `ttft_p99=500ms,tpot_p99=50ms`
    /// (metrics ttft, tpot, itl, e2el; p50..p99.9 or mean). Goodput counts
    /// requests meeting all of them; a missed one makes the exit code 1.
    #[arg(long, value_name = "LIST")]
    slo: Vec<String>,

    /// Per-request timeout, e.g. `30s`. Default: the workload's (300 s).
    #[arg(long, value_name = "DURATION", value_parser = precheck::positive_duration)]
    timeout: Option<Duration>,

    /// The share of requests (failed / completed + failed) that may fail
    /// before the run is invalid and exits with 3; a run where every
    /// request failed always is.
    #[arg(long, value_name = "SHARE", default_value = "0.05", value_parser = precheck::error_rate)]
    max_error_rate: f64,

    /// The largest streamed event accepted, in bytes; a larger one fails
    /// its request as `malformed_event`.
    #[arg(long, value_name = "BYTES", default_value = "1048576", value_parser = precheck::event_bytes)]
    max_event_bytes: usize,

    /// JSON report path. Default: results/WORKLOAD-TIMESTAMP.json.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Per-request JSONL log, streamed while the run goes. Default: beside
    /// the report, as `.requests.jsonl`.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,

    /// Also append one row to this CSV file (created with a header).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,

    /// How long requests in flight may finish after sending stops.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10s")]
    drain_timeout: Duration,

    /// No progress bar: plain progress lines only.
    #[arg(long, short)]
    quiet: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut workload = Workload::from_file(&args.workload)?;
    workload.apply(&overrides(&args))?;
    let slos = Slos::collect(&workload, &args.slo)?;
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&workload));
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| output.with_extension("requests.jsonl"));
    precheck::writable("--output", &output)?;
    precheck::writable("--log", &log)?;
    if let Some(csv) = &args.csv {
        precheck::csv_appendable(csv)?;
    }

    let target = Target::start(&args).await?;
    let tokenizer = args
        .tokenizer
        .clone()
        .or_else(|| workload.tokenizer().map(Path::to_path_buf))
        .or_else(|| target.tokenizer());
    let plan = workload.plan(tokenizer.as_deref())?;

    let (backend, model) = connect(&args, &workload, &target, tokenizer.as_deref()).await?;

    let gpu = GpuProbe::start(&target.url()).await;
    let cancel = CancellationToken::new();
    let interrupt = tokio::spawn(watch_ctrl_c(cancel.clone()));
    let started_at = SystemTime::now();
    let options = RunOptions {
        progress: ProgressMode::detect(args.quiet),
        jsonl: Some(log.clone()),
        drain_timeout: args.drain_timeout,
        cancel,
        recorder: Recorder::with_slos(&slos.all),
        ..RunOptions::default()
    };
    let outcome = isobench_loadgen::run(plan, Arc::new(backend), options).await;
    interrupt.abort();
    let gpu = match (gpu, &outcome) {
        (Some(probe), Ok(outcome)) => Some(probe.finish(outcome.started, outcome.window()).await),
        _ => None,
    };
    let url = target.url();
    target.stop().await;
    let outcome = outcome?;

    let meta = RunMeta {
        workload: workload.name().to_owned(),
        workload_file: Some(args.workload.display().to_string()),
        target: url,
        model,
        api: api_name(workload.api()).to_owned(),
        streaming: workload.stream(),
        seed: Some(workload.seed()),
        load: outcome.shape.description.clone(),
        started_at: format_started_at(started_at),
        duration_s: outcome.elapsed.as_secs_f64(),
        interrupted: outcome.interrupted,
        prompt_token_source: match outcome.prompt_tokens {
            PromptTokens::Tokenizer => PromptTokenSource::Tokenizer,
            PromptTokens::Approximate => PromptTokenSource::Approximate,
        },
    };
    let mut report = build_report(meta, &outcome, args.max_error_rate);
    if let Some(gpu) = gpu {
        report = report.with_gpu(gpu);
    }
    println!("{}", table::render(&report));
    report.write_json(&output)?;
    eprintln!("report: {}", output.display());
    eprintln!(
        "per-request log: {} ({} requests)",
        log.display(),
        outcome.logged
    );
    if let Some(csv) = &args.csv {
        isobench_report::csv::append(&report, csv)?;
        eprintln!("csv row appended: {}", csv.display());
    }

    if outcome.interrupted {
        return Ok(ExitCode::from(130));
    }
    if report.validity.too_many_errors {
        eprintln!("invalid run: too many requests failed (--max-error-rate)");
        return Ok(ExitCode::from(3));
    }
    let missed: Vec<String> = report
        .summary
        .slos
        .iter()
        .filter(|result| !result.passed && slos.command_line.contains(&result.slo))
        .map(|result| result.slo.to_string())
        .collect();
    if !missed.is_empty() {
        eprintln!("SLO missed: {}", missed.join(", "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn overrides(args: &RunArgs) -> Overrides {
    Overrides {
        concurrency: args.concurrency,
        rate: args.rate,
        arrival: args.arrival,
        burstiness: args.burstiness,
        max_requests: args.max_requests,
        duration: args.duration,
        warmup: args.warmup,
        seed: args.seed,
    }
}

fn build_report(meta: RunMeta, outcome: &RunOutcome, max_error_rate: f64) -> Report {
    let summary = outcome.recorder.summarize(outcome.window_duration());
    let validity =
        assess_validity_with_max_error_rate(&summary, outcome.offered_rate, max_error_rate);
    Report::new(meta, summary, validity)
}

/// The SLOs of a run: the workload file's and the command line's. Goodput
/// counts requests meeting all of them; only the command line's decide the
/// exit code.
struct Slos {
    all: Vec<Slo>,
    command_line: Vec<Slo>,
}

impl Slos {
    fn collect(workload: &Workload, flags: &[String]) -> anyhow::Result<Self> {
        let mut all = Vec::new();
        for (key, value) in workload.slo() {
            let slo = Slo::from_key_value(key, value)
                .with_context(|| format!("{}: [slo] {key}", workload.path().display()))?;
            all.push(slo);
        }
        let mut command_line = Vec::new();
        for flag in flags {
            command_line.extend(Slo::parse_list(flag).context("--slo")?);
        }
        all.retain(|slo| !command_line.iter().any(|c| same_objective(c, slo)));
        all.extend(command_line.iter().cloned());
        Ok(Self { all, command_line })
    }
}

/// Whether two SLOs constrain the same figure (the command line's replaces the file's).
fn same_objective(a: &Slo, b: &Slo) -> bool {
    a.metric == b.metric && a.statistic == b.statistic
}

/// Where the requests go.
enum Target {
    External(String),
    Embedded(Box<ServerHandle>, PathBuf),
}

impl Target {
    async fn start(args: &RunArgs) -> anyhow::Result<Self> {
        if let Some(url) = &args.target {
            if args.engine != EngineArgs::default() || args.batching != BatchingArgs::default() {
                bail!(
                    "--batching, --max-batch-size, --max-wait, --max-num-seqs, --max-num-batched-tokens, \
                     --device, --dtype, --cuda-graphs, --gpu-memory-fraction, --kv-blocks and --kv-memory \
                     apply to the embedded server only; without --target, or pass them to `isobench serve`"
                );
            }
            return Ok(Target::External(url.clone()));
        }
        let folder = resolve_model_folder(&args.server_model)?;
        let mut config = ServerConfig::new(&folder);
        config.port = 0;
        config.batching = args.batching.to_config()?;
        args.engine.apply(&mut config);
        eprintln!(
            "no --target: starting the embedded server ({}, {} batching)",
            folder.display(),
            args.batching.batching
        );
        let server = Server::start(config)
            .await
            .with_context(|| format!("starting the embedded server for {}", folder.display()))?;
        Ok(Target::Embedded(Box::new(server), folder))
    }

    fn url(&self) -> String {
        match self {
            Target::External(url) => url.clone(),
            Target::Embedded(server, _) => server.url(),
        }
    }

    /// The embedded model's tokenizer, for exact prompt lengths.
    fn tokenizer(&self) -> Option<PathBuf> {
        match self {
            Target::External(_) => None,
            Target::Embedded(_, folder) => Some(folder.join("tokenizer.json")),
        }
    }

    async fn stop(self) {
        if let Target::Embedded(server, _) = self {
            server.shutdown().await;
        }
    }
}

/// Builds the HTTP backend and checks the endpoint before the run.
async fn connect(
    args: &RunArgs,
    workload: &Workload,
    target: &Target,
    tokenizer: Option<&Path>,
) -> anyhow::Result<(HttpBackend, String)> {
    let api_key_env = match target {
        Target::External(_) => args.api_key_env.clone(),
        Target::Embedded(..) => isobench_server::config::DEFAULT_API_KEY_ENV.to_owned(),
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
    config.continuous_usage = args.usage_per_event || matches!(target, Target::Embedded(..));
    config.sampling = SamplingParams {
        temperature: sampling.temperature.map(|t| t as f32),
        top_p: sampling.top_p.map(|p| p as f32),
        top_k: sampling.top_k.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
        seed: None,
        ignore_eos: workload.ignore_eos().then_some(true),
        ..SamplingParams::default()
    };
    if let Some(path) = tokenizer {
        config.token_counter = Some(Arc::new(TokenizerCounter::from_file(path)?));
    }

    let model = match (&args.model, target) {
        (Some(model), _) => model.clone(),
        (None, Target::Embedded(server, _)) => server.model_name().to_owned(),
        (None, Target::External(_)) => only_listed_model(HttpBackend::new(config.clone())?).await?,
    };
    config.model = model.clone();
    let backend = HttpBackend::new(config)?;
    backend.preflight().await?;
    Ok((backend, model))
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

async fn watch_ctrl_c(cancel: CancellationToken) {
    crate::ctrl_c().await;
    eprintln!(
        "\ninterrupted: no new requests; waiting for those in flight (Ctrl-C again to quit now)"
    );
    cancel.cancel();
    crate::ctrl_c().await;
    eprintln!("quitting without a report");
    std::process::exit(130);
}

fn default_output(workload: &Workload) -> PathBuf {
    let stamp = format_started_at(SystemTime::now())
        .replace([':', '-'], "")
        .replace('.', "-");
    PathBuf::from("results").join(format!("{}-{stamp}.json", workload.name()))
}

fn api_name(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Completions => "completions",
        ApiKind::Chat => "chat",
    }
}
