//! `isobench run WORKLOAD`: load the workload, pick the target (an external
//! endpoint, or the embedded server started in-process), replay the plan,
//! and write the report: terminal table, JSON, optional CSV, and the
//! per-request JSONL log that the engine streams while the run goes.
//! Everything the end of the run needs (output paths, flag values) is
//! checked before it starts ([`precheck`]).
//! The measuring itself ([`crate::measure`]) is shared with `sweep` and
//! `plan`: the endpoint's metrics are scraped into the report's time line
//! (and a GPU's into its `gpu` section), every measured request's samples
//! kept for comparisons and plots.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use isobench_metrics::Slo;
use isobench_report::{format_started_at, table};
use isobench_server::{BatchingArgs, EngineArgs};
use isobench_workload::{ArrivalKind, Overrides, Workload};
use tokio_util::sync::CancellationToken;

use crate::measure::{MeasureArgs, measure};
use crate::target::{Endpoint, EndpointArgs, Target, embedded_config};

pub mod precheck;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The workload file (TOML; see docs/workloads.md).
    workload: PathBuf,

    /// The endpoint, the client and the metrics scraped.
    #[command(flatten)]
    pub endpoint: EndpointArgs,

    /// The embedded server's batching (used without --target): --batching,
    /// --max-batch-size, --max-wait, --max-num-seqs, --max-num-batched-tokens.
    #[command(flatten)]
    pub batching: BatchingArgs,

    /// The embedded server's engine (used without --target): --device,
    /// --dtype, --cuda-graphs, --gpu-memory-fraction, --kv-blocks,
    /// --kv-memory, --max-model-len.
    #[command(flatten)]
    pub engine: EngineArgs,

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

    /// --max-error-rate, --drain-timeout, --quiet.
    #[command(flatten)]
    measure: MeasureArgs,
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

    let target = start_target(&args.endpoint, &args.batching, &args.engine).await?;
    let measured = match Endpoint::connect(&args.endpoint, &workload, &target).await {
        Ok(endpoint) => {
            let cancel = CancellationToken::new();
            let interrupt = tokio::spawn(watch_ctrl_c(cancel.clone()));
            let options = args
                .measure
                .options(&slos.all, Some(log.clone()), cancel, false);
            let measured = measure(
                &args.endpoint,
                &target,
                &endpoint,
                &workload,
                &args.workload,
                options,
            )
            .await;
            interrupt.abort();
            measured
        }
        Err(err) => Err(err),
    };
    target.stop().await;
    let measured = measured?;
    let report = measured.report;

    println!("{}", table::render(&report));
    report.write_json(&output)?;
    eprintln!("report: {}", output.display());
    eprintln!(
        "per-request log: {} ({} requests)",
        log.display(),
        measured.logged
    );
    if let Some(csv) = &args.csv {
        isobench_report::csv::append(&report, csv)?;
        eprintln!("csv row appended: {}", csv.display());
    }

    if measured.interrupted {
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

/// `--target`, or the embedded server of `batching` and `engine`; their
/// flags with `--target` are an error, as is a knob of another policy.
pub async fn start_target(
    endpoint: &EndpointArgs,
    batching: &BatchingArgs,
    engine: &EngineArgs,
) -> anyhow::Result<Target> {
    if endpoint.target.is_some()
        && (*engine != EngineArgs::default() || *batching != BatchingArgs::default())
    {
        bail!(
            "--batching, --max-batch-size, --max-wait, --max-num-seqs, --max-num-batched-tokens, \
             --device, --dtype, --cuda-graphs, --gpu-memory-fraction, --kv-blocks, --kv-memory and \
             --max-model-len apply to the embedded server only; without --target, or pass them to `isobench serve`"
        );
    }
    let batching = batching.to_config(engine.device())?;
    Target::start(endpoint, |folder| embedded_config(folder, batching, engine)).await
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

/// The SLOs of a run: the workload file's and the command line's. Goodput
/// counts requests meeting all of them; only the command line's decide the
/// exit code.
pub struct Slos {
    pub all: Vec<Slo>,
    pub command_line: Vec<Slo>,
}

impl Slos {
    pub fn collect(workload: &Workload, flags: &[String]) -> anyhow::Result<Self> {
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

pub async fn watch_ctrl_c(cancel: CancellationToken) {
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
