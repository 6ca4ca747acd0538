//! One load step of `sweep` or one trial of `plan`: the workload at one
//! load level (an offered rate, or a closed-loop concurrency) for a fixed
//! duration, measured with its steady-state window ([`crate::measure`]),
//! written as `NAME.json` (a full report, with its `step` section) and
//! `NAME.requests.jsonl` in the series' folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use isobench_metrics::Slo;
use isobench_report::{Report, StepKind, StepMeta};
use isobench_workload::{ArrivalKind, Overrides, Workload};
use tokio_util::sync::CancellationToken;

use crate::measure::{MeasureArgs, measure};
use crate::target::{Endpoint, EndpointArgs, Target};

/// The load of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    /// Open loop at this many requests/s (the workload's arrival process
    /// when it is rate-driven, else Poisson).
    Rate(f64),
    /// Closed loop with this many requests in flight.
    Concurrency(usize),
}

impl Level {
    /// `4 req/s`, `concurrency 16`.
    pub fn describe(&self) -> String {
        match self {
            Level::Rate(rate) => format!("{} req/s", short(*rate)),
            Level::Concurrency(c) => format!("concurrency {c}"),
        }
    }
}

/// A rate with no more digits than it needs.
pub fn short(rate: f64) -> String {
    let text = format!("{rate:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// What every step of a series shares.
pub struct Stepper<'a> {
    pub args: &'a EndpointArgs,
    pub target: &'a Target,
    pub endpoint: &'a Endpoint,
    pub workload: &'a Workload,
    pub workload_file: &'a Path,
    pub slos: &'a [Slo],
    pub measure: &'a MeasureArgs,
    pub cancel: CancellationToken,
    /// Where the steps' files go.
    pub dir: PathBuf,
    pub kind: StepKind,
    /// The series name every step's report carries.
    pub series: String,
    pub duration: Duration,
    pub warmup: Option<u64>,
}

/// A step measured and written.
pub struct Step {
    pub report: Report,
    pub path: PathBuf,
    pub interrupted: bool,
}

impl Stepper<'_> {
    /// Measures `level` as step `index` (file `name`), with `seed` when
    /// given (else the workload's).
    pub async fn run(
        &self,
        index: u32,
        name: &str,
        level: Level,
        seed: Option<u64>,
    ) -> anyhow::Result<Step> {
        let mut workload = self.workload.clone();
        let mut overrides = Overrides {
            duration: Some(self.duration),
            warmup: self.warmup,
            seed,
            ..Overrides::default()
        };
        match level {
            Level::Rate(rate) => overrides.rate = Some(rate),
            Level::Concurrency(c) => {
                overrides.arrival = Some(ArrivalKind::Closed);
                overrides.concurrency = Some(c);
            }
        }
        workload.apply(&overrides)?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create the folder {}", self.dir.display()))?;
        let path = self.dir.join(format!("{name}.json"));
        eprintln!(
            "{} {index}: {} for {}",
            self.kind_name(),
            level.describe(),
            humantime::format_duration(self.duration)
        );
        let options = self.measure.options(
            self.slos,
            Some(path.with_extension("requests.jsonl")),
            self.cancel.clone(),
            true,
        );
        let measured = measure(
            self.args,
            self.target,
            self.endpoint,
            &workload,
            self.workload_file,
            options,
        )
        .await?;
        let mut report = measured.report;
        report.step = Some(StepMeta {
            kind: self.kind,
            series: self.series.clone(),
            index,
            rate: match level {
                Level::Rate(rate) => Some(rate),
                Level::Concurrency(_) => None,
            },
            concurrency: match level {
                Level::Rate(_) => None,
                Level::Concurrency(c) => Some(c as u64),
            },
        });
        report.write_json(&path)?;
        Ok(Step {
            report,
            path,
            interrupted: measured.interrupted,
        })
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            StepKind::Sweep => "step",
            StepKind::Plan => "trial",
        }
    }
}
