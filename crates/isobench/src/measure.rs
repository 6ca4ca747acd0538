//! One measured run, as `run`, each step of `sweep` and each trial of
//! `plan` make it: the workload's plan replayed through the endpoint while
//! its metrics are scraped ([`crate::observe`]), and the [`Report`] built
//! from the outcome: summary, validity, per-request samples, the server's
//! time line, the GPU section, and for a load step its steady-state window
//! and saturation verdict.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use isobench_loadgen::{LiveGauge, ProgressMode, RunOptions, RunOutcome};
use isobench_metrics::{Recorder, Slo, SteadyWindow, assess_validity_with_max_error_rate};
use isobench_report::{PromptTokenSource, Report, RunMeta, SteadyState, format_started_at};
use isobench_workload::{ApiKind, PromptTokens, Workload};
use tokio_util::sync::CancellationToken;

use crate::observe::Observer;
use crate::target::{Endpoint, EndpointArgs, Target};

/// The flags of how a run is measured, the same for `run`, each step of
/// `sweep` and each trial of `plan` (one definition, one set of defaults).
#[derive(clap::Args)]
pub struct MeasureArgs {
    /// The share of requests (failed / completed + failed) that may fail
    /// before a run (a sweep step, a plan trial) is invalid; `run` then
    /// exits with 3. A run where every request failed always is.
    #[arg(long, value_name = "SHARE", default_value = "0.05", value_parser = crate::run::precheck::error_rate)]
    pub max_error_rate: f64,

    /// How long requests in flight may finish after sending stops.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10s")]
    pub drain_timeout: Duration,

    /// No progress bar: plain progress lines only.
    #[arg(long, short)]
    pub quiet: bool,
}

impl MeasureArgs {
    /// The options of one measured run with these flags.
    pub fn options<'a>(
        &self,
        slos: &'a [Slo],
        log: Option<PathBuf>,
        cancel: CancellationToken,
        steady_state: bool,
    ) -> MeasureOptions<'a> {
        MeasureOptions {
            slos,
            max_error_rate: self.max_error_rate,
            progress: ProgressMode::detect(self.quiet),
            log,
            drain_timeout: self.drain_timeout,
            cancel,
            steady_state,
        }
    }
}

/// How to measure, besides the workload.
pub struct MeasureOptions<'a> {
    pub slos: &'a [Slo],
    pub max_error_rate: f64,
    pub progress: ProgressMode,
    /// The per-request JSONL log, when one is written.
    pub log: Option<PathBuf>,
    pub drain_timeout: Duration,
    pub cancel: CancellationToken,
    /// A load step: keep the records and add the steady-state section.
    pub steady_state: bool,
}

/// A measured run.
pub struct Measured {
    pub report: Report,
    pub interrupted: bool,
    /// Lines in the per-request log.
    pub logged: u64,
}

/// Replays `workload` (read from `workload_file`) against the connected
/// endpoint of `target`.
pub async fn measure(
    args: &EndpointArgs,
    target: &Target,
    endpoint: &Endpoint,
    workload: &Workload,
    workload_file: &Path,
    options: MeasureOptions<'_>,
) -> anyhow::Result<Measured> {
    let plan = workload.plan(endpoint.tokenizer.as_deref())?;
    let ramp_up = plan.shape.ramp_up;
    let queue = LiveGauge::default();
    let observer = Observer::start(args, &target.url(), &queue).await?;
    let started_at = SystemTime::now();
    let run_options = RunOptions {
        progress: options.progress,
        jsonl: options.log.clone(),
        drain_timeout: options.drain_timeout,
        cancel: options.cancel.clone(),
        recorder: Recorder::with_slos(options.slos),
        keep_records: options.steady_state,
        server_queue: observer.as_ref().map(|_| queue),
        ..RunOptions::default()
    };
    let outcome = isobench_loadgen::run(plan, Arc::clone(&endpoint.backend), run_options).await;
    let observed = match (observer, &outcome) {
        (Some(observer), Ok(outcome)) => {
            Some(observer.finish(outcome.started, outcome.window()).await)
        }
        _ => None,
    };
    let outcome = outcome?;

    let meta = RunMeta {
        workload: workload.name().to_owned(),
        workload_file: Some(workload_file.display().to_string()),
        target: target.url(),
        model: endpoint.model.clone(),
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
        server: target.description(),
    };
    let mut report = build_report(meta, &outcome, options.max_error_rate);
    if let Some(observed) = observed {
        if let Some(gpu) = observed.gpu {
            report = report.with_gpu(gpu);
        }
        report.server_metrics = observed.server;
    }
    if options.steady_state {
        report.steady_state = steady_state(&outcome, ramp_up, options.slos);
    }
    report.samples = Some(outcome.samples);
    Ok(Measured {
        report,
        interrupted: outcome.interrupted,
        logged: outcome.logged,
    })
}

fn build_report(meta: RunMeta, outcome: &RunOutcome, max_error_rate: f64) -> Report {
    let summary = outcome.recorder.summarize(outcome.window_duration());
    let validity =
        assess_validity_with_max_error_rate(&summary, outcome.offered_rate, max_error_rate);
    Report::new(meta, summary, validity)
}

/// The steady window's figures; `None` below two measured sends.
fn steady_state(outcome: &RunOutcome, ramp_up: Duration, slos: &[Slo]) -> Option<SteadyState> {
    let samples = &outcome.samples.0;
    let window = SteadyWindow::of(samples, ramp_up)?;
    Some(SteadyState {
        start_s: window.start_ns as f64 / 1e9,
        end_s: window.end_ns as f64 / 1e9,
        summary: window.summarize(&outcome.records, &Recorder::with_slos(slos)),
        saturation: window.saturation(samples),
    })
}

pub fn api_name(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Completions => "completions",
        ApiKind::Chat => "chat",
    }
}
