//! `isobench plan WORKLOAD --slo ttft_p99=500ms,tpot_p99=50ms --target-rps 200`:
//! the highest request rate one replica sustains while meeting every SLO,
//! and the replicas the target rate needs.
//!
//! Each trial is an open-loop step of `--step-duration` at one rate
//! ([`crate::step`]); it passes when, in its steady-state window, every
//! SLO is met, the endpoint kept up (not saturated), and the run is valid
//! (the client kept its schedule, errors within `--max-error-rate`). The
//! search ([`search`]) brackets, bisects and repeats trials at the
//! bracket's lower end. Against the embedded server, `--batching`,
//! `--max-batch-size` and `--kv-blocks` take lists: one embedded server
//! per combination, each searched the same way, and the plan names the
//! configuration with the most SLO-meeting throughput per replica.
//!
//! Written to the output folder: `plan.json` (`isobench_report::PlanResult`),
//! one report per trial, and `plan.html` (tables and curves of the trials).

mod search;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use isobench_report::{
    ConfigurationPlan, NamedReport, PLAN_KIND, PlanResult, Report, SCHEMA_VERSION, StepKind,
    TOOL_VERSION, TrialRecord, html, tables::Table,
};
use isobench_server::{BatchingArgs, BatchingKind, EngineArgs};
use isobench_workload::Workload;
use tokio_util::sync::CancellationToken;

use crate::measure::MeasureArgs;
use crate::run::{Slos, precheck, watch_ctrl_c};
use crate::step::{Level, Stepper, short};
use crate::sweep::default_dir;
use crate::target::{Endpoint, EndpointArgs, Target, embedded_config};
use search::{SearchSettings, search};

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The workload file (TOML; see docs/workloads.md).
    workload: PathBuf,

    #[command(flatten)]
    endpoint: EndpointArgs,

    /// The SLOs every trial must meet, e.g. `ttft_p99=500ms,tpot_p99=50ms`
    /// (they replace the workload's on the same figure).
    #[arg(long, value_name = "LIST")]
    slo: Vec<String>,

    /// The request rate to plan replicas for, requests/s.
    #[arg(long, value_name = "R")]
    target_rps: Option<f64>,

    /// The share of each replica's capacity kept free.
    #[arg(long, value_name = "SHARE", default_value_t = 0.2)]
    headroom: f64,

    /// Trials at the capacity rate found, each with its own seed; all must pass.
    #[arg(long, value_name = "N", default_value_t = 3)]
    trials: u32,

    /// How long each trial sends.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = precheck::positive_duration)]
    step_duration: Duration,

    /// The first rate tried, requests/s. Default: the workload's rate, else 1.
    #[arg(long, value_name = "R")]
    start_rate: Option<f64>,

    /// Stop bisecting once the bracket's upper end is within this share of its lower end.
    #[arg(long, value_name = "SHARE", default_value_t = 0.1)]
    tolerance: f64,

    /// The most trials per configuration.
    #[arg(long, value_name = "N", default_value_t = 30)]
    max_trials: u32,

    /// Warm-up requests at the start of each trial. Default: the workload's.
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,

    /// The first trial's seed (each trial takes the next). Default: the workload's.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,

    /// Embedded server: batching policies to compare, e.g. `static,dynamic,continuous`.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_enum)]
    batching: Vec<BatchingKind>,

    /// Embedded server: batch limits to compare (static and dynamic: max
    /// batch size; continuous: max sequences running), e.g. `8,16,32`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    max_batch_size: Vec<u32>,

    /// Embedded server: KV pool sizes in blocks to compare, e.g. `256,1024`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    kv_blocks: Vec<u32>,

    /// Embedded server: the device (cpu, cuda, cuda:N).
    #[arg(long, env = "ISOBENCH_DEVICE", value_name = "DEVICE")]
    device: Option<String>,

    /// Folder for plan.json, plan.html and the trials' reports. Default: results/plan-WORKLOAD-TIMESTAMP.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,

    /// --max-error-rate (an invalid trial fails), --drain-timeout, --quiet.
    #[command(flatten)]
    measure: MeasureArgs,
}

/// One embedded-server configuration to search (all `None`: the defaults,
/// or the external target).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Configuration {
    batching: BatchingKind,
    max_batch: Option<u32>,
    kv_blocks: Option<u32>,
}

impl Configuration {
    fn name(&self, external: bool) -> String {
        if external {
            return "external".to_owned();
        }
        let mut name = self.batching.to_string();
        if let Some(n) = self.max_batch {
            name.push_str(&format!(", max batch {n}"));
        }
        if let Some(n) = self.kv_blocks {
            name.push_str(&format!(", {n} KV blocks"));
        }
        name
    }

    /// The server's batching flags for this configuration: the batch
    /// limit is `--max-batch-size` for static and dynamic batching,
    /// `--max-num-seqs` for continuous; every other knob its default.
    fn batching(&self) -> BatchingArgs {
        let mut args = BatchingArgs {
            batching: self.batching,
            ..BatchingArgs::default()
        };
        match self.batching {
            BatchingKind::Continuous => args.max_num_seqs = self.max_batch,
            BatchingKind::Static | BatchingKind::Dynamic => args.max_batch_size = self.max_batch,
        }
        args
    }

    /// A folder name: `continuous-b16-kv256`.
    fn slug(&self, external: bool) -> String {
        if external {
            return "external".to_owned();
        }
        let mut slug = self.batching.to_string();
        if let Some(n) = self.max_batch {
            slug.push_str(&format!("-b{n}"));
        }
        if let Some(n) = self.kv_blocks {
            slug.push_str(&format!("-kv{n}"));
        }
        slug
    }
}

fn check(args: &PlanArgs) -> anyhow::Result<()> {
    let external = args.endpoint.target.is_some();
    if external
        && (!args.batching.is_empty()
            || !args.max_batch_size.is_empty()
            || !args.kv_blocks.is_empty()
            || args.device.is_some())
    {
        bail!(
            "--batching, --max-batch-size, --kv-blocks and --device vary the embedded server: leave out --target to use them"
        );
    }
    if !(0.0..1.0).contains(&args.headroom) {
        bail!(
            "--headroom {}: expected a share in [0, 1), e.g. 0.2 to keep 20% of each replica free",
            args.headroom
        );
    }
    if args.target_rps.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--target-rps: expected a rate in requests/s > 0");
    }
    if args.start_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--start-rate: expected a rate in requests/s > 0");
    }
    if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
        bail!(
            "--tolerance {}: expected a share in (0, 1), e.g. 0.1",
            args.tolerance
        );
    }
    if args.trials == 0 || args.max_trials < 2 {
        bail!("--trials must be >= 1 and --max-trials >= 2");
    }
    if args.max_batch_size.contains(&0) || args.kv_blocks.contains(&0) {
        bail!("--max-batch-size and --kv-blocks: every value must be >= 1");
    }
    Ok(())
}

pub async fn plan(args: PlanArgs) -> anyhow::Result<ExitCode> {
    check(&args)?;
    let workload = Workload::from_file(&args.workload)?;
    let slos = Slos::collect(&workload, &args.slo)?;
    if slos.all.is_empty() {
        bail!(
            "plan needs SLOs: pass --slo ttft_p99=500ms,tpot_p99=50ms (or give the workload an [slo] table)"
        );
    }
    let dir = args
        .output_dir
        .clone()
        .unwrap_or_else(|| default_dir("plan", workload.name()));
    precheck::writable("--output-dir", &dir.join("plan.json"))?;
    let external = args.endpoint.target.is_some();
    let configurations = configurations(&args);
    let cancel = CancellationToken::new();
    let interrupt = tokio::spawn(watch_ctrl_c(cancel.clone()));
    let mut planned = Vec::new();
    let mut reports = Vec::new();
    for configuration in &configurations {
        let (plan, mut trials) = plan_one(
            &args,
            &workload,
            &slos,
            &dir,
            *configuration,
            external,
            &cancel,
        )
        .await?;
        planned.push(plan);
        reports.append(&mut trials);
        if cancel.is_cancelled() {
            break;
        }
    }
    interrupt.abort();
    let best = planned
        .iter()
        .filter(|p| p.capacity_rps.is_some())
        .max_by(|a, b| {
            a.goodput_rps
                .unwrap_or(0.0)
                .total_cmp(&b.goodput_rps.unwrap_or(0.0))
        })
        .map(|p| p.name.clone());
    let result = PlanResult {
        kind: PLAN_KIND.to_owned(),
        schema_version: SCHEMA_VERSION,
        tool_version: TOOL_VERSION.to_owned(),
        workload: workload.name().to_owned(),
        target: args
            .endpoint
            .target
            .clone()
            .unwrap_or_else(|| "embedded".to_owned()),
        slos: slos.all.iter().map(ToString::to_string).collect(),
        target_rps: args.target_rps,
        headroom: args.headroom,
        trials_at_capacity: args.trials,
        tolerance: args.tolerance,
        trial_duration_s: args.step_duration.as_secs_f64(),
        configurations: planned,
        best,
    };
    print!("{}", render(&result));
    let json = serde_json::to_string_pretty(&result).context("plan.json")? + "\n";
    std::fs::write(dir.join("plan.json"), json)
        .with_context(|| format!("cannot write {}", dir.join("plan.json").display()))?;
    std::fs::write(dir.join("plan.html"), html::page(&reports))
        .with_context(|| format!("cannot write {}", dir.join("plan.html").display()))?;
    eprintln!(
        "plan: {} (trials beside it, curves in plan.html)",
        dir.join("plan.json").display()
    );
    Ok(if cancel.is_cancelled() {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

fn configurations(args: &PlanArgs) -> Vec<Configuration> {
    let batching = if args.batching.is_empty() {
        vec![BatchingKind::Continuous]
    } else {
        args.batching.clone()
    };
    let or_default = |values: &[u32]| -> Vec<Option<u32>> {
        if values.is_empty() {
            vec![None]
        } else {
            values.iter().copied().map(Some).collect()
        }
    };
    let mut all = Vec::new();
    for &batching in &batching {
        for &max_batch in &or_default(&args.max_batch_size) {
            for &kv_blocks in &or_default(&args.kv_blocks) {
                all.push(Configuration {
                    batching,
                    max_batch,
                    kv_blocks,
                });
            }
        }
    }
    all
}

/// Searches one configuration: starts its server (embedded), runs the
/// search, stops it; returns the plan and the trials' reports.
async fn plan_one(
    args: &PlanArgs,
    workload: &Workload,
    slos: &Slos,
    dir: &Path,
    configuration: Configuration,
    external: bool,
    cancel: &CancellationToken,
) -> anyhow::Result<(ConfigurationPlan, Vec<NamedReport>)> {
    let name = configuration.name(external);
    let slug = configuration.slug(external);
    eprintln!("searching {name}");
    let target = if external {
        Target::start(&args.endpoint, |_| {
            unreachable!("an external target starts no server")
        })
        .await?
    } else {
        let folder = crate::default_model::resolve_model_folder(&args.endpoint.server_model)?;
        let engine = EngineArgs {
            device: args.device.clone(),
            kv_blocks: configuration.kv_blocks,
            ..EngineArgs::default()
        };
        let config = embedded_config(
            &folder,
            configuration.batching().to_config(engine.device())?,
            &engine,
        );
        Target::embedded(config, folder).await?
    };
    let searched = match Endpoint::connect(&args.endpoint, workload, &target).await {
        Ok(endpoint) => {
            let stepper = Stepper {
                args: &args.endpoint,
                target: &target,
                endpoint: &endpoint,
                workload,
                workload_file: &args.workload,
                slos: &slos.all,
                measure: &args.measure,
                cancel: cancel.clone(),
                dir: dir.join(&slug),
                kind: StepKind::Plan,
                series: name.clone(),
                duration: args.step_duration,
                warmup: args.warmup,
            };
            run_search(args, workload, &stepper, &slug).await
        }
        Err(err) => Err(err),
    };
    let server = target.description();
    target.stop().await;
    let (result, trials, reports) = searched?;
    let goodput_at = |rate: f64| {
        let values: Vec<f64> = trials
            .iter()
            .filter(|t| t.rate == rate)
            .filter_map(|t| t.goodput_rps)
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let plan = ConfigurationPlan {
        name,
        server,
        capacity_rps: result.lower,
        upper_rps: result.upper,
        goodput_rps: result.lower.and_then(goodput_at),
        replicas: args
            .target_rps
            .zip(result.lower)
            .and_then(|(target, capacity)| {
                ConfigurationPlan::replicas_for(target, capacity, args.headroom)
            }),
        converged: result.converged,
        trials,
    };
    Ok((plan, reports))
}

type Searched = (search::SearchResult, Vec<TrialRecord>, Vec<NamedReport>);

async fn run_search(
    args: &PlanArgs,
    workload: &Workload,
    stepper: &Stepper<'_>,
    slug: &str,
) -> anyhow::Result<Searched> {
    let settings = SearchSettings {
        start_rate: args.start_rate.or(workload_rate(workload)).unwrap_or(1.0),
        tolerance: args.tolerance,
        trials: args.trials,
        max_trials: args.max_trials,
        seed: args.seed.unwrap_or(workload.seed()),
    };
    let records: RefCell<Vec<TrialRecord>> = RefCell::new(Vec::new());
    let reports: RefCell<Vec<NamedReport>> = RefCell::new(Vec::new());
    let result = search(settings, |rate, seed| {
        let (records, reports) = (&records, &reports);
        async move {
            let mut attempt = 0;
            loop {
                if stepper.cancel.is_cancelled() {
                    bail!("interrupted");
                }
                let index = records.borrow().len() as u32;
                let name = format!("trial-{index:02}");
                let step = stepper
                    .run(index, &name, Level::Rate(rate), Some(seed))
                    .await?;
                let (passed, reasons) = judge(&step.report);
                let inconclusive =
                    client_fell_behind(&step.report) && attempt < CLIENT_BEHIND_RERUNS;
                let summary = isobench_report::tables::step_summary(&step.report);
                eprintln!(
                    "  {} req/s: {}{}{}",
                    short(rate),
                    if passed { "met every SLO" } else { "failed: " },
                    reasons.join("; "),
                    if inconclusive {
                        " (the client fell behind: inconclusive, run again)"
                    } else {
                        ""
                    }
                );
                records.borrow_mut().push(TrialRecord {
                    rate,
                    seed,
                    passed,
                    inconclusive,
                    reasons,
                    report: format!("{slug}/{name}.json"),
                    throughput_rps: summary.throughput.requests_per_s,
                    goodput_rps: summary.throughput.goodput_requests_per_s,
                });
                reports.borrow_mut().push(NamedReport {
                    name: format!("{slug}/{name}"),
                    report: step.report,
                });
                if !inconclusive {
                    return Ok(passed);
                }
                attempt += 1;
            }
        }
    })
    .await;
    let result = match result {
        Ok(result) => result,
        Err(_) if stepper.cancel.is_cancelled() => search::SearchResult {
            lower: None,
            upper: None,
            converged: false,
            trials: Vec::new(),
        },
        Err(err) => return Err(err),
    };
    Ok((result, records.into_inner(), reports.into_inner()))
}

/// The workload's own rate, when its arrival process has one.
fn workload_rate(workload: &Workload) -> Option<f64> {
    workload.plan(None).ok()?.shape.offered_rate
}

/// Times a trial is run again when the client fell behind its own
/// schedule: such a trial says nothing about the endpoint (a busy client
/// machine, a scheduling hiccup of a few requests), and counting it as a
/// failure would walk the search down to rates the endpoint sustains
/// easily. After the last rerun it counts as failed: a plan never claims
/// a rate its client could not drive.
const CLIENT_BEHIND_RERUNS: u32 = 2;

/// Whether the run is invalid for the client's part, not the endpoint's:
/// it fell behind its schedule (dispatch lag, send rate), without too
/// many failed requests.
fn client_fell_behind(report: &Report) -> bool {
    !report.validity.valid && !report.validity.too_many_errors
}

/// Whether a trial passed, and why not: every SLO met in the steady
/// window, the endpoint not saturated, the run valid.
fn judge(report: &Report) -> (bool, Vec<String>) {
    let Some(steady) = &report.steady_state else {
        return (
            false,
            vec!["too few requests for a steady window".to_owned()],
        );
    };
    let mut reasons = Vec::new();
    for slo in steady.summary.slos.iter().filter(|s| !s.passed) {
        reasons.push(match slo.measured_ms {
            Some(ms) => format!("{} missed ({ms:.1} ms)", slo.slo),
            None => format!("{} missed (no samples)", slo.slo),
        });
    }
    reasons.extend(steady.saturation.reasons.iter().cloned());
    reasons.extend(
        report
            .validity
            .reasons
            .iter()
            .map(|r| format!("invalid run: {r}")),
    );
    (reasons.is_empty(), reasons)
}

fn render(result: &PlanResult) -> String {
    let mut table = Table {
        headers: [
            "configuration",
            "capacity req/s",
            "bracket",
            "goodput req/s",
            "replicas",
            "trials",
            "converged",
        ]
        .map(str::to_owned)
        .to_vec(),
        rows: Vec::new(),
    };
    for c in &result.configurations {
        let rate = |r: Option<f64>| r.map_or("-".to_owned(), short);
        table.rows.push(vec![
            c.name.clone(),
            rate(c.capacity_rps),
            format!("{} - {}", rate(c.capacity_rps), rate(c.upper_rps)),
            c.goodput_rps.map_or("-".to_owned(), |g| format!("{g:.2}")),
            c.replicas.map_or("-".to_owned(), |r| r.to_string()),
            c.trials.len().to_string(),
            if c.converged { "yes" } else { "no" }.to_owned(),
        ]);
    }
    let mut out = format!(
        "SLOs {} · trials of {} s · {} at the capacity rate · headroom {:.0}%\n\n",
        result.slos.join(", "),
        result.trial_duration_s,
        result.trials_at_capacity,
        result.headroom * 100.0
    );
    out.push_str(&table.text());
    if let Some(best) = &result.best {
        out.push_str(&format!(
            "\nmost SLO-meeting throughput per replica: {best}\n"
        ));
    }
    if let (Some(target), Some(best)) = (
        result.target_rps,
        result
            .configurations
            .iter()
            .find(|c| Some(&c.name) == result.best.as_ref()),
    ) && let Some(replicas) = best.replicas
    {
        out.push_str(&format!(
            "{target} req/s needs {replicas} replicas of it at {:.0}% of its capacity ({} req/s each)\n",
            (1.0 - result.headroom) * 100.0,
            short(best.capacity_rps.unwrap_or(0.0) * (1.0 - result.headroom))
        ));
    }
    out
}
