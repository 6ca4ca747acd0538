//! `isobench sweep WORKLOAD`: one measured step per load level, each for
//! `--step-duration`, each judged from its steady-state window (ramp-up and
//! the drain of stragglers excluded; the window is in each step's report),
//! ending in a table and a throughput-against-latency curve
//! (`sweep.html` in the output folder, with the curve alone as
//! `curve.svg`, beside one report per step).
//!
//! Levels: `--rates 1,2,4,8` (open loop), `--concurrency 1,4,16` (closed
//! loop), or `--auto`: a closed loop of 1 gives the synchronous rate and a
//! closed loop of `--max-concurrency` the saturation throughput; then
//! `--steps` open-loop rates spread evenly between them run in increasing
//! order, stopping early at the first step where the endpoint is clearly
//! saturated (completions fall behind sends, or queueing grows without
//! bound in the window; `isobench_metrics::SteadyWindow::saturation`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use isobench_report::{NamedReport, StepKind, figures, format_started_at, html, tables};
use isobench_server::{BatchingArgs, EngineArgs};
use isobench_workload::Workload;
use tokio_util::sync::CancellationToken;

use crate::measure::MeasureArgs;
use crate::run::{Slos, precheck, start_target, watch_ctrl_c};
use crate::step::{Level, Step, Stepper};
use crate::target::{Endpoint, EndpointArgs};

#[derive(clap::Args)]
pub struct SweepArgs {
    /// The workload file (TOML; see docs/workloads.md).
    workload: PathBuf,

    #[command(flatten)]
    endpoint: EndpointArgs,

    /// The embedded server's batching (used without --target): --batching,
    /// --max-batch-size, --max-wait, --max-num-seqs, --max-num-batched-tokens.
    #[command(flatten)]
    batching: BatchingArgs,

    #[command(flatten)]
    engine: EngineArgs,

    /// Open-loop rates, requests/s, one step each: `1,2,4,8`.
    #[arg(long, value_name = "LIST", value_delimiter = ',', conflicts_with_all = ["concurrency", "auto"], required_unless_present_any = ["concurrency", "auto"])]
    rates: Vec<f64>,

    /// Closed-loop concurrencies, one step each: `1,4,16,64`.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "auto"
    )]
    concurrency: Vec<usize>,

    /// Find the levels: the synchronous rate and the saturation throughput
    /// first, then --steps rates between them, stopping once saturated.
    #[arg(long)]
    auto: bool,

    /// --auto: open-loop steps between the synchronous and saturation rates.
    #[arg(long, value_name = "N", default_value_t = 5)]
    steps: u32,

    /// --auto: the closed loop's concurrency that finds the saturation throughput.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_concurrency: usize,

    /// How long each step sends.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = precheck::positive_duration)]
    step_duration: Duration,

    /// Warm-up requests at the start of each step. Default: the workload's.
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,

    /// Seed of prompts, lengths and arrival times. Default: the workload's.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,

    /// SLOs for goodput, e.g. `ttft_p99=500ms,tpot_p99=50ms` (with the workload's).
    #[arg(long, value_name = "LIST")]
    slo: Vec<String>,

    /// Folder for the steps' reports and sweep.html. Default: results/sweep-WORKLOAD-TIMESTAMP.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,

    /// --max-error-rate, --drain-timeout, --quiet.
    #[command(flatten)]
    measure: MeasureArgs,
}

pub async fn sweep(args: SweepArgs) -> anyhow::Result<ExitCode> {
    if args.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        bail!("--rates: every rate must be a number of requests/s > 0, e.g. 1,2,4,8");
    }
    if args.concurrency.contains(&0) || args.max_concurrency == 0 {
        bail!("--concurrency and --max-concurrency: every concurrency must be >= 1");
    }
    if args.auto && args.steps == 0 {
        bail!("--steps: must be >= 1");
    }
    let workload = Workload::from_file(&args.workload)?;
    let slos = Slos::collect(&workload, &args.slo)?;
    let dir = args
        .output_dir
        .clone()
        .unwrap_or_else(|| default_dir("sweep", workload.name()));
    precheck::writable("--output-dir", &dir.join("sweep.html"))?;
    let series = dir.file_name().map_or_else(
        || workload.name().to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );

    let target = start_target(&args.endpoint, &args.batching, &args.engine).await?;
    let result = match Endpoint::connect(&args.endpoint, &workload, &target).await {
        Ok(endpoint) => {
            let cancel = CancellationToken::new();
            let interrupt = tokio::spawn(watch_ctrl_c(cancel.clone()));
            let stepper = Stepper {
                args: &args.endpoint,
                target: &target,
                endpoint: &endpoint,
                workload: &workload,
                workload_file: &args.workload,
                slos: &slos.all,
                measure: &args.measure,
                cancel,
                dir: dir.clone(),
                kind: StepKind::Sweep,
                series,
                duration: args.step_duration,
                warmup: args.warmup,
            };
            let steps = run_steps(&args, &stepper).await;
            interrupt.abort();
            steps
        }
        Err(err) => Err(err),
    };
    target.stop().await;
    let (steps, interrupted) = result?;

    let named: Vec<NamedReport> = steps
        .into_iter()
        .map(|step| NamedReport {
            name: crate::compare::name(&step.path),
            report: step.report,
        })
        .collect();
    let refs: Vec<&NamedReport> = named.iter().collect();
    print!("{}", tables::sweep(&refs).text());
    let page = dir.join("sweep.html");
    std::fs::write(&page, html::page(&named))
        .with_context(|| format!("cannot write {}", page.display()))?;
    if let Some(curve) = figures::figures(&named)
        .into_iter()
        .find(|f| f.id == "sweep")
    {
        let path = dir.join("curve.svg");
        std::fs::write(&path, curve.svg)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    eprintln!(
        "steps: {}/step-*.json; table and curve: {} (the curve alone: curve.svg)",
        dir.display(),
        page.display()
    );
    Ok(if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs the steps the flags ask for; returns them and whether Ctrl-C cut the sweep.
async fn run_steps(args: &SweepArgs, stepper: &Stepper<'_>) -> anyhow::Result<(Vec<Step>, bool)> {
    let mut steps: Vec<Step> = Vec::new();
    let mut levels: Vec<Level> = if args.auto {
        vec![
            Level::Concurrency(1),
            Level::Concurrency(args.max_concurrency),
        ]
    } else if args.concurrency.is_empty() {
        args.rates.iter().map(|&r| Level::Rate(r)).collect()
    } else {
        args.concurrency
            .iter()
            .map(|&c| Level::Concurrency(c))
            .collect()
    };
    let mut next = 0;
    while next < levels.len() {
        let index = steps.len() as u32;
        let step = stepper
            .run(index, &format!("step-{index:02}"), levels[next], args.seed)
            .await?;
        let interrupted = step.interrupted;
        let saturated = step
            .report
            .steady_state
            .as_ref()
            .is_some_and(|s| s.saturation.saturated);
        steps.push(step);
        if interrupted {
            return Ok((steps, true));
        }
        next += 1;
        if args.auto && next == 2 {
            levels.extend(auto_rates(&steps[0], &steps[1], args.steps));
        } else if args.auto && next > 2 && saturated {
            eprintln!(
                "saturated at {}: stopping the sweep",
                levels[next - 1].describe()
            );
            break;
        }
    }
    Ok((steps, false))
}

/// `--auto`'s rates: `count` rates evenly between the synchronous
/// throughput (closed loop of 1) and the saturation throughput, the last
/// one at saturation.
fn auto_rates(synchronous: &Step, saturation: &Step, count: u32) -> Vec<Level> {
    let rate = |step: &Step| tables::step_summary(&step.report).throughput.requests_per_s;
    let (low, high) = (rate(synchronous), rate(saturation));
    eprintln!("synchronous rate {low:.3} req/s, saturation throughput {high:.3} req/s");
    if !(low > 0.0 && high > low) {
        eprintln!(
            "the saturation throughput is not above the synchronous rate: no rate steps between them"
        );
        return Vec::new();
    }
    (1..=count)
        .map(|i| Level::Rate(low + (high - low) * f64::from(i) / f64::from(count)))
        .collect()
}

/// `results/KIND-WORKLOAD-TIMESTAMP`.
pub fn default_dir(kind: &str, workload: &str) -> PathBuf {
    let stamp = format_started_at(SystemTime::now())
        .replace([':', '-'], "")
        .replace('.', "-");
    PathBuf::from("results").join(format!("{kind}-{workload}-{stamp}"))
}
